// avx512 axpby kernels: elementwise_ops.h instantiated for the Avx512 traits.
#include "elementwise_ops.h"
#include "elementwise_vec_avx512.h"

namespace braid::kernels::cpu::avx512 {

void fill_axpby_table(AxpbyTable& t) {
  fill_axpby_table_for<Avx512>(t);
}

}  // namespace braid::kernels::cpu::avx512
