// reduce and softmax of the cuda kernel table.
//
// reduce reproduces the cpu's order exactly (docs/reductions-and-gemm.md, "Reduction order"),
// so its results have the cpu's bits on every input (NaN payloads aside):
//   - inner == 1: one block of L threads per output (L = 64 lanes for an f32 accumulator, 32 for
//     f64): thread l is lane l and adds elements l, l + L, ... in order, then the lanes fold by
//     halving in shared memory, as Note [Reduction lanes] writes it;
//   - inner > 1: one thread per output column, adding x[o, 0, i], x[o, 1, i], ... in order;
//   - integers (i64, i32): one thread per output, wrapping sums, exact.
// The cost of that order: a single long run is only L-way parallel (about 2 ms for 2^20
// elements); reductions with many outputs fill the GPU.
//
// softmax: one block of 256 threads per row, three passes (max, sum of exp, output) with the
// sums folded by a fixed tree (Note [Fixed reduction trees] in launch.h): the same bits on every
// run, but not the cpu's (its row sum is sequential and CUDA's expf is within 2 ulp where the
// cpu's is within 1): docs/gpu.md gives the tolerance.
#include <cstdint>

#include "braid/core/error.h"
#include "cast_math.h"
#include "launch.h"
#include "table_ops.h"

namespace braid::kernels::cuda::table_ops {
namespace {

using math::Bits;
using math::Compute;

enum class AccOp : uint8_t { kSum, kSumSq, kMax, kMin };

template <AccOp kOp, typename Acc>
__device__ inline Acc lane_identity() {
  if constexpr (kOp == AccOp::kMax) return -INFINITY;
  if constexpr (kOp == AccOp::kMin) return INFINITY;
  return Acc(0);
}

// The cpu's lane_step / lane_combine (reduce_impl.h): the sum of squares is one fused
// multiply-add; max / min take x when greater (less) or NaN.
template <AccOp kOp, typename Acc>
__device__ inline Acc lane_step(Acc acc, Acc x) {
  if constexpr (kOp == AccOp::kSum) return acc + x;
  if constexpr (kOp == AccOp::kSumSq) {
    if constexpr (sizeof(Acc) == 4) {
      return fmaf(x, x, acc);
    } else {
      return fma(x, x, acc);
    }
  }
  if constexpr (kOp == AccOp::kMax) return (x > acc || x != x) ? x : acc;
  if constexpr (kOp == AccOp::kMin) return (x < acc || x != x) ? x : acc;
}

template <AccOp kOp, typename Acc>
__device__ inline Acc lane_combine(Acc a, Acc b) {
  if constexpr (kOp == AccOp::kSum || kOp == AccOp::kSumSq) return a + b;
  if constexpr (kOp == AccOp::kMax) return (b > a || b != b) ? b : a;
  if constexpr (kOp == AccOp::kMin) return (b < a || b != b) ? b : a;
}

// Finalisation (reduce.cc): mean divides by len, norm takes the square root; rounded once.
template <DType O, typename Acc>
__device__ inline void finalise_store(ReduceOp op, Acc acc, int64_t len, Bits<O>* out, int64_t i) {
  if (op == ReduceOp::kMean) acc = acc / static_cast<Acc>(len);
  if (op == ReduceOp::kNormL2) acc = sqrt(acc);
  if constexpr (O == DType::kF64) {
    out[i] = static_cast<double>(acc);
  } else {
    math::store<O>(out, i, static_cast<float>(acc));
  }
}

template <typename Acc>
inline constexpr int kLanes = sizeof(Acc) == 4 ? 64 : 32;

template <AccOp kOp, typename Acc, DType D, DType O>
__global__ void __launch_bounds__(kLanes<Acc>)
    reduce_run_kernel(ReduceOp op, int64_t outer, int64_t len, const Bits<D>* x, Bits<O>* out) {
  constexpr int L = kLanes<Acc>;
  __shared__ Acc lanes[L];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const Bits<D>* row = x + o * len;
    Acc acc = lane_identity<kOp, Acc>();
    for (int64_t k = threadIdx.x; k < len; k += L) {
      acc = lane_step<kOp>(acc, static_cast<Acc>(math::load<D>(row, k)));
    }
    const Acc r =
        detail::block_fold<L>(acc, lanes, [](Acc a, Acc b) { return lane_combine<kOp>(a, b); });
    if (threadIdx.x == 0) finalise_store<O>(op, r, len, out, o);
  }
}

template <AccOp kOp, typename Acc, DType D, DType O>
__global__ void reduce_columns_kernel(ReduceOp op, int64_t outer, int64_t len, int64_t inner,
                                      const Bits<D>* x, Bits<O>* out) {
  for (int64_t j = detail::global_thread(); j < outer * inner; j += detail::grid_threads()) {
    const int64_t o = j / inner, i = j % inner;
    const Bits<D>* col = x + o * len * inner + i;
    Acc acc = lane_identity<kOp, Acc>();
    for (int64_t k = 0; k < len; ++k) {
      acc = lane_step<kOp>(acc, static_cast<Acc>(math::load<D>(col, k * inner)));
    }
    finalise_store<O>(op, acc, len, out, j);
  }
}

template <typename T>
__global__ void reduce_int_kernel(ReduceOp op, int64_t outer, int64_t len, int64_t inner,
                                  const T* x, bool out_i64, void* out) {
  for (int64_t j = detail::global_thread(); j < outer * inner; j += detail::grid_threads()) {
    const int64_t o = j / inner, i = j % inner;
    const T* p = x + o * len * inner + i;
    uint64_t sum = 0;
    T best = len > 0 ? p[0] : T(0);
    for (int64_t k = 0; k < len; ++k) {
      const T v = p[k * inner];
      sum += static_cast<uint64_t>(static_cast<int64_t>(v));
      if (op == ReduceOp::kMax ? v > best : v < best) best = v;
    }
    const int64_t r = op == ReduceOp::kSum ? static_cast<int64_t>(sum) : static_cast<int64_t>(best);
    if (out_i64) {
      static_cast<int64_t*>(out)[j] = r;
    } else {
      static_cast<T*>(out)[j] = static_cast<T>(r);
    }
  }
}

template <AccOp kOp, typename Acc, DType D, DType O>
void launch_reduce(ReduceOp op, int64_t outer, int64_t len, int64_t inner, const void* x, void* out,
                   cudaStream_t st) {
  const auto* px = static_cast<const Bits<D>*>(x);
  auto* po = static_cast<Bits<O>*>(out);
  if (inner == 1) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(outer, int64_t{1} << 30));
    reduce_run_kernel<kOp, Acc, D, O><<<blocks, kLanes<Acc>, 0, st>>>(op, outer, len, px, po);
  } else {
    reduce_columns_kernel<kOp, Acc, D, O>
        <<<detail::blocks_for(outer * inner), detail::kThreads, 0, st>>>(op, outer, len, inner, px,
                                                                         po);
  }
}

