// `braid launch` with real processes: the built braid binary starts ranks of
// launch_rank_helper (see its modes). Every run has a generous deadline (kDeadline) after
// which the test kills the launcher and fails, so "the other ranks were stopped" shows as
// "the launcher returned at all": the ranks it had to stop sleep for 300 s.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "braid/core/environment.h"
#include "launch/launch_config.h"

namespace {

using braid::PatchEnvironment;
namespace launch = braid::launch;

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

constexpr auto kDeadline = std::chrono::seconds(60);
const std::string kHelper = BRAID_LAUNCH_HELPER;

// One `braid launch ...` run with its stdout and stderr captured separately.
class Launch {
 public:
  explicit Launch(std::vector<std::string> args) : deadline_(Clock::now() + kDeadline) {
    args.insert(args.begin(), {BRAID_CLI, "launch"});
    int out[2], err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
  }
  ~Launch() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }

  // Reads output until stdout holds `needle` `count` times; false at end of output or the
  // deadline.
  bool wait_for(const std::string& needle, int count) {
    while (occurrences(out, needle) < count) {
      if (!read_some()) return false;
    }
    return true;
  }

  void send(int sig) { ::kill(pid_, sig); }

  // Reads everything and returns the exit status (128 + signal when killed); -1 when the
  // launcher did not finish before the deadline (it is then killed).
  int finish() {
    while (read_some()) {
    }
    if (Clock::now() >= deadline_) return -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string out, err;

 private:
  static int occurrences(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
      ++n;
    return n;
  }

  // One poll and the reads it allows; false once both streams ended or the deadline passed.
  bool read_some() {
    std::vector<pollfd> p;
    for (int fd : fds_) {
      if (fd >= 0) p.push_back({fd, POLLIN, 0});
    }
    if (p.empty()) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    if (left.count() <= 0) return false;
    if (::poll(p.data(), p.size(), static_cast<int>(left.count())) <= 0) return false;
    for (const pollfd& q : p) {
      if (q.revents == 0) continue;
      int i = q.fd == fds_[0] ? 0 : 1;
      char buf[4096];
      ssize_t n = ::read(q.fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? out : err).append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds_[i]);
        fds_[i] = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  Clock::time_point deadline_;
};

// A fresh folder for one test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("braid_launch_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string fifo() const {
    std::string f = (path_ / "ready.fifo").string();
    EXPECT_EQ(::mkfifo(f.c_str(), 0600), 0);
    return f;
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes `text` to `p` and returns the path as text.
std::string write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p.string();
}

std::string regex_escape(const std::string& text) {
  return std::regex_replace(text, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

TEST(Launch, EachRankSeesItsVariables) {
  TempDir dir;
  std::string config = write_file(dir.path() / "job.yaml", "mixed_precision: bf16\n");
  Launch run(
      {"--nproc-per-node", "3", "--timeout", "7.5", "--config-file", config, kHelper, "env"});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  std::set<std::string> tokens, ports;
  for (int r = 0; r < 3; ++r) {
    std::string rs = std::to_string(r);
    std::regex env_line("\\[rank " + rs + "\\] env RANK=" + rs + " LOCAL_RANK=" + rs +
                        " WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127\\.0\\.0\\.1 "
                        "MASTER_PORT=([0-9]+) BRAID_STORE_TOKEN=([0-9a-f]{32}) "
                        "BRAID_STORE_SERVED_BY_LAUNCHER=1 BRAID_TIMEOUT=7\\.5 "
                        "BRAID_CONFIG_FILE=" +
                        regex_escape(config) + "\n");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(run.out, m, env_line)) << "rank " << r << ":\n" << run.out;
    ports.insert(m[1]);
    tokens.insert(m[2]);
    EXPECT_NE(m[1], "0");
    EXPECT_THAT(run.out, HasSubstr("[rank " + rs + "] info rank=" + rs + " world=3 local=" + rs +
                                   " local_world=3 group=0 port=" + std::string(m[1]) +
                                   " source=braid launch\n"));
    EXPECT_THAT(run.err, HasSubstr("[rank " + rs + "] stderr of rank " + rs + "\n"));
    // The last line had no newline: it is flushed whole when the rank exits.
    EXPECT_THAT(run.out, HasSubstr("[rank " + rs + "] partial line of rank " + rs + "\n"));
  }
  EXPECT_EQ(tokens.size(), 1u);
  EXPECT_EQ(ports.size(), 1u);
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(std::regex_match(line, std::regex("\\[rank [0-2]\\] (env|info|partial) .*")))
        << line;
  }
}

TEST(Launch, TorchrunSpellingsAndProgramArguments) {
  Launch run({"--nproc_per_node", "2", "--nnodes", "1", "--node_rank", "0", "--master_addr",
              "127.0.0.1", "--master_port", "0", "/bin/sh", "-c",
              "echo \"world=$WORLD_SIZE arg=$1\"", "sh", "--nproc-per-node"});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[rank 0] world=2 arg=--nproc-per-node\n"));
  EXPECT_THAT(run.out, HasSubstr("[rank 1] world=2 arg=--nproc-per-node\n"));
}

TEST(Launch, LogDirHoldsOneFilePerRank) {
  TempDir dir;
  std::filesystem::path logs = dir.path() / "logs";
  Launch run({"--nproc-per-node", "2", "--log-dir", logs.string(), kHelper, "env"});
  ASSERT_EQ(run.finish(), 0) << run.err;
  for (int r = 0; r < 2; ++r) {
    std::string text = read_file(logs / ("rank_" + std::to_string(r) + ".log"));
    EXPECT_THAT(text, HasSubstr("env RANK=" + std::to_string(r) + " "));
    EXPECT_THAT(text, HasSubstr("stderr of rank " + std::to_string(r) + "\n"));
    EXPECT_THAT(text, Not(HasSubstr("[rank ")));
    EXPECT_THAT(text, Not(HasSubstr("env RANK=" + std::to_string(1 - r) + " ")));
  }
}

TEST(Launch, FailingRankStopsTheJobWithItsCode) {
  TempDir dir;
  Launch run({"--nproc-per-node", "3", "--grace-period", "2", kHelper, "fail", "1", "exit:3",
              "sleep", dir.fifo()});
  EXPECT_EQ(run.finish(), 3) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("rank 1 exited with code 3"));
  EXPECT_THAT(run.out, HasSubstr("[rank 1] failing now"));
  EXPECT_THAT(run.out, Not(HasSubstr("slept to the end")));
}

