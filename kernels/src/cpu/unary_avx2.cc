// avx2 unary kernels: elementwise_ops.h instantiated for the Avx2 traits.
#include "elementwise_ops.h"
#include "elementwise_vec_avx2.h"

namespace braid::kernels::cpu::avx2 {

void fill_unary_table(UnaryTable& t) {
  fill_unary_table_for<Avx2>(t);
}

}  // namespace braid::kernels::cpu::avx2
