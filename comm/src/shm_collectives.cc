// The shm collectives, each a sequence of steps of Note [Step protocol] (shm_group.h) over
// the per-rank areas; docs/shm.md, "Algorithms", gives each one's bytes moved. Every
// reduction goes through Folder (rank order, accumulation type), so the bits do not depend
// on the algorithm or the chunk size. A rank reads its own contribution from the caller's
// buffer, never from its area: staging is only for what peers read.
#include <algorithm>
#include <cstring>
#include <optional>

#include "fold.h"
#include "shm_group.h"
#include "wait_policy.h"

namespace braid::shm {
namespace {

void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) fast_copy(dst, src, static_cast<size_t>(bytes));
}

const uint8_t* at(const void* base, int64_t elems, int64_t esize) {
  return static_cast<const uint8_t*>(base) + elems * esize;
}
uint8_t* at(void* base, int64_t elems, int64_t esize) {
  return static_cast<uint8_t*>(base) + elems * esize;
}

// kAuto's one-shot limits when ShmOptions::oneshot_bytes is 0 (measured: docs/shm.md).
constexpr uint64_t kOneShotBytes = uint64_t{16} << 10;
constexpr uint64_t kTwoRankOneShotBytes = uint64_t{4} << 20;

// Start of rank r's stripe of a chunk of `len` elements split n ways.
int64_t stripe_lo(int64_t len, int r, int n) {
  return len * r / n;
}

}  // namespace

uint64_t ShmGroup::sub_slot_bytes() const {
  return (area_bytes_ / static_cast<uint64_t>(n_)) & ~uint64_t{7};
}

int64_t ShmGroup::chunk_elems(int64_t capacity_elems, int64_t es) const {
  const int64_t limit = std::max<int64_t>(1, static_cast<int64_t>(seg_->header().chunk_bytes) / es);
  int64_t chunk = std::min(capacity_elems, limit);
  if (chunk >= 64) chunk &= ~int64_t{15};  // whole cache lines for 4-byte types
  return std::max<int64_t>(chunk, 1);
}

Folder& ShmGroup::folder_for(const Call& c) {
  const CollectiveDesc& d = c.desc;
  // kPremulSum's factors are this call's: a new Folder at its first fold, kept for its later
  // steps.
  const bool reuse = folder_ && (folder_->serves(d.dtype, d.op, n_) ||
                                 (d.op == ReduceOp::kPremulSum && folder_call_ == c.index));
  if (!reuse) {
    folder_.emplace(d.dtype, d.op, c.factors, n_, &fold_scratch_);
    folder_call_ = c.index;
  }
  return *folder_;
}

void ShmGroup::all_reduce(Call& c) {
  const SegmentHeader& h = seg_->header();
  const int64_t bytes = c.desc.count * static_cast<int64_t>(dtype_size(c.desc.dtype));
  const auto algo = static_cast<ShmAlgo>(h.algo);
  uint64_t limit = h.oneshot_bytes;
  if (limit == 0) limit = n_ == 2 ? kTwoRankOneShotBytes : kOneShotBytes;
  const bool one_shot = n_ == 1 || algo == ShmAlgo::kOneShot ||
                        (algo == ShmAlgo::kAuto && bytes <= static_cast<int64_t>(limit));
  with_zero_copy(c, [&] {
    if (one_shot) {
      reduce_one_shot(c);
    } else {
      reduce_two_shot(c);
    }
  });
}

// Every rank stages a chunk; every rank that needs the result folds all of them (its own from
// the caller's buffer). One step per chunk: the fastest for small messages.
void ShmGroup::reduce_one_shot(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  // A message that fits the area takes one step (two 64-bit divisions less: a fair part of a
  // 16-byte call).
  const bool fits = d.count * es <= static_cast<int64_t>(area_bytes_);
  const int64_t chunk =
      fits ? std::max<int64_t>(d.count, 1) : static_cast<int64_t>(area_bytes_) / es;
  const bool wants_result = d.kind == CollectiveKind::kAllReduce || me_ == d.root;
  std::vector<const void*>& inputs = inputs_;
  const int64_t steps = fits ? 1 : steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c, area_size(m * es),
        [&] {
          if (n_ > 1) copy(staging(me_, m * es), at(d.send, off, es), m * es);
        },
        [&] {
          if (!wants_result || m <= 0) return;
          Folder& folder = folder_for(c);
          // My own chunk from the caller's buffer: reading it back from my area measured half
          // as fast (docs/shm.md, "Staging ring").
          for (int p = 0; p < n_; ++p) {
            inputs[p] = p == me_ ? at(d.send, off, es) : staging(p, m * es);
          }
          folder.fold(inputs.data(), n_, m, at(d.recv, off, es));
        });
    if (c.stop()) return;
  }
}

