// The shm backend's shared segment (docs/shm.md, "Segment layout"): one POSIX shared-memory
// object per group holding a header, a control block per rank (futex words, the published
// call for the cross-rank check), a staging slot per rank and a mailbox per ordered pair of
// ranks for send / recv, then one arena per rank (shared buffers that collectives read in
// place; docs/shm.md, "Zero-copy buffers"). Also the waiting primitives: futex wait / wake on words
// of the segment and the liveness check of the process behind a rank.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid::shm {

inline constexpr uint32_t kMagic = 0x62726d73;  // "brms"
inline constexpr uint32_t kVersion = 13;        // 13: the call key in the step line

struct alignas(64) SegmentHeader {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint32_t nranks = 0;
  uint32_t algo = 0;  // ShmAlgo forced by rank 0's options (0: auto)
  uint64_t slot_bytes = 0;
  uint64_t mailbox_bytes = 0;
  uint64_t oneshot_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t arena_bytes = 0;        // per rank, a multiple of the page size (0: no arenas)
  uint64_t zerocopy_bytes = 0;     // smallest message that tries the zero-copy path
  uint64_t chunk_bytes = 0;        // most bytes of a message per pipelined step
  uint64_t nontemporal_bytes = 0;  // smallest result written with streaming stores
  uint64_t kernel_copy_bytes = 0;  // smallest message read from peers by process_vm_readv (0: off)
  uint64_t kernel_copy_limit = 0;  // largest result a rank writes with it (0: no limit)
  uint64_t bcast_bytes = 0;        // largest broadcast of the small-broadcast path (0: off)
  // all_gather / gather's own kernel_copy_bytes where it is lower (0: the same as the others)
  uint64_t kernel_copy_gather_bytes = 0;
  uint64_t reduce_bytes = 0;        // largest reduce of the small-reduce path (0: off)
  std::atomic<uint32_t> mapped{0};  // ranks that mapped the segment; the last one unlinks it
};

// The two rings that follow each rank's slot (Note [Staging ring], shm_group.h): the small
// one, 16 KiB, and the middle one, 264 KiB (steps of up to 66 KiB: a reduce_scatter of 64 KiB
// in n blocks of whole lines, up to 32 ranks), each a quarter of the slot where that is smaller.
inline uint64_t small_ring_bytes(uint64_t slot_bytes) {
  return std::min<uint64_t>(16384, slot_bytes / 4) & ~uint64_t{63};
}
inline uint64_t middle_ring_bytes(uint64_t slot_bytes) {
  return std::min<uint64_t>(4 * (65536 + 2048), slot_bytes / 4) & ~uint64_t{63};
}
// A rank's slot region: the large ring (slot_bytes), then the small and the middle ring.
inline uint64_t slot_region_bytes(uint64_t slot_bytes) {
  return slot_bytes + small_ring_bytes(slot_bytes) + middle_ring_bytes(slot_bytes);
}

// Bytes of a message small enough to travel in the step line itself (StepLine::data).
inline constexpr int64_t kInlineBytes = 48;

// One per rank and step parity (Note [Step protocol]): the ready word of the steps of that
// parity and what the peers read right after waiting on it, in the same cache line, so a
// small collective moves one line per rank: the key of the call (written at its first step;
// the cross-rank check compares the keys, call_key in shm_check.cc) and a message of up to
// kInlineBytes. The call itself, in full, is in the rank's StepCall of the same parity.
struct alignas(64) StepLine {
  std::atomic<uint32_t> epoch{0};  // s+1 once this rank is ready for step s (of this parity)
  std::atomic<uint32_t> waiters{0};
  uint64_t key = 0;
  alignas(16) uint8_t data[kInlineBytes] = {};  // a message of up to kInlineBytes
};
static_assert(offsetof(StepLine, data) == 16);
static_assert(sizeof(StepLine) == 64);

