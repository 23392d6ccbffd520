// The SIMD levels of the quantization kernels (quant.cc holds the scalar reference and picks a
// level per call through IsaTable). Each level fills what it implements; the int8 dot products
// are exact integer sums and the 4-bit dequantization a table lookup of the same products, so
// every level gives the scalar path's bits.
#pragma once

#include <cstdint>

namespace braid::kernels::cpu {

// c[i, j] = sum_p a[i, p] * b[j, p] over int8 rows, int32 result; arguments already checked.
using GemmI8Fn = void (*)(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                          int32_t* c);
// y[2j], y[2j+1] = scaled[hi nibble], scaled[lo nibble] of packed[j], for `pairs` bytes.
using Dequant4PairsFn = void (*)(const float* scaled16, const uint8_t* packed, int64_t pairs,
                                 float* y);

struct QuantTable {
  GemmI8Fn gemm_i8 = nullptr;
  Dequant4PairsFn dequant4_pairs = nullptr;
};

namespace avx2 {
void fill_quant_table(QuantTable& t);
}
namespace avx512 {
void fill_quant_table(QuantTable& t);
}

}  // namespace braid::kernels::cpu
