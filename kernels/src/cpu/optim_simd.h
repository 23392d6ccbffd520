// The fused optimizer's SIMD loops (optim_kernels.h), written once over a vector-traits type
// and instantiated by optim_avx2.cc / optim_avx512.cc. Besides the elementwise traits
// (Avx2 / Avx512), V provides what only the optimizer needs, defined in each ISA file:
//   load_u32                  u32 lanes from memory
//   xor3(a, b, c)             a ^ b ^ c
//   mul_hi_lo(a, m, hi, lo)   the 64-bit products of the u32 lanes a and m, split (vpmuludq
//                             on the even lanes, then on the odd ones moved down)
//   unpack32 / unpack64       vpunpckl/h dq and qdq: interleave within 128-bit chunks
//   store_chunks(out, a..d)   the 128-bit chunks of a, b, c, d to memory in block order
//
// Exactness: every formula step is one IEEE operation on f32 lanes (sqrt and div are
// correctly rounded in SIMD too), in the order of the scalar reference (optim.cc). One limit:
// where two different NaNs meet in one operation, x86 returns the first operand's, and the
// compiler may commute an add or a multiply (in either path), so the payload is then not
// fixed. Where an element's NaNs all come from one source (a NaN gradient, an Inf - Inf),
// every path gives the same bits; the tests check that.
//
// Note [No FMA contraction]
// GCC implements _mm*_mul_ps / _mm*_add_ps as plain vector arithmetic, and C++ (even with
// -std=c++20) defaults to -ffp-contract=fast, so with -mfma it fuses add(mul(a, b), c) into
// one FMA that rounds once where the reference rounds twice. kernels/CMakeLists.txt passes
// -ffp-contract=off to every ISA file; the optimizer's files also start with
// #pragma GCC optimize("fp-contract=off"), before any include so that the headers' inline
// code is covered, which keeps them exact under other flags too (optim.cc has it for builds
// whose baseline flags enable FMA, such as -march=native).
// Internal linkage throughout (Note [ISA files and the ODR] in elementwise_simd.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include "braid/core/rng.h"
#include "elementwise_simd.h"
#include "optim_kernels.h"

