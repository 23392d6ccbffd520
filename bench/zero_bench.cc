// braid's side of bench/run_zero.sh: one training step of the tiny GPT of bench/gpt_bench.cc
// (vocab 256, context 256, d 256, 4 layers, 4 heads, dropouts 0; AdamW lr 3e-4, weight decay
// 0.01) on a global batch of 8 sequences of 256 tokens (2048 tokens a step), at ZeRO stages
// 0-3 (shard/include/braid/shard/fsdp.h) over the ranks of `braid launch`, or in one plain
// process. bench/ddp_vs_torch.py runs the same model and batch with PyTorch DDP.
// BRAID_GPT_MODEL=gpt2: GPT-2 small instead (124M: vocab 50257, context 1024, d 768, 12
// layers, 12 heads) on a global batch of 4 x 256 tokens (issue 35); BRAID_GPT_BATCH sets the
// global batch.
//
//   braid launch --nproc-per-node 2 braid_bench_zero <0|1|2|3> <steps> <warmup> <dtype>...
//   braid_bench_zero single <steps> <warmup> <dtype>...              dtype: fp32 | bf16 | bf16p
//   braid_bench_zero --features      prints "overlap yes" when ShardingOptions has `overlap`
// `--overlap on|off` among the dtypes sets ShardingOptions::overlap (default: its default).
//
// "single": one process, no ShardedModel, all 8 sequences in one batch (the model's step as
// gpt_bench.cc times it, at the thread count BRAID_NUM_THREADS gives). A stage: every rank
// runs one micro-batch of 8 / W sequences per step (G = W, micro-batch m = rank), the step of
// docs/sharding.md, "One step", with transformer_based_wrap over the GPT2Blocks.
//
// Note [Exposed communication]: what a step loses to communication, measured two ways.
//   comm_ms     time inside collectives: every group of the run uses the "timed" backend
//               below, which wraps "shm" and clocks each collective from its start to its
//               completion (waiting for the peer included), on whichever thread runs it.
//               With collectives on the calling thread this is all exposed; with a
//               communication thread it is the communication's length, hidden or not.
//   exposed_ms  the step minus the same step's compute: every rank also holds a second
//               ShardedModel of the same stage on a one-rank group of its own, whose
//               collectives are local copies that wait for no other process, and the timed
//               steps alternate between the two models (both ranks at once, so both cores are
//               busy as in the real run, and a drift of the machine touches both sides). That
//               model's optimizer steps the whole model rather than 1 / W of it (stages 1-3),
//               so the optimizer step is left out of both sides: exposed = median(step -
//               optimizer) of the real model - median(step - optimizer) of the one-rank one.
//   hidden      1 - exposed_ms / comm_ms, clamped to [0, 1]: the fraction of the
//               communication's time that compute covered.
//
// Prints one JSON line per dtype (rank 0): {"mode", "dtype", "world", "overlap",
// "tokens_per_s" (global tokens / median step), "step_ms" (rank 0's steps), "step_ms_median",
// the phase medians "fwd_bwd_ms", "finish_ms", "opt_ms", "after_ms", "comm_ms",
// "compute_ms", "exposed_ms", "hidden", "peak_mib" (per rank: the CPU allocator's peak over the
// last warm-up step, before the one-rank model exists; everything held counts), "held_mib"
// (ShardedModel::held_bytes per rank), "loss_first", "loss_last" (rank 0's micro-batch)}.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/comm/backend.h"
#include "braid/comm/process_group.h"
#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/core/thread_pool.h"
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"

