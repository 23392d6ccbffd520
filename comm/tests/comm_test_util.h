// Test harness for comm/: runs one function on N ranks, as threads of this process sharing an
// InMemoryStore (fast, sanitizer-friendly), or as forked processes sharing a FileStore or a
// TcpStore (the real deployment shape: separate address spaces). Failures of every rank are
// collected; the whole run has a deadline, after which the stuck ranks are named.
//
//   auto result = braid::testing::run_threads(4, [](int rank, int size, auto store) {
//     auto pg = braid::testing::make_group(rank, size, store);
//     ...  // throw, or EXPECT_* / ASSERT_* (threads: recorded directly by GoogleTest)
//   });
//   EXPECT_TRUE(result.ok()) << result.summary();
//
// In forked ranks a GoogleTest failure inside `fn` is reported back as that rank's failure.
// A thread run that misses its deadline cannot be cancelled safely, so it prints the stuck
// ranks and aborts the test process (ctest runs each test in its own process).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "braid/comm/process_group.h"
#include "braid/comm/store.h"
#include "braid/comm/tcp_store.h"
#include "braid/core/error.h"

namespace braid::testing {

using RankFn = std::function<void(int rank, int size, std::shared_ptr<Store> store)>;

struct RankFailure {
  int rank = 0;
  std::string message;
};

struct RunResult {
  std::vector<RankFailure> failures;
  bool ok() const { return failures.empty(); }
  // One line per failing rank, for `EXPECT_TRUE(r.ok()) << r.summary()`.
  std::string summary() const {
    std::ostringstream out;
    for (const auto& f : failures) out << "\n  rank " << f.rank << ": " << f.message;
    return out.str();
  }
  // The failure of `rank`, or "" when it succeeded.
  std::string message_of(int rank) const {
    for (const auto& f : failures) {
      if (f.rank == rank) return f.message;
    }
    return "";
  }
};

inline constexpr std::chrono::milliseconds kDefaultRunDeadline{120000};

// What an exception says, with the braid error kind when there is one ("[timeout] ...").
inline std::string describe_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return "[" + std::string(to_string(err.kind())) + "] " + err.message();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown exception";
  }
}

// ---- threads ----

inline RunResult run_threads(int size, const RankFn& fn,
                             std::chrono::milliseconds deadline = kDefaultRunDeadline) {
  auto store = std::make_shared<InMemoryStore>(deadline);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<bool> done(size, false);
  RunResult result;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::string failure;
      try {
        fn(r, size, store);
      } catch (...) {
        failure = describe_exception(std::current_exception());
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty()) result.failures.push_back({r, failure});
      done[r] = true;
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, deadline, [&] { return finished == size; })) {
      std::fprintf(stderr, "run_threads: deadline of %lld ms passed; ranks still running:",
                   static_cast<long long>(deadline.count()));
      for (int r = 0; r < size; ++r) {
        if (!done[r]) std::fprintf(stderr, " %d", r);
      }
      std::fprintf(stderr, "\n");
      std::fflush(stderr);
      std::abort();  // a thread cannot be cancelled safely; fail this test process loudly
    }
  }
  for (auto& t : threads) t.join();
  std::sort(result.failures.begin(), result.failures.end(),
            [](const RankFailure& a, const RankFailure& b) { return a.rank < b.rank; });
  return result;
}

// ---- forked processes ----

enum class StoreKind { kFile, kTcp };

