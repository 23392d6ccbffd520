// ShmGroup: the shm Backend of one group. shm_backend.cc holds the rendezvous, the waits, the
// step protocol and the cross-rank check; shm_collectives.cc the collective algorithms;
// shm_p2p.cc send / recv through the pair mailboxes; shm_arena.cc allocate / release of the
// per-rank arena and shm_zerocopy.cc the collectives that read peers' arena buffers in place.
//
// Note [Step protocol]
// Every collective is a sequence of steps. Step s (counted over the group's life) stages data
// in a region of each rank's slot, its "area", and uses step line s % 2 of each control block:
//   1. write: fill my area (a message of up to kInlineBytes: my step line),
//   2. (first step of a call) publish the call: in full in my step call, its key in my step
//      line (Note [Call key], shm_check.cc),
//   3. epoch = s+1 (ready), wait until every rank's epoch >= s+1,
//   4. (first step of a call) compare the keys every rank published (the cross-rank check),
//   5. read: any rank's area, into the caller's buffers.
// The key goes after the write, just before the epoch in the same line: a peer polling that
// line takes it back at each store to it, and with the key first the epoch store waited for the
// line a second time whenever the write went to my area (2 ranks, 128-256 B all_reduce: 0.51-
// 0.54 us a call, 0.40-0.42 with the key after; docs/performance.md, "The call key in the step
// line").
// No wait precedes the write. A peer publishes ready for step s-1 only after its read of step
// s-2, and I waited for that in step s-1: so whatever I write must only avoid what peers may
// still read, the areas of steps s-1 and (for the results a step leaves for the next one)
// s-2, and step line s-1. Likewise a read of step s starts only after every peer finished
// reading step s-1. So a step costs one store and one wait, and a small collective one
// exchange of cache lines. Where a call must know that its peers finished reading (zero-copy:
// they read the caller's own buffers) it ends with one more, empty step.
//
// The areas go round the slot as a ring (Note [Staging ring]); every rank computes the same
// sequence of regions from the same sequence of step sizes, which the cross-rank check keeps
// equal. A peer can publish call k+1 while I still check call k, never call k+2 (that needs my
// ready of a step of call k+1, published after my check of call k): hence two copies of the
// call words. k counts the calls that take steps: a peer may be any number of small broadcasts
// ahead, which take none (Note [Small broadcast], shm_broadcast.cc).
//
// Note [Staging ring]
// Rewriting a line that a peer has just read is slow on some machines: the write must first
// invalidate the peer's copy (measured on the development VM: 9 GB/s into a 64 KiB area the
// peer had read, 32 GB/s once the area rotated through 4 MiB; docs/shm.md). So consecutive
// steps take consecutive regions of the slot and wrap around; a step takes at most a quarter
// of the ring, which keeps the regions of three consecutive steps disjoint. Small steps (at
// most 4 KiB) have a ring of their own, 16 KiB after the slot: for them a few lines
// that stay in both ranks' caches cost less than cold ones (a 1 KiB all_reduce took 1.2 us
// through the large ring, 0.3 us through a reused area). Steps of at most 66 KiB have the
// middle ring, 264 KiB after that: few enough pages that they stay in use (66, not 64: a
// reduce_scatter of 64 KiB in all stages n blocks, each rounded up to whole lines, 65,600 bytes
// a step at 5 ranks, which went to the large ring). On the VM measured,
// a page left untouched for a while costs up to hundreds of microseconds at its next access,
// with no fault in the guest (the host's doing; docs/shm.md, "Staging ring"): through the
// large ring a 2-rank reduce_scatter of 16 KiB after a few seconds of larger calls took 17-85
// us a call for the ring's first turn, through the middle ring 1.6-1.8 us.
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "braid/comm/backend.h"
#include "braid/core/cpu_features.h"
#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "fold.h"
#include "shm_backend.h"
#include "shm_segment.h"

