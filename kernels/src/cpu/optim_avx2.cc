// avx2 fused-optimizer kernels: optim_simd.h over the Avx2 traits plus the u32 lane
// operations Philox needs (8 counters per vector, so one pass makes 32 words).

#pragma GCC optimize("fp-contract=off")  // first: Note [No FMA contraction] in optim_simd.h

#include "elementwise_vec_avx2.h"
#include "optim_simd.h"

namespace braid::kernels::cpu {
namespace {

struct OptimAvx2 : Avx2 {
  static I load_u32(const uint32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static I xor3(I a, I b, I c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
  static void mul_hi_lo(I a, I m, I& hi, I& lo) {
    const I even = _mm256_mul_epu32(a, m);
    const I odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
    lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa);
  }
  static void unpack32(I a, I b, I& lo, I& hi) {
    lo = _mm256_unpacklo_epi32(a, b), hi = _mm256_unpackhi_epi32(a, b);
  }
  static void unpack64(I a, I b, I& lo, I& hi) {
    lo = _mm256_unpacklo_epi64(a, b), hi = _mm256_unpackhi_epi64(a, b);
  }
  // Half q of a / b / c / d holds block 4q / 4q+1 / 4q+2 / 4q+3 (store_blocks).
  static void store_chunks(uint32_t* out, I a, I b, I c, I d) {
    auto* o = reinterpret_cast<__m256i*>(out);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(a, b, 0x20));      // blocks 0-1
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(c, d, 0x20));  // 2-3
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(a, b, 0x31));  // 4-5
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(c, d, 0x31));  // 6-7
  }
};

}  // namespace

namespace avx2 {

void fill_optim_table(OptimTable& t) {
  fill_optim_table_for<OptimAvx2>(t);
}

}  // namespace avx2
}  // namespace braid::kernels::cpu
