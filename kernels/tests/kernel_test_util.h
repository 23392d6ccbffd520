// Helpers shared by the CPU kernel tests: the SIMD levels to run each test at, input
// generators that include every special value, dtype-aware tolerances, and error checks.
// Keep this interface stable: several test files include it.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "braid/core/cpu_features.h"
#include "braid/core/dtype.h"
#include "braid/core/error.h"

namespace braid::kernels::cpu::testing {

// Every level this CPU can run, kScalar first.
inline std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa :
       {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

// The SIMD levels above kScalar this CPU can run (what is compared against kScalar).
inline std::vector<CpuIsa> simd_isas() {
  std::vector<CpuIsa> out = supported_isas();
  out.erase(out.begin());
  return out;
}

// Sizes that hit empty input, a lone element, loop tails below and above one vector of
// 8 / 16 lanes, and several full vectors plus a tail.
inline const std::vector<int64_t>& tail_sizes() {
  static const std::vector<int64_t> sizes = {0, 1, 7, 15, 16, 17, 1000, 4099};
  return sizes;
}

// f32 values every float kernel should be run on: signed zeros, subnormals, the edges of
// the f32 / f16 / bf16 / fp8 ranges, halfway cases, Inf and NaN (quiet, signalling,
// negative, with payloads).
inline std::vector<float> special_f32() {
  const uint32_t bits[] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00400000u,
      0x00008000u, 0x00018000u, 0x00800000u, 0x80800000u, 0x3f800000u, 0xbf800000u, 0x7f7fffffu,
      0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
      0x7fa00000u, 0x7fffffffu, 0xffffffffu, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x47800000u,
      0x33800000u, 0x33000000u, 0x33000001u, 0x38800000u, 0x387fc000u, 0x3f808000u, 0x3f818000u,
      0x3f808001u, 0x43e00000u, 0x43e80000u, 0x43f00000u, 0x47600000u, 0x47700000u, 0x3b000000u,
      0x3a800000u, 0x37800000u, 0x37000000u, 0x7f7f8000u, 0x7f7f7fffu};
  std::vector<float> out;
  for (uint32_t b : bits) out.push_back(std::bit_cast<float>(b));
  return out;
}

// n f32 values: random bit patterns (all exponents, NaNs included) interleaved with the
// special values, deterministic for a seed.
inline std::vector<float> random_f32_bits(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> special = special_f32();
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out[i] = (i % 3 == 0) ? special[static_cast<size_t>(i / 3) % special.size()]
                          : std::bit_cast<float>(static_cast<uint32_t>(rng()));
  }
  return out;
}

// n uniform values in [lo, hi), deterministic for a seed.
inline std::vector<float> random_f32(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) v = dist(rng);
  return out;
}

// Tolerance |got - ref| <= abs + rel * |ref| between two results stored in `dtype` that may
// round differently: one ulp of the output format (the smallest subnormal step as `abs`) plus
// `f32_ulps` of f32 arithmetic error (an ulp taken as 2^-23 relative, its largest).
struct Tolerance {
  double abs = 0;
  double rel = 0;
};
inline Tolerance dtype_tolerance(DType dtype, double f32_ulps = 4) {
  switch (dtype) {
    case DType::kF64:
      return {1e-300, 1e-14};
    case DType::kF32:
      return {1e-37, f32_ulps * 0x1p-23};
    case DType::kF16:
      return {0x1p-24, 0x1p-10 + f32_ulps * 0x1p-23};
    case DType::kBF16:
      return {1e-37, 0x1p-7 + f32_ulps * 0x1p-23};
    default:
      return {0, 0};
  }
}

// True when got matches ref within tol; NaN matches NaN, Inf matches the same Inf.
inline bool close_enough(double ref, double got, Tolerance tol) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got);
  if (std::isinf(ref) || std::isinf(got)) return ref == got;
  return std::fabs(got - ref) <= tol.abs + tol.rel * std::fabs(ref);
}

// Runs fn and checks it throws braid::Error of `kind` whose message contains each of
// `needles` (the thing named, the bad value).
inline void expect_error(const std::function<void()>& fn, ErrorKind kind,
                         const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected braid::Error(" << to_string(kind) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(e.message().find(n), std::string::npos)
          << "message '" << e.message() << "' should name '" << n << "'";
    }
  }
}

// gtest parameter name for a SIMD level: "scalar", "avx2", ...
inline std::string isa_test_name(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(cpu_isa_name(info.param));
}

}  // namespace braid::kernels::cpu::testing
