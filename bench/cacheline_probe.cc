// cacheline_probe: what the machine itself allows two processes sharing memory, the floor the
// shm backend's figures are read against (docs/performance.md). Two measurements between a
// parent and a forked child on a MAP_SHARED mapping:
//   barrier   each process stores its round number and spins until the other's matches: the
//             time of one round is the least a 2-rank collective can cost.
//   rewrite   the parent copies B bytes into an area the child reads right after (as the shm
//             backend stages data), rotating through R areas; GB/s of the parent's copies.
//             R = 1 rewrites lines the child has just read; a larger R lets them age out of
//             its caches (docs/shm.md, "Staging ring").
// Usage: cacheline_probe barrier [ROUNDS]
//        cacheline_probe rewrite BYTES ROTATE [ROUNDS]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void* shared_mapping(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("cacheline_probe: mmap");
    std::exit(1);
  }
  return p;
}

int barrier(long rounds) {
  auto* words = static_cast<std::atomic<long>*>(shared_mapping(4096));
  std::atomic<long>& mine = words[0];
  std::atomic<long>& theirs = words[16];  // another cache line
  const pid_t child = fork();
  if (child == 0) {
    for (long i = 1; i <= rounds; ++i) {
      theirs.store(i, std::memory_order_release);
      while (mine.load(std::memory_order_acquire) < i) relax();
    }
    _exit(0);
  }
  const auto t0 = Clock::now();
  for (long i = 1; i <= rounds; ++i) {
    mine.store(i, std::memory_order_release);
    while (theirs.load(std::memory_order_acquire) < i) relax();
  }
  const std::chrono::duration<double> dt = Clock::now() - t0;
  waitpid(child, nullptr, 0);
  std::printf("barrier: %.3f us per round (2 processes, %ld rounds)\n", dt.count() / rounds * 1e6,
              rounds);
  return 0;
}

int rewrite(size_t bytes, long rotate, long rounds) {
  auto* base = static_cast<unsigned char*>(shared_mapping(bytes * rotate + 4096));
  auto* turn = reinterpret_cast<std::atomic<long>*>(base + bytes * rotate);
  std::memset(base, 0, bytes * rotate);
  std::vector<unsigned char> src(bytes, 1);
  const pid_t child = fork();
  if (child == 0) {
    std::vector<unsigned char> sink(bytes);
    for (long i = 0; i < rounds; ++i) {
      while (turn->load(std::memory_order_acquire) != 2 * i + 1) relax();
      std::memcpy(sink.data(), base + (i % rotate) * bytes, bytes);
      turn->store(2 * i + 2, std::memory_order_release);
    }
    _exit(0);
  }
  double copying = 0;
  const auto start = Clock::now();
  for (long i = 0; i < rounds; ++i) {
    while (turn->load(std::memory_order_acquire) != 2 * i) relax();
    const auto t0 = Clock::now();
    std::memcpy(base + (i % rotate) * bytes, src.data(), bytes);
    copying += std::chrono::duration<double>(Clock::now() - t0).count();
    turn->store(2 * i + 1, std::memory_order_release);
  }
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  waitpid(child, nullptr, 0);
  std::printf("rewrite: %zu bytes, %ld areas: copy %.2f us (%.1f GB/s), round trip %.2f us\n",
              bytes, rotate, copying / rounds * 1e6, bytes / (copying / rounds) / 1e9,
              total / rounds * 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "barrier") return barrier(argc > 2 ? std::atol(argv[2]) : 1000000);
  if (mode == "rewrite" && argc > 3) {
    const long bytes = std::atol(argv[2]), rotate = std::atol(argv[3]);
    if (bytes > 0 && rotate > 0)
      return rewrite(bytes, rotate, argc > 4 ? std::atol(argv[4]) : 1000);
  }
  std::fprintf(stderr,
               "usage: cacheline_probe barrier [ROUNDS]\n"
               "       cacheline_probe rewrite BYTES ROTATE [ROUNDS]   (BYTES, ROTATE > 0)\n");
  return 2;
}