// The call behind a step line's key, written with it: read where the keys differ (to name both
// calls) and by a waiting peer's check (check_crossed_calls), not on the way of a call the
// ranks agree on, so its line stays in its writer's cache.
struct alignas(64) StepCall {
  uint64_t call_index = 0;  // collectives entered by this rank (p2p excluded)
  uint64_t seq = 0;         // the front's sequence number
  int64_t count = 0;
  uint8_t kind = 0, dtype = 0, op = 0, pad = 0;
  int32_t root = 0;
  // Digest of the small broadcasts (Note [Small broadcast]) this rank made before this call:
  // published with the call and compared by the cross-rank check.
  uint64_t bcast_digest = 0;
};
static_assert(sizeof(StepCall) == 64);

// Note [Small broadcast] (shm_broadcast.cc): each rank's ring of kBcastCells cells, the one the
// rank writes as the root of broadcast b (or a contributor to reduce b, Note [Small reduce])
// being cell b % kBcastCells, b counting both kinds. A cell carries up to
// kBcastInlineBytes inside it (two cache lines); a larger message (up to kBcastMaxBytes) goes
// into consecutive data slots of the rank's kBcastSlots, the first of which the cell names.
inline constexpr int kBcastCells = 256;
inline constexpr int kBcastSlots = 256;
inline constexpr int64_t kBcastCellBytes = 4096;
// The largest message of the path: a quarter of the data slots, so that a root still finds
// slots its receivers have read while the latest messages are being read.
inline constexpr int64_t kBcastMaxBytes = kBcastSlots / 4 * kBcastCellBytes;
// A small reduce (Note [Small reduce], shm_broadcast.cc) larger than kReduceChunkBytes goes
// through as consecutive small calls of at most that many bytes, one cell each, so the root
// folds a chunk while the contributors write the next.
inline constexpr int64_t kReduceChunkBytes = int64_t{128} << 10;
// The largest contribution to a small reduce that its root reads in place where it lies in its
// writer's arena (Note [Small reduce]).
inline constexpr int64_t kReduceArenaMaxBytes = int64_t{256} << 10;
inline constexpr int64_t kBcastInlineBytes = 80;
// The part of it in the cell's first line (the rest is in the second).
inline constexpr int64_t kBcastFirstLineBytes = 16;
// The smallest message whose receivers may read it in the root's own buffer where that is on
// huge pages (Note [Small broadcast by reference], shm_broadcast.cc).
inline constexpr int64_t kBcastByReferenceBytes = int64_t{128} << 10;
// A root looks whether its receivers have read every earlier message (and if so starts over at
// data slot 0) once per this many slots.
inline constexpr uint32_t kBcastCheckSlots = 8;

struct alignas(128) BcastCell {
  // b+1 once the rank wrote small call b here (futex word): the message of a small broadcast
  // it is the root of, or its contribution to a small reduce (Note [Small reduce]).
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> waiters{0};
  uint64_t call_index = 0;  // the writer's call, which its readers compare with their own
  uint64_t front_seq = 0;
  int64_t count = 0;
  int32_t root = 0;
  uint8_t kind = 0, op = 0, dtype = 0;
  uint8_t slot = 0;  // the data slot of a larger message
  // 1: the message stays in the root's own buffer, whose address `data` holds; the receivers
  // read it with process_vm_readv (Note [Small broadcast by reference], shm_broadcast.cc). 2: a
  // reduce's contribution stays in its writer's arena, at the offset `data` holds (Note [Small
  // reduce]).
  uint8_t by_reference = 0;
  // A message of up to kBcastInlineBytes: the first line's last 16 bytes and the second line,
  // which only such a message touches.
  alignas(16) uint8_t data[kBcastInlineBytes] = {};
};
static_assert(offsetof(BcastCell, data) + kBcastFirstLineBytes == 64);
static_assert(sizeof(BcastCell) == 128);

