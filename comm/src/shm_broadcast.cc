// The shm backend's small broadcasts (docs/shm.md, "Small broadcasts"): the root writes the
// message into the next cell of its ring and returns; every other rank waits for that cell
// alone, checks the root's call against its own and copies the message out. And its small
// reduces (docs/shm.md, "Small reduces"), the same cells with the roles turned round.
//
// Note [Small broadcast]
// Through the step protocol a broadcast is a barrier: every rank waits for every other one. With
// more ranks than cores each call then needs every rank to run once, a few context switches per
// call (4 ranks on 2 vCPUs: 2.2 us for 16 bytes, OpenMPI's eager broadcast 0.38 us). Here the
// root waits for nobody while its ring has a free cell, and a receiver waits for the root only,
// so back-to-back broadcasts pipeline: a rank that gets a core works through every cell the root
// has filled.
//   - Broadcast b (counted over the group's life, the same on every rank) uses cell
//     b % kBcastCells of the root's ring; the cell's `seq` becomes b+1 once it holds the data.
//     A message of up to kBcastInlineBytes travels in the cell; a larger one (up to
//     kBcastMaxBytes) in the root's next data slots, consecutive (a message that would pass the
//     last slot starts over at slot 0, and so does one whose receivers have read every earlier
//     message), the first of which the cell names.
//   - Every rank, root included, sets its `done` to b+1 after the call. Before the root writes
//     cell b % kBcastCells it waits until every other rank's `done` >= b+1-kBcastCells: the
//     cell's previous message (broadcast b-kBcastCells at the latest) has been read by all.
//     Whoever was the root of that one, `done` covers it. Likewise before it rewrites data
//     slots: `done` past the latest broadcast that used one of them (the root keeps which).
//   - The limit (the header's bcast_bytes): rank 0's bcast_bytes, or its bcast_shared_bytes
//     where the group has more ranks than it has CPUs. There a step-protocol call waits until
//     every rank has had a core, and this path, which waits for the root alone, won at every
//     size up to kBcastMaxBytes (8 ranks on 2 vCPUs, 64 KiB: 13 us against 34; docs/shm.md).
//   - Depth: 256 cells and 256 data slots (1 MiB per rank). With 4 ranks on 2 vCPUs, 16 cells
//     left the 16-byte broadcast at 0.64-0.80 of OpenMPI's speed, 64 at 0.90-1.12, 256 at
//     2.2-2.6; 64 data slots left 64 bytes at 0.86-1.19, 256 at 1.7-2.5 (docs/performance.md):
//     the deeper the ring, the fewer context switches per call.
//   - The cross-rank check: a receiver compares the call the root wrote into the cell with its
//     own before it copies anything. A rank that makes another call where a peer makes a small
//     broadcast (or the converse) waits for a peer that never arrives: between its futex slices
//     the wait looks at the peers' step lines and small-broadcast records and raises the
//     mismatch (check_crossed_calls, shm_check.cc). Ranks that disagree on the root may all
//     believe they are roots, and none waits: every rank folds its small broadcasts into a
//     digest that it publishes with its next step-protocol call, where the check compares it.
//   - Small broadcasts take no step: the step protocol's reasoning is untouched, except that a
//     peer may now be any number of small broadcasts ahead. The call words (Note [Step
//     protocol]) are therefore indexed by the step-protocol calls only (Call::step_call).
//
// Note [Small reduce]
// Through the step protocol a reduce is a barrier too, and OpenMPI's non-roots return once their
// eager send is queued: a loop of 16-256 byte reduces ran at 0.16-0.52 of OpenMPI's speed at 2
// and 4 ranks (docs/performance.md, "Small reduces"). The broadcast cells serve reduces too, with
// the roles turned round; one count numbers both kinds (small call b, Call::small_index):
//   - Every rank but the root writes its contribution as a broadcast's root writes its message
//     (write_small): cell b % kBcastCells of its own ring, inline or in its data slots, after the
//     same waits for `done` before it reuses them, and returns. Each cell of call b has one
//     writer, whatever the kinds: a broadcast's root or a reduce's contributors.
//   - The root waits for each contributor's cell (from the next rank on), compares the call
//     written there with its own, and folds every contribution where it lies, its own from its
//     buffer, with the step path's Folder in rank order: the same bits.
//   - Every rank sets `done` = b+1: a contributor's cell is read by the root only, and `done`
//     covers it as it covers a broadcast's readers.
//   - A reduce of more than kReduceChunkBytes goes as consecutive small calls of that many
//     bytes (the last shorter), one cell each, `done` after each: the root folds a chunk while
//     the contributors write the next, and a contributor reuses a chunk's slots once the root
//     has folded it. 128 KiB chunks beat 64 and 256 KiB ones at 2 ranks, 512 KiB-4 MiB.
//   - A contribution of at least zerocopy_bytes (64 KiB) and at most kReduceArenaMaxBytes that
//     lies in its writer's arena is not copied: the cell holds its arena offset, the root reads
//     it there, and the writer returns once the root's `done` says it has read it. With the
//     bench's arena buffers (-R 1), 2 ranks, 256 KiB: 28-30 GB/s out of place, 38 in place,
//     against 17-18 copied (and 26-27 / 27-36 through the zero-copy step path). From 1 MiB the
//     copy wins out of place (10-11 GB/s against 7, and 8-9 against 4-6 at 4-16 MiB): the
//     contributor's copy runs beside the root's fold, where a read in place leaves the root
//     alone at work.
//   - The limit: rank 0's reduce_bytes, every size by default, with the broadcast's rule for
//     the zero-copy paths up to one data slot. It beat the step path at every size measured,
//     with a CPU per rank or not (2 ranks: 32-256 KiB 0.67-0.80 of OpenMPI's speed through the
//     step path and its kernel copy, 1.06-1.36 here; 512 KiB-64 MiB 1.3-1.7x the step path's
//     speed; 4 and 8 ranks level or ahead; docs/performance.md, "Small reduces").
//     premul_sum stays on the step path: its factors travel with the step-protocol call.
//   - The cell carries the writer's kind and op, so a root that reads a broadcast where it
//     expected a contribution, or a contribution of another reduce, names both calls; the waits
//     and the digest cover the rest as for broadcasts (check_crossed_calls, verify_call).
//
// Note [Small broadcast by reference]
// A message of kBcastByReferenceBytes or more whose root buffer braid's cpu allocator put on
// huge pages (cpu_memory_on_huge_pages) stays there: the root writes its address into the cell
// (`by_reference`), each receiver copies it out with process_vm_readv (one copy where the ring
// makes two), and the root returns once every receiver's `done` says it has: the caller may
// change its buffer then. The root alone decides, from its buffer and from what every rank
// published when it joined (ControlBlock::kernel_copy_able: its process_vm_readv works and its
// memory may be read; every pid in one namespace), so nothing else is agreed per call. The
// kernel pins each page it reads: a huge page costs next to nothing per 4 KiB, a 4 KiB page
// about as much as its copy (Note [Kernel copy], shm_zerocopy.cc), so other buffers keep the
// ring. With 3, 4 and 8 ranks on 2 vCPUs, 256 KiB on huge pages went 1.2-2.2x faster this way,
// 128 KiB level to 2.2x, 64 KiB slower (docs/performance.md, "Small broadcasts by reference").
#include <cstring>

