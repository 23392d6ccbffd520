// The bf16 k-pair layout and the AMX tile steps shared by the bf16 GEMM
// (gemm_bf16_avx512bf16.cc) and the attention's amx path (attention_avx512bf16.cc). Only files
// compiled for avx512bf16 include it; the AMX functions carry their own target attributes and
// run only at the kAmx level (the OS's tile permission asked for in core/src/cpu_features.cc).
//
// Pair layout ("VNNI" layout of a B operand): for k-pair q, the row of 2 n bf16
// (b[2q, j], b[2q + 1, j]) for j in order; one pair row is what vdpbf16ps and one row of an AMX
// B tile read.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace braid::kernels::cpu::avx512bf16 {
namespace {

// Two rows of 32 bf16 (r0, r1) interleaved into 32 pairs (r0[j], r1[j]), j in order, stored
// as 64 bf16 at dst: 16-bit unpacks, then the lanes put back in order.
inline void store_pairs(__m512i r0, __m512i r1, uint16_t* dst) {
  const __m512i lo = _mm512_unpacklo_epi16(r0, r1);  // per 128-bit lane: j 0-3 | 8-11 ...
  const __m512i hi = _mm512_unpackhi_epi16(r0, r1);  // j 4-7 | 12-15 ...
  _mm512_storeu_si512(dst, _mm512_permutex2var_epi64(lo, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0),
                                                     hi));  // j 0-15
  _mm512_storeu_si512(
      dst + 32,
      _mm512_permutex2var_epi64(lo, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), hi));  // 16-31
}

// A 16 x 16 block of 32-bit words transposed (dst row c = src column c): unpacks of 32 and 64
// bits leave, in 128-bit lane L of r[4 i + k], column 4 L + k of rows 4 i .. 4 i + 3; two rounds
// of lane shuffles gather each column's four lanes. On bf16 data a word is a k-pair, so this
// turns rows of pairs into the pair layout.
inline void transpose_words16(const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * lds);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512i x0 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88);
    const __m512i x1 = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xDD);
    const __m512i y0 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x88);
    const __m512i y1 = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xDD);
    _mm512_storeu_si512(dst + k * ldd, _mm512_shuffle_i32x4(x0, y0, 0x88));
    _mm512_storeu_si512(dst + (4 + k) * ldd, _mm512_shuffle_i32x4(x1, y1, 0x88));
    _mm512_storeu_si512(dst + (8 + k) * ldd, _mm512_shuffle_i32x4(x0, y0, 0xDD));
    _mm512_storeu_si512(dst + (12 + k) * ldd, _mm512_shuffle_i32x4(x1, y1, 0xDD));
  }
}

// The 16 lanes of v summed by halves: lane i + lane i + 8, then + 4, + 2, + 1 (one fixed order).
inline float fold_halves(__m512 v) {
  const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

// ---- AMX tiles -----------------------------------------------------------------------------
// TDPBF16PS multiplies a 16 x 32 bf16 A tile by a 16-pair x 16-column B tile (pair layout)
// and adds both products of every pair into a 16 x 16 f32 C tile (Intel's pseudocode: pair
// element 0 then 1, round to nearest even, denormal inputs and outputs flushed to zero).

constexpr int64_t kAmxK = 32;      // bf16 per A tile row: 16 pairs
constexpr int64_t kAmxBlock = 32;  // C block: 2 x 2 tiles of 16 x 16

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: C (16 rows x 16 f32); 4, 5: A (16 rows x 32 bf16); 6, 7: B (16 pairs x 16
// columns x 2 bf16). Every tile is 16 rows of 64 bytes.
[[gnu::target("amx-tile")]] inline void amx_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12's ldtilecfg builtin does not tell the optimizer that it reads the 64 bytes, which
  // then drops the stores above (seen: a config of zero rows, and SIGILL at the first tile
  // instruction). The empty asm makes them visible.
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

[[gnu::target("amx-tile")]] inline void amx_release() {
  _tile_release();
}

// A 32 x 32 C block on tiles 0-3 over ktiles k tiles: A row-major bf16 (row stride a_ld
// elements, k tile t at column 32 t), B in pair layout (pair-row stride b_ld elements, the
// block's 32 columns at b, k tile t at pair row 16 t). kLoad: the tiles start from c (row
// stride c_ld floats) instead of zero; the result is stored to c either way. Every C element
// adds its k terms tile by tile in order: the bits do not depend on anything but the inputs.
template <bool kLoad>
[[gnu::target("amx-tile,amx-bf16")]] inline void amx_block(int64_t ktiles, const uint16_t* a,
                                                           int64_t a_ld, const uint16_t* b,
                                                           int64_t b_ld, float* c, int64_t c_ld) {
  const int64_t c_stride = c_ld * 4;  // bytes
  if constexpr (kLoad) {
    _tile_loadd(0, c, c_stride);
    _tile_loadd(1, c + 16, c_stride);
    _tile_loadd(2, c + 16 * c_ld, c_stride);
    _tile_loadd(3, c + 16 * c_ld + 16, c_stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t a_stride = a_ld * 2, b_stride = b_ld * 2;  // bytes
  for (int64_t t = 0; t < ktiles; ++t) {
    const uint16_t* at = a + t * kAmxK;
    const uint16_t* bt = b + t * (kAmxK / 2) * b_ld;
    _tile_loadd(4, at, a_stride);
    _tile_loadd(5, at + 16 * a_ld, a_stride);
    _tile_loadd(6, bt, b_stride);
    _tile_loadd(7, bt + 32, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, c_stride);
  _tile_stored(1, c + 16, c_stride);
  _tile_stored(2, c + 16 * c_ld, c_stride);
  _tile_stored(3, c + 16 * c_ld + 16, c_stride);
}

}  // namespace
}  // namespace braid::kernels::cpu::avx512bf16
