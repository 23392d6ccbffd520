#include "braid/amp/grad_scaler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "braid/core/error.h"
#include "comm_test_util.h"

namespace braid::amp {
namespace {

using ::testing::HasSubstr;

// An optimizer that records what it saw: the scaler must step it exactly when no rank found
// a non-finite gradient, after the gradients were divided by the scale.
class RecordingOptimizer : public ScaledOptimizer {
 public:
  explicit RecordingOptimizer(std::vector<Tensor> grads) : grads_(std::move(grads)) {}
  std::vector<Tensor> scaled_gradients() override { return grads_; }
  void step() override {
    ++steps;
    seen.clear();
    for (const Tensor& g : grads_)
      seen.push_back(g.defined() ? g.to_vector() : std::vector<double>{});
  }
  void set(size_t i, std::vector<double> v, DType d = DType::kF32) {
    grads_[i] = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, d);
  }
  int steps = 0;
  std::vector<std::vector<double>> seen;

 private:
  std::vector<Tensor> grads_;
};

TEST(GradScaler, SeedDefaults) {
  GradScaler s;
  EXPECT_TRUE(s.is_enabled());
  EXPECT_EQ(s.get_scale(), 65536.0);
  const GradScalerState st = s.state_dict();
  EXPECT_EQ(st.growth_factor, 2.0);
  EXPECT_EQ(st.backoff_factor, 0.5);
  EXPECT_EQ(st.growth_interval, 2000);
  EXPECT_EQ(st.growth_tracker, 0);
}

TEST(GradScaler, GrowsBacksOffAndSkipsLikeTorch) {
  GradScaler s(
      {.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
  RecordingOptimizer opt({Tensor(), Tensor()});
  // {grad 0, grad 1, expect skipped, scale after update, tracker after update}
  struct Step {
    double g0, g1;
    bool skipped;
    double scale_after;
    int64_t tracker_after;
  };
  const double inf = INFINITY, nan = NAN;
  const std::vector<Step> steps = {
      {1, 2, false, 1024, 1},  {3, 4, false, 1024, 2}, {5, 6, false, 2048, 0},
      {inf, 1, true, 1024, 0}, {1, nan, true, 512, 0}, {1, 1, false, 512, 1},
      {-inf, 1, true, 256, 0}, {2, 2, false, 256, 1},  {2, 2, false, 256, 2},
      {2, 2, false, 512, 0},
  };
  int expected_steps = 0;
  for (const Step& st : steps) {
    const double scale = s.get_scale();
    opt.set(0, {st.g0 * scale, 0.5 * scale});
    opt.set(1, {st.g1 * scale}, DType::kBF16);
    const bool stepped = s.step(opt);
    EXPECT_EQ(stepped, !st.skipped);
    EXPECT_EQ(s.step_was_skipped(opt), st.skipped);
    if (!st.skipped) {
      ++expected_steps;
      // The optimizer saw the unscaled gradients.
      EXPECT_EQ(opt.seen[0], (std::vector<double>{st.g0, 0.5}));
      EXPECT_EQ(opt.seen[1], (std::vector<double>{st.g1}));
    }
    s.update();
    EXPECT_EQ(s.get_scale(), st.scale_after);
    EXPECT_EQ(s.growth_tracker(), st.tracker_after);
  }
  EXPECT_EQ(opt.steps, expected_steps);
}

TEST(GradScaler, UnscaleBeforeStepIsNotRepeated) {
  GradScaler s({.init_scale = 8});
  RecordingOptimizer opt({Tensor::from_vector({16.0, -8.0}, {2})});
  EXPECT_FALSE(s.unscale_(opt));
  EXPECT_EQ(opt.scaled_gradients()[0].to_vector(), (std::vector<double>{2.0, -1.0}));
  try {
    s.unscale_(opt);
    FAIL() << "second unscale_ accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("already called"));
  }
  EXPECT_TRUE(s.step(opt));  // does not unscale again
  EXPECT_EQ(opt.seen[0], (std::vector<double>{2.0, -1.0}));
  EXPECT_THROW(s.step(opt), Error);
  s.update();
  EXPECT_THROW(s.update(), Error);  // nothing recorded since
  s.update(4.0);                    // an explicit scale is always accepted
  EXPECT_EQ(s.get_scale(), 4.0);
}

TEST(GradScaler, GrowthStopsAtTheLargestFiniteScale) {
  GradScaler s({.init_scale = FLT_MAX, .growth_interval = 1});
  RecordingOptimizer opt({Tensor::from_vector({1.0}, {1})});
  s.step(opt);
  s.update();
  EXPECT_EQ(s.get_scale(), static_cast<double>(FLT_MAX));  // FLT_MAX * 2 is Inf: kept
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, DisabledScalerAndBf16AreNoOps) {
  for (GradScaler s :
       {GradScaler({.enabled = false}), GradScaler::for_precision(PrecisionType::kBf16),
        GradScaler::for_precision(PrecisionType::kNo)}) {
    EXPECT_FALSE(s.is_enabled());
    EXPECT_EQ(s.get_scale(), 1.0);
    Tensor loss = Tensor::from_vector({3.0}, {1}, DType::kBF16);
    EXPECT_TRUE(s.scale(loss).shares_storage(loss));
    RecordingOptimizer opt({Tensor::from_vector({INFINITY}, {1})});
    EXPECT_FALSE(s.unscale_(opt));
    EXPECT_TRUE(s.step(opt));  // steps even on Inf: nothing checks when disabled
    EXPECT_EQ(opt.steps, 1);
    EXPECT_NO_THROW(s.update());
    EXPECT_EQ(s.state_json(), "{}");
  }
  EXPECT_TRUE(GradScaler::for_precision(PrecisionType::kFp16).is_enabled());
}

// for_policy: enabled exactly when the policy needs loss scaling (fp16), whatever its dtypes
// say otherwise; kwargs.enabled = false still turns it off.
TEST(GradScaler, ForPolicyIsEnabledExactlyWhenThePolicyNeedsIt) {
  for (auto t :
       {PrecisionType::kNo, PrecisionType::kFp16, PrecisionType::kBf16, PrecisionType::kFp8}) {
    PrecisionPolicy p = PrecisionPolicy::from(t);
    EXPECT_EQ(GradScaler::for_policy(p).is_enabled(), t == PrecisionType::kFp16)
        << precision_type_name(t);
  }
  PrecisionPolicy fp16_f32_params = PrecisionPolicy::from(PrecisionType::kFp16);
  fp16_f32_params.param_dtype = fp16_f32_params.reduce_dtype = DType::kF32;  // DDP's
  EXPECT_TRUE(GradScaler::for_policy(fp16_f32_params, {.init_scale = 8}).is_enabled());
  EXPECT_EQ(GradScaler::for_policy(fp16_f32_params, {.init_scale = 8}).get_scale(), 8.0);
  EXPECT_FALSE(GradScaler::for_policy(fp16_f32_params, {.enabled = false}).is_enabled());
}

TEST(GradScaler, ScaleReturnsF32) {
  GradScaler s({.init_scale = 1024});
  Tensor loss = Tensor::from_vector({0.75}, {}, DType::kF16);
  Tensor scaled = s.scale(loss);
  EXPECT_EQ(scaled.dtype(), DType::kF32);
  EXPECT_EQ(scaled.item(), 768.0);
}

TEST(GradScaler, StateRoundTripsAndBadStateIsRejected) {
  GradScaler a({.init_scale = 256, .growth_interval = 5});
  RecordingOptimizer opt({Tensor::from_vector({1.0}, {1})});
  a.step(opt);
  a.update();
  GradScaler b({.init_scale = 2});
  b.load_state_json(a.state_json());
  EXPECT_EQ(b.get_scale(), 256.0);
  EXPECT_EQ(b.growth_tracker(), 1);
  EXPECT_EQ(b.state_dict().growth_interval, 5);
  try {
    b.load_state_json("{\"scale\": 1.0}");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
    EXPECT_THAT(e.message(), HasSubstr("growth_factor"));
  }
  EXPECT_THROW(b.load_state_json("not json"), Error);
  // An integer written as a float too large for int64 (the LR scheduler's fuzz finding,
  // docs/fuzzing.md): kCorruptData, not nlohmann's undefined conversion.
  try {
    b.load_state_json(R"({"scale": 1.0, "growth_factor": 2.0, "backoff_factor": 0.5,)"
                      R"( "growth_interval": 1e48, "_growth_tracker": 0})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
    EXPECT_THAT(e.message(), HasSubstr("growth_interval"));
  }
  GradScalerState bad = a.state_dict();
  bad.backoff_factor = 1.5;
  EXPECT_THROW(b.load_state_dict(bad), Error);
  EXPECT_THROW(GradScaler({.growth_factor = 1.0}), Error);
  EXPECT_THROW(GradScaler({.growth_interval = 0}), Error);
  EXPECT_THROW(GradScaler({.init_scale = -1}), Error);
}

TEST(GradScaler, EveryRankSkipsWhenOneRankFoundInf) {
  auto result = testing::run_threads(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto group = testing::make_group(rank, size, store, "shm");
    GradScaler s({.init_scale = 4, .growth_interval = 2}, group);
    RecordingOptimizer opt({Tensor()});
    for (int step = 0; step < 4; ++step) {
      // Rank 2 overflows at step 1 only.
      const double g = rank == 2 && step == 1 ? INFINITY : 4.0 * (rank + 1);
      opt.set(0, {g});
      const bool stepped = s.step(opt);
      EXPECT_EQ(stepped, step != 1) << "rank " << rank << " step " << step;
      s.update();
    }
    // Same scale everywhere: 4 -> 4 (tracker 1) -> 2 (inf) -> 2 (1) -> 4 (grown).
    EXPECT_EQ(s.get_scale(), 4.0);
    EXPECT_EQ(opt.steps, 3);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid::amp
