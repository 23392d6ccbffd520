// fsdp_worker: trains a small GPT for a few steps under braid launch and writes the final
// parameters, so run_fsdp_equivalence.sh can compare world sizes and ZeRO stages.
//
//   fsdp_worker train <stage 0-3|plain> <micro-batches per step G> <steps> <out.safetensors>
//               [--wrap transformer|size|none] [--bf16] [--clip NORM] [--checkpointing]
//               [--keep-after-forward] [--no-overlap] [--no-sync] [--save-at K DIR]
//               [--param-dtype bf16] [--reduce-dtype bf16] [--meta-init]
//               [--resume DIR --start K] [--bucket-mb MB] [--bucket-view] [--all-reduce]
//               [--comm-hook bf16|fp16] [--shard-size S] [--dropout P] [--schedule]
//               [--no-rng-restore] [--offload-param DIR] [--offload-optimizer DIR]
//   fsdp_worker compare <a.safetensors> <b.safetensors> <exact|TOL>
//               TOL bounds max |a - b| / max |b|, both maxima over the whole model
//
// Global batch: G micro-batches of 2 sequences of 12 tokens, a pure function of (step,
// micro-batch index): rank r runs micro-batches r, r + W, ... (Note [Deterministic
// reduction] in fsdp.h). "plain" is one process with ordinary gradient accumulation (no
// ShardedModel), the single-process reference within tolerance. Prints the step losses.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/clip_grad.h"
#include "braid/nn/gpt.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace {

using namespace braid;

nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = 3;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

// Micro-batch m of step s: ids and labels [2, 12].
std::pair<Tensor, Tensor> micro_batch(int64_t step, int64_t m) {
  Generator gen(1000003 * static_cast<uint64_t>(step) + static_cast<uint64_t>(m));
  Tensor data = Tensor::empty({2, 13}, DType::kI64);
  gen.fill_randint(data.data<int64_t>(), data.numel(), 0, 37);
  return {data.narrow(1, 0, 12).contiguous(), data.narrow(1, 1, 12).contiguous()};
}

struct Opts {
  std::string stage, out, wrap = "transformer";
  int64_t G = 4, steps = 3;
  bool bf16 = false, checkpointing = false, keep_after_forward = false, overlap = true;
  bool no_sync = false;  // sync only the last micro-batch of a step
  DType param_dtype = DType::kF32, reduce_dtype = DType::kF32;
  bool meta_init = false;  // build under InitEmptyWeights, materialize shards by param_init
  // Stage 0: DistributedDataParallelKwargs, and deterministic = false (--all-reduce).
  double bucket_mb = 25;
  bool bucket_view = false, all_reduce = false;
  int64_t shard_size = 0;  // HSDP: shard_group_size
  double dropout = 0;      // GPT's three dropout probabilities
  bool schedule = false;   // cosine LR schedule with one warmup step, saved in checkpoints
  bool rng_restore = true;
  std::string offload_param, offload_optimizer;  // nvme paths
  shard::DDPCommunicationHookType comm_hook = shard::DDPCommunicationHookType::kNo;
  double clip = 0;
  int64_t save_at = -1, start = 0;  // --save-at K DIR: a sharded checkpoint after K steps
  std::string save_dir, resume_dir;
};

