// The shm backend's cross-rank check (always on; docs/shm.md, "Cross-rank check"): at the
// first step of every collective each rank publishes the call it entered (its index among
// this group's collectives, kind, dtype, count, op, root) in the step call of the step line it
// is about to mark ready, and the call's key (call_key: a hash of what the check compares) in
// that line, and its premul_sum factor, arena offsets and buffer addresses in the call words of
// the call's parity (a peer may already publish its next call); after the step's ready wait
// every rank compares every peer's key with its own, and where they differ the calls, so a
// mismatch is an error naming both ranks and both calls before anyone reads a peer's data. The
// same step shares the premul_sum factors and the all_to_all_v counts.
//
// Note [Call key]
// The key is in the step line, which a peer reads anyway, where the call itself takes 40 bytes
// of a second line: with the key, a message of up to 48 bytes travels in the line too, and a
// small collective moves one line per rank (2 ranks, 32-byte all_reduce: 0.51 -> 0.31 us a
// call; docs/performance.md, "The call key in the step line"). Two calls that the check takes
// for the same call have the same key (call_key covers what same_call compares, and the
// small-call digest); two that differ in one of those words never share it, others with a
// chance of about 2^-64.
#include <atomic>
#include <bit>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "shm_group.h"

namespace braid::shm {
namespace {

struct PublishedCall {
  uint64_t index, seq;
  int64_t count;
  CollectiveKind kind;
  DType dtype;
  ReduceOp op;
  int root;
};

PublishedCall read_call(const StepCall& line) {
  return {line.call_index,
          line.seq,
          line.count,
          static_cast<CollectiveKind>(line.kind),
          static_cast<DType>(line.dtype),
          static_cast<ReduceOp>(line.op),
          line.root};
}

// "all_reduce f32 x 1024 sum", "broadcast bf16 x 7 root 2", "barrier".
std::string describe(const PublishedCall& p) {
  std::ostringstream out;
  out << collective_name(p.kind);
  if (p.kind == CollectiveKind::kBarrier) return out.str();
  out << " " << p.dtype;
  if (p.kind != CollectiveKind::kAllToAllV) out << " x " << p.count;
  if (is_reduction(p.kind)) out << " " << reduce_op_name(p.op);
  if (is_rooted(p.kind)) out << " root " << p.root;
  return out.str();
}

// A peer's step line read while the peer may write it (a wait's diagnosis, after the line's
// epoch showed a step this rank has not made: the fields of that step's call stay put until
// this rank arrives). Atomic reads, as publish_call's writes.
template <class T>
T load_field(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_relaxed);
}
template <class T>
void store_field(T& field, T value) {
  std::atomic_ref<T>(field).store(value, std::memory_order_relaxed);
}

PublishedCall read_call_racy(const StepCall& line) {
  return {load_field(line.call_index),
          load_field(line.seq),
          load_field(line.count),
          static_cast<CollectiveKind>(load_field(line.kind)),
          static_cast<DType>(load_field(line.dtype)),
          static_cast<ReduceOp>(load_field(line.op)),
          load_field(line.root)};
}

PublishedCall call_of(const Call& c) {
  const CollectiveDesc& d = c.desc;
  return {c.index, d.seq, d.count, d.kind, d.dtype, d.op, d.root};
}

// Rank p's latest small call (Note [Small broadcast], Note [Small reduce]); false while p
// rewrites it.
bool read_bcast_record(const BcastLine& line, PublishedCall* out) {
  const uint64_t index = line.index.load(std::memory_order_acquire);
  if (index == 0) return false;
  *out = {index,
          line.front_seq.load(std::memory_order_relaxed),
          line.count.load(std::memory_order_relaxed),
          static_cast<CollectiveKind>(line.kind.load(std::memory_order_relaxed)),
          static_cast<DType>(line.dtype.load(std::memory_order_relaxed)),
          static_cast<ReduceOp>(line.op.load(std::memory_order_relaxed)),
          line.root.load(std::memory_order_relaxed)};
  std::atomic_thread_fence(std::memory_order_acquire);
  return line.index.load(std::memory_order_relaxed) == index;
}

bool same_call(const PublishedCall& a, const PublishedCall& b) {
  if (a.index != b.index || a.kind != b.kind) return false;
  if (a.kind == CollectiveKind::kBarrier) return true;
  if (a.dtype != b.dtype) return false;
  if (a.kind != CollectiveKind::kAllToAllV && a.count != b.count) return false;
  if (is_reduction(a.kind) && a.op != b.op) return false;
  if (is_rooted(a.kind) && a.root != b.root) return false;
  return true;
}

// What same_call compares, and the small-call digest (Note [Call key]). Each word times its
// own odd constant (a bijection: calls that differ in one word never share the key), the
// products independent of each other, so that the key costs a few cycles of a small call.
uint64_t call_key(const PublishedCall& p, uint64_t digest) {
  const bool barrier = p.kind == CollectiveKind::kBarrier;
  uint64_t what = static_cast<uint64_t>(p.kind);
  int64_t count = 0;
  if (!barrier) {
    what |= static_cast<uint64_t>(p.dtype) << 8;
    if (is_reduction(p.kind)) what |= static_cast<uint64_t>(p.op) << 16;
    if (is_rooted(p.kind)) what |= static_cast<uint64_t>(static_cast<uint32_t>(p.root)) << 32;
    if (p.kind != CollectiveKind::kAllToAllV) count = p.count;
  }
  const uint64_t h = (p.index * 0x9e3779b97f4a7c15ull) ^ (what * 0xc2b2ae3d27d4eb4full) ^
                     (static_cast<uint64_t>(count) * 0x165667b19e3779f9ull) ^
                     (digest * 0xd6e8feb86659fd93ull);
  return h ^ (h >> 32);
}

}  // namespace

