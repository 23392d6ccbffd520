// The SIMD reduction and softmax algorithms, written once over a vector "Ops" type that each
// ISA file (reduce_avx2.cc, reduce_avx512.cc) defines with its intrinsics. Include only from
// those files. The lane layout and fold order are Note [Reduction lanes] in reduce_impl.h.
//
// Ops (one per accumulator type Acc = float or double) provides:
//   V, W (lanes per register), set1, load (Acc*), load_cvt<T> (W elements of T widened to
//   Acc, exact), store, add, sub, mul, fma(a, b, c) = a * b + c with one rounding,
//   max_nan / min_nan (the lane_step predicate of reduce_impl.h), and for float only the
//   pieces of vexp below.
#pragma once

#include <cstring>

#include "reduce_impl.h"

namespace braid::kernels::cpu {
namespace {

template <AccOp kOp, typename Ops, typename V>
inline V vec_step(V acc, V x) {
  if constexpr (kOp == AccOp::kSum) return Ops::add(acc, x);
  if constexpr (kOp == AccOp::kSumSq) return Ops::fma(x, x, acc);
  if constexpr (kOp == AccOp::kMax) return Ops::max_nan(acc, x);
  if constexpr (kOp == AccOp::kMin) return Ops::min_nan(acc, x);
}

template <AccOp kOp, typename Ops, typename V>
inline V vec_combine(V a, V b) {
  if constexpr (kOp == AccOp::kSum || kOp == AccOp::kSumSq) return Ops::add(a, b);
  if constexpr (kOp == AccOp::kMax) return Ops::max_nan(a, b);
  if constexpr (kOp == AccOp::kMin) return Ops::min_nan(a, b);
}

// The identity of kOp stored as a T (sum: +0; max: -Inf; min: +Inf), for padding partial
// blocks so that every load is a full vector.
template <AccOp kOp, typename T>
inline constexpr T padding_value() {
  if constexpr (kOp == AccOp::kMax) return T(-INFINITY);
  if constexpr (kOp == AccOp::kMin) return T(INFINITY);
  return T(0.0f);
}

// Copies n < N elements of src into a block of N padded with kOp's identity.
template <AccOp kOp, typename T, int N>
inline void pad_block(const T* src, int64_t n, T (&block)[N]) {
  constexpr T pad = padding_value<kOp, T>();
  for (int i = 0; i < N; ++i) block[i] = pad;
  std::memcpy(block, src, static_cast<size_t>(n) * sizeof(T));
}

// inner == 1: one contiguous run, kLanes<Acc> lanes in NV registers, then the halving fold.
template <AccOp kOp, typename Ops, typename T>
typename Ops::Acc reduce_run(const T* x, int64_t len) {
  using Acc = typename Ops::Acc;
  using V = typename Ops::V;
  constexpr int L = kLanes<Acc>;
  constexpr int NV = L / Ops::W;
  V acc[NV];
  for (int j = 0; j < NV; ++j) acc[j] = Ops::set1(lane_identity<kOp, Acc>());
  int64_t k = 0;
  for (; k + L <= len; k += L) {
    for (int j = 0; j < NV; ++j) {
      acc[j] = vec_step<kOp, Ops>(acc[j], Ops::template load_cvt<T>(x + k + j * Ops::W));
    }
  }
  if (k < len) {
    T block[L];
    pad_block<kOp>(x + k, len - k, block);
    for (int j = 0; j < NV; ++j) {
      acc[j] = vec_step<kOp, Ops>(acc[j], Ops::template load_cvt<T>(block + j * Ops::W));
    }
  }
  for (int h = NV / 2; h >= 1; h /= 2) {
    for (int j = 0; j < h; ++j) acc[j] = vec_combine<kOp, Ops>(acc[j], acc[j + h]);
  }
  Acc lanes[Ops::W];
  Ops::store(lanes, acc[0]);
  return fold_lanes<kOp>(lanes, Ops::W);
}

// inner > 1: each output column accumulates sequentially over len; vectorised across columns.
template <AccOp kOp, typename Ops, typename T>
void reduce_columns(const T* x, int64_t len, int64_t inner, typename Ops::Acc* out) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  constexpr int U = 4;
  const V id = Ops::set1(lane_identity<kOp, typename Ops::Acc>());
  int64_t i = 0;
  for (; i + U * W <= inner; i += U * W) {
    V acc[U] = {id, id, id, id};
    for (int64_t k = 0; k < len; ++k) {
      const T* row = x + k * inner + i;
      for (int u = 0; u < U; ++u) {
        acc[u] = vec_step<kOp, Ops>(acc[u], Ops::template load_cvt<T>(row + u * W));
      }
    }
    for (int u = 0; u < U; ++u) Ops::store(out + i + u * W, acc[u]);
  }
  for (; i < inner; i += W) {
    const int64_t n = inner - i < W ? inner - i : W;
    V acc = id;
    for (int64_t k = 0; k < len; ++k) {
      const T* row = x + k * inner + i;
      if (n == W) {
        acc = vec_step<kOp, Ops>(acc, Ops::template load_cvt<T>(row));
      } else {
        T block[W];
        pad_block<kOp>(row, n, block);
        acc = vec_step<kOp, Ops>(acc, Ops::template load_cvt<T>(block));
      }
    }
    typename Ops::Acc tmp[W];
    Ops::store(tmp, acc);
    std::memcpy(out + i, tmp, static_cast<size_t>(n) * sizeof(tmp[0]));
  }
}

template <AccOp kOp, typename Ops, typename T>
void reduce_typed(const ReduceJob& job) {
  using Acc = typename Ops::Acc;
  const T* x = static_cast<const T*>(job.x);
  Acc* out = static_cast<Acc*>(job.out);
  for (int64_t o = 0; o < job.outer; ++o) {
    const T* base = x + o * job.len * job.inner;
    if (job.inner == 1) {
      out[o] = reduce_run<kOp, Ops>(base, job.len);
    } else {
      reduce_columns<kOp, Ops>(base, job.len, job.inner, out + o * job.inner);
    }
  }
}

template <typename Ops, typename T>
void reduce_op(const ReduceJob& job) {
  switch (job.op) {
    case AccOp::kSum:
      return reduce_typed<AccOp::kSum, Ops, T>(job);
    case AccOp::kSumSq:
      return reduce_typed<AccOp::kSumSq, Ops, T>(job);
    case AccOp::kMax:
      return reduce_typed<AccOp::kMax, Ops, T>(job);
    case AccOp::kMin:
      return reduce_typed<AccOp::kMin, Ops, T>(job);
  }
}

// The per-ISA reduce(): picks the accumulator and the input type. f64 input always has
// acc_f64 (checked in reduce.cc).
template <typename OpsF, typename OpsD>
void reduce_dispatch(const ReduceJob& job) {
  if (job.acc_f64) {
    switch (job.dtype) {
      case DType::kF64:
        return reduce_op<OpsD, double>(job);
      case DType::kF32:
        return reduce_op<OpsD, float>(job);
      case DType::kF16:
        return reduce_op<OpsD, half>(job);
      case DType::kBF16:
        return reduce_op<OpsD, bfloat16>(job);
      default:
        return;
    }
  }
  switch (job.dtype) {
    case DType::kF32:
      return reduce_op<OpsF, float>(job);
    case DType::kF16:
      return reduce_op<OpsF, half>(job);
    case DType::kBF16:
      return reduce_op<OpsF, bfloat16>(job);
    default:
      return;
  }
}

// ---- exp -----------------------------------------------------------------------------------

// Note [Vector exp]: Cephes expf. n = round(x log2 e); r = x - n ln 2 in two parts (the high
// part has few bits, so n * C1 is exact); e^r by a degree-7 polynomial on |r| <= ln2 / 2;
// then times 2^n, applied as two factors so that results down to the subnormal range are
// right. Measured against exp in double on every 7th f32 in [-87.33, 88.72]: at most 1.25 ulp
// (docs/reductions-and-gemm.md). x < -104 (and -Inf) gives +0, x > ln(FLT_MAX) gives +Inf,
// NaN gives NaN. Needs from Ops: clamp, round, scale2 (y * 2^n) and special (the fix-ups).
template <typename Ops>
inline typename Ops::V vexp(typename Ops::V x) {
  using V = typename Ops::V;
  const V xc = Ops::clamp(x, -104.0f, 88.72283935546875f);
  const V n = Ops::round(Ops::mul(xc, Ops::set1(1.44269504088896341f)));
  V r = Ops::fma(n, Ops::set1(-0.693359375f), xc);
  r = Ops::fma(n, Ops::set1(2.12194440e-4f), r);
  V p = Ops::set1(1.9875691500e-4f);
  p = Ops::fma(p, r, Ops::set1(1.3981999507e-3f));
  p = Ops::fma(p, r, Ops::set1(8.3334519073e-3f));
  p = Ops::fma(p, r, Ops::set1(4.1665795894e-2f));
  p = Ops::fma(p, r, Ops::set1(1.6666665459e-1f));
  p = Ops::fma(p, r, Ops::set1(5.0000001201e-1f));
  const V y = Ops::fma(p, Ops::mul(r, r), Ops::add(r, Ops::set1(1.0f)));
  return Ops::special(x, Ops::scale2(y, n), -104.0f);
}

// ---- softmax -------------------------------------------------------------------------------

// Softmax of one f32 row: max (NaN wins), then sum of exp(x - max), then scale (or, for
// log-softmax, x - max - log(sum)). A partial last block is padded with -Inf, whose exp is 0
// (a masked load: a padded copy on the stack read back as a vector costs a store-forwarding
// stall, and attention's causal rows, of every length, almost always have one).
template <typename Ops>
void softmax_row_simd(const float* x, float* out, int64_t len, bool log) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  const int64_t full = len / W * W;
  const int64_t rest = len - full;
  const V tail = rest > 0 ? Ops::load_tail(x + full, rest, -INFINITY) : Ops::set1(-INFINITY);

