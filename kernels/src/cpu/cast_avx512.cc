// AVX-512 cast kernels (cast_simd.h instantiated for 16 f32 lanes).
#include "cast_simd.h"
#include "elementwise_vec_avx512.h"

namespace braid::kernels::cpu::avx512 {

void fill_cast_table(CastTable& table) {
  fill_cast_table_for<Avx512>(table);
}

}  // namespace braid::kernels::cpu::avx512