int train(const Opts& o) {
  nn::GPTConfig cfg = config();
  cfg.activation_checkpointing = o.checkpointing;
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = o.dropout;
  std::shared_ptr<nn::GPT> gpt;
  Generator init(42);
  if (o.meta_init) {
    nn::InitEmptyWeights empty;
    gpt = std::make_shared<nn::GPT>(cfg);
  } else {
    gpt = std::make_shared<nn::GPT>(cfg);
    gpt->init_weights(init);
  }
  const nn::OptimizerOptions adam{.lr = 1e-2, .weight_decay = 0.1};
  nn::CrossEntropyLoss ce;
  const auto autocast = [&] {
    return o.bf16 ? amp::AutocastScope(DType::kBF16) : amp::AutocastScope::noop();
  };

  if (o.stage == "plain") {  // one process, ordinary gradient accumulation
    nn::AdamW opt(gpt->parameters(), adam);
    for (int64_t s = 0; s < o.steps; ++s) {
      double loss = 0;
      for (int64_t m = 0; m < o.G; ++m) {
        auto [x, y] = micro_batch(s, m);
        auto scope = autocast();
        loss += ce.forward(gpt->forward(x), y).item();
        gpt->backward(ce.backward());
      }
      for (auto& p : gpt->parameters()) p.grad() = scale(p.grad(), 1.0 / double(o.G));
      if (o.clip > 0) nn::clip_grad_norm_(gpt->parameters(), o.clip);
      opt.step();
      opt.zero_grad();
      std::printf("step %lld loss %.6f\n", static_cast<long long>(s), loss / double(o.G));
    }
    save_safetensors(o.out, gpt->state_dict());
    return 0;
  }

  auto pg = ProcessGroup::create({});
  const int W = pg->size(), rank = pg->rank();
  BRAID_CHECK(o.G % W == 0, kInvalidArgument, "G = ", o.G, " must be a multiple of W = ", W);
  shard::ShardingOptions so;
  so.stage = shard::zero_stage_from_int(std::stoll(o.stage));
  so.reshard_after_forward = !o.keep_after_forward;
  so.overlap = o.overlap;
  so.precision.param_dtype = o.param_dtype;
  if (o.meta_init) {
    nn::GPT* raw = gpt.get();
    so.param_init = [raw, &init](const std::string& name, int64_t offset, int64_t count,
                                 float* dst) {
      raw->init_weights_range(init, name, offset, count, dst);
    };
  }
  so.precision.reduce_dtype = o.reduce_dtype;
  so.ddp.bucket_cap_mb = o.bucket_mb;
  so.ddp.gradient_as_bucket_view = o.bucket_view;
  so.ddp.comm_hook = o.comm_hook;
  so.deterministic = !o.all_reduce;
  so.shard_group_size = o.shard_size;
  if (!o.offload_param.empty()) {
    so.offload_param = {.device = nn::OffloadDevice::kNvme, .nvme_path = o.offload_param};
  }
  if (o.wrap == "transformer") {
    so.wrap.kind = shard::WrapKind::kTransformerBased;
    so.wrap.transformer_cls_names_to_wrap = {"GPT2Block"};
  } else if (o.wrap == "size") {
    so.wrap.kind = shard::WrapKind::kSizeBased;
    so.wrap.min_num_params = 3000;
  }
  shard::ShardedModel sm(gpt, pg, so);
  nn::AdamW opt(sm.optimizer_parameters(), adam);
  if (!o.offload_optimizer.empty()) {
    opt.set_offload(
        {.device = nn::OffloadDevice::kNvme, .nvme_path = o.offload_optimizer, .buffer_count = 2});
  }
  std::unique_ptr<nn::LRScheduler> sched;
  if (o.schedule) {
    sched = std::make_unique<nn::LRScheduler>(
        opt, nn::SchedulerType::kCosine,
        nn::ScheduleOptions{.num_warmup_steps = 1, .num_training_steps = o.steps});
  }
  const shard::TrainingState extra{.scheduler = sched.get(), .rng_states = o.rng_restore};
  // Dropout draws from the default generator, seeded per rank.
  default_generator(kCPU).manual_seed(7 + static_cast<uint64_t>(rank));
  if (!o.resume_dir.empty()) sm.load_checkpoint(o.resume_dir, &opt, extra);
  for (int64_t s = o.start; s < o.steps; ++s) {
    if (s == o.save_at) sm.save_checkpoint(o.save_dir, &opt, {{"step", std::to_string(s)}}, extra);
    double loss = 0;
    for (int64_t j = 0; j < o.G / W; ++j) {
      auto [x, y] = micro_batch(s, j * W + rank);
      auto scope = autocast();
      sm.set_gradient_sync(!o.no_sync || j == o.G / W - 1);
      loss += ce.forward(sm.forward(x), y).item();
      sm.backward(ce.backward());
    }
    sm.finish_gradients(1.0 / double(o.G));
    if (o.clip > 0) {
      const double norm = sm.clip_grad_norm_(o.clip);
      if (rank == 0) std::printf("step %lld grad norm %.9g\n", static_cast<long long>(s), norm);
    }
    opt.step();
    opt.zero_grad();
    sm.after_step();
    if (sched) sched->step();
    Tensor l = Tensor::full({1}, loss, DType::kF64);
    pg->all_reduce(l);
    if (rank == 0) {
      std::printf("step %lld loss %.6f\n", static_cast<long long>(s), l.item() / double(o.G));
    }
  }
  NamedTensors state = sm.full_state_dict();
  if (rank == 0) save_safetensors(o.out, state);
  pg->barrier();
  return 0;
}

