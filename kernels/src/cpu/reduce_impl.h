// Internal interface between the public reduce() / softmax() entry points (reduce.cc,
// softmax.cc) and their per-ISA implementations. See docs/reductions-and-gemm.md,
// "Reduction order": every path reproduces the order written here bit for bit.
//
// Everything defined (not just declared) in this header sits in an anonymous namespace: the
// header is included by files compiled with different -m flags, and an inline function with
// external linkage would be merged by the linker into one copy, possibly the AVX-512 one.
#pragma once

#include <cmath>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels::cpu {

// What a lane accumulates. kMean finalises a kSum, kNormL2 a kSumSq (in reduce.cc).
enum class AccOp : uint8_t { kSum, kSumSq, kMax, kMin };

// Note [Reduction lanes]: a contiguous run (inner == 1) is split into kLanes<Acc> interleaved
// partial results: element k goes to lane k % kLanes. The lanes are then folded by halving:
// lane i combines with lane i + h for h = kLanes/2, kLanes/4, ..., 1. 64 f32 lanes are four
// ZMM or eight YMM accumulators, enough to hide the add latency; f64 uses 32 lanes, which is
// the same register count.
template <typename Acc>
inline constexpr int kLanes = sizeof(Acc) == 4 ? 64 : 32;

// One reduction over [outer, len, inner] with raw accumulators as output: out[o * inner + i]
// holds the lane-folded kSum / kSumSq / kMax / kMin; reduce.cc finalises and converts.
struct ReduceJob {
  AccOp op;
  DType dtype;  // f64, f32, f16, bf16
  int64_t outer, len, inner;
  const void* x;
  void* out;     // float or double, outer * inner of them
  bool acc_f64;  // accumulate in double (f64 input, or out_dtype f64)
};
using ReduceFn = void (*)(const ReduceJob&);

// Softmax over one f32 row of `len` > 0 elements; out may alias x.
using SoftmaxRowFn = void (*)(const float* x, float* out, int64_t len, bool log);

namespace scalar {
void reduce(const ReduceJob& job);
void softmax_row(const float* x, float* out, int64_t len, bool log);
}  // namespace scalar
namespace avx2 {
void reduce(const ReduceJob& job);
void softmax_row(const float* x, float* out, int64_t len, bool log);
}  // namespace avx2
namespace avx512 {
void reduce(const ReduceJob& job);
void softmax_row(const float* x, float* out, int64_t len, bool log);
}  // namespace avx512

namespace {

// The single-lane step and the fold of two lanes. max / min: NaN wins, and on ties (0 vs -0)
// the value already in the lane stays; the SIMD paths implement exactly this predicate.
// kSumSq uses a fused multiply-add, so no compiler contraction choice can change the bits.
template <AccOp kOp, typename Acc>
inline Acc lane_step(Acc acc, Acc x) {
  if constexpr (kOp == AccOp::kSum) return acc + x;
  if constexpr (kOp == AccOp::kSumSq) return std::fma(x, x, acc);
  if constexpr (kOp == AccOp::kMax) return (x > acc || x != x) ? x : acc;
  if constexpr (kOp == AccOp::kMin) return (x < acc || x != x) ? x : acc;
}

template <AccOp kOp, typename Acc>
inline Acc lane_combine(Acc a, Acc b) {
  if constexpr (kOp == AccOp::kSum || kOp == AccOp::kSumSq) return a + b;
  if constexpr (kOp == AccOp::kMax) return (b > a || b != b) ? b : a;
  if constexpr (kOp == AccOp::kMin) return (b < a || b != b) ? b : a;
}

// The value a lane starts from; also the padding of a partial block (a no-op step: a sum
// lane is never -0, so adding +0 changes no bit).
template <AccOp kOp, typename Acc>
inline constexpr Acc lane_identity() {
  if constexpr (kOp == AccOp::kMax) return -INFINITY;
  if constexpr (kOp == AccOp::kMin) return INFINITY;
  return Acc(0);
}

// Folds lanes[0, n) by halving (n a power of two); the result is lanes[0].
template <AccOp kOp, typename Acc>
inline Acc fold_lanes(Acc* lanes, int n) {
  for (int h = n / 2; h >= 1; h /= 2) {
    for (int i = 0; i < h; ++i) lanes[i] = lane_combine<kOp>(lanes[i], lanes[i + h]);
  }
  return lanes[0];
}

}  // namespace
}  // namespace braid::kernels::cpu
