// Folder: the rank-order reduction every shm algorithm uses, built on the SIMD CPU kernels of the
// cpu kernel table
// (cast to widen and round, binary for the combine). Blocks of kBlock elements keep the
// accumulator in cache; blocking is elementwise, so it cannot change the bits.
#include "fold.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "braid/core/error.h"
#include "braid/kernels/table.h"

namespace braid {
namespace {

constexpr int64_t kBlock = 4096;

kernels::BinaryOp combine_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd:
      return kernels::BinaryOp::kMul;
    case ReduceOp::kMin:
      return kernels::BinaryOp::kMin;
    case ReduceOp::kMax:
      return kernels::BinaryOp::kMax;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kPremulSum:
      return kernels::BinaryOp::kAdd;
  }
  return kernels::BinaryOp::kAdd;
}

// out = a op b over m contiguous elements (b broadcast when b_scalar).
void apply(kernels::BinaryOp op, DType dtype, int64_t m, const void* a, const void* b,
           bool b_scalar, void* out) {
  const int64_t shape[1] = {m};
  const int64_t one[1] = {1};
  const int64_t zero[1] = {0};
  host_kernels().binary(Stream{kCPU}, op, dtype, 1, shape, a, one, b, b_scalar ? zero : one, out);
}

// Floor division (toward -inf) of integer sums by the rank count.
void floor_divide(int64_t* acc, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    int64_t q = acc[i] / n;
    if (acc[i] % n != 0 && acc[i] < 0) --q;
    acc[i] = q;
  }
}

}  // namespace

const kernels::KernelTable& host_kernels() {
  static const kernels::KernelTable& k = kernels::kernels_for(kCPU);
  return k;
}

DType accumulation_dtype(DType dtype) {
  if (dtype == DType::kF64) return DType::kF64;
  if (is_floating(dtype)) return DType::kF32;
  return DType::kI64;
}

void check_reducible(DType dtype, ReduceOp op) {
  BRAID_CHECK(op != ReduceOp::kPremulSum || is_floating(dtype), kNotSupported,
              "shm: reduce op premul_sum on dtype ", dtype,
              " is not supported (expected a float dtype, as torch)");
  BRAID_CHECK(op != ReduceOp::kAvg || dtype != DType::kBool, kNotSupported,
              "shm: reduce op avg on dtype bool is not supported (expected a numeric dtype)");
}

Folder::Folder(DType dtype, ReduceOp op, std::vector<double> factors, int nranks,
               std::vector<uint8_t>* scratch)
    : dtype_(dtype),
      acc_(accumulation_dtype(dtype)),
      op_(op),
      factors_(std::move(factors)),
      nranks_(nranks),
      direct_(dtype == acc_ && op != ReduceOp::kAvg && op != ReduceOp::kPremulSum),
      scratch_(scratch ? scratch : &own_scratch_) {
  check_reducible(dtype, op);
  if (op == ReduceOp::kPremulSum) factors_.resize(nranks, 1.0);
}

void Folder::reserve(int64_t count) {
  if (std::min(kBlock, count) > block_elems_) {
    // + room for the broadcast scalar after the accumulator block
    block_elems_ = std::min(kBlock, count);
    const size_t bytes = static_cast<size_t>(block_elems_) * dtype_size(acc_);
    if (scratch_->size() < 2 * bytes + 16) scratch_->resize(2 * bytes + 16);
    acc_buf_ = scratch_->data();
    tmp_buf_ = scratch_->data() + bytes + 16;
  }
}

void Folder::fold(const void* const* inputs, int n, int64_t count, void* out) {
  if (count <= 0) return;
  reserve(count);
  for (int64_t offset = 0; offset < count; offset += kBlock) {
    const int64_t m = std::min(kBlock, count - offset);
    if (direct_) {
      fold_direct(inputs, n, offset, m, out);
    } else {
      fold_block(inputs, n, offset, m, out);
    }
  }
}

void Folder::fold_direct(const void* const* inputs, int n, int64_t offset, int64_t m, void* out) {
  const size_t es = dtype_size(dtype_);
  auto block = [&](const void* base) { return static_cast<const uint8_t*>(base) + offset * es; };
  uint8_t* dst = static_cast<uint8_t*>(out) + offset * es;
  const uint8_t* end = dst + m * es;
  if (n == 1) {
    const uint8_t* src = block(inputs[0]);
    if (src + m * es <= dst || end <= src) {
      fast_copy(dst, src, m * es);
    } else if (dst != src) {
      std::memmove(dst, src, m * es);
    }
    return;
  }
  // Accumulating in `dst` rewrites it after each rank: fine unless a later input (r >= 2) lies
  // in the same bytes, then the accumulator block comes first.
  bool alias = false;
  for (int r = 2; r < n; ++r) alias |= block(inputs[r]) < end && block(inputs[r]) + m * es > dst;
  uint8_t* acc = alias ? acc_buf_ : dst;
  const kernels::BinaryOp op = combine_op(op_);
  apply(op, dtype_, m, block(inputs[0]), block(inputs[1]), false, acc);
  for (int r = 2; r < n; ++r) apply(op, dtype_, m, acc, block(inputs[r]), false, acc);
  if (alias) std::memcpy(dst, acc, m * es);
}