TEST(Launch, RankKilledBySignalGives128PlusSignal) {
  TempDir dir;
  Launch run({"--nproc-per-node", "3", "--grace-period", "2", kHelper, "fail", "2", "kill:9",
              "sleep", dir.fifo()});
  EXPECT_EQ(run.finish(), 137) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("rank 2 was killed by signal 9 (Killed)"));
}

TEST(Launch, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  Launch run({"--nproc-per-node", "2", "--grace-period", "0.5", kHelper, "fail", "0", "exit:5",
              "ignore-term", dir.fifo()});
  EXPECT_EQ(run.finish(), 5) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("rank 0 exited with code 5"));
  EXPECT_THAT(run.err, HasSubstr("rank(s) 1 still running 0.5 s after SIGTERM; sending SIGKILL"));
  EXPECT_THAT(run.out, Not(HasSubstr("slept to the end")));
}

TEST(Launch, SigtermToTheLauncherIsForwarded) {
  Launch run({"--nproc-per-node", "2", "--grace-period", "5", kHelper, "wait-term"});
  ASSERT_TRUE(run.wait_for("] ready\n", 2)) << run.out << run.err;
  run.send(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[rank 0] got SIGTERM\n"));
  EXPECT_THAT(run.out, HasSubstr("[rank 1] got SIGTERM\n"));
  EXPECT_THAT(run.err, HasSubstr("received signal 15 (Terminated)"));
}

TEST(Launch, RanksReachTheLaunchersStoreWithTheToken) {
  Launch run({"--nproc-per-node", "3", kHelper, "store"});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  for (int r = 0; r < 3; ++r) {
    std::string p = "[rank " + std::to_string(r) + "] ";
    EXPECT_THAT(run.out, HasSubstr(p + "store ok: saw 3 ranks\n"));
    EXPECT_THAT(run.out, HasSubstr(p + "wrong token refused: invalid argument\n"));
  }
}

TEST(Launch, JobSharedMemoryIsRemovedAndOthersKept) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  std::filesystem::path other =
      "/dev/shm/braid-zzzzzzzzzzzz-launch-test-" + std::to_string(::getpid());
  std::ofstream(other) << "not this job's";
  Launch run({"--nproc-per-node", "2", kHelper, "shm"});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  std::smatch m;
  std::string rest = run.out;
  int created = 0;
  while (
      std::regex_search(rest, m, std::regex("created (/dev/shm/braid-[0-9a-f]{12}-helper-[01])"))) {
    EXPECT_FALSE(std::filesystem::exists(std::string(m[1]))) << m[1];
    ++created;
    rest = m.suffix();
  }
  EXPECT_EQ(created, 2) << run.out;
  EXPECT_THAT(run.err, HasSubstr("removed 2 leftover shared-memory segment(s)"));
  EXPECT_TRUE(std::filesystem::exists(other));
  std::filesystem::remove(other);
}

