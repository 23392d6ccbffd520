// The zero-copy collectives (docs/shm.md, "Zero-copy buffers"): when every buffer a
// collective reads lies in an allocated block of its rank's arena, ranks read each other's
// buffers in place instead of staging them through the slots.
//
// Every rank publishes the arena offsets of its buffers at the call's first step (-1 when
// outside), so after that step's ready wait all ranks take the same decision from the same
// data (Note [Zero-copy decision]). The reductions use the same Folder (rank-order left fold) as
// the slot path, so the bits are the same. Since peers read my buffers directly, a zero-copy call
// ends with a wait until every rank has finished its reads: the caller may overwrite them on
// return.
#include <algorithm>
#include <cstring>
#include <optional>

#include "fold.h"
#include "shm_group.h"

namespace braid::shm {

const uint8_t* ShmGroup::peer_send(const Call& c, int p) const {
  return seg_->arena(p) + call_words(p, c).send_arena_off.load(std::memory_order_relaxed);
}

uint8_t* ShmGroup::peer_recv(const Call& c, int p) const {
  return seg_->arena(p) + call_words(p, c).recv_arena_off.load(std::memory_order_relaxed);
}

bool ShmGroup::qualifies(const Call& c, int p) const {
  const CollectiveKind k = c.desc.kind;
  const CallWords& w = call_words(p, c);
  if (k == CollectiveKind::kBroadcast) return p == c.desc.root && w.send_arena_off.load() >= 0;
  if (w.send_arena_off.load() < 0) return false;
  return k != CollectiveKind::kAllReduce || w.recv_arena_off.load() >= 0;
}

bool ShmGroup::zero_copy_eligible(const Call& c) const {
  if (c.desc.kind == CollectiveKind::kBroadcast) return qualifies(c, c.desc.root);
  for (int p = 0; p < n_; ++p) {
    if (!qualifies(c, p)) return false;
  }
  return true;
}

// Note [Zero-copy decision]
// Whether a call can read its peers' buffers in place depends on every rank's buffers, so it
// is decided after a ready wait; an extra step for it alone cost a fifth of a 1 MiB
// all_reduce's time (docs/shm.md). So the decision rides on the slot path's first step: each
// rank publishes its arena offsets with the call, and a rank whose own buffers qualify stages
// nothing in that step. After the ready wait every rank sees the same offsets: all qualify,
// and the zero-copy path runs from there; none does, and the slot path goes on; some do, and
// the slot path starts again (one wasted step, only when ranks mix arena and other buffers).
void ShmGroup::zero_copy_candidate(Call& c) {
  const SegmentHeader& h = seg_->header();
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t bytes = d.count * es;
  // Decided from the call and rank 0's header alone: every rank takes this branch alike.
  if (h.arena_bytes == 0 || d.count <= 0 || bytes < static_cast<int64_t>(h.zerocopy_bytes)) {
    return;
  }
  const int64_t send_bytes = d.kind == CollectiveKind::kReduceScatter ? n_ * bytes : bytes;
  c.send_off = arena_offset(d.send, send_bytes);
  if (d.kind == CollectiveKind::kAllReduce) c.recv_off = arena_offset(d.recv, bytes);
  c.zc_candidate = true;
  const bool root_only = d.kind == CollectiveKind::kBroadcast;
  c.zc_mine = c.send_off >= 0 && (!root_only || me_ == d.root) &&
              (d.kind != CollectiveKind::kAllReduce || c.recv_off >= 0);
}

bool ShmGroup::resolve_zero_copy(Call& c) {
  if (zero_copy_eligible(c)) {
    zero_copy_first(c);
    c.zc_taken = true;
    return true;
  }
  for (int p = 0; p < n_; ++p) {
    if (qualifies(c, p)) {
      c.zc_repeat = true;  // rank p staged nothing
      return true;
    }
  }
  return false;
}

void ShmGroup::finish_zero_copy(Call& c) {
  if (c.desc.kind == CollectiveKind::kAllReduce) {
    step(
        c, 0, [] {}, [&] { zero_copy_gather_stripes(c); });
  }
  // An empty step: once every peer is ready for it, every peer has finished reading my buffers.
  step(
      c, 0, [] {}, [] {});
  zero_copy_calls_.fetch_add(1, std::memory_order_relaxed);
}

// The one step of broadcast / all_gather / gather / reduce / reduce_scatter, and step A of
// all_reduce (rank r folds stripe r of every send buffer into stripe r of its recv buffer).
// No two ranks write the same bytes, and no rank writes bytes another reads in this step:
// in place, a rank writes only the part of its buffer that no peer reads.
void ShmGroup::zero_copy_first(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t bytes = d.count * es;
  std::vector<const void*> inputs(n_);
  auto fold = [&](int64_t offset_bytes, int64_t count, void* out) {
    if (count <= 0) return;
    for (int p = 0; p < n_; ++p) inputs[p] = peer_send(c, p) + offset_bytes;
    Folder folder(d.dtype, d.op, c.factors, n_);
    folder.fold(inputs.data(), n_, count, out);
  };
  auto copy = [](void* dst, const void* src, int64_t len) {
    if (len > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(len));
  };
  switch (d.kind) {
    case CollectiveKind::kAllReduce: {
      const int64_t lo = d.count * me_ / n_, hi = d.count * (me_ + 1) / n_;
      fold(lo * es, hi - lo, static_cast<uint8_t*>(d.recv) + lo * es);
      break;
    }
    case CollectiveKind::kReduce:
      if (me_ == d.root) fold(0, d.count, d.recv);
      break;
    case CollectiveKind::kReduceScatter:
      fold(int64_t{me_} * bytes, d.count, d.recv);
      break;
    case CollectiveKind::kBroadcast:
      copy(d.recv, peer_send(c, d.root), bytes);
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      if (d.kind == CollectiveKind::kGather && me_ != d.root) break;
      for (int p = 0; p < n_; ++p) {
        copy(static_cast<uint8_t*>(d.recv) + p * bytes, peer_send(c, p), bytes);
      }
      break;
    default:
      BRAID_ASSERT(false, "shm: zero-copy path entered for ", collective_name(d.kind));
  }
}

// all_reduce step B: copy stripe p of rank p's recv buffer (its folded stripe) into mine.
void ShmGroup::zero_copy_gather_stripes(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  for (int p = 0; p < n_; ++p) {
    if (p == me_) continue;
    const int64_t lo = d.count * p / n_, hi = d.count * (p + 1) / n_;
    if (hi > lo) {
      std::memcpy(static_cast<uint8_t*>(d.recv) + lo * es, peer_recv(c, p) + lo * es,
                  static_cast<size_t>((hi - lo) * es));
    }
  }
}

}  // namespace braid::shm
