// The per-element arithmetic of the fused optimizers (braid/kernels/optim.h), written once for
// the GPU kernel (optim.cu) and for the host, so that braid_kernels_cuda_host_test can run the
// very code the kernel runs against kernels::cpu::optimizer_step on a machine without a GPU.
//
// Note [No FMA on the GPU]. nvcc contracts a * b + c into one FMA by default
// (-fmad=true), which rounds once where the CPU reference rounds twice. Every operation here
// goes through fadd / fmul / fdiv / fsqrt, which on the device are the _rn intrinsics that
// the compiler never fuses, and on the host plain IEEE operations (baseline x86-64 has no FMA
// instruction and braid builds C++ in ISO mode, where GCC does not contract). Subnormals are
// kept on both sides (nvcc's default -ftz=false; braid never sets MXCSR.FTZ/DAZ).
//
// This is the one place where device and host code differ by #if: the intrinsics do not
// exist in host code.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "braid/core/float_types.h"
#include "braid/core/rng.h"
#include "braid/kernels/optim.h"
#include "hd.h"

namespace braid::kernels::cuda::math {

BRAID_HD inline float fadd(float a, float b) {
#if BRAID_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

BRAID_HD inline float fmul(float a, float b) {
#if BRAID_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

BRAID_HD inline float fdiv(float a, float b) {
#if BRAID_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

BRAID_HD inline float fsqrt(float a) {
#if BRAID_DEVICE_PASS
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

BRAID_HD inline uint32_t float_bits(float x) {
#if BRAID_DEVICE_PASS
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

// ---- storage dtypes: load to f32, store rounded to nearest even -------------------------------

// One tag per storage dtype. 16-bit values are handled as their bits (uint16_t), so host and
// device share every signature; only the conversions differ: CUDA's _rn intrinsics on the
// device, float_types.h on the host (the same results on every non-NaN value).
struct F32 {
  using Bits = float;
  BRAID_HD static float load(const Bits* p, int64_t i) { return p[i]; }
  BRAID_HD static void store(Bits* p, int64_t i, float x) { p[i] = x; }
};

struct BF16 {
  using Bits = uint16_t;
  BRAID_HD static float load(const Bits* p, int64_t i) {
#if BRAID_DEVICE_PASS
    return __uint_as_float(static_cast<uint32_t>(p[i]) << 16);  // exact
#else
    return fp::bf16_bits_to_f32(p[i]);
#endif
  }
  BRAID_HD static void store(Bits* p, int64_t i, float x) {
#if BRAID_DEVICE_PASS
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
    p[i] = fp::f32_to_bf16_bits(x);
#endif
  }
};

struct F16 {
  using Bits = uint16_t;
  BRAID_HD static float load(const Bits* p, int64_t i) {
#if BRAID_DEVICE_PASS
    return __half2float(__ushort_as_half(p[i]));
#else
    return fp::f16_bits_to_f32(p[i]);
#endif
  }
  BRAID_HD static void store(Bits* p, int64_t i, float x) {
#if BRAID_DEVICE_PASS
    p[i] = __half_as_ushort(__float2half_rn(x));
#else
    p[i] = fp::f32_to_f16_bits(x);
#endif
  }
};

// The CPU reference's (kernels/src/cpu/optim.cc) choices where IEEE leaves one, copied exactly
// so that even the sign of a zero agrees; braid_kernels_cuda_host_test fails when they drift.
// max as torch.maximum (amsgrad): a NaN a wins, then a NaN b; a when equal.
BRAID_HD inline float fmax_nan(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a < b ? b : a;
}

// sign(c) for Lion: +-1; the zero itself for +-0, c itself for NaN.
BRAID_HD inline float sign(float c) {
  if (c > 0.0f) return 1.0f;
  return c < 0.0f ? -1.0f : c;
}

// ---- Philox4x32-10: braid's stream (braid/core/rng.h, docs/rng.md) --------------------------

struct PhiloxWords {
  uint32_t w[4];
};

// philox4x32_10 of rng.h, restated without std::array so that device code can call it. The
// 32x32->64 products compile to one wide multiply on the GPU.
BRAID_HD inline PhiloxWords philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                          uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {  // the key is bumped before every round but the first
      k0 += philox_detail::kW0;
      k1 += philox_detail::kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(philox_detail::kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(philox_detail::kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
  }
  return {{c0, c1, c2, c3}};
}

// Words 4 * block .. 4 * block + 3 of the stream of `seed`.
BRAID_HD inline PhiloxWords philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// bf16 bits of the f32 `x_bits` rounded stochastically with the random word `r`
// (Rounding::kStochastic): the low 16 bits of r are added before truncation, so x rounds up
// with probability (its distance from the lower bf16) / ulp. Non-finite values round to
// nearest (Inf stays Inf; NaN becomes a quiet NaN of the same sign, as float_types.h does).
BRAID_HD inline uint16_t bf16_bits_stochastic(uint32_t x_bits, uint32_t r) {
  if ((x_bits & 0x7f800000u) == 0x7f800000u) {
    const bool nan = (x_bits & 0x007fffffu) != 0;
    return static_cast<uint16_t>((x_bits >> 16) | (nan ? 0x0040u : 0u));
  }
  return static_cast<uint16_t>((x_bits + (r & 0xffffu)) >> 16);
}

// ---- one element of one optimizer step -------------------------------------------------------

// The per-call switches of OptimStep, as the kernel reads them.
struct OptimFlags {
  bool maximize = false;
  bool weight_decay = false;  // SGD, Adam: weight_decay != 0 (AdamW and Lion multiply by decay)
  bool momentum = false;      // SGD: momentum != 0 (state0 is the momentum buffer)
  bool nesterov = false;
  bool first_step = false;
  bool amsgrad = false;
};

// Applies the step to one element (optim.h gives the formulas; each line below is one of
// them, operation for operation). `g` is float(grad); `p` is the f32 parameter (the master
// when there is one); s0, s1, s2 are the element's state0/1/2 (read only where the algorithm
// and flags use them). Returns nothing: p and the states are updated in place.
template <OptimAlgo kAlgo>
BRAID_HD inline void update(const OptimScalars& s, const OptimFlags& f, float g, float& p,
                            float& s0, float& s1, float& s2) {
  g = fmul(g, s.grad_scale);
  if (f.maximize) g = -g;
  if constexpr (kAlgo == OptimAlgo::kSgd) {
    if (f.weight_decay) g = fadd(g, fmul(s.weight_decay, p));
    if (f.momentum) {
      s0 = f.first_step ? g : fadd(fmul(s0, s.momentum), fmul(s.one_minus_dampening, g));
      g = f.nesterov ? fadd(g, fmul(s.momentum, s0)) : s0;
    }
    p = fadd(p, fmul(s.neg_lr, g));
  } else if constexpr (kAlgo == OptimAlgo::kAdam || kAlgo == OptimAlgo::kAdamW) {
    if constexpr (kAlgo == OptimAlgo::kAdam) {
      if (f.weight_decay) g = fadd(g, fmul(s.weight_decay, p));
    } else {
      p = fmul(p, s.decay);  // decay == 1 when wd == 0: the same bits, no branch (as the CPU)
    }
    s0 = fadd(fmul(s0, s.beta1), fmul(s.one_minus_beta1, g));
    s1 = fadd(fmul(s1, s.beta2), fmul(fmul(s.one_minus_beta2, g), g));
    float v = s1;
    if (f.amsgrad) {
      s2 = fmax_nan(s2, s1);
      v = s2;
    }
    const float denom = fadd(fdiv(fsqrt(v), s.bc2_sqrt), s.eps);
    p = fadd(p, fmul(s.neg_step_size, fdiv(s0, denom)));
  } else {  // Lion
    const float c = fadd(fmul(s0, s.beta1), fmul(s.one_minus_beta1, g));
    p = fmul(p, s.decay);
    p = fadd(p, fmul(s.neg_lr, sign(c)));
    s0 = fadd(fmul(s0, s.beta2), fmul(s.one_minus_beta2, g));
  }
}

// ---- one unit of one tensor ---------------------------------------------------------------------

// Note [Optimizer units]. A thread works on units of 4 consecutive elements. With stochastic
// rounding element i reads Philox word (rng_offset + i); units are shifted by rng_offset % 4
// so that the 4 words of a unit are one Philox block, computed once per unit: unit u covers
// elements 4u - shift .. 4u - shift + 3, clipped to [0, n), and reads block
// rng_offset / 4 + u. Without stochastic rounding the shift is 0.
BRAID_HD inline int unit_shift(bool stochastic, uint64_t rng_offset) {
  return stochastic ? static_cast<int>(rng_offset & 3u) : 0;
}
BRAID_HD inline int64_t units_of(int64_t n, int shift) {
  return (n + shift + 3) / 4;
}

// One tensor's buffers, as the kernel receives them (device pointers).
struct OptimTensorArg {
  void* param;
  float* master;
  const void* grad;
  float* s0;
  float* s1;
  float* s2;
  int64_t n;
  uint64_t rng_offset;
  int64_t first_chunk;  // the tensor's first chunk served by this launch
};

// What every element of one call shares.
struct OptimParams {
  OptimScalars s;
  OptimFlags f;
  bool stochastic;  // bf16 parameters with Rounding::kStochastic
  uint64_t seed;
};

// The per-call part of a (checked) step, as optim_scalars and the CPU's variant choice give it
// (torch's `if weight_decay != 0`, `if momentum != 0`).
inline OptimParams optim_params(const OptimStep& st) {
  OptimParams c{};
  c.s = optim_scalars(st);
  c.f.maximize = st.maximize;
  c.f.weight_decay = st.weight_decay != 0.0;
  c.f.momentum = st.algo == OptimAlgo::kSgd && st.momentum != 0.0;
  c.f.nesterov = st.nesterov;
  c.f.first_step = st.first_step;
  c.f.amsgrad = st.amsgrad && (st.algo == OptimAlgo::kAdam || st.algo == OptimAlgo::kAdamW);
  c.stochastic = st.rounding == Rounding::kStochastic && st.param_dtype == DType::kBF16;
  c.seed = st.seed;
  return c;
}

template <OptimAlgo kAlgo, class P, class G>
BRAID_HD inline void optim_element(const OptimParams& c, const OptimTensorArg& a, int64_t i,
                                   uint32_t word) {
  constexpr bool kAdamLike = kAlgo == OptimAlgo::kAdam || kAlgo == OptimAlgo::kAdamW;
  const bool use_s0 = kAlgo != OptimAlgo::kSgd || c.f.momentum;
  const bool read_s0 = use_s0 && !(kAlgo == OptimAlgo::kSgd && c.f.first_step);
  auto* param = static_cast<typename P::Bits*>(a.param);
  const float g = G::load(static_cast<const typename G::Bits*>(a.grad), i);
  float p = a.master ? a.master[i] : P::load(param, i);
  float s0 = read_s0 ? a.s0[i] : 0.0f;
  float s1 = kAdamLike ? a.s1[i] : 0.0f;
  float s2 = kAdamLike && c.f.amsgrad ? a.s2[i] : 0.0f;

  update<kAlgo>(c.s, c.f, g, p, s0, s1, s2);

  if (use_s0) a.s0[i] = s0;
  if (kAdamLike) a.s1[i] = s1;
  if (kAdamLike && c.f.amsgrad) a.s2[i] = s2;
  if (a.master) a.master[i] = p;
  if constexpr (std::is_same_v<P, BF16>) {
    if (c.stochastic) {
      param[i] = bf16_bits_stochastic(float_bits(p), word);
      return;
    }
  }
  P::store(param, i, p);
}

// Unit u of tensor a (Note [Optimizer units]).
template <OptimAlgo kAlgo, class P, class G>
BRAID_HD inline void optim_unit(const OptimParams& c, const OptimTensorArg& a, int64_t u) {
  const int shift = unit_shift(c.stochastic, a.rng_offset);
  PhiloxWords r{};
  if (c.stochastic) r = philox_block(c.seed, a.rng_offset / 4 + static_cast<uint64_t>(u));
#if BRAID_DEVICE_PASS
#pragma unroll
#endif
  for (int j = 0; j < 4; ++j) {
    const int64_t i = 4 * u - shift + j;
    if (i >= 0 && i < a.n) optim_element<kAlgo, P, G>(c, a, i, r.w[j]);
  }
}

}  // namespace braid::kernels::cuda::math
