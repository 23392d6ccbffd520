// What `braid launch` decides before it starts anything: the validated options, the job
// token, the variables each local rank gets, the program to execute, and the cleanup of the
// job's shared-memory segments afterwards. Pure functions where possible, so they are tested
// without starting processes. docs/launch.md is the user-facing description.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;           // empty: loopback (127.0.0.1)
  int master_port = 0;               // 0: node 0 picks a free port
  std::string config_file;           // passed to ranks as BRAID_CONFIG_FILE
  std::optional<double> timeout_s;   // collective deadline for ranks (BRAID_TIMEOUT)
  bool tee = false;                  // accepted for torchrun command lines; see docs/launch.md
  std::string log_dir;               // per-rank files DIR/rank_N.log when set
  double grace_period_s = 5.0;       // SIGTERM -> SIGKILL delay when stopping ranks
  int max_restarts = 0;              // whole-job restarts after a rank failure (one node only)
  std::string rdzv_id;               // --rdzv-id, passed as TORCHELASTIC_RUN_ID when given
  std::string visible_devices;       // the file's gpu_ids: CUDA_VISIBLE_DEVICES for every rank
  std::vector<std::string> command;  // program and its arguments
};

// Throws kInvalidArgument naming the option, its value and the expected range.
void validate(const LaunchOptions& options);

// What the launcher set up for the whole job, shared by every rank it starts.
struct JobSetup {
  std::string token;          // BRAID_STORE_TOKEN
  std::string master_addr;    // MASTER_ADDR
  int master_port = 0;        // MASTER_PORT (the real port once the store is bound)
  bool store_served = false;  // this launcher serves the store (node 0)
  int restart_count = 0;      // BRAID_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT: 0, 1, ...
};

// The token for this job: a fresh random one (generate_store_token) for a single node; for several
// nodes every node must use the same, so it comes from BRAID_STORE_TOKEN in the launcher's
// environment (throws kInvalidArgument when it is missing, shorter than 12 characters, or holds
// characters other than letters, digits, '-' and '_').
std::string job_token_for(const LaunchOptions& options);

// "braid-<first 12 characters of the token>-": every shared-memory segment of the job starts
// with it (docs/launch.md, "Shared memory").
std::string shm_prefix(std::string_view token);

// Removes the files in `dir` whose names start with shm_prefix(token); returns their names,
// sorted. Missing `dir` is not an error (nothing to remove).
std::vector<std::string> remove_job_shm(std::string_view token,
                                        const std::filesystem::path& dir = "/dev/shm");

class SignalWatch;

// Runs the whole job on this node: serves the store on node 0, starts and supervises the
// ranks, removes the job's shared-memory segments; after a rank failure, while
// options.max_restarts allow, does it all again with a fresh token and store (docs/launch.md,
// "Restarts"). Returns the launcher's exit status (docs/launch.md, "Exit status"). Throws
// kInvalidArgument / kIo before any rank starts.
int run_job(const LaunchOptions& options);
// The same with the caller's SignalWatch (created before anything that may start threads).
int run_job(const LaunchOptions& options, const SignalWatch& signals);

// The variables local rank `local_rank` gets on top of the launcher's environment, sorted by
// name: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// BRAID_STORE_TOKEN, BRAID_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT,
// TORCHELASTIC_MAX_RESTARTS, and when they apply BRAID_STORE_SERVED_BY_LAUNCHER,
// BRAID_TIMEOUT, BRAID_CONFIG_FILE, TORCHELASTIC_RUN_ID.
std::vector<std::pair<std::string, std::string>> rank_environment(const LaunchOptions& options,
                                                                  const JobSetup& job,
                                                                  int local_rank);

// The full "NAME=value" environment for a rank: `base` (usually environ) with every
// variable in `overrides` replaced or added.
std::vector<std::string> merge_environment(
    const std::vector<std::string>& base,
    const std::vector<std::pair<std::string, std::string>>& overrides);

// The path execve needs for `program`: itself when it holds a '/', else the first executable
// match in PATH. Throws kInvalidArgument naming the program when there is none.
std::string resolve_program(const std::string& program);

}  // namespace braid::launch
