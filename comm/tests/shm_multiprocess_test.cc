// The shm backend across real processes: the parent forks one child per rank, each child
// opens a FileStore and its own backend, runs a body and reports through its exit status
// (0: as expected; non-zero: it printed why on stderr). The parent waits with a deadline and
// SIGKILLs stragglers. Covers a plain run, a peer that exits or is killed before a collective
// (kPeerLost), a mismatched call (kInvalidArgument), a peer that never arrives (kTimeout) and
// that no /dev/shm/braid-<job>-* file is left behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "../src/shm_backend.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using std::chrono::milliseconds;
using Body = std::function<int(int rank, Backend& backend, Store& store)>;

std::string unique_job() {
  static std::atomic<int> counter{0};
  return "mp" + std::to_string(getpid()) + "n" + std::to_string(counter++);
}

std::vector<std::string> leftovers(const std::string& job) {
  std::vector<std::string> out;
  const std::string prefix = "braid-" + job + "-";
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    }
    closedir(dir);
  }
  return out;
}

// Forks n ranks running `body`; returns each child's exit code (128 + signal when killed,
// -1 when the parent had to kill it at the deadline).
std::vector<int> run_processes(int n, milliseconds timeout, const std::string& job,
                               const Body& body) {
  const std::string store_path = "/tmp/braid-shm-test-" + job + ".store";
  std::remove(store_path.c_str());
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        BackendContext ctx;
        ctx.store = std::make_shared<FileStore>(store_path, milliseconds(20000));
        ctx.rank = r;
        ctx.size = n;
        for (int i = 0; i < n; ++i) ctx.global_ranks.push_back(i);
        ctx.job_id = job;
        ctx.timeout = timeout;
        auto backend = create_shm_backend(ctx, ShmOptions{});
        code = body(r, *backend, *ctx.store);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: unexpected error: %s\n", r, e.what());
        code = 100;
      }
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(n, -1);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(60000);
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] == 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[r] = 0;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(milliseconds(10));  // a parent's poll, not a spin
  }
  for (int r = 0; r < n; ++r) {
    if (pids[r] == 0) continue;
    kill(pids[r], SIGKILL);
    waitpid(pids[r], nullptr, 0);
  }
  std::remove(store_path.c_str());
  return codes;
}

// Exit code 0 when `fn` throws an Error of `kind` whose message holds every `needle`.
int expect_error(int rank, ErrorKind kind, const std::vector<std::string>& needles,
                 const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    bool ok = e.kind() == kind;
    for (const auto& s : needles) ok = ok && e.message().find(s) != std::string::npos;
    if (!ok) std::fprintf(stderr, "rank %d: unexpected error: %s\n", rank, e.what());
    return ok ? 0 : 2;
  }
  std::fprintf(stderr, "rank %d: no error raised\n", rank);
  return 3;
}

void all_reduce_f32(Backend& backend, int64_t count, uint64_t seq) {
  std::vector<float> buf(count, 1.f);
  CollectiveDesc d;
  d.send = d.recv = buf.data();
  d.count = count;
  d.seq = seq;
  backend.run(d)->wait();
}

TEST(ShmProcesses, AllReduceAndAllGatherAcrossFourProcessesLeaveNoSegment) {
  const std::string job = unique_job();
  const auto codes =
      run_processes(4, milliseconds(30000), job, [](int rank, Backend& backend, Store&) {
        const int64_t count = 300001;  // several chunks of the 4 MiB slot in i64
        std::vector<int64_t> v(count);
        for (int64_t i = 0; i < count; ++i) v[i] = i * (rank + 1);
        CollectiveDesc d;
        d.dtype = DType::kI64;
        d.send = d.recv = v.data();
        d.count = count;
        backend.run(d)->wait();
        for (int64_t i = 0; i < count; ++i) {
          if (v[i] != i * 10) return 4;  // 1 + 2 + 3 + 4
        }
        std::vector<int32_t> mine(5, rank), all(20, -1);
        d = CollectiveDesc{};
        d.kind = CollectiveKind::kAllGather;
        d.dtype = DType::kI32;
        d.send = mine.data();
        d.recv = all.data();
        d.count = 5;
        backend.run(d)->wait();
        for (int i = 0; i < 20; ++i) {
          if (all[i] != i / 5) return 5;
        }
        return 0;
      });
  EXPECT_EQ(codes, std::vector<int>(4, 0));
  EXPECT_TRUE(leftovers(job).empty());
}

class ShmPeerLoss : public ::testing::TestWithParam<bool> {};  // true: SIGKILL, false: _exit

TEST_P(ShmPeerLoss, OthersRaisePeerLostNamingTheOpSequenceAndRank) {
  const bool sigkill = GetParam();
  const std::string job = unique_job();
  // A 20 s timeout: a peer loss must be reported long before it, as kPeerLost (a timeout
  // would be kTimeout and fail the check).
  const auto codes =
      run_processes(3, milliseconds(20000), job, [&](int rank, Backend& backend, Store&) {
        all_reduce_f32(backend, 16, 1);  // everyone mapped and talking
        if (rank == 2) {
          if (sigkill) raise(SIGKILL);
          _exit(0);
        }
        return expect_error(rank, ErrorKind::kPeerLost,
                            {"all_reduce (seq 2", "group ranks [2] (world ranks [2])"},
                            [&] { all_reduce_f32(backend, 16, 2); });
      });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], sigkill ? 128 + SIGKILL : 0);
  EXPECT_TRUE(leftovers(job).empty());
}

INSTANTIATE_TEST_SUITE_P(KillOrExit, ShmPeerLoss, ::testing::Values(true, false));

TEST(ShmProcesses, ADifferentCollectiveIsInvalidArgumentOnEveryRank) {
  const std::string job = unique_job();
  const auto codes =
      run_processes(3, milliseconds(20000), job, [](int rank, Backend& backend, Store&) {
        std::vector<float> buf(64, 1.f);
        CollectiveDesc d;
        d.kind = rank == 1 ? CollectiveKind::kAllGather : CollectiveKind::kAllReduce;
        d.send = d.recv = buf.data();
        d.count = rank == 1 ? 16 : 64;
        d.seq = 9;
        return expect_error(rank, ErrorKind::kInvalidArgument,
                            {"all_reduce f32 x 64 sum", "all_gather f32 x 16", "group rank 1"},
                            [&] { backend.run(d)->wait(); });
      });
  EXPECT_EQ(codes, std::vector<int>(3, 0));
}

// Two ranks, so the only way for rank 0 to fail is its own deadline (with three, the second
// waiter may see the first give up and report it as lost).
TEST(ShmProcesses, APeerThatNeverArrivesIsATimeoutNamingIt) {
  const std::string job = unique_job();
  const auto codes =
      run_processes(2, milliseconds(500), job, [&](int rank, Backend& backend, Store& store) {
        if (rank == 1) {  // alive but elsewhere until rank 0 has given up
          store.wait({"rank0-done"}, milliseconds(20000));
          return 0;
        }
        const int code = expect_error(rank, ErrorKind::kTimeout,
                                      {"all_reduce (seq 3", "group ranks [1]", "500 ms"},
                                      [&] { all_reduce_f32(backend, 8, 3); });
        store.set("rank0-done", "1");
        return code;
      });
  EXPECT_EQ(codes, std::vector<int>(2, 0));
  EXPECT_TRUE(leftovers(job).empty());
}

}  // namespace
}  // namespace braid
