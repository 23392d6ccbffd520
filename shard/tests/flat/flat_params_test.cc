// FlatParameters on a one-rank group: names, the pass brackets and their errors, views of the
// gathered values, param_init, and checkpoints. The multi-rank equivalence (world sizes,
// stages, resumes, bit for bit) runs under braid launch: run_flat_equivalence.sh.
#include "braid/shard/flat_params.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/nn/optim.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"

namespace braid::shard {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<ProcessGroup> one_rank_group() {
  return braid::testing::make_group(0, 1, std::make_shared<InMemoryStore>());
}

std::vector<FlatUnitSpec> two_units() {
  return {{"blocks.0",
           {{"attn.weight", Tensor::arange(0, 6, 1, DType::kF32).view({2, 3}), {}},
            {"bias", Tensor::full({3}, 0.5), {}}}},
          {"head", {{"weight", Tensor::full({3, 2}, -1.0), {}}}}};
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(FlatParameters, NamesComeFromTheUnitsAndTheStateDictHoldsTheInitialValues) {
  FlatParameters fp(two_units(), one_rank_group(), {.stage = ZeroStage::k3});
  ASSERT_EQ(fp.num_units(), 2u);
  EXPECT_EQ(fp.unit_name(1), "head");
  EXPECT_EQ(fp.num_params(0), 2u);
  EXPECT_EQ(fp.param_name(0, 0), "blocks.0.attn.weight");
  EXPECT_EQ(fp.param_shape(0, 0), (Shape{2, 3}));
  NamedTensors sd = fp.sharded().full_state_dict();
  // In module-tree order, as torch's named_parameters: a unit's own parameters ("bias"), then
  // those under its sub-paths ("attn.weight").
  ASSERT_EQ(sd.size(), 3u);
  EXPECT_EQ(sd[0].first, "blocks.0.bias");
  EXPECT_EQ(sd[1].first, "blocks.0.attn.weight");
  EXPECT_EQ(sd[2].first, "head.weight");
  EXPECT_EQ(sd[1].second.to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(fp.sharded().optimizer_parameters().size(), 3u);  // two units and the empty root
}

TEST(FlatParameters, StageThreeGathersForAUseAndFreesAfterIt) {
  FlatParameters fp(two_units(), one_rank_group(), {.stage = ZeroStage::k3});
  EXPECT_THAT(error_of([&] { fp.param(0, 0); }), HasSubstr("is not gathered"));
  fp.begin_forward();
  fp.gather(0);
  Tensor w = fp.param(0, 0);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.to_vector()[5], 5.0);
  fp.release(0);
  EXPECT_THAT(error_of([&] { fp.param(0, 0); }), HasSubstr("call gather(0) first"));
  fp.gather(1);
  fp.release(1);
  fp.end_forward();
  fp.begin_backward();
  fp.gather(1);
  fp.reduce_gradients(1, std::vector<Tensor>{Tensor::ones({3, 2})});
  fp.gather(0);
  fp.reduce_gradients(0, std::vector<Tensor>{Tensor::full({2, 3}, 2.0), Tensor()});
  fp.end_backward();
  fp.sharded().finish_gradients(0.5);
  auto params = fp.sharded().optimizer_parameters();
  // Unit 0's shard in module-tree order: bias (no gradient: zero), then attn.weight (6
  // elements, gradient 2 x 0.5).
  std::vector<double> g0 = params[0].grad().to_vector();
  EXPECT_EQ(g0[2], 0.0);
  EXPECT_EQ(g0[3], 1.0);
  EXPECT_EQ(g0[8], 1.0);
  EXPECT_EQ(params[1].grad().to_vector()[0], 0.5);
}

TEST(FlatParameters, AtStageOneTheViewsAreBraidsMemoryAndSeeTheStep) {
  FlatParameters fp(two_units(), one_rank_group(), {.stage = ZeroStage::k1});
  nn::SGD opt(fp.sharded().optimizer_parameters(), {.lr = 1.0});
  Tensor head = fp.param(1, 0);  // stages 0-2 keep parameters between passes
  fp.begin_forward();
  fp.end_forward();
  fp.begin_backward();
  fp.reduce_gradients(1, std::vector<Tensor>{Tensor::full({3, 2}, 0.25)});
  fp.reduce_gradients(0, std::vector<Tensor>{Tensor(), Tensor()});
  fp.end_backward();
  fp.sharded().finish_gradients(1.0);
  opt.step();
  fp.sharded().after_step();
  EXPECT_EQ(head.to_vector()[0], -1.25);  // the same buffer, updated in place
  EXPECT_EQ(fp.param(1, 0).data_ptr(), head.data_ptr());
}

TEST(FlatParameters, CallsOutOfOrderAndBadGradientsAreErrors) {
  FlatParameters fp(two_units(), one_rank_group(), {.stage = ZeroStage::k2});
  EXPECT_THAT(error_of([&] { fp.gather(0); }), HasSubstr("must be called in a pass"));
  EXPECT_THAT(error_of([&] { fp.end_forward(); }), HasSubstr("in the forward"));
  EXPECT_THAT(error_of([&] { fp.gather(7); }), HasSubstr("unit 7 does not exist"));
  fp.begin_forward();
  EXPECT_THAT(error_of([&] { fp.begin_backward(); }), HasSubstr("between passes"));
  EXPECT_THAT(error_of([&] { fp.reduce_gradients(0, {}); }), HasSubstr("in the backward"));
  fp.end_forward();
  fp.begin_backward();
  EXPECT_THAT(error_of([&] { fp.release(0); }), HasSubstr("in the forward"));
  EXPECT_THAT(error_of([&] { fp.reduce_gradients(1, {}); }),
              HasSubstr("'head' has 1 parameters, got 0 gradients"));
  EXPECT_THAT(error_of([&] {
                fp.reduce_gradients(1, std::vector<Tensor>{Tensor::ones({2, 3})});
              }),
              HasSubstr("the gradient of 'head.weight' has shape [2, 3]"));
  EXPECT_THAT(error_of([&] {
                fp.reduce_gradients(1, std::vector<Tensor>{Tensor::ones({3, 2}, DType::kI64)});
              }),
              HasSubstr("must be an f32, bf16 or f16 CPU tensor, got i64"));
}

TEST(FlatParameters, BadUnitsAreRefusedNamingThem) {
  auto pg = one_rank_group();
  auto with = [&](std::vector<FlatUnitSpec> units, ShardingOptions o = {}) {
    return error_of([&] { FlatParameters fp(std::move(units), pg, o); });
  };
  const Tensor w = Tensor::ones({2});
  EXPECT_THAT(with({}), HasSubstr("no units"));
  EXPECT_THAT(with({{"a", {{"w", w, {}}}}, {"a", {{"w", w, {}}}}}),
              HasSubstr("unit 'a' is registered twice"));
  EXPECT_THAT(with({{"a", {{"w", w, {}}}}, {"a.b", {{"w", w, {}}}}}),
              HasSubstr("unit 'a.b' lies inside unit 'a'"));
  EXPECT_THAT(with({{"a.b", {{"w", w, {}}}}, {"a", {{"w", w, {}}}}}),
              HasSubstr("unit 'a' lies around unit 'a.b'"));
  EXPECT_THAT(with({{"a..b", {{"w", w, {}}}}}), HasSubstr("empty component"));
  EXPECT_THAT(with({{"a", {}}}), HasSubstr("unit 'a' has no parameters"));
  EXPECT_THAT(with({{"a", {{"w", w, {}}, {"w", w, {}}}}}),
              HasSubstr("parameter 'a.w' is registered twice"));
  EXPECT_THAT(with({{"a", {{"w", Tensor::ones({2}, DType::kBF16), {}}}}}),
              HasSubstr("initial value of 'a.w' must be an f32 CPU tensor, got bf16"));
  EXPECT_THAT(with({{"a", {{"w", Tensor(), {4}}}}}),
              HasSubstr("no initial value and ShardingOptions::param_init is not set"));
}

TEST(FlatParameters, ParamInitFillsParametersWithoutInitialValues) {
  ShardingOptions o;
  o.stage = ZeroStage::k3;
  o.param_init = [](const std::string& name, int64_t offset, int64_t count, float* dst) {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(offset + i + (name == "u.b"));
  };
  FlatParameters fp({{"u", {{"a", Tensor(), {2, 2}}, {"b", Tensor(), {3}}}}}, one_rank_group(), o);
  NamedTensors sd = fp.sharded().full_state_dict();
  EXPECT_EQ(sd[0].second.to_vector(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(sd[1].second.to_vector(), (std::vector<double>{1, 2, 3}));
}

TEST(FlatParameters, CheckpointsLoadIntoAnotherStage) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("braid_flat_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    FlatParameters fp(two_units(), one_rank_group(), {.stage = ZeroStage::k3});
    fp.sharded().save_checkpoint(dir);
  }
  auto units = two_units();
  for (auto& u : units) {
    for (auto& p : u.params) p.initial = Tensor::zeros(p.initial.shape());
  }
  FlatParameters fp(units, one_rank_group(), {.stage = ZeroStage::k0});
  fp.sharded().load_checkpoint(dir);
  EXPECT_EQ(fp.param(0, 0).to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(fp.param(1, 0).to_vector()[0], -1.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::shard