// Reduce-scatter then all-gather, pipelined over chunks: step k stages chunk k's stripes for the
// other ranks and folds this rank's stripe of chunk k (its own part straight from the caller's
// buffer) into the results part of its area; in the same step every rank copies all folded
// stripes of chunk k-1 out of the results parts of the previous step's areas. K chunks take
// K+1 steps. The previous step's area is not rewritten before step k+1 (Note [Staging ring]).
void ShmGroup::reduce_two_shot(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t cap = static_cast<int64_t>(area_bytes_) / es;
  // chunk + (chunk / n + 1) <= cap: the staged chunk and the largest stripe share the area.
  const int64_t chunk = chunk_elems((cap - 1) * n_ / (n_ + 1), es);
  const bool wants_result = d.kind == CollectiveKind::kAllReduce || me_ == d.root;
  // In place with a CPU per rank, ordinary stores: chunk k-1's result overwrites lines this
  // rank read a step ago to stage them, still in its cache, where a streaming store must evict
  // them first (staged, 2 ranks, 8-64 MiB in place: 1.23-1.48x). Out of place, and with
  // ranks sharing CPUs, streaming stores stay ahead (docs/shm.md, "Algorithms").
  const bool in_place_hot = d.send == d.recv && n_ <= usable_cpus();
  const bool stream =
      d.count * es >= static_cast<int64_t>(seg_->header().nontemporal_bytes) && !in_place_hot;
  std::vector<const void*>& inputs = inputs_;
  const int64_t chunks = steps_for(d.count, chunk);
  for (int64_t k = 0; k <= chunks; ++k) {
    const int64_t off = k * chunk, m = k < chunks ? std::min(chunk, d.count - off) : 0;
    const int64_t prev_off = off - chunk, prev_m = k > 0 ? std::min(chunk, d.count - prev_off) : 0;
    auto lo = [&](int64_t len, int r) { return stripe_lo(len, r, n_); };
    const int64_t my_lo = lo(m, me_), my_len = lo(m, me_ + 1) - my_lo;
    step(
        c, static_cast<uint64_t>((chunk + chunk / n_ + 1) * es),
        [&] {
          for (int p = 0; p < n_ && k < chunks; ++p) {
            if (p == me_) continue;
            const int64_t p_lo = lo(m, p);
            copy(at(area(me_), p_lo, es), at(d.send, off + p_lo, es), (lo(m, p + 1) - p_lo) * es);
          }
        },
        [&] {
          if (k > 0 && wants_result) {
            for (int p = 0; p < n_; ++p) {
              const int64_t p_lo = lo(prev_m, p);
              copy_out(at(d.recv, prev_off + p_lo, es), at(prev_area(p), chunk, es),
                       (lo(prev_m, p + 1) - p_lo) * es, stream);
            }
          }
          if (k == chunks || my_len <= 0) return;
          Folder& folder = folder_for(c);
          for (int p = 0; p < n_; ++p) {
            inputs[p] = p == me_ ? at(d.send, off + my_lo, es) : at(area(p), my_lo, es);
          }
          folder.fold(inputs.data(), n_, my_len, at(area(me_), chunk, es));
        });
    if (c.stop()) return;
  }
}

void ShmGroup::broadcast(Call& c) {
  with_zero_copy(c, [&] { broadcast_slots(c); });
}

void ShmGroup::broadcast_slots(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t chunk = chunk_elems(static_cast<int64_t>(area_bytes_) / es, es);
  const bool stream = d.count * es >= static_cast<int64_t>(seg_->header().nontemporal_bytes);
  const int64_t steps = steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c, area_size(m * es),
        [&] {
          if (me_ == d.root) copy(staging(me_, m * es), at(d.send, off, es), m * es);
        },
        [&] {
          const void* src = me_ == d.root ? at(d.send, off, es) : staging(d.root, m * es);
          copy_out(at(d.recv, off, es), src, m * es, stream);
        });
    if (c.stop()) return;
  }
}

