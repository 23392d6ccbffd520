// The braid CLI's subcommands. Each lives in its own file and adds itself to the top-level
// CLI11 app; main.cc calls every add_*_command in the order `braid --help` lists them.
// A command reports bad input by throwing braid::Error; main.cc turns it into a message
// and a non-zero exit status.
#pragma once

#include <CLI/CLI.hpp>

namespace braid::cli {

void add_bench_command(CLI::App& app);            // braid bench: collective benchmarks
void add_config_command(CLI::App& app);           // braid config: the configuration file
void add_env_command(CLI::App& app);              // braid env: the environment report
void add_estimate_memory_command(CLI::App& app);  // braid estimate-memory: per-stage peaks
void add_launch_command(CLI::App& app);           // braid launch: run N ranks of a program
void add_merge_weights_command(CLI::App& app);    // braid merge-weights: sharded -> safetensors
void add_test_command(CLI::App& app);             // braid test: a short end-to-end check
void add_version_command(CLI::App& app);          // braid version

// Thrown by a command that finished with a specific non-zero exit status (braid launch
// returns its ranks' status); main.cc returns `code`.
struct CommandExit {
  int code;
};

}  // namespace braid::cli
