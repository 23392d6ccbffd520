// A packed bf16 GEMM on AVX512_BF16's vdpbf16ps (bf16 A and B in, f32 accumulation and C),
// for the sizes where the packed f32 kernel is used: the same Goto / BLIS loop nest as
// gemm_packed_avx512.cc, but A and B are packed as bf16 k-pairs, so one vdpbf16ps does the
// work of two FMAs and the inputs are never widened to f32 copies (half the bytes packed).
//   A micro-panel, per k-pair q: kMr rows x (a[i, 2q], a[i, 2q + 1]), one 32-bit word a row.
//   B micro-panel, per k-pair q: kNr columns x (b[2q, j], b[2q + 1, j]), two ZMM.
// An odd k is padded with a zero pair element. vdpbf16ps adds both products of a pair to the
// f32 accumulator (denormal inputs and outputs flushed to zero, round to nearest even); the
// k order inside one C element is fixed (kc slices in order, pairs in order), so the result
// does not depend on the thread or run. It differs from the widened f32 path (and the scalar
// reference) by rounding only: docs/reductions-and-gemm.md, "GEMM". A bf16 C with k in one slice
// (GemmCoreBf16::c16) is rounded from the registers, with the bits gemm.cc's f32 staging and
// epilogue give, so the product's f32 result never goes through memory.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "elementwise_simd.h"
#include "elementwise_vec_avx512.h"
#include "gemm_impl.h"
#include "gemm_packed_tile.h"

namespace braid::kernels::cpu::avx512bf16 {
namespace {

constexpr int64_t kMr = kTileRows, kNr = kTileCols;
constexpr int64_t kKc = kBf16Kc, kMc = 144, kNc = 2048;  // kc even: pairs never straddle slices
static_assert(kKc % 2 == 0);

thread_local PackScratch t_apack, t_bpack;

uint16_t a_at(const GemmCoreBf16& g, int64_t i, int64_t p) {
  return g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
}
uint16_t b_at(const GemmCoreBf16& g, int64_t p, int64_t j) {
  return g.trans_b ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j];
}

// Four rows of four 32-bit words (src, src + ld, src + 2 ld, src + 3 ld; 16 bytes each) stored
// transposed: word w of the four rows goes to dst + w * dst_step, 16 bytes (rows in order).
inline void transpose_words_4x4(const uint16_t* src, int64_t ld, uint16_t* dst, int64_t dst_step) {
  const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + ld));
  const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * ld));
  const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 3 * ld));
  const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3);
  const __m128i t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi64(t0, t1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + dst_step), _mm_unpackhi_epi64(t0, t1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * dst_step), _mm_unpacklo_epi64(t2, t3));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * dst_step), _mm_unpackhi_epi64(t2, t3));
}

// A rows [i0, i0 + mc) x k [p0, p0 + kc) (kc2 = kc rounded up to even): panel r holds, per
// k-pair q, kMr rows of two bf16 each.
void pack_a(const GemmCoreBf16& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int64_t kc2,
            uint16_t* dst) {
  for (int64_t r = 0; r < mc; r += kMr) {
    const int64_t rows = mc - r < kMr ? mc - r : kMr;
    uint16_t* panel = dst + r * kc2;
    int64_t q = 0;
    if (!g.trans_a && rows == kMr) {
      // Whole pairs in blocks of 4: a row holds its pairs as consecutive words, so 4 rows x 4
      // words are read 16 bytes a row and transposed in registers.
      for (const int64_t full_q = (kc / 2) & ~int64_t{3}; q < full_q; q += 4) {
        for (int64_t i = 0; i < kMr; i += 4) {
          transpose_words_4x4(g.a + (i0 + r + i) * g.lda + p0 + 2 * q, g.lda,
                              panel + q * 2 * kMr + 2 * i, 2 * kMr);
        }
      }
    } else if (g.trans_a && rows == kMr) {
      // Pair q is rows p, p + 1 of the stored A, contiguous over the 12 rows of the panel:
      // interleave the two 12-element runs.
      for (const int64_t full_q = kc / 2; q < full_q; ++q) {
        const uint16_t* s0 = g.a + (p0 + 2 * q) * g.lda + i0 + r;
        const __m256i x0 = _mm256_maskz_loadu_epi16(0x0fff, s0);
        const __m256i x1 = _mm256_maskz_loadu_epi16(0x0fff, s0 + g.lda);
        const __m256i lo = _mm256_unpacklo_epi16(x0, x1);  // rows 0-3 | 8-11
        const __m256i hi = _mm256_unpackhi_epi16(x0, x1);  // rows 4-7 | 12-15
        uint16_t* d = panel + q * 2 * kMr;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16), _mm256_extracti128_si256(lo, 1));
      }
    }
    for (; q < kc2 / 2; ++q) {
      uint16_t* d = panel + q * 2 * kMr;
      const int64_t p = p0 + 2 * q;
      const bool odd_tail = 2 * q + 1 >= kc;
      int64_t i = 0;
      if (!g.trans_a && !odd_tail) {
        for (; i < rows; ++i) std::memcpy(d + 2 * i, g.a + (i0 + r + i) * g.lda + p, 4);
      } else {
        for (; i < rows; ++i) {
          d[2 * i] = a_at(g, i0 + r + i, p);
          d[2 * i + 1] = odd_tail ? uint16_t(0) : a_at(g, i0 + r + i, p + 1);
        }
      }
      for (; i < kMr; ++i) d[2 * i] = d[2 * i + 1] = 0;
    }
  }
}

