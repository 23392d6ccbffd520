// The shm collectives, each a sequence of steps of Note [Step protocol] (shm_group.h) over
// the per-rank slots; docs/shm.md, "Algorithms", gives each one's bytes moved. Every
// reduction goes through Folder (rank order, accumulation type), so the bits do not depend
// on the algorithm or the chunk size.
#include <algorithm>
#include <cstring>
#include <optional>

#include "shm_group.h"
#include "shm_reduce.h"

namespace braid::shm {
namespace {

void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

const uint8_t* at(const void* base, int64_t elems, int64_t esize) {
  return static_cast<const uint8_t*>(base) + elems * esize;
}
uint8_t* at(void* base, int64_t elems, int64_t esize) {
  return static_cast<uint8_t*>(base) + elems * esize;
}

}  // namespace

uint64_t ShmGroup::sub_slot_bytes() const {
  return (seg_->header().slot_bytes / static_cast<uint64_t>(n_)) & ~uint64_t{7};
}

void ShmGroup::all_reduce(Call& c) {
  if (zero_copy(c)) return;
  const SegmentHeader& h = seg_->header();
  const int64_t bytes = c.desc.count * static_cast<int64_t>(dtype_size(c.desc.dtype));
  const auto algo = static_cast<ShmAlgo>(h.algo);
  const bool one_shot =
      algo == ShmAlgo::kOneShot ||
      (algo == ShmAlgo::kAuto && (bytes <= static_cast<int64_t>(h.oneshot_bytes) || n_ <= 2));
  if (one_shot) {
    reduce_one_shot(c);
  } else {
    reduce_stripes(c);
  }
}

// Every rank copies a chunk into its slot; every rank that needs the result folds all slots.
void ShmGroup::reduce_one_shot(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t chunk = static_cast<int64_t>(seg_->header().slot_bytes) / es;
  const bool wants_result = d.kind == CollectiveKind::kAllReduce || me_ == d.root;
  std::optional<Folder> folder;
  std::vector<const void*> inputs(n_);
  for (int p = 0; p < n_; ++p) inputs[p] = seg_->slot(p);
  const int64_t steps = steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c, [&] { copy(seg_->slot(me_), at(d.send, off, es), m * es); },
        [&] {
          if (!wants_result || m <= 0) return;
          if (!folder) folder.emplace(d.dtype, d.op, c.factors, n_);
          folder->fold(inputs.data(), n_, m, at(d.recv, off, es));
        });
  }
}

// Pipelined over chunks: step k stages chunk k in the front of every slot and folds this
// rank's stripe of it, and in the same step publishes the stripe of chunk k-1 (folded in step
// k-1) in the back of the slot and gathers chunk k-1's stripes: K chunks take K+1 steps, not
// 2K. Each area is written and read within one step, so the step protocol keeps them safe.
void ShmGroup::reduce_stripes(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t cap = static_cast<int64_t>(seg_->header().slot_bytes) / es;
  // chunk + (chunk / n + 1) <= cap: the staged chunk and the largest stripe share the slot.
  int64_t chunk = (cap - 1) * n_ / (n_ + 1);
  if (chunk >= 16) chunk &= ~int64_t{15};  // keeps the result area 64-byte aligned for f32
  chunk = std::max<int64_t>(chunk, 1);
  const bool wants_result = d.kind == CollectiveKind::kAllReduce || me_ == d.root;
  std::optional<Folder> folder;
  std::vector<uint8_t> stripe(static_cast<size_t>((chunk / n_ + 1) * es));
  std::vector<const void*> inputs(n_);
  auto result_area = [&](int p) { return seg_->slot(p) + chunk * es; };
  const int64_t chunks = steps_for(d.count, chunk);
  for (int64_t k = 0; k <= chunks; ++k) {
    const int64_t off = k * chunk, m = k < chunks ? std::min(chunk, d.count - off) : 0;
    const int64_t prev_off = off - chunk, prev_m = k > 0 ? std::min(chunk, d.count - prev_off) : 0;
    auto lo = [&](int64_t len, int r) { return len * r / n_; };
    const int64_t my_lo = lo(m, me_), my_len = lo(m, me_ + 1) - my_lo;
    const int64_t prev_lo = lo(prev_m, me_), prev_len = lo(prev_m, me_ + 1) - prev_lo;
    step(
        c,
        [&] {
          if (k < chunks) copy(seg_->slot(me_), at(d.send, off, es), m * es);
          if (k > 0) copy(result_area(me_), stripe.data(), prev_len * es);
        },
        [&] {
          if (k > 0 && wants_result) {
            for (int p = 0; p < n_; ++p) {
              copy(at(d.recv, prev_off + lo(prev_m, p), es), result_area(p),
                   (lo(prev_m, p + 1) - lo(prev_m, p)) * es);
            }
          }
          if (k == chunks || my_len <= 0) return;
          if (!folder) folder.emplace(d.dtype, d.op, c.factors, n_);
          for (int p = 0; p < n_; ++p) inputs[p] = at(seg_->slot(p), my_lo, es);
          folder->fold(inputs.data(), n_, my_len, stripe.data());
        });
  }
}

void ShmGroup::broadcast(Call& c) {
  if (zero_copy(c)) return;
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t chunk = static_cast<int64_t>(seg_->header().slot_bytes) / es;
  const int64_t steps = steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c,
        [&] {
          if (me_ == d.root) copy(seg_->slot(me_), at(d.send, off, es), m * es);
        },
        [&] {
          const void* src = me_ == d.root ? at(d.send, off, es) : seg_->slot(d.root);
          copy(at(d.recv, off, es), src, m * es);
        });
  }
}

// all_gather and gather: each rank stages a chunk of its block; the readers copy every slot.
void ShmGroup::all_gather(Call& c) {
  if (zero_copy(c)) return;
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t chunk = static_cast<int64_t>(seg_->header().slot_bytes) / es;
  const bool reads = d.kind == CollectiveKind::kAllGather || me_ == d.root;
  const int64_t steps = steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c, [&] { copy(seg_->slot(me_), at(d.send, off, es), m * es); },
        [&] {
          if (!reads) return;
          for (int p = 0; p < n_; ++p) {
            copy(at(d.recv, int64_t{p} * d.count + off, es), seg_->slot(p), m * es);
          }
        });
  }
}

// Sub-slot p of my slot holds a chunk of my block p; rank p folds sub-slot p of every slot.
void ShmGroup::reduce_scatter(Call& c) {
  if (zero_copy(c)) return;
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const uint64_t sub = sub_slot_bytes();
  const int64_t chunk = static_cast<int64_t>(sub) / es;
  std::optional<Folder> folder;
  std::vector<const void*> inputs(n_);
  for (int p = 0; p < n_; ++p) inputs[p] = seg_->slot(p) + me_ * sub;
  const int64_t steps = steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c,
        [&] {
          for (int p = 0; p < n_; ++p) {
            copy(seg_->slot(me_) + p * sub, at(d.send, int64_t{p} * d.count + off, es), m * es);
          }
        },
        [&] {
          if (m <= 0) return;
          if (!folder) folder.emplace(d.dtype, d.op, c.factors, n_);
          folder->fold(inputs.data(), n_, m, at(d.recv, off, es));
        });
  }
}

void ShmGroup::barrier(Call& c) {
  step(
      c, [] {}, [] {});
}

}  // namespace braid::shm
