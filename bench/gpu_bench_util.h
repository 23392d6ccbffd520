// What bench/'s GPU benchmarks (gpu_optim_bench.cc, gpu_kernels_bench.cc) share: CUDA and
// cuBLASLt error checks, device buffers, timing with CUDA events, random operands, the device
// probe, and the peer every braid GEMM is read against: cuBLASLt called directly, with its
// algorithm and workspace chosen once. Plain CUDA runtime and cuBLASLt, no Google Benchmark,
// so both build on a bare GPU image (tests/gpu/run.sh).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace braid::bench::gpu {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}
inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + cublasLtGetStatusName(s));
  }
}

// cudaMalloc'd memory, freed on scope exit.
struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) { check(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Median of `iters` timed runs (after `warmup`), in milliseconds, timed with CUDA events on
// the default stream.
inline double time_ms(const std::function<void()>& fn, int warmup = 3, int iters = 15) {
  for (int i = 0; i < warmup; ++i) fn();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Random finite bytes: for fp8 small values of either sign (never the NaN codes 0x7f / 0xff);
// otherwise every byte in 0x3c..0x3f, which makes moderate positive bf16 (~0.05) and f32
// (~0.01) values. A 1 MiB random pattern is tiled (drawing 400 M bytes one by one would take
// seconds).
inline void fill_random(void* dev, size_t bytes, bool fp8) {
  std::vector<uint8_t> pattern(size_t{1} << 20);
  std::mt19937 rng(1);
  for (auto& b : pattern) {
    b = static_cast<uint8_t>(fp8 ? (0x30 + rng() % 16) | (rng() & 0x80) : 0x3c + rng() % 4);
  }
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; i += pattern.size()) {
    std::memcpy(host.data() + i, pattern.data(), std::min(pattern.size(), bytes - i));
  }
  check(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
}

// Prints "device 0: <name>, compute capability X.Y, ..." and returns true, or prints "no GPU:
// <why>" and returns false. *cc gets major * 10 + minor.
inline bool describe_device(int* cc) {
  int count = 0;  // left unset when cudaGetDeviceCount fails (no driver)
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("no GPU: cudaGetDeviceCount: %s, %d devices\n",
                err == cudaSuccess ? "ok" : cudaGetErrorString(err), count);
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no GPU: cudaGetDeviceProperties failed\n");
    return false;
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::printf(
      "device 0: %s, compute capability %d.%d, %d SMs, %.1f GiB, CUDA runtime %d, "
      "driver %d, %d GPU(s) visible\n",
      prop.name, prop.major, prop.minor, prop.multiProcessorCount,
      prop.totalGlobalMem / double(1 << 30), runtime, driver, count);
  *cc = prop.major * 10 + prop.minor;
  return true;
}

// An n x n x n GEMM through cuBLASLt called directly: column-major TN (both operands contiguous
// along k: row-major A B^T, the layout braid's benchmarks give their own gemm), operands of
// `ab`, C of `c`, f32 accumulation and scalars (`compute`: CUBLAS_COMPUTE_32F is plain f32
// arithmetic for f32 operands, no TF32). The heuristic and the 32 MiB workspace are paid once,
// outside the timing. Returns the median milliseconds of time_ms.
inline double cublaslt_gemm_ms(int64_t n, cudaDataType_t ab, cudaDataType_t c,
                               cublasComputeType_t compute, const void* a, const void* b,
                               void* out) {
  cublasLtHandle_t h;
  check(cublasLtCreate(&h), "cublasLtCreate");
  cublasLtMatmulDesc_t desc;
  check(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), "desc");
  const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "transa");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn),
        "transb");
  cublasLtMatrixLayout_t la, lb, lc;
  check(cublasLtMatrixLayoutCreate(&la, ab, n, n, n), "layout");
  check(cublasLtMatrixLayoutCreate(&lb, ab, n, n, n), "layout");
  check(cublasLtMatrixLayoutCreate(&lc, c, n, n, n), "layout");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "pref");
  const uint64_t ws_bytes = uint64_t{32} << 20;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws_bytes, sizeof ws_bytes),
        "pref");
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res, &found),
        "heuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt has no algorithm for this GEMM");
  Buffer ws(ws_bytes);
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = time_ms([&] {
    check(cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, out, lc, out, lc, &res.algo, ws.p,
                         ws_bytes, nullptr),
          "cublasLtMatmul");
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(h);
  return ms;
}

}  // namespace braid::bench::gpu
