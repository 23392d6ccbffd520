// The cuda plugins of libbraid.so (docs/layout.md, "Plugins of libbraid.so"; ctest
// bindings.plugin_cuda), from a C++ program linked to libbraid.so only. Runs on any machine
// of a CUDA build: cudart is not loaded until cuda is asked for; then is_runtime_built(cuda)
// loads libbraid_core_cuda.so (and with it cudart), has_kernels / kernels_for(cuda) load
// libbraid_kernels_cuda.so and give the cuda table; device_runtime(cuda) either works (a GPU)
// or says that no device is visible, never that a plugin could not be loaded. Exits 1 naming
// the first failed check.
#include <braid/core/config.h>
#include <braid/core/device_runtime.h>
#include <braid/core/error.h>
#include <braid/kernels/table.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

bool mapped(const std::string& part) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

int main() {
  using braid::DeviceType;
  if (!BRAID_HAVE_CUDA) {
    std::printf("SKIP: this build has no cuda\n");
    return 77;
  }
  expect(!mapped("libcudart") && !mapped("libbraid_core_cuda"),
         "nothing of cuda is loaded before cuda is asked for");
  expect(braid::is_runtime_built(DeviceType::kCPU) && !mapped("libbraid_core_cuda"),
         "asking for the cpu loads no plugin");
  expect(braid::is_runtime_built(DeviceType::kCUDA), "is_runtime_built(cuda)");
  expect(mapped("libbraid_core_cuda.so") && mapped("libcudart"),
         "libbraid_core_cuda.so and cudart are loaded now");
  expect(!mapped("libbraid_kernels_cuda"), "the kernels' plugin is not, yet");
  expect(braid::kernels::has_kernels(DeviceType::kCUDA), "has_kernels(cuda)");
  expect(braid::kernels::kernels_for(DeviceType::kCUDA).device == DeviceType::kCUDA,
         "kernels_for(cuda) is the cuda table");
  expect(mapped("libbraid_kernels_cuda.so"), "libbraid_kernels_cuda.so is loaded now");
  try {
    braid::DeviceRuntime& rt = braid::device_runtime(DeviceType::kCUDA);
    expect(rt.device_count() > 0, "device_runtime(cuda): a device is visible");
  } catch (const braid::Error& e) {
    const std::string message = e.message();
    std::printf("device_runtime(cuda): %s\n", message.c_str());
    expect(message.find("no device is visible") != std::string::npos &&
               message.find("could not be loaded") == std::string::npos,
           "without a GPU, device_runtime(cuda) says no device is visible");
  }
  return failures == 0 ? 0 : 1;
}
