// braid's pipeline schedules timed (bench/run_pipeline.sh, docs/performance.md, "Pipeline
// schedules"): a GPT cut over the p ranks of `braid launch` (vocab 512, context 64, d 128,
// 8 layers, 4 heads, dropouts 0; micro-batches of 2 sequences of 32 tokens; AdamW), trained with
// GPipe, 1F1B and interleaved 1F1B (v = 2), each for `warmup` + `steps` steps.
//
//   braid launch --nproc-per-node 4 braid_bench_pipeline [steps (5)] [warmup (2)] [M (8)]
//
// Per schedule rank 0 prints: the median step time, every rank's measured bubble (1 - busy /
// step, busy = the forwards, backwards and loss of its actions, from PipelineStepStats'
// timestamps; the step ends with the loss broadcast that closes it on every rank), their
// mean, the theory (p - 1) / (v M + p - 1), the model clock (simulate_pipeline) fed with the
// measured mean forward and backward time of one chunk (F ms, B ms), and where the idle time
// went: the mean time a rank spent in receives a step ("recv ms") and between its last action
// and the end of the closing broadcast ("close ms"). The reference beside them is the
// same model and micro-batches in one process (rank 0 alone, the others waiting in a
// barrier): a pipeline's ideal step is that time / p. PyTorch's peer
// (torch.distributed.pipelining) needs torch >= 2.4; the machine's torch 1.13 has none.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/pipeline.h"

