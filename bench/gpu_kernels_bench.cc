// GPU benchmark of the cuda kernel table (braid/kernels/table.h, kernels_for(kCUDA)), each
// figure beside its peer measured in the same run (design.md, "How it is checked"):
//   - every memory-bound op the table's users lean on, at 64 Mi elements (256 MiB of f32
//     input), in GB/s of the bytes the op must move (counted per op below: each input read once,
//     each output written once), beside a device-to-device cudaMemcpy of 256 MiB (read + write
//     counted); the goal is >= 0.8 of the copy, and each row says whether it meets it;
//   - the table's gemm, bf16 and f32 (TF32 off, the table's default), at 8192^3, in TFLOP/s,
//     beside cuBLASLt called directly on the same operands (gpu_bench_util.h).
// Prints Markdown tables (tests/gpu/run.sh puts them into summary.md); with FILE also JSON.
//
//   braid_gpu_kernels_bench [FILE.json]            the full run
//   braid_gpu_kernels_bench --quick [FILE.json]    16 MiB and 2048^3, for a smoke test
//   braid_gpu_kernels_bench --probe                prints the device; 0 with a GPU, 2 without
// Exit status: 0 done, 1 an op or GEMM failed (its row says why; the others still ran) or the
// JSON could not be written, 2 no usable GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "gpu_bench_util.h"