const void* Folder::widen(const void* input, int rank, int64_t offset, int64_t m, bool into_acc) {
  const void* src = static_cast<const uint8_t*>(input) + offset * dtype_size(dtype_);
  void* dst = into_acc ? acc_buf_ : tmp_buf_;
  if (dtype_ != acc_) {
    host_kernels().cast(Stream{kCPU}, src, dtype_, dst, acc_, m, kernels::CastMode::kDefault);
    src = dst;
  }
  if (op_ == ReduceOp::kPremulSum) {
    // The factor is rounded to the accumulation type first; each product is rounded once.
    uint8_t factor[8];
    if (acc_ == DType::kF64) {
      std::memcpy(factor, &factors_[rank], 8);
    } else {
      const float f = static_cast<float>(factors_[rank]);
      std::memcpy(factor, &f, 4);
    }
    apply(kernels::BinaryOp::kMul, acc_, m, src, factor, true, dst);
    src = dst;
  }
  if (into_acc && src != dst) std::memcpy(dst, src, m * dtype_size(acc_));
  return src;
}

void Folder::fold_block(const void* const* inputs, int n, int64_t offset, int64_t m, void* out) {
  widen(inputs[0], 0, offset, m, /*into_acc=*/true);
  const kernels::BinaryOp op = combine_op(op_);
  for (int r = 1; r < n; ++r) {
    const void* x = widen(inputs[r], r, offset, m, /*into_acc=*/false);
    apply(op, acc_, m, acc_buf_, x, false, acc_buf_);
  }
  finalize(m, static_cast<uint8_t*>(out) + offset * dtype_size(dtype_));
}

void Folder::fold_stage(const void* const* inputs, int first, int n, const void* carry_in,
                        int64_t count, void* out) {
  BRAID_ASSERT(first >= 0 && n >= 0 && first + n <= nranks_ && (first == 0) == !carry_in &&
                   (carry_in || n > 0),
               "fold_stage: ranks [", first, ", ", first + n, ") of ", nranks_, " with",
               carry_in ? "" : "out", " a carry");
  if (count <= 0) return;
  reserve(count);
  const size_t aes = dtype_size(acc_);
  const bool last = first + n == nranks_;
  const kernels::BinaryOp op = combine_op(op_);
  for (int64_t offset = 0; offset < count; offset += kBlock) {
    const int64_t m = std::min(kBlock, count - offset);
    int r = 0;
    if (carry_in) {
      std::memcpy(acc_buf_, static_cast<const uint8_t*>(carry_in) + offset * aes, m * aes);
    } else {
      widen(inputs[0], first, offset, m, /*into_acc=*/true);
      r = 1;
    }
    for (; r < n; ++r) {
      const void* x = widen(inputs[r], first + r, offset, m, /*into_acc=*/false);
      apply(op, acc_, m, acc_buf_, x, false, acc_buf_);
    }
    if (last) {
      finalize(m, static_cast<uint8_t*>(out) + offset * dtype_size(dtype_));
    } else {
      std::memcpy(static_cast<uint8_t*>(out) + offset * aes, acc_buf_, m * aes);
    }
  }
}

void Folder::finalize(int64_t m, void* out) {
  if (op_ == ReduceOp::kAvg) {
    if (acc_ == DType::kI64) {
      floor_divide(reinterpret_cast<int64_t*>(acc_buf_), m, nranks_);
    } else {
      uint8_t divisor[8];
      if (acc_ == DType::kF64) {
        const double d = nranks_;
        std::memcpy(divisor, &d, 8);
      } else {
        const float d = static_cast<float>(nranks_);
        std::memcpy(divisor, &d, 4);
      }
      apply(kernels::BinaryOp::kDiv, acc_, m, acc_buf_, divisor, true, acc_buf_);
    }
  }
  host_kernels().cast(Stream{kCPU}, acc_buf_, acc_, out, dtype_, m, kernels::CastMode::kDefault);
}

}  // namespace braid
