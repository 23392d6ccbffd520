// avx512 fused-optimizer kernels: optim_simd.h over the Avx512 traits plus the u32 lane
// operations Philox needs (16 counters per vector, so one pass makes 64 words).

#pragma GCC optimize("fp-contract=off")  // first: Note [No FMA contraction] in optim_simd.h

#include "elementwise_vec_avx512.h"
#include "optim_simd.h"

namespace braid::kernels::cpu {
namespace {

struct OptimAvx512 : Avx512 {
  static I load_u32(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static I xor3(I a, I b, I c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }
  // The even lanes' products come from vpmuludq directly, the odd lanes' from their copies
  // moved down (vpshufd); one masked shuffle per half puts them back in lane order.
  static void mul_hi_lo(I a, I m, I& hi, I& lo) {
    constexpr auto kOddDown = static_cast<_MM_PERM_ENUM>(0xf5),
                   kEvenUp = static_cast<_MM_PERM_ENUM>(0xa0);
    const I even = _mm512_mul_epu32(a, m);
    const I odd = _mm512_mul_epu32(_mm512_shuffle_epi32(a, kOddDown), m);
    hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, kOddDown);
    lo = _mm512_mask_shuffle_epi32(even, 0xaaaa, odd, kEvenUp);
  }
  static void unpack32(I a, I b, I& lo, I& hi) {
    lo = _mm512_unpacklo_epi32(a, b), hi = _mm512_unpackhi_epi32(a, b);
  }
  static void unpack64(I a, I b, I& lo, I& hi) {
    lo = _mm512_unpacklo_epi64(a, b), hi = _mm512_unpackhi_epi64(a, b);
  }
  // Chunk q of a / b / c / d holds block 4q / 4q+1 / 4q+2 / 4q+3 (store_blocks).
  static void store_chunks(uint32_t* out, I a, I b, I c, I d) {
    const I ab01 = _mm512_shuffle_i32x4(a, b, 0x44), cd01 = _mm512_shuffle_i32x4(c, d, 0x44);
    const I ab23 = _mm512_shuffle_i32x4(a, b, 0xee), cd23 = _mm512_shuffle_i32x4(c, d, 0xee);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(ab01, cd01, 0x88));       // blocks 0-3
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(ab01, cd01, 0xdd));  // 4-7
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(ab23, cd23, 0x88));  // 8-11
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(ab23, cd23, 0xdd));  // 12-15
  }
};

}  // namespace

namespace avx512 {

void fill_optim_table(OptimTable& t) {
  fill_optim_table_for<OptimAvx512>(t);
}

}  // namespace avx512
}  // namespace braid::kernels::cpu
