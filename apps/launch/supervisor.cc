// The launcher's process supervision (supervisor.h). Note [Why process groups]: each rank
// runs in its own process group, so a terminal's Ctrl-C reaches only the launcher (which
// decides what to forward), and a signal sent to -pgid also reaches whatever the rank
// started itself. When a rank exits, its group is sent SIGKILL, so no stray helper
// process of a rank outlives it (and holds its output pipe open).
#include "launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>

#include "braid/core/error.h"
#include "launch/line_relay.h"

namespace braid::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::string signal_text(int sig) {
  const char* name = ::strsignal(sig);
  return "signal " + std::to_string(sig) + " (" + (name ? name : "unknown") + ")";
}

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

// Writes everything, retrying on EINTR. A closed console (EPIPE; SIGPIPE is blocked) is
// ignored: the launcher must still manage its ranks.
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void say(int fd, const std::string& message) {
  write_all(fd, "braid launch: " + message + "\n");
}

struct Stream {
  int fd = -1;  // read end of the rank's pipe; -1 once closed
  std::unique_ptr<LineRelay> relay;
};

struct RankState {
  const RankProcess* spec = nullptr;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int log_fd = -1;
  Stream out, err;
};

// Everything a forked child needs, prepared before fork: after fork only async-signal-safe
// calls are allowed (the store server may have threads).
struct ExecImage {
  std::vector<char*> argv, envp;
  explicit ExecImage(const RankProcess& p) {
    for (const std::string& a : p.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : p.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
};

void child_write(const char* text) {
  ssize_t ignored = ::write(2, text, std::strlen(text));
  (void)ignored;
}

[[noreturn]] void run_child(const RankProcess& p, const ExecImage& image, int out_w, int err_w,
                            int null_fd, pid_t parent, const sigset_t& mask) {
  ::setpgid(0, 0);
  // The rank dies with the launcher even if the launcher is SIGKILLed (promise: no hangs).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  ::dup2(null_fd, 0);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::execve(p.path.c_str(), image.argv.data(), image.envp.data());
  int e = errno;
  child_write("braid launch: cannot execute '");
  child_write(p.path.c_str());
  child_write("': ");
  const char* desc = ::strerrordesc_np(e);
  child_write(desc ? desc : "unknown error");
  child_write("\n");
  ::_exit(e == ENOENT ? 127 : 126);
}

class Supervisor {
 public:
  Supervisor(const std::vector<RankProcess>& ranks, const SuperviseOptions& options,
             const SignalWatch& signals)
      : options_(options), signals_(signals) {
    for (const RankProcess& p : ranks) {
      auto r = std::make_unique<RankState>();
      r->spec = &p;
      ranks_.push_back(std::move(r));
    }
  }
  ~Supervisor();

  JobOutcome run();

 private:
  void open_log(RankState& r);
  void spawn(RankState& r, int null_fd);
  void make_relays(RankState& r);
  bool read_stream(Stream& s);  // false once the stream is at its end
  void drain(RankState& r);
  void on_signal(int sig);
  void reap();
  void stop_all(int sig);
  void escalate();
  bool any_running() const;
  int poll_timeout_ms() const;

  const SuperviseOptions& options_;
  const SignalWatch& signals_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  std::optional<JobOutcome> failure_;         // the first rank failure, or the signal received
  std::optional<Clock::time_point> kill_at_;  // when SIGTERMed ranks get SIGKILL
  bool killed_ = false;
  bool interrupted_ = false;  // SIGINT / SIGTERM received, whatever failed first
};

Supervisor::~Supervisor() {
  for (auto& r : ranks_) {
    if (r->running) {  // only on an exception: stop what was started
      ::kill(-r->pid, SIGKILL);
      ::waitpid(r->pid, nullptr, 0);
    }
    for (Stream* s : {&r->out, &r->err}) {
      if (s->fd >= 0) ::close(s->fd);
    }
    if (r->log_fd >= 0) ::close(r->log_fd);
  }
}

void Supervisor::open_log(RankState& r) {
  if (options_.log_dir.empty()) return;
  std::filesystem::path path = options_.log_dir / ("rank_" + std::to_string(r.spec->rank) + ".log");
  r.log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BRAID_CHECK(r.log_fd >= 0, kIo, "--log-dir: cannot create '", path.string(),
              "': ", std::strerror(errno));
}

void Supervisor::make_relays(RankState& r) {
  std::string prefix = "[rank " + std::to_string(r.spec->rank) + "] ";
  auto sink = [this, &r, prefix](int console) {
    return [this, &r, prefix, console](std::string_view line) {
      std::string text = prefix;
      text.append(line).push_back('\n');
      write_all(console, text);
      if (r.log_fd >= 0) write_all(r.log_fd, std::string_view(text).substr(prefix.size()));
    };
  };
  r.out.relay = std::make_unique<LineRelay>(sink(options_.out_fd));
  r.err.relay = std::make_unique<LineRelay>(sink(options_.err_fd));
}

void Supervisor::spawn(RankState& r, int null_fd) {
  int out_pipe[2], err_pipe[2];
  BRAID_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0, kIo, "pipe for rank ", r.spec->rank, ": ",
              std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    BRAID_FAIL(kIo, "pipe for rank ", r.spec->rank, ": ", std::strerror(e));
  }
  ExecImage image(*r.spec);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    run_child(*r.spec, image, out_pipe[1], err_pipe[1], null_fd, parent, signals_.previous_mask());
  }
  int fork_errno = errno;
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  r.out.fd = out_pipe[0];
  r.err.fd = err_pipe[0];
  BRAID_CHECK(pid > 0, kIo, "fork for rank ", r.spec->rank, ": ", std::strerror(fork_errno));
  ::setpgid(pid, pid);  // also here, so the group exists before any kill(-pid) below
  ::fcntl(r.out.fd, F_SETFL, O_NONBLOCK);
  ::fcntl(r.err.fd, F_SETFL, O_NONBLOCK);
  r.pid = pid;
  r.running = true;
}

