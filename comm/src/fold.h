// Folding the contributions of a reduction (docs/shm.md, "Determinism"): element i of the
// result is ((x0 op x1) op x2) ... op x(n-1), rank order, in the accumulation type (f64 for
// f64, f32 for f32 / f16 / bf16 / fp8, i64 for integers and bool), rounded once to the dtype.
// The fold is elementwise, so the bits do not depend on the algorithm, the chunk size or the
// rank that computes it. Shared by every backend that reduces on the CPU (shm, mpi), so all
// give the same bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "braid/comm/types.h"
#include "braid/core/dtype.h"
#include "braid/kernels/table.h"

namespace braid {

// The kernels of host memory (shm segments, p2p staging, MPI's buffers): the cpu table. The
// folds here and in mpi_reduce.cc use it.
const kernels::KernelTable& host_kernels();

// memcpy (no overlap) with lengths up to 64 bytes copied inline, in two overlapping fixed-size
// moves: for a small collective the library call and its short-length path (masked AVX-512
// stores, slow on some CPUs) cost more than the copy.
inline void fast_copy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  auto two = [&](auto width) {
    constexpr size_t w = decltype(width)::value;
    uint8_t head[w], tail[w];
    std::memcpy(head, s, w);
    std::memcpy(tail, s + n - w, w);
    std::memcpy(d, head, w);
    std::memcpy(d + n - w, tail, w);
  };
  if (n > 64) {
    std::memcpy(d, s, n);
  } else if (n >= 32) {
    two(std::integral_constant<size_t, 32>{});
  } else if (n >= 16) {
    two(std::integral_constant<size_t, 16>{});
  } else if (n >= 8) {
    two(std::integral_constant<size_t, 8>{});
  } else if (n >= 4) {
    two(std::integral_constant<size_t, 4>{});
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  }
}

// The dtype contributions are accumulated in.
DType accumulation_dtype(DType dtype);

// Throws kNotSupported for combinations without a meaning: premul_sum on integer / bool
// dtypes (float only, as torch) and avg on bool.
void check_reducible(DType dtype, ReduceOp op);

class Folder {
 public:
  // `factors`: rank r's premul_sum factor at [r] (each rank may pass its own, as NCCL);
  // ignored for the other ops. `scratch` (optional) holds the block buffers and is kept by the
  // caller across calls: a small collective then allocates nothing.
  Folder(DType dtype, ReduceOp op, std::vector<double> factors, int nranks,
         std::vector<uint8_t>* scratch = nullptr);

  // out[i] = fold over r < n of inputs[r][i], count elements of the dtype. `out` may alias an
  // input (each block is read before it is written).
  void fold(const void* const* inputs, int n, int64_t count, void* out);

  // One stage of a fold split across parties that each hold some ranks' contributions
  // (hierarchical collectives, docs/hier.md): `inputs` are ranks [first, first + n) of the
  // Folder's nranks. `carry_in` is the accumulator of ranks [0, first) in the accumulation
  // dtype (null when first == 0). When first + n < nranks, the new accumulator goes to `out`
  // in the accumulation dtype; otherwise the result, rounded once, in the dtype. The stages of
  // one fold give the bits of fold() over all ranks.
  void fold_stage(const void* const* inputs, int first, int n, const void* carry_in, int64_t count,
                  void* out);

  // Whether this Folder serves a fold of (dtype, op) over nranks: a backend keeps one across
  // calls (the constructor's checks and set-up cost a fair part of a 16-byte collective). Never
  // for kPremulSum, whose factors change from call to call.
  bool serves(DType dtype, ReduceOp op, int nranks) const {
    return dtype == dtype_ && op == op_ && nranks == nranks_ && op != ReduceOp::kPremulSum;
  }

 private:
  void fold_block(const void* const* inputs, int n, int64_t offset, int64_t m, void* out);
  void reserve(int64_t count);
  // inputs combined straight into `out`: the dtype accumulates in itself and the op needs no
  // widening, premultiplying or final division.
  void fold_direct(const void* const* inputs, int n, int64_t offset, int64_t m, void* out);
  // Pointer to contribution r of the block, widened (and premultiplied) into `tmp` if needed.
  const void* widen(const void* input, int rank, int64_t offset, int64_t m, bool into_acc);
  void finalize(int64_t m, void* out);

  DType dtype_, acc_;
  ReduceOp op_;
  std::vector<double> factors_;
  int nranks_;
  bool direct_;
  std::vector<uint8_t> own_scratch_;
  std::vector<uint8_t>* scratch_;
  int64_t block_elems_ = 0;     // elements the buffers below hold
  uint8_t* acc_buf_ = nullptr;  // in *scratch_
  uint8_t* tmp_buf_ = nullptr;
};

}  // namespace braid