template <typename Acc, DType D, DType O>
void reduce_float(ReduceOp op, int64_t outer, int64_t len, int64_t inner, const void* x, void* out,
                  cudaStream_t st) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return launch_reduce<AccOp::kSum, Acc, D, O>(op, outer, len, inner, x, out, st);
    case ReduceOp::kNormL2:
      return launch_reduce<AccOp::kSumSq, Acc, D, O>(op, outer, len, inner, x, out, st);
    case ReduceOp::kMax:
      return launch_reduce<AccOp::kMax, Acc, D, O>(op, outer, len, inner, x, out, st);
    case ReduceOp::kMin:
      return launch_reduce<AccOp::kMin, Acc, D, O>(op, outer, len, inner, x, out, st);
  }
}

// Picks the accumulator (f64 for f64 input or output, else f32) and the output dtype.
template <DType D>
void reduce_dispatch(ReduceOp op, int64_t outer, int64_t len, int64_t inner, const void* x,
                     DType out_dtype, void* out, cudaStream_t st) {
  if (out_dtype == DType::kF64) {
    return reduce_float<double, D, DType::kF64>(op, outer, len, inner, x, out, st);
  }
  if constexpr (D == DType::kF64) {
    return;  // checked: f64 input has f64 output
  } else if (out_dtype == DType::kF32) {
    return reduce_float<float, D, DType::kF32>(op, outer, len, inner, x, out, st);
  } else {
    return reduce_float<float, D, D>(op, outer, len, inner, x, out, st);
  }
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kNormL2:
      return "norm_l2";
  }
  return "?";
}

// ---- softmax --------------------------------------------------------------------------------

constexpr int kSoftmaxThreads = 256;

template <typename Acc>
__device__ inline Acc exp_acc(Acc x) {
  if constexpr (sizeof(Acc) == 4) {
    return expf(x);
  } else {
    return exp(x);
  }
}
template <typename Acc>
__device__ inline Acc log_acc(Acc x) {
  if constexpr (sizeof(Acc) == 4) {
    return logf(x);
  } else {
    return log(x);
  }
}

