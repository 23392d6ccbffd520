// The amx level's fused 4-bit GEMM block (quant_impl.h, gemm4_tile_amx; Note [gemm_4bit on AMX]
// in quant.cc): the dequantized tile rounded to bf16 in the k-pair layout, x's rows read in place
// as A tiles, the products on AMX tiles.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "bf16_tiles.h"
#include "quant_impl.h"

namespace braid::kernels::cpu::avx512bf16 {

void gemm4_amx_begin() {
  amx_configure();
}

void gemm4_amx_end() {
  amx_release();
}

void gemm4_tile_amx(const uint16_t* x, int64_t m, const float* w, int64_t r, int64_t k, void* y,
                    int64_t ldy, bool y_bf16, uint16_t* scratch) {
  // scratch: the tile's rows as bf16 (32 x k), the same in pair layout (k / 2 pair rows of 32
  // columns), a zero-padded copy of x's last rows (32 x k). No std containers here: their
  // inline members would be compiled for this level under their ordinary names
  // (cmake/check_isa_symbols.py).
  uint16_t* const rows16 = scratch;
  uint16_t* const pairs = scratch + 32 * k;
  uint16_t* const xpad = scratch + 64 * k;
  std::memset(rows16, 0, sizeof(uint16_t) * static_cast<size_t>(32 * k));
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t p = 0; p < k; p += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(w + j * k + p));
      std::memcpy(rows16 + j * k + p, &h, 32);
    }
  }
  // Rows of k / 2 words (pairs) -> k / 2 pair rows of 32 words: B[p][j] = bf16(w[j, p]).
  const int64_t words = k / 2;
  for (int64_t q = 0; q < words; q += 16) {
    for (int64_t j = 0; j < 32; j += 16) {
      transpose_words16(reinterpret_cast<const uint32_t*>(rows16) + j * words + q, words,
                        reinterpret_cast<uint32_t*>(pairs) + q * 32 + j, 32);
    }
  }
  alignas(64) float c[32 * 32];
  for (int64_t i0 = 0; i0 < m; i0 += 32) {
    const int64_t rows = m - i0 < 32 ? m - i0 : 32;
    const uint16_t* a = x + i0 * k;
    if (rows < 32) {  // the A tiles read 32 rows: the last ones from a zero-padded copy
      std::memcpy(xpad, a, sizeof(uint16_t) * static_cast<size_t>(rows * k));
      std::memset(xpad + rows * k, 0, sizeof(uint16_t) * static_cast<size_t>((32 - rows) * k));
      a = xpad;
    }
    amx_block<false>(k / kAmxK, a, k, pairs, 64, c, 32);
    const auto mask = static_cast<__mmask16>((1u << (r < 16 ? r : 16)) - 1);
    const auto mask_hi = static_cast<__mmask16>(r > 16 ? (1u << (r - 16)) - 1 : 0);
    for (int64_t i = 0; i < rows; ++i) {
      const __m512 lo = _mm512_load_ps(c + i * 32), hi = _mm512_load_ps(c + i * 32 + 16);
      if (y_bf16) {
        uint16_t* out = static_cast<uint16_t*>(y) + (i0 + i) * ldy;
        _mm256_mask_storeu_epi16(out, mask, (__m256i)_mm512_cvtneps_pbh(lo));
        _mm256_mask_storeu_epi16(out + 16, mask_hi, (__m256i)_mm512_cvtneps_pbh(hi));
      } else {
        float* out = static_cast<float*>(y) + (i0 + i) * ldy;
        _mm512_mask_storeu_ps(out, mask, lo);
        _mm512_mask_storeu_ps(out + 16, mask_hi, hi);
      }
    }
  }
}

}  // namespace braid::kernels::cpu::avx512bf16