namespace {

using braid::DType;
namespace bk = braid::kernels;
using namespace braid::bench::gpu;  // check, Buffer, time_ms, fill_random, cublaslt_gemm_ms

constexpr double kGoal = 0.8;  // of the device-to-device copy's GB/s

// One call's median time in ms, for calls from microseconds to a second: a warm-up call, one
// timed alone to size the batches, then 7 batches (3 for calls over 100 ms) of as many calls
// as fill about 20 ms (at least one), each timed with CUDA events on the default stream and
// divided by its size. The batch spreads the few microseconds of launch overhead; the median
// batch hides a slow phase.
double time_call_ms(const std::function<void()>& fn) {
  fn();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  auto timed = [&](int calls) {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    for (int i = 0; i < calls; ++i) fn();
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    return static_cast<double>(t) / calls;
  };
  const double first = timed(1);
  const int batch = static_cast<int>(std::clamp(20.0 / std::max(first, 1e-3), 1.0, 1000.0));
  std::vector<double> ms;
  for (int b = 0; b < (first > 100 ? 3 : 7); ++b) ms.push_back(timed(batch));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  std::string op;
  double bytes = 0;  // moved by one call (memory-bound) or FLOPs (GEMM)
  double ms = 0;
  double rate = 0;  // GB/s or TFLOP/s
  double peer = 0;  // the copy's GB/s or cuBLASLt's TFLOP/s
  std::string error;
};

std::string json_text(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

class Bench {
 public:
  explicit Bench(int64_t n) : n_(n) {}

  // Times fn, one call moving `bytes`, and prints its row; an exception becomes the row's
  // error (the table goes on: one failing op must not hide the others' figures).
  void op(const std::string& name, double bytes, const std::function<void()>& fn) {
    Row r{name, bytes, 0, 0, copy_gbs_, ""};
    try {
      r.ms = time_call_ms(fn);
      check(cudaDeviceSynchronize(), name.c_str());
      r.rate = bytes / (r.ms * 1e6);
      std::printf("| %s | %.0f MiB | %.3f | %.1f | %.2f | %s |\n", name.c_str(), bytes / (1 << 20),
                  r.ms, r.rate, r.rate / copy_gbs_,
                  r.rate >= kGoal * copy_gbs_ ? "meets" : "below");
    } catch (const std::exception& e) {
      r.error = e.what();
      std::printf("| %s | %.0f MiB | - | - | - | error: %s |\n", name.c_str(), bytes / (1 << 20),
                  e.what());
    }
    std::fflush(stdout);
    rows_.push_back(r);
  }

  void copy_peer() {
    const int64_t bytes = n_ * 4;
    Buffer a(bytes), b(bytes);
    check(cudaMemset(a.p, 1, bytes), "cudaMemset");
    const double ms = time_call_ms([&] {
      check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync");
    });
    copy_gbs_ = 2.0 * bytes / (ms * 1e6);  // read + write
    std::printf("| cudaMemcpy device to device (peer) | %.0f MiB | %.3f | %.1f | 1.00 | peer |\n",
                2.0 * bytes / (1 << 20), ms, copy_gbs_);
    std::fflush(stdout);
  }

  void gemm(const std::string& name, int64_t n, double peer_tflops,
            const std::function<void()>& fn) {
    const double flops = 2.0 * n * n * n;
    Row r{name, flops, 0, 0, peer_tflops, ""};
    try {
      r.ms = time_ms(fn);
      check(cudaDeviceSynchronize(), name.c_str());
      r.rate = flops / (r.ms * 1e9);
      if (peer_tflops > 0) {
        std::printf("| %s | %.3f | %.1f | %.1f | %.2f |\n", name.c_str(), r.ms, r.rate, peer_tflops,
                    r.rate / peer_tflops);
      } else {  // the peer failed (its error is printed above)
        std::printf("| %s | %.3f | %.1f | - | - |\n", name.c_str(), r.ms, r.rate);
      }
    } catch (const std::exception& e) {
      r.error = e.what();
      std::printf("| %s | - | - | %.1f | error: %s |\n", name.c_str(), peer_tflops, e.what());
    }
    std::fflush(stdout);
    gemms_.push_back(r);
  }

  bool failed() const {
    for (const auto* v : {&rows_, &gemms_}) {
      for (const Row& r : *v) {
        if (!r.error.empty()) return true;
      }
    }
    return false;
  }

  bool write_json(const char* path, const std::string& device, int64_t gemm_n) const {
    FILE* f = std::fopen(path, "w");
    if (f == nullptr) return false;
    std::fprintf(f, "{\n  \"tool\": \"braid_gpu_kernels_bench\", \"device\": %s,\n",
                 json_text(device).c_str());
    std::fprintf(f, "  \"elements\": %lld, \"copy_gbps\": %.3f, \"goal_ratio\": %.2f,\n",
                 static_cast<long long>(n_), copy_gbs_, kGoal);
    std::fprintf(f, "  \"memory_bound\": [\n");
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      std::fprintf(
          f,
          "    {\"op\": %s, \"bytes\": %.0f, \"ms\": %.6f, \"gbps\": %.3f, \"ratio\": %.4f, "
          "\"meets_goal\": %s, \"error\": %s}%s\n",
          json_text(r.op).c_str(), r.bytes, r.ms, r.rate, r.rate / copy_gbs_,
          r.error.empty() && r.rate >= kGoal * copy_gbs_ ? "true" : "false",
          r.error.empty() ? "null" : json_text(r.error).c_str(), i + 1 < rows_.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"gemm_n\": %lld,\n  \"gemm\": [\n", static_cast<long long>(gemm_n));
    for (size_t i = 0; i < gemms_.size(); ++i) {
      const Row& r = gemms_[i];
      std::fprintf(
          f,
          "    {\"op\": %s, \"ms\": %.6f, \"tflops\": %.3f, \"cublaslt_tflops\": %.3f, "
          "\"ratio\": %.4f, \"error\": %s}%s\n",
          json_text(r.op).c_str(), r.ms, r.rate, r.peer, r.peer > 0 ? r.rate / r.peer : 0.0,
          r.error.empty() ? "null" : json_text(r.error).c_str(), i + 1 < gemms_.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    return std::fclose(f) == 0;
  }

 private:
  int64_t n_;
  double copy_gbs_ = 0;
  std::vector<Row> rows_, gemms_;
};

// The memory-bound ops of the cuda table on n elements (n a multiple of 2^20). B: bytes per
// element of f32 (4) and bf16 (2); every count is the op's inputs read once plus its outputs
// written once, whatever the kernel re-reads through the caches.
void memory_bound(Bench& bench, int64_t n) {
  const bk::KernelTable& k = bk::kernels_for(braid::DeviceType::kCUDA);
  const braid::Stream s{braid::Device(braid::DeviceType::kCUDA, 0), nullptr};
  const double f4 = 4.0 * n, f2 = 2.0 * n;  // bytes of n f32 / n bf16 values
  Buffer x(n * 4), y(n * 4), z(n * 4), h(n * 2), h2(n * 2), h3(n * 2), keep(n);
  fill_random(x.p, n * 4, false);
  fill_random(y.p, n * 4, false);
  fill_random(h.p, n * 2, false);
  fill_random(h2.p, n * 2, false);
  {
    std::vector<uint8_t> mask(n);
    std::mt19937 rng(2);
    for (auto& m : mask) m = static_cast<uint8_t>(rng() % 10 != 0);  // keep 90%
    check(cudaMemcpy(keep.p, mask.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  const int64_t shape[1] = {n}, unit[1] = {1};

  // read n f32, write n bf16
  bench.op("cast f32 -> bf16", f4 + f2,
           [&] { k.cast(s, x.p, DType::kF32, h3.p, DType::kBF16, n, bk::CastMode::kDefault); });
  // read n bf16, write n f32
  bench.op("cast bf16 -> f32", f2 + f4,
           [&] { k.cast(s, h.p, DType::kBF16, z.p, DType::kF32, n, bk::CastMode::kDefault); });
  // write n f32 (1.5 has unequal bytes: the store kernel, not cudaMemsetAsync)
  bench.op("fill f32 (1.5)", f4, [&] { k.fill(s, z.p, DType::kF32, n, 1.5); });
  // read a and b, write out: 3 n values
  bench.op("binary add f32", 3 * f4, [&] {
    k.binary(s, bk::BinaryOp::kAdd, DType::kF32, 1, shape, x.p, unit, y.p, unit, z.p);
  });
  bench.op("binary add bf16", 3 * f2, [&] {
    k.binary(s, bk::BinaryOp::kAdd, DType::kBF16, 1, shape, h.p, unit, h2.p, unit, h3.p);
  });
  // read x and y, write out
  bench.op("axpby f32", 3 * f4, [&] { k.axpby(s, DType::kF32, n, 0.5, x.p, 2.0, y.p, z.p); });
  // read x, write out
  bench.op("scale f32", 2 * f4, [&] { k.scale(s, DType::kF32, n, 0.5, x.p, z.p); });
  // read x, write out (exact gelu: erf in double, then rounded once)
  bench.op("unary gelu f32", 2 * f4,
           [&] { k.unary(s, bk::UnaryOp::kGelu, DType::kF32, n, x.p, z.p); });
  // read n values, write one: a single long row (one block of 64 lanes, the cpu's order) ...
  bench.op("reduce sum f32, 1 row of " + std::to_string(n >> 20) + " Mi", f4 + 4,
           [&] { k.reduce(s, bk::ReduceOp::kSum, DType::kF32, 1, n, 1, x.p, DType::kF32, z.p); });
  // ... and rows of 64 Ki values (one block per row), write one value per row
  const int64_t rlen = int64_t{1} << 16, rrows = n / rlen;
  bench.op("reduce sum f32, " + std::to_string(rrows) + " rows of 64 Ki", f4 + 4.0 * rrows, [&] {
    k.reduce(s, bk::ReduceOp::kSum, DType::kF32, rrows, rlen, 1, x.p, DType::kF32, z.p);
  });
  // read x, write out; rows of 4096 (a model's hidden size)
  const int64_t d = 4096, rows = n / d;
  bench.op("softmax f32, rows of 4096", 2 * f4,
           [&] { k.softmax(s, DType::kF32, rows, d, x.p, z.p, false); });
  // read x, w, b; write y, mean, rstd
  {
    Buffer w(d * 4), b(d * 4), mean(rows * 4), rstd(rows * 4);
    fill_random(w.p, d * 4, false);
    fill_random(b.p, d * 4, false);
    bench.op("layer_norm forward f32, rows of 4096", 2 * f4 + 2.0 * d * 4 + 2.0 * rows * 4, [&] {
      k.layer_norm_forward(s, DType::kF32, rows, d, x.p, w.p, b.p, 1e-5, z.p, mean.p, rstd.p);
    });
  }
  // read x (4 B) and keep (1 B), write out (4 B)
  bench.op("masked_scale f32", 2 * f4 + n,
           [&] { k.masked_scale(s, DType::kF32, n, x.p, keep.as<uint8_t>(), 1.0 / 0.9, z.p); });
  // read the n / dim rows the ids name (a permutation: each row of the table once) and the i64
  // ids, write n values
  {
    const int64_t dim = 1024, ids_n = n / dim;
    std::vector<int64_t> host(ids_n);
    std::iota(host.begin(), host.end(), int64_t{0});
    std::shuffle(host.begin(), host.end(), std::mt19937(3));
    Buffer ids(ids_n * 8);
    check(cudaMemcpy(ids.p, host.data(), ids_n * 8, cudaMemcpyHostToDevice), "cudaMemcpy");
    bench.op("embedding_forward f32, rows of 1024", 2 * f4 + 8.0 * ids_n, [&] {
      k.embedding_forward(s, DType::kF32, ids_n, dim, x.p, DType::kI64, ids.p, ids_n, z.p);
    });
  }
  // read x as the transpose of a square row-major matrix, write it dense
  {
    const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
    const int64_t tshape[2] = {side, side}, tstrides[2] = {1, side};
    const double tb = 2.0 * 4 * side * side;
    bench.op("copy_strided f32, " + std::to_string(side) + "^2 transpose", tb,
             [&] { k.copy_strided(s, x.p, 4, 2, tshape, tstrides, z.p); });
  }
}

// The table's gemm (row-major A B^T, both operands contiguous along k) against cuBLASLt
// called directly on the same operands and layout.
void gemms(Bench& bench, int64_t n) {
  const bk::KernelTable& k = bk::kernels_for(braid::DeviceType::kCUDA);
  const braid::Stream s{braid::Device(braid::DeviceType::kCUDA, 0), nullptr};
  const double flops = 2.0 * n * n * n;
  std::printf(
      "\n| GEMM %lld^3 | ms (median) | braid TFLOP/s | cuBLASLt TFLOP/s | ratio |\n"
      "|---|---|---|---|---|\n",
      static_cast<long long>(n));
  struct Case {
    const char* name;
    DType dtype;
    cudaDataType_t cuda;
  };
  for (Case c :
       {Case{"table gemm bf16 (NT, f32 accumulation, bf16 out)", DType::kBF16, CUDA_R_16BF},
        Case{"table gemm f32 (NT, TF32 off)", DType::kF32, CUDA_R_32F}}) {
    const size_t bytes = static_cast<size_t>(n * n) * braid::dtype_size(c.dtype);
    Buffer a(bytes), b(bytes), out(bytes);
    fill_random(a.p, bytes, false);
    fill_random(b.p, bytes, false);
    double peer = 0;
    try {
      peer =
          flops / (cublaslt_gemm_ms(n, c.cuda, c.cuda, CUBLAS_COMPUTE_32F, a.p, b.p, out.p) * 1e9);
    } catch (const std::exception& e) {
      std::printf("| cuBLASLt %s (peer) | - | - | - | error: %s |\n", c.name, e.what());
    }
    bk::GemmArgs g;
    g.trans_b = bk::Trans::kYes;
    g.m = g.n = g.k = n;
    g.a = a.p, g.lda = n, g.b = b.p, g.ldb = n, g.c = out.p, g.ldc = n;
    g.ab_dtype = c.dtype, g.c_dtype = c.dtype;
    bench.gemm(c.name, n, peer, [&] { k.gemm(s, g); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool probe = false, quick = false;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--probe") == 0) {
      probe = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (argv[i][0] != '-' && json == nullptr) {
      json = argv[i];
    } else {
      std::fprintf(stderr, "usage: %s [--probe] [--quick] [FILE.json]\n", argv[0]);
      return 1;
    }
  }
  int cc = 0;
  if (!describe_device(&cc)) return 2;
  if (probe) return 0;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");

  const int64_t n = quick ? int64_t{4} << 20 : int64_t{64} << 20;  // elements (f32: 4 B each)
  const int64_t gemm_n = quick ? 2048 : 8192;
  Bench bench(n);
  try {
    std::printf(
        "\n| op (%lld Mi elements) | bytes moved | ms (median) | GB/s | vs copy | goal >= %.1f |\n"
        "|---|---|---|---|---|---|\n",
        static_cast<long long>(n >> 20), kGoal);
    bench.copy_peer();
    memory_bound(bench, n);
    gemms(bench, gemm_n);
  } catch (const std::exception& e) {  // a buffer or the peer: nothing more can be measured
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::printf(
      "\nbytes moved: each input read once and each output written once (the copy: read + "
      "write); GB/s = 10^9 B/s.\n");
  if (json != nullptr && !bench.write_json(json, prop.name, gemm_n)) {
    std::fprintf(stderr, "error: cannot write %s\n", json);
    return 1;
  }
  return bench.failed() ? 1 : 0;
}
