// The shm backend's cross-rank check (always on; docs/shm.md, "Cross-rank check"): at the
// first step of every collective each rank publishes the call it entered (its index among
// this group's collectives, kind, dtype, count, op, root) in the step line it is about to mark
// ready, and its premul_sum factor, arena offsets and buffer addresses in the call words of the
// call's parity (a peer may already publish its next call); after the step's ready wait every
// rank compares every peer's call with its own, so a mismatch is an error naming both ranks and
// both calls before anyone reads a peer's data. The same step shares the premul_sum factors and
// the all_to_all_v counts.
#include <bit>
#include <cstring>
#include <sstream>

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

PublishedCall read_call(const StepLine& line) {
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

bool same_call(const PublishedCall& a, const PublishedCall& b) {
  if (a.index != b.index || a.kind != b.kind) return false;
  if (a.kind == CollectiveKind::kBarrier) return true;
  if (a.dtype != b.dtype) return false;
  if (a.kind != CollectiveKind::kAllToAllV && a.count != b.count) return false;
  if (is_reduction(a.kind) && a.op != b.op) return false;
  if (is_rooted(a.kind) && a.root != b.root) return false;
  return true;
}

}  // namespace

void ShmGroup::publish_call(Call& c) {
  StepLine& line = step_line(me_);
  const CollectiveDesc& d = c.desc;
  line.call_index = c.index;
  line.seq = d.seq;
  line.count = d.count;
  line.kind = static_cast<uint8_t>(d.kind);
  line.dtype = static_cast<uint8_t>(d.dtype);
  line.op = static_cast<uint8_t>(d.op);
  line.root = d.root;
  CallWords& words = call_words(me_, c);
  words.premul_bits.store(std::bit_cast<uint64_t>(d.premul_factor), std::memory_order_relaxed);
  words.send_arena_off.store(c.send_off, std::memory_order_relaxed);
  words.recv_arena_off.store(c.recv_off, std::memory_order_relaxed);
  words.send_addr.store(reinterpret_cast<uintptr_t>(d.send), std::memory_order_relaxed);
  words.recv_addr.store(reinterpret_cast<uintptr_t>(d.recv), std::memory_order_relaxed);
  words.kernel_copy.store(c.kc_mine ? 1 : 0, std::memory_order_relaxed);
  // The release store of the ready epoch that follows makes these visible to the peers.
}

void ShmGroup::verify_call(Call& c) {
  const PublishedCall mine = read_call(step_line(me_));
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    const PublishedCall theirs = read_call(step_line(p));
    BRAID_CHECK(same_call(mine, theirs), kInvalidArgument,
                "shm: collective mismatch at group call #", mine.index, ": group rank ", me_,
                " (world rank ", context_.global_ranks[me_], ") called ", describe(mine), " (seq ",
                mine.seq, ", call #", mine.index, ") but group rank ", p, " (world rank ",
                context_.global_ranks[p], ") called ", describe(theirs), " (seq ", theirs.seq,
                ", call #", theirs.index,
                "); expected every rank of the group to make the same collective calls in the "
                "same order");
  }
  if (c.desc.op == ReduceOp::kPremulSum && is_reduction(c.desc.kind)) {
    c.factors.resize(n_);
    for (int p = 0; p < n_; ++p) {
      c.factors[p] =
          std::bit_cast<double>(call_words(p, c).premul_bits.load(std::memory_order_relaxed));
    }
  }
}

}  // namespace braid::shm
