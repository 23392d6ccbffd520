// The tile path's pieces of the causal attention (attention_impl.h, AttnAmxMatmul): bf16
// products on AMX tiles (the amx level) or in vdpbf16ps chains (the avx512bf16 level), and the
// conversions of rounded f32 rows to bf16 operands. The per-head loop that uses them is
// attention.cc's (the tile path).
#include <cstdint>
#include <cstring>

#include "attention_impl.h"
#include "bf16_tiles.h"

namespace braid::kernels::cpu::avx512bf16 {

void attn_amx_begin() {
  amx_configure();
}

void attn_amx_end() {
  amx_release();
}

void attn_matmul_amx(const AttnAmxMatmul& g) {
  const int64_t ktiles = g.k / kAmxK;
  for (int64_t i = 0; i < g.m; i += kAmxBlock) {
    for (int64_t j = 0; j < g.n; j += kAmxBlock) {
      const uint16_t* a = g.a + i * g.lda;
      const uint16_t* b = g.b + 2 * j;  // the block's 32 columns of every pair row
      float* c = g.c + i * g.ldc + j;
      if (g.accumulate) {
        amx_block<true>(ktiles, a, g.lda, b, g.ldb, c, g.ldc);
      } else {
        amx_block<false>(ktiles, a, g.lda, b, g.ldb, c, g.ldc);
      }
    }
  }
}

// The same products without tiles (a CPU with AVX512_BF16 but no AMX: AMD Zen 4). A block of
// 8 rows x 32 columns of C sits in 16 registers; for each k-pair, the two B registers (32
// columns of the pair row) are loaded once and each row's A pair is broadcast into them with
// vdpbf16ps, which adds a[2p] b[2p][j] + a[2p+1] b[2p+1][j] to the f32 sum. m, n and k are
// multiples of 32 (the callers pad), so no block has a remainder.
void attn_matmul_dpbf16(const AttnAmxMatmul& g) {
  constexpr int kRows = 8;
  const int64_t pairs = g.k / 2;
  for (int64_t i = 0; i < g.m; i += kRows) {
    for (int64_t j = 0; j < g.n; j += 32) {
      __m512 acc[kRows][2];
      for (int r = 0; r < kRows; ++r) {
        float* c = g.c + (i + r) * g.ldc + j;
        acc[r][0] = g.accumulate ? _mm512_loadu_ps(c) : _mm512_setzero_ps();
        acc[r][1] = g.accumulate ? _mm512_loadu_ps(c + 16) : _mm512_setzero_ps();
      }
      const uint16_t* a = g.a + i * g.lda;
      const uint16_t* b = g.b + 2 * j;  // the block's 32 columns of every pair row
      for (int64_t p = 0; p < pairs; ++p) {
        const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * g.ldb));
        const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * g.ldb + 32));
        for (int r = 0; r < kRows; ++r) {
          uint32_t pair;
          std::memcpy(&pair, a + r * g.lda + 2 * p, sizeof pair);
          const auto ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
        }
      }
      for (int r = 0; r < kRows; ++r) {
        float* c = g.c + (i + r) * g.ldc + j;
        _mm512_storeu_ps(c, acc[r][0]);
        _mm512_storeu_ps(c + 16, acc[r][1]);
      }
    }
  }
}

namespace {

// 16 f32 that hold bf16 values, as their 16 bf16 bits (the high halves).
inline __m256i high_halves(__m512 v) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
}

inline __m512 load_or_zero(const float* p, int64_t j, int64_t n) {
  if (p == nullptr || j >= n) return _mm512_setzero_ps();
  if (j + 16 <= n) return _mm512_loadu_ps(p + j);
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (n - j)) - 1), p + j);
}

// 32 bf16 (as one ZMM of words) from src[j, j + 32), zeros past n.
inline __m512i words32(const float* src, int64_t j, int64_t n) {
  const __m256i lo = high_halves(load_or_zero(src, j, n));
  const __m256i hi = high_halves(load_or_zero(src, j + 16, n));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

}  // namespace

void attn_bf16_bits(const float* src, int64_t n, int64_t n_pad, uint16_t* dst) {
  int64_t j = 0;
  for (; j + 32 <= n_pad; j += 32) _mm512_storeu_si512(dst + j, words32(src, j, n));
  for (; j < n_pad; ++j) {
    uint32_t u = 0;
    if (j < n) std::memcpy(&u, src + j, 4);
    dst[j] = static_cast<uint16_t>(u >> 16);
  }
}

void attn_bf16_pairs(const float* r0, const float* r1, int64_t n, int64_t n_pad, uint16_t* dst) {
  for (int64_t j = 0; j < n_pad; j += 32) {
    store_pairs(words32(r0, j, n), words32(r1, j, n), dst + 2 * j);
  }
}

void attn_transpose32(const uint32_t* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* dst,
                      int64_t ldd) {
  for (int64_t i = 0; i < rows; i += 16) {
    for (int64_t j = 0; j < cols; j += 16) {
      transpose_words16(src + i * lds + j, lds, dst + j * ldd + i, ldd);
    }
  }
}

void attn_copy_rows(const uint16_t* src, int64_t ld, int64_t t, int64_t tp, int64_t hd,
                    uint16_t* dst) {
  // Rows of 64 to 256 bytes: inline moves instead of a memcpy call per row.
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < hd; c += 32) {
      _mm512_storeu_si512(dst + r * hd + c, _mm512_loadu_si512(src + r * ld + c));
    }
  }
  std::memset(dst + t * hd, 0, sizeof(uint16_t) * static_cast<size_t>((tp - t) * hd));
}

void attn_row_pairs(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst) {
  for (int64_t q = 0; q < rows / 2; ++q) {
    const uint16_t* r0 = src + 2 * q * cols;
    const uint16_t* r1 = r0 + cols;
    for (int64_t c = 0; c < cols; c += 32) {
      store_pairs(_mm512_loadu_si512(r0 + c), _mm512_loadu_si512(r1 + c),
                  dst + q * 2 * cols + 2 * c);
    }
  }
}

float attn_dot(const float* a, const float* b, int64_t len) {
  __m512 acc = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j)));
  }
  if (j < len) {
    const auto m = static_cast<__mmask16>((1u << (len - j)) - 1);
    acc = _mm512_add_ps(
        acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + j), _mm512_maskz_loadu_ps(m, b + j)));
  }
  return fold_halves(acc);
}

}  // namespace braid::kernels::cpu::avx512bf16
