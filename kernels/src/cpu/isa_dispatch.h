// Picks a kernel implementation for the calling thread's SIMD level.
//
// Each kernel family declares one function pointer type and provides implementations in
// namespaces scalar::, avx2::, avx512:: and avx512bf16:: (compiled with the flags of the
// file's suffix, see kernels/CMakeLists.txt). A level without its own implementation points
// at the next narrower one. Dispatch reads cpu_dispatch_isa() on every call: one relaxed
// thread-local load, negligible beside any kernel.
#pragma once

#include "braid/core/cpu_features.h"
#include "braid/core/error.h"

namespace braid::kernels::cpu {

template <typename Fn>
struct IsaTable {
  Fn scalar = nullptr;
  Fn avx2 = nullptr;
  Fn avx512 = nullptr;
  Fn avx512bf16 = nullptr;

  Fn get() const { return get(cpu_dispatch_isa()); }
  Fn get(CpuIsa isa) const {
    switch (isa) {
      case CpuIsa::kAmx:  // only the bf16 GEMM has an AMX path, chosen inside gemm.cc
      case CpuIsa::kAvx512Bf16:
        if (avx512bf16) return avx512bf16;
        [[fallthrough]];
      case CpuIsa::kAvx512:
        if (avx512) return avx512;
        [[fallthrough]];
      case CpuIsa::kAvx2:
        if (avx2) return avx2;
        [[fallthrough]];
      case CpuIsa::kScalar:
        break;
    }
    BRAID_ASSERT(scalar != nullptr, "every kernel has a scalar reference");
    return scalar;
  }
};

}  // namespace braid::kernels::cpu
