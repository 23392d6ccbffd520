// The (op, dtype) pairs the reference kernels (cpu.h) accept, shared by the cpu and meta tables
// so that a model sized on meta is refused exactly where it would be refused on cpu.
// kernels/tests/table_conformance_test.cc checks this against what the cpu kernels do.
#pragma once

#include "braid/kernels/table.h"

namespace braid::kernels::detail {

bool reference_supports(Op op, DType dtype);

}  // namespace braid::kernels::detail
