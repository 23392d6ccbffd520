// Internal interface between gemm() (gemm.cc: checks, batching, f16 / bf16 widening) and the
// per-ISA single-matrix GEMM cores: scalar:: (the reference triple loop in gemm.cc), avx2::
// and avx512:: (Eigen, gemm_eigen.h). See docs/reductions-and-gemm.md, "GEMM".
#pragma once

#include <cstdint>

namespace braid::kernels::cpu {

// One row-major C = alpha op(A) op(B) + beta C. A is stored (trans_a ? k x m : m x k) with
// leading dimension lda; B is (trans_b ? n x k : k x n) with ldb. beta == 0 never reads C.
// m, n, k > 0 (gemm.cc handles the empty cases).
template <typename T>
struct GemmCore {
  bool trans_a, trans_b;
  int64_t m, n, k;
  T alpha, beta;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T* c;
  int64_t ldc;
};

using GemmF32Fn = void (*)(const GemmCore<float>&);
// Throws kOutOfMemory for a packing buffer of n floats. Defined in gemm.cc so that the ISA
// files instantiate none of error.h's templates (their copies would carry AVX-512 code under
// names that baseline files share; see Note [Eigen namespace per ISA]).
[[noreturn]] void throw_gemm_out_of_memory(int64_t n);
using GemmF64Fn = void (*)(const GemmCore<double>&);

// The AVX-512 f32 core uses the packed micro-kernel at and above these sizes, Eigen below
// (packing costs more than it saves there). Shared with gemm.cc's threading rule.
constexpr int64_t kPackedMinDim = 64;
inline bool uses_packed_f32(int64_t m, int64_t n, int64_t k) {
  return m >= kPackedMinDim && n >= kPackedMinDim && k >= kPackedMinDim;
}
// Column blocks of the packed kernel's threading are multiples of its micro-tile width.
constexpr int64_t kPackedNr = 32;

namespace scalar {
void gemm_f32(const GemmCore<float>& g);
void gemm_f64(const GemmCore<double>& g);
}  // namespace scalar
namespace avx2 {
void gemm_f32(const GemmCore<float>& g);
void gemm_f64(const GemmCore<double>& g);
}  // namespace avx2
namespace avx512 {
void gemm_f32(const GemmCore<float>& g);
void gemm_f64(const GemmCore<double>& g);
// The packed micro-kernel GEMM (gemm_packed_avx512.cc) that gemm_f32 uses for large sizes.
void sgemm_packed(const GemmCore<float>& g);
}  // namespace avx512

// bf16 A and B (raw bits), f32 C: the AVX512_BF16 packed kernel (gemm_bf16_avx512bf16.cc),
// used at that level where uses_packed_f32 holds. With c16 set instead of c (and k at most
// kBf16Kc, one k slice), C is bf16 and each element is stored as gemm.cc's epilogue rounds it:
// bf16(alpha acc) or bf16(alpha acc + beta C), a product and a separate add in f32, so the bits
// are those of the f32 staging plus epilogue, without the staging's round trip through memory.
struct GemmCoreBf16 {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  const uint16_t* a;
  int64_t lda;
  const uint16_t* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  uint16_t* c16 = nullptr;  // bf16 C (ldc), instead of c
};
// The kernel's k slice: products with k <= kBf16Kc run as one slice.
constexpr int64_t kBf16Kc = 512;
namespace avx512bf16 {
void bf16gemm_packed(const GemmCoreBf16& g);
// The same product on AMX tiles (TDPBF16PS), for the kAmx level: gemm_bf16_avx512bf16.cc.
void bf16gemm_amx(const GemmCoreBf16& g);
// Few rows of A (not transposed; m < kPackedMinDim), B read once per 8 rows, no packing
// (generation's products): gemm_bf16_avx512bf16.cc, "few rows". Any k (one slice).
void bf16gemm_rows(const GemmCoreBf16& g);
}  // namespace avx512bf16

}  // namespace braid::kernels::cpu
