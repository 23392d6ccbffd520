// `braid env`: prints the environment report (braid/core/env_checks.h): build options,
// devices and runtimes, CPU features, BRAID_* variables. What users paste into bug reports.
#include <iostream>

#include "braid/core/env_checks.h"
#include "commands.h"

namespace braid::cli {

void add_env_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("env", "Print the environment report: build, devices, CPU");
  cmd->callback([] { std::cout << braid::environment_report(); });
}

}  // namespace braid::cli