TEST(Launch, BadInvocationsAreRefusedBeforeStarting) {
  {
    Launch run({"--nproc-per-node", "2"});
    EXPECT_EQ(run.finish(), 1);
    EXPECT_THAT(run.err, HasSubstr("no program"));
  }
  {
    Launch run({"--nproc-per-node", "0", kHelper, "env"});
    EXPECT_EQ(run.finish(), 1);
    EXPECT_THAT(run.err, HasSubstr("--nproc-per-node 0"));
  }
  {
    Launch run({"braid-no-such-program"});
    EXPECT_EQ(run.finish(), 1);
    EXPECT_THAT(run.err, HasSubstr("'braid-no-such-program' was not found"));
  }
  {
    Launch run({"--frobnicate", kHelper});
    EXPECT_EQ(run.finish(), 2);
    EXPECT_THAT(run.err, HasSubstr("--frobnicate"));
  }
}

// ---- the configuration file (docs/launch.md, "Configuration file") ----------------------

// A program that would leave a marker file behind: it must never start on a bad file.
std::vector<std::string> marker_program(const std::filesystem::path& marker) {
  return {"/bin/sh", "-c", "touch '" + marker.string() + "'; echo started"};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

const std::vector<std::string> kPrintWorld = {"/bin/sh", "-c",
                                              "echo \"world=$WORLD_SIZE local=$LOCAL_WORLD_SIZE\""};

TEST(LaunchConfigFile, NumProcessesSetsTheRanks) {
  TempDir dir;
  // The program's own key (max_steps) shares the file.
  std::string config = write_file(dir.path() / "cfg.yaml",
                                  "num_processes: 2\nmixed_precision: bf16\nmax_steps: 9\n");
  Launch run(with({"--config-file", config}, kPrintWorld));
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[rank 0] world=2 local=2\n"));
  EXPECT_THAT(run.out, HasSubstr("[rank 1] world=2 local=2\n"));
  EXPECT_EQ(count_of(run.out, "world="), 2) << run.out;
  EXPECT_THAT(run.err, Not(HasSubstr("overrides")));
}

TEST(LaunchConfigFile, UnderscoreSpellingIsAccepted) {
  TempDir dir;
  std::string config = write_file(dir.path() / "cfg.yaml", "num_processes: 3\n");
  Launch run(with({"--config_file", config}, kPrintWorld));
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_EQ(count_of(run.out, "] world=3 local=3\n"), 3) << run.out;
}

TEST(LaunchConfigFile, FlagOverridesTheFileWithOneWarning) {
  TempDir dir;
  std::string config = write_file(dir.path() / "cfg.yaml", "num_processes: 2\n");
  Launch run(with({"--nproc-per-node", "3", "--config-file", config}, kPrintWorld));
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_EQ(count_of(run.out, "] world=3 local=3\n"), 3) << run.out;
  EXPECT_EQ(count_of(run.err, "braid launch: --nproc-per-node 3 overrides num_processes: 2 from " +
                                  config + "\n"),
            1)
      << run.err;
  EXPECT_EQ(count_of(run.err, "overrides"), 1) << run.err;
}

TEST(LaunchConfigFile, MachineKeysSetTheNodeShape) {
  TempDir dir;
  std::string config = write_file(dir.path() / "cfg.yaml",
                                  "num_processes: 4\nnum_machines: 2\nmachine_rank: 1\n"
                                  "main_process_ip: 127.0.0.1\nmain_process_port: 29517\n");
  PatchEnvironment token{{"BRAID_STORE_TOKEN", "shared-token-0123"}};
  Launch run({"--config-file", config, "/bin/sh", "-c",
              "echo \"rank=$RANK world=$WORLD_SIZE local=$LOCAL_WORLD_SIZE group=$GROUP_RANK "
              "addr=$MASTER_ADDR port=$MASTER_PORT\""});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[rank 2] rank=2 world=4 local=2 group=1 addr=127.0.0.1 "
                                 "port=29517\n"));
  EXPECT_THAT(run.out, HasSubstr("[rank 3] rank=3 world=4 local=2 group=1 addr=127.0.0.1 "
                                 "port=29517\n"));
}