#include "braid/core/allocator.h"
#include "shm_group.h"

namespace braid::shm {
namespace {

// The largest message whose every line the root asks for in the next data slot (below).
constexpr int64_t kBcastPrefetchBytes = 512;

void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) fast_copy(dst, src, static_cast<size_t>(bytes));
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

}  // namespace

bool ShmGroup::small_keeps_zero_copy(const Call& c, uint64_t bytes) const {
  // Up to a data slot, a call that may read the root's buffer in place keeps that path
  // (zero_copy_candidate; only with thresholds lowered below 4 KiB). Above it the group's limit
  // alone decides: 16 KiB with a CPU per rank, below the zero-copy thresholds' defaults, and
  // 256 KiB where ranks share CPUs, where this path beat the zero-copy ones (their calls are
  // barriers; docs/shm.md, "Small broadcasts").
  if (bytes > static_cast<uint64_t>(kBcastCellBytes) || c.desc.count <= 0) return false;
  const SegmentHeader& h = seg_->header();
  const bool arena = h.arena_bytes != 0 && bytes >= h.zerocopy_bytes;
  return arena || tries_kernel_copy(c);
}

bool ShmGroup::small_broadcast(const Call& c) const {
  const CollectiveDesc& d = c.desc;
  const uint64_t bytes = static_cast<uint64_t>(d.count) * dtype_size(d.dtype);
  const uint64_t limit = seg_->header().bcast_bytes;  // 0: off, empty calls too
  return limit != 0 && bytes <= limit && !small_keeps_zero_copy(c, bytes);
}

