// The machine probe (machine_probe.h): one POSIX shared-memory segment between ranks 0 and
// 1, a sequence word and a 1 MiB buffer. Round i: the writer (rank i % 2) copies 1 MiB of its
// own into the buffer and publishes 2i + 1; the reader waits for it, copies the buffer out
// (timed) and publishes 2i + 2. So every timed copy reads lines the other process's core
// has just written, as a shared-memory collective does. The segment's name goes through the
// store; rank 0 unlinks it once rank 1 has mapped it.
#include "bench/machine_probe.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace braid::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBytes = size_t{1} << 20;
constexpr size_t kHeader = 4096;  // the sequence word, then the buffer on its own page
constexpr int kWarmup = 4;
constexpr int kRounds = 24;
constexpr auto kDeadline = std::chrono::seconds(10);

std::string key(std::string_view tag, std::string_view what) {
  return "braid-bench-probe/" + std::string(tag) + "/" + std::string(what);
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double gbs(double seconds) {
  return seconds > 0 ? static_cast<double>(kBytes) / seconds / 1e9 : 0;
}

// Waits for `seq` to reach `want`: spins briefly, then yields, then sleeps 20 us at a time
// (4 or 8 ranks may share 2 cores). False at the deadline.
bool wait_for(const std::atomic<uint32_t>& seq, uint32_t want, Clock::time_point deadline) {
  for (int i = 0; i < 512; ++i) {
    if (seq.load(std::memory_order_acquire) == want) return true;
  }
  for (int i = 0;; ++i) {
    if (seq.load(std::memory_order_acquire) == want) return true;
    if ((i & 63) == 0 && Clock::now() > deadline) return false;
    if (i < 256) {
      ::sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

class Segment {
 public:
  ~Segment() {
    if (base_ != nullptr) ::munmap(base_, kHeader + kBytes);
  }
  // Rank 0: creates it; returns its name, empty on failure (why in `error`).
  std::string create(std::string& error) {
    std::random_device rd;
    std::string name = "/braid-probe-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      error = "shm_open " + name + ": " + std::strerror(errno);
      return {};
    }
    const bool sized = ::ftruncate(fd, static_cast<off_t>(kHeader + kBytes)) == 0;
    if (!sized || !map(fd)) {
      error = "cannot size or map " + name + ": " + std::strerror(errno);
      ::shm_unlink(name.c_str());
      return {};
    }
    return name;
  }
  bool open(const std::string& name) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    return fd >= 0 && map(fd);
  }
  std::atomic<uint32_t>& seq() { return *static_cast<std::atomic<uint32_t>*>(base_); }
  char* buffer() { return static_cast<char*>(base_) + kHeader; }

 private:
  bool map(int fd) {
    void* p = ::mmap(nullptr, kHeader + kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return false;
    base_ = p;
    return true;
  }
  void* base_ = nullptr;
};

}  // namespace

MachineProbe probe_machine(Store& store, int rank, int world_size, std::string_view tag) {
  MachineProbe out;
  if (world_size < 2) {
    out.skipped = "one rank";
    return out;
  }
  if (rank > 1) return out;

  // Setup through the store: rank 0 publishes the segment (or why there is none), rank 1
  // answers whether it mapped it. Both read the other's answer, so neither waits alone.
  Segment seg;
  std::string status;
  if (rank == 0) {
    std::string error;
    const std::string name = seg.create(error);
    store.set(key(tag, "segment"), name.empty() ? "!" + error : host_name() + "\n" + name);
    status = store.get_string(key(tag, "rank1"));
    if (!name.empty()) ::shm_unlink(name.c_str());  // mapped by both, or never will be
    if (name.empty()) status = error;
  } else {
    const std::string s = store.get_string(key(tag, "segment"));
    const size_t nl = s.find('\n');
    if (s.starts_with("!")) {
      status = s.substr(1);
    } else if (s.substr(0, nl) != host_name()) {
      status = "ranks 0 and 1 are on different hosts";
    } else if (!seg.open(s.substr(nl + 1))) {
      status = std::string("rank 1 cannot map the segment: ") + std::strerror(errno);
    } else {
      status = "ok";
    }
    store.set(key(tag, "rank1"), status);
  }
  if (status != "ok") {
    out.skipped = status;
    return out;
  }

  std::vector<char> mine(kBytes), copy(kBytes);
  std::vector<double> cross;
  const Clock::time_point deadline = Clock::now() + kDeadline;
  std::atomic<uint32_t>& seq = seg.seq();
  for (int i = 0; i < kWarmup + kRounds; ++i) {
    const uint32_t n = static_cast<uint32_t>(i);
    if (i % 2 == rank) {  // writer
      if (!wait_for(seq, 2 * n, deadline)) break;
      std::memset(mine.data(), i & 0xff, kBytes);
      std::memcpy(seg.buffer(), mine.data(), kBytes);
      seq.store(2 * n + 1, std::memory_order_release);
    } else {  // reader
      if (!wait_for(seq, 2 * n + 1, deadline)) break;
      const auto t0 = Clock::now();
      std::memcpy(copy.data(), seg.buffer(), kBytes);
      const auto t1 = Clock::now();
      seq.store(2 * n + 2, std::memory_order_release);
      if (i >= kWarmup) cross.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  if (cross.size() < static_cast<size_t>(kRounds / 2)) {
    out.skipped = "the other rank did not answer within 10 s";
    return out;
  }
  out.cross_gbs = gbs(median(cross));

  // The same copy of data this process has just written (warm in its own caches).
  std::vector<double> local;
  for (int i = 0; i < kRounds / 2; ++i) {
    std::memset(mine.data(), i & 0xff, kBytes);
    const auto t0 = Clock::now();
    std::memcpy(copy.data(), mine.data(), kBytes);
    const auto t1 = Clock::now();
    local.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  out.local_gbs = gbs(median(local));
  return out;
}

std::string format_probe(const MachineProbe& start, const MachineProbe& end) {
  auto one = [](const MachineProbe& p) {
    char buf[160];
    if (!p.skipped.empty()) return "not run (" + p.skipped + ")";
    std::snprintf(buf, sizeof(buf), "%.1f GB/s (%.2f of the copy within one, %.1f GB/s)",
                  p.cross_gbs, p.cross_gbs / p.local_gbs, p.local_gbs);
    return std::string(buf);
  };
  if (start.skipped == "one rank") return {};
  std::string s = "# machine probe, 1 MiB copy between ranks 0 and 1: at the start " + one(start) +
                  "; at the end " + one(end) + "\n";
  // Other work on the machine slows every library alike and the probe's medians hardly see
  // it: the load average and the CPU count say whether the ranks had the CPUs to themselves.
  double load[1] = {-1};
  if (::getloadavg(load, 1) == 1) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "# load average (1 min) at the end: %.2f on %u CPUs\n", load[0],
                  std::thread::hardware_concurrency());
    s += buf;
  }
  for (const MachineProbe* p : {&start, &end}) {
    if (p->skipped.empty() && p->cross_gbs < kSlowRatio * p->local_gbs) {
      char buf[320];
      std::snprintf(buf, sizeof(buf),
                    "# warning: at the %s the copy between processes ran at %.2f of the copy "
                    "within one (below %.2f): the machine was in a slow state, and every "
                    "library's figures from this run are low (docs/bench.md)\n",
                    p == &start ? "start" : "end", p->cross_gbs / p->local_gbs, kSlowRatio);
      s += buf;
    }
  }
  return s;
}

}  // namespace braid::bench