// gpu_ids (other than "all") become every rank's CUDA_VISIBLE_DEVICES, as accelerate launch
// exports them; "all" leaves the variable alone.
TEST(LaunchConfigFile, GpuIdsSetTheVisibleDevices) {
  TempDir dir;
  PatchEnvironment unset(braid::EnvPatch{{"CUDA_VISIBLE_DEVICES", std::nullopt}});
  for (const char* ids : {"1,3", "all"}) {
    std::string config = write_file(dir.path() / "cfg.yaml",
                                    std::string("num_processes: 2\n") + "gpu_ids: '" + ids + "'\n");
    Launch run({"--config-file", config, "/bin/sh", "-c",
                "echo \"devices=${CUDA_VISIBLE_DEVICES:-unset}\""});
    ASSERT_EQ(run.finish(), 0) << run.out << run.err;
    const std::string want = std::string(ids) == "all" ? "unset" : ids;
    EXPECT_THAT(run.out, HasSubstr("[rank 1] devices=" + want + "\n")) << ids;
  }
}

TEST(LaunchConfigFile, MissingFileIsAnErrorBeforeAnyRankStarts) {
  TempDir dir;
  std::filesystem::path marker = dir.path() / "started";
  std::string missing = (dir.path() / "no-such.yaml").string();
  for (const char* spelling : {"--config-file", "--config_file"}) {
    Launch run(with({"--nproc-per-node", "2", spelling, missing}, marker_program(marker)));
    EXPECT_EQ(run.finish(), 1) << run.out << run.err;
    EXPECT_THAT(run.err, HasSubstr("--config-file '" + missing + "': no such file"));
    EXPECT_FALSE(std::filesystem::exists(marker));
    EXPECT_THAT(run.out, Not(HasSubstr("started")));
  }
}

TEST(LaunchConfigFile, InvalidFilesAreErrorsBeforeAnyRankStarts) {
  TempDir dir;
  std::filesystem::path marker = dir.path() / "started";
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case& c : {Case{"num_processes: [2, 3\n", "--config-file"},
                        Case{"num_processes: two\n", "num_processes"},
                        Case{"fsdp_config:\n  fsdp_no_such_key: 1\n", "fsdp_no_such_key"},
                        Case{"num_processes: 3\nnum_machines: 2\n", "does not divide"}}) {
    std::string config = write_file(dir.path() / "bad.yaml", c.text);
    Launch run(with({"--config-file", config}, marker_program(marker)));
    EXPECT_EQ(run.finish(), 1) << c.text << run.out << run.err;
    EXPECT_THAT(run.err, HasSubstr(config)) << c.text;
    EXPECT_THAT(run.err, HasSubstr(c.expected)) << c.text;
    EXPECT_FALSE(std::filesystem::exists(marker)) << c.text;
  }
}

// ---- torchrun's options -------------------------------------------------------------------

TEST(LaunchTorchrunOptions, StandaloneServesTheStoreOnLoopback) {
  Launch run({"--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
              "echo \"addr=$MASTER_ADDR port=$MASTER_PORT\" && exec \"$0\" store", kHelper});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[rank 0] addr=127.0.0.1 port="));
  EXPECT_THAT(run.out, Not(HasSubstr("port=0\n")));
  EXPECT_THAT(run.out, HasSubstr("[rank 1] store ok: saw 2 ranks\n"));
}

TEST(LaunchTorchrunOptions, StandaloneOverridesTheFilesMachineKeys) {
  TempDir dir;
  std::string config =
      write_file(dir.path() / "cfg.yaml", "num_processes: 2\nmain_process_port: 29517\n");
  Launch run(with({"--standalone", "--config-file", config}, kPrintWorld));
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_EQ(count_of(run.out, "] world=2 local=2\n"), 2) << run.out;
  EXPECT_THAT(run.err, HasSubstr("braid launch: --standalone overrides main_process_port: 29517 "
                                 "from " +
                                 config + "\n"));
}

