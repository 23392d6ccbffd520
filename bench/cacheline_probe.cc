// cacheline_probe: what the machine itself allows two processes sharing memory, the floor the
// shm backend's figures are read against (docs/performance.md). Two measurements between a
// parent and a forked child on a MAP_SHARED mapping:
//   barrier   each process stores its round number and spins until the other's matches: the
//             time of one round is the least a 2-rank collective can cost.
//   rewrite   the parent copies B bytes into an area the child reads right after (as the shm
//             backend stages data), rotating through R areas; GB/s of the parent's copies.
//             R = 1 rewrites lines the child has just read; a larger R lets them age out of
//             its caches (docs/shm.md, "Staging ring").
//   allreduce a bare 2-process f32 sum all_reduce of B bytes per rank, out of place, with
//             nothing but the data path: one-shot (each process stages its input in chunks of
//             up to 512 KiB through a 2 MiB ring; both fold their own input and the other's
//             chunk into their output) and pipelined two-shot (16 KiB chunks: stage the other's
//             half, fold mine into a results area, copy the other's folded half of the chunk
//             before). Spin waits, no checks, no deadlines: the most a staged all_reduce gets
//             from this machine at that size, which braid's shm backend is read against.
//   idle      the cost of touching memory again after it sat idle: a MAP_SHARED mapping of
//             B bytes (shared memory, as the shm segment) is written whole, left alone for
//             MS milliseconds, then written one byte per 4 KiB page, each page timed; then
//             the same at once, with no idle time. Prints the pages that took over 20 us and
//             what the pass cost. With `huge`, a private mapping that asks for transparent huge
//             pages instead (docs/shm.md, "Staging ring").
// Usage: cacheline_probe barrier [ROUNDS]
//        cacheline_probe rewrite BYTES ROTATE [ROUNDS]
//        cacheline_probe allreduce BYTES [ITERS]
//        cacheline_probe idle BYTES MS [huge]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

// One byte written per page of [p, p + bytes), each write timed.
void touch_pass(unsigned char* p, size_t bytes, const char* what) {
  constexpr size_t kPageBytes = 4096;
  constexpr double kSlowUs = 20;
  long slow = 0;
  double worst = 0, total = 0;
  for (size_t off = 0; off < bytes; off += kPageBytes) {
    const auto t0 = Clock::now();
    p[off] = static_cast<unsigned char>(p[off] + 1);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    total += us;
    worst = std::max(worst, us);
    slow += us > kSlowUs;
  }
  std::printf("idle: %-10s %zu pages: %ld over %.0f us, worst %.1f us, the pass %.1f us\n", what,
              bytes / kPageBytes, slow, kSlowUs, worst, total);
}

int idle(size_t bytes, long ms, bool huge) {
  unsigned char* p = nullptr;
  if (huge) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::perror("cacheline_probe: mmap");
      return 1;
    }
    if (madvise(m, bytes, MADV_HUGEPAGE) != 0) std::perror("cacheline_probe: madvise");
    p = static_cast<unsigned char*>(m);
  } else {
    p = static_cast<unsigned char*>(shared_mapping(bytes));
  }
  std::memset(p, 1, bytes);
  usleep(static_cast<useconds_t>(ms) * 1000);
  const std::string after = "after " + std::to_string(ms) + " ms";
  touch_pass(p, bytes, after.c_str());
  touch_pass(p, bytes, "at once");
  return 0;
}