namespace {

using namespace braid;
using Clock = std::chrono::steady_clock;

constexpr int64_t kContext = 256;

bool gpt2_small() {
  const char* m = std::getenv("BRAID_GPT_MODEL");
  if (m == nullptr || std::string(m) == "tiny") return false;
  BRAID_CHECK(std::string(m) == "gpt2", kInvalidArgument, "BRAID_GPT_MODEL='", m,
              "': expected tiny or gpt2");
  return true;
}

// The global batch in sequences: 8 (tiny) or 4 (gpt2), or BRAID_GPT_BATCH.
const int64_t kBatch = [] {
  const char* b = std::getenv("BRAID_GPT_BATCH");
  return b != nullptr ? std::stoll(b) : (gpt2_small() ? 4 : 8);
}();
const int64_t kVocab = gpt2_small() ? 50257 : 256;

// Nanoseconds spent inside collectives of "timed" groups since the last reset.
std::atomic<int64_t> g_comm_ns{0};

// Note [Exposed communication]: "shm" with a clock around each collective. Waiting inside
// run() makes an asynchronous call block the thread that started it; ShardedModel starts each
// collective from the thread that needs it next (the caller or its communication thread), so
// nothing it does changes but where the wait happens.
class TimedBackend final : public Backend {
 public:
  explicit TimedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return "timed"; }
  const BackendCapabilities& capabilities() const override { return inner_->capabilities(); }
  std::shared_ptr<Work> run(const CollectiveDesc& desc) override {
    const auto t0 = Clock::now();
    std::shared_ptr<Work> work = inner_->run(desc);
    work->wait();
    g_comm_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    return work;
  }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* ptr) override { inner_->release(ptr); }

 private:
  std::unique_ptr<Backend> inner_;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::shared_ptr<nn::GPT> tiny_gpt() {
  const bool small = gpt2_small();
  nn::GPTConfig cfg;
  cfg.vocab_size = kVocab;
  cfg.n_positions = small ? 1024 : kContext;
  cfg.n_embd = small ? 768 : 256;
  cfg.n_layer = small ? 12 : 4;
  cfg.n_head = small ? 12 : 4;
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0;
  auto gpt = std::make_shared<nn::GPT>(cfg);
  Generator gen(0);
  gpt->init_weights(gen);
  return gpt;
}

// Sequences [first, first + count) of step s's global batch: ids and labels [count, 256].
std::pair<Tensor, Tensor> batch(int64_t step, int64_t first, int64_t count) {
  Generator gen(1000003 * static_cast<uint64_t>(step) + 17);
  Tensor data = Tensor::empty({kBatch, kContext + 1}, DType::kI64);
  gen.fill_randint(data.data<int64_t>(), data.numel(), 0, kVocab);
  data = data.narrow(0, first, count);
  return {data.narrow(1, 0, kContext).contiguous(), data.narrow(1, 1, kContext).contiguous()};
}

// fp32; bf16: bf16 autocast over f32 parameters; bf16p: FSDP's MixedPrecision (parameters
// held and gathered in bf16, f32 masters, gradients reduced in f32) under bf16 autocast. The
// single process runs bf16p as bf16 (there is nothing to gather).
amp::AutocastScope autocast(const std::string& dtype) {
  return dtype == "fp32" ? amp::AutocastScope::noop() : amp::AutocastScope(DType::kBF16);
}
shard::ShardingOptions with_dtype(shard::ShardingOptions so, const std::string& dtype) {
  if (dtype == "bf16p") so.precision.param_dtype = DType::kBF16;
  return so;
}

// The step's phases, one entry per timed step.
struct Phases {
  std::vector<double> step, fwd_bwd, finish, opt, after, comm;
  double loss_first = 0, loss_last = 0;
};

// ShardingOptions::overlap: "on", "off", or "default" (unset: the automatic choice).
const char* set_overlap(shard::ShardingOptions& o, const std::string& overlap) {
  if (overlap != "default") o.overlap = overlap == "on";
  if (!o.overlap.has_value()) return "auto";
  return *o.overlap ? "on" : "off";
}

struct Run {
  Phases ph;
  double peak_mib = 0, held_mib = 0;
};

// One rank's model, optimizer and step at `stage` on `pg`. Its micro-batch is sequences
// [rank * 8 / W, (rank + 1) * 8 / W) of each step's global batch (rank and W of the job, also
// for a one-rank group).
class Stepper {
 public:
  Stepper(std::shared_ptr<ProcessGroup> pg, const shard::ShardingOptions& so, std::string dtype,
          int rank, int world)
      : pg_(std::move(pg)),
        sm_(tiny_gpt(), pg_, so),
        opt_(sm_.optimizer_parameters(), {.lr = 3e-4, .weight_decay = 0.01}),
        dtype_(std::move(dtype)),
        rank_(rank),
        world_(world) {
    opt_.set_num_threads(1);
  }

  // Step `i` of the data; appended to run.ph when `timed`.
  void step(int64_t i, bool timed, Run& run) {
    const int64_t per_rank = kBatch / world_;
    auto [x, y] = batch(i, rank_ * per_rank, per_rank);
    g_comm_ns = 0;
    const auto t0 = Clock::now();
    double loss = 0;
    {
      auto scope = autocast(dtype_);
      loss = ce_.forward(sm_.forward(x), y).item();
      sm_.backward(ce_.backward());
    }
    const double fwd_bwd = ms_since(t0);
    auto t = Clock::now();
    sm_.finish_gradients(1.0 / double(world_));
    const double finish = ms_since(t);
    t = Clock::now();
    opt_.step();
    opt_.zero_grad();
    const double step_opt = ms_since(t);
    t = Clock::now();
    sm_.after_step();
    const double after = ms_since(t);
    const double total = ms_since(t0);
    const double comm = double(g_comm_ns.load()) * 1e-6;
    if (i == 0) run.ph.loss_first = loss;
    run.ph.loss_last = loss;
    if (!timed) return;
    run.ph.step.push_back(total);
    run.ph.fwd_bwd.push_back(fwd_bwd);
    run.ph.finish.push_back(finish);
    run.ph.opt.push_back(step_opt);
    run.ph.after.push_back(after);
    run.ph.comm.push_back(comm);
  }

