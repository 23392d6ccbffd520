// The main job: data-parallel training on CPU ranks started by `braid launch`.
//
//   braid launch --nproc-per-node 4 ddp_linear_regression [--out DIR] [--steps N]
//
// Every rank generates the same dataset from one seed and trains on its own shard of the
// rows (rank r takes rows r, r + world, ...). Each step, the local gradient is averaged
// across ranks with all_reduce(avg) on the shm backend, so every rank applies the same
// update. At the end the ranks check that they hold bit-identical weights (all_gather +
// compare), rank 0 saves a sharded safetensors checkpoint, everyone waits for it, and each
// rank reloads it and compares. Exit code 0 means all of that held and the loss converged.
#include <cstdio>
#include <string>

#include "braid/comm/process_group.h"
#include "braid/comm/tree_ops.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace {

using namespace braid;

struct Options {
  std::string out = "ddp_out";
  int steps = 150;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    BRAID_CHECK(i + 1 < argc, kInvalidArgument, "option ", arg, " needs a value");
    if (arg == "--out") {
      o.out = argv[i + 1];
    } else if (arg == "--steps") {
      o.steps = std::stoi(argv[i + 1]);
    } else {
      BRAID_FAIL(kInvalidArgument, "unknown option ", arg, " (expected --out, --steps)");
    }
  }
  return o;
}

// Rows r, r + world, r + 2 * world, ... of x (a strided view made contiguous).
Tensor shard_rows(const Tensor& x, int rank, int world) {
  return x.slice(0, rank, x.size(0), world).contiguous();
}

int run(const Options& opt) {
  auto pg = ProcessGroup::create({});
  const int rank = pg->rank(), world = pg->size();
  constexpr int64_t kSamples = 1024, kFeatures = 16;

  Generator gen(2026);  // the same data on every rank
  const Tensor x = Tensor::randn({kSamples, kFeatures}, DType::kF32, &gen);
  const Tensor w_true =
      scale(Tensor::arange(1, kFeatures + 1, 1, DType::kF32), 0.1).view({kFeatures, 1});
  const Tensor y = add(add(matmul(x, w_true), 0.5),
                       scale(Tensor::randn({kSamples, 1}, DType::kF32, &gen), 0.01));
  const Tensor xs = shard_rows(x, rank, world), ys = shard_rows(y, rank, world);
  const double local_n = static_cast<double>(xs.size(0));

  Tensor w = Tensor::zeros({kFeatures, 1});
  Tensor b = Tensor::zeros({1});
  Tensor grads = Tensor::zeros({kFeatures + 1});  // one buffer: one all_reduce per step
  double loss = 0;
  for (int step = 0; step <= opt.steps; ++step) {
    const Tensor err = sub(add(matmul(xs, w), b), ys);
    Tensor loss_t = mean(mul(err, err)).view({1});
    pg->all_reduce(loss_t, {.op = ReduceOp::kAvg});
    loss = loss_t.item();
    if (rank == 0 && (step % 50 == 0 || step == opt.steps)) {
      std::printf("step %4d  loss %.6f  (world %d)\n", step, loss, world);
    }
    if (step == opt.steps) break;
    grads.narrow(0, 0, kFeatures)
        .copy_(scale(matmul(xs.t(), err), 2.0 / local_n).view({kFeatures}));
    grads.narrow(0, kFeatures, 1).copy_(scale(mean(err, 0), 2.0));
    pg->all_reduce(grads, {.op = ReduceOp::kAvg});
    axpby_(-0.1, grads.narrow(0, 0, kFeatures).view({kFeatures, 1}), 1.0, w);
    axpby_(-0.1, grads.narrow(0, kFeatures, 1), 1.0, b);
  }

  // Every rank must hold the same bits.
  Tensor mine = cat({w.view({kFeatures}), b});
  Tensor all = Tensor::empty({world * (kFeatures + 1)});
  pg->all_gather_into(all, mine);
  for (int r = 0; r < world; ++r) {
    BRAID_CHECK(equal(all.narrow(0, r * (kFeatures + 1), kFeatures + 1), mine), kInternal, "rank ",
                r, " holds different weights than rank ", rank);
  }

  const NamedTensors state = {{"linear.weight", w}, {"linear.bias", b}};
  if (rank == 0) {
    const ShardedSaveResult saved = save_sharded(opt.out, state, uint64_t{48}, {{"format", "pt"}});
    std::printf("rank 0 saved %zu shard(s) to %s; weights identical on %d ranks\n",
                saved.files.size(), opt.out.c_str(), world);
  }
  wait_for_everyone(*pg);
  const NamedTensors loaded = load_safetensors(opt.out);
  for (size_t i = 0; i < state.size(); ++i) {
    BRAID_CHECK(loaded[i].first == state[i].first && equal(loaded[i].second, state[i].second),
                kCorruptData, "rank ", rank, ": tensor ", state[i].first, " did not round-trip");
  }
  if (!(loss < 1e-3)) {
    std::fprintf(stderr, "rank %d: did not converge: loss %.6f\n", rank, loss);
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
