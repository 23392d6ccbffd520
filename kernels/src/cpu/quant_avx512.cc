// AVX-512 quantization kernels: the int8 GEMM with 32 int8 lanes widened to int16 and summed by
// vpmaddwd; 4-bit dequantization as a 16-entry vpermps lookup of the block's scaled code table
// (the same products the scalar path stores, so the same bits); the fused 4-bit GEMM's inner
// block (one 16-lane register per dot product, Note [gemm_4bit order] in quant.cc); LLM.int8's
// row absmax and row quantization.
#include <immintrin.h>

#include "quant_impl.h"

namespace braid::kernels::cpu::avx512 {
namespace {

int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t k) {
  __m512i acc = _mm512_setzero_si512();
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    const __m512i va =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + p)));
    const __m512i vb =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p)));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(va, vb));
  }
  int32_t sum = _mm512_reduce_add_epi32(acc);
  for (; p < k; ++p) sum += int32_t{a[p]} * int32_t{b[p]};
  return sum;
}

void gemm_i8(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = dot_i8(a + i * k, b + j * k, k);
  }
}

// The 16 lanes' sum modulo 2^32. GCC's _mm512_reduce_add_epi32 adds as int, which is undefined
// (UBSan: signed overflow) for the biased VNNI sums below that are meant to wrap; the vector
// adds here are on unsigned lanes.
__attribute__((target("avx512f"))) uint32_t reduce_add_wrapping(__m512i v) {
  __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(t));
}

// Note [VNNI int8 dot]. vpdpbusd multiplies unsigned by signed bytes, so a is biased to
// a + 128 (a XOR 0x80) and the bias taken back once: sum a b = sum (a + 128) b - 128 sum b. The
// lane sums wrap modulo 2^32, and so does the correction; the true sum fits in int32 (k <
// 133,000 and |a|, |b| <= 127, the caller's contract), so the result is exact: the scalar bits.
__attribute__((target("avx512vnni"))) void gemm_i8_vnni(const int8_t* a, const int8_t* b, int64_t m,
                                                        int64_t n, int64_t k, int32_t* c) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i ones = _mm512_set1_epi8(1);
  const int64_t tail = k % 64;
  const __mmask64 tail_mask = tail == 0 ? 0 : (~uint64_t{0} >> (64 - tail));
  for (int64_t j = 0; j < n; ++j) {
    const int8_t* br = b + j * k;
    // sum b, through the same instruction: (1) * b summed in groups of four.
    __m512i bs = _mm512_setzero_si512();
    int64_t p = 0;
    for (; p + 64 <= k; p += 64) bs = _mm512_dpbusd_epi32(bs, ones, _mm512_loadu_si512(br + p));
    if (tail) bs = _mm512_dpbusd_epi32(bs, ones, _mm512_maskz_loadu_epi8(tail_mask, br + p));
    const uint32_t bsum = reduce_add_wrapping(bs);
    for (int64_t i = 0; i < m; ++i) {
      const int8_t* ar = a + i * k;
      __m512i acc = _mm512_setzero_si512();
      for (p = 0; p + 64 <= k; p += 64) {
        const __m512i va = _mm512_xor_si512(_mm512_loadu_si512(ar + p), bias);
        acc = _mm512_dpbusd_epi32(acc, va, _mm512_loadu_si512(br + p));
      }
      if (tail) {  // masked-off b lanes are 0, so their biased a adds nothing
        const __m512i va = _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail_mask, ar + p), bias);
        acc = _mm512_dpbusd_epi32(acc, va, _mm512_maskz_loadu_epi8(tail_mask, br + p));
      }
      const uint32_t sum = reduce_add_wrapping(acc);
      c[i * n + j] = static_cast<int32_t>(sum - 128u * bsum);
    }
  }
}

// 8 packed bytes -> 16 floats: nibble indices interleaved hi, lo, hi, lo, ...
void dequant4_pairs(const float* scaled16, const uint8_t* packed, int64_t pairs, float* y) {
  const __m512 table = _mm512_loadu_ps(scaled16);
  int64_t j = 0;
  for (; j + 8 <= pairs; j += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j));
    const __m512i b32 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));  // b0 b0 b1 b1 ..
    const __m512i hi = _mm512_srli_epi32(b32, 4);
    const __m512i lo = _mm512_and_si512(b32, _mm512_set1_epi32(0x0F));
    // Even lanes take the high nibble, odd lanes the low one.
    const __m512i idx = _mm512_mask_blend_epi32(static_cast<__mmask16>(0xAAAA), hi, lo);
    _mm512_storeu_ps(y + 2 * j, _mm512_permutexvar_ps(idx, table));
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
  const __m512 cv = _mm512_loadu_ps(code);
  alignas(64) float scaled[16];
  const int64_t end = start + len;
  for (int64_t e = start; e < end;) {
    const int64_t b = e / bs;
    const int64_t stop = end < (b + 1) * bs ? end : (b + 1) * bs;
    _mm512_store_ps(scaled, _mm512_mul_ps(cv, _mm512_set1_ps(absmax[b])));
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

// s[l] + s[l + 8], then + 4, + 2, + 1: the scalar level's fold.
float fold16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// MR rows of x times NR rows of w, one accumulator each.
template <int MR, int NR>
void gemm4_block(const float* x, int64_t k, const float* w, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    __m512 xv[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) xv[i] = _mm512_loadu_ps(x + i * k + p);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = _mm512_loadu_ps(w + j * k + p);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (p < k) {  // the zero-padded last vector
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - p)) - 1);
    __m512 xv[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) xv[i] = _mm512_maskz_loadu_ps(mask, x + i * k + p);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = _mm512_maskz_loadu_ps(mask, w + j * k + p);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = fold16(acc[i][j]);
}