// out[i] = a[i] + b[i], vectorized for the widest SIMD level the CPU has.
__attribute__((target_clones("avx512f", "avx2", "default"))) void add_f32(float* __restrict out,
                                                                          const float* __restrict a,
                                                                          const float* __restrict b,
                                                                          size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

struct alignas(64) Flag {
  std::atomic<long> value{0};
};

// The two processes of `allreduce` (docs at the top). Returns the median seconds per call of
// seven loops of `iters` calls.
double allreduce_run(const char* algo, size_t bytes, long iters) {
  constexpr size_t kRing = 2 << 20, kOneShotChunk = 512 << 10, kTwoShotChunk = 16 << 10;
  auto* base = static_cast<unsigned char*>(shared_mapping(4096 + 2 * kRing));
  auto* flags = reinterpret_cast<Flag*>(base);  // [0], [1]: each process's step count
  unsigned char* ring[2] = {base + 4096, base + 4096 + kRing};
  auto* result = reinterpret_cast<std::atomic<double>*>(base + 256);
  const pid_t child = fork();
  const int me = child == 0 ? 1 : 0, other = 1 - me;
  std::vector<float> in(bytes / 4), out(bytes / 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97 + me);
  long step = 0;
  size_t pos = 0;
  auto region = [&](size_t n) {  // the next n bytes of the ring (both processes agree)
    n = (n + 63) / 64 * 64;
    if (pos + n > kRing) pos = 0;
    const size_t r = pos;
    pos += n;
    return r;
  };
  auto sync = [&] {
    flags[me].value.store(++step, std::memory_order_release);
    while (flags[other].value.load(std::memory_order_acquire) < step) relax();
  };
  auto* src = reinterpret_cast<unsigned char*>(in.data());
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  auto one_shot = [&] {
    for (size_t off = 0; off < bytes; off += kOneShotChunk) {
      const size_t m = std::min(kOneShotChunk, bytes - off), r = region(m);
      std::memcpy(ring[me] + r, src + off, m);
      sync();
      add_f32(reinterpret_cast<float*>(dst + off), reinterpret_cast<float*>(src + off),
              reinterpret_cast<float*>(ring[other] + r), m / 4);
    }
  };
  auto two_shot = [&] {
    // Chunk k: process 0 folds its first half, process 1 the second; each stages the other's
    // half at the region's start and leaves its folded half after it, for the other to copy in
    // the next step (the ring keeps three steps' regions apart).
    const size_t chunks = (bytes + kTwoShotChunk - 1) / kTwoShotChunk;
    size_t prev_r = 0, prev_off = 0, prev_m = 0;
    for (size_t k = 0; k <= chunks; ++k) {
      const size_t off = k * kTwoShotChunk;
      const size_t m = k < chunks ? std::min(kTwoShotChunk, bytes - off) : 0;
      const size_t half = m / 8 * 4, r = region(2 * m + 64);
      const size_t mine = me == 0 ? 0 : half, mine_len = me == 0 ? half : m - half;
      const size_t theirs = me == 0 ? half : 0, theirs_len = me == 0 ? m - half : half;
      if (m > 0) std::memcpy(ring[me] + r, src + off + theirs, theirs_len);
      sync();
      if (k > 0) {
        const size_t prev_half = prev_m / 8 * 4;
        const size_t at = other == 0 ? 0 : prev_half;
        const size_t len = other == 0 ? prev_half : prev_m - prev_half;
        std::memcpy(dst + prev_off + at, ring[other] + prev_r + (prev_m + 63) / 64 * 64, len);
      }
      if (m > 0) {
        auto* folded = reinterpret_cast<float*>(ring[me] + r + (m + 63) / 64 * 64);
        add_f32(folded, reinterpret_cast<float*>(src + off + mine),
                reinterpret_cast<float*>(ring[other] + r), mine_len / 4);
        std::memcpy(dst + off + mine, folded, mine_len);
      }
      prev_r = r;
      prev_off = off;
      prev_m = m;
    }
  };
  const bool one = std::string(algo) == "one-shot";
  std::vector<double> loops;
  for (int rep = 0; rep < 8; ++rep) {  // the first loop warms up
    sync();
    const auto t0 = Clock::now();
    for (long i = 0; i < iters; ++i) one ? one_shot() : two_shot();
    loops.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / iters);
  }
  loops.erase(loops.begin());
  std::sort(loops.begin(), loops.end());
  for (size_t i = 0; i < out.size(); ++i) {  // exact: sums of small integers
    const float expect = static_cast<float>(2 * (i % 97) + 1);
    if (out[i] != expect) {
      std::fprintf(stderr, "cacheline_probe allreduce %s: element %zu is %f, expected %f\n", algo,
                   i, out[i], expect);
      if (child == 0) _exit(1);
      waitpid(child, nullptr, 0);
      std::exit(1);
    }
  }
  if (child == 0) {
    result->store(loops[loops.size() / 2]);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::exit(1);  // the child said why
  const double t = (loops[loops.size() / 2] + result->load()) / 2;   // averaged over processes
  munmap(base, 4096 + 2 * kRing);
  return t;
}

int allreduce(size_t bytes, long iters) {
  for (const char* algo : {"one-shot", "two-shot"}) {
    const double t = allreduce_run(algo, bytes, iters);
    std::printf("allreduce %s: %zu bytes per rank, %.2f us per call, busbw %.2f GB/s\n", algo,
                bytes, t * 1e6, static_cast<double>(bytes) / t / 1e9);
  }
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
  if (mode == "allreduce" && argc > 2) {
    const long bytes = std::atol(argv[2]);
    const long iters = argc > 3 ? std::atol(argv[3]) : 200;
    if (bytes >= 4 && bytes % 4 == 0 && iters > 0) return allreduce(bytes, iters);
  }
  if (mode == "idle" && argc > 3) {
    const long bytes = std::atol(argv[2]), ms = std::atol(argv[3]);
    const bool huge = argc > 4 && std::string(argv[4]) == "huge";
    if (bytes > 0 && ms >= 0) return idle(bytes, ms, huge);
  }
  std::fprintf(stderr,
               "usage: cacheline_probe barrier [ROUNDS]\n"
               "       cacheline_probe rewrite BYTES ROTATE [ROUNDS]   (BYTES, ROTATE > 0)\n"
               "       cacheline_probe allreduce BYTES [ITERS]   (BYTES a multiple of 4)\n"
               "       cacheline_probe idle BYTES MS [huge]   (BYTES > 0)\n");
  return 2;
}
