#include "braid/nn/optim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/core/thread_pool.h"
#include "braid/tensor/ops.h"

namespace braid::nn {
namespace {

using ::testing::HasSubstr;

std::vector<Parameter> make_params(uint64_t seed, DType dtype = DType::kF32) {
  Generator gen(seed);
  return {Parameter(Tensor::randn({17}, DType::kF32, &gen).to(dtype)),
          Parameter(Tensor::randn({4, 9}, DType::kF32, &gen).to(dtype))};
}

void set_grads(std::vector<Parameter>& ps, int step, DType dtype = DType::kF32) {
  Generator gen(1000 + step);
  for (Parameter& p : ps) p.grad() = Tensor::randn(p.data().shape(), DType::kF32, &gen).to(dtype);
}

// A file in this process's own folder, which is removed when the process exits.
std::filesystem::path temp_file(const std::string& name) {
  static const struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("braid_optim_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path / name;
}

TEST(Optimizer, Bf16ParametersKeepAnF32Master) {
  auto ps = make_params(1, DType::kBF16);
  AdamW opt(ps, {.lr = 1e-2, .weight_decay = 0.1});
  for (int s = 0; s < 4; ++s) {
    set_grads(ps, s, DType::kBF16);
    opt.step();
    for (const Parameter& p : ps) {
      const Tensor m = opt.master(p);
      ASSERT_TRUE(m.defined());
      EXPECT_EQ(m.dtype(), DType::kF32);
      EXPECT_TRUE(equal(p.data(), m.to(DType::kBF16)));  // param = round(master)
    }
  }
  // Without masters the bf16 parameter is updated directly.
  auto qs = make_params(1, DType::kBF16);
  AdamW direct(qs, {.lr = 1e-2}, MasterWeights::kNone);
  set_grads(qs, 0, DType::kBF16);
  direct.step();
  EXPECT_FALSE(direct.master(qs[0]).defined());
}

TEST(Optimizer, SkipsParametersWithoutGradientsAndCountsStepsPerParameter) {
  auto a = make_params(2);
  Adam opt_a(a, {.lr = 0.1});
  // a[1] has no gradient at the first step: untouched, and its first update later uses the
  // bias correction of its own step 1.
  set_grads(a, 0);
  const Tensor before = a[1].data().clone();
  a[1].grad() = Tensor();
  opt_a.step();
  EXPECT_TRUE(equal(a[1].data(), before));
  set_grads(a, 1);
  const Tensor g1 = a[1].grad().clone();
  opt_a.step();

  std::vector<Parameter> fresh = {Parameter(before.clone())};
  fresh[0].grad() = g1;
  Adam opt_fresh(fresh, {.lr = 0.1});
  opt_fresh.step();
  EXPECT_TRUE(equal(a[1].data(), fresh[0].data()));

  // requires_grad false: skipped too.
  a[0].set_requires_grad(false);
  const Tensor frozen = a[0].data().clone();
  opt_a.step();
  EXPECT_TRUE(equal(a[0].data(), frozen));
}

TEST(Optimizer, ThreadsDoNotChangeTheBits) {
  auto run = [](int threads) {
    std::vector<Parameter> ps = {Parameter(Tensor::zeros({(1 << 18) + 5}, DType::kBF16))};
    AdamW opt(ps, {.lr = 1e-2, .weight_decay = 0.1});
    opt.set_num_threads(threads);
    opt.set_rounding(kernels::Rounding::kStochastic, 5);
    for (int s = 0; s < 2; ++s) {
      set_grads(ps, s, DType::kBF16);
      opt.step();
    }
    return ps[0].data().clone();
  };
  EXPECT_TRUE(equal(run(1), run(2)));
  AdamW opt(make_params(1), {});
  EXPECT_THROW(opt.set_num_threads(0), Error);
}

TEST(Optimizer, ThreadsFollowBraidsThreadCountUntilSet) {
  const int before = get_num_threads();
  AdamW opt(make_params(1), {});
  EXPECT_EQ(opt.num_threads(), before);
  set_num_threads(3);
  EXPECT_EQ(opt.num_threads(), 3);  // read at each step, not when the optimizer was made
  opt.set_num_threads(2);
  set_num_threads(4);
  EXPECT_EQ(opt.num_threads(), 2);  // its own setting wins
  set_num_threads(before);
}

TEST(Optimizer, ZeroGradSetsToNoneOrZero) {
  auto ps = make_params(3);
  SGD opt(ps, {.lr = 0.1});
  set_grads(ps, 0);
  opt.zero_grad(false);
  EXPECT_EQ(ps[0].grad().to_vector(), std::vector<double>(17, 0.0));
  opt.zero_grad();
  EXPECT_FALSE(ps[0].grad().defined());
  EXPECT_NO_THROW(opt.step());  // nothing to do
}

TEST(Optimizer, FusedGradScaleEqualsUnscaledGradients) {
  auto a = make_params(4);
  auto b = make_params(4);
  AdamW opt_a(a, {.lr = 1e-2, .weight_decay = 0.01});
  AdamW opt_b(b, {.lr = 1e-2, .weight_decay = 0.01});
  for (int s = 0; s < 3; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    for (Parameter& p : b) p.grad() = mul(p.grad(), Scalar(1024.0));
    opt_a.step();
    opt_b.step(1.0 / 1024.0);  // a power of two: the scaled product is exact
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(equal(a[i].data(), b[i].data()));
}

TEST(Optimizer, ParamGroupsKeepTheirOwnOptions) {
  auto ps = make_params(5);
  const Tensor p0 = ps[0].data().clone(), p1 = ps[1].data().clone();
  SGD opt({ParamGroup{{ps[0]}, {.lr = 0.1}}, ParamGroup{{ps[1]}, {.lr = 0.0}}});
  set_grads(ps, 0);
  opt.step();
  EXPECT_FALSE(equal(ps[0].data(), p0));
  EXPECT_TRUE(equal(ps[1].data(), p1));  // lr 0
  EXPECT_EQ(opt.param_groups()[0].initial_lr, 0.1);
  EXPECT_THROW(opt.add_param_group(ParamGroup{{ps[0]}, {}}), Error);  // already in group 0
}

TEST(Optimizer, LionMovesEveryElementByLr) {
  std::vector<Parameter> ps = {Parameter(Tensor::from_vector({1.0, 1.0, 1.0}, {3}))};
  Lion opt(ps, {.lr = 0.125, .beta1 = 0.9, .beta2 = 0.99});
  ps[0].grad() = Tensor::from_vector({0.5, -2.0, 0.0}, {3});
  opt.step();
  EXPECT_EQ(ps[0].data().to_vector(), (std::vector<double>{0.875, 1.125, 1.0}));
}

TEST(Optimizer, StochasticRoundingIsReproducibleAndSeeded) {
  auto run = [](uint64_t seed) {
    auto ps = make_params(6, DType::kBF16);
    AdamW opt(ps, {.lr = 1e-3});
    opt.set_rounding(kernels::Rounding::kStochastic, seed);
    for (int s = 0; s < 3; ++s) {
      set_grads(ps, s, DType::kBF16);
      opt.step();
    }
    return ps[1].data().clone();
  };
  EXPECT_TRUE(equal(run(1), run(1)));
  EXPECT_FALSE(equal(run(1), run(2)));
  auto hs = make_params(6, DType::kF16);
  AdamW f16(hs, {});
  EXPECT_THROW(f16.set_rounding(kernels::Rounding::kStochastic), Error);
}

TEST(Optimizer, SaveAndLoadContinueBitForBit) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 + master" : "f32");
    const DType d = bf16 ? DType::kBF16 : DType::kF32;
    auto whole = make_params(7, d);
    AdamW a(whole, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
    auto first = make_params(7, d);
    AdamW b(first, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
    for (int s = 0; s < 3; ++s) {
      set_grads(whole, s, d);
      set_grads(first, s, d);
      a.step();
      b.step();
    }
    const auto file = temp_file(bf16 ? "bf16.safetensors" : "f32.safetensors");
    b.save(file);
    // A new process would rebuild the model from its checkpoint: copy the parameters over.
    std::vector<Parameter> resumed;
    for (const Parameter& p : first) resumed.emplace_back(p.data().clone());
    AdamW c(resumed, {.lr = 0.5});
    c.load(file);
    EXPECT_EQ(c.param_groups()[0].options.lr, 1e-2);  // group options come back too
    for (int s = 3; s < 6; ++s) {
      set_grads(whole, s, d);
      set_grads(resumed, s, d);
      a.step();
      c.step();
    }
    for (size_t i = 0; i < whole.size(); ++i)
      EXPECT_TRUE(equal(whole[i].data(), resumed[i].data()));
  }
}

TEST(Optimizer, LoadRejectsAMismatchedState) {
  auto ps = make_params(8);
  Adam adam(ps, {});
  set_grads(ps, 0);
  adam.step();
  const OptimizerState st = adam.state_dict();
  auto expect_error = [](auto&& fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr(what));
    }
  };
  SGD sgd(make_params(8), {.lr = 0.1});
  expect_error([&] { sgd.load_state_dict(st); }, "saved by 'adam'");
  Adam fewer(std::vector<Parameter>{ps[0]}, {});
  expect_error([&] { fewer.load_state_dict(st); }, "saved with 2 parameters");
  std::vector<Parameter> other = {Parameter(Tensor::zeros({17})), Parameter(Tensor::zeros({36}))};
  Adam shaped(other, {});
  expect_error([&] { shaped.load_state_dict(st); }, "expected f32 [36]");
  OptimizerState missing = st;
  missing.tensors.erase(missing.tensors.begin());
  Adam m(make_params(8), {});
  expect_error([&] { m.load_state_dict(missing); }, "missing state.0.exp_avg");
  expect_error([&] { m.load_state_dict({{}, "{"}); }, "not JSON");
  const auto file = temp_file("not_optimizer.safetensors");
  save_safetensors(file, {{"x", Tensor::zeros({2})}});
  expect_error([&] { m.load(file); }, "not an optimizer state");
}

TEST(Optimizer, BadInputIsNamed) {
  auto expect_error = [](auto&& fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_THAT(e.message(), HasSubstr(what));
    }
  };
  expect_error([] { SGD(make_parameters({Tensor::arange(4)}), {.lr = 0.1}); }, "dtype i64");
  expect_error([] { SGD(make_params(9), {.lr = -1}); }, "lr");
  expect_error([] { Adam(make_params(9), {.beta1 = 1.0}); }, "beta1");
  expect_error([] { SGD(make_params(9), {.lr = 0.1, .nesterov = true}); }, "nesterov");
  expect_error([] { SGD(std::vector<ParamGroup>{}); }, "at least one parameter group");
  expect_error(
      [] {
        SGD(make_parameters({Tensor::zeros({4, 4}).t()}), {.lr = 0.1});
      },
      "contiguous");
  auto ps = make_params(9);
  SGD opt(ps, {.lr = 0.1});
  ps[0].grad() = Tensor::zeros({16});
  expect_error([&] { opt.step(); }, "gradient has shape [16]");
  ps[0].grad() = Tensor::zeros({17}, DType::kI32);
  expect_error([&] { opt.step(); }, "gradient 0 has dtype i32");
}

}  // namespace
}  // namespace braid::nn
