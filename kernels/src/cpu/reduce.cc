// reduce(): argument checks, the scalar reference of Note [Reduction lanes] (reduce_impl.h),
// integer reductions, and the finalisation (mean, sqrt, rounding to out_dtype) shared by every
// SIMD path. The SIMD paths produce raw accumulators only, so finalisation is one code path.
#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "isa_dispatch.h"
#include "reduce_impl.h"

namespace braid::kernels::cpu {
namespace scalar {
namespace {

template <typename T, typename Acc>
Acc widen(T v) {
  return static_cast<Acc>(static_cast<float>(v));
}
template <>
double widen<double, double>(double v) {
  return v;
}

// inner == 1: kLanes<Acc> lanes, element k into lane k % kLanes, then the halving fold.
template <AccOp kOp, typename Acc, typename T>
Acc reduce_run(const T* x, int64_t len) {
  constexpr int L = kLanes<Acc>;
  Acc lanes[L];
  for (Acc& lane : lanes) lane = lane_identity<kOp, Acc>();
  for (int64_t k = 0; k < len; ++k) {
    lanes[k % L] = lane_step<kOp>(lanes[k % L], widen<T, Acc>(x[k]));
  }
  return fold_lanes<kOp>(lanes, L);
}

// inner > 1: column i accumulates x[0, i], x[1, i], ... in order.
template <AccOp kOp, typename Acc, typename T>
void reduce_columns(const T* x, int64_t len, int64_t inner, Acc* out) {
  for (int64_t i = 0; i < inner; ++i) out[i] = lane_identity<kOp, Acc>();
  for (int64_t k = 0; k < len; ++k) {
    const T* row = x + k * inner;
    for (int64_t i = 0; i < inner; ++i) out[i] = lane_step<kOp>(out[i], widen<T, Acc>(row[i]));
  }
}

template <AccOp kOp, typename Acc, typename T>
void reduce_typed(const ReduceJob& job) {
  const T* x = static_cast<const T*>(job.x);
  Acc* out = static_cast<Acc*>(job.out);
  for (int64_t o = 0; o < job.outer; ++o) {
    const T* base = x + o * job.len * job.inner;
    if (job.inner == 1) {
      out[o] = reduce_run<kOp, Acc>(base, job.len);
    } else {
      reduce_columns<kOp, Acc>(base, job.len, job.inner, out + o * job.inner);
    }
  }
}

template <typename Acc, typename T>
void reduce_op(const ReduceJob& job) {
  switch (job.op) {
    case AccOp::kSum:
      return reduce_typed<AccOp::kSum, Acc, T>(job);
    case AccOp::kSumSq:
      return reduce_typed<AccOp::kSumSq, Acc, T>(job);
    case AccOp::kMax:
      return reduce_typed<AccOp::kMax, Acc, T>(job);
    case AccOp::kMin:
      return reduce_typed<AccOp::kMin, Acc, T>(job);
  }
}

template <typename Acc>
void reduce_acc(const ReduceJob& job) {
  switch (job.dtype) {
    case DType::kF64:
      if constexpr (sizeof(Acc) == 8) reduce_op<Acc, double>(job);
      return;
    case DType::kF32:
      return reduce_op<Acc, float>(job);
    case DType::kF16:
      return reduce_op<Acc, half>(job);
    case DType::kBF16:
      return reduce_op<Acc, bfloat16>(job);
    default:
      return;
  }
}

}  // namespace

void reduce(const ReduceJob& job) {
  if (job.acc_f64) {
    reduce_acc<double>(job);
  } else {
    reduce_acc<float>(job);
  }
}

}  // namespace scalar

namespace {

constexpr IsaTable<ReduceFn> kReduce{scalar::reduce, avx2::reduce, avx512::reduce, nullptr};

const char* op_name(ReduceOp op) {
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

AccOp acc_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return AccOp::kSum;
    case ReduceOp::kMax:
      return AccOp::kMax;
    case ReduceOp::kMin:
      return AccOp::kMin;
    case ReduceOp::kNormL2:
      return AccOp::kSumSq;
  }
  return AccOp::kSum;
}

template <typename Acc>
Acc finalise(ReduceOp op, Acc acc, int64_t len) {
  if (op == ReduceOp::kMean) return acc / static_cast<Acc>(len);
  if (op == ReduceOp::kNormL2) return std::sqrt(acc);
  return acc;
}

template <typename Acc>
void store_out(const Acc* acc, int64_t n, DType out_dtype, void* out) {
  switch (out_dtype) {
    case DType::kF64: {
      auto* o = static_cast<double*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<double>(acc[i]);
      return;
    }
    case DType::kF32: {
      auto* o = static_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(acc[i]);
      return;
    }
    case DType::kF16: {
      auto* o = static_cast<half*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = half(static_cast<float>(acc[i]));
      return;
    }
    case DType::kBF16: {
      auto* o = static_cast<bfloat16*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = bfloat16(static_cast<float>(acc[i]));
      return;
    }
    default:
      BRAID_ASSERT(false, "reduce: unexpected out_dtype ", out_dtype);
  }
}

// Runs the float reduction in chunks of whole outer rows, so the raw accumulator buffer stays
// small (about 4096 values) whatever the output size.
template <typename Acc>
void reduce_float(ReduceOp op, DType dtype, int64_t outer, int64_t len, int64_t inner,
                  const void* x, DType out_dtype, void* out) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, 4096 / inner);
  std::vector<Acc> acc(static_cast<size_t>(std::min(outer, rows_per_chunk) * inner));
  const ReduceFn fn = kReduce.get();
  const auto* xb = static_cast<const char*>(x);
  auto* ob = static_cast<char*>(out);
  for (int64_t o = 0; o < outer; o += rows_per_chunk) {
    const int64_t rows = std::min(rows_per_chunk, outer - o);
    const int64_t n = rows * inner;
    if (len == 0) {
      for (int64_t i = 0; i < n; ++i) acc[i] = Acc(0);
    } else {
      const ReduceJob job{
          acc_op(op), dtype,
          rows,       len,
          inner,      xb + o * len * inner * static_cast<int64_t>(dtype_size(dtype)),
          acc.data(), sizeof(Acc) == 8};
      fn(job);
    }
    for (int64_t i = 0; i < n; ++i) acc[i] = finalise(op, acc[i], len);
    store_out(acc.data(), n, out_dtype,
              ob + o * inner * static_cast<int64_t>(dtype_size(out_dtype)));
  }
}

