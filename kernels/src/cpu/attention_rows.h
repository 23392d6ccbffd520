// The row operations of the causal attention kernels (attention.cc), shared by the reference
// and the blocked path so that both round at the same places: the scaling of a score row, its
// softmax, the cast of the probabilities to the storage dtype, dropout, and the softmax
// gradient. A "row" is query i of one (batch, head): its first `len` = i + 1 entries are live,
// entries [len, n) are the masked part of a block and are written as 0.
//
// f16 / bf16 (T) compute in f32 and round to T where torch's autocast produces a T tensor
// (rnd<T>), so the kernel follows what transformers' GPT2Attention computes under autocast.
// Baseline-only header (no SIMD flags): attention.cc is its one user.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention_impl.h"
#include "braid/core/float_types.h"
#include "braid/core/rng.h"
#include "braid/kernels/cpu.h"
#include "isa_dispatch.h"
#include "reduce_impl.h"

namespace braid::kernels::cpu {
namespace {

template <typename T>
using AccOf = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
constexpr bool kLowPrecision = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

template <typename Acc, typename T>
inline Acc to_acc(T x) {
  return static_cast<Acc>(static_cast<AccOf<T>>(x));
}
template <typename T, typename Acc>
inline T from_acc(Acc x) {
  if constexpr (kLowPrecision<T>) {
    return T(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}
// fp::f32_to_bf16_bits widened back, without a branch so that the row loops below vectorize:
// round to nearest even, NaN quieted with its sign kept.
inline float rnd_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet = (u & 0xffff0000u) | 0x00400000u;
  const bool nan = static_cast<int32_t>(u & 0x7fffffffu) > 0x7f800000;
  return std::bit_cast<float>(nan ? quiet : rounded);
}

// x rounded to T and widened back (the identity for f32 / f64).
template <typename T, typename Acc>
inline Acc rnd(Acc x) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return rnd_bf16(x);
  } else if constexpr (kLowPrecision<T>) {
    return static_cast<float>(T(x));
  } else {
    return x;
  }
}

template <typename Acc>
struct RowParams {
  int64_t seq, head_dim, n_head;
  Acc divisor;  // sqrt(head_dim) in T, as torch.full([], head_dim ** 0.5, dtype=T)
  // 1 / divisor when divisor is a power of two (head_dim 4, 16, 64, 256, ...): then x * recip
  // is x / divisor exactly (the same real number, rounded once), and a multiply is cheaper.
  Acc recip;
  bool recip_exact;
  bool dropout;
  double p;        // compared in double, as nn::Dropout does
  Acc keep_scale;  // 1 / (1 - p)
  uint64_t seed, offset;
  // The softmax gradient's sum_j dP_j P_j: null, in index order (every level but amx); the amx
  // path sets its vector order (attn_dot, attention_impl.h), as its products already sum in
  // their own order.
  Acc (*dot)(const Acc* a, const Acc* b, int64_t len) = nullptr;
};

template <typename Acc>
Acc row_dot(const RowParams<Acc>& rp, const Acc* dp, const Acc* p, int64_t len) {
  if (rp.dot != nullptr) return rp.dot(dp, p, len);
  Acc dot = 0;
  for (int64_t j = 0; j < len; ++j) dot += dp[j] * p[j];  // in index order
  return dot;
}

template <typename T, typename Acc>
RowParams<Acc> make_row_params(const AttentionArgs& a) {
  RowParams<Acc> rp{};
  rp.seq = a.seq;
  rp.head_dim = a.head_dim;
  rp.n_head = a.n_head;
  rp.divisor = rnd<T>(static_cast<Acc>(std::sqrt(static_cast<double>(a.head_dim))));
  int exponent = 0;
  rp.recip_exact = std::frexp(rp.divisor, &exponent) == Acc(0.5);
  rp.recip = Acc(1) / rp.divisor;
  rp.dropout = a.dropout_p > 0.0;
  rp.p = a.dropout_p;
  rp.keep_scale = static_cast<Acc>(1.0 / (1.0 - a.dropout_p));
  rp.seed = a.dropout_seed;
  rp.offset = a.dropout_offset;
  return rp;
}

// x[j] = keep(j) ? rnd(x[j] * keep_scale) : 0 for j < len, keep(j) from word
// ((b * n_head + h) * T + i) * T + j of the stream (cpu.h, "Dropout").
template <typename T, typename Acc>
void apply_dropout(const RowParams<Acc>& rp, int64_t b, int64_t h, int64_t i, int64_t len, Acc* x) {
  const PhiloxKey key = philox_key(rp.seed);
  const uint64_t first =
      rp.offset + static_cast<uint64_t>(((b * rp.n_head + h) * rp.seq + i) * rp.seq);
  int64_t j = 0;
  while (j < len) {
    const uint64_t word = first + static_cast<uint64_t>(j);
    const PhiloxCounter w = philox4x32_10(philox_counter(word / 4), key);
    for (uint64_t lane = word % 4; lane < 4 && j < len; ++lane, ++j) {
      const float u = static_cast<float>(w[lane] >> 8) * 0x1.0p-24f;
      x[j] = static_cast<double>(u) >= rp.p ? rnd<T>(x[j] * rp.keep_scale) : Acc(0);
    }
  }
}

constexpr IsaTable<const AttnRowsBf16*> kAttnRowOps{&scalar::kAttnRowsBf16, nullptr,
                                                    &avx512::kAttnRowsBf16, nullptr};

constexpr IsaTable<SoftmaxRowFn> kAttnSoftmaxRow{scalar::softmax_row, avx2::softmax_row,
                                                 avx512::softmax_row, nullptr};

// softmax.cc's reference row in f64 (the SIMD softmax rows are f32 only).
inline void softmax_row_f64(const double* x, double* out, int64_t len) {
  double m = x[0];
  for (int64_t k = 1; k < len; ++k) m = lane_step<AccOp::kMax>(m, x[k]);
  double sum = 0;
  for (int64_t k = 0; k < len; ++k) {
    out[k] = std::exp(x[k] - m);
    sum += out[k];
  }
  for (int64_t k = 0; k < len; ++k) out[k] /= sum;
}

// s: the raw q k^T row (overwritten with the scaled scores); p32: softmax (f32 or f64);
// pd: p32 cast to T, after dropout (what multiplies v).
template <typename T, typename Acc>
void forward_row(const RowParams<Acc>& rp, int64_t b, int64_t h, int64_t i, int64_t len, int64_t n,
                 Acc* s, Acc* p32, Acc* pd) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (rp.recip_exact) {
      // The same steps on the level's vectors (AttnRowsBf16, attention_impl.h).
      const AttnRowsBf16& ops = *kAttnRowOps.get();
      ops.scale(s, len, rp.recip);
      kAttnSoftmaxRow.get()(s, p32, len, false);
      ops.round(p32, pd, len);
      if (rp.dropout) apply_dropout<T>(rp, b, h, i, len, pd);
      for (int64_t j = len; j < n; ++j) p32[j] = pd[j] = Acc(0);
      return;
    }
  }
  if (rp.recip_exact) {
    for (int64_t j = 0; j < len; ++j) s[j] = rnd<T>(rnd<T>(s[j]) * rp.recip);
  } else {
    for (int64_t j = 0; j < len; ++j) s[j] = rnd<T>(rnd<T>(s[j]) / rp.divisor);
  }
  if constexpr (std::is_same_v<Acc, double>) {
    softmax_row_f64(s, p32, len);
  } else {
    kAttnSoftmaxRow.get()(s, p32, len, false);
  }
  for (int64_t j = 0; j < len; ++j) pd[j] = rnd<T>(p32[j]);
  if (rp.dropout) apply_dropout<T>(rp, b, h, i, len, pd);
  for (int64_t j = len; j < n; ++j) p32[j] = pd[j] = Acc(0);
}

