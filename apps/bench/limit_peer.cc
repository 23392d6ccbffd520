// The "limit" peer of braid bench (--peer limit; docs/bench.md, "The limit program"): the bare
// data path of a shared-memory collective with none of braid's layers, the machine's own
// bound for braid's shm backend measured in the same run. One POSIX shared-memory segment for
// the job; per rank two staging buffers (double buffering, so chunk c + 1 is copied in while
// peers still read chunk c) and per-rank sequence words, each on its own cache line.
//
// all_reduce up to 16 KiB (braid shm's one-shot bound for more than two ranks): copy in,
// publish, wait for every rank, sum all W copies. Larger (two-shot, pipelined in chunks): copy
// the chunk in, publish; wait for every rank's
// copy; sum this rank's 1/W slice over the ranks in rank order into its reduced buffer,
// publish; wait for every rank's slice; copy the W slices out, publish "consumed". all_gather:
// copy in, then copy every block out. reduce_scatter: copy in, then sum this rank's block.
// broadcast: the root copies in, every other rank copies out. Waits spin (when each rank has a
// core), then yield, then sleep on a futex (a rank may not have a core of its own: 4 or 8
// ranks on 2 cores), with a deadline: the ladder braid's shm backend uses.
// The segment's name goes through braid's store (setup only); rank 0 unlinks it as soon as
// every rank has mapped it, so nothing is left in /dev/shm.
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "bench/collectives.h"
#include "bench/limit_peer.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"

namespace braid::bench {
namespace {

constexpr size_t kLine = 64;
constexpr int64_t kChunk = int64_t{256} << 10;  // bytes per pipelined step (braid shm's default)
constexpr int64_t kOneShotBytes = int64_t{16} << 10;  // all_reduce: one-shot up to here
constexpr auto kDeadline = std::chrono::seconds(120);

struct alignas(kLine) Word {
  std::atomic<uint32_t> v{0};
};

// Per rank: the three sequence words, then in[2][kChunk] and red[2][kChunk].
struct RankFlags {
  Word arrived, reduced, consumed;
};

struct Header {
  alignas(kLine) std::atomic<uint32_t> attached{0};
  alignas(kLine) std::atomic<uint32_t> waiters{0};
};

size_t rank_bytes() {
  return sizeof(RankFlags) + 4 * static_cast<size_t>(kChunk);
}

long futex(std::atomic<uint32_t>* w, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), op, val, ts, nullptr, 0);
}