// Integer sum (wrapping, two's complement, as torch), max and min; exact, so one order serves
// every ISA level.
template <typename T>
void reduce_int(ReduceOp op, int64_t outer, int64_t len, int64_t inner, const T* x, DType out_dtype,
                void* out) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const T* p = x + o * len * inner + i;
      uint64_t sum = 0;
      T best = len > 0 ? p[0] : T(0);
      for (int64_t k = 0; k < len; ++k) {
        const T v = p[k * inner];
        sum += static_cast<uint64_t>(static_cast<int64_t>(v));
        if (op == ReduceOp::kMax ? v > best : v < best) best = v;
      }
      const int64_t r =
          op == ReduceOp::kSum ? static_cast<int64_t>(sum) : static_cast<int64_t>(best);
      if (out_dtype == DType::kI64) {
        static_cast<int64_t*>(out)[o * inner + i] = r;
      } else {
        static_cast<T*>(out)[o * inner + i] = static_cast<T>(r);
      }
    }
  }
}

bool is_reduce_float(DType t) {
  return t == DType::kF64 || t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

void check_float_out(ReduceOp op, DType dtype, DType out_dtype) {
  const bool ok = out_dtype == dtype || out_dtype == DType::kF64 ||
                  (out_dtype == DType::kF32 && dtype != DType::kF64);
  BRAID_CHECK(ok, kInvalidArgument, "reduce(", op_name(op), "): out_dtype ", out_dtype,
              " for input ", dtype, "; expected the input dtype or a wider float (f32, f64)");
}

void check_int(ReduceOp op, DType dtype, DType out_dtype) {
  BRAID_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kMin, kNotSupported,
              "reduce(", op_name(op), ") on integer dtype ", dtype,
              ": only sum, max and min are supported for i64 / i32");
  BRAID_CHECK(out_dtype == dtype || out_dtype == DType::kI64, kInvalidArgument, "reduce(",
              op_name(op), "): out_dtype ", out_dtype, " for input ", dtype, "; expected ", dtype,
              " or i64");
}

}  // namespace

void reduce(ReduceOp op, DType dtype, int64_t outer, int64_t len, int64_t inner, const void* x,
            DType out_dtype, void* out) {
  BRAID_CHECK(static_cast<int>(op) <= static_cast<int>(ReduceOp::kNormL2), kInvalidArgument,
              "reduce: op ", static_cast<int>(op), " is not a ReduceOp");
  BRAID_CHECK(outer >= 0 && len >= 0 && inner >= 0, kInvalidArgument, "reduce(", op_name(op),
              "): shape [outer ", outer, ", len ", len, ", inner ", inner,
              "] must not be negative");
  const bool is_int = dtype == DType::kI64 || dtype == DType::kI32;
  BRAID_CHECK(is_reduce_float(dtype) || is_int, kNotSupported, "reduce(", op_name(op), "): dtype ",
              dtype, " is not supported; expected f64, f32, f16, bf16, i64 or i32");
  if (is_int) {
    check_int(op, dtype, out_dtype);
  } else {
    check_float_out(op, dtype, out_dtype);
  }
  BRAID_CHECK(len > 0 || (op != ReduceOp::kMax && op != ReduceOp::kMin), kInvalidArgument,
              "reduce(", op_name(op), "): len is 0; max / min of an empty axis are undefined");
  if (outer == 0 || inner == 0) return;
  BRAID_CHECK(out != nullptr && (len == 0 || x != nullptr), kInvalidArgument, "reduce(",
              op_name(op), "): null pointer (x ", x, ", out ", out, ") for a non-empty reduction");
  if (dtype == DType::kI64) {
    return reduce_int(op, outer, len, inner, static_cast<const int64_t*>(x), out_dtype, out);
  }
  if (dtype == DType::kI32) {
    return reduce_int(op, outer, len, inner, static_cast<const int32_t*>(x), out_dtype, out);
  }
  if (dtype == DType::kF64 || out_dtype == DType::kF64) {
    reduce_float<double>(op, dtype, outer, len, inner, x, out_dtype, out);
  } else {
    reduce_float<float>(op, dtype, outer, len, inner, x, out_dtype, out);
  }
}

}  // namespace braid::kernels::cpu