// B k [p0, p0 + kc) x columns [j0, j0 + nc): panel c holds, per k-pair q, kNr columns of two
// bf16 each (the pair interleaved, as vdpbf16ps reads it).
void pack_b(const GemmCoreBf16& g, int64_t p0, int64_t kc, int64_t kc2, int64_t j0, int64_t nc,
            uint16_t* dst) {
  for (int64_t c = 0; c < nc; c += kNr) {
    const int64_t cols = nc - c < kNr ? nc - c : kNr;
    uint16_t* panel = dst + c * kc2;
    for (int64_t q = 0; q < kc2 / 2; ++q) {
      uint16_t* d = panel + q * 2 * kNr;
      const int64_t p = p0 + 2 * q;
      const bool odd_tail = 2 * q + 1 >= kc;
      if (!g.trans_b && !odd_tail && cols == kNr) {
        // Interleave two rows of 32 bf16 with 16-bit unpacks.
        const __m512i r0 = _mm512_loadu_si512(g.b + p * g.ldb + j0 + c);
        const __m512i r1 = _mm512_loadu_si512(g.b + (p + 1) * g.ldb + j0 + c);
        const __m512i lo = _mm512_unpacklo_epi16(r0, r1);  // per 128-bit lane: cols 0-3 | 8-11 ...
        const __m512i hi = _mm512_unpackhi_epi16(r0, r1);
        // Lanes of lo: pairs of columns {0-3, 8-11, 16-19, 24-27}; of hi: {4-7, 12-15, ...}.
        const __m512i first = _mm512_permutex2var_epi64(
            lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), hi);  // columns 0-15
        const __m512i second = _mm512_permutex2var_epi64(
            lo, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), hi);  // columns 16-31
        _mm512_store_si512(d, first);
        _mm512_store_si512(d + 32, second);
        continue;
      }
      if (g.trans_b && !odd_tail && cols == kNr && (q & 3) == 0 && q + 4 <= kc / 2) {
        // Column j's pairs are consecutive words of stored row j: 4 columns x 4 pairs per
        // transpose, covering pairs q .. q + 3 (the next three iterations find them done).
        for (int64_t j = 0; j < kNr; j += 4) {
          transpose_words_4x4(g.b + (j0 + c + j) * g.ldb + p, g.ldb, d + 2 * j, 2 * kNr);
        }
        q += 3;
        continue;
      }
      int64_t j = 0;
      for (; j < cols; ++j) {
        d[2 * j] = b_at(g, p, j0 + c + j);
        d[2 * j + 1] = odd_tail ? uint16_t(0) : b_at(g, p + 1, j0 + c + j);
      }
      for (; j < kNr; ++j) d[2 * j] = d[2 * j + 1] = 0;
    }
  }
}

// 16 f32 to bf16 bits as fp::f32_to_bf16_bits rounds them (nearest even, NaN quieted with its
// sign; subnormals rounded, not flushed as vcvtneps2bf16 would): elementwise_simd.h's lanes.
inline __m256i to_bf16_bits(__m512 v) {
  return _mm512_cvtepi32_epi16(f32_to_bf16_lanes<Avx512>(v));
}