TEST(LaunchTorchrunOptions, StandaloneConflictsAreErrors) {
  TempDir dir;
  std::filesystem::path marker = dir.path() / "started";
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--standalone", "--nnodes", "2"},
        std::vector<std::string>{"--standalone", "--master-addr", "10.0.0.1"},
        std::vector<std::string>{"--standalone", "--rdzv-endpoint", "127.0.0.1:29517"}}) {
    Launch run(with(args, marker_program(marker)));
    EXPECT_EQ(run.finish(), 1) << args[1] << run.err;
    EXPECT_THAT(run.err, HasSubstr("--standalone with " + args[1]));
    EXPECT_FALSE(std::filesystem::exists(marker));
  }
}

int expected_auto_ranks() {
  launch::MachineCounts counts = launch::machine_counts();
  if (counts.gpus > 0) return counts.gpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

TEST(LaunchTorchrunOptions, NprocPerNodeAutoCountsThisMachine) {
  const int n = expected_auto_ranks();  // the CPU count here, without a GPU
  ASSERT_GE(n, 1);
  Launch run(with({"--nproc-per-node", "auto"}, kPrintWorld));
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  std::string line = "] world=" + std::to_string(n) + " local=" + std::to_string(n) + "\n";
  EXPECT_EQ(count_of(run.out, line), n) << run.out;
  EXPECT_EQ(count_of(run.out, "world="), n) << run.out;
}

TEST(LaunchTorchrunOptions, NprocPerNodeRejectsOtherWords) {
  Launch run(with({"--nproc-per-node", "many"}, kPrintWorld));
  EXPECT_EQ(run.finish(), 1) << run.out;
  EXPECT_THAT(run.err, HasSubstr("--nproc-per-node 'many': expected a count, 'auto'"));
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(LaunchTorchrunOptions, RdzvEndpointSetsTheStoreAddress) {
  for (const char* spelling : {"--rdzv-endpoint", "--rdzv_endpoint"}) {
    std::string port = std::to_string(free_port());
    Launch run({"--nproc-per-node", "2", spelling, "127.0.0.1:" + port, "--rdzv-backend", "c10d",
                "--rdzv-id", "job7", "/bin/sh", "-c",
                "echo \"addr=$MASTER_ADDR port=$MASTER_PORT id=$TORCHELASTIC_RUN_ID\" && "
                "exec \"$0\" store",
                kHelper});
    ASSERT_EQ(run.finish(), 0) << run.out << run.err;
    EXPECT_THAT(run.out, HasSubstr("[rank 1] addr=127.0.0.1 port=" + port + " id=job7\n"));
    EXPECT_THAT(run.out, HasSubstr("[rank 0] store ok: saw 2 ranks\n"));
  }
}

TEST(LaunchTorchrunOptions, RdzvMisuseIsAnError) {
  {
    Launch run(with({"--rdzv-backend", "etcd"}, kPrintWorld));
    EXPECT_EQ(run.finish(), 1);
    EXPECT_THAT(run.err, HasSubstr("--rdzv-backend 'etcd'"));
  }
  {
    Launch run(with({"--rdzv-endpoint", "127.0.0.1:29517", "--master-port", "29518"}, kPrintWorld));
    EXPECT_EQ(run.finish(), 1);
    EXPECT_THAT(run.err, HasSubstr("disagrees with --master-port 29518"));
  }
}

// ---- restarts (docs/launch.md, "Restarts") -----------------------------------------------

int attempts_recorded(const std::filesystem::path& dir) {
  return count_of(read_file(dir / "attempts"), "attempt ");
}

TEST(LaunchRestarts, RestartedJobResumesFromItsCheckpoint) {
  TempDir dir;
  Launch run({"--nproc-per-node", "2", "--max-restarts", "1", "--grace-period", "2", kHelper,
              "resume", dir.path().string(), "1"});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[rank 1] checkpoint at step 3, SIGKILL myself\n"));
  EXPECT_THAT(run.err, HasSubstr("braid launch: restarting the job (attempt 1 of 1) after rank 1 "
                                 "was killed by signal 9 (Killed)\n"));
  EXPECT_THAT(run.out, HasSubstr("[rank 1] attempt 1 starts at step 3\n"));
  EXPECT_THAT(run.out, HasSubstr("[rank 0] finished after resuming from step 3\n"));
  EXPECT_THAT(run.out, HasSubstr("[rank 1] finished after resuming from step 3\n"));
  EXPECT_EQ(attempts_recorded(dir.path()), 2);
}

TEST(LaunchRestarts, RestartedStoreRebindsAFixedPort) {
  TempDir dir;
  std::string port = std::to_string(free_port());
  Launch run({"--nproc-per-node", "2", "--master-port", port, "--max-restarts", "1",
              "--grace-period", "2", kHelper, "resume", dir.path().string(), "1"});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("restarting the job (attempt 1 of 1)"));
  EXPECT_THAT(run.out, HasSubstr("[rank 0] finished after resuming from step 3\n"));
}

TEST(LaunchRestarts, WithoutRestartsTheJobFails) {
  TempDir dir;
  Launch run({"--nproc_per_node", "2", "--max_restarts", "0", "--grace-period", "2", kHelper,
              "resume", dir.path().string(), "1"});
  EXPECT_EQ(run.finish(), 137) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("rank 1 was killed by signal 9 (Killed)"));
  EXPECT_THAT(run.err, Not(HasSubstr("restarting")));
  EXPECT_THAT(run.out, Not(HasSubstr("finished")));
  EXPECT_EQ(attempts_recorded(dir.path()), 1);
}

