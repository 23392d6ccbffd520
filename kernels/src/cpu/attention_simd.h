// The register-blocked f32 products of the blocked attention path (attention_impl.h), written
// once against a small vector-traits struct V (W lanes: load, masked load / store, broadcast,
// fma) and instantiated per ISA file. Internal linkage only (Note [ISA files and the ODR] in
// elementwise_simd.h): no inline function of a shared header, no exceptions.
//
// A micro-tile is MR rows x NV vectors of C held in registers; for each p it loads NV vectors
// of B's row p and broadcasts MR values of A. Column tails use masked loads and stores, row
// tails a smaller MR: both run the same fma per element, so an element's bits do not depend
// on where it falls.
#pragma once

#include <cstdint>

#include "attention_impl.h"

namespace braid::kernels::cpu {
namespace {

template <class V, int MR, int NV, bool kMasked>
inline void attn_micro(const AttnMatmul& g, int64_t i0, int64_t j0, typename V::M tail) {
  using F = typename V::F;
  F acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) {
      float* cp = g.c + (i0 + r) * g.ldc + j0 + v * V::kW;
      if (g.accumulate) {
        acc[r][v] = (kMasked && v == NV - 1) ? V::load_mask(cp, tail) : V::load(cp);
      } else {
        acc[r][v] = V::zero();
      }
    }
  }
  const float* a0 = g.a + i0 * g.a_rs;
  for (int64_t p = 0; p < g.k; ++p) {
    const float* brow = g.b + p * g.ldb + j0;
    F bv[NV];
    for (int v = 0; v < NV; ++v) {
      bv[v] = (kMasked && v == NV - 1) ? V::load_mask(brow + v * V::kW, tail)
                                       : V::load(brow + v * V::kW);
    }
    const float* ap = a0 + p * g.a_cs;
    for (int r = 0; r < MR; ++r) {
      const F av = V::set1(ap[r * g.a_rs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) {
      float* cp = g.c + (i0 + r) * g.ldc + j0 + v * V::kW;
      if (kMasked && v == NV - 1) {
        V::store_mask(cp, tail, acc[r][v]);
      } else {
        V::store(cp, acc[r][v]);
      }
    }
  }
}

// Rows i0 .. i0 + rows (rows <= kMR) of one column panel.
template <class V, int kMR, int NV, bool kMasked>
inline void attn_rows(const AttnMatmul& g, int64_t i0, int64_t rows, int64_t j0,
                      typename V::M tail) {
  if constexpr (kMR > 1) {
    if (rows < kMR) return attn_rows<V, kMR - 1, NV, kMasked>(g, i0, rows, j0, tail);
  }
  attn_micro<V, kMR, NV, kMasked>(g, i0, j0, tail);
}

template <class V, int kMR, int NV, bool kMasked>
inline void attn_panel(const AttnMatmul& g, int64_t j0, typename V::M tail) {
  for (int64_t i0 = 0; i0 < g.m; i0 += kMR) {
    const int64_t rows = g.m - i0 < kMR ? g.m - i0 : kMR;
    attn_rows<V, kMR, NV, kMasked>(g, i0, rows, j0, tail);
  }
}

// Column panels of 2 vectors (B's panel stays in L1 while every row tile passes over it),
// then the tail: one full vector, and a masked one.
template <class V, int kMR>
inline void attn_matmul_impl(const AttnMatmul& g) {
  if (g.m <= 0 || g.n <= 0) return;
  constexpr int kW = V::kW;
  int64_t j0 = 0;
  for (; j0 + 2 * kW <= g.n; j0 += 2 * kW) attn_panel<V, kMR, 2, false>(g, j0, V::mask(0));
  for (; j0 + kW <= g.n; j0 += kW) attn_panel<V, kMR, 1, false>(g, j0, V::mask(0));
  if (j0 < g.n) attn_panel<V, kMR, 1, true>(g, j0, V::mask(static_cast<int>(g.n - j0)));
}

}  // namespace
}  // namespace braid::kernels::cpu
