// The hierarchical backend (hier_backend.h, docs/hier.md): creation (nodes found through the
// store, the shm backend of this rank's node, the transport over the group), run() and the
// four hierarchical algorithms. Everything else goes to the point-to-point algorithms over the
// same transport.
#include "hier_backend.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "fold.h"
#include "p2p_collectives.h"
#include "p2p_collectives_impl.h"

namespace braid {
namespace {

using p2p::CallHeader;
using p2p::Clock;
using p2p::Request;
using p2p::Transport;

// Pieces of a chain: the next node folds piece q while this one sends piece q + 1.
// BRAID_HIER_PIECE_BYTES overrides (tests use tiny pieces to run many).
constexpr int64_t kDefaultPieceBytes = int64_t{256} << 10;
constexpr int64_t kMaxSteps = int64_t{1} << 20;  // the step field of a tag

int64_t piece_bytes_from_env() {
  const char* v = std::getenv("BRAID_HIER_PIECE_BYTES");
  if (!v || !*v) return kDefaultPieceBytes;
  char* end = nullptr;
  const long long b = std::strtoll(v, &end, 10);
  BRAID_CHECK(*end == '\0' && b >= 1, kInvalidArgument, "BRAID_HIER_PIECE_BYTES is '", v,
              "'; expected a positive number of bytes");
  return b;
}

// Tags of hier's own messages: bit 62 set, bit 63 clear, so they never match the
// point-to-point algorithms' (bit 63) or user send / recv tags (< 2^62) on the shared
// transport. Then 40 bits of hier's call index, 2 of phase, 20 of step.
enum Phase : unsigned { kHeaders = 0, kForward = 1, kBackward = 2, kSpread = 3 };
uint64_t hier_tag(uint64_t index, Phase phase, uint64_t step) {
  return (uint64_t{1} << 62) | (index & ((uint64_t{1} << 40) - 1)) << 22 |
         uint64_t{phase & 3u} << 20 | (step & ((uint64_t{1} << 20) - 1));
}

// The point-to-point group and hier's own rounds share one transport.
class SharedTransport final : public Transport {
 public:
  explicit SharedTransport(std::shared_ptr<Transport> t) : t_(std::move(t)) {}
  int rank() const override { return t_->rank(); }
  int size() const override { return t_->size(); }
  uint64_t preferred_segment_bytes() const override { return t_->preferred_segment_bytes(); }
  std::unique_ptr<Request> isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    return t_->isend(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return t_->irecv(peer, tag, data, bytes);
  }
  void wait_all(std::vector<std::unique_ptr<Request>>& requests, const std::vector<int>& peers,
                Clock::time_point deadline, const std::string& what) override {
    t_->wait_all(requests, peers, deadline, what);
  }

