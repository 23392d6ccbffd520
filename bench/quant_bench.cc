// Quantized Linear layers on a GPT-2-size layer (mlp.c_fc, 768 -> 3072) beside the bf16 and
// f32 GEMM of the same layer in the same run: tokens/s of the forward at several token counts,
// and the weight's bytes per parameter. The NF4 rows come twice: Linear4bit's forward (the
// fused dequant-GEMM, gemm_4bit) and the old path it replaced, dequantize_4bit of the whole
// weight into the compute dtype and then matmul (what Linear4bit did before), on the same
// quantized weight.
//   braid_bench_quant [iterations]      one thread (set_num_threads(1))
// Prints one JSON line per (layer, tokens): {"layer", "tokens", "tokens_per_s", "ms",
// "weight_bytes_per_param"}, after a first line naming the SIMD level. Timing is the median of
// the iterations after one warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "braid/core/cpu_features.h"
#include "braid/core/rng.h"
#include "braid/core/thread_pool.h"
#include "braid/nn/module.h"
#include "braid/nn/quantized.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/quant.h"

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
  // The path Linear4bit's forward took before the fused kernel: the whole weight dequantized
  // into the compute dtype, then the GEMM, the bias, and the input's dtype.
  const Tensor bias = f32.bias().data();
  auto dequant_then_gemm = [&](const nn::Linear4bit& l, DType compute) {
    return [&l, compute, &bias](const Tensor& x) {
      const Tensor w = dequantize_4bit(l.quantized(), compute);
      return add(matmul(x.to(compute), w.t()), bias.to(compute)).to(x.dtype());
    };
  };
  struct Row {
    const char* name;
    std::function<Tensor(const Tensor&)> run;
    DType input;
    double bytes;
  };
  auto layer = [](nn::Layer* l) { return [l](const Tensor& x) { return l->forward(x); }; };
  const double nf4_bytes = nf4_f32->quantized().nbytes() / params;
  const std::vector<Row> rows = {
      {"f32_gemm", layer(&f32), DType::kF32, 4.0},
      {"bf16_gemm", layer(&bf16), DType::kBF16, 2.0},
      {"nf4_fused_compute_f32", layer(nf4_f32.get()), DType::kF32, nf4_bytes},
      {"nf4_dequant_then_gemm_f32", dequant_then_gemm(*nf4_f32, DType::kF32), DType::kF32,
       nf4_bytes},
      {"nf4_fused_compute_bf16", layer(nf4_bf16.get()), DType::kBF16, nf4_bytes},
      {"nf4_dequant_then_gemm_bf16", dequant_then_gemm(*nf4_bf16, DType::kBF16), DType::kBF16,
       nf4_bytes},
      {"llm_int8", layer(int8.get()), DType::kF32, int8->quantized().nbytes() / params},
  };
  std::printf("{\"simd\": \"%s\", \"threads\": 1}\n",
              std::string(cpu_isa_name(cpu_dispatch_isa())).c_str());
  nn::NoGradGuard no_grad;
  for (int64_t tokens : {1, 16, 128}) {
    const Tensor x32 = Tensor::randn({tokens, in}, DType::kF32, &gen);
    for (const Row& r : rows) {
      const Tensor x = x32.to(r.input);
      const double ms = median_ms(iters, [&] { (void)r.run(x); });
      std::printf(
          "{\"layer\": \"%s\", \"tokens\": %lld, \"tokens_per_s\": %.1f, \"ms\": %.3f, "
          "\"weight_bytes_per_param\": %.4f}\n",
          r.name, static_cast<long long>(tokens), tokens / (ms / 1000.0), ms, r.bytes);
    }
  }
  return 0;
}
