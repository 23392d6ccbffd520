// The shm backend's group object: rendezvous on the segment through the store, the waits
// (a short timed spin, then sched_yield, then futex slices that check the deadline and the peer's
// liveness), the step protocol's cross-rank check, error handling, and the options / registration
// entry points (docs/shm.md).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "braid/comm/store.h"
#include "braid/comm/work.h"
#include "braid/core/environment.h"
#include "fold.h"
#include "shm_group.h"
#include "wait_policy.h"

namespace braid {
namespace {

// Wait phases (docs/shm.md, "Waiting"), bounded in time, not iterations: a `pause` costs
// from ~10 to ~140 cycles depending on the CPU, and 2000 of them held a core for ~50 us,
// the very core a peer needed when ranks outnumber cores.
constexpr std::chrono::microseconds kSpinTime{20};   // pause loop, only while ranks <= cores
constexpr std::chrono::nanoseconds kMinSpin{500};    // the adaptive spin's floor
constexpr std::chrono::microseconds kYieldTime{50};  // sched_yield: lets a co-scheduled peer run
constexpr int kPollsPerClockRead = 16;
constexpr int kPollsBeforeClock = 64;  // ~1-5 us of pause, within any spin budget
constexpr int kPollsWithoutPause = 32;
constexpr std::chrono::milliseconds kSlice{50};
constexpr std::chrono::milliseconds kDefaultTimeout{300000};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A byte count from the environment (get_env_bytes: K, M, G, T suffixes) of at least
// `min_value`.
uint64_t env_bytes(const char* name, uint64_t fallback, uint64_t min_value) {
  const uint64_t v = get_env_bytes(name, fallback);
  BRAID_CHECK(v >= min_value, kInvalidArgument, "environment variable ", name, "=",
              get_env_string(name).value_or(std::to_string(v)), " is too small (expected at least ",
              min_value, " bytes)");
  return v;
}

std::string safe_name_part(const std::string& text) {
  std::string out;
  for (char ch : text.substr(0, 32)) {
    // The launcher cleans /dev/shm/braid-<job_id>-*: keep the id as is wherever a name allows.
    const bool ok =
        std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-';
    out += ok ? ch : '_';
  }
  return out.empty() ? "local" : out;
}

std::atomic<uint64_t> g_segment_counter{0};

}  // namespace

bool parse_shm_algo(std::string_view text, ShmAlgo* algo) {
  if (text == "auto")
    *algo = ShmAlgo::kAuto;
  else if (text == "oneshot")
    *algo = ShmAlgo::kOneShot;
  else if (text == "rs")
    *algo = ShmAlgo::kReduceScatter;
  else
    return false;
  return true;
}

ShmOptions shm_options_from_env() {
  ShmOptions o;
  o.slot_bytes = env_bytes("BRAID_SHM_SLOT_BYTES", o.slot_bytes, 4096);
  o.mailbox_bytes = env_bytes("BRAID_SHM_MAILBOX_BYTES", o.mailbox_bytes, 64);
  o.oneshot_bytes = env_bytes("BRAID_SHM_ONESHOT_BYTES", o.oneshot_bytes, 0);
  o.arena_bytes = env_bytes("BRAID_SHM_ARENA_BYTES", o.arena_bytes, 0);
  o.zerocopy_bytes = env_bytes("BRAID_SHM_ZEROCOPY_BYTES", o.zerocopy_bytes, 0);
  o.chunk_bytes = env_bytes("BRAID_SHM_CHUNK_BYTES", o.chunk_bytes, 64);
  o.nontemporal_bytes = env_bytes("BRAID_SHM_NONTEMPORAL_BYTES", o.nontemporal_bytes, 0);
  o.kernel_copy_bytes = env_bytes("BRAID_SHM_KERNEL_COPY_BYTES", o.kernel_copy_bytes, 0);
  o.kernel_copy_gather_bytes =
      env_bytes("BRAID_SHM_KERNEL_COPY_GATHER_BYTES", o.kernel_copy_gather_bytes, 0);
  o.bcast_bytes = env_bytes("BRAID_SHM_BCAST_BYTES", o.bcast_bytes, 0);
  o.bcast_shared_bytes = env_bytes("BRAID_SHM_BCAST_SHARED_BYTES", o.bcast_shared_bytes, 0);
  o.reduce_bytes = env_bytes("BRAID_SHM_REDUCE_BYTES", o.reduce_bytes, 0);
  for (const auto& [name, value] :
       {std::pair{"BRAID_SHM_BCAST_BYTES", o.bcast_bytes},
        std::pair{"BRAID_SHM_BCAST_SHARED_BYTES", o.bcast_shared_bytes}}) {
    BRAID_CHECK(value <= static_cast<uint64_t>(shm::kBcastMaxBytes), kInvalidArgument,
                "environment variable ", name, "=", value, " is too large (expected at most ",
                shm::kBcastMaxBytes, " bytes)");
  }
  if (const char* algo = std::getenv("BRAID_SHM_ALGO"); algo && *algo) {
    BRAID_CHECK(parse_shm_algo(algo, &o.algo), kInvalidArgument,
                "environment variable BRAID_SHM_ALGO='", algo,
                "' is not an algorithm (expected auto, oneshot or rs)");
  }
  return o;
}

std::unique_ptr<Backend> create_shm_backend(const BackendContext& context,
                                            const ShmOptions& options) {
  return std::make_unique<shm::ShmGroup>(context, options);
}

void register_shm_backend() {
  register_backend("shm", [](const BackendContext& context) {
    return create_shm_backend(context, shm_options_from_env());
  });
}

namespace shm {

ShmGroup::ShmGroup(const BackendContext& context, const ShmOptions& options)
    : context_(context), me_(context.rank), n_(context.size), watch_(context.size) {
  BRAID_CHECK(context.store, kInvalidArgument,
              "shm: BackendContext.store is null (expected the "
              "group's store)");
  BRAID_CHECK(n_ >= 1 && me_ >= 0 && me_ < n_, kInvalidArgument, "shm: rank ", me_,
              " of group size ", n_, " (expected 0 <= rank < size)");
  BRAID_CHECK(options.slot_bytes % 64 == 0 && options.slot_bytes >= 64 * uint64_t(n_) &&
                  options.slot_bytes >= 4096,
              kInvalidArgument, "shm: slot_bytes ", options.slot_bytes,
              " (expected a multiple of 64, at least 4096 and 64 x group size ", n_, ")");
  BRAID_CHECK(options.mailbox_bytes >= 64, kInvalidArgument, "shm: mailbox_bytes ",
              options.mailbox_bytes, " (expected >= 64)");
  if (context_.global_ranks.size() != static_cast<size_t>(n_)) {
    context_.global_ranks.resize(n_);
    for (int r = 0; r < n_; ++r) context_.global_ranks[r] = r;
  }
  Store& store = *context.store;
  // The k-th shm backend this rank creates on this store meets the others' k-th.
  const int64_t instance = store.add("shm/instances/" + std::to_string(me_), 1);
  const std::string key = "shm/segment/" + std::to_string(instance);
  if (me_ == 0) {
    const std::string name = "/braid-" + safe_name_part(context.job_id) + "-g" +
                             std::to_string(context_.global_ranks[0]) + "x" + std::to_string(n_) +
                             "-" + std::to_string(getpid()) + "-" +
                             std::to_string(g_segment_counter.fetch_add(1));
    // Note [Kernel copy]: ranks that share CPUs stage large results, and ranks more than
    // twice the CPUs stage from a lower size and read small blocks through the kernel no more.
    const bool shared = n_ > usable_cpus(), crowded = n_ > 2 * usable_cpus();
    const uint64_t kc_bytes =
        crowded && options.kernel_copy_bytes != 0
            ? std::max(options.kernel_copy_bytes, shm::kKernelCopyBytesCrowded)
            : options.kernel_copy_bytes;
    const uint64_t kc_limit = crowded  ? shm::kKernelCopyLimitCrowded
                              : shared ? shm::kKernelCopyLimitShared
                                       : 0;
    SegmentConfig config{options.slot_bytes,
                         options.mailbox_bytes,
                         options.oneshot_bytes,
                         static_cast<uint32_t>(options.algo),
                         options.arena_bytes,
                         options.zerocopy_bytes,
                         options.chunk_bytes,
                         options.nontemporal_bytes,
                         kc_bytes,
                         kc_limit,
                         shared ? options.bcast_shared_bytes : options.bcast_bytes,
                         shared ? 0 : options.kernel_copy_gather_bytes,
                         options.reduce_bytes};
    seg_ = Segment::create(name, n_, config);
    store.set(key, name);
  } else {
    const auto timeout = context.timeout.count() > 0 ? context.timeout : store.timeout();
    const std::vector<uint8_t> value = store.get(key, timeout);
    seg_ = Segment::open(std::string(value.begin(), value.end()), n_);
  }
  seg_->control(me_).pid_ns.store(pid_namespace(), std::memory_order_relaxed);
  seg_->control(me_).pid.store(getpid(), std::memory_order_release);
  seg_->mark_mapped();
  const uint64_t slot = seg_->header().slot_bytes;
  ring_end_ = slot;
  small_ring_ = small_ring_bytes(slot);
  middle_ring_ = middle_ring_bytes(slot);
  area_bytes_ = (slot / 4) & ~uint64_t{63};
  {
    // Below both thresholds no call is a zero-copy candidate (zero_copy_candidate).
    const SegmentHeader& h = seg_->header();
    constexpr uint64_t kNever = ~uint64_t{0};
    zc_floor_bytes_ = std::min(h.arena_bytes != 0 ? h.zerocopy_bytes : kNever,
                               h.kernel_copy_bytes != 0 ? h.kernel_copy_bytes : kNever);
    if (h.kernel_copy_bytes != 0 && h.kernel_copy_gather_bytes != 0) {
      zc_floor_bytes_ = std::min(zc_floor_bytes_, h.kernel_copy_gather_bytes);
    }
  }
  inputs_.resize(n_);
  init_arena();
  seg_->touch_pages(me_);
  // Rank 0's kernel_copy_bytes decides for the group; a rank whose own is 0 does not offer its
  // buffers, which turns the path off for the group at its first call (Note [Kernel copy]).
  if (seg_->header().kernel_copy_bytes != 0 && options.kernel_copy_bytes != 0) {
    kernel_copy_able_ = kernel_copy_works();
  }
  seg_->control(me_).kernel_copy_able.store(kernel_copy_able_ ? 1 : 2, std::memory_order_release);
}

ShmGroup::~ShmGroup() = default;

BackendCapabilities ShmGroup::make_capabilities(bool can_allocate) {
  BackendCapabilities c;
  c.devices = {DeviceType::kCPU};
#define BRAID_SHM_DTYPE(e, n, st, T, sz, fl) c.dtypes.push_back(DType::e);
  BRAID_FOR_EACH_DTYPE(BRAID_SHM_DTYPE)
#undef BRAID_SHM_DTYPE
  for (int k = 0; k <= static_cast<int>(CollectiveKind::kRecv); ++k) {
    c.collectives.push_back(static_cast<CollectiveKind>(k));
  }
  c.point_to_point = true;
  c.can_allocate_shared = can_allocate;
  c.runs_on_any_thread = true;  // run() finishes every call; `mu_` admits one at a time
  return c;
}

std::shared_ptr<Work> ShmGroup::run(const CollectiveDesc& desc) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (broken_) std::rethrow_exception(broken_);
    const bool reduction = desc.kind == CollectiveKind::kAllReduce ||
                           desc.kind == CollectiveKind::kReduce ||
                           desc.kind == CollectiveKind::kReduceScatter;
    // Before any step: nothing to undo. The last pair that passed is not checked again.
    if (reduction && (desc.dtype != reducible_.dtype || desc.op != reducible_.op)) {
      check_reducible(desc.dtype, desc.op);
      reducible_ = {desc.dtype, desc.op};
    }
  } catch (...) {
    return completed_work(std::current_exception());
  }
  try {
    dispatch(desc);
    return completed_work();
  } catch (const Error& e) {
    broken_ = std::current_exception();
    leave_after_error(e.kind());
  } catch (...) {
    broken_ = std::current_exception();
    leave_after_error(ErrorKind::kInternal);
  }
  return completed_work(broken_);
}