// dp: the raw dout v^T row in, the gradient of the scaled-and-divided scores out:
//   dP = dropout'(rnd(dp));  dS = rnd(rnd(P (dP - sum_j dP_j P_j)) / divisor).
template <typename T, typename Acc>
void backward_row(const RowParams<Acc>& rp, int64_t b, int64_t h, int64_t i, int64_t len, int64_t n,
                  const Acc* p32, Acc* dp) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (rp.recip_exact) {
      const AttnRowsBf16& ops = *kAttnRowOps.get();
      ops.round(dp, dp, len);
      if (rp.dropout) apply_dropout<T>(rp, b, h, i, len, dp);
      ops.grad(p32, dp, len, row_dot(rp, dp, p32, len), rp.recip);
      for (int64_t j = len; j < n; ++j) dp[j] = Acc(0);
      return;
    }
  }
  for (int64_t j = 0; j < len; ++j) dp[j] = rnd<T>(dp[j]);
  if (rp.dropout) apply_dropout<T>(rp, b, h, i, len, dp);
  const Acc dot = row_dot(rp, dp, p32, len);
  if (rp.recip_exact) {
    for (int64_t j = 0; j < len; ++j) dp[j] = rnd<T>(rnd<T>(p32[j] * (dp[j] - dot)) * rp.recip);
  } else {
    for (int64_t j = 0; j < len; ++j) dp[j] = rnd<T>(rnd<T>(p32[j] * (dp[j] - dot)) / rp.divisor);
  }
  for (int64_t j = len; j < n; ++j) dp[j] = Acc(0);
}

}  // namespace
}  // namespace braid::kernels::cpu