// The bf16 values at p (lanes of `lanes`; 0 elsewhere) widened to f32 (exact: a shift).
inline __m512 bf16_to_f32(__mmask16 lanes, const uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

// The bf16 C tile (GemmCoreBf16::c16): bf16(alpha acc), or bf16(alpha acc + beta C) with C
// widened, as gemm.cc's epilogue computes it (no fused multiply-add).
inline void store_tile_bf16(const __m512 (&acc)[kTileRows][2], uint16_t* c, int64_t ldc,
                            int64_t rows, int64_t cols, float alpha, float beta) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 m0, m1;
  tile_column_masks(cols, m0, m1);
#pragma GCC unroll 12
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= rows) break;
    uint16_t* crow = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(va, acc[i][0]);
    __m512 r1 = _mm512_mul_ps(va, acc[i][1]);
    if (beta != 0.0f) {
      r0 = _mm512_add_ps(r0, _mm512_mul_ps(vb, bf16_to_f32(m0, crow)));
      r1 = _mm512_add_ps(r1, _mm512_mul_ps(vb, bf16_to_f32(m1, crow + 16)));
    }
    _mm256_mask_storeu_epi16(crow, m0, to_bf16_bits(r0));
    _mm256_mask_storeu_epi16(crow + 16, m1, to_bf16_bits(r1));
  }
}

// acc = A panel x B panel over kc2 / 2 pairs; then the C tile as in the f32 kernel: alpha acc
// + beta C on the first k slice, C += alpha acc on later ones (or the bf16 tile, c16).
void micro_kernel(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, uint16_t* c16,
                  int64_t ldc, int64_t rows, int64_t cols, float alpha, float beta, bool first) {
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512i b0 = _mm512_load_si512(b + q * 2 * kNr);
    const __m512i b1 = _mm512_load_si512(b + q * 2 * kNr + 32);
    const uint16_t* ap = a + q * 2 * kMr;
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      int32_t word;
      std::memcpy(&word, ap + 2 * i, 4);
      const __m512i ai = _mm512_set1_epi32(word);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], (__m512bh)ai, (__m512bh)b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], (__m512bh)ai, (__m512bh)b1);
    }
  }
  if (c16 != nullptr) {
    store_tile_bf16(acc, c16, ldc, rows, cols, alpha, beta);
  } else {
    store_tile(acc, c, ldc, rows, cols, alpha, beta, first);
  }
}

}  // namespace

void bf16gemm_packed(const GemmCoreBf16& g) {
  const int64_t nc_max = g.n < kNc ? (g.n + kNr - 1) / kNr * kNr : kNc;
  const int64_t kc_max = g.k < kKc ? (g.k + 1) / 2 * 2 : kKc;
  const int64_t mc_max = g.m < kMc ? (g.m + kMr - 1) / kMr * kMr : kMc;
  uint16_t* const bpack = t_bpack.get<uint16_t>(kc_max * nc_max);
  uint16_t* const apack = t_apack.get<uint16_t>(kc_max * mc_max);
  for (int64_t j0 = 0; j0 < g.n; j0 += kNc) {
    const int64_t nc = g.n - j0 < kNc ? g.n - j0 : kNc;
    for (int64_t p0 = 0; p0 < g.k; p0 += kKc) {
      const int64_t kc = g.k - p0 < kKc ? g.k - p0 : kKc;
      const int64_t kc2 = (kc + 1) / 2 * 2;
      pack_b(g, p0, kc, kc2, j0, nc, bpack);
      for (int64_t i0 = 0; i0 < g.m; i0 += kMc) {
        const int64_t mc = g.m - i0 < kMc ? g.m - i0 : kMc;
        pack_a(g, i0, mc, p0, kc, kc2, apack);
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            const int64_t at = (i0 + ir) * g.ldc + j0 + jr;
            micro_kernel(
                kc2 / 2, apack + ir * kc2, bpack + jr * kc2, g.c16 != nullptr ? nullptr : g.c + at,
                g.c16 != nullptr ? g.c16 + at : nullptr, g.ldc, mc - ir < kMr ? mc - ir : kMr,
                nc - jr < kNr ? nc - jr : kNr, g.alpha, g.beta, p0 == 0);
          }
        }
      }
    }
  }
}

}  // namespace braid::kernels::cpu::avx512bf16
