// Runs a job's local ranks as child processes and watches them until all have exited:
// output relayed line by line with a "[rank N] " prefix (and to per-rank log files), SIGINT /
// SIGTERM forwarded, and the whole job stopped when one rank fails (SIGTERM, then SIGKILL
// after the grace period). One thread, one poll() over a signalfd and the ranks' pipes:
// nothing spins. Failure handling and exit codes are described in docs/launch.md.
#pragma once

#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

namespace braid::launch {

// Blocks SIGCHLD, SIGINT, SIGTERM and SIGPIPE for the process and reads them through a
// signalfd. Create it before any thread starts (a thread created later inherits the mask, so
// no thread can take these signals with their default, process-killing action). The
// destructor discards what is pending and restores the previous mask.
class SignalWatch {
 public:
  SignalWatch();
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  int fd() const { return fd_; }
  // The mask to give children back before exec.
  const sigset_t& previous_mask() const { return previous_; }

 private:
  int fd_ = -1;
  sigset_t watched_;
  sigset_t previous_;
};

struct RankProcess {
  int rank = 0;                   // global rank, for prefixes and messages
  std::string path;               // program to execute (resolve_program)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the complete NAME=value environment
};

struct SuperviseOptions {
  double grace_period_s = 5.0;
  std::filesystem::path log_dir;  // empty: no per-rank files
  int out_fd = 1;                 // where ranks' stdout lines go (prefixed)
  int err_fd = 2;                 // where ranks' stderr lines and launcher messages go
};

struct JobOutcome {
  int exit_code = 0;    // 0, the first failing rank's code (128+signal), or 128+signal received
  std::string summary;  // "" on success, else e.g. "rank 2 exited with code 3"
  bool interrupted = false;  // the launcher received SIGINT / SIGTERM: never restarted
};

// Starts every rank and returns once all have exited. Throws kIo when a rank cannot be
// started (after stopping those already started) or a log file cannot be created.
JobOutcome supervise(const std::vector<RankProcess>& ranks, const SuperviseOptions& options,
                     const SignalWatch& signals);

// "rank 2 exited with code 3", "rank 1 was killed by signal 9 (Killed)".
std::string describe_exit(int rank, int wait_status);
// The exit status a shell would report: the code, or 128 + the signal.
int exit_code_of(int wait_status);

}  // namespace braid::launch
