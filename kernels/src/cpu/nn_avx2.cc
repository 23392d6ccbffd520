// avx2 layer kernels: nn_simd.h instantiated for the Avx2 traits.
#include "elementwise_vec_avx2.h"
#include "nn_simd.h"

namespace braid::kernels::cpu::avx2 {

void act_grad_f32(ActivationGrad op, int64_t n, const float* x, const float* dy, float* dx) {
  act_grad_simd<Avx2>(op, n, x, dy, dx);
}
void ce_stats_f32(const float* z, int64_t classes, float* max_out, float* sum_exp, float* sum_z) {
  ce_stats_simd<Avx2>(z, classes, max_out, sum_exp, sum_z);
}
void ce_grad_f32(const float* z, int64_t classes, float lse, float scale, float offset,
                 float* out) {
  ce_grad_simd<Avx2>(z, classes, lse, scale, offset, out);
}

}  // namespace braid::kernels::cpu::avx2
