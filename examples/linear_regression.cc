// The main job, for now: fits y = X w + b by full-batch gradient descent on CPU with braid
// tensors (matmul, broadcasting, reductions, axpby), saves the weights as a sharded
// safetensors checkpoint, reloads them and checks they came back bit for bit.
// Later issues replace this with a multi-process sharded training run.
//
//   linear_regression [--out DIR] [--steps N] [--seed S] [--dtype f32|bf16]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace {

struct Options {
  std::string out = "linreg_out";
  int steps = 200;
  uint64_t seed = 1234;
  braid::DType dtype = braid::DType::kF32;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    BRAID_CHECK(has_value, kInvalidArgument, "option ", arg, " needs a value");
    const std::string value = argv[++i];
    if (arg == "--out") {
      o.out = value;
    } else if (arg == "--steps") {
      o.steps = std::stoi(value);
    } else if (arg == "--seed") {
      o.seed = std::stoull(value);
    } else if (arg == "--dtype") {
      o.dtype = braid::parse_dtype(value);
    } else {
      BRAID_FAIL(kInvalidArgument, "unknown option ", arg,
                 " (expected --out, --steps, --seed, --dtype)");
    }
  }
  return o;
}

int run(const Options& opt) {
  using namespace braid;
  constexpr int64_t kSamples = 512, kFeatures = 16;
  Generator gen(opt.seed);
  // Data: y = X w_true + 0.5 + small noise, generated in f32.
  const Tensor x = Tensor::randn({kSamples, kFeatures}, DType::kF32, &gen);
  const Tensor w_true =
      scale(Tensor::arange(1, kFeatures + 1, 1, DType::kF32), 0.1).view({kFeatures, 1});
  const Tensor noise = scale(Tensor::randn({kSamples, 1}, DType::kF32, &gen), 0.01);
  const Tensor y = add(add(matmul(x, w_true), 0.5), noise);

  // The model, trained in opt.dtype; the gradient step runs in the same dtype.
  const Tensor xd = x.to(opt.dtype), yd = y.to(opt.dtype);
  Tensor w = Tensor::zeros({kFeatures, 1}, opt.dtype);
  Tensor b = Tensor::zeros({1}, opt.dtype);
  const double lr = 0.1;
  double loss = 0;
  for (int step = 0; step <= opt.steps; ++step) {
    const Tensor err = sub(add(matmul(xd, w), b), yd);  // [N, 1]
    loss = mean(mul(err, err), DType::kF32).item();
    if (step % 50 == 0 || step == opt.steps) std::printf("step %4d  loss %.6f\n", step, loss);
    if (step == opt.steps) break;
    const Tensor grad_w = scale(matmul(xd.t(), err), 2.0 / kSamples);  // [D, 1]
    const Tensor grad_b = scale(mean(err, 0), 2.0);                    // [1]
    axpby_(-lr, grad_w, 1.0, w);
    axpby_(-lr, grad_b, 1.0, b);
  }
  const double w_err = amax(abs(sub(w.to(DType::kF32), w_true))).item();
  std::printf("max |w - w_true| = %.5f, bias = %.5f (true 0.5)\n", w_err, b.to(DType::kF32).item());

  // Checkpoint: a small max_shard_size forces two shards and an index.
  const NamedTensors state = {{"linear.weight", w}, {"linear.bias", b}};
  const ShardedSaveResult saved = save_sharded(
      opt.out, state, uint64_t{48}, {{"format", "pt"}, {"steps", std::to_string(opt.steps)}});
  std::printf("saved %zu shard(s)%s to %s\n", saved.files.size(),
              saved.index.empty() ? "" : " + index", opt.out.c_str());
  const NamedTensors loaded = load_safetensors(opt.out);
  BRAID_CHECK(loaded.size() == state.size(), kCorruptData, "reloaded ", loaded.size(),
              " tensors, expected ", state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    BRAID_CHECK(loaded[i].first == state[i].first && equal(loaded[i].second, state[i].second),
                kCorruptData, "tensor ", state[i].first, " did not round-trip");
  }
  std::printf("reloaded checkpoint matches\n");
  const double tolerance = opt.dtype == DType::kF32 ? 1e-3 : 5e-2;
  if (!(loss < tolerance)) {
    std::fprintf(stderr, "did not converge: loss %.6f >= %.6f\n", loss, tolerance);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