bool ShmGroup::small_reduce(const Call& c) const {
  const CollectiveDesc& d = c.desc;
  const uint64_t bytes = static_cast<uint64_t>(d.count) * dtype_size(d.dtype);
  // premul_sum's factors travel with the step-protocol call (every rank's, at its first step).
  const uint64_t limit = seg_->header().reduce_bytes;
  return limit != 0 && bytes <= limit && d.op != ReduceOp::kPremulSum &&
         !small_keeps_zero_copy(c, bytes);
}

void ShmGroup::publish_bcast_record(const Call& c) {
  BcastLine& line = seg_->control(me_).bcast;
  const CollectiveDesc& d = c.desc;
  // A seqlock for the diagnosis of a waiting peer: index 0 while the fields change.
  line.index.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  line.front_seq.store(d.seq, std::memory_order_relaxed);
  line.count.store(d.count, std::memory_order_relaxed);
  line.kind.store(static_cast<uint8_t>(d.kind), std::memory_order_relaxed);
  line.op.store(static_cast<uint8_t>(d.op), std::memory_order_relaxed);
  line.dtype.store(static_cast<uint8_t>(d.dtype), std::memory_order_relaxed);
  line.root.store(d.root, std::memory_order_relaxed);
  line.index.store(c.index, std::memory_order_release);
}

void ShmGroup::wait_bcast_done(Call& c, uint32_t done) {
  auto reached = [&](uint32_t v) { return static_cast<int32_t>(v - done) >= 0; };
  if (reached(bcast_seen_done_)) return;
  // Every peer at once: the least `done` seen now lets the next cells go without looking. A
  // wait that fails names every rank behind, not only the first (fail_wait).
  c.waits_done = true;
  c.target = done;
  uint32_t least = 0;
  bool first = true;
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    BcastLine& line = seg_->control(p).bcast;
    wait_at_least(c, p, line.done, line.waiters, done);
    const uint32_t v = line.done.load(std::memory_order_acquire);
    if (first || static_cast<int32_t>(v - least) < 0) least = v;
    first = false;
  }
  bcast_seen_done_ = first ? done : least;
  c.waits_done = false;
}

bool ShmGroup::bcast_by_reference(const void* buf, int64_t bytes) {
  if (bytes < kBcastByReferenceBytes || !kernel_copy_able_ || n_ < 2) return false;
  if (bcast_ref_group_ == 0) {
    // Every rank published whether it offers process_vm_readv when it joined; one not yet
    // seen leaves the question open, one that does not (or a pid namespace of its own)
    // closes it.
    const uint64_t ns = seg_->control(me_).pid_ns.load(std::memory_order_relaxed);
    int verdict = ns != 0 ? 1 : -1;
    for (int p = 0; p < n_ && verdict > 0; ++p) {
      const ControlBlock& cb = seg_->control(p);
      const uint32_t able = cb.kernel_copy_able.load(std::memory_order_acquire);
      if (able == 2 || cb.pid_ns.load(std::memory_order_relaxed) != ns) verdict = -1;
      if (able == 0) verdict = 0;
    }
    bcast_ref_group_ = verdict;
  }
  return bcast_ref_group_ > 0 && cpu_memory_on_huge_pages(buf, static_cast<size_t>(bytes));
}

bool ShmGroup::bcast_done_now(uint32_t done) {
  auto reached = [&](uint32_t v) { return static_cast<int32_t>(v - done) >= 0; };
  if (reached(bcast_seen_done_)) return true;
  for (int p = 0; p < n_; ++p) {
    if (p != me_ && !reached(seg_->control(p).bcast.done.load(std::memory_order_acquire))) {
      return false;
    }
  }
  bcast_seen_done_ = done;
  return true;
}

