// Pieces the packed AVX-512 GEMM kernels share (gemm_packed_avx512.cc, f32, and
// gemm_bf16_avx512bf16.cc, bf16 pairs): per-thread packing buffers and the store of a
// 12 x 32 f32 accumulator tile into C. Included only by AVX-512 files; everything here has
// internal linkage, so no AVX-512 code is exported under a name other files share (Note
// [Eigen namespace per ISA], cmake/check_isa_symbols.py).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>

#include "gemm_impl.h"

namespace braid::kernels::cpu {
namespace {

constexpr int64_t kTileRows = 12, kTileCols = 32;  // micro-tile: 12 rows x 2 ZMM

// A 64-byte aligned packing buffer, grown on demand and kept (one per thread: allocating per
// call costs page faults comparable to a 256^3 product). No std::vector: its members would be
// instantiated with AVX-512 code under a name the baseline files share.
class PackScratch {
 public:
  ~PackScratch() { std::free(p_); }
  template <typename T>
  T* get(int64_t n) {
    const int64_t bytes = (n * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64;
    if (bytes > cap_) {
      std::free(p_);
      cap_ = 0;
      p_ = std::aligned_alloc(64, static_cast<size_t>(bytes));
      if (p_ == nullptr) throw_gemm_out_of_memory(bytes / 4);  // in floats
      cap_ = bytes;
    }
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  int64_t cap_ = 0;  // bytes
};

// The lane masks of a 32-column tile row with `cols` valid columns: columns [0, 16) and
// [16, 32).
inline void tile_column_masks(int64_t cols, __mmask16& m0, __mmask16& m1) {
  m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1u);
  m1 = cols >= 32   ? __mmask16(0xffff)
       : cols <= 16 ? __mmask16(0)
                    : __mmask16((1u << (cols - 16)) - 1u);
}

// How a tile's accumulators go into C: alpha acc + beta C on the first k slice, C += alpha
// acc on later ones (C is read only where that needs it); columns past `cols` masked off.
struct TileStore {
  __m512 va, vc_scale;
  bool read_c;
  __mmask16 m0, m1;
  TileStore(int64_t cols, float alpha, float beta, bool first)
      : va(_mm512_set1_ps(alpha)),
        vc_scale(first ? _mm512_set1_ps(beta) : _mm512_set1_ps(1.0f)),
        read_c(!first || beta != 0.0f) {
    tile_column_masks(cols, m0, m1);
  }
  // One row of the tile: accumulators acc0 (columns 0-15) and acc1 (16-31) into crow.
  void row(__m512 acc0, __m512 acc1, float* crow) const {
    __m512 r0 = _mm512_mul_ps(va, acc0);
    __m512 r1 = _mm512_mul_ps(va, acc1);
    if (read_c) {
      r0 = _mm512_fmadd_ps(vc_scale, _mm512_maskz_loadu_ps(m0, crow), r0);
      r1 = _mm512_fmadd_ps(vc_scale, _mm512_maskz_loadu_ps(m1, crow + 16), r1);
    }
    _mm512_mask_storeu_ps(crow, m0, r0);
    _mm512_mask_storeu_ps(crow + 16, m1, r1);
  }
};

// C tile (rows x cols valid) from a 12 x 32 register tile, as TileStore says.
inline void store_tile(const __m512 (&acc)[kTileRows][2], float* c, int64_t ldc, int64_t rows,
                       int64_t cols, float alpha, float beta, bool first) {
  const TileStore st(cols, alpha, beta, first);
#pragma GCC unroll 12
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= rows) break;
    st.row(acc[i][0], acc[i][1], c + i * ldc);
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