  // Four independent maxima: one would wait on the compare-blend latency every vector.
  V mx[4] = {Ops::set1(-INFINITY), Ops::set1(-INFINITY), Ops::set1(-INFINITY),
             Ops::set1(-INFINITY)};
  int64_t k0 = 0;
  for (; k0 + 4 * W <= full; k0 += 4 * W) {
    for (int u = 0; u < 4; ++u) mx[u] = Ops::max_nan(mx[u], Ops::load(x + k0 + u * W));
  }
  V vmax = Ops::max_nan(Ops::max_nan(mx[0], mx[1]), Ops::max_nan(mx[2], mx[3]));
  for (int64_t k = k0; k < full; k += W) vmax = Ops::max_nan(vmax, Ops::load(x + k));
  if (rest > 0) vmax = Ops::max_nan(vmax, tail);
  float lanes[W];
  Ops::store(lanes, vmax);
  const float m = fold_lanes<AccOp::kMax>(lanes, W);
  const V vm = Ops::set1(m);

  V vsum = Ops::set1(0.0f);
  for (int64_t k = 0; k < full; k += W) {
    const V e = vexp<Ops>(Ops::sub(Ops::load(x + k), vm));
    if (!log) Ops::store(out + k, e);
    vsum = Ops::add(vsum, e);
  }
  V etail = Ops::set1(0.0f);
  if (rest > 0) {
    etail = vexp<Ops>(Ops::sub(tail, vm));
    vsum = Ops::add(vsum, etail);
  }
  Ops::store(lanes, vsum);
  const float sum = fold_lanes<AccOp::kSum>(lanes, W);

  if (log) {
    // (x - max) - log(sum), in this order: x - (max + log(sum)) loses digits for large max.
    const V vlog = Ops::set1(std::log(sum));
    for (int64_t k = 0; k < full; k += W) {
      Ops::store(out + k, Ops::sub(Ops::sub(Ops::load(x + k), vm), vlog));
    }
    if (rest > 0) {
      Ops::store(lanes, Ops::sub(Ops::sub(tail, vm), vlog));
      std::memcpy(out + full, lanes, static_cast<size_t>(rest) * sizeof(float));
    }
    return;
  }
  // One division, then multiplies (sum >= 1, so 1 / sum is finite): within 1.5 ulp of
  // dividing each element, and a vector division costs as much as several multiplies.
  const V vs = Ops::set1(1.0f / sum);
  for (int64_t k = 0; k < full; k += W) Ops::store(out + k, Ops::mul(Ops::load(out + k), vs));
  if (rest > 0) {
    Ops::store(lanes, Ops::mul(etail, vs));
    std::memcpy(out + full, lanes, static_cast<size_t>(rest) * sizeof(float));
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
