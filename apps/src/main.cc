// Entry point of the `braid` command-line tool: builds the CLI11 app from the subcommands in
// commands.h, parses, and maps failures to exit statuses:
//   0 success, 1 a braid::Error from a command, 2 a usage error (unknown command or option),
//   or the status a command chose (CommandExit: braid launch's ranks).
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include "braid/core/error.h"
#include "commands.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// CLI11 would report an unknown command as "arguments were not expected"; say it plainly.
bool is_unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(argv[1])) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"braid: a C++ runtime for distributed deep-learning training", "braid"};
  app.require_subcommand(1);
  braid::cli::add_bench_command(app);
  braid::cli::add_config_command(app);
  braid::cli::add_env_command(app);
  braid::cli::add_estimate_memory_command(app);
  braid::cli::add_launch_command(app);
  braid::cli::add_merge_weights_command(app);
  braid::cli::add_test_command(app);
  braid::cli::add_version_command(app);

  if (is_unknown_command(app, argc, argv)) {
    std::cerr << "braid: unknown command '" << argv[1] << "'. Commands:";
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      std::cerr << ' ' << sub->get_name();
    }
    std::cerr << ". Run 'braid --help' for details.\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  } catch (const braid::cli::CommandExit& e) {
    return e.code;
  } catch (const braid::Error& e) {
    std::cerr << e.what() << '\n';  // "braid: <kind>: <message> [file:line]"
    return kExitError;
  } catch (const std::exception& e) {
    std::cerr << "braid: error: " << e.what() << '\n';
    return kExitError;
  }
  return 0;
}