namespace braid::kernels::cpu {
namespace {

// The step's scalars broadcast once per block (the compiler drops the ones a variant does
// not read).
template <class V>
struct OptimVec {
  using F = typename V::F;
  F neg_lr, wd, decay, grad_scale, momentum, one_minus_dampening;
  F beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size, bc2_sqrt;
  typename V::I grad_sign;
  OptimVec(const OptimScalars& s, uint32_t sign)
      : neg_lr(V::set1(s.neg_lr)),
        wd(V::set1(s.weight_decay)),
        decay(V::set1(s.decay)),
        grad_scale(V::set1(s.grad_scale)),
        momentum(V::set1(s.momentum)),
        one_minus_dampening(V::set1(s.one_minus_dampening)),
        beta1(V::set1(s.beta1)),
        one_minus_beta1(V::set1(s.one_minus_beta1)),
        beta2(V::set1(s.beta2)),
        one_minus_beta2(V::set1(s.one_minus_beta2)),
        eps(V::set1(s.eps)),
        neg_step_size(V::set1(s.neg_step_size)),
        bc2_sqrt(V::set1(s.bc2_sqrt)),
        grad_sign(V::iset1(static_cast<int32_t>(sign))) {}
};

// torch.maximum: a NaN a wins, then a NaN b; a when equal (x86 max returns its second
// operand on NaN or equality, hence max(b, a) and the two fix-ups).
template <class V>
typename V::F max_nan(typename V::F a, typename V::F b) {
  const typename V::F m = V::select(V::isnan(b), b, V::max(b, a));
  return V::select(V::isnan(a), a, m);
}

// sign(c): +-1; the zero itself for +-0 and c itself for NaN.
template <class V>
typename V::F sign_of(typename V::F c) {
  const typename V::I unit = V::ior(V::iand(V::bits(c), V::iset1(INT32_MIN)), V::iset1(0x3f800000));
  const typename V::F s = V::select(V::eq(c, V::set1(0.0f)), c, V::from_bits(unit));
  return V::select(V::isnan(c), c, s);
}

// SGD on one vector; returns the new p.
template <class V, OptimVariant kVar>
typename V::F sgd_vec(const OptimVec<V>& c, typename V::F p, typename V::F g, float* s0) {
  if constexpr (kVar.weight_decay) g = V::add(g, V::mul(c.wd, p));
  if constexpr (kVar.momentum != SgdMomentum::kNone) {
    typename V::F buf = g;
    if constexpr (!kVar.first_step) {
      buf = V::add(V::mul(V::load(s0), c.momentum), V::mul(c.one_minus_dampening, g));
    }
    V::store(s0, buf);
    g = kVar.momentum == SgdMomentum::kNesterov ? V::add(g, V::mul(c.momentum, buf)) : buf;
  }
  return V::add(p, V::mul(c.neg_lr, g));
}

// Adam / AdamW on one vector; returns the new p.
template <class V, OptimVariant kVar>
typename V::F adam_vec(const OptimVec<V>& c, typename V::F p, typename V::F g, float* s0, float* s1,
                       float* s2) {
  using F = typename V::F;
  if constexpr (kVar.algo == OptimAlgo::kAdam && kVar.weight_decay) g = V::add(g, V::mul(c.wd, p));
  if constexpr (kVar.algo == OptimAlgo::kAdamW) p = V::mul(p, c.decay);
  const F m = V::add(V::mul(V::load(s0), c.beta1), V::mul(c.one_minus_beta1, g));
  F v = V::add(V::mul(V::load(s1), c.beta2), V::mul(V::mul(c.one_minus_beta2, g), g));
  V::store(s0, m);
  V::store(s1, v);
  if constexpr (kVar.amsgrad) {
    v = max_nan<V>(V::load(s2), v);
    V::store(s2, v);
  }
  const F denom = V::add(V::div(V::sqrt(v), c.bc2_sqrt), c.eps);
  return V::add(p, V::mul(c.neg_step_size, V::div(m, denom)));
}

// Lion on one vector; returns the new p.
template <class V>
typename V::F lion_vec(const OptimVec<V>& c, typename V::F p, typename V::F g, float* s0) {
  const typename V::F m = V::load(s0);
  const typename V::F dir = V::add(V::mul(m, c.beta1), V::mul(c.one_minus_beta1, g));
  p = V::add(V::mul(p, c.decay), V::mul(c.neg_lr, sign_of<V>(dir)));
  V::store(s0, V::add(V::mul(m, c.beta2), V::mul(c.one_minus_beta2, g)));
  return p;
}

// Elements i .. i+W-1 of a block.
template <class V, OptimVariant kVar>
void optim_vec(const OptimVec<V>& c, const OptimBlock& b, int64_t i) {
  constexpr bool kState0 = uses_state0(kVar), kState2 = uses_state2(kVar);
  const typename V::F g =
      V::from_bits(V::ixor(V::bits(V::mul(V::load(b.g + i), c.grad_scale)), c.grad_sign));
  const typename V::F p = V::load(b.p + i);
  typename V::F out;
  if constexpr (kVar.algo == OptimAlgo::kSgd) {
    out = sgd_vec<V, kVar>(c, p, g, kState0 ? b.s0 + i : nullptr);
  } else if constexpr (kVar.algo == OptimAlgo::kLion) {
    out = lion_vec<V>(c, p, g, b.s0 + i);
  } else {
    out = adam_vec<V, kVar>(c, p, g, b.s0 + i, b.s1 + i, kState2 ? b.s2 + i : nullptr);
  }
  V::store(b.p + i, out);
}

// Copies the rest < W elements of the arrays the variant uses to zeroed stack vectors, runs
// the vector code once and copies the results back, so element i gets the same bits for any n.
template <class V, OptimVariant kVar>
void optim_tail(const OptimVec<V>& c, const OptimBlock& b, int64_t i) {
  const size_t bytes = static_cast<size_t>(b.n - i) * sizeof(float);
  float buf[5][V::kW] = {};
  OptimBlock t{V::kW, buf[0], buf[1], buf[2], buf[3], buf[4]};
  std::memcpy(buf[0], b.p + i, bytes);
  std::memcpy(buf[1], b.g + i, bytes);
  if constexpr (uses_state0(kVar)) std::memcpy(buf[2], b.s0 + i, bytes);
  if constexpr (uses_state1(kVar)) std::memcpy(buf[3], b.s1 + i, bytes);
  if constexpr (uses_state2(kVar)) std::memcpy(buf[4], b.s2 + i, bytes);
  optim_vec<V, kVar>(c, t, 0);
  std::memcpy(b.p + i, buf[0], bytes);
  if constexpr (uses_state0(kVar)) std::memcpy(b.s0 + i, buf[2], bytes);
  if constexpr (uses_state1(kVar)) std::memcpy(b.s1 + i, buf[3], bytes);
  if constexpr (uses_state2(kVar)) std::memcpy(b.s2 + i, buf[4], bytes);
}

// Element i's line of every array the variant streams (Note [Step prefetch], optim.cc).
// Prefetches never fault, so reading past an array's end is harmless.
template <OptimVariant kVar>
void prefetch_lines(const OptimBlock& b, int64_t i) {
  __builtin_prefetch(b.p + i, 0, 3);
  __builtin_prefetch(b.g + i, 0, 3);
  if constexpr (uses_state0(kVar)) __builtin_prefetch(b.s0 + i, 0, 3);
  if constexpr (uses_state1(kVar)) __builtin_prefetch(b.s1 + i, 0, 3);
  if constexpr (uses_state2(kVar)) __builtin_prefetch(b.s2 + i, 0, 3);
}

template <class V, OptimVariant kVar>
void optim_math(const OptimScalars& s, uint32_t grad_sign, const OptimBlock& block) {
  const OptimVec<V> c(s, grad_sign);
  const OptimBlock b = block;  // a local copy: the stores below cannot alias its pointers
  int64_t i = 0;
  if (b.prefetch > 0) {
    for (; i + V::kW <= b.n; i += V::kW) {
      if (i % 16 == 0) prefetch_lines<kVar>(b, i + b.prefetch);  // each 64 bytes of f32
      optim_vec<V, kVar>(c, b, i);
    }
  }
  for (; i + V::kW <= b.n; i += V::kW) optim_vec<V, kVar>(c, b, i);
  if (i < b.n) optim_tail<V, kVar>(c, b, i);
}

// ---- stochastic rounding to bf16 ----------------------------------------------------------

// Philox's 64-bit block counters block .. block + W - 1, one per lane, split into words.
template <class V>
void philox_counters(uint64_t block, typename V::I& c0, typename V::I& c1) {
  alignas(64) static constexpr uint32_t kLane[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                     8, 9, 10, 11, 12, 13, 14, 15};
  c0 = V::iadd(V::iset1(static_cast<int32_t>(block)), V::load_u32(kLane));
  c1 = V::iset1(static_cast<int32_t>(block >> 32));
  if (static_cast<uint32_t>(block) > UINT32_MAX - (V::kW - 1)) [[unlikely]] {
    uint32_t hi[V::kW];  // the low word wraps inside this vector: carry into the high word
    for (int j = 0; j < V::kW; ++j) hi[j] = static_cast<uint32_t>((block + j) >> 32);
    c1 = V::load_u32(hi);
  }
}

// Lane j's Philox block (c0[j], c1[j], c2[j], c3[j]) to out[4j .. 4j+3], for every lane: the
// stream's word order. A 4 x W transpose: after the unpacks, 128-bit chunk q of a / b / c / d
// holds block 4q / 4q+1 / 4q+2 / 4q+3, and store_chunks puts the chunks in order.
template <class V>
void store_blocks(uint32_t* out, const typename V::I c[4]) {
  typename V::I lo01, hi01, lo23, hi23, a, b, d, e;
  V::unpack32(c[0], c[1], lo01, hi01);
  V::unpack32(c[2], c[3], lo23, hi23);
  V::unpack64(lo01, lo23, a, b);
  V::unpack64(hi01, hi23, d, e);
  V::store_chunks(out, a, b, d, e);
}

// The key schedule of Philox4x32-10: the key is bumped before every round but the first.
template <class V>
struct PhiloxKeys {
  typename V::I k0[10], k1[10];
  explicit PhiloxKeys(uint64_t seed) {
    for (int r = 0; r < 10; ++r) {
      k0[r] = V::iset1(static_cast<int32_t>(static_cast<uint32_t>(seed) +
                                            static_cast<uint32_t>(r) * philox_detail::kW0));
      k1[r] = V::iset1(static_cast<int32_t>(static_cast<uint32_t>(seed >> 32) +
                                            static_cast<uint32_t>(r) * philox_detail::kW1));
    }
  }
};

// philox4x32_10 (braid/core/rng.h) on W counters at once; c2 = c3 = 0 on entry, as in braid's
// stream.
template <class V>
void philox_rounds(const PhiloxKeys<V>& key, typename V::I c[4]) {
  using I = typename V::I;
  const I m0 = V::iset1(static_cast<int32_t>(philox_detail::kM0));
  const I m1 = V::iset1(static_cast<int32_t>(philox_detail::kM1));
  for (int r = 0; r < 10; ++r) {
    I hi0, lo0, hi1, lo1;
    V::mul_hi_lo(c[0], m0, hi0, lo0);
    V::mul_hi_lo(c[2], m1, hi1, lo1);
    c[0] = V::xor3(hi1, c[1], key.k0[r]);
    c[1] = lo1;
    c[2] = V::xor3(hi0, c[3], key.k1[r]);
    c[3] = lo0;
  }
}

// The words of blocks block0 .. block0 + W groups - 1, in stream order, to
// out[0 .. 4 W groups). (Two interleaved vectors per pass measured no faster.)
template <class V>
void philox_blocks(uint64_t seed, uint64_t block0, int64_t groups, uint32_t* out) {
  const PhiloxKeys<V> key(seed);
  for (int64_t grp = 0; grp < groups; ++grp) {
    typename V::I c[4];
    philox_counters<V>(block0 + static_cast<uint64_t>(grp * V::kW), c[0], c[1]);
    c[2] = c[3] = V::iset1(0);
    philox_rounds<V>(key, c);
    store_blocks<V>(out + grp * 4 * V::kW, c);
  }
}

// bf16 bits of x rounded with the random word w: add its low 16 bits and truncate; NaN and
// Inf round to nearest (f32_to_bf16_lanes).
template <class V>
typename V::I stochastic_bf16_lanes(typename V::F x, typename V::I w) {
  const typename V::I xb = V::bits(x);
  const typename V::I up = V::template shr<16>(V::iadd(xb, V::iand(w, V::iset1(0xffff))));
  const typename V::M special = V::igt(V::iand(xb, V::iset1(0x7fffffff)), V::iset1(0x7f7fffff));
  return V::iselect(special, f32_to_bf16_lanes<V>(x), up);
}

template <class V>
void round_bf16_stochastic(const float* p, uint16_t* out, int64_t n, uint64_t seed,
                           uint64_t first_word) {
  constexpr int64_t kChunk = 64 * V::kW;      // elements per batch of words
  constexpr int64_t kGroupWords = 4 * V::kW;  // one pass of philox_blocks
  uint32_t words[kChunk + kGroupWords] = {};  // zeroed: the tail vector reads past `len`
  for (int64_t base = 0; base < n; base += kChunk) {
    const int64_t len = n - base < kChunk ? n - base : kChunk;  // no std::min: see the ODR note
    const uint64_t k0 = first_word + static_cast<uint64_t>(base);
    const int64_t skip = static_cast<int64_t>(k0 & 3);  // words before k0 in its block
    const int64_t groups = (skip + len + kGroupWords - 1) / kGroupWords;
    philox_blocks<V>(seed, k0 >> 2, groups, words);
    const uint32_t* w = words + skip;
    int64_t j = 0;
    for (; j + V::kW <= len; j += V::kW) {
      V::store_u16(out + base + j,
                   stochastic_bf16_lanes<V>(V::load(p + base + j), V::load_u32(w + j)));
    }
    if (j == len) continue;
    float pt[V::kW] = {};
    uint16_t ot[V::kW];
    std::memcpy(pt, p + base + j, static_cast<size_t>(len - j) * sizeof(float));
    V::store_u16(ot, stochastic_bf16_lanes<V>(V::load(pt), V::load_u32(w + j)));
    std::memcpy(out + base + j, ot, static_cast<size_t>(len - j) * sizeof(uint16_t));
  }
}

// ---- unscale and check finite ---------------------------------------------------------------

// True in the lanes holding NaN or +-Inf (exponent all ones).
template <class V>
typename V::M nonfinite(typename V::F x) {
  return V::igt(V::iand(V::bits(x), V::iset1(0x7fffffff)), V::iset1(0x7f7fffff));
}

template <class V, class T>
bool unscale_loop(void* data, int64_t n, float inv_scale) {
  const typename V::F s = V::set1(inv_scale);
  bool found = false;
  T* x = static_cast<T*>(data);
  map_tail<V>(static_cast<const T*>(x), x, n, [&](const T* in, T* out) {
    const typename V::F v = load_f32<V>(in);
    found |= V::any(nonfinite<V>(v));
    store_f32<V>(out, V::mul(v, s));
  });
  return found;
}

template <class V, class T>
bool check_finite_loop(void* data, int64_t n, float) {
  const T* x = static_cast<const T*>(data);
  bool found = false;
  int64_t i = 0;
  for (; i + V::kW <= n; i += V::kW) found |= V::any(nonfinite<V>(load_f32<V>(x + i)));
  if (i == n) return found;
  T t[V::kW];
  std::memset(static_cast<void*>(t), 0, sizeof(t));
  std::memcpy(static_cast<void*>(t), x + i, static_cast<size_t>(n - i) * sizeof(T));
  return found || V::any(nonfinite<V>(load_f32<V>(static_cast<const T*>(t))));
}

template <class V, size_t... kI>
void fill_optim_math(OptimTable& t, std::index_sequence<kI...>) {
  ((t.math[kI] = optim_math<V, kOptimVariants[kI]>), ...);
}

template <class V>
void fill_optim_table_for(OptimTable& t) {
  fill_optim_math<V>(t, std::make_index_sequence<kNumOptimVariants>{});
  t.round_bf16_stochastic = round_bf16_stochastic<V>;
  t.unscale[kEwF32] = unscale_loop<V, float>;
  t.unscale[kEwBF16] = unscale_loop<V, bfloat16>;
  t.unscale[kEwF16] = unscale_loop<V, half>;
  t.check_finite[kEwF32] = check_finite_loop<V, float>;
  t.check_finite[kEwBF16] = check_finite_loop<V, bfloat16>;
  t.check_finite[kEwF16] = check_finite_loop<V, half>;
}

}  // namespace
}  // namespace braid::kernels::cpu
