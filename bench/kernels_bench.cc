// braid_bench_kernels: CPU kernel throughput beside a peer measured in the same run.
//   bytes/s  casts, axpby, binary add, sum, softmax   peer: memcpy of the same f32 size
//   FLOP/s   sgemm (and bf16 GEMM)                    peer: OpenBLAS sgemm, one thread
//   bytes/s  fused AdamW step (bench/run_optim.sh)    peer: memcpy, and torch.optim.AdamW
// Benchmark names end in the element count n (or the GEMM size); bench/run_kernels.sh pairs
// each braid row with its peer and prints the ratio. Everything runs on one thread.
//
// OpenBLAS picks its kernels when the library loads, before main(). On this project's CPUs
// it mistakes Zen 5 for Haswell unless OPENBLAS_CORETYPE=SkylakeX is set, so main() sets it
// (when unset and the CPU has AVX-512) and re-executes the program once.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/cpu_features.h"
#include "braid/kernels/cpu.h"
#include "braid/kernels/optim.h"

#if BRAID_BENCH_OPENBLAS
#include <cblas.h>
#endif

namespace {

namespace k = braid::kernels::cpu;
using braid::DType;

// n = 16 Ki elements (64 KiB of f32: in L2) and 16 Mi (64 MiB of f32: out of cache).
constexpr int64_t kSmall = int64_t{1} << 14;
constexpr int64_t kLarge = int64_t{1} << 24;

void bytes_args(benchmark::internal::Benchmark* b) {
  b->Arg(kSmall)->Arg(kLarge);
}

// n elements of a dtype from braid's cpu allocator (what a tensor's storage is: 64-byte
// aligned, large blocks on transparent huge pages, docs/memory.md), filled with a value
// representable in every float dtype. The memcpy peer uses the same kind of buffer.
class Buffer {
 public:
  Buffer(DType t, int64_t n, double value)
      : ptr_(braid::get_allocator(braid::Device{braid::DeviceType::kCPU, 0})
                 .allocate(static_cast<size_t>(n) * braid::dtype_size(t))) {
    k::fill(ptr_.get(), t, n, value);
  }
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_.get()); }

 private:
  braid::DataPtr ptr_;
};

Buffer buffer(DType t, int64_t n, double value) {
  return Buffer(t, n, value);
}

void memcpy_peer(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto src = buffer(DType::kF32, n, 1.0);
  auto dst = buffer(DType::kF32, n, 0.0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(n) * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);  // read + write
}
BENCHMARK(memcpy_peer)->Name("memcpy")->Apply(bytes_args);

