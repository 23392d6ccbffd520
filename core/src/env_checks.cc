// Capability checks and the environment report. Build flags are only printed here, never
// branched on: what is usable is asked of the runtime registry.
#include "braid/core/env_checks.h"

#include <sstream>

#include "braid/core/config.h"
#include "braid/core/cpu_features.h"
#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

std::string cpu_feature_list(const CpuFeatures& f) {
  std::string out;
  auto add = [&](bool has, const char* name) {
    if (!has) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(f.avx2, "avx2");
  add(f.avx512, "avx512");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_tile, "amx_tile");
  return out.empty() ? "none of avx2, avx512, avx512_bf16, avx512_fp16, amx_tile" : out;
}

void report_simd(std::ostream& out) {
  out << "simd: max " << cpu_isa_name(cpu_max_isa());
  try {
    out << ", active " << cpu_isa_name(cpu_active_isa()) << "\n";
  } catch (const Error& e) {
    out << ", active unknown: " << e.message() << "\n";
  }
}

// One line of counts, then why each built GPU runtime without a device is not usable (the
// runtime's own message: no driver, no device visible, CUDA_VISIBLE_DEVICES empty ...).
void report_devices(std::ostream& out) {
  out << "devices:";
  std::ostringstream why;
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    const auto t = static_cast<DeviceType>(i);
    out << ' ' << device_type_name(t) << '=' << device_count(t);
    if (!is_runtime_built(t)) {
      out << " (no runtime in this build)";
      continue;
    }
    try {
      (void)device_runtime(t);
    } catch (const Error& e) {
      why << "  " << device_type_name(t) << " not usable: " << e.message() << "\n";
    }
  }
  out << "\n" << why.str();
}

}  // namespace

int device_count(DeviceType type) {
  if (!is_runtime_built(type)) return 0;
  try {
    return device_runtime(type).device_count();
  } catch (...) {
    return 0;  // a runtime with no devices, or one that failed to initialize
  }
}

bool is_cuda_available() {
  return device_count(DeviceType::kCUDA) > 0;
}
bool is_hip_available() {
  return device_count(DeviceType::kHIP) > 0;
}
bool is_xpu_available() {
  return device_count(DeviceType::kXPU) > 0;
}

bool is_bf16_available() {
  if (cpu_features().avx512_bf16) return true;
  const int n = device_count(DeviceType::kCUDA);
  for (int i = 0; i < n; ++i) {
    try {
      if (device_runtime(DeviceType::kCUDA).properties(i).compute_major >= 8) return true;
    } catch (...) {
      // A device that cannot report its properties is not counted.
    }
  }
  return false;
}

std::string environment_report() {
  std::ostringstream out;
  out << "braid " << BRAID_VERSION_STRING << "\n";
  out << "build: BRAID_HAVE_CUDA=" << BRAID_HAVE_CUDA << " BRAID_HAVE_HIP=" << BRAID_HAVE_HIP
      << " BRAID_HAVE_NCCL=" << BRAID_HAVE_NCCL << " BRAID_HAVE_UCX=" << BRAID_HAVE_UCX
      << " BRAID_HAVE_MPI=" << BRAID_HAVE_MPI << " BRAID_HAVE_XPU=" << BRAID_HAVE_XPU << "\n";
  const CpuFeatures& f = cpu_features();
  out << "cpu: " << (f.brand.empty() ? "unknown brand" : f.brand) << " (" << f.vendor << ")\n";
  out << "cpu features: " << cpu_feature_list(f) << "\n";
  report_simd(out);
  report_devices(out);
  out << "bf16 available: " << (is_bf16_available() ? "yes" : "no") << "\n";
  const auto vars = env_with_prefix("BRAID_");
  out << "environment:" << (vars.empty() ? " no BRAID_* variables set" : "") << "\n";
  for (const auto& [name, value] : vars) out << "  " << name << "=" << value << "\n";
  return out.str();
}

}  // namespace braid
