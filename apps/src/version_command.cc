// `braid version`: the version this binary was built as, from the generated config header.
#include <iostream>

#include "braid/core/config.h"
#include "commands.h"

namespace braid::cli {

void add_version_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("version", "Print braid's version");
  cmd->callback([] { std::cout << "braid " << BRAID_VERSION_STRING << '\n'; });
}

}  // namespace braid::cli