  double held_mib() const { return double(sm_.held_bytes()) / (1 << 20); }

 private:
  std::shared_ptr<ProcessGroup> pg_;
  shard::ShardedModel sm_;
  nn::AdamW opt_;
  nn::CrossEntropyLoss ce_;
  std::string dtype_;
  int rank_, world_;
};

// Note [Exposed communication]: the real model (on `world_pg`) warms up alone, its last
// warm-up step measuring peak memory; then a second model of the same stage on the one-rank
// group `alone` warms up, and the timed steps alternate between the two (real step i, then
// the one-rank model's step i), so slow drifts of the machine touch both sides alike.
std::pair<Run, Run> run_stage(const std::shared_ptr<ProcessGroup>& world_pg,
                              const std::shared_ptr<ProcessGroup>& alone,
                              const shard::ShardingOptions& so, const std::string& dtype, int steps,
                              int warmup) {
  const int rank = world_pg->rank(), world = world_pg->size();
  Allocator& alloc = get_allocator(kCPU);
  Run real, co;
  world_pg->barrier();
  Stepper sr(world_pg, with_dtype(so, dtype), dtype, rank, world);
  for (int i = 0; i < warmup; ++i) {
    if (i == warmup - 1) alloc.reset_peak();  // steady state: optimizer state exists from step 1
    sr.step(i, false, real);
  }
  real.peak_mib = double(alloc.stats().peak_bytes) / (1 << 20);
  real.held_mib = sr.held_mib();
  Stepper sa(alone, with_dtype(so, dtype), dtype, rank, world);
  for (int i = 0; i < warmup; ++i) sa.step(i, false, co);
  world_pg->barrier();
  for (int i = warmup; i < warmup + steps; ++i) {
    sr.step(i, true, real);
    sa.step(i, true, co);
  }
  return {real, co};
}

// One process, no ShardedModel: the whole global batch in one step.
Run run_single(const std::string& dtype, int steps, int warmup) {
  auto gpt = tiny_gpt();
  nn::AdamW opt(gpt->parameters(), {.lr = 3e-4, .weight_decay = 0.01});
  opt.set_num_threads(1);
  nn::CrossEntropyLoss ce;
  Allocator& alloc = get_allocator(kCPU);
  Run run;
  size_t peak = 0;
  for (int i = 0; i < steps + warmup; ++i) {
    if (i == warmup - 1) alloc.reset_peak();
    if (i == warmup) peak = alloc.stats().peak_bytes;
    auto [x, y] = batch(i, 0, kBatch);
    const auto t0 = Clock::now();
    double loss = 0;
    {
      auto scope = autocast(dtype);
      loss = ce.forward(gpt->forward(x), y).item();
      gpt->backward(ce.backward());
    }
    const double fwd_bwd = ms_since(t0);
    auto t = Clock::now();
    opt.step();
    opt.zero_grad();
    const double step_opt = ms_since(t);
    const double total = ms_since(t0);
    if (i == 0) run.ph.loss_first = loss;
    run.ph.loss_last = loss;
    if (i < warmup) continue;
    run.ph.step.push_back(total);
    run.ph.fwd_bwd.push_back(fwd_bwd);
    run.ph.opt.push_back(step_opt);
  }
  run.peak_mib = double(peak) / (1 << 20);
  return run;
}