template <DType kSrc, DType kDst>
void cast_bench(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto src = buffer(kSrc, n, 1.5);
  auto dst = buffer(kDst, n, 0.0);
  for (auto _ : state) {
    k::cast(src.data(), kSrc, dst.data(), kDst, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n *
                          static_cast<int64_t>(braid::dtype_size(kSrc) + braid::dtype_size(kDst)));
}
BENCHMARK(cast_bench<DType::kF32, DType::kBF16>)->Name("cast_f32_bf16")->Apply(bytes_args);
BENCHMARK(cast_bench<DType::kF32, DType::kF16>)->Name("cast_f32_f16")->Apply(bytes_args);
BENCHMARK(cast_bench<DType::kBF16, DType::kF32>)->Name("cast_bf16_f32")->Apply(bytes_args);
BENCHMARK(cast_bench<DType::kF32, DType::kF8E4M3>)->Name("cast_f32_f8e4m3")->Apply(bytes_args);

void axpby_bench(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = buffer(DType::kF32, n, 1.0), y = buffer(DType::kF32, n, 2.0);
  auto out = buffer(DType::kF32, n, 0.0);
  for (auto _ : state) {
    k::axpby(DType::kF32, n, 0.5, x.data(), 0.25, y.data(), out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(axpby_bench)->Name("axpby_f32")->Apply(bytes_args);

void add_bench(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto a = buffer(DType::kF32, n, 1.0), b = buffer(DType::kF32, n, 2.0);
  auto out = buffer(DType::kF32, n, 0.0);
  const int64_t shape[1] = {n}, stride[1] = {1};
  for (auto _ : state) {
    k::binary(k::BinaryOp::kAdd, DType::kF32, 1, shape, a.data(), stride, b.data(), stride,
              out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(add_bench)->Name("add_f32")->Apply(bytes_args);

template <DType kT>
void sum_bench(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto x = buffer(kT, n, 1.0);
  float out = 0;
  for (auto _ : state) {
    k::reduce(k::ReduceOp::kSum, kT, 1, n, 1, x.data(), DType::kF32, &out);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(braid::dtype_size(kT)));
}
BENCHMARK(sum_bench<DType::kF32>)->Name("sum_f32")->Apply(bytes_args);
BENCHMARK(sum_bench<DType::kBF16>)->Name("sum_bf16")->Apply(bytes_args);

// Rows of 1024, as an attention or vocabulary softmax would have.
void softmax_bench(benchmark::State& state) {
  const int64_t n = state.range(0), len = 1024;
  const auto x = buffer(DType::kF32, n, 0.5);
  auto out = buffer(DType::kF32, n, 0.0);
  for (auto _ : state) {
    k::softmax(DType::kF32, n / len, len, x.data(), out.data(), false);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(softmax_bench)->Name("softmax_f32")->Apply(bytes_args);

void gemm_args(benchmark::internal::Benchmark* b) {
  b->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);
}

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["FLOPS"] = benchmark::Counter(2.0 * static_cast<double>(n) * n * n,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

template <DType kAB>
void gemm_bench(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto a = buffer(kAB, n * n, 0.5), b = buffer(kAB, n * n, 0.25);
  std::vector<float> c(static_cast<size_t>(n * n));
  k::GemmArgs g;
  g.m = g.n = g.k = n;
  g.a = a.data(), g.lda = n, g.b = b.data(), g.ldb = n, g.c = c.data(), g.ldc = n;
  g.ab_dtype = kAB;
  g.c_dtype = DType::kF32;
  for (auto _ : state) {
    k::gemm(g);
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}
BENCHMARK(gemm_bench<DType::kF32>)->Name("sgemm_braid")->Apply(gemm_args);
BENCHMARK(gemm_bench<DType::kBF16>)->Name("gemm_bf16_braid")->Apply(gemm_args);

// ---- causal attention (cpu.h): forward + backward of one layer ----------------------------
// The tiny GPT's layer (batch 8, 4 heads) and GPT-2 small's (batch 4, 12 heads), head_dim 64,
// T = the argument. FLOPS counts the causal products once (forward q k^T and P v; backward
// dv, dP, dq, dk: 6 T^2 head_dim per head), not the recomputed scores. Compare levels with
// BRAID_CPU_ISA (amx: the products on AMX tiles; avx512bf16: f32 fma chains).
template <int64_t kBatch, int64_t kHeads>
void attention_bench(benchmark::State& state) {
  const int64_t t = state.range(0), hd = 64;
  k::AttentionArgs a;
  a.batch = kBatch;
  a.seq = t;
  a.n_head = kHeads;
  a.head_dim = hd;
  a.dtype = DType::kBF16;
  const int64_t n_qkv = kBatch * t * 3 * kHeads * hd, n_out = kBatch * t * kHeads * hd;
  const auto qkv = buffer(DType::kBF16, n_qkv, 0.01), dout = buffer(DType::kBF16, n_out, 0.5);
  const auto out = buffer(DType::kBF16, n_out, 0.0), dqkv = buffer(DType::kBF16, n_qkv, 0.0);
  for (auto _ : state) {
    k::causal_attention_forward(a, qkv.data(), out.data());
    k::causal_attention_backward(a, qkv.data(), dout.data(), dqkv.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(6.0 * static_cast<double>(kBatch * kHeads * t * t * hd),
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(attention_bench<8, 4>)
    ->Name("attention_bf16_tiny_gpt")
    ->Arg(256)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(attention_bench<4, 12>)
    ->Name("attention_bf16_gpt2_small")
    ->Arg(256)
    ->Unit(benchmark::kMillisecond);

#if BRAID_BENCH_OPENBLAS
void openblas_peer(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}
BENCHMARK(openblas_peer)->Name("sgemm_openblas")->Apply(gemm_args);
#endif

// ---- fused optimizer step (braid/kernels/optim.h; bench/run_optim.sh sets it beside torch) --

// 1 Mi elements (28 MiB touched per step: about the L3) and 64 Mi (1.75 GiB: DRAM).
void optim_args(benchmark::internal::Benchmark* b) {
  b->Arg(int64_t{1} << 20)->Arg(int64_t{1} << 26);
}
BENCHMARK(memcpy_peer)->Name("memcpy")->Apply(optim_args);

// One AdamW step, bytes counted as the step must move them: f32 param r+w 8, grad r 4,
// exp_avg and exp_avg_sq r+w 16 = 28 per element; bf16 param w 2, f32 master r+w 8, bf16 grad
// r 2, states 16 = 28. The parameter's dtype is the gradient's.
template <DType kParam, bool kMaster, int kThreads = 1>
void adamw_bench(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto param = buffer(kParam, n, 1.0), master = buffer(DType::kF32, kMaster ? n : 0, 1.0);
  auto m = buffer(DType::kF32, n, 0.0), v = buffer(DType::kF32, n, 0.0);
  const auto grad = buffer(kParam, n, 0.5);
  braid::kernels::OptimStep step;
  step.algo = braid::kernels::OptimAlgo::kAdamW;
  step.weight_decay = 0.01;
  step.param_dtype = step.grad_dtype = kParam;
  braid::kernels::OptimTensor t;
  t.n = n;
  t.param = param.data(), t.grad = grad.data();
  t.master = kMaster ? reinterpret_cast<float*>(master.data()) : nullptr;
  t.state0 = reinterpret_cast<float*>(m.data()), t.state1 = reinterpret_cast<float*>(v.data());
  for (auto _ : state) {
    if (kThreads == 1) {
      k::optimizer_step(step, &t, 1);
    } else {
      k::optimizer_step_threaded(step, &t, 1, kThreads);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 28);
}
BENCHMARK(adamw_bench<DType::kF32, false>)->Name("adamw_f32")->Apply(optim_args);
BENCHMARK(adamw_bench<DType::kBF16, true>)->Name("adamw_bf16_master")->Apply(optim_args);
// Both cores, as torch's AdamW runs with torch.set_num_threads(2) beside it.
BENCHMARK(adamw_bench<DType::kF32, false, 2>)
    ->Name("adamw_f32_2threads")
    ->Apply(optim_args)
    ->UseRealTime();
BENCHMARK(adamw_bench<DType::kBF16, true, 2>)
    ->Name("adamw_bf16_master_2threads")
    ->Apply(optim_args)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && braid::cpu_features().avx512) {
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
#if BRAID_BENCH_OPENBLAS
  openblas_set_num_threads(1);
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
#endif
  benchmark::AddCustomContext("braid_isa",
                              std::string(braid::cpu_isa_name(braid::cpu_active_isa())));
  benchmark::AddCustomContext("cpu", braid::cpu_features().brand);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