// Per rank, a line of its own: the small calls (broadcasts and reduces) it completed (what a
// writer waits for before it reuses a cell) and the one it is in, for the wait's mismatch
// diagnosis (a seqlock: `index` is 0 while the fields change).
struct alignas(64) BcastLine {
  std::atomic<uint32_t> done{0};  // small calls completed (futex word)
  std::atomic<uint32_t> waiters{0};
  std::atomic<uint64_t> index{0};  // the group call index of the latest small call
  std::atomic<uint64_t> front_seq{0};
  std::atomic<int64_t> count{0};
  std::atomic<uint8_t> kind{0}, op{0}, dtype{0};
  std::atomic<int32_t> root{0};
};
static_assert(sizeof(BcastLine) == 64);

// What a call's later steps still read from the peers, by parity of the call index: a peer can
// be at most one call ahead.
struct alignas(64) CallWords {
  std::atomic<uint64_t> premul_bits{0};  // this rank's premul_sum factor (double bits)
  // Where this call's buffers lie in this rank's arena (byte offsets), -1 when outside it.
  std::atomic<int64_t> send_arena_off{-1}, recv_arena_off{-1};
  // This call's buffers in this rank's address space, for peers' process_vm_readv, and whether
  // this rank offers them that way (Note [Kernel copy], shm_zerocopy.cc).
  std::atomic<uint64_t> send_addr{0}, recv_addr{0};
  std::atomic<uint32_t> kernel_copy{0};
};
static_assert(sizeof(CallWords) == 64);

// Per rank. Every 32-bit atomic is usable as a futex word; `*waiters` count sleepers so a
// writer only pays for FUTEX_WAKE when someone sleeps.
struct alignas(64) ControlBlock {
  StepLine step[2];
  std::atomic<uint32_t> aborted{0};  // 1 + ErrorKind once this rank left after an error
  std::atomic<int32_t> pid{0};
  // The inode of this rank's pid namespace (0: unknown): pids name the same process for two
  // ranks only when theirs are equal (Note [Kernel copy]).
  std::atomic<uint64_t> pid_ns{0};
  // Whether this rank's process_vm_readv works and its memory may be read that way: 0 not yet
  // known, 1 yes, 2 no (Note [Small broadcast by reference], shm_broadcast.cc).
  std::atomic<uint32_t> kernel_copy_able{0};
  // 1 + the group rank this rank waits for while a wait of its outlasts its spin (a p2p peer, a
  // small broadcast's root, a small reduce's contributor, a step's first missing rank), 0
  // otherwise: a peer that times out waiting for this rank names it too (ShmGroup::fail_wait).
  std::atomic<int32_t> waits_for{0};
  CallWords call[2];
  StepCall step_call[2];  // the call of step[k] in full
  BcastLine bcast;
};

// One per ordered pair (src -> dst), followed by mailbox_bytes of data.
struct alignas(64) MailboxHeader {
  std::atomic<uint32_t> posted{0};  // chunks written by src (futex word)
  std::atomic<uint32_t> posted_waiters{0};
  std::atomic<uint32_t> taken{0};  // chunks consumed by dst (futex word)
  std::atomic<uint32_t> taken_waiters{0};
  int64_t tag = 0;
  uint64_t total_bytes = 0;  // the whole message
  uint64_t offset = 0;       // this chunk's place in it
  uint64_t len = 0;
  uint32_t dtype = 0;
  uint32_t pad = 0;
};

// What rank 0 writes into the header; the other ranks adopt it.
struct SegmentConfig {
  uint64_t slot_bytes = 0;
  uint64_t mailbox_bytes = 0;
  uint64_t oneshot_bytes = 0;
  uint32_t algo = 0;
  uint64_t arena_bytes = 0;  // rounded up to the page size by create()
  uint64_t zerocopy_bytes = 0;
  uint64_t chunk_bytes = 0;
  uint64_t nontemporal_bytes = 0;
  uint64_t kernel_copy_bytes = 0;
  uint64_t kernel_copy_limit = 0;
  uint64_t bcast_bytes = 0;  // at most kBcastMaxBytes
  uint64_t kernel_copy_gather_bytes = 0;
  uint64_t reduce_bytes = 0;
};

