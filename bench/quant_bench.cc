// Quantized Linear layers on a GPT-2-size layer (mlp.c_fc, 768 -> 3072) beside the bf16 and
// f32 GEMM of the same layer in the same run: tokens/s of the forward at several token counts,
// and the weight's bytes per parameter.
//   braid_bench_quant [iterations]      one thread (set_num_threads(1))
// Prints one JSON line per (layer, tokens): {"layer", "tokens", "tokens_per_s", "ms",
// "weight_bytes_per_param"}. Timing is the median of the iterations after one warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "braid/core/rng.h"
#include "braid/core/thread_pool.h"
#include "braid/nn/module.h"
#include "braid/nn/quantized.h"

namespace {

using namespace braid;

double median_ms(int iters, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 5;
  set_num_threads(1);
  const int64_t in = 768, out = 3072;
  Generator gen(0);
  nn::Linear f32(in, out, nn::Bias::kYes, nn::WeightLayout::kOutIn, DType::kF32, &gen);
  nn::Linear bf16(in, out, nn::Bias::kYes, nn::WeightLayout::kOutIn, DType::kF32, &gen);
  bf16.to(DType::kBF16);
  auto nf4_bf16 = nn::Linear4bit::from_linear(f32, Quant4Type::kNf4, DType::kBF16, true);
  auto nf4_f32 = nn::Linear4bit::from_linear(f32, Quant4Type::kNf4, DType::kF32, true);
  auto int8 = nn::Linear8bitLt::from_linear(f32, 6.0);
  const double params = static_cast<double>(in * out);
  struct Row {
    const char* name;
    nn::Layer* layer;
    DType input;
    double bytes;
  };
  const std::vector<Row> rows = {
      {"f32_gemm", &f32, DType::kF32, 4.0},
      {"bf16_gemm", &bf16, DType::kBF16, 2.0},
      {"nf4_dq_compute_bf16", nf4_bf16.get(), DType::kBF16,
       nf4_bf16->quantized().nbytes() / params},
      {"nf4_dq_compute_f32", nf4_f32.get(), DType::kF32, nf4_f32->quantized().nbytes() / params},
      {"llm_int8", int8.get(), DType::kF32, int8->quantized().nbytes() / params},
  };
  nn::NoGradGuard no_grad;
  for (int64_t tokens : {1, 16, 128}) {
    const Tensor x32 = Tensor::randn({tokens, in}, DType::kF32, &gen);
    for (const Row& r : rows) {
      const Tensor x = x32.to(r.input);
      const double ms = median_ms(iters, [&] { (void)r.layer->forward(x); });
      std::printf(
          "{\"layer\": \"%s\", \"tokens\": %lld, \"tokens_per_s\": %.1f, \"ms\": %.3f, "
          "\"weight_bytes_per_param\": %.4f}\n",
          r.name, static_cast<long long>(tokens), tokens / (ms / 1000.0), ms, r.bytes);
    }
  }
  return 0;
}
