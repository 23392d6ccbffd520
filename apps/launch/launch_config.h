// What `braid launch` makes of its command line and its configuration file before it starts
// anything: torchrun's options (--standalone, --nproc-per-node auto, --rdzv-endpoint,
// --rdzv-backend) and accelerate launch's file keys (num_processes, num_machines,
// machine_rank, main_process_ip, main_process_port) become one LaunchOptions. Flags win over
// the file; every disagreement gives one warning line. Pure functions (the machine's counts
// come in as values), so they are tested without starting processes. docs/launch.md,
// "Configuration file", is the user-facing description.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "launch/job.h"

namespace braid::launch {

// The command line as given: nullopt / empty for what was not given. Options without a file
// counterpart (timeout, log dir, grace period, max restarts, the program) are in `base`.
struct LaunchFlags {
  std::optional<std::string> nproc_per_node;  // a count, "auto", "cpu" or "gpu"
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> rdzv_endpoint;  // HOST[:PORT]
  std::optional<std::string> rdzv_backend;   // c10d or static
  bool standalone = false;
  LaunchOptions base;  // config_file, timeout, log_dir, max_restarts, command, ...
};

// The launcher's keys of a configuration file; nullopt: absent (num_processes -1 counts as
// absent).
struct FileSettings {
  std::optional<int64_t> num_processes;  // the total over all machines
  std::optional<int64_t> num_machines;
  std::optional<int64_t> machine_rank;
  std::optional<std::string> main_process_ip;
  std::optional<int64_t> main_process_port;
  // gpu_ids other than "all": the devices each rank sees (CUDA_VISIBLE_DEVICES), as accelerate
  // launch exports them.
  std::optional<std::string> gpu_ids;
};

// Reads `path` with accel's parser (any top-level key of the program's own is accepted).
// Throws kIo (missing or unreadable), kCorruptData (not YAML) or kInvalidArgument (a bad key
// or value), each message starting with "--config-file '<path>'".
FileSettings read_file_settings(const std::filesystem::path& path);

// What --nproc-per-node auto / cpu / gpu count on this machine.
struct MachineCounts {
  int gpus = 0;  // visible CUDA (else HIP) devices
  int cpus = 1;  // CPUs this process may run on (sched_getaffinity)
};
MachineCounts machine_counts();

// "HOST", "HOST:PORT", "[IPV6]:PORT" -> host and port (torchrun's c10d default 29400 when
// absent). Throws kInvalidArgument naming the option and the expected form.
std::pair<std::string, int> parse_rdzv_endpoint(const std::string& endpoint);

struct ResolvedLaunch {
  LaunchOptions options;
  std::vector<std::string> warnings;  // one line each, without the "braid launch: " prefix
};

// Flags over file over defaults. `file` is the file's settings when base.config_file is set.
// Throws kInvalidArgument for contradictory flags (--standalone with --nnodes > 1,
// --master-addr, --master-port or --rdzv-endpoint; --rdzv-endpoint disagreeing with
// --master-addr / --master-port), an unknown --rdzv-backend, a bad --nproc-per-node, and
// a file num_processes that does not divide over the nodes.
ResolvedLaunch resolve_launch(const LaunchFlags& flags, const std::optional<FileSettings>& file,
                              const MachineCounts& counts);

// Everything `braid launch` does: reads the file, resolves, prints the warnings, runs the job
// (run_job) with restarts. Returns the exit status; throws before any rank starts on bad input.
int launch(const LaunchFlags& flags);

}  // namespace braid::launch
