// The braid CLI's subcommands. Each lives in its own file and adds itself to the top-level
// CLI11 app; main.cc calls every add_*_command in the order `braid --help` lists them.
// A command reports bad input by throwing braid::Error; main.cc turns it into a message
// and a non-zero exit status.
#pragma once

#include <CLI/CLI.hpp>

namespace braid::cli {

void add_env_command(CLI::App& app);      // braid env: the environment report
void add_version_command(CLI::App& app);  // braid version

}  // namespace braid::cli
