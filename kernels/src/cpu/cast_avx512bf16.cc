// AVX512_BF16 cast kernels: f32 -> bf16 with vcvtneps2bf16. The instruction rounds to nearest
// even and quiets NaN exactly as fp::f32_to_bf16_bits does, but it treats f32 subnormal
// inputs as zero; vectors holding one take the integer path of elementwise_simd.h instead, so
// the result stays bit-identical to the scalar reference.
#include "cast_simd.h"
#include "elementwise_vec_avx512.h"

namespace braid::kernels::cpu {
namespace {

void cast_f32_to_bf16_native(const void* src, void* dst, int64_t n) {
  map_tail<Avx512>(
      static_cast<const float*>(src), static_cast<bfloat16*>(dst), n,
      [](const float* in, bfloat16* out) {
        const __m512 v = _mm512_loadu_ps(in);
        const __m512i x = _mm512_castps_si512(v);
        const __mmask16 subnormal = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x007fffff)) &
                                    ~_mm512_test_epi32_mask(x, _mm512_set1_epi32(0x7f800000));
        if (subnormal != 0) [[unlikely]] {
          store_f32<Avx512>(out, v);
          return;
        }
        const __m256bh b = _mm512_cvtneps_pbh(v);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), reinterpret_cast<const __m256i&>(b));
      });
}

}  // namespace

namespace avx512bf16 {

void fill_cast_table(CastTable& table) {
  fill_cast_table_for<Avx512>(table);
  table.fn[kCastF32ToBF16] = cast_f32_to_bf16_native;
}

}  // namespace avx512bf16
}  // namespace braid::kernels::cpu
