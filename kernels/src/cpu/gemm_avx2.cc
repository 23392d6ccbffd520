// AVX2 GEMM cores: Eigen compiled with -mavx2 -mfma (8-lane f32 packets).
#define BRAID_EIGEN_NS braid_eigen_avx2
#include "gemm_eigen.h"

namespace braid::kernels::cpu::avx2 {

void gemm_f32(const GemmCore<float>& g) {
  eigen_gemm(g);
}
void gemm_f64(const GemmCore<double>& g) {
  eigen_gemm(g);
}

}  // namespace braid::kernels::cpu::avx2
