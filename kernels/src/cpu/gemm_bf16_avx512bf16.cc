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

#include "bf16_tiles.h"
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
// bf16 each (the pair interleaved, as vdpbf16ps reads it; AMX's "VNNI" layout of B). kc2 may
// exceed kc: pairs past it are zero.
void pack_b(const GemmCoreBf16& g, int64_t p0, int64_t kc, int64_t kc2, int64_t j0, int64_t nc,
            uint16_t* dst) {
  for (int64_t c = 0; c < nc; c += kNr) {
    const int64_t cols = nc - c < kNr ? nc - c : kNr;
    uint16_t* panel = dst + c * kc2;
    for (int64_t q = 0; q < kc2 / 2; ++q) {
      uint16_t* d = panel + q * 2 * kNr;
      const int64_t p = p0 + 2 * q;
      if (2 * q >= kc) {  // padding past the slice (the AMX kernel's whole k tiles)
        std::memset(d, 0, 2 * kNr * sizeof(uint16_t));
        continue;
      }
      const bool odd_tail = 2 * q + 1 >= kc;
      if (!g.trans_b && !odd_tail && cols == kNr) {
        // Interleave two rows of 32 bf16 with 16-bit unpacks.
        store_pairs(_mm512_loadu_si512(g.b + p * g.ldb + j0 + c),
                    _mm512_loadu_si512(g.b + (p + 1) * g.ldb + j0 + c), d);
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
struct TileStoreBf16 {
  __m512 va, vb;
  float beta;
  __mmask16 m0, m1;
  TileStoreBf16(int64_t cols, float alpha, float beta_)
      : va(_mm512_set1_ps(alpha)), vb(_mm512_set1_ps(beta_)), beta(beta_) {
    tile_column_masks(cols, m0, m1);
  }
  void row(__m512 acc0, __m512 acc1, uint16_t* crow) const {
    __m512 r0 = _mm512_mul_ps(va, acc0);
    __m512 r1 = _mm512_mul_ps(va, acc1);
    if (beta != 0.0f) {
      r0 = _mm512_add_ps(r0, _mm512_mul_ps(vb, bf16_to_f32(m0, crow)));
      r1 = _mm512_add_ps(r1, _mm512_mul_ps(vb, bf16_to_f32(m1, crow + 16)));
    }
    _mm256_mask_storeu_epi16(crow, m0, to_bf16_bits(r0));
    _mm256_mask_storeu_epi16(crow + 16, m1, to_bf16_bits(r1));
  }
};

inline void store_tile_bf16(const __m512 (&acc)[kTileRows][2], uint16_t* c, int64_t ldc,
                            int64_t rows, int64_t cols, float alpha, float beta) {
  const TileStoreBf16 st(cols, alpha, beta);
#pragma GCC unroll 12
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= rows) break;
    st.row(acc[i][0], acc[i][1], c + i * ldc);
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

// ---- few rows (bf16gemm_rows) ---------------------------------------------------------------
//
// C (m < kPackedMinDim rows) = A B without packing or widening B: one pass over B per group of
// up to kRowsGroup rows of A, the products on vdpbf16ps. What generation multiplies (one or a
// few tokens against a whole weight), where the widened path converted all of B to f32 per call.
//   B transposed (stored [n][k], a kOutIn weight): each C element is a dot product over k in
//   chunks of 32 (lane l adds the pair 2l, 2l + 1 of each chunk), the 16 lanes then folded by
//   halves.
//   B plain ([k][n], a kInOut weight): per k-pair, rows p and p + 1 of a 32-column block are
//   interleaved (16-bit unpacks: the accumulators hold the columns in lane order 0-3, 8-11, ...
//   and 4-7, 12-15, ..., put back in order before the store) and multiplied by A's pair
//   (broadcast); k-pairs in order.
// Either way the order is fixed, so the bits do not depend on threads (column blocks) or runs.
namespace {

constexpr int64_t kRowsGroup = 8;

// acc[r][0 | 1] (columns 0-15 | 16-31 of the block) for rows [i0, i0 + rows) and columns
// [j0, j0 + cols), B transposed.
void rows_dot_block(const GemmCoreBf16& g, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                    __m512 (&acc)[kRowsGroup][2]) {
  alignas(64) float out[kRowsGroup][32] = {};
  for (int64_t j = 0; j < cols; ++j) {
    const uint16_t* b = g.b + (j0 + j) * g.ldb;
    __m512 d[kRowsGroup];
    for (int r = 0; r < kRowsGroup; ++r) d[r] = _mm512_setzero_ps();
    for (int64_t p = 0; p < g.k; p += 32) {
      const int64_t left = g.k - p;
      const __mmask32 m = left >= 32 ? ~__mmask32(0) : __mmask32((uint32_t{1} << left) - 1);
      const __m512bh bv = (__m512bh)_mm512_maskz_loadu_epi16(m, b + p);
      for (int64_t r = 0; r < rows; ++r) {
        const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(m, g.a + (i0 + r) * g.lda + p);
        d[r] = _mm512_dpbf16_ps(d[r], av, bv);
      }
    }
    for (int64_t r = 0; r < rows; ++r) out[r][j] = fold_halves(d[r]);
  }
  for (int64_t r = 0; r < rows; ++r) {
    acc[r][0] = _mm512_load_ps(out[r]);
    acc[r][1] = _mm512_load_ps(out[r] + 16);
  }
}

// The same block, B plain.
void rows_pairs_block(const GemmCoreBf16& g, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                      __m512 (&acc)[kRowsGroup][2]) {
  __m512 lo[kRowsGroup], hi[kRowsGroup];
  for (int r = 0; r < kRowsGroup; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  const __mmask32 cm = cols >= 32 ? ~__mmask32(0) : __mmask32((uint32_t{1} << cols) - 1);
  for (int64_t p = 0; p < g.k; p += 2) {
    const __m512i b0 = _mm512_maskz_loadu_epi16(cm, g.b + p * g.ldb + j0);
    const __m512i b1 = p + 1 < g.k ? _mm512_maskz_loadu_epi16(cm, g.b + (p + 1) * g.ldb + j0)
                                   : _mm512_setzero_si512();
    const __m512bh blo = (__m512bh)_mm512_unpacklo_epi16(b0, b1);
    const __m512bh bhi = (__m512bh)_mm512_unpackhi_epi16(b0, b1);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* a = g.a + (i0 + r) * g.lda + p;
      const uint32_t pair = uint32_t{a[0]} | (p + 1 < g.k ? uint32_t{a[1]} << 16 : 0u);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      lo[r] = _mm512_dpbf16_ps(lo[r], av, blo);
      hi[r] = _mm512_dpbf16_ps(hi[r], av, bhi);
    }
  }
  // lo lanes: columns 0-3 | 8-11 | 16-19 | 24-27; hi: 4-7 | 12-15 | 20-23 | 28-31.
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 t0 = _mm512_shuffle_f32x4(lo[r], hi[r], 0x44);  // lo.0 lo.1 hi.0 hi.1
    const __m512 t1 = _mm512_shuffle_f32x4(lo[r], hi[r], 0xEE);  // lo.2 lo.3 hi.2 hi.3
    acc[r][0] = _mm512_shuffle_f32x4(t0, t0, 0xD8);              // lo.0 hi.0 lo.1 hi.1
    acc[r][1] = _mm512_shuffle_f32x4(t1, t1, 0xD8);
  }
}

}  // namespace

void bf16gemm_rows(const GemmCoreBf16& g) {
  for (int64_t i0 = 0; i0 < g.m; i0 += kRowsGroup) {
    const int64_t rows = g.m - i0 < kRowsGroup ? g.m - i0 : kRowsGroup;
    for (int64_t j0 = 0; j0 < g.n; j0 += 32) {
      const int64_t cols = g.n - j0 < 32 ? g.n - j0 : 32;
      __m512 acc[kRowsGroup][2];
      if (g.trans_b) {
        rows_dot_block(g, i0, rows, j0, cols, acc);
      } else {
        rows_pairs_block(g, i0, rows, j0, cols, acc);
      }
      if (g.c16 != nullptr) {
        const TileStoreBf16 st(cols, g.alpha, g.beta);
        for (int64_t r = 0; r < rows; ++r)
          st.row(acc[r][0], acc[r][1], g.c16 + (i0 + r) * g.ldc + j0);
      } else {
        const TileStore st(cols, g.alpha, g.beta, true);
        for (int64_t r = 0; r < rows; ++r)
          st.row(acc[r][0], acc[r][1], g.c + (i0 + r) * g.ldc + j0);
      }
    }
  }
}

// ---- AMX (the kAmx level) ----------------------------------------------------------------
//
// The same loop nest with the products on AMX tiles (bf16_tiles.h: amx_block). A C block is
// 2 x 2 tiles (32 x 32), its k run in tiles of 32 in order, so every C element adds its k
// terms in a fixed order that does not depend on the thread count or the run. B is pack_b's layout
// (one pair row per 128 bytes: a tile of 16 columns is loaded with a 128-byte stride); A is packed
// row-major with k padded to whole tiles. The block's tiles go through a 4 KB buffer into C by the
// epilogues the vdpbf16ps kernel uses (TileStore, TileStoreBf16).
namespace {

constexpr int64_t kAmxMc = 128;
static_assert(kKc % kAmxK == 0 && kNr == kAmxBlock);

int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

// A rows [i0, i0 + mc) x k [p0, p0 + kc) into dst row-major (row stride kcp, a multiple of
// kAmxK), rows up to mcp; everything past the block is zero.
void pack_a_rows(const GemmCoreBf16& g, int64_t i0, int64_t mc, int64_t mcp, int64_t p0, int64_t kc,
                 int64_t kcp, uint16_t* dst) {
  if (!g.trans_a) {
    for (int64_t i = 0; i < mc; ++i) {
      uint16_t* d = dst + i * kcp;
      std::memcpy(d, g.a + (i0 + i) * g.lda + p0, static_cast<size_t>(kc) * 2);
      std::memset(d + kc, 0, static_cast<size_t>(kcp - kc) * 2);
    }
  } else {
    // Stored A is [k, m]. Per 32 rows: two k rows of 32 values interleave into 32 pairs
    // (store_pairs, as pack_b) in a [pairs][32] staging block, which 4 x 4 word transposes turn
    // into the rows of dst. The staging block covers all kcp / 2 pairs (zero past kc).
    alignas(64) uint16_t stage[(kKc / 2) * 64];
    for (int64_t i = 0; i < mc; i += 32) {
      const int64_t n = mc - i < 32 ? mc - i : 32;
      const __mmask32 lm = n >= 32 ? ~__mmask32(0) : __mmask32((uint32_t{1} << n) - 1);
      for (int64_t q = 0; q < kcp / 2; ++q) {
        const int64_t p = 2 * q;
        const uint16_t* src = g.a + (p0 + p) * g.lda + i0 + i;
        const __m512i r0 = p < kc ? _mm512_maskz_loadu_epi16(lm, src) : _mm512_setzero_si512();
        const __m512i r1 =
            p + 1 < kc ? _mm512_maskz_loadu_epi16(lm, src + g.lda) : _mm512_setzero_si512();
        store_pairs(r0, r1, stage + q * 64);
      }
      // stage[q][r] (words) -> dst[i + r][q]; rows past mc take the zeros of the masked loads.
      const int64_t rows = (i + 32 <= mcp) ? 32 : mcp - i;
      for (int64_t q = 0; q < kcp / 2; q += 4) {
        for (int64_t r = 0; r < rows; r += 4) {
          transpose_words_4x4(stage + q * 64 + 2 * r, 64, dst + (i + r) * kcp + 2 * q, kcp);
        }
      }
    }
    return;  // rows mc .. mcp were written by the transposes
  }
  for (int64_t i = mc; i < mcp; ++i) std::memset(dst + i * kcp, 0, static_cast<size_t>(kcp) * 2);
}

}  // namespace

// Where a C block goes: a whole 32 x 32 block of an f32 C with alpha 1 accumulates on the
// tiles straight in C (from zero on the first k slice with beta 0, from C with beta 1 or on
// later slices), so C += the slice's products one at a time in k order; anything else (bf16
// C, other alpha / beta, partial blocks) goes through a buffer and TileStore / TileStoreBf16.
// Both orders are fixed, so the bits do not depend on threads or runs.
void bf16gemm_amx(const GemmCoreBf16& g) {
  const int64_t nc_max = g.n < kNc ? round_up(g.n, kNr) : kNc;
  const int64_t kcp_max = g.k < kKc ? round_up(g.k, kAmxK) : kKc;
  const int64_t mc_max = g.m < kAmxMc ? round_up(g.m, kAmxBlock) : kAmxMc;
  uint16_t* const bpack = t_bpack.get<uint16_t>(kcp_max * nc_max);
  uint16_t* const apack = t_apack.get<uint16_t>(kcp_max * mc_max);
  alignas(64) float buf[kAmxBlock * kAmxBlock];
  const bool direct_c = g.c16 == nullptr && g.alpha == 1.0f;
  amx_configure();
  for (int64_t j0 = 0; j0 < g.n; j0 += kNc) {
    const int64_t nc = g.n - j0 < kNc ? g.n - j0 : kNc;
    for (int64_t p0 = 0; p0 < g.k; p0 += kKc) {
      const int64_t kc = g.k - p0 < kKc ? g.k - p0 : kKc;
      const int64_t kcp = round_up(kc, kAmxK);
      const bool first = p0 == 0;
      const bool load_c = !first || g.beta == 1.0f;
      const bool c_direct_ok = direct_c && (!first || g.beta == 0.0f || g.beta == 1.0f);
      pack_b(g, p0, kc, kcp, j0, nc, bpack);
      for (int64_t i0 = 0; i0 < g.m; i0 += kAmxMc) {
        const int64_t mc = g.m - i0 < kAmxMc ? g.m - i0 : kAmxMc;
        // A whole-tile block of a plain A is read in place; otherwise packed.
        const bool a_direct = !g.trans_a && kc == kcp && mc % kAmxBlock == 0;
        const uint16_t* ablock = a_direct ? g.a + i0 * g.lda + p0 : apack;
        const int64_t a_ld = a_direct ? g.lda : kcp;
        if (!a_direct) pack_a_rows(g, i0, mc, round_up(mc, kAmxBlock), p0, kc, kcp, apack);
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t cols = nc - jr < kNr ? nc - jr : kNr;
          const uint16_t* bpanel = bpack + jr * kcp;
          for (int64_t ir = 0; ir < mc; ir += kAmxBlock) {
            const int64_t rows = mc - ir < kAmxBlock ? mc - ir : kAmxBlock;
            const int64_t at = (i0 + ir) * g.ldc + j0 + jr;
            const uint16_t* arows = ablock + ir * a_ld;
            if (c_direct_ok && rows == kAmxBlock && cols == kNr) {
              if (load_c) {
                amx_block<true>(kcp / kAmxK, arows, a_ld, bpanel, 2 * kNr, g.c + at, g.ldc);
              } else {
                amx_block<false>(kcp / kAmxK, arows, a_ld, bpanel, 2 * kNr, g.c + at, g.ldc);
              }
              continue;
            }
            amx_block<false>(kcp / kAmxK, arows, a_ld, bpanel, 2 * kNr, buf, kAmxBlock);
            if (g.c16 != nullptr) {
              const TileStoreBf16 st(cols, g.alpha, g.beta);
              for (int64_t r = 0; r < rows; ++r) {
                st.row(_mm512_load_ps(buf + r * 32), _mm512_load_ps(buf + r * 32 + 16),
                       g.c16 + at + r * g.ldc);
              }
            } else {
              const TileStore st(cols, g.alpha, g.beta, first);
              for (int64_t r = 0; r < rows; ++r) {
                st.row(_mm512_load_ps(buf + r * 32), _mm512_load_ps(buf + r * 32 + 16),
                       g.c + at + r * g.ldc);
              }
            }
          }
        }
      }
    }
  }
  amx_release();
}

}  // namespace braid::kernels::cpu::avx512bf16
