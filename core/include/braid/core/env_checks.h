// SPDX-License-Identifier: Apache-2.0
// What this process can use: accelerators, bf16, device counts, and a readable report of the
// build and the machine (for `braid env` and for bug reports). None of these throw for a
// device type that was not built: they answer false / 0.
#pragma once

#include <string>

#include "braid/core/device.h"

namespace braid {

// Devices of `type` visible to this process: 0 when the runtime is not built, has no devices,
// or fails to answer; 1 for cpu and meta. Never throws.
int device_count(DeviceType type);

bool is_cuda_available();  // a cuda runtime is registered and sees at least one device
bool is_hip_available();
bool is_xpu_available();

// bf16 arithmetic is fast here: the CPU has AVX512_BF16, or a registered cuda runtime has a
// device of compute capability 8.0 or newer.
bool is_bf16_available();

// A multi-line, human-readable report: braid version, build flags (BRAID_HAVE_*), CPU brand,
// vendor and features, the SIMD level kernels use, device counts per type, and the BRAID_*
// variables that are set. Never throws: a part that fails is reported as such.
//
//   std::cout << braid::environment_report();
std::string environment_report();

}  // namespace braid
