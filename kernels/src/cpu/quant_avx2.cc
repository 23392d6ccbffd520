// AVX2 quantization kernels: the int8 GEMM for LLM.int8 (16 int8 lanes widened to int16, pairwise
// products summed into int32 by vpmaddwd, exact: 2 * 127^2 fits; rows reduced at the end); 4-bit
// dequantization as a lookup in two 8-entry vpermps tables picked by the code's bit 3 (the same
// products the scalar path stores, so the same bits); the fused 4-bit GEMM's inner block (each
// dot product's 16 lanes in two registers, Note [gemm_4bit order] in quant.cc); LLM.int8's row
// absmax and row quantization.
#include <immintrin.h>

#include "quant_impl.h"

namespace braid::kernels::cpu::avx2 {
namespace {

int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t k) {
  __m256i acc = _mm256_setzero_si256();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    const __m256i va =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + p)));
    const __m256i vb =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + p)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(va, vb));
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  int32_t sum = 0;
  for (int32_t v : lanes) sum += v;
  for (; p < k; ++p) sum += int32_t{a[p]} * int32_t{b[p]};
  return sum;
}

void gemm_i8(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = dot_i8(a + i * k, b + j * k, k);
  }
}

// Two bytes' worth of indices per 32-bit pair: 8 codes (hi, lo, hi, lo, ...) -> 8 floats.
__m256 lookup16(__m256 t_lo, __m256 t_hi, __m256i idx) {
  const __m256 a = _mm256_permutevar8x32_ps(t_lo, idx);  // uses idx & 7
  const __m256 b = _mm256_permutevar8x32_ps(t_hi, idx);
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));  // bit 3
}

void dequant4_pairs(const float* scaled16, const uint8_t* packed, int64_t pairs, float* y) {
  const __m256 t_lo = _mm256_loadu_ps(scaled16), t_hi = _mm256_loadu_ps(scaled16 + 8);
  const __m256i low4 = _mm256_set1_epi32(0x0F);
  int64_t j = 0;
  for (; j + 8 <= pairs; j += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j));
    const __m128i dup = _mm_unpacklo_epi8(bytes, bytes);  // b0 b0 b1 b1 ... b7 b7
    for (int half = 0; half < 2; ++half) {
      const __m256i b32 = _mm256_cvtepu8_epi32(half == 0 ? dup : _mm_srli_si128(dup, 8));
      const __m256i idx =
          _mm256_blend_epi32(_mm256_srli_epi32(b32, 4), _mm256_and_si256(b32, low4), 0xAA);
      _mm256_storeu_ps(y + 2 * j + 8 * half, lookup16(t_lo, t_hi, idx));
    }
  }
  for (; j < pairs; ++j) {
    y[2 * j] = scaled16[packed[j] >> 4];
    y[2 * j + 1] = scaled16[packed[j] & 0x0F];
  }
}

// quant_impl.h's Dequant4RangeFn: per block the 16 products code[c] * absmax in one vector
// multiply (the scalar level's products), then the lookup above.
void dequant4_range(const float* code, const uint8_t* packed, const float* absmax, int64_t bs,
                    int64_t start, int64_t len, float* y) {
  const __m256 c0 = _mm256_loadu_ps(code), c1 = _mm256_loadu_ps(code + 8);
  alignas(64) float scaled[16];
  const int64_t end = start + len;
  for (int64_t e = start; e < end;) {
    const int64_t b = e / bs;
    const int64_t stop = end < (b + 1) * bs ? end : (b + 1) * bs;
    const __m256 a = _mm256_set1_ps(absmax[b]);
    _mm256_store_ps(scaled, _mm256_mul_ps(c0, a));
    _mm256_store_ps(scaled + 8, _mm256_mul_ps(c1, a));
    float* out = y + (e - start);
    int64_t i = e;
    if (i % 2 != 0) *out++ = scaled[packed[i++ / 2] & 0x0F];
    const int64_t pairs = (stop - i) / 2;
    dequant4_pairs(scaled, packed + i / 2, pairs, out);
    out += 2 * pairs;
    i += 2 * pairs;
    if (i < stop) *out = scaled[packed[i / 2] >> 4];
    e = stop;
  }
}