TEST(LaunchRestarts, ExhaustedRestartsGiveTheFailingStatus) {
  TempDir dir;
  Launch run({"--nproc-per-node", "2", "--max-restarts", "2", "--grace-period", "2", kHelper,
              "resume", dir.path().string(), "3"});
  EXPECT_EQ(run.finish(), 137) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("restarting the job (attempt 1 of 2)"));
  EXPECT_THAT(run.err, HasSubstr("restarting the job (attempt 2 of 2)"));
  EXPECT_EQ(count_of(run.err, "restarting the job"), 2) << run.err;
  EXPECT_THAT(run.out, Not(HasSubstr("finished")));
  EXPECT_EQ(attempts_recorded(dir.path()), 3);
}

TEST(LaunchRestarts, RankKilledInsideAnAllReduceIsRestarted) {
  TempDir dir;
  Launch run({"--nproc-per-node", "2", "--max-restarts", "1", "--grace-period", "2", "--timeout",
              "30", kHelper, "allreduce-resume", dir.path().string()});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[rank 1] SIGKILL myself inside all_reduce #6\n"));
  EXPECT_THAT(run.err, HasSubstr("restarting the job (attempt 1 of 1) after rank 1 was killed by "
                                 "signal 9"));
  // Resumed where rank 0's checkpoint said: not from the beginning.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.out, m,
                                std::regex(R"(\[rank 1\] attempt 1 starts at step ([0-9]+)\n)")))
      << run.out;
  EXPECT_GE(std::stoi(m[1]), 6);
  for (const char* r : {"0", "1"}) {
    EXPECT_THAT(run.out, HasSubstr(std::string("[rank ") + r +
                                   "] finished 12 all_reduces after "
                                   "resuming from step " +
                                   std::string(m[1]) + "\n"));
  }
}

TEST(LaunchRestarts, StoppedLauncherDoesNotRestart) {
  Launch run({"--nproc-per-node", "2", "--max-restarts", "3", "--grace-period", "5", kHelper,
              "wait-term"});
  ASSERT_TRUE(run.wait_for("] ready\n", 2)) << run.out << run.err;
  run.send(SIGTERM);
  EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.out << run.err;
  EXPECT_THAT(run.err, Not(HasSubstr("restarting")));
  EXPECT_EQ(count_of(run.out, "] ready\n"), 2);
}

TEST(LaunchRestarts, RestartsNeedOneNode) {
  PatchEnvironment token{{"BRAID_STORE_TOKEN", "shared-token-0123"}};
  Launch run(with({"--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", "29517",
                   "--max-restarts", "1"},
                  kPrintWorld));
  EXPECT_EQ(run.finish(), 1);
  EXPECT_THAT(run.err, HasSubstr("--max-restarts 1 with --nnodes 2"));
}

}  // namespace
