// avx2 binary kernels: elementwise_ops.h instantiated for the Avx2 traits.
#include "elementwise_ops.h"
#include "elementwise_vec_avx2.h"

namespace braid::kernels::cpu::avx2 {

void fill_binary_table(BinaryTable& t) {
  fill_binary_table_for<Avx2>(t);
}

}  // namespace braid::kernels::cpu::avx2