void ShmGroup::publish_call(Call& c) {
  StepCall& line = step_call(me_);
  const CollectiveDesc& d = c.desc;
  // Atomic stores (plain moves on x86): a waiting peer's check_crossed_calls may read them.
  store_field(line.call_index, c.index);
  store_field(line.seq, d.seq);
  store_field(line.count, d.count);
  store_field(line.kind, static_cast<uint8_t>(d.kind));
  store_field(line.dtype, static_cast<uint8_t>(d.dtype));
  store_field(line.op, static_cast<uint8_t>(d.op));
  store_field(line.root, d.root);
  line.bcast_digest = bcast_digest_;
  CallWords& words = call_words(me_, c);
  words.premul_bits.store(std::bit_cast<uint64_t>(d.premul_factor), std::memory_order_relaxed);
  words.send_arena_off.store(c.send_off, std::memory_order_relaxed);
  words.recv_arena_off.store(c.recv_off, std::memory_order_relaxed);
  words.send_addr.store(reinterpret_cast<uintptr_t>(d.send), std::memory_order_relaxed);
  words.recv_addr.store(reinterpret_cast<uintptr_t>(d.recv), std::memory_order_relaxed);
  // Note [Kernel copy]: 1 offers, 2 declines this call, 0 cannot (the group stops trying).
  words.kernel_copy.store(c.kc_mine ? 1 : c.kc_declined ? 2 : 0, std::memory_order_relaxed);
  // Last, just before the ready epoch, in the same line, so that the line is fetched once for
  // both stores (Note [Step protocol]). The release store of the epoch makes all of these
  // visible to the peers.
  step_line(me_).key = call_key(call_of(c), bcast_digest_);
}

namespace {

[[noreturn]] void throw_mismatch(const std::vector<int>& world, int me, const PublishedCall& mine,
                                 int p, const PublishedCall& theirs) {
  BRAID_FAIL(kInvalidArgument, "shm: collective mismatch at group call #", mine.index,
             ": group rank ", me, " (world rank ", world[me], ") called ", describe(mine), " (seq ",
             mine.seq, ", call #", mine.index, ") but group rank ", p, " (world rank ", world[p],
             ") called ", describe(theirs), " (seq ", theirs.seq, ", call #", theirs.index,
             "); expected every rank of the group to make the same collective calls in the "
             "same order");
}

}  // namespace