// dst[i] = sum over r of src[r][i], in rank order (the order braid's fold uses).
__attribute__((target_clones("avx512f", "avx2", "default"))) void sum_slices(
    float* __restrict dst, const float* const* src, int nsrc, int64_t n) {
  if (nsrc == 1) {
    std::memcpy(dst, src[0], static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const float* __restrict a = src[0];
  const float* __restrict b = src[1];
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];  // one pass for the first two
  for (int r = 2; r < nsrc; ++r) {
    const float* __restrict s = src[r];
    for (int64_t i = 0; i < n; ++i) dst[i] += s[i];
  }
}

class LimitCollectives final : public Collectives {
 public:
  LimitCollectives(const std::shared_ptr<Store>& store, int rank, int size)
      : rank_(rank), size_(size) {
    const size_t bytes = sizeof(Header) + static_cast<size_t>(size) * rank_bytes();
    std::string name;
    if (rank == 0) {
      std::random_device rd;
      name = "/braid-limit-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
      const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      BRAID_CHECK(fd >= 0, kIo, "--peer limit: shm_open ", name, ": ", std::strerror(errno));
      const bool sized = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
      map(fd, bytes, name, sized);
      store->set("braid-limit/segment", name);
    } else {
      name = store->get_string("braid-limit/segment");
      const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
      BRAID_CHECK(fd >= 0, kIo, "--peer limit: shm_open ", name, ": ", std::strerror(errno));
      map(fd, bytes, name, true);
    }
    header()->attached.fetch_add(1);
    if (rank == 0) {
      // Unlinked once every rank has mapped it: nothing is left behind, whatever happens next.
      wait_until([&] { return header()->attached.load() == static_cast<uint32_t>(size); },
                 "every rank to map the segment");
      ::shm_unlink(name.c_str());
    }
    spin_ = static_cast<int>(std::thread::hardware_concurrency()) >= size ? 1 << 12 : 1 << 6;
  }
  ~LimitCollectives() override {
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }

  std::string name() const override { return "limit"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string unsupported(Op op, DType dtype, ReduceOp redop) const override {
    if (op == Op::kReduce || op == Op::kAllToAll || op == Op::kScatter) {
      return "the limit program implements all_reduce, all_gather, reduce_scatter and broadcast";
    }
    if (op_reduces(op) && (dtype != DType::kF32 || redop != ReduceOp::kSum)) {
      return "the limit program reduces f32 sums only";
    }
    return {};
  }

  void* run(Op op, const CallBuffers& b, DType dtype, ReduceOp, int root) override {
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    switch (op) {
      case Op::kAllReduce:
        all_reduce(static_cast<const float*>(b.send), static_cast<float*>(b.recv), b.count);
        return b.recv;
      case Op::kAllGather:
        all_gather(static_cast<const char*>(b.send), static_cast<char*>(b.recv), b.count * elem);
        return b.recv;
      case Op::kReduceScatter:
        reduce_scatter(static_cast<const float*>(b.send), static_cast<float*>(b.recv), b.count);
        return b.recv;
      case Op::kBroadcast:
        broadcast(static_cast<const char*>(b.send), static_cast<char*>(b.recv), b.count * elem,
                  root);
        return b.recv;
      default:
        BRAID_FAIL(kNotSupported, "--peer limit: ", unsupported(op, dtype, ReduceOp::kSum));
    }
  }

  void barrier() override {
    const uint32_t s = next_seq();
    post(flags(rank_).arrived, s);
    for (int p = 0; p < size_; ++p) wait_ge(flags(p).arrived, s);
    post(flags(rank_).reduced, s);
    post(flags(rank_).consumed, s);
  }

  double sum_across(double value) override {
    // Through the staging buffers: every rank writes its value, then reads all of them.
    const uint32_t s = begin_step();
    std::memcpy(in(rank_, s), &value, sizeof value);
    post(flags(rank_).arrived, s);
    double total = 0;
    for (int p = 0; p < size_; ++p) {
      wait_ge(flags(p).arrived, s);
      double v;
      std::memcpy(&v, in(p, s), sizeof v);
      total += v;
    }
    post(flags(rank_).reduced, s);
    post(flags(rank_).consumed, s);
    return total;
  }

 private:
  void map(int fd, size_t bytes, const std::string& name, bool sized) {
    void* p =
        sized ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    const int err = errno;
    ::close(fd);
    BRAID_CHECK(p != MAP_FAILED, kIo, "--peer limit: mapping ", name, " (", bytes,
                " bytes): ", std::strerror(err));
    base_ = static_cast<char*>(p);
    bytes_ = bytes;
  }
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  char* rank_base(int r) const {
    return base_ + sizeof(Header) + static_cast<size_t>(r) * rank_bytes();
  }
  RankFlags& flags(int r) const { return *reinterpret_cast<RankFlags*>(rank_base(r)); }
  char* in(int r, uint32_t s) const {
    return rank_base(r) + sizeof(RankFlags) + (s & 1) * static_cast<size_t>(kChunk);
  }
  char* red(int r, uint32_t s) const {
    return rank_base(r) + sizeof(RankFlags) + (2 + (s & 1)) * static_cast<size_t>(kChunk);
  }

  uint32_t next_seq() { return ++seq_; }
  // A new step whose staging buffers are free: every rank has consumed the step that used them
  // last (two steps ago).
  uint32_t begin_step() {
    const uint32_t s = next_seq();
    if (s > 2) {
      for (int p = 0; p < size_; ++p) wait_ge(flags(p).consumed, s - 2);
    }
    return s;
  }

  template <typename F>
  void wait_until(F done, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!done()) {
      BRAID_CHECK(std::chrono::steady_clock::now() < deadline, kTimeout, "--peer limit: rank ",
                  rank_, " waited ", kDeadline.count(), " s for ", what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void post(Word& w, uint32_t s) {
    w.v.store(s, std::memory_order_seq_cst);
    if (header()->waiters.load(std::memory_order_seq_cst) != 0) {
      futex(&w.v, FUTEX_WAKE, INT_MAX, nullptr);
    }
  }

  // The waiting ladder of braid's shm backend, so that only the data path differs: spin (with
  // a core per rank), then sched_yield (a co-scheduled peer runs), then futex sleeps.
  void wait_ge(Word& w, uint32_t s) {
    for (int i = 0; i < spin_; ++i) {
      if (w.v.load(std::memory_order_acquire) >= s) return;
      __builtin_ia32_pause();
    }
    const auto yield_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (std::chrono::steady_clock::now() < yield_until) {
      if (w.v.load(std::memory_order_acquire) >= s) return;
      sched_yield();
    }
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    header()->waiters.fetch_add(1, std::memory_order_seq_cst);
    uint32_t cur;
    while ((cur = w.v.load(std::memory_order_seq_cst)) < s) {
      if (std::chrono::steady_clock::now() >= deadline) {
        header()->waiters.fetch_sub(1);
        BRAID_FAIL(kTimeout, "--peer limit: rank ", rank_, " waited ", kDeadline.count(),
                   " s for a peer (step ", s, ")");
      }
      const timespec ts{0, 10'000'000};  // re-checks the deadline every 10 ms
      futex(&w.v, FUTEX_WAIT, cur, &ts);
    }
    header()->waiters.fetch_sub(1, std::memory_order_seq_cst);
  }

  // This rank's slice [lo, hi) of n elements: W slices, multiples of 16 floats (one line).
  void slice(int64_t n, int r, int64_t& lo, int64_t& hi) const {
    const int64_t per = (n + 16 * size_ - 1) / (16 * size_) * 16;
    lo = std::min(n, per * r);
    hi = std::min(n, lo + per);
  }

  void all_reduce(const float* send, float* recv, int64_t count) {
    const int64_t per_chunk = kChunk / static_cast<int64_t>(sizeof(float));
    const float* srcs[64];
    BRAID_CHECK(size_ <= 64, kNotSupported, "--peer limit: at most 64 ranks");
    if (count * static_cast<int64_t>(sizeof(float)) <= kOneShotBytes) {
      // One-shot: every rank sums every rank's copy (one wait fewer than two-shot).
      const uint32_t s = begin_step();
      std::memcpy(in(rank_, s), send, static_cast<size_t>(count) * sizeof(float));
      post(flags(rank_).arrived, s);
      for (int p = 0; p < size_; ++p) {
        wait_ge(flags(p).arrived, s);
        srcs[p] = reinterpret_cast<const float*>(in(p, s));
      }
      sum_slices(recv, srcs, size_, count);
      post(flags(rank_).reduced, s);
      post(flags(rank_).consumed, s);
      return;
    }
    for (int64_t off = 0; off < count; off += per_chunk) {
      const int64_t n = std::min(per_chunk, count - off);
      const uint32_t s = begin_step();
      std::memcpy(in(rank_, s), send + off, static_cast<size_t>(n) * sizeof(float));
      post(flags(rank_).arrived, s);
      int64_t lo, hi;
      slice(n, rank_, lo, hi);
      for (int p = 0; p < size_; ++p) {
        wait_ge(flags(p).arrived, s);
        srcs[p] = reinterpret_cast<const float*>(in(p, s)) + lo;
      }
      sum_slices(reinterpret_cast<float*>(red(rank_, s)) + lo, srcs, size_, hi - lo);
      post(flags(rank_).reduced, s);
      for (int p = 0; p < size_; ++p) {
        int64_t plo, phi;
        slice(n, p, plo, phi);
        wait_ge(flags(p).reduced, s);
        std::memcpy(recv + off + plo, reinterpret_cast<const float*>(red(p, s)) + plo,
                    static_cast<size_t>(phi - plo) * sizeof(float));
      }
      post(flags(rank_).consumed, s);
    }
  }

  // Each rank's block of `bytes`, in steps of kChunk bytes.
  void all_gather(const char* send, char* recv, int64_t bytes) {
    const int64_t step = kChunk;
    for (int64_t off = 0; off < std::max<int64_t>(bytes, 1); off += step) {
      const int64_t n = std::min(step, bytes - off);
      const uint32_t s = begin_step();
      if (n > 0) std::memcpy(in(rank_, s), send + off, static_cast<size_t>(n));
      post(flags(rank_).arrived, s);
      for (int p = 0; p < size_; ++p) {
        wait_ge(flags(p).arrived, s);
        if (n > 0) std::memcpy(recv + p * bytes + off, in(p, s), static_cast<size_t>(n));
      }
      post(flags(rank_).reduced, s);
      post(flags(rank_).consumed, s);
    }
  }

  // send holds W blocks of `count`; this rank sums block `rank`.
  void reduce_scatter(const float* send, float* recv, int64_t count) {
    const int64_t step = kChunk / static_cast<int64_t>(sizeof(float)) / size_ / 16 * 16;
    const float* srcs[64];
    BRAID_CHECK(size_ <= 64, kNotSupported, "--peer limit: at most 64 ranks");
    for (int64_t off = 0; off < std::max<int64_t>(count, 1); off += step) {
      const int64_t n = std::min(step, count - off);
      const uint32_t s = begin_step();
      // Block p's piece [off, off + n) at offset p * step of the staging buffer.
      float* mine = reinterpret_cast<float*>(in(rank_, s));
      for (int p = 0; p < size_ && n > 0; ++p) {
        std::memcpy(mine + p * step, send + p * count + off, static_cast<size_t>(n) * 4);
      }
      post(flags(rank_).arrived, s);
      for (int p = 0; p < size_; ++p) {
        wait_ge(flags(p).arrived, s);
        srcs[p] = reinterpret_cast<const float*>(in(p, s)) + rank_ * step;
      }
      if (n > 0) sum_slices(recv + off, srcs, size_, n);
      post(flags(rank_).reduced, s);
      post(flags(rank_).consumed, s);
    }
  }

  void broadcast(const char* send, char* recv, int64_t bytes, int root) {
    for (int64_t off = 0; off < std::max<int64_t>(bytes, 1); off += kChunk) {
      const int64_t n = std::min(kChunk, bytes - off);
      const uint32_t s = begin_step();
      if (rank_ == root) {
        if (n > 0) std::memcpy(in(rank_, s), send + off, static_cast<size_t>(n));
        if (n > 0 && recv != send) std::memcpy(recv + off, send + off, static_cast<size_t>(n));
      }
      post(flags(rank_).arrived, s);
      wait_ge(flags(root).arrived, s);
      if (rank_ != root && n > 0) std::memcpy(recv + off, in(root, s), static_cast<size_t>(n));
      post(flags(rank_).reduced, s);
      post(flags(rank_).consumed, s);
    }
  }

  const int rank_, size_;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  uint32_t seq_ = 0;
  int spin_ = 1 << 12;
};

class LimitSession final : public PeerSession {
 public:
  std::shared_ptr<Store> bootstrap_store() override { return nullptr; }
  void attach(const std::shared_ptr<Store>& store, int rank, int size) override {
    collectives_ = std::make_unique<LimitCollectives>(store, rank, size);
  }
  Collectives& collectives() override {
    BRAID_CHECK(collectives_ != nullptr, kInternal, "--peer limit: used before attach()");
    return *collectives_;
  }

 private:
  std::unique_ptr<LimitCollectives> collectives_;
};

}  // namespace

std::unique_ptr<PeerSession> start_limit_peer() {
  return std::make_unique<LimitSession>();
}

}  // namespace braid::bench
