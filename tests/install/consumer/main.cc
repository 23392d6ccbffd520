// Uses a few public APIs of an installed braid (one from each installed library) and checks
// their results, so a broken install, a missing header or an unlinked library fails here.
// Prints one line per check; exits non-zero on the first wrong result.
#include <cstdio>
#include <cstring>
#include <string>

#include "braid/core/config.h"
#include "braid/core/device.h"
#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "braid/tensor/tensor.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

}  // namespace

int main() {
#ifdef EXPECTED_BRAID_VERSION
  expect(std::string(BRAID_VERSION_STRING) == EXPECTED_BRAID_VERSION,
         std::string("config.h version ") + BRAID_VERSION_STRING + " matches the package's");
#endif

  // core: Device parsing and printing.
  braid::Device d = braid::Device::parse("cuda:1");
  expect(d.type == braid::DeviceType::kCUDA && d.index == 1 && d.str() == "cuda:1",
         "Device::parse(\"cuda:1\") -> " + d.str());

  // core: braid::Error with a kind and a message naming the bad text.
  bool threw = false;
  try {
    braid::Device::parse("warp-drive:0");
  } catch (const braid::Error& e) {
    threw = e.kind() == braid::ErrorKind::kInvalidArgument &&
            e.message().find("warp-drive") != std::string::npos;
    std::printf("   (error: %s)\n", e.what());
  }
  expect(threw, "Device::parse(\"warp-drive:0\") throws kInvalidArgument naming the text");

  // core: dtype names, both directions.
  expect(braid::dtype_name(braid::DType::kBF16) == "bf16", "dtype_name(kBF16) == bf16");
  expect(braid::parse_dtype("float32") == braid::DType::kF32, "parse_dtype(float32) == kF32");
  expect(braid::dtype_safetensors_name(braid::DType::kF8E4M3) == "F8_E4M3",
         "safetensors name of kF8E4M3 == F8_E4M3");

  // kernels: f32 -> bf16 conversion of 1.0 is 0x3f80.
  const float one = 1.0f;
  uint16_t bits = 0;
  braid::kernels::cpu::cast(&one, braid::DType::kF32, &bits, braid::DType::kBF16, 1);
  expect(bits == 0x3f80, "kernels::cpu::cast(1.0f -> bf16) == 0x3f80");

  // tensor: shape helpers.
  expect(braid::shape_numel({2, 3, 4}) == 24, "shape_numel([2, 3, 4]) == 24");

  std::printf("%s\n", failures == 0 ? "consumer: all checks passed" : "consumer: FAILED");
  return failures == 0 ? 0 : 1;
}
