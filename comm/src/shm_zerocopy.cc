// The zero-copy collectives (docs/shm.md, "Zero-copy buffers"): when every buffer a
// collective reads lies in an allocated block of its rank's arena, ranks read each other's
// buffers in place instead of staging them through the slots.
//
// Every rank publishes the arena offsets of its buffers at the call's first step (-1 when
// outside), so after that step's ready wait all ranks take the same decision from the same
// data. When the buffers do not qualify, the step was an empty one and the slot path
// follows. The reductions use the same Folder (rank-order left fold) as the slot path, so
// the bits are the same. Since peers read my buffers directly, a zero-copy call ends with a
// wait until every rank has finished its reads: the caller may overwrite them on return.
#include <algorithm>
#include <cstring>
#include <optional>

#include "shm_group.h"
#include "shm_reduce.h"

namespace braid::shm {
namespace {

bool reads_every_send(CollectiveKind k) {
  return k == CollectiveKind::kReduce || k == CollectiveKind::kAllGather ||
         k == CollectiveKind::kGather || k == CollectiveKind::kReduceScatter;
}

}  // namespace

const uint8_t* ShmGroup::peer_send(int p) const {
  return seg_->arena(p) + seg_->control(p).send_arena_off.load(std::memory_order_relaxed);
}

uint8_t* ShmGroup::peer_recv(int p) const {
  return seg_->arena(p) + seg_->control(p).recv_arena_off.load(std::memory_order_relaxed);
}

bool ShmGroup::zero_copy_eligible(const Call& c) const {
  const CollectiveKind k = c.desc.kind;
  auto sends_ok = [&](int p) { return seg_->control(p).send_arena_off.load() >= 0; };
  auto recvs_ok = [&](int p) { return seg_->control(p).recv_arena_off.load() >= 0; };
  if (k == CollectiveKind::kBroadcast) return sends_ok(c.desc.root);
  for (int p = 0; p < n_; ++p) {
    if (!sends_ok(p)) return false;
    if (k == CollectiveKind::kAllReduce && !recvs_ok(p)) return false;
  }
  return k == CollectiveKind::kAllReduce || reads_every_send(k);
}

bool ShmGroup::zero_copy(Call& c) {
  const SegmentHeader& h = seg_->header();
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t bytes = d.count * es;
  // Decided from the call and rank 0's header alone: every rank takes this branch alike.
  if (h.arena_bytes == 0 || d.count <= 0 || bytes < static_cast<int64_t>(h.zerocopy_bytes)) {
    return false;
  }
  const int64_t send_bytes = d.kind == CollectiveKind::kReduceScatter ? n_ * bytes : bytes;
  c.send_off = arena_offset(d.send, send_bytes);
  if (d.kind == CollectiveKind::kAllReduce) c.recv_off = arena_offset(d.recv, bytes);
  bool go = false;
  step(
      c, [] {},
      [&] {
        go = zero_copy_eligible(c);
        if (go) zero_copy_first(c);
      });
  if (!go) return false;
  if (d.kind == CollectiveKind::kAllReduce) {
    step(
        c, [] {}, [&] { zero_copy_gather_stripes(c); });
  }
  wait_all(c, epoch_);  // every peer has finished reading my buffers
  zero_copy_calls_.fetch_add(1, std::memory_order_relaxed);
  return true;
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
    for (int p = 0; p < n_; ++p) inputs[p] = peer_send(p) + offset_bytes;
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
      copy(d.recv, peer_send(d.root), bytes);
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      if (d.kind == CollectiveKind::kGather && me_ != d.root) break;
      for (int p = 0; p < n_; ++p) {
        copy(static_cast<uint8_t*>(d.recv) + p * bytes, peer_send(p), bytes);
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
      std::memcpy(static_cast<uint8_t*>(d.recv) + lo * es, peer_recv(p) + lo * es,
                  static_cast<size_t>((hi - lo) * es));
    }
  }
}

}  // namespace braid::shm