bool ShmGroup::write_small(Call& c, const void* src, int64_t bytes, bool may_refer,
                           int64_t arena_off) {
  const CollectiveDesc& d = c.desc;
  const uint32_t b = c.small_index;
  wait_bcast_done(c, b + 1 - kBcastCells);
  BcastCell& cell = seg_->bcast_cell(me_, static_cast<int>(b % kBcastCells));
  uint8_t* data = cell.data;
  const bool by_reference = may_refer && bcast_by_reference(src, bytes);
  cell.by_reference = by_reference ? 1 : arena_off >= 0 ? 2 : 0;
  if (by_reference) {
    const uint64_t addr = reinterpret_cast<uintptr_t>(src);
    std::memcpy(cell.data, &addr, sizeof addr);
    ++bcast_ref_messages_;
  } else if (arena_off >= 0) {
    std::memcpy(cell.data, &arena_off, sizeof arena_off);
  } else if (bytes > kBcastInlineBytes) {
    // Consecutive slots, so that the message is contiguous: one that would wrap starts over
    // at slot 0.
    const uint32_t slots = static_cast<uint32_t>((bytes + kBcastCellBytes - 1) / kBcastCellBytes);
    uint32_t first = bcast_next_slot_ % kBcastSlots;
    // Where every reader has read every earlier message, start over at slot 0 too: the
    // messages then keep to a few pages, which stay in use (a page left idle costs up to
    // hundreds of microseconds on a VM; docs/shm.md, "Small broadcasts"). Looked at once
    // per kBcastCheckSlots slots, so the writer reads a peer's line once per that many
    // messages at most (each look, at every message, cost 2 ranks 0.06 us a call).
    if (first >= bcast_check_slot_) {
      bcast_check_slot_ = first + kBcastCheckSlots;
      if (bcast_done_now(b)) first = 0;
    }
    if (first + slots > static_cast<uint32_t>(kBcastSlots)) first = 0;
    if (first == 0) bcast_check_slot_ = kBcastCheckSlots;
    bcast_next_slot_ = first + slots;
    ++bcast_slot_messages_;
    // A slot last used kBcastCells or more small calls ago is covered by the wait above; of
    // the others, the latest user decides (`done` only grows).
    bool wait = false;
    uint32_t latest = 0;
    for (uint32_t k = first; k < first + slots; ++k) {
      if (bcast_slot_used_[k] && b - bcast_slot_user_[k] < static_cast<uint32_t>(kBcastCells)) {
        if (!wait || static_cast<int32_t>(bcast_slot_user_[k] - latest) > 0) {
          latest = bcast_slot_user_[k];
        }
        wait = true;
      }
      bcast_slot_user_[k] = b;
      bcast_slot_used_[k] = true;
    }
    if (wait) wait_bcast_done(c, latest + 1);
    cell.slot = static_cast<uint8_t>(first);
    data = seg_->bcast_slot(me_, static_cast<int>(first));
  }
  cell.call_index = c.index;
  cell.front_seq = d.seq;
  cell.count = d.count;
  cell.root = d.root;
  cell.kind = static_cast<uint8_t>(d.kind);
  cell.op = static_cast<uint8_t>(d.op);
  cell.dtype = static_cast<uint8_t>(d.dtype);
  if (cell.by_reference == 0) copy(data, src, bytes);
  publish_word(cell.seq, cell.waiters, b + 1);  // release: the fields and data go with it
  // The lines the next message from this rank writes, asked for now: their transfer from a
  // reader's cache overlaps the rest of this call and the next one's entry instead of
  // holding up its publish (2 ranks, 16 B: 0.16 -> 0.08 us a call on a Xeon, docs/shm.md).
  // Nobody polls them yet, unlike the step lines, where the same hint measured slower.
  BcastCell& next = seg_->bcast_cell(me_, static_cast<int>((b + 1) % kBcastCells));
  prefetch_for_write(&next);
  if (bytes > kBcastFirstLineBytes && bytes <= kBcastInlineBytes) {
    prefetch_for_write(reinterpret_cast<const uint8_t*>(&next) + 64);  // its second line
  }
  if (bytes > kBcastInlineBytes && cell.by_reference == 0) {
    // Of the next data slot: every line a message of this size writes, up to
    // kBcastPrefetchBytes (2 ranks, 128-512 B, -n 20: 1.4-1.5x; 4 and 8 ranks, 1000-call
    // loops: 1.03-1.25x; docs/performance.md, "Small broadcasts: the next slot's lines"),
    // else its first line. Up to 4 KiB, 1 KiB measured slower (0.7-0.8x: 16 requests in
    // flight). Not where a look for caught-up readers is due either: the next message may
    // then start over at slot 0, and these lines go unwritten.
    const uint8_t* next_data =
        seg_->bcast_slot(me_, static_cast<int>(bcast_next_slot_ % kBcastSlots));
    const bool all = bytes <= kBcastPrefetchBytes && bcast_next_slot_ < bcast_check_slot_;
    for (int64_t off = 0; off < (all ? bytes : 1); off += 64) prefetch_for_write(next_data + off);
  }
  return by_reference;
}