bool Supervisor::read_stream(Stream& s) {
  if (s.fd < 0) return false;
  char buffer[65536];
  ssize_t n = ::read(s.fd, buffer, sizeof(buffer));
  if (n > 0) {
    s.relay->feed(std::string_view(buffer, static_cast<size_t>(n)));
    return true;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
  ::close(s.fd);  // end of stream (or an error: the rank's output is gone either way)
  s.fd = -1;
  s.relay->finish();
  return false;
}

// Reads what the rank has already written, so its last lines print before the launcher's
// report about it. Stops at EAGAIN: a process the rank left behind may hold the pipe open.
void Supervisor::drain(RankState& r) {
  for (Stream* s : {&r.out, &r.err}) {
    while (read_stream(*s)) {
    }
  }
}

void Supervisor::stop_all(int sig) {
  for (auto& r : ranks_) {
    if (r->running) ::kill(-r->pid, sig);
  }
}

void Supervisor::on_signal(int sig) {
  interrupted_ = true;
  if (failure_ && kill_at_) {
    say(options_.err_fd, "received " + signal_text(sig) + " while stopping; sending SIGKILL");
    stop_all(SIGKILL);
    killed_ = true;
    return;
  }
  say(options_.err_fd, "received " + signal_text(sig) +
                           "; forwarding it to the ranks (SIGKILL after " +
                           seconds_text(options_.grace_period_s) + ")");
  failure_ = JobOutcome{128 + sig, "stopped by " + signal_text(sig)};
  stop_all(sig);
  kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(options_.grace_period_s));
}

void Supervisor::reap() {
  std::vector<RankState*> failed_now;
  for (auto& r : ranks_) {
    if (!r->running) continue;
    // Peek first (WNOWAIT keeps the zombie, so its pid cannot be reused as a group id),
    // kill what the rank left in its group, then reap.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(r->pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != r->pid) {
      continue;
    }
    ::kill(-r->pid, SIGKILL);
    int status = 0;
    if (::waitpid(r->pid, &status, 0) != r->pid) continue;
    r->running = false;
    r->status = status;
    drain(*r);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) failed_now.push_back(r.get());
  }
  if (failed_now.empty() || failure_) return;
  // Ranks that ended since the last sweep are reaped in rank order, not in the order they
  // ended. A rank killed by a signal is taken as the cause before one that exited with an
  // error code: the latter is typically a survivor reporting the former as a lost peer.
  auto cause = std::find_if(failed_now.begin(), failed_now.end(),
                            [](const RankState* r) { return WIFSIGNALED(r->status); });
  const RankState& first = cause != failed_now.end() ? **cause : *failed_now.front();
  std::string how = describe_exit(first.spec->rank, first.status);
  failure_ = JobOutcome{exit_code_of(first.status), how};
  if (!any_running()) {
    say(options_.err_fd, how);
    return;
  }
  say(options_.err_fd, how + "; stopping the other ranks (SIGTERM, SIGKILL after " +
                           seconds_text(options_.grace_period_s) + ")");
  stop_all(SIGTERM);
  kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(options_.grace_period_s));
}