void ShmGroup::dispatch(const CollectiveDesc& desc) {
  const bool collective = desc.kind != CollectiveKind::kSend && desc.kind != CollectiveKind::kRecv;
  Call c = begin_call(desc, collective);
  // Note [Small broadcast], Note [Small reduce]: no step, so no step-call index.
  if (desc.kind == CollectiveKind::kBroadcast && small_broadcast(c)) {
    broadcast_small(c);
    return;
  }
  if (desc.kind == CollectiveKind::kReduce && small_reduce(c)) {
    reduce_small(c);
    return;
  }
  if (collective) c.step_call = ++step_calls_;
  switch (desc.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
      all_reduce(c);
      break;
    case CollectiveKind::kBroadcast:
      broadcast(c);
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      all_gather(c);
      break;
    case CollectiveKind::kReduceScatter:
      reduce_scatter(c);
      break;
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kAllToAllV:
    case CollectiveKind::kScatter:
      exchange(c);
      break;
    case CollectiveKind::kBarrier:
      barrier(c);
      break;
    case CollectiveKind::kSend:
      send(c);
      break;
    case CollectiveKind::kRecv:
      recv(c);
      break;
  }
}

Call ShmGroup::begin_call(const CollectiveDesc& desc, bool collective) {
  auto timeout = desc.timeout.count() > 0 ? desc.timeout : context_.timeout;
  if (timeout.count() <= 0) timeout = kDefaultTimeout;
  Call c{.desc = desc, .deadline = {}, .timeout = timeout, .factors = {}};
  if (collective) c.index = ++calls_;  // p2p calls do not advance the group's collectives
  return c;
}

