// `braid env`: prints the environment report (braid/core/env_checks.h): build options,
// devices and runtimes, CPU features, BRAID_* variables, then the communication backends and
// the UCX and MPI libraries loaded (braid/comm/backend.h). What users paste into bug reports.
#include <iostream>

#include "braid/comm/backend.h"
#include "braid/core/env_checks.h"
#include "commands.h"

namespace braid::cli {

void add_env_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("env", "Print the environment report: build, devices, CPU");
  cmd->callback([] { std::cout << braid::environment_report() << braid::communication_report(); });
}

}  // namespace braid::cli
