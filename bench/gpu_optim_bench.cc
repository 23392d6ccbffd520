// GPU benchmark of braid's device kernels (braid/kernels/cuda.h), each figure printed beside
// its peer measured in the same run (design.md, "How it is checked"):
//   - the fused AdamW step (f32, and bf16 parameters with f32 master weights) and the gradient
//     unscale, in GB/s of the bytes they must move, beside a device-to-device cudaMemcpy;
//   - fp8 and bf16 GEMM through braid, in TFLOP/s, beside cuBLASLt's own bf16 GEMM called
//     directly with its algorithm and workspace chosen once.
// Prints a Markdown table (tests/gpu/run.sh puts it into summary.md).
//
//   braid_gpu_optim_bench            the full run (64 Mi elements, 8192^3 GEMMs)
//   braid_gpu_optim_bench --quick    smaller sizes, for a smoke test
//   braid_gpu_optim_bench --probe    prints the device and exits: 0 with a GPU, 2 without
// Exit status: 0 done, 1 a CUDA / braid error, 2 no usable GPU.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cuda.h"
#include "braid/kernels/optim.h"
#include "gpu_bench_util.h"

namespace {

using braid::DType;
namespace bk = braid::kernels;
using namespace braid::bench::gpu;  // check, Buffer, time_ms, fill_random, cublaslt_gemm_ms

void row(const std::string& name, const std::string& size, double ms, double rate, const char* unit,
         double peer) {
  std::printf("| %s | %s | %.3f | %.1f %s | %.0f%% |\n", name.c_str(), size.c_str(), ms, rate, unit,
              100.0 * rate / peer);
  std::fflush(stdout);
}

std::string mi(int64_t n) {
  return std::to_string(n >> 20) + " Mi";
}

// ---- memory-bound kernels ------------------------------------------------------------------

double bench_memcpy(int64_t bytes) {
  Buffer a(bytes), b(bytes);
  check(cudaMemset(a.p, 1, bytes), "cudaMemset");
  const double ms = time_ms([&] {
    check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync");
  });
  const double gbs = 2.0 * bytes / (ms * 1e6);  // read + write
  std::printf("| cudaMemcpy device to device (peer) | %s bytes | %.3f | %.1f GB/s | 100%% |\n",
              mi(bytes).c_str(), ms, gbs);
  return gbs;
}

// AdamW over n elements split into `tensors` equal tensors. Bytes per element: read grad,
// p (or master), m, v; write p (and master), m, v.
void bench_adamw(const char* name, int64_t n, int tensors, DType param, bool master,
                 bk::Rounding rounding, double memcpy_gbs) {
  const size_t psz = braid::dtype_size(param);
  Buffer p(n * psz), g(n * psz), m(n * 4), v(n * 4);
  Buffer w(master ? n * 4 : 4);
  check(cudaMemset(p.p, 0, n * psz), "cudaMemset");
  check(cudaMemset(g.p, 0, n * psz), "cudaMemset");
  check(cudaMemset(m.p, 0, n * 4), "cudaMemset");
  check(cudaMemset(v.p, 0, n * 4), "cudaMemset");
  if (master) check(cudaMemset(w.p, 0, n * 4), "cudaMemset");
  bk::OptimStep step;
  step.algo = bk::OptimAlgo::kAdamW;
  step.param_dtype = param;
  step.grad_dtype = param;
  step.weight_decay = 0.01;
  step.rounding = rounding;
  std::vector<bk::OptimTensor> ts;
  const int64_t each = n / tensors;
  for (int t = 0; t < tensors; ++t) {
    const int64_t off = t * each;
    ts.push_back({each, p.as<char>() + off * psz, master ? w.as<float>() + off : nullptr,
                  g.as<char>() + off * psz, m.as<float>() + off, v.as<float>() + off, nullptr,
                  static_cast<uint64_t>(off)});
  }
  const double ms = time_ms(
      [&] { bk::cuda::optimizer_step(step, ts.data(), static_cast<int64_t>(ts.size()), nullptr); });
  // Read p (or the master), g, m, v; write p (and the master), m, v.
  const double bytes = (master ? 4.0 : psz) + psz + 8 + (master ? 4.0 + psz : psz) + 8;
  const double gbs = bytes * n / (ms * 1e6);
  row(name, mi(n) + (tensors > 1 ? " in " + std::to_string(tensors) + " tensors" : ""), ms, gbs,
      "GB/s", memcpy_gbs);
}

void bench_unscale(int64_t n, double memcpy_gbs) {
  Buffer x(n * 4);
  check(cudaMemset(x.p, 0, n * 4), "cudaMemset");
  void* data[] = {x.p};
  const int64_t counts[] = {n};
  // Includes the call's one flag copy and stream synchronization (it returns a host bool).
  const double ms = time_ms(
      [&] { bk::cuda::unscale_and_check_finite(DType::kF32, data, counts, 1, 0.5f, nullptr); });
  row("unscale_and_check_finite f32 (incl. flag read-back)", mi(n), ms, 8.0 * n / (ms * 1e6),
      "GB/s", memcpy_gbs);
}

// ---- GEMM ------------------------------------------------------------------------------------

void bench_gemm(int64_t n, bool fp8_ok) {
  const double flops = 2.0 * n * n * n;
  Buffer a16(n * n * 2), b16(n * n * 2), c16(n * n * 2), a8(n * n), b8(n * n), scale(8);
  fill_random(a16.p, n * n * 2, false);
  fill_random(b16.p, n * n * 2, false);
  fill_random(a8.p, n * n, true);
  fill_random(b8.p, n * n, true);
  const float ones[2] = {1.0f, 1.0f};
  check(cudaMemcpy(scale.p, ones, sizeof ones, cudaMemcpyHostToDevice), "cudaMemcpy");
  const std::string size = std::to_string(n) + "^3";

  const double peer_ms =
      cublaslt_gemm_ms(n, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, a16.p, b16.p, c16.p);
  const double peer = flops / (peer_ms * 1e9);
  std::printf("| cuBLASLt bf16 GEMM, direct (peer) | %s | %.3f | %.1f TFLOP/s | 100%% |\n",
              size.c_str(), peer_ms, peer);

  bk::cpu::GemmArgs g;
  g.trans_b = bk::cpu::Trans::kYes;
  g.m = g.n = g.k = n;
  g.a = a16.p, g.lda = n, g.b = b16.p, g.ldb = n, g.c = c16.p, g.ldc = n;
  g.ab_dtype = DType::kBF16, g.c_dtype = DType::kBF16;
  const double bf16_ms = time_ms([&] { bk::cuda::gemm(g, nullptr); });
  row("braid cuda::gemm bf16 (NT)", size, bf16_ms, flops / (bf16_ms * 1e9), "TFLOP/s", peer);

  if (!fp8_ok) {
    std::printf("| braid cuda::gemm_fp8 | %s | - | needs compute capability 8.9+ | - |\n",
                size.c_str());
    return;
  }
  bk::cuda::GemmFp8Args f;
  f.m = f.n = f.k = n;
  f.a = a8.p, f.lda = n, f.b = b8.p, f.ldb = n, f.c = c16.p, f.ldc = n;
  f.scale_a = scale.as<float>(), f.scale_b = scale.as<float>() + 1;
  f.trans_b = bk::cpu::Trans::kYes;  // both operands k-contiguous: cuBLASLt's native fp8 layout
  const double fp8_ms = time_ms([&] { bk::cuda::gemm_fp8(f, nullptr); });
  row("braid cuda::gemm_fp8 e4m3 -> bf16 (NT)", size, fp8_ms, flops / (fp8_ms * 1e9), "TFLOP/s",
      peer);
  f.trans_b = bk::cpu::Trans::kNo;  // B is transposed into a temporary first
  const double fp8_nn_ms = time_ms([&] { bk::cuda::gemm_fp8(f, nullptr); });
  row("braid cuda::gemm_fp8 e4m3 -> bf16 (NN, incl. B transpose)", size, fp8_nn_ms,
      flops / (fp8_nn_ms * 1e9), "TFLOP/s", peer);
}

}  // namespace

