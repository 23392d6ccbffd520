// AVX2 + F16C cast kernels (cast_simd.h instantiated for 8 f32 lanes).
#include "cast_simd.h"
#include "elementwise_vec_avx2.h"

namespace braid::kernels::cpu::avx2 {

void fill_cast_table(CastTable& table) {
  fill_cast_table_for<Avx2>(table);
}

}  // namespace braid::kernels::cpu::avx2