std::string list(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.2f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

void print(const std::string& mode, const std::string& dtype, int world, const char* overlap,
           const Run& real, const Phases* compute_only, const std::vector<double>& peak,
           const std::vector<double>& held) {
  const Phases& p = real.ph;
  const double step = median(p.step);
  double comm = median(p.comm), compute = step, exposed = 0, hidden = 0;
  if (compute_only != nullptr) {
    // Note [Exposed communication].
    const double co = median(minus(compute_only->step, compute_only->opt));
    compute = co + median(p.opt);
    exposed = median(minus(p.step, p.opt)) - co;
    hidden = comm > 0 ? std::clamp(1.0 - exposed / comm, 0.0, 1.0) : 0.0;
  }
  std::printf(
      "{\"mode\": \"%s\", \"dtype\": \"%s\", \"world\": %d, \"overlap\": \"%s\", "
      "\"tokens_per_s\": %.1f, \"step_ms\": %s, \"step_ms_median\": %.2f, \"fwd_bwd_ms\": %.2f, "
      "\"finish_ms\": %.2f, \"opt_ms\": %.2f, \"after_ms\": %.2f, \"comm_ms\": %.2f, "
      "\"compute_ms\": %.2f, \"exposed_ms\": %.2f, \"hidden\": %.3f, \"peak_mib\": %s, "
      "\"held_mib\": %s, \"loss_first\": %.6f, \"loss_last\": %.6f}\n",
      mode.c_str(), dtype.c_str(), world, overlap, double(kBatch * kContext) / step * 1e3,
      list(p.step).c_str(), step, median(p.fwd_bwd), median(p.finish), median(p.opt),
      median(p.after), comm, compute, exposed, hidden, list(peak).c_str(), list(held).c_str(),
      p.loss_first, p.loss_last);
  std::fflush(stdout);
}

// Every rank's value, on every rank.
std::vector<double> gather(ProcessGroup& pg, double v) {
  Tensor mine = Tensor::full({1}, v, DType::kF64);
  Tensor all = Tensor::empty({pg.size()}, DType::kF64);
  pg.all_gather_into(all, mine);
  return std::vector<double>(all.data<double>(), all.data<double>() + pg.size());
}

int run(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--features") {  // what run_zero.sh can ask for
    shard::ShardingOptions so;
    std::printf("overlap %s\n", std::string(set_overlap(so, "default")) == "n/a" ? "no" : "yes");
    return 0;
  }
  BRAID_CHECK(argc >= 5, kInvalidArgument,
              "usage: braid_bench_zero <single|0|1|2|3> <steps> <warmup> [--overlap on|off] "
              "<fp32|bf16|bf16p>...");
  const std::string mode = argv[1];
  const int steps = std::stoi(argv[2]), warmup = std::stoi(argv[3]);
  BRAID_CHECK(steps >= 1 && warmup >= 2, kInvalidArgument,
              "steps must be >= 1 and warmup >= 2 "
              "(the last warm-up step measures memory, with the optimizer state allocated), got ",
              steps, " and ", warmup);
  std::string overlap = "default";
  std::vector<std::string> dtypes;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--overlap" && i + 1 < argc) {
      overlap = argv[++i];
    } else {
      BRAID_CHECK(a == "fp32" || a == "bf16" || a == "bf16p", kInvalidArgument, "unknown dtype ",
                  a);
      dtypes.push_back(a);
    }
  }
  set_num_threads(1);  // one core per rank (BRAID_NUM_THREADS=1 says the same)
  if (mode == "single") {
    for (const auto& dtype : dtypes) {
      Run r = run_single(dtype, steps, warmup);
      print(mode, dtype, 1, "n/a", r, nullptr, {r.peak_mib}, {0.0});
    }
    return 0;
  }

  register_backend("timed", [](const BackendContext& ctx) {
    return std::make_unique<TimedBackend>(create_backend("shm", ctx));
  });
  ProcessGroupOptions po;
  po.backend = "timed";
  auto world_pg = ProcessGroup::create(po);
  const int rank = world_pg->rank(), world = world_pg->size();
  BRAID_CHECK(kBatch % world == 0, kInvalidArgument, "world size ", world,
              " must divide the global batch ", kBatch);
  // A one-rank group of each rank's own (every rank creates them all, in the same order).
  std::shared_ptr<ProcessGroup> alone;
  for (int r = 0; r < world; ++r) {
    auto g = world_pg->new_group({r});
    if (r == rank) alone = g;
  }
  shard::ShardingOptions so;
  so.stage = shard::zero_stage_from_int(std::stoll(mode));
  so.wrap.kind = shard::WrapKind::kTransformerBased;
  so.wrap.transformer_cls_names_to_wrap = {"GPT2Block"};
  const char* overlap_used = set_overlap(so, overlap);
  for (const auto& dtype : dtypes) {
    auto [real, co] = run_stage(world_pg, alone, so, dtype, steps, warmup);
    const std::vector<double> peak = gather(*world_pg, real.peak_mib);
    const std::vector<double> held = gather(*world_pg, real.held_mib);
    if (rank == 0) print(mode, dtype, world, overlap_used, real, &co.ph, peak, held);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid_bench_zero: %s\n", e.what());
    return 1;
  }
}
