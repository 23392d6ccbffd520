// `braid launch`: starts N ranks of a program on this node, torchrun-style (docs/launch.md).
// This file holds only the command line; apps/launch/ does the work. Everything after the
// program name belongs to the program, so `braid launch -n 2 prog --help` passes --help on.
#include <memory>

#include "commands.h"
#include "launch/job.h"

namespace braid::cli {

void add_launch_command(CLI::App& app) {
  auto o = std::make_shared<launch::LaunchOptions>();
  auto timeout = std::make_shared<double>(0.0);
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a program as N ranks on this node (torchrun's variables, per-rank output)");
  cmd->footer(
      "The first argument that is not an option is the program; it and everything after "
      "it go to every rank: braid launch [OPTIONS] program [args...]. See docs/launch.md.");
  cmd->add_option("--nproc-per-node,--nproc_per_node", o->nproc_per_node,
                  "Ranks to start on this node")
      ->capture_default_str();
  cmd->add_option("--nnodes", o->nnodes, "Number of nodes in the job")->capture_default_str();
  cmd->add_option("--node-rank,--node_rank", o->node_rank, "Index of this node")
      ->capture_default_str();
  cmd->add_option("--master-addr,--master_addr", o->master_addr,
                  "Address of node 0's store (default 127.0.0.1; the store binds it)");
  cmd->add_option("--master-port,--master_port", o->master_port,
                  "Port of node 0's store (default 0: pick a free one)");
  cmd->add_option("--config-file", o->config_file, "Configuration file, given to ranks");
  CLI::Option* timeout_opt = cmd->add_option(
      "--timeout", *timeout, "Collective deadline in seconds for the ranks (BRAID_TIMEOUT)");
  cmd->add_flag("--tee", o->tee, "Accepted for torchrun command lines (output is always shown)");
  cmd->add_option("--log-dir,--log_dir", o->log_dir,
                  "Also write each rank's output to DIR/rank_N.log");
  cmd->add_option("--grace-period,--grace_period", o->grace_period_s,
                  "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  cmd->prefix_command();  // the first positional and everything after it is the program's
  cmd->callback([cmd, o, timeout, timeout_opt] {
    o->command = cmd->remaining();
    if (!o->command.empty() && o->command.front() == "--") o->command.erase(o->command.begin());
    if (!o->command.empty() && o->command.front().starts_with("-")) {
      throw CLI::ExtrasError("launch", {o->command.front()});
    }
    if (timeout_opt->count() > 0) o->timeout_s = *timeout;
    int code = launch::run_job(*o);
    if (code != 0) throw CommandExit{code};
  });
}

}  // namespace braid::cli
