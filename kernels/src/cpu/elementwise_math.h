// Vectorized f32 exp, log, tanh, erfc-based GELU and the activations built on them, written
// once over a vector-traits type V (elementwise_simd.h). Accuracy against the correctly
// rounded result, measured over all f32 inputs of the ranges in docs/kernels.md:
//   exp  <= 2 ulp     (Cephes polynomial, 2^n applied in two halves so subnormal results
//                      round once and overflow gives Inf)
//   log  <= 2 ulp     (Cephes polynomial on [sqrt(1/2), sqrt(2)))
//   tanh <= 3 ulp     (odd minimax polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1) above)
//   erfc(|x|/sqrt 2) <= 6 ulp relative, so gelu <= 8 ulp for x > -10 (see docs for below)
// Special inputs follow <cmath>: NaN in gives NaN, exp(-Inf) = 0, log(0) = -Inf, log(x < 0)
// = NaN. Internal linkage (Note [ISA files and the ODR] in elementwise_simd.h).
#pragma once

#include "elementwise_simd.h"

namespace braid::kernels::cpu {
namespace {

// Horner's rule: c[0] + x * (c[1] + x * (...)).
template <class V, size_t N>
typename V::F polynomial(typename V::F x, const float (&c)[N]) {
  typename V::F r = V::set1(c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) r = V::fma(r, x, V::set1(c[i]));
  return r;
}

// 2^k for an integral-valued float k in [-126, 127].
template <class V>
typename V::F pow2(typename V::F k) {
  return V::from_bits(V::template shl<23>(V::iadd(V::cvt_round(k), V::iset1(127))));
}

template <class V>
typename V::F vexp(typename V::F x) {
  using F = typename V::F;
  // min / max return their second operand on NaN, so NaN passes through the clamp.
  x = V::max(V::set1(-104.0f), V::min(V::set1(88.8f), x));
  const F n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  F r = V::fma(n, V::set1(-0.693359375f), x);
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  static constexpr float kP[] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                 8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
  const F p = V::add(V::fma(V::mul(r, r), polynomial<V>(r, kP), r), V::set1(1.0f));
  const F n1 = V::round(V::mul(n, V::set1(0.5f)));  // two factors keep 2^k normal
  return V::mul(V::mul(p, pow2<V>(n1)), pow2<V>(V::sub(n, n1)));
}

template <class V>
typename V::F vlog(typename V::F x) {
  using F = typename V::F;
  using I = typename V::I;
  const typename V::M subnormal = V::lt(x, V::set1(1.17549435e-38f));
  const F xs = V::select(subnormal, V::mul(x, V::set1(8388608.0f)), x);  // * 2^23
  const I b = V::bits(xs);
  F e = V::cvt(V::isub(V::template shr<23>(b), V::iset1(127)));
  e = V::select(subnormal, V::sub(e, V::set1(23.0f)), e);
  F m = V::from_bits(V::ior(V::iand(b, V::iset1(0x007fffff)), V::iset1(0x3f800000)));
  const typename V::M big = V::lt(V::set1(1.41421356f), m);
  m = V::select(big, V::mul(m, V::set1(0.5f)), m);
  e = V::select(big, V::add(e, V::set1(1.0f)), e);
  const F t = V::sub(m, V::set1(1.0f));
  static constexpr float kP[] = {3.3333331174e-1f,  -2.4999993993e-1f, 2.0000714765e-1f,
                                 -1.6668057665e-1f, 1.4249322787e-1f,  -1.2420140846e-1f,
                                 1.1676998740e-1f,  -1.1514610310e-1f, 7.0376836292e-2f};
  const F t2 = V::mul(t, t);
  F y = V::mul(V::mul(t2, t), polynomial<V>(t, kP));
  y = V::fma(e, V::set1(-2.12194440e-4f), y);
  y = V::fma(t2, V::set1(-0.5f), y);
  F r = V::fma(e, V::set1(0.693359375f), V::add(t, y));
  const F zero = V::set1(0.0f);
  r = V::select(V::eq(x, zero), V::set1(-__builtin_inff()), r);
  r = V::select(V::lt(x, zero), V::set1(__builtin_nanf("")), r);
  r = V::select(V::eq(x, V::set1(__builtin_inff())), x, r);
  return V::select(V::isnan(x), x, r);
}

template <class V>
typename V::F vabs(typename V::F x) {
  return V::from_bits(V::iand(V::bits(x), V::iset1(0x7fffffff)));
}

template <class V>
typename V::F vneg(typename V::F x) {
  return V::from_bits(V::ixor(V::bits(x), V::iset1(static_cast<int32_t>(0x80000000u))));
}

// tanh is odd: both branches work on |x| and the sign of x is put back (keeps tanh(-0) = -0).
template <class V>
typename V::F vtanh(typename V::F x) {
  using F = typename V::F;
  const F a = vabs<V>(x);
  static constexpr float kQ[] = {-0.3333333134651184f,  0.13333211839199066f,
                                 -0.05394745245575905f, 0.021703990176320076f,
                                 -0.00818463321775198f, 0.002148957457393408f};
  const F a2 = V::mul(a, a);
  const F small = V::fma(V::mul(a2, a), polynomial<V>(a2, kQ), a);
  const F one = V::set1(1.0f);
  const F e = vexp<V>(V::add(a, a));
  const F large = V::sub(one, V::div(V::set1(2.0f), V::add(e, one)));
  const F r = V::select(V::lt(a, V::set1(0.625f)), small, large);
  const F sign = V::from_bits(V::iand(V::bits(x), V::iset1(static_cast<int32_t>(0x80000000u))));
  return V::from_bits(V::ior(V::bits(r), V::bits(sign)));
}

// 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below: exp never overflows, so tiny results
// for very negative x keep their relative accuracy.
template <class V>
typename V::F vsigmoid(typename V::F x) {
  using F = typename V::F;
  const F e = vexp<V>(vneg<V>(vabs<V>(x)));
  const F one = V::set1(1.0f);
  const F r = V::div(V::select(V::lt(x, V::set1(0.0f)), e, one), V::add(one, e));
  return V::select(V::isnan(x), x, r);
}

template <class V>
typename V::F vsilu(typename V::F x) {
  return V::mul(x, vsigmoid<V>(x));
}

// x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2. erfc(z) for z = |x| / sqrt 2 is
// exp(-z^2) * t * h(t - 1/2), t = 1 / (1 + z / 2), h a least-squares polynomial in relative
// error; exp(-x^2 / 2) takes x^2 as a head and an FMA-exact tail so large |x| keep accuracy.
template <class V>
typename V::F vgelu(typename V::F x) {
  using F = typename V::F;
  const F a = V::min(V::set1(16.0f), vabs<V>(x));  // Phi is 0 or 1 in f32 beyond
  const F z = V::mul(a, V::set1(0.70710678118654752f));
  const F t = V::div(V::set1(1.0f), V::fma(z, V::set1(0.5f), V::set1(1.0f)));
  static constexpr float kH[] = {0.5107913613319397f,   0.687160849571228f,   0.5589421391487122f,
                                 0.14575126767158508f,  -0.1719842404127121f, -0.10313189774751663f,
                                 0.09688186645507812f,  0.04797564074397087f, -0.06583083420991898f,
                                 0.0072348834946751595f};
  const F erfcx = V::mul(t, polynomial<V>(V::sub(t, V::set1(0.5f)), kH));
  const F s2 = V::mul(a, a);
  const F lo = V::fma(a, a, vneg<V>(s2));
  F g = vexp<V>(V::mul(s2, V::set1(-0.5f)));
  g = V::fma(g, V::mul(lo, V::set1(-0.5f)), g);
  const F half_erfc = V::mul(V::mul(erfcx, g), V::set1(0.5f));
  const F phi = V::select(V::lt(x, V::set1(0.0f)), half_erfc, V::sub(V::set1(1.0f), half_erfc));
  return V::mul(x, phi);
}

// 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): no
// cancellation for negative x.
template <class V>
typename V::F vgelu_tanh(typename V::F x) {
  using F = typename V::F;
  const F x3 = V::mul(V::mul(x, x), x);
  const F u = V::mul(V::fma(x3, V::set1(0.044715f), x), V::set1(0.7978845608028654f));
  return V::div(x, V::add(V::set1(1.0f), vexp<V>(V::mul(u, V::set1(-2.0f)))));
}

}  // namespace
}  // namespace braid::kernels::cpu