namespace braid::shm {

struct Call {
  const CollectiveDesc& desc;
  std::chrono::steady_clock::time_point deadline;  // set at the call's first wait
  std::chrono::milliseconds timeout;
  uint64_t index = 0;  // collectives this rank entered, this one included
  // Step-protocol collectives this rank entered, this one included (small broadcasts and
  // reduces do not count): the parity of the call words (Note [Small broadcast]).
  uint64_t step_call = 0;
  // On the small-call path (Note [Small broadcast], Note [Small reduce]), as small call number
  // `small_index`.
  bool small = false;
  uint32_t small_index = 0;
  // In wait_bcast_done: waiting for every other rank's `done` to reach `target`.
  bool waits_done = false;
  bool first_step = true;
  uint32_t target = 0;          // the epoch being waited for (error messages)
  std::vector<double> factors;  // premul_sum: every rank's factor, after the first step
  // Where this rank's buffers lie in its arena (published at the first step), -1: outside.
  int64_t send_off = -1, recv_off = -1;
  // Note [Zero-copy decision] (shm_zerocopy.cc).
  bool zc_candidate = false;  // the call may take the zero-copy path
  bool zc_mine = false;       // this rank's buffers qualify: its first step stages nothing
  bool zc_taken = false;      // every rank's buffers qualify: the zero-copy path runs
  bool zc_repeat = false;     // some ranks staged nothing but not all qualify: start again
  // Note [Kernel copy] (shm_zerocopy.cc): this rank offers its buffers to process_vm_readv,
  // and (after the first step) every rank does.
  bool kc_tried = false;  // tries_kernel_copy(), decided once at the call's start
  bool kc_mine = false;
  bool kc_declined = false;  // could, but its buffers are on 4 KiB pages (kKernelCopyPagedBytes)
  bool kc_all = false;
  bool kc_used = false;  // this rank copied through the kernel in this call
  bool stop() const { return zc_taken || zc_repeat; }
};

// The largest result (bytes a rank writes) read with the kernel copy when the group has more
// ranks than rank 0 has CPUs, and when it has more than twice as many (Note [Kernel copy]).
inline constexpr uint64_t kKernelCopyLimitShared = uint64_t{32} << 20;
inline constexpr uint64_t kKernelCopyLimitCrowded = uint64_t{2} << 20;
// The smallest message (bytes per rank) read with it in the latter case.
inline constexpr uint64_t kKernelCopyBytesCrowded = uint64_t{64} << 10;
// The smallest all_reduce / reduce_scatter message (bytes per rank) for which a rank whose
// buffers are not on huge pages declines the kernel copy for the call (Note [Kernel copy]).
inline constexpr uint64_t kKernelCopyPagedBytes = uint64_t{8} << 20;

// Into the caller's result buffer: with streaming stores when the message is large (its lines
// would only evict the areas the next steps need).
inline void copy_out(void* dst, const void* src, int64_t bytes, bool stream) {
  if (bytes <= 0 || dst == src) return;
  if (stream) {
    static const auto copy_nt = kernels::kernels_for(kCPU).copy_nontemporal;
    copy_nt(dst, src, bytes);
  } else {
    fast_copy(dst, src, static_cast<size_t>(bytes));
  }
}

// Asks for the cache line at p to be owned by this core before the stores that will write it, so
// they do not wait for the line to come from a peer's cache while a later fence (the ready
// word's seq_cst publish) holds the caller up. Used where this rank writes the same lines call
// after call and knows the next one early: the root of back-to-back small broadcasts (docs/shm.md,
// "Small broadcasts"). A hint: GCC's write prefetch (a plain prefetch without -mprfchw) where cpuid
// lacks PREFETCHW.
inline void prefetch_for_write(const void* p) {
#if defined(__x86_64__)
  static const bool prefetchw = cpu_features().prefetchw;
  if (prefetchw) {
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
    return;
  }
#endif
  __builtin_prefetch(p, 1, 3);
}

// Steps to move `elems` in chunks of `chunk`; at least one, so every call meets the check.
inline int64_t steps_for(int64_t elems, int64_t chunk) {
  return std::max<int64_t>(1, (elems + chunk - 1) / chunk);
}

class ShmGroup final : public Backend {
 public:
  ShmGroup(const BackendContext& context, const ShmOptions& options);
  ~ShmGroup() override;

