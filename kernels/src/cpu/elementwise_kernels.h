// Tables of the contiguous inner loops behind binary(), unary(), axpby() and scale(), one per
// SIMD level. The baseline files (binary.cc, unary.cc, axpby.cc) fill the scalar entries for
// every dtype; each ISA file overwrites the entries it vectorizes (f32, f16, bf16), and a
// level's table starts as a copy of the next narrower one, so every entry is always set.
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"
#include "isa_dispatch.h"

namespace braid::kernels::cpu {

// Row of the tables for each dtype the elementwise kernels accept; -1 for the others.
enum EwDtype : int { kEwF64, kEwF32, kEwF16, kEwBF16, kEwI64, kEwI32, kNumEwDtypes };
constexpr int ew_dtype_index(DType dt) {
  switch (dt) {
    case DType::kF64:
      return kEwF64;
    case DType::kF32:
      return kEwF32;
    case DType::kF16:
      return kEwF16;
    case DType::kBF16:
      return kEwBF16;
    case DType::kI64:
      return kEwI64;
    case DType::kI32:
      return kEwI32;
    default:
      return -1;
  }
}
constexpr int kNumFloatEwDtypes = 4;  // f64, f32, f16, bf16: the first four rows

// Inner-loop operand patterns of binary(): both operands contiguous, b one broadcast scalar,
// a one broadcast scalar.
enum BinaryPattern : int { kVecVec, kVecScalar, kScalarVec, kNumBinaryPatterns };
constexpr int kNumBinaryOps = 6;
constexpr int kNumUnaryOps = 12;

using BinaryFn = void (*)(int64_t n, const void* a, const void* b, void* out);
using UnaryFn = void (*)(int64_t n, const void* x, void* out);
using AxpbyFn = void (*)(int64_t n, double alpha, const void* x, double beta, const void* y,
                         void* out);
using ScaleFn = void (*)(int64_t n, double alpha, const void* x, void* out);

struct BinaryTable {
  BinaryFn fn[kNumBinaryOps][kNumEwDtypes][kNumBinaryPatterns] = {};
};
struct UnaryTable {
  UnaryFn fn[kNumUnaryOps][kNumFloatEwDtypes] = {};
};
struct AxpbyTable {
  AxpbyFn axpby[kNumFloatEwDtypes] = {};
  ScaleFn scale[kNumFloatEwDtypes] = {};
};

namespace scalar {
void fill_binary_table(BinaryTable& t);
void fill_unary_table(UnaryTable& t);
void fill_axpby_table(AxpbyTable& t);
}  // namespace scalar
namespace avx2 {
void fill_binary_table(BinaryTable& t);
void fill_unary_table(UnaryTable& t);
void fill_axpby_table(AxpbyTable& t);
}  // namespace avx2
namespace avx512 {
void fill_binary_table(BinaryTable& t);
void fill_unary_table(UnaryTable& t);
void fill_axpby_table(AxpbyTable& t);
}  // namespace avx512

// One complete table per level, each a copy of the narrower one with its own entries
// written over; pick.get() returns the calling thread's. Baseline files only.
template <class Table>
struct EwTables {
  using Fill = void (*)(Table&);
  Table scalar_table, avx2_table, avx512_table;
  IsaTable<const Table*> pick;
  EwTables(Fill scalar_fill, Fill avx2_fill, Fill avx512_fill) {
    scalar_fill(scalar_table);
    avx2_table = scalar_table;
    avx2_fill(avx2_table);
    avx512_table = avx2_table;
    avx512_fill(avx512_table);
    pick = {&scalar_table, &avx2_table, &avx512_table, nullptr};
  }
};

}  // namespace braid::kernels::cpu