// A mapped segment with typed accessors. Offsets are computed once from the header.
class Segment {
 public:
  // Creates (O_EXCL), sizes (fallocate, so a full /dev/shm fails here and not with SIGBUS
  // later) and maps `name`. Throws kIo / kOutOfMemory naming the segment.
  static std::unique_ptr<Segment> create(const std::string& name, int nranks, SegmentConfig config);
  // Maps an existing segment and checks its header. Throws kIo / kCorruptData.
  static std::unique_ptr<Segment> open(const std::string& name, int nranks);
  ~Segment();

  // Counts this mapping; the last of `nranks` unlinks the name (the mapping stays valid).
  void mark_mapped();

  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  // Inline: every step reads a few control blocks, and a call was measurable at 16 bytes.
  ControlBlock& control(int rank) const {
    return *reinterpret_cast<ControlBlock*>(base_ + control_off_ + rank * sizeof(ControlBlock));
  }
  uint8_t* slot(int rank) const;
  MailboxHeader& mailbox(int src, int dst) const;
  uint8_t* mailbox_data(int src, int dst) const;
  // Cell j of rank `rank`'s small-broadcast ring, and its data slot k (kBcastCellBytes).
  BcastCell& bcast_cell(int rank, int j) const;
  uint8_t* bcast_slot(int rank, int k) const;
  // Maps into this process now every page of the segment that rank `me` reads or writes
  // outside the arenas: every rank's slot and small-broadcast ring, and the mailboxes to and
  // from `me`. The first use of each would otherwise take a page fault in a timed call: the first
  // turn of 256 broadcast slots cost 64-byte broadcasts on 2 ranks 1.0-1.2 us against 0.2-0.3
  // after it, and the first turn of a 2 MiB staging ring held 4-rank all_gathers of 8 KiB a rank
  // at 20-25 us against 6 after it (docs/performance.md, "The staging rings' first turn").
  void touch_pages(int me) const;
  // Rank `rank`'s arena (header().arena_bytes bytes; its pages are reserved by reserve()).
  uint8_t* arena(int rank) const;
  // Reserves the pages of [offset, offset + bytes) of this rank's arena (fallocate on the
  // object, so a full /dev/shm fails here and not with SIGBUS). Throws kOutOfMemory / kIo.
  void reserve_arena(int rank, uint64_t offset, uint64_t bytes);
  const std::string& name() const { return name_; }
  int nranks() const { return nranks_; }

 private:
  Segment(std::string name, int nranks, uint8_t* base, size_t bytes, int fd);
  void compute_offsets();

  std::string name_;
  int nranks_;
  uint8_t* base_;
  size_t bytes_;
  int fd_;  // kept open for reserve_arena(); still valid after the name is unlinked
  size_t control_off_ = 0, slot_off_ = 0, mailbox_off_ = 0, mailbox_stride_ = 0, bcast_off_ = 0,
         arena_off_ = 0;
};

// Futex on a word of a MAP_SHARED mapping (not FUTEX_PRIVATE: other processes wait on it).
// Returns after a wake, a changed value, a signal or `slice`, whichever comes first.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::milliseconds slice);
void futex_wake_all(std::atomic<uint32_t>& word);

// Stores `value` and wakes sleepers counted in `waiters` (Dekker pairing with Waiter::wait).
void publish_word(std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiters, uint32_t value);

// The inode of this process's pid namespace, 0 when it cannot be read.
uint64_t pid_namespace();

// Whether the process of a peer rank still runs. Uses a pidfd when the kernel has them (a
// zombie counts as dead, and pid reuse cannot fool it), else kill(pid, 0) plus /proc state.
class PeerWatch {
 public:
  explicit PeerWatch(int nranks);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;
  // `pid` as the peer published it, in its pid namespace `pid_ns` (0: unknown). pid 0 (not
  // mapped yet) counts as alive, and so does a peer in another pid namespace than this
  // process's: its pid names some other process, or none, here. The deadline covers both.
  bool alive(int rank, int32_t pid, uint64_t pid_ns);

 private:
  std::vector<int> pidfd_;  // -1: not opened; -2: unavailable, use kill()
  std::vector<int32_t> pid_;
  uint64_t pid_ns_;  // this process's
};

}  // namespace braid::shm
