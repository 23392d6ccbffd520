// `braid launch`: starts N ranks of a program on this node, torchrun-style (docs/launch.md).
// This file holds only the command line; apps/launch/ does the work (launch_config.h merges
// the flags with the configuration file). Everything after the program name belongs to the
// program, so `braid launch -n 2 prog --help` passes --help on.
#include <memory>

#include "commands.h"
#include "launch/launch_config.h"

namespace braid::cli {
namespace {

// Values of options that may be absent (nullopt in LaunchFlags): CLI11 fills these, and the
// callback copies those given.
struct RawFlags {
  std::string nproc_per_node, master_addr, rdzv_endpoint, rdzv_backend;
  int nnodes = 1, node_rank = 0, master_port = 0;
  double timeout_s = 0;
};

}  // namespace

void add_launch_command(CLI::App& app) {
  auto flags = std::make_shared<launch::LaunchFlags>();
  auto raw = std::make_shared<RawFlags>();
  launch::LaunchOptions& o = flags->base;
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a program as N ranks on this node (torchrun's variables, per-rank output)");
  cmd->footer(
      "The first argument that is not an option is the program; it and everything after "
      "it go to every rank: braid launch [OPTIONS] program [args...]. Flags win over the "
      "configuration file. See docs/launch.md.");
  CLI::Option* nproc = cmd->add_option(
      "--nproc-per-node,--nproc_per_node", raw->nproc_per_node,
      "Ranks to start on this node: a count, auto (GPUs, else CPUs), cpu or gpu (default: the "
      "file's num_processes / num_machines, else 1)");
  CLI::Option* nnodes =
      cmd->add_option("--nnodes", raw->nnodes, "Number of nodes in the job (default 1)");
  CLI::Option* node_rank =
      cmd->add_option("--node-rank,--node_rank", raw->node_rank, "Index of this node (default 0)");
  CLI::Option* addr = cmd->add_option("--master-addr,--master_addr", raw->master_addr,
                                      "Address of node 0's store (default 127.0.0.1; the store "
                                      "binds it)");
  CLI::Option* port = cmd->add_option("--master-port,--master_port", raw->master_port,
                                      "Port of node 0's store (default 0: pick a free one)");
  CLI::Option* endpoint =
      cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", raw->rdzv_endpoint,
                      "HOST[:PORT] of node 0's store (torchrun's; port default 29400)");
  CLI::Option* backend = cmd->add_option("--rdzv-backend,--rdzv_backend", raw->rdzv_backend,
                                         "Accepted for torchrun command lines: c10d or static");
  cmd->add_option("--rdzv-id,--rdzv_id", o.rdzv_id,
                  "Accepted for torchrun command lines; given to ranks as TORCHELASTIC_RUN_ID");
  cmd->add_flag("--standalone", flags->standalone,
                "One node, the store on loopback at a free port");
  cmd->add_option("--config-file,--config_file", o.config_file,
                  "Configuration file: sets the job's shape, and is given to ranks as "
                  "BRAID_CONFIG_FILE");
  CLI::Option* timeout = cmd->add_option(
      "--timeout", raw->timeout_s, "Collective deadline in seconds for the ranks (BRAID_TIMEOUT)");
  cmd->add_option("--max-restarts,--max_restarts", o.max_restarts,
                  "Restart the whole job up to N times after a rank fails")
      ->capture_default_str();
  cmd->add_flag("--tee", o.tee, "Accepted for torchrun command lines (output is always shown)");
  cmd->add_option("--log-dir,--log_dir", o.log_dir,
                  "Also write each rank's output to DIR/rank_N.log");
  cmd->add_option("--grace-period,--grace_period", o.grace_period_s,
                  "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  cmd->prefix_command();  // the first positional and everything after it is the program's
  cmd->callback([=] {
    launch::LaunchOptions& base = flags->base;
    base.command = cmd->remaining();
    if (!base.command.empty() && base.command.front() == "--") {
      base.command.erase(base.command.begin());
    }
    if (!base.command.empty() && base.command.front().starts_with("-")) {
      throw CLI::ExtrasError("launch", {base.command.front()});
    }
    if (nproc->count() > 0) flags->nproc_per_node = raw->nproc_per_node;
    if (nnodes->count() > 0) flags->nnodes = raw->nnodes;
    if (node_rank->count() > 0) flags->node_rank = raw->node_rank;
    if (addr->count() > 0) flags->master_addr = raw->master_addr;
    if (port->count() > 0) flags->master_port = raw->master_port;
    if (endpoint->count() > 0) flags->rdzv_endpoint = raw->rdzv_endpoint;
    if (backend->count() > 0) flags->rdzv_backend = raw->rdzv_backend;
    if (timeout->count() > 0) base.timeout_s = raw->timeout_s;
    int code = launch::launch(*flags);
    if (code != 0) throw CommandExit{code};
  });
}

}  // namespace braid::cli