namespace {

using namespace braid;
using Clock = std::chrono::steady_clock;

nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 512;
  c.n_positions = 64;
  c.n_embd = 128;
  c.n_layer = 8;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

void batch(int64_t M, std::vector<Tensor>& xs, std::vector<Tensor>& ys) {
  Generator gen(7);
  for (int64_t m = 0; m < M; ++m) {
    Tensor data = Tensor::empty({2, 33}, DType::kI64);
    gen.fill_randint(data.data<int64_t>(), data.numel(), 0, 512);
    xs.push_back(data.narrow(1, 0, 32).contiguous());
    ys.push_back(data.narrow(1, 1, 32).contiguous());
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

const nn::OptimizerOptions kAdam{.lr = 3e-4, .weight_decay = 0.01};

// One process, ordinary gradient accumulation: the reference step.
double single_step_ms(int64_t steps, int64_t warmup, int64_t M) {
  nn::GPT gpt(config());
  Generator init(1);
  gpt.init_weights(init);
  nn::AdamW opt(gpt.parameters(), kAdam);
  nn::CrossEntropyLoss ce;
  std::vector<Tensor> xs, ys;
  batch(M, xs, ys);
  std::vector<double> times;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    for (int64_t m = 0; m < M; ++m) {
      ce.forward(gpt.forward(xs[static_cast<size_t>(m)]), ys[static_cast<size_t>(m)]);
      gpt.backward(ce.backward());
    }
    opt.step();
    opt.zero_grad();
    if (s >= warmup)
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return median(times);
}

void run_schedule(ProcessGroup& world, std::shared_ptr<ProcessGroup> pp, const char* label,
                  shard::PipelineOptions opt, int64_t steps, int64_t warmup) {
  shard::CausalLMPipeline pipe(nn::make_meta<nn::GPT>(config()), pp, opt);
  pipe.init_weights(Generator(1));
  nn::AdamW adam(pipe.parameters(), kAdam);
  std::vector<Tensor> xs, ys;
  batch(opt.num_micro_batches, xs, ys);
  std::vector<double> step_ms, bubble;
  double f_s = 0, b_s = 0, recv_s = 0, close_s = 0;
  int64_t nf = 0, nb = 0;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    pipe.step(xs, ys);
    adam.step();
    adam.zero_grad();
    pipe.after_step();
    if (s < warmup) continue;
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    const shard::PipelineStepStats& st = pipe.pipeline().last_stats();
    bubble.push_back(st.bubble());
    for (auto& t : st.actions) {
      const double d = t.end_s - t.begin_s;
      if (t.action.kind == shard::ActionKind::kForward) f_s += d, ++nf;
      if (t.action.kind == shard::ActionKind::kBackward) b_s += d, ++nb;
      if (t.action.kind == shard::ActionKind::kRecvActivation ||
          t.action.kind == shard::ActionKind::kRecvGradient) {
        recv_s += d;
      }
    }
    close_s += st.total_s - (st.actions.empty() ? 0.0 : st.actions.back().end_s);
  }
  // Per rank: median step, mean bubble, mean forward and backward of a chunk, receive and
  // closing time per step (ms).
  const auto n = static_cast<double>(step_ms.size());
  double mean_bubble = 0;
  for (double b : bubble) mean_bubble += b / n;
  constexpr int kW = 6;
  Tensor mine = Tensor::from_vector(
      {median(step_ms), mean_bubble, 1e3 * f_s / static_cast<double>(nf),
       1e3 * b_s / static_cast<double>(nb), 1e3 * recv_s / n, 1e3 * close_s / n},
      {kW}, DType::kF64);
  const int p = world.size();
  Tensor all = Tensor::empty({p * kW}, DType::kF64);
  world.all_gather_into(all, mine);
  if (world.rank() != 0) return;
  const double* a = all.data<double>();
  double step = 0, mean = 0, f_ms = 0, b_ms = 0, recv_ms = 0, close_ms = 0;
  std::string per_rank;
  for (int r = 0; r < p; ++r) {
    const double* v = a + kW * r;
    step = std::max(step, v[0]);
    mean += v[1] / p;
    f_ms += v[2] / p;
    b_ms += v[3] / p;
    recv_ms += v[4] / p;
    close_ms += v[5] / p;
    char buf[32];
    std::snprintf(buf, sizeof(buf), " %5.1f", 100 * v[1]);
    per_rank += buf;
  }
  const shard::ScheduleShape shape = pipe.pipeline().shape();
  // The model clock with the measured chunk times (in units of 0.1 ms).
  const auto f = std::max<int64_t>(1, static_cast<int64_t>(f_ms * 10 + 0.5));
  const auto b = std::max<int64_t>(1, static_cast<int64_t>(b_ms * 10 + 0.5));
  const shard::SimulatedPipeline sim = shard::simulate_pipeline(shape, f, b);
  double sim_mean = 0;
  for (double x : sim.bubble) sim_mean += x / p;
  std::printf("%-17s %2d %2lld %3lld %9.1f %s %7.1f %7.1f %7.1f %7.2f %7.2f %8.1f %8.1f\n", label,
              p, static_cast<long long>(shape.virtual_stages),
              static_cast<long long>(shape.micro_batches), step, per_rank.c_str(), 100 * mean,
              100 * shard::theoretical_bubble(shape), 100 * sim_mean, f_ms, b_ms, recv_ms,
              close_ms);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::stoll(argv[1]) : 5;
  const int64_t warmup = argc > 2 ? std::stoll(argv[2]) : 2;
  const int64_t M = argc > 3 ? std::stoll(argv[3]) : 8;
  auto world = ProcessGroup::create({});
  const int p = world->size();
  if (world->rank() == 0) {
    const double single = single_step_ms(steps, warmup, M);
    std::printf(
        "# one process, same model and %lld micro-batches: %.1f ms a step (ideal "
        "pipeline step on %d ranks: %.1f ms)\n",
        static_cast<long long>(M), single, p, single / p);
    std::printf("%-17s %2s %2s %3s %9s %*s %7s %7s %7s %7s %7s %8s %8s\n", "schedule", "p", "v",
                "M", "step ms", 6 * p - 1, "bubble %/rank", "mean %", "theory", "clock %", "F ms",
                "B ms", "recv ms", "close ms");
  }
  world->barrier();
  run_schedule(*world, world, "gpipe",
               {.schedule = shard::PipelineSchedule::kGPipe, .num_micro_batches = M}, steps,
               warmup);
  run_schedule(*world, world, "1f1b",
               {.schedule = shard::PipelineSchedule::k1F1B, .num_micro_batches = M}, steps, warmup);
  run_schedule(*world, world, "interleaved-1f1b",
               {.schedule = shard::PipelineSchedule::kInterleaved1F1B,
                .num_micro_batches = M,
                .virtual_stages = 2},
               steps, warmup);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid_bench_pipeline: %s\n", e.what());
    return 1;
  }
}