void ShmGroup::leave_after_error(ErrorKind kind) {
  ControlBlock& mine = seg_->control(me_);
  mine.aborted.store(1 + static_cast<uint32_t>(kind), std::memory_order_seq_cst);
  for (StepLine& line : mine.step) futex_wake_all(line.epoch);
  futex_wake_all(mine.bcast.done);
  for (int j = 0; j < kBcastCells; ++j) futex_wake_all(seg_->bcast_cell(me_, j).seq);
  for (int p = 0; p < n_; ++p) {
    futex_wake_all(seg_->mailbox(me_, p).posted);
    futex_wake_all(seg_->mailbox(p, me_).taken);
  }
}

// ---- waiting -------------------------------------------------------------------------------

void ShmGroup::wait_at_least(Call& c, int peer, std::atomic<uint32_t>& word,
                             std::atomic<uint32_t>& waiters, uint32_t target, bool eager) {
  auto reached = [&](uint32_t v) { return static_cast<int32_t>(v - target) >= 0; };
  if (reached(word.load(std::memory_order_acquire))) return;
  // A peer in step with this rank arrives within a few hundred ns: poll before the first
  // clock read, which costs more than the wait it would time.
  if (n_ <= usable_cpus()) {
    // Eager: no pause for the first polls, for a word whose line holds all the peer writes
    // (a step's message in the step line, a small call's cell): a pause costs tens of cycles,
    // which is most of the wait when the peer is in step (16-byte all_reduce, 2 ranks: 0.20
    // against 0.22 us). Else a pause from the first poll: polls back to back take the line
    // from a writer that has stored to it and still waits for its other lines (its area),
    // which must then fetch it again for the ready word (2 ranks, 64 B-4 KiB all_reduce,
    // all_gather and reduce_scatter, 1.11-1.22x; docs/performance.md, "The call key in the
    // step line").
    // Two loops, so that the eager one, the small calls' (0.1 us), stays as tight as before.
    if (eager) {
      for (int i = 0; i < kPollsBeforeClock; ++i) {
        if (i >= kPollsWithoutPause) cpu_relax();
        if (reached(word.load(std::memory_order_acquire))) return;
      }
    } else {
      for (int i = 0; i < kPollsBeforeClock; ++i) {
        cpu_relax();
        if (reached(word.load(std::memory_order_acquire))) return;
      }
    }
  }
  const auto start = std::chrono::steady_clock::now();
  // The deadline runs from the call's first wait for a peer: what comes before is this rank's
  // own copying, and reading the clock at every call would cost a fair part of a small one.
  if (c.deadline == std::chrono::steady_clock::time_point{}) c.deadline = start + c.timeout;
  // With more ranks than CPUs the awaited peer may need this very core: no pause loop. Else
  // spin up to spin_ns_, which adapts: it doubles (up to kSpinTime) when a spin sees the peer
  // arrive and halves when it runs out, so a peer kept off its core by other processes soon
  // costs a yield instead of a whole spin.
  if (n_ <= usable_cpus() && spin_ns_ > 0) {
    const auto spin = std::chrono::nanoseconds(spin_ns_);
    for (auto now = start; now - start < spin; now = std::chrono::steady_clock::now()) {
      for (int i = 0; i < kPollsPerClockRead; ++i) {
        if (reached(word.load(std::memory_order_acquire))) {
          spin_ns_ = std::min<int64_t>(2 * spin_ns_, kSpinTime.count() * 1000);
          return;
        }
        cpu_relax();
      }
    }
    spin_ns_ = std::max<int64_t>(spin_ns_ / 2, kMinSpin.count());
  }
  // The peer is late: say whom this rank waits for, until it returns or throws (a peer whose
  // own wait for this rank times out names the chain; fail_wait).
  struct Published {
    std::atomic<int32_t>& word;
    ~Published() { word.store(0, std::memory_order_relaxed); }
  } published{seg_->control(me_).waits_for};
  published.word.store(peer + 1, std::memory_order_relaxed);
  // Maybe it waits for a core this rank holds. Yielding hands the core over when something
  // else is runnable on it and returns at once when not (then it is a spin).
  for (auto now = start; now - start < kYieldTime; now = std::chrono::steady_clock::now()) {
    if (reached(word.load(std::memory_order_acquire))) return;
    sched_yield();
  }
  while (true) {
    const uint32_t v = word.load(std::memory_order_acquire);
    if (reached(v)) return;
    if (c.index != 0) check_crossed_calls(c);  // before `aborted`: name the mismatch itself
    for (int p = 0; p < n_; ++p) {
      const uint32_t aborted = seg_->control(p).aborted.load(std::memory_order_acquire);
      if (p != me_ && aborted != 0) {
        if (reached(word.load(std::memory_order_acquire))) return;  // as below, for an exit
        fail_if_a_peer_exited(c);  // name the cause, not the rank that saw it first
        // The missing rank is still `peer`, the one this wait is for, not p: a recv from K
        // that sees an uninvolved rank give up must still say it waits for K (a collective
        // recomputes the list from the step epochs; a p2p call reports this hint).
        fail_wait(c, ErrorKind::kPeerLost,
                  "group rank " + std::to_string(p) + " (world rank " +
                      std::to_string(context_.global_ranks[p]) + ") left the group after a " +
                      std::string(to_string(static_cast<ErrorKind>(aborted - 1))) + " error",
                  {peer});
      }
    }
    const int32_t pid = seg_->control(peer).pid.load(std::memory_order_acquire);
    if (!watch_.alive(peer, pid, seg_->control(peer).pid_ns.load(std::memory_order_relaxed))) {
      // The peer may have published this step and then exited (a rank leaving a barrier it
      // completed) between the load above and the liveness check: look once more.
      if (reached(word.load(std::memory_order_acquire))) return;
      fail_wait(c, ErrorKind::kPeerLost,
                "the process of group rank " + std::to_string(peer) + " (pid " +
                    std::to_string(pid) + ") has exited",
                {peer});
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= c.deadline) {
      fail_wait(c, ErrorKind::kTimeout,
                "timed out after " + std::to_string(c.timeout.count()) + " ms", {peer});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now);
    waiters.fetch_add(1, std::memory_order_seq_cst);
    if (word.load(std::memory_order_seq_cst) == v) {
      futex_wait(word, v, std::min(kSlice, left + std::chrono::milliseconds(1)));
    }
    waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ShmGroup::fail_if_a_peer_exited(Call& c) {
  for (int p = 0; p < n_; ++p) {
    // A rank that left after an error may have exited since: the cause is one that did not.
    if (p == me_ || seg_->control(p).aborted.load(std::memory_order_acquire) != 0) continue;
    const int32_t pid = seg_->control(p).pid.load(std::memory_order_acquire);
    if (!watch_.alive(p, pid, seg_->control(p).pid_ns.load(std::memory_order_relaxed))) {
      fail_wait(c, ErrorKind::kPeerLost,
                "the process of group rank " + std::to_string(p) + " (pid " + std::to_string(pid) +
                    ") has exited",
                {p});
    }
  }
}

void ShmGroup::wait_all(Call& c, uint32_t target, bool eager) {
  c.target = target;
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    StepLine& line = step_line(p);
    wait_at_least(c, p, line.epoch, line.waiters, target, eager);
  }
}

void ShmGroup::fail_wait(Call& c, ErrorKind kind, const std::string& why,
                         const std::vector<int>& missing_hint) {
  std::vector<int> missing = missing_hint;
  if (c.index != 0 && !c.small) {  // a step: name every rank that has not arrived
    missing.clear();
    const uint32_t target = c.target;
    for (int p = 0; p < n_; ++p) {
      const uint32_t e = step_line(p).epoch.load(std::memory_order_acquire);
      if (p != me_ && static_cast<int32_t>(e - target) < 0) missing.push_back(p);
    }
    if (missing.empty()) missing = missing_hint;
  } else if (c.index != 0 && c.waits_done) {
    // A small call's wait for every rank's `done` (a writer about to reuse its ring, a reduce's
    // contributor whose arena buffer the root reads): name every rank behind. The first one
    // alone may be a rank that waits itself, and that has given up by now (a reduce's root,
    // for a stopped contributor: the kill soak).
    missing.clear();
    for (int p = 0; p < n_; ++p) {
      const uint32_t done = seg_->control(p).bcast.done.load(std::memory_order_acquire);
      if (p != me_ && static_cast<int32_t>(done - c.target) < 0) missing.push_back(p);
    }
    if (missing.empty()) missing = missing_hint;
  }
  detail::throw_error(kind,
                      detail::concat("shm: ", describe_call(c), ": ", why, "; waiting for ",
                                     ranks_text(missing), waits_of(missing)),
                      std::source_location::current());
}

// What the missing ranks themselves wait for, as they published it (ControlBlock::waits_for):
// a rank stopped or stuck elsewhere keeps a chain of live ranks waiting, and only the first
// link is missing from the waiter's own view (the kill soak: rank 3 in a recv from a stopped
// rank 2, ranks 0 and 1 in a broadcast that rank 3 has not reached). Read racily: a rank may
// move on meanwhile, and the text is only a diagnosis.
std::string ShmGroup::waits_of(const std::vector<int>& missing) const {
  auto name = [&](int p) {
    return "group rank " + std::to_string(p) + " (world rank " +
           std::to_string(context_.global_ranks[p]) + ")";
  };
  std::string out;
  for (const int first : missing) {
    std::vector<bool> seen(static_cast<size_t>(n_), false);
    seen[static_cast<size_t>(me_)] = seen[static_cast<size_t>(first)] = true;
    std::string chain;
    for (int p = first;;) {
      const int32_t q = seg_->control(p).waits_for.load(std::memory_order_relaxed) - 1;
      if (q < 0 || q >= n_ || seen[static_cast<size_t>(q)]) break;
      chain += (chain.empty() ? "; " + name(p) + " waits for " : ", which waits for ") + name(q);
      seen[static_cast<size_t>(q)] = true;
      p = q;
    }
    out += chain;
  }
  return out;
}

std::string ShmGroup::describe_call(const Call& c) const {
  std::ostringstream out;
  out << collective_name(c.desc.kind) << " (seq " << c.desc.seq;
  if (c.index != 0) out << ", group call #" << c.index;
  if (c.desc.kind == CollectiveKind::kSend || c.desc.kind == CollectiveKind::kRecv) {
    out << ", peer " << c.desc.peer << ", tag " << c.desc.tag;
  }
  out << ") on group rank " << me_ << " (world rank " << context_.global_ranks[me_] << ")";
  return out.str();
}

std::string ShmGroup::ranks_text(const std::vector<int>& ranks) const {
  std::ostringstream out;
  out << "group ranks [";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << "] (world ranks [";
  for (size_t i = 0; i < ranks.size(); ++i) {
    out << (i ? ", " : "") << context_.global_ranks[ranks[i]];
  }
  out << "])";
  return out.str();
}

}  // namespace shm
}  // namespace braid