void ShmGroup::finish_small(const Call& c) {
  const CollectiveDesc& d = c.desc;
  bcasts_ = c.small_index + 1;
  bcast_digest_ = mix(mix(mix(mix(bcast_digest_, c.index), static_cast<uint64_t>(d.count)),
                          static_cast<uint64_t>(d.dtype) | static_cast<uint64_t>(d.root) << 8),
                      static_cast<uint64_t>(d.kind) | static_cast<uint64_t>(d.op) << 8);
  BcastLine& line = seg_->control(me_).bcast;
  publish_word(line.done, line.waiters, bcasts_);
}

void ShmGroup::broadcast_small(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t bytes = d.count * static_cast<int64_t>(dtype_size(d.dtype));
  c.small = true;
  c.small_index = bcasts_;
  publish_bcast_record(c);
  if (me_ == d.root) {
    const bool by_reference = write_small(c, d.send, bytes, true);
    copy(d.recv, d.send, bytes);
    // The receivers read the message in place: the caller may change it on return.
    if (by_reference) wait_bcast_done(c, c.small_index + 1);
  } else {
    BcastCell& cell = seg_->bcast_cell(d.root, static_cast<int>(c.small_index % kBcastCells));
    wait_at_least(c, d.root, cell.seq, cell.waiters, c.small_index + 1);
    verify_bcast_cell(c, d.root, cell);
    if (cell.by_reference != 0) {
      uint64_t addr = 0;
      std::memcpy(&addr, cell.data, sizeof addr);
      kernel_copy_at(c, d.root, addr, bytes, d.recv, false);
    } else {
      const uint8_t* data =
          bytes <= kBcastInlineBytes ? cell.data : seg_->bcast_slot(d.root, cell.slot);
      copy(d.recv, data, bytes);
    }
  }
  finish_small(c);
}

void ShmGroup::reduce_small(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  // Chunks of kReduceChunkBytes, each a small call of its own (the count is the same on every
  // rank: the cross-rank check compares the call, count and dtype included).
  const int64_t chunk = kReduceChunkBytes / es;
  const int64_t chunks = steps_for(d.count, chunk);
  // A contribution in the arena, from the zero-copy threshold up to kReduceArenaMaxBytes, is
  // read there by the root (Note [Small reduce]): one copy fewer, and its writer waits for the
  // root's reads.
  const SegmentHeader& h = seg_->header();
  const int64_t bytes = d.count * es;
  const bool arena_size = h.arena_bytes != 0 && bytes >= static_cast<int64_t>(h.zerocopy_bytes) &&
                          bytes <= kReduceArenaMaxBytes;
  const int64_t arena_off = me_ != d.root && arena_size ? arena_offset(d.send, bytes) : -1;
  c.small = true;
  c.small_index = bcasts_;
  publish_bcast_record(c);
  for (int64_t k = 0; k < chunks; ++k) {
    c.small_index = bcasts_;
    const int64_t off = k * chunk, m = std::max<int64_t>(0, std::min(chunk, d.count - off));
    const uint8_t* send = static_cast<const uint8_t*>(d.send) + off * es;
    if (me_ != d.root) {
      write_small(c, send, m * es, false, arena_off >= 0 ? arena_off + off * es : -1);
    } else {
      // Every contribution where its writer left it (the root's own in its buffer), folded in
      // rank order by the step path's Folder: the same bits.
      const int j = static_cast<int>(c.small_index % kBcastCells);
      for (int i = 1; i < n_; ++i) {
        const int p = (me_ + i) % n_;
        BcastCell& cell = seg_->bcast_cell(p, j);
        wait_at_least(c, p, cell.seq, cell.waiters, c.small_index + 1);
        verify_bcast_cell(c, p, cell);
        if (cell.by_reference == 2) {
          int64_t at = 0;
          std::memcpy(&at, cell.data, sizeof at);
          inputs_[p] = seg_->arena(p) + at;
        } else {
          inputs_[p] = m * es <= kBcastInlineBytes ? cell.data : seg_->bcast_slot(p, cell.slot);
        }
      }
      inputs_[me_] = send;
      if (m > 0) {
        folder_for(c).fold(inputs_.data(), n_, m, static_cast<uint8_t*>(d.recv) + off * es);
      }
    }
    // `done` per chunk: a contributor reuses the chunk's cell and slots once the root folded it.
    finish_small(c);
  }
  ++small_reduces_;
  if (arena_off >= 0) {
    ++small_reduces_from_arena_;
    wait_bcast_done(c, bcasts_);  // the root has read the caller's buffer: it may change it
  }
}

}  // namespace braid::shm
