// SPDX-License-Identifier: Apache-2.0
// CPU features detected at run time (cpuid + xgetbv), so one binary picks the widest SIMD
// path the machine has. BRAID_CPU_ISA=scalar|avx2|avx512|avx512bf16|amx caps the choice (for
// tests and for comparing paths on one machine).
#pragma once

#include <string>
#include <string_view>

namespace braid {

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C, with OS support for YMM state
  bool avx512 = false;       // AVX-512 F, BW, DQ, VL, with OS support for ZMM state
  bool avx512_bf16 = false;  // AVX512_BF16 (vcvtne2ps2bf16, vdpbf16ps)
  bool avx512_fp16 = false;  // AVX512_FP16
  bool amx_tile = false;     // AMX-TILE with AMX-BF16
  bool prefetchw = false;    // PREFETCHW (a prefetch that asks for the line to write it)
  std::string vendor;        // "AuthenticAMD", "GenuineIntel", ...
  std::string brand;         // the processor's brand string
};

// What the hardware and OS support, ignoring BRAID_CPU_ISA.
const CpuFeatures& cpu_features();

// The SIMD levels kernels are compiled for, narrowest first.
// kAmx: AVX512_BF16 plus AMX tiles for bf16 products (AMX-TILE, AMX-BF16, the OS's tile state
// and, on Linux, the process's permission to use it, asked for once with arch_prctl).
enum class CpuIsa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kAmx = 4 };

std::string_view cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512", "avx512bf16", "amx"
// Widest level the CPU supports.
CpuIsa cpu_max_isa();
// The level kernels dispatch to: cpu_max_isa() capped by BRAID_CPU_ISA (read once).
CpuIsa cpu_active_isa();
// True when this machine can run code compiled for `isa`.
bool cpu_supports(CpuIsa isa);

// The level a kernel call on this thread dispatches to: the innermost ScopedCpuIsa's level
// if one is alive, else cpu_active_isa().
CpuIsa cpu_dispatch_isa();

// Forces kernels called on this thread to one SIMD level (tests run every kernel at every
// level the CPU supports and compare against kScalar). Throws kNotSupported when the CPU
// cannot run `isa`. Scopes nest.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa);
  ~ScopedCpuIsa();
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;

 private:
  int previous_;
};

}  // namespace braid
