// AVX-512 GEMM cores: Eigen compiled with the AVX-512 flags (16-lane packets), and for
// large f32 problems the packed micro-kernel of gemm_packed_avx512.cc.
#define BRAID_EIGEN_NS braid_eigen_avx512
#include "gemm_eigen.h"

namespace braid::kernels::cpu::avx512 {

// Below about 64 in any dimension packing costs more than it saves; Eigen serves those.
void gemm_f32(const GemmCore<float>& g) {
  if (uses_packed_f32(g.m, g.n, g.k)) return sgemm_packed(g);
  eigen_gemm(g);
}
void gemm_f64(const GemmCore<double>& g) {
  eigen_gemm(g);
}

}  // namespace braid::kernels::cpu::avx512
