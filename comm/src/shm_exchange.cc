// Personalized exchange through the areas (Note [Step protocol]): all_to_all, all_to_all_v and
// scatter. Each area is split into n sub-areas; at step k rank s stages chunk k of its block
// for rank d in sub-area d of its area, and rank d copies sub-area d of every area into its
// block from s. A rank's block for itself goes straight from its send buffer to its result.
// all_to_all_v first runs one step that shares every rank's send counts, so all ranks agree on
// the number of steps and each receiver checks its recv counts against its senders'.
// all_to_all and scatter may instead read the senders' buffers in place (Note [Zero-copy
// decision], Note [Kernel copy]; zero_copy_first in shm_zerocopy.cc): one copy where staging
// makes two.
#include <algorithm>
#include <cstring>
#include <vector>

#include "shm_group.h"

namespace braid::shm {
namespace {

struct Blocks {
  std::vector<int64_t> send_count, send_off, recv_count, recv_off;  // elements, per rank
};

std::vector<int64_t> offsets_or_prefix(const std::vector<int64_t>& offsets,
                                       const std::vector<int64_t>& counts) {
  if (!offsets.empty()) return offsets;
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

Blocks blocks_for(const CollectiveDesc& d, int me, int n) {
  Blocks b;
  if (d.kind == CollectiveKind::kAllToAllV) {
    b.send_count = d.send_counts;
    b.recv_count = d.recv_counts;
    b.send_off = offsets_or_prefix(d.send_offsets, d.send_counts);
    b.recv_off = offsets_or_prefix(d.recv_offsets, d.recv_counts);
    return b;
  }
  b.send_count.assign(n, 0);
  b.recv_count.assign(n, 0);
  b.send_off.assign(n, 0);
  b.recv_off.assign(n, 0);
  for (int p = 0; p < n; ++p) {
    if (d.kind == CollectiveKind::kAllToAll) {
      b.send_count[p] = b.recv_count[p] = d.count;
      b.send_off[p] = b.recv_off[p] = p * d.count;
    } else {  // kScatter: the root sends block p to rank p
      b.send_count[p] = me == d.root ? d.count : 0;
      b.send_off[p] = p * d.count;
    }
  }
  if (d.kind == CollectiveKind::kScatter) b.recv_count[d.root] = d.count;
  return b;
}

}  // namespace

void ShmGroup::exchange(Call& c) {
  if (c.desc.kind == CollectiveKind::kAllToAllV) {
    exchange_slots(c);
  } else {
    with_zero_copy(c, [&] { exchange_slots(c); });
  }
}

void ShmGroup::exchange_slots(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int64_t es = static_cast<int64_t>(dtype_size(d.dtype));
  const uint64_t sub = sub_slot_bytes();
  const int64_t chunk = static_cast<int64_t>(sub) / es;
  const Blocks b = blocks_for(d, me_, n_);
  const void* send = d.send;
  std::vector<uint8_t> staged;  // in-place all_to_all_v: blocks may move, so stage a copy
  int64_t longest = d.count;
  if (d.kind == CollectiveKind::kAllToAllV) {
    int64_t send_extent = 0;
    for (int p = 0; p < n_; ++p)
      send_extent = std::max(send_extent, b.send_off[p] + b.send_count[p]);
    if (send == d.recv && send_extent > 0) {
      staged.assign(static_cast<const uint8_t*>(send),
                    static_cast<const uint8_t*>(send) + send_extent * es);
      send = staged.data();
    }
    longest = 0;
    step(
        c, n_ * sizeof(int64_t),
        [&] { std::memcpy(area(me_), b.send_count.data(), n_ * sizeof(int64_t)); },
        [&] {
          for (int p = 0; p < n_; ++p) {
            int64_t to_me = 0;
            for (int q = 0; q < n_; ++q) {
              int64_t v;
              std::memcpy(&v, area(p) + q * sizeof(int64_t), sizeof v);
              longest = std::max(longest, v);
              if (q == me_) to_me = v;
            }
            BRAID_CHECK(to_me == b.recv_count[p], kInvalidArgument, "shm: ", describe_call(c),
                        ": group rank ", p, " (world rank ", context_.global_ranks[p], ") sends ",
                        to_me, " elements to this rank but recv_counts[", p, "] is ",
                        b.recv_count[p], " (expected the two to match)");
          }
        });
  }
  const int64_t steps = steps_for(longest, chunk);
  // A large result is written with streaming stores, as all_gather's (docs/shm.md).
  const bool stream = d.kind == CollectiveKind::kAllToAll &&
                      n_ * d.count * es >= static_cast<int64_t>(seg_->header().nontemporal_bytes);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t off = k * chunk;
    auto part = [&](int64_t count) { return std::clamp<int64_t>(count - off, 0, chunk); };
    step(
        c, n_ * sub,
        [&] {
          for (int p = 0; p < n_; ++p) {
            const int64_t bytes = part(b.send_count[p]) * es;
            if (p == me_ || bytes == 0) continue;  // my own block: from the send buffer below
            copy_out(area(me_) + p * sub,
                     static_cast<const uint8_t*>(send) + (b.send_off[p] + off) * es, bytes, false);
          }
        },
        [&] {
          for (int p = 0; p < n_; ++p) {
            const int64_t bytes = part(b.recv_count[p]) * es;
            if (bytes == 0) continue;
            const uint8_t* src =
                p == me_ ? static_cast<const uint8_t*>(send) + (b.send_off[me_] + off) * es
                         : area(p) + me_ * sub;
            // In place, my block for myself is already where it belongs (copy_out skips it).
            copy_out(static_cast<uint8_t*>(d.recv) + (b.recv_off[p] + off) * es, src, bytes,
                     stream);
          }
        });
    if (c.stop()) return;
  }
}

}  // namespace braid::shm