int compare(const std::string& a, const std::string& b, const std::string& mode) {
  std::map<std::string, Tensor> A, B;
  for (auto& [n, t] : load_safetensors(a)) A[n] = t;
  for (auto& [n, t] : load_safetensors(b)) B[n] = t;
  BRAID_CHECK(A.size() == B.size(), kInvalidArgument, a, " has ", A.size(), " tensors, ", b,
              " has ", B.size());
  // Tolerance mode: max |a - b| over every tensor, over max |b| over every tensor (one
  // normalization for the whole model: a bias that starts at zero has no scale of its own).
  const double tol = mode == "exact" ? 0.0 : std::stod(mode);
  double worst = 0, scale_all = 1e-30;
  std::string worst_name;
  for (auto& [n, t] : A) {
    auto it = B.find(n);
    BRAID_CHECK(it != B.end(), kInvalidArgument, b, " lacks ", n);
    if (mode == "exact") {
      BRAID_CHECK(t.nbytes() == it->second.nbytes() &&
                      std::memcmp(t.data_ptr(), it->second.data_ptr(), t.nbytes()) == 0,
                  kInvalidArgument, n, " differs between ", a, " and ", b,
                  " (expected the same bits)");
      continue;
    }
    const double d = amax(abs(sub(t, it->second))).item();
    scale_all = std::max(scale_all, amax(abs(it->second)).item());
    if (d > worst) worst = d, worst_name = n;
  }
  worst /= scale_all;
  if (mode != "exact") {
    std::printf("largest normalized difference %.3g (%s)\n", worst, worst_name.c_str());
    BRAID_CHECK(worst <= tol, kInvalidArgument, "normalized difference ", worst, " of ", worst_name,
                " exceeds ", tol);
  }
  std::printf("%s and %s agree (%s)\n", a.c_str(), b.c_str(), mode.c_str());
  return 0;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "compare" && argc == 5) return compare(argv[2], argv[3], argv[4]);
  BRAID_CHECK(
      cmd == "train" && argc >= 6, kInvalidArgument,
      "usage: fsdp_worker train <0-3|plain> <G> <steps> <out> [options] | compare A B MODE");
  Opts o;
  o.stage = argv[2];
  o.G = std::stoll(argv[3]);
  o.steps = std::stoll(argv[4]);
  o.out = argv[5];
  for (int i = 6; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bf16")
      o.bf16 = true;
    else if (a == "--checkpointing")
      o.checkpointing = true;
    else if (a == "--keep-after-forward")
      o.keep_after_forward = true;
    else if (a == "--no-overlap")
      o.overlap = false;
    else if (a == "--no-sync")
      o.no_sync = true;
    else if (a == "--meta-init")
      o.meta_init = true;
    else if (a == "--param-dtype" && i + 1 < argc)
      o.param_dtype = parse_dtype(argv[++i]);
    else if (a == "--reduce-dtype" && i + 1 < argc)
      o.reduce_dtype = parse_dtype(argv[++i]);
    else if (a == "--clip" && i + 1 < argc)
      o.clip = std::stod(argv[++i]);
    else if (a == "--wrap" && i + 1 < argc)
      o.wrap = argv[++i];
    else if (a == "--save-at" && i + 2 < argc)
      o.save_at = std::stoll(argv[++i]), o.save_dir = argv[++i];
    else if (a == "--resume" && i + 1 < argc)
      o.resume_dir = argv[++i];
    else if (a == "--start" && i + 1 < argc)
      o.start = std::stoll(argv[++i]);
    else if (a == "--bucket-mb" && i + 1 < argc)
      o.bucket_mb = std::stod(argv[++i]);
    else if (a == "--shard-size" && i + 1 < argc)
      o.shard_size = std::stoll(argv[++i]);
    else if (a == "--dropout" && i + 1 < argc)
      o.dropout = std::stod(argv[++i]);
    else if (a == "--offload-param" && i + 1 < argc)
      o.offload_param = argv[++i];
    else if (a == "--offload-optimizer" && i + 1 < argc)
      o.offload_optimizer = argv[++i];
    else if (a == "--schedule")
      o.schedule = true;
    else if (a == "--no-rng-restore")
      o.rng_restore = false;
    else if (a == "--bucket-view")
      o.bucket_view = true;
    else if (a == "--all-reduce")
      o.all_reduce = true;
    else if (a == "--comm-hook" && i + 1 < argc)
      o.comm_hook = std::string(argv[++i]) == "fp16" ? shard::DDPCommunicationHookType::kFp16
                                                     : shard::DDPCommunicationHookType::kBf16;
    else
      BRAID_FAIL(kInvalidArgument, "fsdp_worker: unknown option ", a);
  }
  return train(o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp_worker: %s\n", e.what());
    return 1;
  }
}
