// `braid env`: prints the environment report (braid/core/env_checks.h): build options,
// devices and runtimes, CPU features, BRAID_* variables, the kernel tables, then the
// communication backends and the UCX and MPI libraries loaded (braid/comm/backend.h). What users
// paste into bug reports.
#include <iostream>
#include <string>

#include "braid/comm/backend.h"
#include "braid/core/env_checks.h"
#include "braid/kernels/table.h"
#include "commands.h"

namespace braid::cli {
namespace {

// The kernel tables this build has (braid/kernels/table.h): which devices tensors can compute on.
std::string kernel_report() {
  std::string out = "kernel tables:";
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    const auto t = static_cast<DeviceType>(i);
    if (kernels::has_kernels(t)) out += " " + std::string(device_type_name(t));
  }
  return out + "\n";
}

// Backends that need a device this process does not see: built, listed, not usable here.
std::string backend_usability() {
  std::string out;
  for (const std::string& name : backend_names()) {
    if (name == "nccl" && device_count(DeviceType::kCUDA) == 0) {
      out += "  nccl not usable: no CUDA device is visible (see 'cuda not usable' above)\n";
    }
  }
  return out;
}

}  // namespace

void add_env_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("env", "Print the environment report: build, devices, CPU");
  cmd->callback([] {
    std::cout << braid::environment_report() << kernel_report() << braid::communication_report()
              << backend_usability();
  });
}

}  // namespace braid::cli