void Supervisor::escalate() {
  std::string still;
  for (auto& r : ranks_) {
    if (r->running) still += (still.empty() ? "" : ", ") + std::to_string(r->spec->rank);
  }
  say(options_.err_fd, "rank(s) " + still + " still running " +
                           seconds_text(options_.grace_period_s) +
                           " after SIGTERM; sending SIGKILL");
  stop_all(SIGKILL);
  killed_ = true;
}

bool Supervisor::any_running() const {
  for (const auto& r : ranks_) {
    if (r->running) return true;
  }
  return false;
}

int Supervisor::poll_timeout_ms() const {
  if (!kill_at_ || killed_) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*kill_at_ - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

JobOutcome Supervisor::run() {
  if (!options_.log_dir.empty()) std::filesystem::create_directories(options_.log_dir);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  BRAID_CHECK(null_fd >= 0, kIo, "open /dev/null: ", std::strerror(errno));
  try {
    for (auto& r : ranks_) {
      open_log(*r);
      make_relays(*r);
      spawn(*r, null_fd);
    }
  } catch (...) {
    ::close(null_fd);
    throw;  // the destructor kills and reaps the ranks already started
  }
  ::close(null_fd);

  std::vector<pollfd> fds;
  std::vector<Stream*> streams;
  while (any_running()) {
    fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
    streams.assign(1, nullptr);
    for (auto& r : ranks_) {
      for (Stream* s : {&r->out, &r->err}) {
        if (s->fd < 0) continue;
        fds.push_back(pollfd{s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    BRAID_CHECK(n >= 0 || errno == EINTR, kIo, "poll: ", std::strerror(errno));
    if (kill_at_ && !killed_ && Clock::now() >= *kill_at_) escalate();
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*streams[i]);
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signals_.fd(), &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGCHLD) {
          reap();
        } else if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM) {
          on_signal(static_cast<int>(info.ssi_signo));
        }
      }
    }
  }
  for (auto& r : ranks_) {
    drain(*r);
    r->out.relay->finish();
    r->err.relay->finish();
  }
  JobOutcome outcome = failure_.value_or(JobOutcome{});
  outcome.interrupted = interrupted_;
  if (!outcome.summary.empty()) say(options_.err_fd, "job failed: " + outcome.summary);
  return outcome;
}

}  // namespace

SignalWatch::SignalWatch() {
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap children on its own.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &dfl, nullptr);
  sigemptyset(&watched_);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGPIPE}) sigaddset(&watched_, sig);
  BRAID_CHECK(::sigprocmask(SIG_BLOCK, &watched_, &previous_) == 0, kIo,
              "sigprocmask: ", std::strerror(errno));
  fd_ = ::signalfd(-1, &watched_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd_ < 0) {
    int e = errno;
    ::sigprocmask(SIG_SETMASK, &previous_, nullptr);
    BRAID_FAIL(kIo, "signalfd: ", std::strerror(e));
  }
}

SignalWatch::~SignalWatch() {
  ::close(fd_);
  timespec zero{0, 0};
  while (::sigtimedwait(&watched_, nullptr, &zero) > 0) {
  }
  ::sigprocmask(SIG_SETMASK, &previous_, nullptr);
}

JobOutcome supervise(const std::vector<RankProcess>& ranks, const SuperviseOptions& options,
                     const SignalWatch& signals) {
  Supervisor supervisor(ranks, options, signals);
  return supervisor.run();
}

std::string describe_exit(int rank, int wait_status) {
  std::string who = "rank " + std::to_string(rank);
  if (WIFSIGNALED(wait_status)) return who + " was killed by " + signal_text(WTERMSIG(wait_status));
  return who + " exited with code " + std::to_string(WEXITSTATUS(wait_status));
}

int exit_code_of(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return WEXITSTATUS(wait_status);
}

}  // namespace braid::launch
