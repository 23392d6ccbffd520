// The SIMD inner loops of the layer kernels (nn_kernels.h), written once over the vector
// traits of elementwise_vec_avx2.h / elementwise_vec_avx512.h and instantiated by
// nn_avx2.cc and nn_avx512.cc. Include only from those files: everything here has internal
// linkage (Note [ISA files and the ODR] in docs/kernels.md).
#pragma once

#include <cmath>
#include <cstring>

#include "elementwise_math.h"
#include "nn_kernels.h"

namespace braid::kernels::cpu {
namespace {

// Phi(x) and x phi(x) for gelu's derivative, with vgelu's erfc approximation
// (elementwise_math.h): erfc(z) = exp(-z^2) t h(t - 1/2), t = 1 / (1 + z / 2).
template <class V>
typename V::F vgelu_grad(typename V::F x) {
  using F = typename V::F;
  const F a = V::min(V::set1(16.0f), vabs<V>(x));
  const F z = V::mul(a, V::set1(0.70710678118654752f));
  const F t = V::div(V::set1(1.0f), V::fma(z, V::set1(0.5f), V::set1(1.0f)));
  static constexpr float kH[] = {0.5107913613319397f,   0.687160849571228f,   0.5589421391487122f,
                                 0.14575126767158508f,  -0.1719842404127121f, -0.10313189774751663f,
                                 0.09688186645507812f,  0.04797564074397087f, -0.06583083420991898f,
                                 0.0072348834946751595f};
  const F erfcx = V::mul(t, polynomial<V>(V::sub(t, V::set1(0.5f)), kH));
  const F s2 = V::mul(a, a);
  const F lo = V::fma(a, a, vneg<V>(s2));
  F g = vexp<V>(V::mul(s2, V::set1(-0.5f)));  // exp(-x^2 / 2)
  g = V::fma(g, V::mul(lo, V::set1(-0.5f)), g);
  const F half_erfc = V::mul(V::mul(erfcx, g), V::set1(0.5f));
  const F cdf = V::select(V::lt(x, V::set1(0.0f)), half_erfc, V::sub(V::set1(1.0f), half_erfc));
  const F pdf = V::mul(g, V::set1(0.3989422804014327f));
  return V::fma(x, pdf, cdf);
}

template <class V>
typename V::F vgelu_tanh_grad(typename V::F x) {
  using F = typename V::F;
  const F k = V::set1(0.7978845608028654f);
  const F x2 = V::mul(x, x);
  const F u = V::mul(V::fma(V::mul(x2, x), V::set1(0.044715f), x), k);
  const F th = vtanh<V>(u);
  const F half = V::set1(0.5f);
  const F left = V::mul(half, V::add(V::set1(1.0f), th));
  const F du = V::mul(k, V::fma(x2, V::set1(3.0f * 0.044715f), V::set1(1.0f)));
  const F sech2 = V::sub(V::set1(1.0f), V::mul(th, th));
  return V::add(left, V::mul(V::mul(V::mul(half, x), sech2), du));
}

template <class V>
typename V::F vsilu_grad(typename V::F x) {
  const auto s = vsigmoid<V>(x);
  const auto one = V::set1(1.0f);
  return V::mul(s, V::fma(x, V::sub(one, s), one));
}

// As the scalar level, x is clamped to [-1e4, 1e4] (derivatives are 0 or 1 beyond) so +-Inf
// gives the limits instead of Inf * 0; min / max pass NaN through.
template <class V, ActivationGrad kOp>
typename V::F act_grad_vec(typename V::F x, typename V::F dy) {
  if constexpr (kOp == ActivationGrad::kRelu) {
    return V::select(V::lt(V::set1(0.0f), x), dy, V::set1(0.0f));
  } else {
    const auto xc = V::max(V::set1(-1e4f), V::min(V::set1(1e4f), x));
    if constexpr (kOp == ActivationGrad::kGelu) return V::mul(dy, vgelu_grad<V>(xc));
    if constexpr (kOp == ActivationGrad::kGeluTanh) return V::mul(dy, vgelu_tanh_grad<V>(xc));
    if constexpr (kOp == ActivationGrad::kSilu) return V::mul(dy, vsilu_grad<V>(xc));
  }
}

// Full vectors, then the tail through the same vector code on zero-padded stack copies.
template <class V, ActivationGrad kOp>
void act_grad_loop(int64_t n, const float* x, const float* dy, float* dx) {
  int64_t i = 0;
  for (; i + V::kW <= n; i += V::kW) {
    V::store(dx + i, act_grad_vec<V, kOp>(V::load(x + i), V::load(dy + i)));
  }
  const int64_t rest = n - i;
  if (rest == 0) return;
  float xb[V::kW] = {}, db[V::kW] = {};
  std::memcpy(xb, x + i, static_cast<size_t>(rest) * sizeof(float));
  std::memcpy(db, dy + i, static_cast<size_t>(rest) * sizeof(float));
  V::store(db, act_grad_vec<V, kOp>(V::load(xb), V::load(db)));
  std::memcpy(dx + i, db, static_cast<size_t>(rest) * sizeof(float));
}

template <class V>
void act_grad_simd(ActivationGrad op, int64_t n, const float* x, const float* dy, float* dx) {
  switch (op) {
    case ActivationGrad::kRelu:
      return act_grad_loop<V, ActivationGrad::kRelu>(n, x, dy, dx);
    case ActivationGrad::kGelu:
      return act_grad_loop<V, ActivationGrad::kGelu>(n, x, dy, dx);
    case ActivationGrad::kGeluTanh:
      return act_grad_loop<V, ActivationGrad::kGeluTanh>(n, x, dy, dx);
    case ActivationGrad::kSilu:
      return act_grad_loop<V, ActivationGrad::kSilu>(n, x, dy, dx);
  }
}

// Lane j of v, folded pairwise: (l0 + l(W/2)) ... in a fixed order.
template <class V>
float fold_sum(typename V::F v) {
  float l[V::kW];
  V::store(l, v);
  for (int w = V::kW / 2; w > 0; w /= 2) {
    for (int j = 0; j < w; ++j) l[j] += l[j + w];
  }
  return l[0];
}

template <class V>
float fold_max(typename V::F v) {
  float l[V::kW];
  V::store(l, v);
  float m = l[0];
  for (int j = 1; j < V::kW; ++j) m = l[j] > m ? l[j] : m;
  return m;
}

// max, sum exp(z - max), sum z of one row. A NaN anywhere makes sum_z NaN; max is then
// reported as NaN so lse is NaN, as the scalar reference gives.
template <class V>
void ce_stats_simd(const float* z, int64_t classes, float* max_out, float* sum_exp, float* sum_z) {
  using F = typename V::F;
  const int64_t full = classes / V::kW * V::kW;
  const int64_t rest = classes - full;
  float tail_inf[V::kW], tail_zero[V::kW] = {};
  for (int j = 0; j < V::kW; ++j) tail_inf[j] = -INFINITY;
  std::memcpy(tail_inf, z + full, static_cast<size_t>(rest) * sizeof(float));
  std::memcpy(tail_zero, z + full, static_cast<size_t>(rest) * sizeof(float));

  F vm = V::set1(-INFINITY), vz = V::set1(0.0f);
  for (int64_t i = 0; i < full; i += V::kW) {
    const F x = V::load(z + i);
    vm = V::max(vm, x);
    vz = V::add(vz, x);
  }
  if (rest != 0) {
    vm = V::max(vm, V::load(tail_inf));
    vz = V::add(vz, V::load(tail_zero));
  }
  float m = fold_max<V>(vm);
  const float sz = fold_sum<V>(vz);
  if (sz != sz) m = NAN;  // NaN (no std::isnan: see the ODR note)
  const F vmax = V::set1(m);
  F ve = V::set1(0.0f);
  for (int64_t i = 0; i < full; i += V::kW) ve = V::add(ve, vexp<V>(V::sub(V::load(z + i), vmax)));
  if (rest != 0) {
    // Padding lanes hold -Inf: exp(-Inf - m) is 0 unless m is -Inf too (then the row is NaN
    // anyway, as every real lane is).
    const F e = vexp<V>(V::sub(V::load(tail_inf), vmax));
    float eb[V::kW];
    V::store(eb, e);
    for (int64_t j = rest; j < V::kW; ++j) eb[j] = 0.0f;
    ve = V::add(ve, V::load(eb));
  }
  *max_out = m;
  *sum_exp = fold_sum<V>(ve);
  *sum_z = sz;
}

template <class V>
void ce_grad_simd(const float* z, int64_t classes, float lse, float scale, float offset,
                  float* out) {
  using F = typename V::F;
  const F vl = V::set1(lse), vs = V::set1(scale), vo = V::set1(offset);
  int64_t i = 0;
  for (; i + V::kW <= classes; i += V::kW) {
    V::store(out + i, V::fma(vs, vexp<V>(V::sub(V::load(z + i), vl)), vo));
  }
  const int64_t rest = classes - i;
  if (rest == 0) return;
  float b[V::kW] = {};
  std::memcpy(b, z + i, static_cast<size_t>(rest) * sizeof(float));
  V::store(b, V::fma(vs, vexp<V>(V::sub(V::load(b), vl)), vo));
  std::memcpy(out + i, b, static_cast<size_t>(rest) * sizeof(float));
}

}  // namespace
}  // namespace braid::kernels::cpu