// Lanes 0..7 in lo, 8..15 in hi: s[l] + s[l + 8], then + 4, + 2, + 1 (the scalar level's fold).
float fold16(__m256 lo, __m256 hi) {
  const __m256 a = _mm256_add_ps(lo, hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

__m256i tail_mask(int64_t count) {  // lanes < count set
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
}

template <int MR, int NR>
void gemm4_block(const float* x, int64_t k, const float* w, float* y, int64_t ldy) {
  __m256 acc[MR][NR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    __m256 xv[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      xv[i][0] = _mm256_loadu_ps(x + i * k + p);
      xv[i][1] = _mm256_loadu_ps(x + i * k + p + 8);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m256 w0 = _mm256_loadu_ps(w + j * k + p), w1 = _mm256_loadu_ps(w + j * k + p + 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        acc[i][j][0] = _mm256_fmadd_ps(xv[i][0], w0, acc[i][j][0]);
        acc[i][j][1] = _mm256_fmadd_ps(xv[i][1], w1, acc[i][j][1]);
      }
    }
  }
  if (p < k) {  // the zero-padded last 16 (maskload zeroes the lanes it skips)
    const __m256i m0 = tail_mask(k - p), m1 = tail_mask(k - p - 8);
    __m256 xv[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      xv[i][0] = _mm256_maskload_ps(x + i * k + p, m0);
      xv[i][1] = _mm256_maskload_ps(x + i * k + p + 8, m1);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m256 w0 = _mm256_maskload_ps(w + j * k + p, m0);
      const __m256 w1 = _mm256_maskload_ps(w + j * k + p + 8, m1);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        acc[i][j][0] = _mm256_fmadd_ps(xv[i][0], w0, acc[i][j][0]);
        acc[i][j][1] = _mm256_fmadd_ps(xv[i][1], w1, acc[i][j][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = fold16(acc[i][j][0], acc[i][j][1]);
}

void gemm4_tile(const float* x, int64_t m, const float* w, int64_t r, int64_t k, float* y,
                int64_t ldy) {
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) {
    int64_t j = 0;
    for (; j + 2 <= r; j += 2) gemm4_block<2, 2>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
    for (; j < r; ++j) gemm4_block<2, 1>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
  }
  for (; i < m; ++i) {
    int64_t j = 0;
    for (; j + 4 <= r; j += 4) gemm4_block<1, 4>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
    for (; j < r; ++j) gemm4_block<1, 1>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
  }
}

// quant_impl.h's Gemm4AxpyFn: 32 columns of dx held in four registers while the tile's rows go by
// in order; one fma per element and row, as the scalar level.
void gemm4_axpy(const float* dy, int64_t m, int64_t ldy, const float* w, int64_t r, int64_t k,
                float* dx) {
  for (int64_t i = 0; i < m; ++i) {
    float* d = dx + i * k;
    const float* a = dy + i * ldy;
    int64_t p = 0;
    for (; p + 32 <= k; p += 32) {
      __m256 acc[4];
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[q] = _mm256_loadu_ps(d + p + 8 * q);
      for (int64_t j = 0; j < r; ++j) {
        const __m256 av = _mm256_set1_ps(a[j]);
        const float* wr = w + j * k + p;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
          acc[q] = _mm256_fmadd_ps(av, _mm256_loadu_ps(wr + 8 * q), acc[q]);
      }
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) _mm256_storeu_ps(d + p + 8 * q, acc[q]);
    }
    for (; p < k; p += 8) {
      const __m256i lanes = tail_mask(k - p);
      __m256 acc = _mm256_maskload_ps(d + p, lanes);
      for (int64_t j = 0; j < r; ++j) {
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[j]), _mm256_maskload_ps(w + j * k + p, lanes), acc);
      }
      _mm256_maskstore_ps(d + p, lanes, acc);
    }
  }
}

float row_absmax(const float* x, int64_t n, float threshold, bool* outlier) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 thr = _mm256_set1_ps(threshold);
  const bool decompose = threshold > 0;
  __m256 m = _mm256_setzero_ps();
  __m256 any = _mm256_setzero_ps();
  for (int64_t c = 0; c < n; c += 8) {
    const __m256i lanes = tail_mask(n - c);
    const __m256 a = _mm256_andnot_ps(sign, _mm256_maskload_ps(x + c, lanes));  // absent: 0
    __m256 v = a;
    if (decompose) {
      const __m256 out = _mm256_cmp_ps(a, thr, _CMP_GE_OQ);  // absent lanes are 0 < thr
      any = _mm256_or_ps(any, out);
      v = _mm256_andnot_ps(out, a);  // an outlier counts as 0, which never raises the max
    }
    m = _mm256_max_ps(v, m);  // NaN in v returns m: skipped, as std::max(m, NaN) skips it
  }
  *outlier = _mm256_movemask_ps(any) != 0;
  const __m128 b = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  const __m128 c = _mm_max_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_max_ss(c, _mm_movehdup_ps(c)));
}

void quant_row_i8(const float* x, int64_t n, float scale, int8_t* q) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  // The low byte of each 32-bit lane, gathered into the low 4 bytes of each 128-bit half.
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + c), s),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));            // keeps NaN, as clamp does
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
    const __m256i b = _mm256_shuffle_epi8(_mm256_cvtps_epi32(v), pick);
    const uint32_t lo4 = static_cast<uint32_t>(_mm256_extract_epi32(b, 0));
    const uint32_t hi4 = static_cast<uint32_t>(_mm256_extract_epi32(b, 4));
    const uint64_t word = uint64_t{lo4} | (uint64_t{hi4} << 32);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + c),
                     _mm_cvtsi64_si128(static_cast<long long>(word)));
  }
  if (c < n) {  // the tail through the same vector code on a stack copy
    alignas(32) float tail[8] = {};
    alignas(16) int8_t out[16];
    for (int64_t i = c; i < n; ++i) tail[i - c] = x[i];
    quant_row_i8(tail, 8, scale, out);
    for (int64_t i = c; i < n; ++i) q[i] = out[i - c];
  }
}

}  // namespace

void fill_quant_table(QuantTable& t) {
  t.gemm_i8 = gemm_i8;
  t.dequant4_pairs = dequant4_pairs;
  t.dequant4_range = dequant4_range;
  t.gemm4_tile = gemm4_tile;
  t.gemm4_axpy = gemm4_axpy;
  t.row_absmax = row_absmax;
  t.quant_row_i8 = quant_row_i8;
}

}  // namespace braid::kernels::cpu::avx2