namespace detail {

inline void write_all(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// In the child: runs the rank, reports through `fd`, never returns.
[[noreturn]] inline void run_child(int rank, int size, const RankFn& fn,
                                   const std::function<std::shared_ptr<Store>()>& make_store,
                                   int fd) {
  std::string failure;
  const bool had_failure = ::testing::Test::HasFailure();
  try {
    fn(rank, size, make_store());
    if (::testing::Test::HasFailure() && !had_failure) {
      failure = "a GoogleTest expectation failed in this rank (see the output above)";
    }
  } catch (...) {
    failure = describe_exception(std::current_exception());
  }
  write_all(fd, failure);
  ::close(fd);
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(failure.empty() ? 0 : 1);
}

}  // namespace detail

// Serves a TcpStoreServer from a forked child, so the parent stays single-threaded: forking
// the ranks from a process whose server thread might hold a lock (malloc's, the sanitizer
// allocator's) can leave a rank deadlocked in its first allocation. Returns the server's pid
// and port; the server dies with the parent (PR_SET_PDEATHSIG) or when killed.
inline std::pair<pid_t, uint16_t> fork_tcp_store_server(const std::string& token) {
  int p[2];
  if (::pipe(p) != 0) BRAID_FAIL(kIo, "run_processes: pipe() failed");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) BRAID_FAIL(kIo, "run_processes: fork() failed for the store server");
  if (pid == 0) {
    ::close(p[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    TcpStoreServer server("127.0.0.1", 0, token);
    const uint16_t port = server.port();
    detail::write_all(p[1], std::string(reinterpret_cast<const char*>(&port), sizeof(port)));
    ::close(p[1]);
    while (true) ::pause();  // serve until killed
  }
  ::close(p[1]);
  uint16_t port = 0;
  const ssize_t n = ::read(p[0], &port, sizeof(port));
  ::close(p[0]);
  if (n != static_cast<ssize_t>(sizeof(port))) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    BRAID_FAIL(kIo, "run_processes: the store server process did not report its port");
  }
  return {pid, port};
}

// Forks `size` processes. kFile: a FileStore on a fresh temporary file; kTcp: a TcpStoreServer
// in a forked server process on a free loopback port, each rank a TcpStore client. Ranks still
// running at the deadline are killed (SIGKILL) and reported.
inline RunResult run_processes(int size, const RankFn& fn, StoreKind kind = StoreKind::kFile,
                               std::chrono::milliseconds deadline = kDefaultRunDeadline) {
  pid_t server_pid = -1;
  std::string path;
  std::function<std::shared_ptr<Store>()> make_store;
  if (kind == StoreKind::kTcp) {
    const std::string token = generate_store_token();
    const auto [pid, port] = fork_tcp_store_server(token);
    server_pid = pid;
    make_store = [port, token, deadline] {
      return std::make_shared<TcpStore>("127.0.0.1", port, token, deadline);
    };
  } else {
    path = (std::filesystem::temp_directory_path() /
            ("braid_comm_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())))
               .string();
    make_store = [path, deadline] { return std::make_shared<FileStore>(path, deadline); };
  }

  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(size, -1);
  std::vector<int> fds(size, -1);
  std::vector<std::string> messages(size);
  for (int r = 0; r < size; ++r) {
    int p[2];
    if (::pipe(p) != 0) BRAID_FAIL(kIo, "run_processes: pipe() failed");
    pid_t pid = ::fork();
    if (pid < 0) BRAID_FAIL(kIo, "run_processes: fork() failed for rank ", r);
    if (pid == 0) {
      ::close(p[0]);
      for (int q = 0; q < r; ++q) ::close(fds[q]);
      detail::run_child(r, size, fn, make_store, p[1]);
    }
    ::close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }

  // Read every child's report until its pipe closes (it exited), sleeping in poll().
  const auto end = std::chrono::steady_clock::now() + deadline;
  std::vector<bool> open(size, true);
  int remaining = size;
  while (remaining > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> pfds;
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) {
      if (open[r]) {
        pfds.push_back({fds[r], POLLIN, 0});
        ranks.push_back(r);
      }
    }
    if (::poll(pfds.data(), pfds.size(), static_cast<int>(left.count())) < 0) continue;
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      char buf[4096];
      ssize_t n = ::read(pfds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        messages[ranks[i]].append(buf, static_cast<size_t>(n));
      } else {
        open[ranks[i]] = false;
        --remaining;
      }
    }
  }

  RunResult result;
  for (int r = 0; r < size; ++r) {
    if (open[r]) {
      ::kill(pids[r], SIGKILL);
      result.failures.push_back({r, "did not finish within the deadline of " +
                                        std::to_string(deadline.count()) + " ms (killed)"});
    }
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    ::close(fds[r]);
    if (open[r]) continue;
    if (!messages[r].empty()) {
      result.failures.push_back({r, messages[r]});
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      result.failures.push_back(
          {r, WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                  : "exited with status " + std::to_string(WEXITSTATUS(status))});
    }
  }
  if (!path.empty()) std::filesystem::remove(path);
  if (server_pid > 0) {
    ::kill(server_pid, SIGKILL);
    ::waitpid(server_pid, nullptr, 0);
  }
  return result;
}

// ---- groups ----

// The world group of `size` ranks on `store` (backend "shm" unless told otherwise).
inline std::shared_ptr<ProcessGroup> make_group(
    int rank, int size, std::shared_ptr<Store> store, const std::string& backend = "shm",
    std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
  ProcessGroupOptions options;
  options.backend = backend;
  options.store = std::move(store);
  options.rank = rank;
  options.size = size;
  options.timeout = timeout;
  return ProcessGroup::create(options);
}

}  // namespace braid::testing