template <DType D>
__global__ void __launch_bounds__(kSoftmaxThreads)
    softmax_kernel(int64_t rows, int64_t len, const Bits<D>* x, Bits<D>* out, bool log) {
  using Acc = Compute<D>;
  __shared__ Acc smem[kSoftmaxThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const Bits<D>* xr = x + r * len;
    Bits<D>* orow = out + r * len;
    Acc m = -INFINITY;
    for (int64_t k = threadIdx.x; k < len; k += kSoftmaxThreads) {
      m = detail::max_nan(m, math::load<D>(xr, k));
    }
    m = detail::block_fold<kSoftmaxThreads>(m, smem,
                                            [](Acc a, Acc b) { return detail::max_nan(a, b); });
    Acc sum = 0;
    for (int64_t k = threadIdx.x; k < len; k += kSoftmaxThreads) {
      sum += exp_acc(math::load<D>(xr, k) - m);
    }
    // Every read of the row is done once the fold returns: out may alias x.
    sum = detail::block_fold<kSoftmaxThreads>(sum, smem, [](Acc a, Acc b) { return a + b; });
    const Acc log_sum = log ? log_acc(sum) : Acc(0);
    for (int64_t k = threadIdx.x; k < len; k += kSoftmaxThreads) {
      const Acc z = math::load<D>(xr, k) - m;
      math::store<D>(orow, k, log ? z - log_sum : exp_acc(z) / sum);
    }
  }
}

}  // namespace

void reduce(Stream s, ReduceOp op, DType dtype, int64_t outer, int64_t len, int64_t inner,
            const void* x, DType out_dtype, void* out) {
  BRAID_CHECK(static_cast<int>(op) <= static_cast<int>(ReduceOp::kNormL2), kInvalidArgument,
              "reduce: op ", static_cast<int>(op), " is not a ReduceOp");
  const char* name = reduce_name(op);
  BRAID_CHECK(outer >= 0 && len >= 0 && inner >= 0, kInvalidArgument, "reduce(", name,
              "): shape [outer ", outer, ", len ", len, ", inner ", inner,
              "] must not be negative");
  const bool is_int = dtype == DType::kI64 || dtype == DType::kI32;
  const bool is_flt =
      dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
  BRAID_CHECK(is_flt || is_int, kNotSupported, "reduce(", name, "): dtype ", dtype,
              " is not supported; expected f64, f32, f16, bf16, i64 or i32");
  if (is_int) {
    BRAID_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kMin, kNotSupported,
                "reduce(", name, ") on integer dtype ", dtype,
                ": only sum, max and min are supported for i64 / i32");
    BRAID_CHECK(out_dtype == dtype || out_dtype == DType::kI64, kInvalidArgument, "reduce(", name,
                "): out_dtype ", out_dtype, " for input ", dtype, "; expected ", dtype, " or i64");
  } else {
    const bool ok = out_dtype == dtype || out_dtype == DType::kF64 ||
                    (out_dtype == DType::kF32 && dtype != DType::kF64);
    BRAID_CHECK(ok, kInvalidArgument, "reduce(", name, "): out_dtype ", out_dtype, " for input ",
                dtype, "; expected the input dtype or a wider float (f32, f64)");
  }
  BRAID_CHECK(len > 0 || (op != ReduceOp::kMax && op != ReduceOp::kMin), kInvalidArgument,
              "reduce(", name, "): len is 0; max / min of an empty axis are undefined");
  if (outer == 0 || inner == 0) return;
  BRAID_CHECK(out != nullptr && (len == 0 || x != nullptr), kInvalidArgument, "reduce(", name,
              "): null pointer (x ", x, ", out ", out, ") for a non-empty reduction");
  const cudaStream_t st = detail::stream_of(s);
  const unsigned blocks = detail::blocks_for(outer * inner);
  const bool out_i64 = out_dtype == DType::kI64;
  if (dtype == DType::kI64) {
    reduce_int_kernel<int64_t><<<blocks, detail::kThreads, 0, st>>>(
        op, outer, len, inner, static_cast<const int64_t*>(x), out_i64, out);
  } else if (dtype == DType::kI32) {
    reduce_int_kernel<int32_t><<<blocks, detail::kThreads, 0, st>>>(
        op, outer, len, inner, static_cast<const int32_t*>(x), out_i64, out);
  } else {
    detail::visit_float(dtype, [&](auto tag) {
      reduce_dispatch<decltype(tag)::value>(op, outer, len, inner, x, out_dtype, out, st);
    });
  }
  detail::check_launch("reduce");
}

void softmax(Stream s, DType dtype, int64_t rows, int64_t len, const void* x, void* out, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  BRAID_CHECK(rows >= 0 && len >= 0, kInvalidArgument, name, ": shape [rows ", rows, ", len ", len,
              "] must not be negative");
  BRAID_CHECK(
      dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
      kNotSupported, name, ": dtype ", dtype, " is not supported; expected f64, f32, f16 or bf16");
  if (rows == 0 || len == 0) return;
  BRAID_CHECK(x != nullptr && out != nullptr, kInvalidArgument, name, ": null pointer (x ", x,
              ", out ", out, ") for ", rows, " x ", len, " elements");
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 30));
  detail::visit_float(dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    softmax_kernel<D><<<blocks, kSoftmaxThreads, 0, detail::stream_of(s)>>>(
        rows, len, static_cast<const Bits<D>*>(x), static_cast<Bits<D>*>(out), log);
  });
  detail::check_launch(name);
}

}  // namespace braid::kernels::cuda::table_ops
