// `braid launch` with real processes: the built braid binary starts ranks of
// launch_rank_helper (see its modes). Every run has a generous deadline (kDeadline) after
// which the test kills the launcher and fails, so "the other ranks were stopped" shows as
// "the launcher returned at all": the ranks it had to stop sleep for 300 s.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
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

namespace {

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

TEST(Launch, EachRankSeesItsVariables) {
  Launch run({"--nproc-per-node", "3", "--timeout", "7.5", "--config-file", "/tmp/job.yaml",
              kHelper, "env"});
  ASSERT_EQ(run.finish(), 0) << run.out << run.err;
  std::set<std::string> tokens, ports;
  for (int r = 0; r < 3; ++r) {
    std::string rs = std::to_string(r);
    std::regex env_line("\\[rank " + rs + "\\] env RANK=" + rs + " LOCAL_RANK=" + rs +
                        " WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127\\.0\\.0\\.1 "
                        "MASTER_PORT=([0-9]+) BRAID_STORE_TOKEN=([0-9a-f]{32}) "
                        "BRAID_STORE_SERVED_BY_LAUNCHER=1 BRAID_TIMEOUT=7\\.5 "
                        "BRAID_CONFIG_FILE=/tmp/job\\.yaml\n");
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

}  // namespace
