// Folder: the rank-order reduction every shm algorithm uses, built on the SIMD CPU kernels
// (cast to widen and round, binary for the combine). Blocks of kBlock elements keep the
// accumulator in cache; blocking is elementwise, so it cannot change the bits.
#include "shm_reduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"

namespace braid::shm {
namespace {

namespace cpu = kernels::cpu;

constexpr int64_t kBlock = 4096;

cpu::BinaryOp combine_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd:
      return cpu::BinaryOp::kMul;
    case ReduceOp::kMin:
      return cpu::BinaryOp::kMin;
    case ReduceOp::kMax:
      return cpu::BinaryOp::kMax;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kPremulSum:
      return cpu::BinaryOp::kAdd;
  }
  return cpu::BinaryOp::kAdd;
}

// out = a op b over m contiguous elements (b broadcast when b_scalar).
void apply(cpu::BinaryOp op, DType dtype, int64_t m, const void* a, const void* b, bool b_scalar,
           void* out) {
  const int64_t shape[1] = {m};
  const int64_t one[1] = {1};
  const int64_t zero[1] = {0};
  cpu::binary(op, dtype, 1, shape, a, one, b, b_scalar ? zero : one, out);
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

Folder::Folder(DType dtype, ReduceOp op, std::vector<double> factors, int nranks)
    : dtype_(dtype),
      acc_(accumulation_dtype(dtype)),
      op_(op),
      factors_(std::move(factors)),
      nranks_(nranks) {
  check_reducible(dtype, op);
  if (op == ReduceOp::kPremulSum) factors_.resize(nranks, 1.0);
  const size_t bytes = kBlock * dtype_size(acc_);
  acc_buf_.resize(bytes + 16);  // + room for the broadcast scalar after the block
  tmp_buf_.resize(bytes);
}

void Folder::fold(const void* const* inputs, int n, int64_t count, void* out) {
  for (int64_t offset = 0; offset < count; offset += kBlock) {
    fold_block(inputs, n, offset, std::min(kBlock, count - offset), out);
  }
}

const void* Folder::widen(const void* input, int rank, int64_t offset, int64_t m, bool into_acc) {
  const void* src = static_cast<const uint8_t*>(input) + offset * dtype_size(dtype_);
  void* dst = into_acc ? acc_buf_.data() : tmp_buf_.data();
  if (dtype_ != acc_) {
    cpu::cast(src, dtype_, dst, acc_, m);
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
    apply(cpu::BinaryOp::kMul, acc_, m, src, factor, true, dst);
    src = dst;
  }
  if (into_acc && src != dst) std::memcpy(dst, src, m * dtype_size(acc_));
  return src;
}

void Folder::fold_block(const void* const* inputs, int n, int64_t offset, int64_t m, void* out) {
  widen(inputs[0], 0, offset, m, /*into_acc=*/true);
  const cpu::BinaryOp op = combine_op(op_);
  for (int r = 1; r < n; ++r) {
    const void* x = widen(inputs[r], r, offset, m, /*into_acc=*/false);
    apply(op, acc_, m, acc_buf_.data(), x, false, acc_buf_.data());
  }
  finalize(m, static_cast<uint8_t*>(out) + offset * dtype_size(dtype_));
}

void Folder::finalize(int64_t m, void* out) {
  if (op_ == ReduceOp::kAvg) {
    if (acc_ == DType::kI64) {
      floor_divide(reinterpret_cast<int64_t*>(acc_buf_.data()), m, nranks_);
    } else {
      uint8_t divisor[8];
      if (acc_ == DType::kF64) {
        const double d = nranks_;
        std::memcpy(divisor, &d, 8);
      } else {
        const float d = static_cast<float>(nranks_);
        std::memcpy(divisor, &d, 4);
      }
      apply(cpu::BinaryOp::kDiv, acc_, m, acc_buf_.data(), divisor, true, acc_buf_.data());
    }
  }
  cpu::cast(acc_buf_.data(), acc_, out, dtype_, m);
}

}  // namespace braid::shm
