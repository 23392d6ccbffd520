// The Eigen GEMM core, compiled once per ISA file (gemm_avx2.cc, gemm_avx512.cc) so that Eigen
// picks that file's register width.
//
// Note [Eigen namespace per ISA]: Eigen's templates (general_matrix_matrix_product<...>::run
// and friends) have the same mangled names whatever -m flags compiled them, and the linker
// keeps one copy of each. Left alone, the AVX2 path could run the AVX-512 instantiation (a
// crash on an AVX2-only CPU) or the reverse (slow). Each including file therefore defines
// BRAID_EIGEN_NS, and `Eigen` is renamed to it before Eigen is included, so every
// instantiation is private to that ISA.
#pragma once

#ifndef BRAID_EIGEN_NS
#error "define BRAID_EIGEN_NS (a namespace name unique to the ISA) before including gemm_eigen.h"
#endif
#define Eigen BRAID_EIGEN_NS
// g++ 12 flags Eigen's AVX-512 packet shuffles (built on _mm512_undefined_pd) as maybe
// uninitialised; a known false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>

#include "gemm_impl.h"

namespace braid::kernels::cpu {
namespace {

template <typename T, typename CMat, typename AMat, typename BMat>
void eigen_apply(const GemmCore<T>& g, CMat& c, const AMat& a, const BMat& b) {
  if (g.beta == T(0)) {
    c.noalias() = g.alpha * a * b;  // assigns: a NaN in C does not survive
    return;
  }
  if (g.beta != T(1)) c *= g.beta;
  c.noalias() += g.alpha * a * b;
}

template <typename T>
void eigen_gemm(const GemmCore<T>& g) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  using ConstMap = Eigen::Map<const Mat, Eigen::Unaligned, Stride>;
  using MutMap = Eigen::Map<Mat, Eigen::Unaligned, Stride>;
  MutMap c(g.c, g.m, g.n, Stride(g.ldc));
  const ConstMap a(g.a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, Stride(g.lda));
  const ConstMap b(g.b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, Stride(g.ldb));
  if (g.trans_a && g.trans_b) return eigen_apply(g, c, a.transpose(), b.transpose());
  if (g.trans_a) return eigen_apply(g, c, a.transpose(), b);
  if (g.trans_b) return eigen_apply(g, c, a, b.transpose());
  eigen_apply(g, c, a, b);
}

}  // namespace
}  // namespace braid::kernels::cpu