  std::string_view name() const override { return "shm"; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::shared_ptr<Work> run(const CollectiveDesc& desc) override;
  // 64-byte aligned blocks of this rank's arena (shm_arena.cc). kOutOfMemory when full.
  void* allocate(size_t bytes) override;
  void release(void* ptr) override;
  // Collectives that took the zero-copy path (tests and benchmarks look at it), and those of
  // them that read a peer's ordinary buffer with process_vm_readv (Note [Kernel copy]).
  uint64_t zero_copy_calls() const { return zero_copy_calls_.load(std::memory_order_relaxed); }
  uint64_t kernel_copy_calls() const { return kernel_copy_calls_.load(std::memory_order_relaxed); }
  // Broadcasts that took the small-broadcast path (on the calling rank's thread), and the
  // largest the group lets take it (rank 0's bcast_bytes or bcast_shared_bytes).
  uint32_t small_broadcasts() const { return bcasts_ - small_reduces_; }
  uint64_t small_broadcast_limit() const { return seg_->header().bcast_bytes; }
  // Reduces that took the small-reduce path, and the largest the group lets take it (rank 0's
  // reduce_bytes).
  uint32_t small_reduces() const { return small_reduces_; }
  uint64_t small_reduce_limit() const { return seg_->header().reduce_bytes; }
  // Of them, those this rank contributed to from its arena, read there by the root.
  uint32_t small_reduces_from_arena() const { return small_reduces_from_arena_; }
  // Of them, those this rank was the root of whose message went into data slots (more than
  // kBcastInlineBytes).
  uint32_t small_broadcasts_in_slots() const { return bcast_slot_messages_; }
  // Of them, those this rank was the root of whose receivers read the message in its own
  // buffer (Note [Small broadcast by reference]).
  uint32_t small_broadcasts_by_reference() const { return bcast_ref_messages_; }
  // The data slot after the root's latest message.
  uint32_t small_broadcast_next_slot() const { return bcast_next_slot_; }
  // Where the calling rank's latest step staged: its region's offset from the start of the
  // rank's slot region (Note [Staging ring]).
  uint64_t staging_offset() const { return region_; }

 private:
  void dispatch(const CollectiveDesc& desc);
  Call begin_call(const CollectiveDesc& desc, bool collective);
  void leave_after_error(ErrorKind kind);

  // ---- waiting (shm_backend.cc) ----
  // Waits until `word` (rank `peer`'s) reaches `target`, wrap-safe. Throws kTimeout,
  // kPeerLost (peer gone or left after an error) naming the call and the missing ranks.
  // Eager: poll without a pause at first, for a word in the line that holds all the peer writes.
  void wait_at_least(Call& c, int peer, std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiters,
                     uint32_t target, bool eager = true);
  void wait_all(Call& c, uint32_t target, bool eager = true);
  // Throws kPeerLost naming the first peer whose process has exited without leaving the group
  // after an error (the cause of a failure others saw first), if any.
  void fail_if_a_peer_exited(Call& c);
  [[noreturn]] void fail_wait(Call& c, ErrorKind kind, const std::string& why,
                              const std::vector<int>& missing);
  std::string describe_call(const Call& c) const;
  // "; group rank p (world rank P) waits for group rank q (world rank Q)[, which waits for ...]"
  // for each missing rank that published a wait (ControlBlock::waits_for), else "".
  std::string waits_of(const std::vector<int>& missing) const;
  std::string ranks_text(const std::vector<int>& ranks) const;

  // ---- Note [Step protocol] ----
  // `bytes`: what this step stages in each area (every rank passes the same).
  template <class Write, class Read>
  void step(Call& c, uint64_t bytes, Write&& write, Read&& read) {
    line_ = epoch_ & 1;
    next_region(bytes);
    if (!(c.first_step && c.zc_mine)) write();
    if (c.first_step) publish_call(c);
    StepLine& mine = step_line(me_);
    publish_word(mine.epoch, mine.waiters, ++epoch_);
    wait_all(c, epoch_, bytes == 0);  // eager where nothing is staged in the areas
    const bool first = c.first_step;
    if (first) verify_call(c);
    c.first_step = false;
    if (first && c.zc_candidate && resolve_zero_copy(c)) return;
    read();
  }
  void publish_call(Call& c);
  void verify_call(Call& c);
  // Rank p's key differs from this rank's: throws the mismatch it stands for.
  [[noreturn]] void fail_verify(const Call& c, int p);
  // Rank p's step line and step call for the current step, and its words for call c.
  StepLine& step_line(int p) const { return seg_->control(p).step[line_]; }
  StepCall& step_call(int p) const { return seg_->control(p).step_call[line_]; }
  CallWords& call_words(int p, const Call& c) const {
    return seg_->control(p).call[c.step_call & 1];
  }
  // Rank p's area for the current step and for the step before (Note [Staging ring]).
  uint8_t* area(int p) const { return seg_->slot(p) + region_; }
  uint8_t* prev_area(int p) const { return seg_->slot(p) + prev_region_; }
  // Moves to the next region of the ring for a step that stages `bytes` (<= area_bytes_).
  void next_region(uint64_t bytes) {
    const uint64_t size = (bytes + 63) & ~uint64_t{63};
    prev_region_ = region_;
    uint64_t* pos = &ring_pos_;
    uint64_t begin = 0, end = ring_end_;
    if (size <= small_ring_ / 4) {
      pos = &small_pos_, begin = ring_end_, end = begin + small_ring_;
    } else if (size <= middle_ring_ / 4) {
      pos = &middle_pos_, begin = ring_end_ + small_ring_, end = begin + middle_ring_;
    }
    if (*pos < begin || *pos + size > end) *pos = begin;
    region_ = *pos;
    *pos += size;
  }
  // Where rank p stages `bytes` for the current step: the step line itself when they fit
  // (kInlineBytes; one cache line then carries the call's key, the data and the ready word),
  // else its area. Every rank of a step stages the same size, so all agree.
  uint8_t* staging(int p, int64_t bytes) const {
    return bytes <= kInlineBytes ? step_line(p).data : area(p);
  }
  // The area a step that stages `bytes` through staging() needs.
  static uint64_t area_size(int64_t bytes) {
    return bytes <= kInlineBytes ? 0 : static_cast<uint64_t>(bytes);
  }

  // ---- collectives (shm_collectives.cc) ----
  void all_reduce(Call& c);  // also kReduce
  // The Folder for call c's reduction: the last call's when it serves the same dtype, op and
  // group (every call but kPremulSum's), else a new one, kept for the next call. Its block
  // buffers live in fold_scratch_.
  Folder& folder_for(const Call& c);
  void reduce_one_shot(Call& c);
  void reduce_two_shot(Call& c);
  void broadcast(Call& c);
  // ---- Note [Small broadcast] (shm_broadcast.cc) ----
  // Whether the call takes it: decided from the call and the segment's header alone, so every
  // rank decides alike.
  bool small_broadcast(const Call& c) const;
  void broadcast_small(Call& c);
  // Note [Small reduce] (shm_broadcast.cc): likewise.
  bool small_reduce(const Call& c) const;
  void reduce_small(Call& c);
  // Whether a call of `bytes` that the zero-copy or kernel-copy path would take keeps it.
  bool small_keeps_zero_copy(const Call& c, uint64_t bytes) const;
  // Writes `bytes` at `src` as this rank's message of small call c (a broadcast it is the root
  // of, or its contribution to a reduce) into its cell c.small_index % kBcastCells and data
  // slots, after the waits that let it reuse them, and publishes the cell. By reference
  // (Note [Small broadcast by reference]) where `may_refer` and the buffer qualifies: returns
  // whether it did. `arena_off` >= 0: the message lies there in this rank's arena, and the
  // readers read it in place (a reduce's contribution; Note [Small reduce]).
  bool write_small(Call& c, const void* src, int64_t bytes, bool may_refer, int64_t arena_off = -1);
  // Every rank's end of a small call: the count, the digest and `done`.
  void finish_small(const Call& c);
  // Waits until every other rank completed small call `done` - 1 (wrap-safe).
  void wait_bcast_done(Call& c, uint32_t done);
  // Whether every other rank has completed small call `done` - 1, without waiting.
  bool bcast_done_now(uint32_t done);
  void publish_bcast_record(const Call& c);
  // Whether the root's receivers read `bytes` at `buf` in place (Note [Small broadcast by
  // reference]): decided by the root alone.
  bool bcast_by_reference(const void* buf, int64_t bytes);
  // A reader's check of the cell `writer` wrote (a broadcast's root, a reduce's contributor):
  // kInvalidArgument naming both calls.
  void verify_bcast_cell(const Call& c, int writer, const BcastCell& cell);
  // Between the futex slices of a wait: a peer that made another call where this rank makes a
  // small call, or a small call where this rank makes a step-protocol call, never arrives;
  // kInvalidArgument naming both calls (shm_check.cc).
  void check_crossed_calls(const Call& c);
  void all_gather(Call& c);  // also kGather
  void reduce_scatter(Call& c);
  // Their paths through the staging areas (with_zero_copy runs them).
  void broadcast_slots(Call& c);
  void all_gather_slots(Call& c);
  void reduce_scatter_slots(Call& c);
  void exchange(Call& c);  // all_to_all, all_to_all_v, scatter
  void exchange_slots(Call& c);
  void barrier(Call& c);
  // bytes of a sub-slot (the largest area split into n parts, 8-byte aligned)
  uint64_t sub_slot_bytes() const;
  // Elements per pipelined step: at most `capacity_elems` (what fits the area) and the
  // segment's chunk_bytes.
  int64_t chunk_elems(int64_t capacity_elems, int64_t es) const;

  // ---- zero-copy (shm_arena.cc, shm_zerocopy.cc) ----
  static BackendCapabilities make_capabilities(bool can_allocate);
  void init_arena();
  // Byte offset of [p, p + bytes) in this rank's arena when it lies inside one allocated
  // block, else -1.
  int64_t arena_offset(const void* p, int64_t bytes);
  // Runs `slot_path` (the collective through the staging areas), whose first step switches
  // to the zero-copy path when every buffer the call reads lies in an arena.
  template <class SlotPath>
  void with_zero_copy(Call& c, SlotPath&& slot_path) {
    zero_copy_candidate(c);
    slot_path();
    if (c.zc_taken) {
      finish_zero_copy(c);
    } else if (c.zc_repeat) {
      c.zc_candidate = c.zc_mine = c.zc_repeat = false;
      slot_path();
    }
  }
  void zero_copy_candidate(Call& c);
  // After the first step's ready wait: true when the step's read is replaced (zero-copy taken,
  // or the slot path must start again).
  bool resolve_zero_copy(Call& c);
  void finish_zero_copy(Call& c);
  // Rank p's buffers can be read in place: they lie in its arena, or every rank offers its
  // buffers to process_vm_readv.
  bool qualifies(const Call& c, int p) const;
  bool in_arena(const Call& c, int p) const;  // rank p's buffers lie in its arena
  bool zero_copy_eligible(const Call& c) const;
  void zero_copy_first(Call& c);
  void zero_copy_gather_stripes(Call& c);
  // Rank p's send / recv buffer where this rank can address it (its own buffer, or a peer's
  // in the mapped arena); nullptr when it must be read with read_peer().
  const uint8_t* peer_buffer(const Call& c, int p, bool recv) const;
  // Copies `bytes` at `offset` of rank p's send / recv buffer into `dst`: memcpy where
  // peer_buffer() addresses it, else process_vm_readv.
  void read_peer(Call& c, int p, bool recv, int64_t offset, int64_t bytes, void* dst);
  // Copies `bytes` from `src` to `offset` of rank p's recv buffer with process_vm_writev.
  void write_peer(Call& c, int p, int64_t offset, int64_t bytes, const void* src);
  // process_vm_readv / writev between `mine` and rank p's send / recv buffer at `offset`;
  // errors name the peer (a peer that exited: kPeerLost).
  void kernel_copy(Call& c, int p, bool recv, int64_t offset, int64_t bytes, void* mine,
                   bool write);
  // The same at address `base` of rank p's memory.
  void kernel_copy_at(Call& c, int p, uint64_t base, int64_t bytes, void* mine, bool write);
  [[noreturn]] void kernel_copy_failed(Call& c, int p, int32_t pid, bool write, int64_t bytes,
                                       int err);
  bool tries_kernel_copy(const Call& c) const;
  // Whether this process may read its peers' memory with process_vm_readv (Note [Kernel copy]).
  static bool kernel_copy_works();

  // ---- point to point (shm_p2p.cc) ----
  void send(Call& c);
  void recv(Call& c);

  BackendContext context_;
  int me_ = 0, n_ = 1;
  std::unique_ptr<Segment> seg_;
  PeerWatch watch_;
  uint32_t epoch_ = 0;
  uint64_t area_bytes_ = 0;  // the most a step stages: a quarter of the large ring
  // Note [Staging ring]: [0, ring_end_) of every slot region is the large ring,
  // [ring_end_, ring_end_ + small_ring_) the small one and the middle_ring_ bytes after it the
  // middle one (each for steps of at most a quarter of it); *_pos_ is where each ring's next
  // region starts.
  uint64_t small_ring_ = 0, middle_ring_ = 0, ring_end_ = 0;
  uint64_t small_pos_ = 0, middle_pos_ = 0, ring_pos_ = 0;
  uint64_t region_ = 0, prev_region_ = 0;  // the current and the previous step's regions
  int line_ = 0;                           // the current step's line (its parity)
  std::vector<uint8_t> fold_scratch_;      // Folder's block buffers, kept across calls
  std::optional<Folder> folder_;           // the last call's Folder (folder_for)
  struct {
    DType dtype = DType::kF32;
    ReduceOp op = ReduceOp::kSum;    // f32 sum is reducible
  } reducible_;                      // the last (dtype, op) check_reducible passed
  uint64_t folder_call_ = 0;         // the group call index folder_ was made for
  uint64_t zc_floor_bytes_ = 0;      // messages below it never try zero-copy or the kernel copy
  std::vector<const void*> inputs_;  // a fold's n input pointers, kept across calls
  int64_t spin_ns_ = 20000;          // the adaptive spin budget (wait_at_least)
  uint64_t calls_ = 0;
  uint64_t step_calls_ = 0;
  // Note [Small broadcast]: how many this rank made, the least `done` of the peers it last saw,
  // and a digest of their calls (published with the next step-protocol call).
  uint32_t bcasts_ = 0;         // small calls: broadcasts and reduces
  uint32_t small_reduces_ = 0;  // of them, reduces
  uint32_t small_reduces_from_arena_ = 0;
  uint32_t bcast_seen_done_ = 0;
  // This rank's data slots as a root: the next one, and the broadcast that used each last.
  uint32_t bcast_next_slot_ = 0;
  uint32_t bcast_check_slot_ = kBcastCheckSlots;  // where next to look for caught-up receivers
  uint32_t bcast_slot_messages_ = 0;              // small_broadcasts_in_slots()
  uint32_t bcast_slot_user_[kBcastSlots] = {};
  bool bcast_slot_used_[kBcastSlots] = {};
  uint64_t bcast_digest_ = 0;
  uint32_t bcast_ref_messages_ = 0;  // small_broadcasts_by_reference()
  // Whether every rank offers process_vm_readv: 0 not yet known, 1 yes, -1 no.
  int bcast_ref_group_ = 0;
  std::mutex mu_;              // one call at a time on this backend
  std::exception_ptr broken_;  // the error that left this group unusable
  BackendCapabilities caps_;
  std::atomic<uint64_t> zero_copy_calls_{0};
  std::atomic<uint64_t> kernel_copy_calls_{0};
  bool kernel_copy_able_ = false;        // kernel_copy_works(), when the group enables it
  bool kernel_copy_off_ = false;         // a rank could not offer it: the group stops trying
  std::vector<uint8_t> peer_scratch_;    // kernel-copied chunks of peers' buffers for a fold
  std::mutex arena_mu_;                  // allocate / release may come from any thread
  std::map<uint64_t, uint64_t> free_;    // offset -> bytes, coalesced
  std::map<uint64_t, uint64_t> blocks_;  // handed out: offset -> bytes
};

}  // namespace braid::shm