int main(int argc, char** argv) {
  bool probe = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--probe") == 0) {
      probe = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--probe] [--quick]\n", argv[0]);
      return 1;
    }
  }
  int cc = 0;
  if (!describe_device(&cc)) return 2;
  if (probe) return 0;

  try {
    const int64_t n = quick ? int64_t{1} << 22 : int64_t{64} << 20;  // elements
    std::printf("\n| benchmark | size | ms (median) | rate | vs peer |\n|---|---|---|---|---|\n");
    const double copy = bench_memcpy(n * 4 * 4);  // as many bytes as the four f32 AdamW arrays
    bench_adamw("cuda::optimizer_step AdamW f32", n, 1, DType::kF32, false, bk::Rounding::kNearest,
                copy);
    bench_adamw("cuda::optimizer_step AdamW f32", n, 512, DType::kF32, false,
                bk::Rounding::kNearest, copy);
    bench_adamw("cuda::optimizer_step AdamW bf16 + f32 master", n, 1, DType::kBF16, true,
                bk::Rounding::kNearest, copy);
    bench_adamw("cuda::optimizer_step AdamW bf16 + f32 master, stochastic rounding", n, 1,
                DType::kBF16, true, bk::Rounding::kStochastic, copy);
    bench_unscale(n, copy);
    bench_gemm(quick ? 2048 : 8192, cc >= 89);
    std::printf(
        "\nGB/s count the bytes each kernel must read and write once; memcpy counts "
        "read + write.\n");
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
