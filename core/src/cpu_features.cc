// Run-time CPU feature detection with cpuid and xgetbv.
#include "braid/core/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "braid/core/error.h"

namespace braid {
namespace {

struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool bit(uint32_t v, int b) {
  return (v >> b) & 1u;
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs r0 = cpuid(0);
  const uint32_t max_leaf = r0.a;
  char vendor[13] = {};
  std::memcpy(vendor, &r0.b, 4);
  std::memcpy(vendor + 4, &r0.d, 4);
  std::memcpy(vendor + 8, &r0.c, 4);
  f.vendor = vendor;

  const Regs ext = cpuid(0x80000000u);
  if (ext.a >= 0x80000004u) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    f.brand = brand;
    while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  }
  if (ext.a >= 0x80000001u) f.prefetchw = bit(cpuid(0x80000001u).c, 8);
  if (max_leaf < 7) return f;

  const Regs r1 = cpuid(1);
  const bool osxsave = bit(r1.c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0;
  const bool amx_os = (xcr0 & 0x60000) == 0x60000;
  const bool fma = bit(r1.c, 12), f16c = bit(r1.c, 29);

  const Regs r7 = cpuid(7, 0);
  const Regs r7_1 = cpuid(7, 1);
  f.avx2 = ymm_os && fma && f16c && bit(r7.b, 5);
  const bool f512 = bit(r7.b, 16), dq = bit(r7.b, 17), bw = bit(r7.b, 30), vl = bit(r7.b, 31);
  f.avx512 = f.avx2 && zmm_os && f512 && dq && bw && vl;
  f.avx512_bf16 = f.avx512 && bit(r7_1.a, 5);
  f.avx512_fp16 = f.avx512 && bit(r7.d, 23);
  f.amx_tile = amx_os && bit(r7.d, 24) && bit(r7.d, 22);
  return f;
}

CpuIsa read_cap() {
  const char* env = std::getenv("BRAID_CPU_ISA");
  if (!env || !*env) return CpuIsa::kAmx;
  const std::string_view v(env);
  for (int i = 0; i <= static_cast<int>(CpuIsa::kAmx); ++i) {
    if (v == cpu_isa_name(static_cast<CpuIsa>(i))) return static_cast<CpuIsa>(i);
  }
  BRAID_FAIL(kInvalidArgument, "BRAID_CPU_ISA='", v,
             "' is not known; expected scalar, avx2, avx512, avx512bf16 or amx");
}

// Linux hands out AMX's tile data state (8 KB per thread) only to a process that asks
// (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+); the first tile instruction of one that did not
// dies of SIGILL. Asked once, the first time the kAmx level is considered. The kernel refuses
// (ENOSPC) when a thread's alternate signal stack is too small for the larger signal frame:
// then the level is simply not offered.
bool amx_permitted() {
  static const bool permitted = [] {
#if defined(__linux__)
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return permitted;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512bf16";
    case CpuIsa::kAmx:
      return "amx";
  }
  return "?";
}

bool cpu_supports(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return f.avx2;
    case CpuIsa::kAvx512:
      return f.avx512;
    case CpuIsa::kAvx512Bf16:
      return f.avx512_bf16;
    case CpuIsa::kAmx:
      return f.avx512_bf16 && f.amx_tile && amx_permitted();
  }
  return false;
}

CpuIsa cpu_max_isa() {
  for (int i = static_cast<int>(CpuIsa::kAmx); i > 0; --i) {
    if (cpu_supports(static_cast<CpuIsa>(i))) return static_cast<CpuIsa>(i);
  }
  return CpuIsa::kScalar;
}

CpuIsa cpu_active_isa() {
  static const CpuIsa active = [] {
    const CpuIsa cap = read_cap();
    const CpuIsa max = cpu_max_isa();
    return static_cast<int>(cap) < static_cast<int>(max) ? cap : max;
  }();
  return active;
}

namespace {
thread_local int t_forced_isa = -1;
}  // namespace

CpuIsa cpu_dispatch_isa() {
  return t_forced_isa >= 0 ? static_cast<CpuIsa>(t_forced_isa) : cpu_active_isa();
}

ScopedCpuIsa::ScopedCpuIsa(CpuIsa isa) : previous_(t_forced_isa) {
  BRAID_CHECK(cpu_supports(isa), kNotSupported, "SIMD level ", cpu_isa_name(isa),
              " is not supported by this CPU (", cpu_features().brand, ")");
  t_forced_isa = static_cast<int>(isa);
}

ScopedCpuIsa::~ScopedCpuIsa() {
  t_forced_isa = previous_;
}

}  // namespace braid