void ShmGroup::fail_verify(const Call& c, int p) {
  const PublishedCall mine = read_call(step_call(me_));
  const PublishedCall theirs = read_call(step_call(p));
  if (!same_call(mine, theirs)) throw_mismatch(context_.global_ranks, me_, mine, p, theirs);
  if (step_call(p).bcast_digest != bcast_digest_) {
    // Small calls on which the ranks disagreed without anyone waiting (both believed they were
    // a broadcast's root, or neither a reduce's; Note [Small broadcast], Note [Small reduce]).
    // Name the latest of each, where it can be read.
    PublishedCall a{}, b{};
    const bool known = read_bcast_record(seg_->control(me_).bcast, &a) &&
                       read_bcast_record(seg_->control(p).bcast, &b);
    BRAID_FAIL(kInvalidArgument, "shm: collective mismatch before group call #", c.index,
               ": the small broadcasts and reduces of group rank ", me_, " (world rank ",
               context_.global_ranks[me_], ") and group rank ", p, " (world rank ",
               context_.global_ranks[p], ") differ",
               known ? " (latest: " + describe(a) + " at call #" + std::to_string(a.index) +
                           " against " + describe(b) + " at call #" + std::to_string(b.index) + ")"
                     : std::string(),
               "; expected every rank of the group to make the same collective calls in the "
               "same order, with the same root");
  }
  BRAID_FAIL(kInternal, "shm: group rank ", p, "'s call key differs from group rank ", me_,
             "'s at group call #", c.index, ", but their calls (", describe(theirs),
             ") and small-call digests agree");
}

void ShmGroup::verify_call(Call& c) {
  const uint64_t key = step_line(me_).key;
  for (int p = 0; p < n_; ++p) {
    if (p != me_ && step_line(p).key != key) fail_verify(c, p);
  }
  if (c.desc.op == ReduceOp::kPremulSum && is_reduction(c.desc.kind)) {
    c.factors.resize(n_);
    for (int p = 0; p < n_; ++p) {
      c.factors[p] =
          std::bit_cast<double>(call_words(p, c).premul_bits.load(std::memory_order_relaxed));
    }
  }
}

void ShmGroup::verify_bcast_cell(const Call& c, int writer, const BcastCell& cell) {
  const PublishedCall mine = call_of(c);
  const PublishedCall theirs{cell.call_index,
                             cell.front_seq,
                             cell.count,
                             static_cast<CollectiveKind>(cell.kind),
                             static_cast<DType>(cell.dtype),
                             static_cast<ReduceOp>(cell.op),
                             cell.root};
  if (!same_call(mine, theirs)) throw_mismatch(context_.global_ranks, me_, mine, writer, theirs);
}

// Note [Small broadcast], Note [Small reduce]. A peer p that takes part in this rank's call
// arrives: the checks below fire only where it cannot.
void ShmGroup::check_crossed_calls(const Call& c) {
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    if (c.small) {
      // p in another small call at this call, where this rank is a broadcast's root or in a
      // reduce: it may wait for p (a cell to reuse, reads by reference, Note [Small broadcast
      // by reference]; a reduce's root for p's contribution) until the deadline. (A
      // broadcast's receiver compares the root's cell instead.)
      PublishedCall record{};
      const bool waits_for_p = c.desc.kind == CollectiveKind::kReduce || me_ == c.desc.root;
      if (waits_for_p && read_bcast_record(seg_->control(p).bcast, &record) &&
          record.index == c.index && !same_call(call_of(c), record)) {
        throw_mismatch(context_.global_ranks, me_, call_of(c), p, record);
      }
      // p in a step this rank has not made (step epoch_). Legitimate only for a call after this
      // one, and then p completed this small call before (`done`, published before its
      // step's epoch, which this acquire load saw).
      const uint32_t e = seg_->control(p).step[epoch_ & 1].epoch.load(std::memory_order_acquire);
      if (static_cast<int32_t>(e - (epoch_ + 1)) < 0) continue;
      const PublishedCall theirs = read_call_racy(seg_->control(p).step_call[epoch_ & 1]);
      const uint32_t done = seg_->control(p).bcast.done.load(std::memory_order_acquire);
      if (theirs.index > c.index && static_cast<int32_t>(done - (c.small_index + 1)) >= 0) {
        continue;
      }
      throw_mismatch(context_.global_ranks, me_, call_of(c), p, theirs);
    } else {
      // A small call of p at or after this call, while p has not made this step: p can
      // have passed this call only through this step.
      PublishedCall theirs{};
      if (!read_bcast_record(seg_->control(p).bcast, &theirs) || theirs.index < c.index) continue;
      const uint32_t e =
          seg_->control(p).step[(c.target - 1) & 1].epoch.load(std::memory_order_acquire);
      if (static_cast<int32_t>(e - c.target) >= 0) continue;
      throw_mismatch(context_.global_ranks, me_, call_of(c), p, theirs);
    }
  }
}

}  // namespace braid::shm
