// Folding the contributions of a reduction (docs/shm.md, "Determinism"): element i of the
// result is ((x0 op x1) op x2) ... op x(n-1), rank order, in the accumulation type (f64 for
// f64, f32 for f32 / f16 / bf16 / fp8, i64 for integers and bool), rounded once to the dtype.
// The fold is elementwise, so the bits do not depend on the algorithm, the chunk size or the
// rank that computes it.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/comm/types.h"
#include "braid/core/dtype.h"

namespace braid::shm {

// The dtype contributions are accumulated in.
DType accumulation_dtype(DType dtype);

// Throws kNotSupported for combinations without a meaning: premul_sum on integer / bool
// dtypes (float only, as torch) and avg on bool.
void check_reducible(DType dtype, ReduceOp op);

class Folder {
 public:
  // `factors`: rank r's premul_sum factor at [r] (each rank may pass its own, as NCCL);
  // ignored for the other ops.
  Folder(DType dtype, ReduceOp op, std::vector<double> factors, int nranks);

  // out[i] = fold over r < n of inputs[r][i], count elements of the dtype. `out` may alias an
  // input (each block is read before it is written).
  void fold(const void* const* inputs, int n, int64_t count, void* out);

 private:
  void fold_block(const void* const* inputs, int n, int64_t offset, int64_t m, void* out);
  // Pointer to contribution r of the block, widened (and premultiplied) into `tmp_` if needed.
  const void* widen(const void* input, int rank, int64_t offset, int64_t m, bool into_acc);
  void finalize(int64_t m, void* out);

  DType dtype_, acc_;
  ReduceOp op_;
  std::vector<double> factors_;
  int nranks_;
  std::vector<uint8_t> acc_buf_, tmp_buf_;
};

}  // namespace braid::shm
