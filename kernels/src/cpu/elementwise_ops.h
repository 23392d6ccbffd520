// The SIMD inner loops of binary(), unary(), axpby() and scale() for f32, f16 and bf16
// (loaded to f32, computed in f32, rounded once on store), written once over a
// vector-traits type V and instantiated by the *_avx2.cc / *_avx512.cc files through the
// fill_*_table_for<V>() functions at the bottom. Internal linkage throughout (Note [ISA
// files and the ODR] in elementwise_simd.h).
#pragma once

#include <cstring>

#include "braid/kernels/cpu.h"
#include "elementwise_kernels.h"
#include "elementwise_math.h"
#include "elementwise_simd.h"

namespace braid::kernels::cpu {
namespace {

// ---- binary -------------------------------------------------------------------------------

template <class V, BinaryOp kOp>
typename V::F binop(typename V::F a, typename V::F b) {
  if constexpr (kOp == BinaryOp::kAdd) return V::add(a, b);
  if constexpr (kOp == BinaryOp::kSub) return V::sub(a, b);
  if constexpr (kOp == BinaryOp::kMul) return V::mul(a, b);
  if constexpr (kOp == BinaryOp::kDiv) return V::div(a, b);
  // a > b ? a : b (b on NaN or equal), then a NaN in a wins: NaN propagates either way.
  if constexpr (kOp == BinaryOp::kMax) return V::select(V::isnan(a), a, V::max(a, b));
  if constexpr (kOp == BinaryOp::kMin) return V::select(V::isnan(a), a, V::min(a, b));
}

// W copies of *p as one vector (a broadcast operand), without calling float_types.h.
template <class V, class T>
typename V::F broadcast(const T* p) {
  T buf[V::kW];
  for (int k = 0; k < V::kW; ++k) std::memcpy(static_cast<void*>(&buf[k]), p, sizeof(T));
  return load_f32<V>(static_cast<const T*>(buf));
}

template <class V, class T, BinaryOp kOp, BinaryPattern kPattern>
void binary_loop(int64_t n, const void* av, const void* bv, void* outv) {
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  T* out = static_cast<T*>(outv);
  using F = typename V::F;
  F a_fixed{}, b_fixed{};
  if constexpr (kPattern == kScalarVec) a_fixed = broadcast<V>(a);
  if constexpr (kPattern == kVecScalar) b_fixed = broadcast<V>(b);
  auto step = [&](const T* ap, const T* bp, T* op) {
    const F x = kPattern == kScalarVec ? a_fixed : load_f32<V>(ap);
    const F y = kPattern == kVecScalar ? b_fixed : load_f32<V>(bp);
    store_f32<V>(op, binop<V, kOp>(x, y));
  };
  int64_t i = 0;
  for (; i + V::kW <= n; i += V::kW) step(a + i, b + i, out + i);
  const int64_t rest = n - i;
  if (rest == 0) return;
  T abuf[V::kW], bbuf[V::kW], obuf[V::kW];
  std::memset(static_cast<void*>(abuf), 0, sizeof(abuf));
  std::memset(static_cast<void*>(bbuf), 0, sizeof(bbuf));
  const size_t bytes = static_cast<size_t>(rest) * sizeof(T);
  if (kPattern != kScalarVec) std::memcpy(static_cast<void*>(abuf), a + i, bytes);
  if (kPattern != kVecScalar) std::memcpy(static_cast<void*>(bbuf), b + i, bytes);
  step(abuf, bbuf, obuf);
  std::memcpy(static_cast<void*>(out + i), obuf, bytes);
}

template <class V, class T, BinaryOp kOp>
void set_binary(BinaryTable& t, int dt) {
  auto& row = t.fn[static_cast<int>(kOp)][dt];
  row[kVecVec] = binary_loop<V, T, kOp, kVecVec>;
  row[kVecScalar] = binary_loop<V, T, kOp, kVecScalar>;
  row[kScalarVec] = binary_loop<V, T, kOp, kScalarVec>;
}

template <class V, class T>
void set_binary_dtype(BinaryTable& t, int dt) {
  set_binary<V, T, BinaryOp::kAdd>(t, dt);
  set_binary<V, T, BinaryOp::kSub>(t, dt);
  set_binary<V, T, BinaryOp::kMul>(t, dt);
  set_binary<V, T, BinaryOp::kDiv>(t, dt);
  set_binary<V, T, BinaryOp::kMax>(t, dt);
  set_binary<V, T, BinaryOp::kMin>(t, dt);
}

template <class V>
void fill_binary_table_for(BinaryTable& t) {
  set_binary_dtype<V, float>(t, kEwF32);
  set_binary_dtype<V, half>(t, kEwF16);
  set_binary_dtype<V, bfloat16>(t, kEwBF16);
}

// ---- unary --------------------------------------------------------------------------------

template <class V, UnaryOp kOp>
typename V::F unop(typename V::F x) {
  using F = typename V::F;
  if constexpr (kOp == UnaryOp::kExp) return vexp<V>(x);
  if constexpr (kOp == UnaryOp::kLog) return vlog<V>(x);
  if constexpr (kOp == UnaryOp::kTanh) return vtanh<V>(x);
  if constexpr (kOp == UnaryOp::kSigmoid) return vsigmoid<V>(x);
  if constexpr (kOp == UnaryOp::kRelu) return V::max(V::set1(0.0f), x);  // 0 > x ? 0 : x
  if constexpr (kOp == UnaryOp::kGelu) return vgelu<V>(x);
  if constexpr (kOp == UnaryOp::kGeluTanh) return vgelu_tanh<V>(x);
  if constexpr (kOp == UnaryOp::kSilu) return vsilu<V>(x);
  if constexpr (kOp == UnaryOp::kSqrt) return V::sqrt(x);
  if constexpr (kOp == UnaryOp::kRsqrt) {
    // A correctly rounded sqrt and one division: <= 1 ulp, and 0, Inf, subnormals and
    // negatives come out as 1 / std::sqrt gives them, with no estimate to patch.
    return V::div(V::set1(1.0f), V::sqrt(x));
  }
  if constexpr (kOp == UnaryOp::kNeg) return vneg<V>(x);
  if constexpr (kOp == UnaryOp::kAbs) return vabs<V>(x);
  return F{};
}

template <class V, class T, UnaryOp kOp>
void unary_loop(int64_t n, const void* x, void* out) {
  map_tail<V>(static_cast<const T*>(x), static_cast<T*>(out), n,
              [](const T* in, T* o) { store_f32<V>(o, unop<V, kOp>(load_f32<V>(in))); });
}

template <class V, class T>
void set_unary_dtype(UnaryTable& t, int dt) {
  auto set = [&](auto op_constant) {
    constexpr UnaryOp kOp = decltype(op_constant)::value;
    t.fn[static_cast<int>(kOp)][dt] = unary_loop<V, T, kOp>;
  };
  set(std::integral_constant<UnaryOp, UnaryOp::kExp>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kLog>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kTanh>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kSigmoid>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kRelu>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kGelu>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kGeluTanh>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kSilu>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kSqrt>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kRsqrt>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kNeg>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kAbs>{});
}

template <class V>
void fill_unary_table_for(UnaryTable& t) {
  set_unary_dtype<V, float>(t, kEwF32);
  set_unary_dtype<V, half>(t, kEwF16);
  set_unary_dtype<V, bfloat16>(t, kEwBF16);
}

// ---- axpby / scale --------------------------------------------------------------------------

// out may alias x or y: each vector is loaded before the store that may overwrite it.
template <class V, class T>
void axpby_loop(int64_t n, double alpha, const void* xv, double beta, const void* yv, void* outv) {
  const T* x = static_cast<const T*>(xv);
  const T* y = static_cast<const T*>(yv);
  T* out = static_cast<T*>(outv);
  const typename V::F a = V::set1(static_cast<float>(alpha));
  const typename V::F b = V::set1(static_cast<float>(beta));
  auto step = [&](const T* xp, const T* yp, T* op) {
    store_f32<V>(op, V::add(V::mul(a, load_f32<V>(xp)), V::mul(b, load_f32<V>(yp))));
  };
  int64_t i = 0;
  for (; i + V::kW <= n; i += V::kW) step(x + i, y + i, out + i);
  const int64_t rest = n - i;
  if (rest == 0) return;
  T xbuf[V::kW], ybuf[V::kW], obuf[V::kW];
  std::memset(static_cast<void*>(xbuf), 0, sizeof(xbuf));
  std::memset(static_cast<void*>(ybuf), 0, sizeof(ybuf));
  const size_t bytes = static_cast<size_t>(rest) * sizeof(T);
  std::memcpy(static_cast<void*>(xbuf), x + i, bytes);
  std::memcpy(static_cast<void*>(ybuf), y + i, bytes);
  step(xbuf, ybuf, obuf);
  std::memcpy(static_cast<void*>(out + i), obuf, bytes);
}

template <class V, class T>
void scale_loop(int64_t n, double alpha, const void* x, void* out) {
  const typename V::F a = V::set1(static_cast<float>(alpha));
  map_tail<V>(static_cast<const T*>(x), static_cast<T*>(out), n,
              [a](const T* in, T* o) { store_f32<V>(o, V::mul(a, load_f32<V>(in))); });
}

template <class V>
void fill_axpby_table_for(AxpbyTable& t) {
  t.axpby[kEwF32] = axpby_loop<V, float>;
  t.axpby[kEwF16] = axpby_loop<V, half>;
  t.axpby[kEwBF16] = axpby_loop<V, bfloat16>;
  t.scale[kEwF32] = scale_loop<V, float>;
  t.scale[kEwF16] = scale_loop<V, half>;
  t.scale[kEwBF16] = scale_loop<V, bfloat16>;
}

}  // namespace
}  // namespace braid::kernels::cpu