void gemm4_tile(const float* x, int64_t m, const float* w, int64_t r, int64_t k, float* y,
                int64_t ldy) {
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) {
    int64_t j = 0;
    for (; j + 4 <= r; j += 4) gemm4_block<2, 4>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
    for (; j < r; ++j) gemm4_block<2, 1>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
  }
  for (; i < m; ++i) {
    int64_t j = 0;
    for (; j + 8 <= r; j += 8) gemm4_block<1, 8>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
    for (; j < r; ++j) gemm4_block<1, 1>(x + i * k, k, w + j * k, y + i * ldy + j, ldy);
  }
}

// quant_impl.h's Gemm4AxpyFn: 64 columns of dx held in four registers while the tile's rows go by
// in order; one fma per element and row, as the scalar level.
void gemm4_axpy(const float* dy, int64_t m, int64_t ldy, const float* w, int64_t r, int64_t k,
                float* dx) {
  for (int64_t i = 0; i < m; ++i) {
    float* d = dx + i * k;
    const float* a = dy + i * ldy;
    int64_t p = 0;
    for (; p + 64 <= k; p += 64) {
      __m512 acc[4];
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) acc[q] = _mm512_loadu_ps(d + p + 16 * q);
      for (int64_t j = 0; j < r; ++j) {
        const __m512 av = _mm512_set1_ps(a[j]);
        const float* wr = w + j * k + p;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
          acc[q] = _mm512_fmadd_ps(av, _mm512_loadu_ps(wr + 16 * q), acc[q]);
      }
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) _mm512_storeu_ps(d + p + 16 * q, acc[q]);
    }
    for (; p < k; p += 16) {
      const __mmask16 lanes = k - p >= 16 ? static_cast<__mmask16>(0xFFFF)
                                          : static_cast<__mmask16>((1u << (k - p)) - 1);
      __m512 acc = _mm512_maskz_loadu_ps(lanes, d + p);
      for (int64_t j = 0; j < r; ++j) {
        acc =
            _mm512_fmadd_ps(_mm512_set1_ps(a[j]), _mm512_maskz_loadu_ps(lanes, w + j * k + p), acc);
      }
      _mm512_mask_storeu_ps(d + p, lanes, acc);
    }
  }
}

float row_absmax(const float* x, int64_t n, float threshold, bool* outlier) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 thr = _mm512_set1_ps(threshold);
  const bool decompose = threshold > 0;
  __m512 m = _mm512_setzero_ps();
  __mmask16 any = 0;
  int64_t c = 0;
  for (; c < n; c += 16) {
    const __mmask16 lanes =
        n - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - c)) - 1);
    const __m512 a = _mm512_andnot_ps(sign, _mm512_maskz_loadu_ps(lanes, x + c));
    __mmask16 keep = lanes;
    if (decompose) {
      const __mmask16 out = _mm512_mask_cmp_ps_mask(lanes, a, thr, _CMP_GE_OQ);
      any |= out;
      keep = static_cast<__mmask16>(lanes & ~out);
    }
    // max(a, m) returns m when a is NaN: NaN is skipped as std::max(m, NaN) skips it.
    m = _mm512_mask_max_ps(m, keep, a, m);
  }
  *outlier = any != 0;
  return _mm512_reduce_max_ps(m);
}

void quant_row_i8(const float* x, int64_t n, float scale, int8_t* q) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 lanes =
        n - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - c)) - 1);
    __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, x + c), s),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // min / max return their second operand when one is NaN: (lo, v) keeps a NaN, as clamp does.
    v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);  // NaN -> 0
    _mm_mask_storeu_epi8(q + c, lanes, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
}

}  // namespace

void fill_quant_table(QuantTable& t) {
  // VNNI is not an IsaTable level of its own: where the CPU has it, the AVX-512 level's int8 GEMM
  // uses it (exact, so the bits are the same either way).
  t.gemm_i8 = __builtin_cpu_supports("avx512vnni") ? gemm_i8_vnni : gemm_i8;
  t.dequant4_pairs = dequant4_pairs;
  t.dequant4_range = dequant4_range;
  t.gemm4_tile = gemm4_tile;
  t.gemm4_axpy = gemm4_axpy;
  t.row_absmax = row_absmax;
  t.quant_row_i8 = quant_row_i8;
}

}  // namespace braid::kernels::cpu::avx512
