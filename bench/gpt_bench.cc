// braid's side of bench/run_gpt.sh: tokens/s of one training step (forward, cross-entropy,
// backward, AdamW step) of the models issue's tiny GPT, the same model and step as
// bench/gpt_vs_torch.py runs in PyTorch:
//   GPT-2 architecture, vocab 256, context 256, d 256, 4 layers, 4 heads, dropouts 0;
//   batch 8 x 256 tokens (2048 tokens a step); AdamW(lr 3e-4, weight decay 0.01).
// fp32, or bf16 autocast (f32 parameters, matmuls in bf16) as torch.autocast does.
// BRAID_GPT_MODEL=gpt2 runs GPT-2 small instead (124M: vocab 50257, context 1024, d 768, 12
// layers, 12 heads) at batch 4 x 256 tokens (issue 35); BRAID_GPT_BATCH overrides the batch.
//
//   braid_bench_gpt <threads> <steps> <warmup> <dtype>...     dtype: fp32 | bf16
// Prints one JSON line per dtype: {"dtype", "threads", "tokens_per_s" (median of the steps),
// "step_ms", "loss_first", "loss_last"}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/core/rng.h"
#include "braid/core/thread_pool.h"
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"

namespace {

using namespace braid;

void run(const std::string& dtype, int threads, int steps, int warmup) {
  set_num_threads(threads);
  const char* model = std::getenv("BRAID_GPT_MODEL");
  const bool small = model != nullptr && std::string(model) == "gpt2";
  if (model != nullptr && !small && std::string(model) != "tiny") {
    throw std::invalid_argument("BRAID_GPT_MODEL='" + std::string(model) +
                                "': expected tiny or gpt2");
  }
  nn::GPTConfig cfg;
  cfg.vocab_size = small ? 50257 : 256;
  cfg.n_positions = small ? 1024 : 256;
  cfg.n_embd = small ? 768 : 256;
  cfg.n_layer = small ? 12 : 4;
  cfg.n_head = small ? 12 : 4;
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0;
  nn::GPT gpt(cfg);
  Generator gen(0);
  gpt.init_weights(gen);
  nn::AdamW opt(gpt.parameters(), {.lr = 3e-4, .weight_decay = 0.01});
  opt.set_num_threads(threads);
  nn::CrossEntropyLoss ce;
  const char* batch = std::getenv("BRAID_GPT_BATCH");
  const int64_t B = batch != nullptr ? std::stoll(batch) : (small ? 4 : 8), T = 256;
  const int64_t V = cfg.vocab_size;
  std::vector<double> times;
  double first = 0, last = 0;
  for (int i = 0; i < steps + warmup; ++i) {
    Tensor data = Tensor::empty({B, T + 1}, DType::kI64);
    gen.fill_randint(data.data<int64_t>(), data.numel(), 0, V);
    Tensor x = data.narrow(1, 0, T).contiguous(), y = data.narrow(1, 1, T).contiguous();
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    {
      auto scope = dtype == "bf16" ? amp::AutocastScope(DType::kBF16) : amp::AutocastScope::noop();
      Tensor loss = ce.forward(gpt.forward(x), y);
      last = loss.item();
      gpt.backward(ce.backward());
    }
    opt.step();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) first = last;
    if (i >= warmup) times.push_back(dt);
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double med = sorted[sorted.size() / 2];
  std::printf(
      "{\"model\": \"%s\", \"batch\": %lld, \"dtype\": \"%s\", \"threads\": %d, "
      "\"tokens_per_s\": %.1f, \"step_ms\": [",
      small ? "gpt2" : "tiny", static_cast<long long>(B), dtype.c_str(), threads, B * T / med);
  for (size_t i = 0; i < times.size(); ++i) std::printf("%s%.2f", i ? ", " : "", times[i] * 1e3);
  std::printf("], \"loss_first\": %.6f, \"loss_last\": %.6f}\n", first, last);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: braid_bench_gpt <threads> <steps> <warmup> <fp32|bf16>...\n");
    return 2;
  }
  try {
    for (int i = 4; i < argc; ++i)
      run(argv[i], std::stoi(argv[1]), std::stoi(argv[2]), std::stoi(argv[3]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid_bench_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
