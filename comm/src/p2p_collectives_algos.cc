// The point-to-point collectives' algorithms (docs/p2p.md, "Algorithms"). Reductions never
// combine partial results: they move raw contributions and fold them with Folder in rank
// order (fold.h), so the bits do not depend on the algorithm, the rank count's shape or the
// message size. Each algorithm is a sequence of rounds (P2pGroup::round); a round's tag
// carries the call index, a phase and a step, so rounds never match each other's messages.
#include <algorithm>
#include <cstring>
#include <functional>

#include "braid/core/error.h"
#include "fold.h"
#include "p2p_collectives_impl.h"

namespace braid::p2p {
namespace {

// Phases of a call's tags (0 is the cross-rank check).
constexpr unsigned kPhaseA = 1, kPhaseB = 2;

using RoundFn =
    std::function<void(unsigned, uint64_t, const std::vector<Piece>&, bool, const LocalCopy&)>;

struct Ctx {
  int me, n;
  RoundFn round_fn;
  bool segmented = true;  // Note [Segments]; all_to_all_v turns it off
  void round(unsigned phase, uint64_t step, const std::vector<Piece>& pieces,
             const LocalCopy& copy = {}) const {
    round_fn(phase, step, pieces, segmented, copy);
  }
};

// Byte offsets and lengths of the n blocks `count` elements split into (block_start).
struct Blocks {
  std::vector<size_t> off, len;
};

Blocks split(int64_t count, size_t esz, int n) {
  Blocks b;
  for (int r = 0; r < n; ++r) {
    const int64_t s = block_start(count, r, n), e = block_start(count, r + 1, n);
    b.off.push_back(static_cast<size_t>(s) * esz);
    b.len.push_back(static_cast<size_t>(e - s) * esz);
  }
  return b;
}

Blocks equal(size_t block, int n) {
  Blocks b;
  for (int r = 0; r < n; ++r) {
    b.off.push_back(r * block);
    b.len.push_back(block);
  }
  return b;
}

// Receive layout for one `block` from each of the n - 1 peers of rank `me`: peer p's lands in
// slot (p - me - 1) mod n, so n - 1 blocks of room suffice (rank me's block is empty).
Blocks peer_slots(size_t block, int n, int me) {
  Blocks b;
  for (int r = 0; r < n; ++r) {
    b.off.push_back(r == me ? 0 : static_cast<size_t>((r - me - 1 + n) % n) * block);
    b.len.push_back(r == me ? 0 : block);
  }
  return b;
}

void copy_if_apart(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

// Bruck all-gather (recursive doubling for any n): ceil(log2 n) rounds; at distance d a rank
// sends the min(d, n - d) blocks it holds to rank r - d and receives as many from r + d.
// `out` gets rank p's `block` bytes at p * block. Bytes per rank: (n - 1) * block in and out.
void bruck_all_gather(const Ctx& x, unsigned phase, const void* mine, size_t block, uint8_t* out) {
  std::vector<uint8_t> rot(x.n * block);  // [j]: rank (me + j) % n
  if (block > 0) std::memcpy(rot.data(), mine, block);
  uint64_t step = 0;
  for (int dist = 1; dist < x.n; dist *= 2, ++step) {
    const size_t bytes = std::min(dist, x.n - dist) * block;
    x.round(phase, step,
            {{(x.me - dist + x.n) % x.n, true, rot.data(), bytes},
             {(x.me + dist) % x.n, false, rot.data() + dist * block, bytes}});
  }
  for (int j = 0; j < x.n; ++j)
    copy_if_apart(out + ((x.me + j) % x.n) * block, rot.data() + j * block, block);
}

// Ring all-gather into `buf`: n - 1 rounds, round s passes block (me - s) to me + 1 and takes
// block (me - s - 1) from me - 1. This rank's block is at `own` (buf + b.off[me]: in place);
// round 0 sends it from there and copies it into buf meanwhile (Note [Local copy under the
// transfer]). Bytes per rank: the whole buffer less its own block, in and out.
void ring_all_gather(const Ctx& x, unsigned phase, uint8_t* buf, const Blocks& b,
                     const uint8_t* own) {
  const int next = (x.me + 1) % x.n, prev = (x.me - 1 + x.n) % x.n;
  const LocalCopy copy{buf + b.off[x.me], own, b.len[x.me]};
  if (x.n == 1) copy_if_apart(copy.dst, own, copy.bytes);
  for (int s = 0; s + 1 < x.n; ++s) {
    const int out = (x.me - s + x.n) % x.n, in = (x.me - s - 1 + 2 * x.n) % x.n;
    const uint8_t* from = s == 0 ? own : buf + b.off[out];
    x.round(phase, s,
            {{next, true, const_cast<uint8_t*>(from), b.len[out]},
             {prev, false, buf + b.off[in], b.len[in]}},
            s == 0 ? copy : LocalCopy{});
  }
}

// Pairwise exchange: n - 1 rounds, round k sends block (me + k) of `in` to rank me + k and
// receives rank (me - k)'s block for this rank into `out` at r_off[me - k]. Bytes per rank:
// every block but its own, in and out. `own`: also copy this rank's block from `in` to `out`.
void pairwise(const Ctx& x, unsigned phase, const uint8_t* in, const Blocks& s, uint8_t* out,
              const Blocks& r, bool own = true) {
  if (own) copy_if_apart(out + r.off[x.me], in + s.off[x.me], s.len[x.me]);
  for (int k = 1; k < x.n; ++k) {
    const int to = (x.me + k) % x.n, from = (x.me - k + x.n) % x.n;
    x.round(phase, k,
            {{to, true, const_cast<uint8_t*>(in) + s.off[to], s.len[to]},
             {from, false, out + r.off[from], r.len[from]}});
  }
}

// Binomial gather to `root` of equal blocks: `rel` holds n blocks in order of relative rank
// (me - root) mod n, this rank's at its own position. A rank with relative rank v receives
// its children's subtrees (v + 2^k) and then sends its own subtree to v - 2^k (the lowest set
// bit of v). ceil(log2 n) rounds; the root receives (n - 1) * block.
void binomial_gather(const Ctx& x, unsigned phase, uint8_t* rel, size_t block, int root) {
  const int v = (x.me - root + x.n) % x.n;
  uint64_t step = 0;
  for (int mask = 1; mask < x.n; mask *= 2, ++step) {
    if (v & mask) {
      const size_t bytes = std::min(mask, x.n - v) * block;
      x.round(phase, step, {{(v - mask + root) % x.n, true, rel + v * block, bytes}});
      return;
    }
    const int child = v + mask;
    if (child < x.n) {
      const size_t bytes = std::min(mask, x.n - child) * block;
      x.round(phase, step, {{(child + root) % x.n, false, rel + child * block, bytes}});
    }
  }
}

// Binomial broadcast of `bytes` into `buf` from `root`: receive from the parent (v minus its
// lowest set bit), then send to v + 2^k for the k below that bit. ceil(log2 n) rounds; each
// rank receives `bytes` once and sends it up to log2 n times. The root sends from `src` and
// copies it into buf meanwhile (Note [Local copy under the transfer]).
void binomial_broadcast(const Ctx& x, unsigned phase, uint8_t* buf, const uint8_t* src,
                        size_t bytes, int root) {
  const int v = (x.me - root + x.n) % x.n;
  int mask = 1;
  while (mask < x.n && !(v & mask)) mask *= 2;
  if (mask < x.n) x.round(phase, 0, {{(v - mask + root) % x.n, false, buf, bytes}});
  const uint8_t* from = v == 0 ? src : buf;
  std::vector<Piece> sends;
  for (mask /= 2; mask > 0; mask /= 2) {
    if (v + mask < x.n) {
      sends.push_back({(v + mask + root) % x.n, true, const_cast<uint8_t*>(from), bytes});
    }
  }
  x.round(phase, 0, sends, v == 0 ? LocalCopy{buf, src, bytes} : LocalCopy{});
}

// Linear gather (to_root) or scatter of blocks `b` of the root's `buf`; the other ranks send
// or receive `mine`. One round.
void linear(const Ctx& x, unsigned phase, bool to_root, uint8_t* buf, const Blocks& b,
            uint8_t* mine, int root) {
  if (x.me != root) {
    x.round(phase, 0, {{root, to_root, mine, b.len[x.me]}});
    return;
  }
  std::vector<Piece> pieces;
  for (int p = 0; p < x.n; ++p) {
    if (p != root) pieces.push_back({p, to_root ? false : true, buf + b.off[p], b.len[p]});
  }
  if (to_root) {
    copy_if_apart(buf + b.off[root], mine, b.len[root]);
  } else {
    copy_if_apart(mine, buf + b.off[root], b.len[root]);
  }
  x.round(phase, 0, pieces);
}

}  // namespace

#define BRAID_P2P_CTX(g)                                                                     \
  Ctx x {                                                                                    \
    g.me_, g.n_,                                                                             \
        [&g, &c](unsigned phase, uint64_t step, const std::vector<Piece>& p, bool segmented, \
                 const LocalCopy& copy) { g.round(c, phase, step, p, segmented, copy); }     \
  }

// Note [Fused check] (p2p_collectives.cc): every rank's data came with the check, rank p's at
// c.data[p]; nothing more is sent.
void Algorithms::fused(P2pGroup& g, Call& c) {
  const CollectiveDesc& d = c.desc;
  const int n = g.n_, me = g.me_;
  const size_t bytes = d.count * dtype_size(d.dtype);
  auto* recv = static_cast<uint8_t*>(d.recv);
  if (d.kind == CollectiveKind::kAllGather) {
    for (int p = 0; p < n; ++p) copy_if_apart(recv + p * bytes, c.data[p], bytes);
    return;
  }
  if (d.kind == CollectiveKind::kBroadcast) return copy_if_apart(recv, c.data[d.root], bytes);
  if (d.kind == CollectiveKind::kReduce && me != d.root) return;
  // all_reduce, reduce, reduce_scatter (block me of every rank's whole input): rank order
  Folder folder(d.dtype, d.op, c.factors, n, &g.fold_scratch_);
  const size_t skip = d.kind == CollectiveKind::kReduceScatter ? me * bytes : 0;
  std::vector<const void*> rows(n);
  for (int p = 0; p < n; ++p) rows[p] = c.data[p] + skip;
  folder.fold(rows.data(), n, d.count, recv);
}

// all_reduce, reduce, reduce_scatter (docs/p2p.md, "Reductions").
void Algorithms::reduction(P2pGroup& g, Call& c) {
  BRAID_P2P_CTX(g);
  const CollectiveDesc& d = c.desc;
  const int n = x.n, me = x.me;
  const size_t esz = dtype_size(d.dtype);
  Folder folder(d.dtype, d.op, c.factors, n, &g.fold_scratch_);
  std::vector<const void*> rows(n);
  const auto* send = static_cast<const uint8_t*>(d.send);
  auto* recv = static_cast<uint8_t*>(d.recv);
  const size_t bytes = d.count * esz;  // one rank's contribution (all_reduce, reduce)

  if (d.kind == CollectiveKind::kReduceScatter) {
    const size_t whole = n * bytes;  // each rank's input
    std::vector<uint8_t> got;
    if (g.small(c, whole)) {  // all inputs everywhere, fold this rank's block
      got.resize(n * whole);
      bruck_all_gather(x, kPhaseA, send, whole, got.data());
      for (int p = 0; p < n; ++p) rows[p] = got.data() + p * whole + me * bytes;
      folder.fold(rows.data(), n, d.count, recv);
    } else {  // block me of every other rank; this rank's own straight from its input
      const Blocks slots = peer_slots(bytes, n, me);
      uint8_t* peers = g.scratch((n - 1) * bytes);
      pairwise(x, kPhaseA, send, equal(bytes, n), peers, slots, false);
      for (int p = 0; p < n; ++p) rows[p] = p == me ? send + me * bytes : peers + slots.off[p];
      folder.fold(rows.data(), n, d.count, recv);
    }
    return;
  }

  const bool has_result = d.kind == CollectiveKind::kAllReduce || me == d.root;
  if (g.small(c, bytes)) {
    std::vector<uint8_t> got(n * bytes);
    if (d.kind == CollectiveKind::kAllReduce) {
      bruck_all_gather(x, kPhaseA, send, bytes, got.data());
    } else {  // raw contributions up a binomial tree, in relative-rank order
      const int v = (me - d.root + n) % n;
      copy_if_apart(got.data() + v * bytes, send, bytes);
      binomial_gather(x, kPhaseA, got.data(), bytes, d.root);
      if (!has_result) return;
      std::vector<uint8_t> ordered(n * bytes);
      for (int p = 0; p < n; ++p) {
        copy_if_apart(ordered.data() + p * bytes, got.data() + ((p - d.root + n) % n) * bytes,
                      bytes);
      }
      got.swap(ordered);
    }
    for (int p = 0; p < n; ++p) rows[p] = got.data() + p * bytes;
    folder.fold(rows.data(), n, d.count, recv);
    return;
  }

  if (d.kind == CollectiveKind::kAllReduce) return pipelined_all_reduce(g, c, folder);

  // Large reduce: pairwise reduce-scatter of raw blocks, fold block me, linear gather.
  const Blocks b = split(d.count, esz, n);
  const Blocks slots = peer_slots(b.len[me], n, me);
  uint8_t* peers = g.scratch((n - 1) * b.len[me]);
  pairwise(x, kPhaseA, send, b, peers, slots, false);
  for (int p = 0; p < n; ++p) rows[p] = p == me ? send + b.off[me] : peers + slots.off[p];
  std::vector<uint8_t> folded;
  uint8_t* mine = nullptr;
  if (has_result) {
    mine = recv + b.off[me];
  } else {
    folded.resize(b.len[me]);
    mine = folded.data();
  }
  folder.fold(rows.data(), n, static_cast<int64_t>(b.len[me] / esz), mine);
  linear(x, kPhaseB, true, recv, b, mine, d.root);
}

// Note [Pipelined all_reduce]: the large all_reduce is a reduce-scatter of raw blocks followed
// by an all-gather of the folded ones, both direct (rank r exchanges with every other rank),
// cut into segments of Options::segment_bytes (whole elements). Every reduce-scatter message
// is posted at once; then, segment by segment in order, a rank waits for segment j of its
// block from every peer (and for its own sends of segment j), folds it, and posts the folded
// segment to every peer together with the receives of the peers' segment j. So the fold of
// segment j overlaps the transfer of the segments after it, and the all-gather of the first
// segments overlaps the reduce-scatter of the last ones. Bytes per rank are those of
// reduce-scatter + all-gather, 2 (n - 1) M / n each way. In place (send == recv), segment j of
// block p is received into the buffer only after this rank's send of it finished.
void Algorithms::pipelined_all_reduce(P2pGroup& g, Call& c, Folder& folder) {
  const CollectiveDesc& d = c.desc;
  const int n = g.n_, me = g.me_;
  const size_t esz = dtype_size(d.dtype);
  const auto* send = static_cast<const uint8_t*>(d.send);
  auto* recv = static_cast<uint8_t*>(d.recv);
  const Blocks b = split(d.count, esz, n);
  const size_t own = b.len[me];
  size_t seg = c.segment / esz * esz;
  size_t longest = 0;
  for (int p = 0; p < n; ++p) longest = std::max(longest, b.len[p]);
  if (seg == 0 || seg > longest) seg = std::max<size_t>(longest, esz);
  auto segments = [&](int p) { return (b.len[p] + seg - 1) / seg; };
  auto length = [&](int p, size_t j) { return std::min(seg, b.len[p] - j * seg); };
  size_t rounds = 0;
  for (int p = 0; p < n; ++p) rounds = std::max(rounds, segments(p));
  // Peer p's raw block me lands in its slot of the scratch, n - 1 slots.
  const Blocks slots = peer_slots(own, n, me);
  uint8_t* got = g.scratch((n - 1) * own);
  auto slot = [&](int p) { return got + slots.off[p]; };

  std::vector<P2pGroup::Posted> rs_recv(rounds), rs_send(rounds), ag(rounds);
  for (size_t j = 0; j < rounds; ++j) {
    for (int k = 1; k < n; ++k) {
      const int from = (me - k + n) % n, to = (me + k) % n;
      if (j < segments(me)) {
        g.post(c, kPhaseA, j, {from, false, slot(from) + j * seg, length(me, j)}, rs_recv[j]);
      }
      if (j < segments(to)) {
        g.post(c, kPhaseA, j,
               {to, true, const_cast<uint8_t*>(send) + b.off[to] + j * seg, length(to, j)},
               rs_send[j]);
      }
    }
  }
  std::vector<const void*> rows(n);
  for (size_t j = 0; j < rounds; ++j) {
    g.finish(c, rs_recv[j]);
    g.finish(c, rs_send[j]);
    uint8_t* folded = recv + b.off[me] + j * seg;
    if (j < segments(me)) {
      for (int p = 0; p < n; ++p) {
        rows[p] = p == me ? send + b.off[me] + j * seg : slot(p) + j * seg;
      }
      folder.fold(rows.data(), n, static_cast<int64_t>(length(me, j) / esz), folded);
    }
    for (int k = 1; k < n; ++k) {
      const int from = (me - k + n) % n, to = (me + k) % n;
      if (j < segments(from)) {
        g.post(c, kPhaseB, j, {from, false, recv + b.off[from] + j * seg, length(from, j)}, ag[j]);
      }
      if (j < segments(me)) g.post(c, kPhaseB, j, {to, true, folded, length(me, j)}, ag[j]);
    }
  }
  for (auto& posted : ag) g.finish(c, posted);
}

void Algorithms::broadcast(P2pGroup& g, Call& c) {
  BRAID_P2P_CTX(g);
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype), bytes = d.count * esz;
  auto* buf = static_cast<uint8_t*>(d.recv);
  const auto* src = static_cast<const uint8_t*>(d.send);  // the root's
  if (g.small(c, bytes) || x.n <= 2) {
    return binomial_broadcast(x, kPhaseA, buf, src, bytes, d.root);
  }
  // Large: the root scatters the blocks, then a ring all-gather; each rank sends and receives
  // about the message once instead of log2 n times. The root scatters from its input and gets
  // the other blocks of its output from the ring, so an out-of-place root copies only its own.
  const Blocks b = split(d.count, esz, x.n);
  linear(x, kPhaseA, false, const_cast<uint8_t*>(x.me == d.root ? src : buf), b, buf + b.off[x.me],
         d.root);
  ring_all_gather(x, kPhaseB, buf, b, buf + b.off[x.me]);
}

void Algorithms::all_gather(P2pGroup& g, Call& c) {
  BRAID_P2P_CTX(g);
  const CollectiveDesc& d = c.desc;
  const size_t block = d.count * dtype_size(d.dtype);
  auto* recv = static_cast<uint8_t*>(d.recv);
  if (g.small(c, x.n * block)) return bruck_all_gather(x, kPhaseA, d.send, block, recv);
  ring_all_gather(x, kPhaseA, recv, equal(block, x.n), static_cast<const uint8_t*>(d.send));
}

void Algorithms::gather(P2pGroup& g, Call& c) {
  BRAID_P2P_CTX(g);
  const CollectiveDesc& d = c.desc;
  const int n = x.n;
  const size_t block = d.count * dtype_size(d.dtype);
  auto* recv = static_cast<uint8_t*>(d.recv);
  auto* mine = const_cast<uint8_t*>(static_cast<const uint8_t*>(d.send));
  if (!g.small(c, n * block)) return linear(x, kPhaseA, true, recv, equal(block, n), mine, d.root);
  std::vector<uint8_t> rel(n * block);
  const int v = (x.me - d.root + n) % n;
  copy_if_apart(rel.data() + v * block, mine, block);
  binomial_gather(x, kPhaseA, rel.data(), block, d.root);
  if (x.me != d.root) return;
  for (int p = 0; p < n; ++p) {
    copy_if_apart(recv + p * block, rel.data() + ((p - d.root + n) % n) * block, block);
  }
}

void Algorithms::scatter(P2pGroup& g, Call& c) {
  BRAID_P2P_CTX(g);
  const CollectiveDesc& d = c.desc;
  const size_t block = d.count * dtype_size(d.dtype);
  auto* send = const_cast<uint8_t*>(static_cast<const uint8_t*>(d.send));
  linear(x, kPhaseA, false, send, equal(block, x.n), static_cast<uint8_t*>(d.recv), d.root);
}

void Algorithms::all_to_all(P2pGroup& g, Call& c) {
  BRAID_P2P_CTX(g);
  const CollectiveDesc& d = c.desc;
  const int n = x.n;
  const size_t esz = dtype_size(d.dtype);
  Blocks s, r;
  if (d.kind == CollectiveKind::kAllToAll) {
    s = r = equal(d.count * esz, n);
  } else {
    BRAID_CHECK(d.send_counts.size() == size_t(n) && d.recv_counts.size() == size_t(n) &&
                    d.send_offsets.size() == size_t(n) && d.recv_offsets.size() == size_t(n),
                kInvalidArgument, g.describe_call(c), ": all_to_all_v has ", d.send_counts.size(),
                " send counts and ", d.recv_counts.size(), " recv counts; expected ", n, " each");
    for (int p = 0; p < n; ++p) {
      s.off.push_back(d.send_offsets[p] * esz);
      s.len.push_back(d.send_counts[p] * esz);
      r.off.push_back(d.recv_offsets[p] * esz);
      r.len.push_back(d.recv_counts[p] * esz);
    }
  }
  size_t send_end = 0, recv_end = 0;
  for (int p = 0; p < n; ++p) {
    send_end = std::max(send_end, s.off[p] + s.len[p]);
    recv_end = std::max(recv_end, r.off[p] + r.len[p]);
  }
  const auto* in = static_cast<const uint8_t*>(d.send);
  auto* out = static_cast<uint8_t*>(d.recv);
  std::vector<uint8_t> staged;
  const bool overlap = in && out && in < out + recv_end && out < in + send_end;
  if (overlap) {  // in place: the blocks sent must not be overwritten by those received
    staged.assign(in, in + send_end);
    in = staged.data();
  }
  x.segmented = d.kind == CollectiveKind::kAllToAll;  // Note [Segments]
  pairwise(x, kPhaseA, in, s, out, r);
}

}  // namespace braid::p2p
