// How tensor ops reach kernels (docs/kernels.md, "Kernel tables"): the table of the operands'
// device, after checking that every operand is defined, that they share one device, and that
// the device runs the op for the dtype. The same checks and messages for every op.
#pragma once

#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/tensor/tensor.h"

namespace braid::detail {

inline const kernels::KernelTable& table_for(kernels::Op op, DType dtype, const char* name,
                                             const Tensor& a, const Tensor* b = nullptr) {
  BRAID_CHECK(a.defined(), kInvalidArgument, name, ": the tensor is undefined");
  if (b != nullptr) {
    BRAID_CHECK(b->defined(), kInvalidArgument, name, ": the second tensor is undefined");
    BRAID_CHECK(a.device() == b->device(), kInvalidArgument, name, ": operands are on ", a.device(),
                " and ", b->device(), "; move one with .to(device)");
  }
  const kernels::KernelTable& table = kernels::kernels_for(a.device());
  BRAID_CHECK(table.supports(op, dtype), kNotSupported, name, ": dtype ", dtype,
              " is not supported on ", a.device(), " (kernel ", kernels::op_name(op), ")");
  return table;
}

}  // namespace braid::detail