 private:
  std::shared_ptr<Transport> t_;
};

std::string read_link(const char* path) {
  char buf[256];
  const ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

// Which node each group rank is on, from every rank's node_identity(): nodes numbered in the
// order of their lowest rank.
struct Layout {
  int nodes = 1, per_node = 1, node = 0, local = 0;
  // Every node has per_node ranks and node k's are group ranks [k per_node, (k+1) per_node).
  bool regular = false;
  std::vector<int> local_ranks;  // group ranks of this rank's node, in rank order
};

Layout find_layout(const std::vector<std::string>& ids, int me) {
  const int n = static_cast<int>(ids.size());
  std::vector<std::string> seen;
  std::vector<int> node_of(n);
  for (int r = 0; r < n; ++r) {
    size_t k = 0;
    while (k < seen.size() && seen[k] != ids[r]) ++k;
    if (k == seen.size()) seen.push_back(ids[r]);
    node_of[r] = static_cast<int>(k);
  }
  Layout lay;
  lay.nodes = static_cast<int>(seen.size());
  lay.node = node_of[me];
  for (int r = 0; r < n; ++r) {
    if (node_of[r] != lay.node) continue;
    if (r == me) lay.local = static_cast<int>(lay.local_ranks.size());
    lay.local_ranks.push_back(r);
  }
  lay.per_node = static_cast<int>(lay.local_ranks.size());
  lay.regular = n % lay.nodes == 0;
  for (int r = 0; r < n && lay.regular; ++r) lay.regular = node_of[r] == r / (n / lay.nodes);
  return lay;
}

class HierGroup final : public Backend {
 public:
  HierGroup(const BackendContext& ctx, const HierTransportFactory& factory);

  std::string_view name() const override { return "hier"; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::shared_ptr<Work> run(const CollectiveDesc& desc) override;
  void* allocate(size_t bytes) override { return intra_ ? intra_->allocate(bytes) : nullptr; }
  void release(void* ptr) override {
    if (intra_) intra_->release(ptr);
  }

 private:
  struct Call {
    const CollectiveDesc& desc;
    Clock::time_point deadline;
    uint64_t index = 0;
    std::vector<double> factors;  // premul_sum: group rank r's factor at [r]
  };
  // Requests of one step and their peers (for wait_all's messages).
  struct Pending {
    std::vector<std::unique_ptr<Request>> requests;
    std::vector<int> peers;
    std::vector<size_t> expect;  // receives: exact bytes; sends: SIZE_MAX
  };

  bool hierarchical(const CollectiveDesc& d) const;
  void dispatch(Call& c);
  CallHeader header(const Call& c) const;
  [[noreturn]] void mismatch(const Call& c, int theirs_rank, const CallHeader& theirs) const;
  void check_in_node(Call& c);
  void post_headers(Call& c, const std::vector<int>& peers, Pending& p);
  void check_headers(Call& c, Pending& p);
  void intra(const Call& c, CollectiveDesc d);
  void post(Call& c, Pending& p, int peer, bool send, Phase phase, uint64_t step, void* data,
            size_t bytes);
  void wait(Call& c, Pending& p, const std::string& what);
  std::string describe_call(const Call& c) const;
  int peer(int node, int local) const { return node * lay_.per_node + local; }

  // all_reduce and reduce_scatter over `total` elements of `input`: the node's all_to_all of
  // raw shards, then the chain over nodes. The last node ends with this rank's shard of the
  // result in `result`; with `back`, the result also travels back to every other node.
  void chain(Call& c, const void* input, int64_t total, uint8_t* result, bool back);
  void all_reduce(Call& c);
  void reduce_scatter(Call& c);
  void all_gather(Call& c);
  void broadcast(Call& c);

  BackendContext ctx_;
  int me_ = 0, n_ = 1;
  Layout lay_;
  std::unique_ptr<Backend> intra_;       // shm over this node's ranks
  std::shared_ptr<Transport> net_;       // over the group (several nodes only)
  std::unique_ptr<p2p::P2pGroup> flat_;  // the point-to-point algorithms over net_
  BackendCapabilities caps_;
  std::mutex mu_;  // one call at a time
  std::exception_ptr broken_;
  uint64_t calls_ = 0;
  int64_t piece_bytes_ = kDefaultPieceBytes;
  CallHeader head_out_;
  std::vector<uint8_t> raw_, carry_in_, carry_out_, stage_, fold_scratch_;
};

HierGroup::HierGroup(const BackendContext& ctx, const HierTransportFactory& factory)
    : ctx_(ctx), me_(ctx.rank), n_(ctx.size), piece_bytes_(piece_bytes_from_env()) {
  if (ctx_.global_ranks.size() != static_cast<size_t>(n_)) {
    ctx_.global_ranks.resize(n_);
    for (int r = 0; r < n_; ++r) ctx_.global_ranks[r] = r;
  }
  Store& store = *ctx.store;
  const auto timeout = ctx.timeout.count() > 0 ? ctx.timeout : store.timeout();
  // The k-th hier backend this rank creates on this store meets the others' k-th.
  const int64_t instance = store.add("hier/instances/" + std::to_string(me_), 1);
  const std::string base = "hier/" + std::to_string(instance) + "/";
  store.set(base + "node/" + std::to_string(me_), node_identity(ctx_.global_ranks[me_]));
  std::vector<std::string> ids(n_);
  for (int r = 0; r < n_; ++r) {
    const std::vector<uint8_t> v = store.get(base + "node/" + std::to_string(r), timeout);
    ids[r].assign(v.begin(), v.end());
  }
  lay_ = find_layout(ids, me_);

  if (lay_.nodes == 1 || lay_.per_node > 1) {
    BackendContext ic = ctx_;
    ic.store = std::make_shared<PrefixStore>(base + "n" + std::to_string(lay_.node), ctx.store);
    ic.rank = lay_.local;
    ic.size = lay_.per_node;
    ic.global_ranks.clear();
    for (int r : lay_.local_ranks) ic.global_ranks.push_back(ctx_.global_ranks[r]);
    intra_ = create_backend("shm", ic);
  }
  if (lay_.nodes == 1) {
    caps_ = intra_->capabilities();
    return;
  }
  BackendContext tc = ctx_;
  tc.store = std::make_shared<PrefixStore>(base + "net", ctx.store);
  net_ = factory(tc);
  BRAID_CHECK(net_ && net_->rank() == me_ && net_->size() == n_, kInternal,
              "hier: the transport is not rank ", me_, " of ", n_);
  flat_ = std::make_unique<p2p::P2pGroup>("hier", tc, std::make_unique<SharedTransport>(net_),
                                          p2p::options_from_env(*net_));
  caps_ = flat_->capabilities();
  caps_.can_allocate_shared = intra_ && intra_->capabilities().can_allocate_shared;
}

bool HierGroup::hierarchical(const CollectiveDesc& d) const {
  if (!lay_.regular || lay_.per_node < 2 || d.device.type != DeviceType::kCPU) return false;
  switch (d.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kBroadcast:
      return true;
    default:
      return false;
  }
}

std::shared_ptr<Work> HierGroup::run(const CollectiveDesc& desc) {
  if (lay_.nodes == 1) return intra_->run(desc);
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return completed_work(broken_);
  if (!hierarchical(desc)) {
    // One group: once the point-to-point part broke (a timeout, a lost peer, a mismatch), the
    // hierarchical calls are broken too, or each would wait out its own deadline.
    std::shared_ptr<Work> work = flat_->run(desc);
    broken_ = flat_->broken();
    return work;
  }
  try {
    if (desc.kind != CollectiveKind::kAllGather && desc.kind != CollectiveKind::kBroadcast) {
      check_reducible(desc.dtype, desc.op);  // nothing to undo yet
    }
  } catch (...) {
    return completed_work(std::current_exception());
  }
  Call c{.desc = desc,
         .deadline = p2p::call_deadline(desc, ctx_.timeout),
         .index = ++calls_,
         .factors = {}};
  try {
    dispatch(c);
    return completed_work();
  } catch (...) {
    broken_ = std::current_exception();
  }
  return completed_work(broken_);
}

void HierGroup::dispatch(Call& c) {
  check_in_node(c);
  switch (c.desc.kind) {
    case CollectiveKind::kAllReduce:
      return all_reduce(c);
    case CollectiveKind::kReduceScatter:
      return reduce_scatter(c);
    case CollectiveKind::kAllGather:
      return all_gather(c);
    case CollectiveKind::kBroadcast:
      return broadcast(c);
    default:
      BRAID_ASSERT(false, "hier: no hierarchical algorithm for ", collective_name(c.desc.kind));
  }
}

std::string HierGroup::describe_call(const Call& c) const {
  std::ostringstream out;
  out << "hier: " << collective_name(c.desc.kind) << " #" << c.desc.seq << " (hier call #"
      << c.index << ")";
  return out.str();
}

CallHeader HierGroup::header(const Call& c) const {
  return p2p::make_header(c.desc, c.index);
}

void HierGroup::mismatch(const Call& c, int p, const CallHeader& theirs) const {
  const CallHeader mine = header(c);
  BRAID_FAIL(kInvalidArgument, "hier: collective mismatch at hier call #", mine.index,
             ": group rank ", me_, " (world rank ", ctx_.global_ranks[me_], ") called ",
             p2p::describe_header(mine), " (seq ", mine.seq, ", call #", mine.index,
             ") but group rank ", p, " (world rank ", ctx_.global_ranks[p], ") called ",
             p2p::describe_header(theirs), " (seq ", theirs.seq, ", call #", theirs.index,
             "); expected every rank of the group to make the same collective calls in the "
             "same order");
}

// The node's ranks compare their calls (an all_gather of headers on shm), which also brings
// their premul_sum factors; nodes compare with the nodes they exchange data with
// (post_headers / check_headers).
void HierGroup::check_in_node(Call& c) {
  const int L = lay_.per_node;
  const CallHeader mine = header(c);
  std::vector<CallHeader> all(L);
  CollectiveDesc g;
  g.kind = CollectiveKind::kAllGather;
  g.send = &mine;
  g.recv = all.data();
  g.count = sizeof(CallHeader);
  g.dtype = DType::kU8;
  intra(c, g);
  for (int j = 0; j < L; ++j) {
    if (!p2p::same_call(mine, all[j])) mismatch(c, peer(lay_.node, j), all[j]);
  }
  if (c.desc.op == ReduceOp::kPremulSum) {
    c.factors.assign(n_, 1.0);
    for (int j = 0; j < L; ++j) c.factors[peer(lay_.node, j)] = all[j].premul;
  }
}

void HierGroup::intra(const Call& c, CollectiveDesc d) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - Clock::now());
  d.timeout = std::max(left, std::chrono::milliseconds(1));
  d.seq = c.desc.seq;
  intra_->run(d)->wait();
}

void HierGroup::post(Call& c, Pending& p, int to, bool send, Phase phase, uint64_t step, void* data,
                     size_t bytes) {
  const uint64_t tag = hier_tag(c.index, phase, step);
  p.requests.push_back(send ? net_->isend(to, tag, data, bytes)
                            : net_->irecv(to, tag, data, bytes));
  p.peers.push_back(to);
  p.expect.push_back(send ? SIZE_MAX : bytes);
}

void HierGroup::wait(Call& c, Pending& p, const std::string& what) {
  if (p.requests.empty()) return;
  net_->wait_all(p.requests, p.peers, c.deadline, describe_call(c) + " (" + what + ")");
  for (size_t i = 0; i < p.requests.size(); ++i) {
    if (p.expect[i] == SIZE_MAX) continue;
    BRAID_CHECK(p.requests[i]->received() == p.expect[i], kInvalidArgument, describe_call(c),
                ": group rank ", p.peers[i], " (world rank ", ctx_.global_ranks[p.peers[i]],
                ") sent ", p.requests[i]->received(), " bytes (", what, "); expected ", p.expect[i],
                " (the ranks' counts differ)");
  }
  p = Pending{};
}

void HierGroup::post_headers(Call& c, const std::vector<int>& peers, Pending& p) {
  head_out_ = header(c);  // sent from here: it lives until check_headers waited
  stage_.resize(peers.size() * sizeof(CallHeader));
  for (size_t i = 0; i < peers.size(); ++i) {
    post(c, p, peers[i], true, kHeaders, 0, &head_out_, sizeof(CallHeader));
    post(c, p, peers[i], false, kHeaders, 0, stage_.data() + i * sizeof(CallHeader),
         sizeof(CallHeader));
  }
}

void HierGroup::check_headers(Call& c, Pending& p) {
  std::vector<int> peers;
  for (size_t i = 0; i < p.peers.size(); i += 2) peers.push_back(p.peers[i]);
  wait(c, p, "call headers");
  const CallHeader mine = header(c);
  for (size_t i = 0; i < peers.size(); ++i) {
    CallHeader theirs;
    std::memcpy(&theirs, stage_.data() + i * sizeof(CallHeader), sizeof(CallHeader));
    if (!p2p::same_call(mine, theirs)) mismatch(c, peers[i], theirs);
  }
}

// Note [Chain]: the determinism rule (docs/shm.md) folds x0 op x1 op ... op x(n-1) in rank
// order in the accumulation type. Node k holds ranks [kL, (k+1)L), so the fold is a chain:
// node 0 folds its ranks, node k continues from node k-1's accumulator (in the accumulation
// type, never rounded) with its own ranks, the last node rounds once. Each local index l
// carries shard l of the buffer, in pieces (256 KiB by default) so that the nodes work at once.
void HierGroup::chain(Call& c, const void* input, int64_t total, uint8_t* result, bool back) {
  const CollectiveDesc& d = c.desc;
  const DType acc = accumulation_dtype(d.dtype);
  const size_t es = dtype_size(d.dtype), aes = dtype_size(acc);
  const int L = lay_.per_node, N = lay_.nodes, k = lay_.node, l = lay_.local;
  const int64_t begin = p2p::block_start(total, l, L);
  const int64_t cm = p2p::block_start(total, l + 1, L) - begin;

  // 1. raw_[j] = elements [begin, begin + cm) of local rank j's input.
  raw_.resize(static_cast<size_t>(L * cm) * es);
  CollectiveDesc a;
  a.kind = CollectiveKind::kAllToAllV;
  a.send = input;
  a.recv = raw_.data();
  a.count = 1;
  a.dtype = d.dtype;
  for (int j = 0; j < L; ++j) {
    a.send_offsets.push_back(p2p::block_start(total, j, L));
    a.send_counts.push_back(p2p::block_start(total, j + 1, L) - a.send_offsets.back());
    a.recv_offsets.push_back(j * cm);
    a.recv_counts.push_back(cm);
  }
  intra(c, a);

  // 2. the chain, piece by piece.
  const int prev = k > 0 ? peer(k - 1, l) : -1, next = k + 1 < N ? peer(k + 1, l) : -1;
  Pending heads;
  std::vector<int> neighbours;
  if (prev >= 0) neighbours.push_back(prev);
  if (next >= 0) neighbours.push_back(next);
  post_headers(c, neighbours, heads);
  if (cm == 0) return check_headers(c, heads);
  const int64_t piece = std::max<int64_t>(
      {1, piece_bytes_ / static_cast<int64_t>(aes), (cm + kMaxSteps - 1) / kMaxSteps});
  const int64_t pieces = (cm + piece - 1) / piece;
  auto piece_len = [&](int64_t q) { return std::min(piece, cm - q * piece); };
  std::vector<Pending> in(pieces), back_in(pieces);
  Pending sends;
  if (prev >= 0) {
    carry_in_.resize(static_cast<size_t>(cm) * aes);
    for (int64_t q = 0; q < pieces; ++q) {
      post(c, in[q], prev, false, kForward, q, carry_in_.data() + q * piece * aes,
           piece_len(q) * aes);
    }
  }
  if (next >= 0) {
    carry_out_.resize(static_cast<size_t>(cm) * aes);
    if (back) {
      for (int64_t q = 0; q < pieces; ++q) {
        post(c, back_in[q], next, false, kBackward, q, result + q * piece * es, piece_len(q) * es);
      }
    }
  }
  // The neighbours' headers are checked before their data is used, not before this node
  // sends: node 0 starts the chain without waiting for a round trip.
  bool checked = false;
  auto check_once = [&] {
    if (!checked) check_headers(c, heads);
    checked = true;
  };
  Folder folder(d.dtype, d.op, c.factors, n_, &fold_scratch_);
  std::vector<const void*> inputs(L);
  for (int64_t q = 0; q < pieces; ++q) {
    const int64_t off = q * piece, m = piece_len(q);
    for (int j = 0; j < L; ++j) inputs[j] = raw_.data() + (j * cm + off) * es;
    const void* carry = nullptr;
    if (prev >= 0) {
      check_once();
      wait(c, in[q], "forward piece " + std::to_string(q));
      carry = carry_in_.data() + off * aes;
    }
    if (next >= 0) {
      folder.fold_stage(inputs.data(), k * L, L, carry, m, carry_out_.data() + off * aes);
      post(c, sends, next, true, kForward, q, carry_out_.data() + off * aes, m * aes);
    } else {
      folder.fold_stage(inputs.data(), k * L, L, carry, m, result + off * es);
      if (back && prev >= 0) post(c, sends, prev, true, kBackward, q, result + off * es, m * es);
    }
  }
  check_once();
  if (back && next >= 0) {
    for (int64_t q = 0; q < pieces; ++q) {
      wait(c, back_in[q], "backward piece " + std::to_string(q));
      if (prev >= 0) {
        post(c, sends, prev, true, kBackward, q, result + q * piece * es, piece_len(q) * es);
      }
    }
  }
  wait(c, sends, "chain sends");
}

// all_reduce: chain with the result travelling back, then the node's all_gather of the shards.
void HierGroup::all_reduce(Call& c) {
  const CollectiveDesc& d = c.desc;
  if (d.count == 0) return;
  const size_t es = dtype_size(d.dtype);
  const int L = lay_.per_node, l = lay_.local;
  const int64_t begin = p2p::block_start(d.count, l, L);
  const int64_t cm = p2p::block_start(d.count, l + 1, L) - begin;
  auto* recv = static_cast<uint8_t*>(d.recv);
  if (d.count % L == 0) {
    chain(c, d.send, d.count, recv + begin * es, /*back=*/true);
    CollectiveDesc g;  // in place: this rank's shard is already at its place in recv
    g.kind = CollectiveKind::kAllGather;
    g.send = recv + begin * es;
    g.recv = recv;
    g.count = cm;
    g.dtype = d.dtype;
    return intra(c, g);
  }
  std::vector<uint8_t> shard(static_cast<size_t>(cm) * es);
  chain(c, d.send, d.count, shard.data(), /*back=*/true);
  CollectiveDesc g;  // shards of unequal sizes
  g.kind = CollectiveKind::kAllToAllV;
  g.send = shard.data();
  g.recv = recv;
  g.count = 1;
  g.dtype = d.dtype;
  for (int j = 0; j < L; ++j) {
    g.send_offsets.push_back(0);
    g.send_counts.push_back(cm);
    g.recv_offsets.push_back(p2p::block_start(d.count, j, L));
    g.recv_counts.push_back(p2p::block_start(d.count, j + 1, L) - g.recv_offsets.back());
  }
  intra(c, g);
}

// reduce_scatter: chain over the whole input (n blocks); the last node's ranks send each
// rank the parts of its block they hold.
void HierGroup::reduce_scatter(Call& c) {
  const CollectiveDesc& d = c.desc;
  if (d.count == 0) return;
  const size_t es = dtype_size(d.dtype);
  const int L = lay_.per_node, N = lay_.nodes, l = lay_.local;
  const int64_t total = d.count * n_;
  std::vector<uint8_t> shard;
  const bool last = lay_.node == N - 1;
  if (last) {
    shard.resize(
        static_cast<size_t>(p2p::block_start(total, l + 1, L) - p2p::block_start(total, l, L)) *
        es);
  }
  chain(c, d.send, total, shard.data(), /*back=*/false);
  // Block g = [g count, (g + 1) count) of the result; shard j of the last node covers
  // [block_start(total, j, L), block_start(total, j + 1, L)).
  Pending p;
  const int64_t mine_begin = me_ * d.count, mine_end = mine_begin + d.count;
  auto* recv = static_cast<uint8_t*>(d.recv);
  for (int j = 0; j < L; ++j) {  // receives: the parts of my block
    const int64_t s = p2p::block_start(total, j, L), e = p2p::block_start(total, j + 1, L);
    const int64_t lo = std::max(s, mine_begin), hi = std::min(e, mine_end);
    if (lo >= hi || peer(N - 1, j) == me_) continue;
    post(c, p, peer(N - 1, j), false, kSpread, 0, recv + (lo - mine_begin) * es, (hi - lo) * es);
  }
  if (last) {
    const int64_t s = p2p::block_start(total, l, L), e = p2p::block_start(total, l + 1, L);
    for (int64_t g = s / d.count; g < n_ && g * d.count < e; ++g) {
      const int64_t lo = std::max(s, g * d.count), hi = std::min(e, (g + 1) * d.count);
      if (lo >= hi) continue;
      uint8_t* part = shard.data() + (lo - s) * es;
      if (g == me_) {
        std::memcpy(recv + (lo - mine_begin) * es, part, (hi - lo) * es);
      } else {
        post(c, p, static_cast<int>(g), true, kSpread, 0, part, (hi - lo) * es);
      }
    }
  }
  wait(c, p, "spread of the result blocks");
}

// all_gather: each rank exchanges its block with the ranks of its local index on the other
// nodes, then each node's ranks all_gather, node block by node block, in place on shm.
void HierGroup::all_gather(Call& c) {
  const CollectiveDesc& d = c.desc;
  if (d.count == 0) return;
  const size_t bytes = d.count * dtype_size(d.dtype);
  const int N = lay_.nodes, k = lay_.node, l = lay_.local;
  auto* recv = static_cast<uint8_t*>(d.recv);
  if (d.send != recv + me_ * bytes) std::memcpy(recv + me_ * bytes, d.send, bytes);
  std::vector<int> column;
  for (int o = 0; o < N; ++o) {
    if (o != k) column.push_back(peer(o, l));
  }
  Pending heads, p;
  post_headers(c, column, heads);
  for (int r : column) {
    post(c, p, r, true, kSpread, 0, recv + me_ * bytes, bytes);
    post(c, p, r, false, kSpread, 0, recv + r * bytes, bytes);
  }
  check_headers(c, heads);
  wait(c, p, "exchange between nodes");
  for (int o = 0; o < N; ++o) {
    CollectiveDesc g;
    g.kind = CollectiveKind::kAllGather;
    g.send = recv + peer(o, l) * bytes;
    g.recv = recv + peer(o, 0) * bytes;
    g.count = d.count;
    g.dtype = d.dtype;
    intra(c, g);
  }
}

// broadcast: a binomial tree over the nodes among the ranks of the root's local index, then
// each node's shm broadcast from that local index.
void HierGroup::broadcast(Call& c) {
  const CollectiveDesc& d = c.desc;
  if (d.count == 0) return;
  const size_t bytes = d.count * dtype_size(d.dtype);
  const int L = lay_.per_node, N = lay_.nodes, k = lay_.node, l = lay_.local;
  const int root_node = d.root / L, root_local = d.root % L;
  if (me_ == d.root && d.send != d.recv) std::memcpy(d.recv, d.send, bytes);
  if (l == root_local) {
    const int v = (k - root_node + N) % N;  // position in the tree
    auto at = [&](int w) { return peer((w + root_node) % N, l); };
    int mask = 1, parent = -1;
    for (; mask < N; mask <<= 1) {
      if (v & mask) {
        parent = at(v - mask);
        break;
      }
    }
    std::vector<int> children, neighbours;
    for (int m = mask >> 1; m > 0; m >>= 1) {
      if (v + m < N) children.push_back(at(v + m));
    }
    if (parent >= 0) neighbours.push_back(parent);
    neighbours.insert(neighbours.end(), children.begin(), children.end());
    Pending heads, p;
    post_headers(c, neighbours, heads);
    if (parent >= 0) {
      post(c, p, parent, false, kForward, 0, d.recv, bytes);
      check_headers(c, heads);  // before forwarding the parent's data
      wait(c, p, "from the parent node");
    }
    for (int child : children) post(c, p, child, true, kForward, 0, d.recv, bytes);
    if (parent < 0) check_headers(c, heads);  // the root: after its sends are on their way
    wait(c, p, "to the child nodes");
  }
  CollectiveDesc b;
  b.kind = CollectiveKind::kBroadcast;
  b.send = d.recv;
  b.recv = d.recv;
  b.count = d.count;
  b.dtype = d.dtype;
  b.root = root_local;
  intra(c, b);
}

}  // namespace

std::string node_identity(int world_rank) {
  if (const char* k = std::getenv("BRAID_HIER_RANKS_PER_NODE"); k && *k) {
    char* end = nullptr;
    const long per = std::strtol(k, &end, 10);
    BRAID_CHECK(*end == '\0' && per > 0 && per < INT_MAX, kInvalidArgument,
                "BRAID_HIER_RANKS_PER_NODE is '", k, "'; expected a positive integer");
    return "simulated node " + std::to_string(world_rank / per);
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  if (const char* g = std::getenv("GROUP_RANK"); g && *g) {
    return std::string(host) + " node rank " + g;
  }
  return std::string(host) + " " + read_link("/proc/self/ns/net");
}

std::unique_ptr<Backend> make_hier_backend(const BackendContext& ctx,
                                           const HierTransportFactory& transport) {
  return std::make_unique<HierGroup>(ctx, transport);
}

}  // namespace braid