// all_gather and gather: each rank stages a chunk of its block; the readers copy every area
// (their own block straight from the caller's buffer).
void ShmGroup::all_gather(Call& c) {
  with_zero_copy(c, [&] { all_gather_slots(c); });
}

void ShmGroup::all_gather_slots(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t chunk = chunk_elems(static_cast<int64_t>(area_bytes_) / es, es);
  const bool reads = d.kind == CollectiveKind::kAllGather || me_ == d.root;
  const bool stream = n_ * d.count * es >= static_cast<int64_t>(seg_->header().nontemporal_bytes);
  const int64_t steps = steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c, area_size(m * es),
        [&] {
          if (n_ > 1) copy(staging(me_, m * es), at(d.send, off, es), m * es);
        },
        [&] {
          if (!reads) return;
          for (int p = 0; p < n_; ++p) {
            uint8_t* dst = at(d.recv, int64_t{p} * d.count + off, es);
            if (p == me_ && dst == at(d.send, off, es)) continue;  // in place: already there
            const void* src = p == me_ ? at(d.send, off, es) : staging(p, m * es);
            copy_out(dst, src, m * es, stream);
          }
        });
    if (c.stop()) return;
  }
}

// Sub-area p of my area holds a chunk of my block p; rank p folds sub-area p of every area
// (and its own block from the caller's buffer).
void ShmGroup::reduce_scatter(Call& c) {
  with_zero_copy(c, [&] { reduce_scatter_slots(c); });
}

void ShmGroup::reduce_scatter_slots(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const int64_t block_bytes = d.count * es;
  std::vector<const void*>& inputs = inputs_;
  if (n_ > 1 && (n_ - 1) * block_bytes <= kInlineBytes) {
    // The blocks for all the peers fit in the step line together (2 ranks, blocks of up to
    // kInlineBytes; 4 ranks, 16 bytes): they travel with the ready word, one line per rank, as
    // all_reduce's smallest messages do (measured: docs/performance.md, "Issue 35 on an AMD
    // EPYC (Zen 4)" and "The call key in the step line").
    // Rank w's block for rank r lies at slot r of w's line, counting the ranks other than w.
    auto slot = [&](int w, int r) { return (r < w ? r : r - 1) * block_bytes; };
    step(
        c, 0,
        [&] {
          for (int p = 0; p < n_; ++p) {
            if (p == me_) continue;
            copy(step_line(me_).data + slot(me_, p), at(d.send, int64_t{p} * d.count, es),
                 block_bytes);
          }
        },
        [&] {
          if (d.count <= 0) return;
          Folder& folder = folder_for(c);
          for (int p = 0; p < n_; ++p) {
            inputs[p] = p == me_ ? at(d.send, int64_t{me_} * d.count, es)
                                 : step_line(p).data + slot(p, me_);
          }
          folder.fold(inputs.data(), n_, d.count, d.recv);
        });
    return;
  }
  // Sub-areas no larger than a block: a small message then stages through the small ring
  // (Note [Staging ring]; with a quarter of the large ring per step, its lines were cold on
  // every call: 16-64 B on 2 ranks 0.52-0.63 us against the limit program's 0.45).
  const uint64_t block = (static_cast<uint64_t>(block_bytes) + 63) & ~uint64_t{63};
  const uint64_t sub = std::min(sub_slot_bytes(), block);
  const int64_t chunk = chunk_elems(std::max<int64_t>(static_cast<int64_t>(sub) / es, 1), es);
  const int64_t steps = steps_for(d.count, chunk);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk, m = std::min(chunk, d.count - off);
    step(
        c, n_ * sub,
        [&] {
          for (int p = 0; p < n_; ++p) {
            if (p == me_) continue;
            copy(area(me_) + p * sub, at(d.send, int64_t{p} * d.count + off, es), m * es);
          }
        },
        [&] {
          if (m <= 0) return;
          Folder& folder = folder_for(c);
          for (int p = 0; p < n_; ++p) {
            inputs[p] =
                p == me_ ? at(d.send, int64_t{me_} * d.count + off, es) : area(p) + me_ * sub;
          }
          folder.fold(inputs.data(), n_, m, at(d.recv, off, es));
        });
    if (c.stop()) return;
  }
}

void ShmGroup::barrier(Call& c) {
  step(
      c, 0, [] {}, [] {});
}

}  // namespace braid::shm
