// The point-to-point backend's frame (docs/p2p.md): creation, run() (one call at a time, the
// group broken after any error), the rounds every algorithm is made of, the always-on
// cross-rank check and user send / recv. The algorithms are in p2p_collectives_algos.cc.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "fold.h"
#include "p2p_collectives_impl.h"

namespace braid::p2p {
namespace {

constexpr std::chrono::milliseconds kDefaultTimeout{300000};
constexpr unsigned kCheckPhase = 0;

// Note [Fused check]: the most data bytes one rank sends with its header. Every rank of a
// group computes the same value (it sizes the check's receives): 64 KiB (Options::small_bytes'
// default), less in groups of more than 64 ranks so that a call's records stay within 4 MiB.
size_t fuse_limit(int n) {
  return std::min<size_t>(size_t{64} << 10, (size_t{4} << 20) / n / 16 * 16);
}
// A record: the header, then the data padded to 16 bytes (so every record, and the data in
// it, starts 16-byte aligned in the check buffer).
size_t record_bytes(size_t payload) {
  return sizeof(CallHeader) + (payload + 15) / 16 * 16;
}

BackendCapabilities make_capabilities() {
  BackendCapabilities c;
  c.devices = {DeviceType::kCPU};
#define BRAID_P2P_DTYPE(e, n, st, T, sz, fl) c.dtypes.push_back(DType::e);
  BRAID_FOR_EACH_DTYPE(BRAID_P2P_DTYPE)
#undef BRAID_P2P_DTYPE
  for (int k = 0; k <= static_cast<int>(CollectiveKind::kRecv); ++k) {
    c.collectives.push_back(static_cast<CollectiveKind>(k));
  }
  c.point_to_point = true;
  c.runs_on_any_thread = true;  // run() finishes every call (docs/p2p.md)
  return c;
}

}  // namespace

// "all_reduce f32 x 1024 sum", "broadcast bf16 x 7 root 2", "barrier" (as the shm backend).
Clock::time_point call_deadline(const CollectiveDesc& d, std::chrono::milliseconds group_timeout) {
  auto timeout = d.timeout.count() > 0 ? d.timeout : group_timeout;
  if (timeout.count() <= 0) timeout = kDefaultTimeout;
  return Clock::now() + timeout;
}

CallHeader make_header(const CollectiveDesc& d, uint64_t index) {
  CallHeader h;
  h.index = index;
  h.seq = d.seq;
  h.signature = d.signature;
  h.count = d.count;
  h.premul = d.premul_factor;
  h.root = d.root;
  h.kind = static_cast<uint8_t>(d.kind);
  h.dtype = static_cast<uint8_t>(d.dtype);
  h.op = static_cast<uint8_t>(d.op);
  return h;
}

std::string describe_header(const CallHeader& h) {
  const auto kind = static_cast<CollectiveKind>(h.kind);
  std::ostringstream out;
  out << collective_name(kind);
  if (kind == CollectiveKind::kBarrier) return out.str();
  out << " " << static_cast<DType>(h.dtype);
  if (kind != CollectiveKind::kAllToAllV) out << " x " << h.count;
  if (is_reduction(kind)) out << " " << reduce_op_name(static_cast<ReduceOp>(h.op));
  if (is_rooted(kind)) out << " root " << h.root;
  return out.str();
}

bool same_call(const CallHeader& a, const CallHeader& b) {
  const auto kind = static_cast<CollectiveKind>(a.kind);
  if (a.index != b.index || a.kind != b.kind) return false;
  if (kind == CollectiveKind::kBarrier) return true;
  if (a.dtype != b.dtype) return false;
  if (kind != CollectiveKind::kAllToAllV && a.count != b.count) return false;
  if (is_reduction(kind) && a.op != b.op) return false;
  if (is_rooted(kind) && a.root != b.root) return false;
  return true;
}

Algo parse_algo(std::string_view text) {
  if (text.empty() || text == "auto") return Algo::kAuto;
  if (text == "ring") return Algo::kRing;
  if (text == "rd") return Algo::kRd;
  BRAID_FAIL(kInvalidArgument, "p2p: BRAID_P2P_ALGO is '", text,
             "'; expected one of auto, ring, rd");
}

namespace {
Options options_from_env(uint64_t default_segment_bytes) {
  Options o;
  const char* algo = std::getenv("BRAID_P2P_ALGO");
  o.algo = parse_algo(algo ? algo : "");
  o.segment_bytes = get_env_bytes("BRAID_P2P_SEGMENT_BYTES", default_segment_bytes);
  return o;
}
}  // namespace

Options options_from_env() {
  return options_from_env(Options{}.segment_bytes);
}

Options options_from_env(const Transport& transport) {
  const uint64_t preferred = transport.preferred_segment_bytes();
  return options_from_env(preferred > 0 ? preferred : Options{}.segment_bytes);
}

std::unique_ptr<Backend> make_p2p_backend(std::string name, const BackendContext& ctx,
                                          std::unique_ptr<Transport> transport) {
  const Options options = options_from_env(*transport);
  return make_p2p_backend(std::move(name), ctx, std::move(transport), options);
}

std::unique_ptr<Backend> make_p2p_backend(std::string name, const BackendContext& ctx,
                                          std::unique_ptr<Transport> transport, Options options) {
  return std::make_unique<P2pGroup>(std::move(name), ctx, std::move(transport), options);
}

P2pGroup::P2pGroup(std::string name, const BackendContext& ctx,
                   std::unique_ptr<Transport> transport, Options options)
    : name_(std::move(name)),
      ctx_(ctx),
      transport_(std::move(transport)),
      options_(options),
      caps_(make_capabilities()) {
  BRAID_CHECK(transport_, kInvalidArgument, name_, ": no transport given");
  me_ = transport_->rank();
  n_ = transport_->size();
  BRAID_CHECK(me_ == ctx.rank && n_ == ctx.size, kInvalidArgument, name_,
              ": the transport is rank ", me_, " of ", n_, " but the group is rank ", ctx.rank,
              " of ", ctx.size, "; expected the same");
  if (ctx_.global_ranks.size() != static_cast<size_t>(n_)) {
    ctx_.global_ranks.resize(n_);
    for (int r = 0; r < n_; ++r) ctx_.global_ranks[r] = r;
  }
}

std::shared_ptr<Work> P2pGroup::run(const CollectiveDesc& desc) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (broken_) std::rethrow_exception(broken_);
    if (is_reduction(desc.kind)) check_reducible(desc.dtype, desc.op);  // nothing to undo yet
    if (desc.kind == CollectiveKind::kSend || desc.kind == CollectiveKind::kRecv) {
      BRAID_CHECK(desc.tag >= 0 && desc.tag <= kMaxUserTag, kInvalidArgument, name_, ": ",
                  collective_name(desc.kind), " tag ", desc.tag, "; expected 0 <= tag < 2^62");
    }
  } catch (...) {
    return completed_work(std::current_exception());
  }
  Call c{.desc = desc,
         .deadline = call_deadline(desc, ctx_.timeout),
         .headers = {},
         .factors = {},
         .segment = 0,
         .fused = false,
         .data = {}};
  try {
    dispatch(c);
    return completed_work();
  } catch (...) {
    broken_ = std::current_exception();
  }
  return completed_work(broken_);
}

void P2pGroup::dispatch(Call& c) {
  const CollectiveKind kind = c.desc.kind;
  if (kind == CollectiveKind::kSend) return send(c);
  if (kind == CollectiveKind::kRecv) return recv(c);
  c.index = ++calls_;  // send / recv do not advance the group's collectives
  check_across_ranks(c);
  if (c.fused) return Algorithms::fused(*this, c);
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
    case CollectiveKind::kReduceScatter:
      return Algorithms::reduction(*this, c);
    case CollectiveKind::kBroadcast:
      return Algorithms::broadcast(*this, c);
    case CollectiveKind::kAllGather:
      return Algorithms::all_gather(*this, c);
    case CollectiveKind::kGather:
      return Algorithms::gather(*this, c);
    case CollectiveKind::kScatter:
      return Algorithms::scatter(*this, c);
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kAllToAllV:
      return Algorithms::all_to_all(*this, c);
    case CollectiveKind::kBarrier:  // the check is a dissemination barrier
    default:
      return;
  }
}

std::string P2pGroup::describe_call(const Call& c) const {
  std::ostringstream out;
  out << name_ << ": " << collective_name(c.desc.kind) << " #" << c.desc.seq;
  if (c.index > 0) out << " (group call #" << c.index << ")";
  return out.str();
}

bool P2pGroup::small(const Call& c, uint64_t bytes) const {
  // Rank 0's setting decides (it came with the cross-rank check), so ranks started with
  // different BRAID_P2P_ALGO values still run the same algorithm.
  const auto algo = static_cast<Algo>(c.headers.at(0).algo);
  if (algo != Algo::kAuto) return algo == Algo::kRd;
  return bytes <= options_.small_bytes;
}

void P2pGroup::post(Call& c, unsigned phase, uint64_t step, const Piece& p, Posted& into) {
  const uint64_t tag = collective_tag(c.index, phase, step);
  into.requests.push_back(p.send ? transport_->isend(p.peer, tag, p.data, p.bytes)
                                 : transport_->irecv(p.peer, tag, p.data, p.bytes));
  into.peers.push_back(p.peer);
  into.expect.push_back(p.send ? kSent : p.bytes);
  if (into.requests.size() == 1) into.phase = phase, into.step = step;
}

std::string P2pGroup::where(const Call& c, unsigned phase, uint64_t step) const {
  return describe_call(c) + " (phase " + std::to_string(phase) + ", step " + std::to_string(step) +
         ")";
}

void P2pGroup::finish(Call& c, Posted& posted) {
  if (posted.requests.empty()) return;
  transport_->wait_all(posted.requests, posted.peers, c.deadline,
                       where(c, posted.phase, posted.step));
  for (size_t i = 0; i < posted.requests.size(); ++i) {
    if (posted.expect[i] == kSent) continue;
    const int peer = posted.peers[i];
    BRAID_CHECK(posted.requests[i]->received() == posted.expect[i], kInvalidArgument,
                describe_call(c), ": group rank ", peer, " (world rank ", ctx_.global_ranks[peer],
                ") sent ", posted.requests[i]->received(), " bytes at phase ", posted.phase,
                " step ", posted.step, "; expected ", posted.expect[i],
                " (the ranks' counts differ)");
  }
  posted = Posted{};
}

// Note [Segments]: a piece longer than Options::segment_bytes goes as consecutive messages of
// at most that many bytes under the same tag, all posted at once; the transport matches the
// messages of one (peer, tag) in the order they were sent, so segment k lands at offset
// k * segment on the receiver. Both sides cut the same length the same way, which holds for
// every collective whose counts the cross-rank check compares; all_to_all_v (counts not
// compared) sends whole messages, so a length mismatch stays a clean error.
//
// Note [Local copy under the transfer]: an out-of-place broadcast's root and an out-of-place
// all_gather copy their own data into the output; before, every rank made that copy first and
// sent from the output. Now the round sends straight from the input and copies meanwhile, in
// steps of kCopyStep bytes with a test() of every request between steps, so that a transport
// progressed by its caller (UCX) keeps its sockets busy during the copy instead of idling
// until it ends.
void P2pGroup::round(Call& c, unsigned phase, uint64_t step, const std::vector<Piece>& pieces,
                     bool segmented, const LocalCopy& copy) {
  Posted posted;
  const uint64_t seg = segmented ? c.segment : 0;
  for (const Piece& p : pieces) {
    if (seg == 0 || p.bytes <= seg) {
      post(c, phase, step, p, posted);
      continue;
    }
    auto* data = static_cast<uint8_t*>(p.data);
    for (size_t off = 0; off < p.bytes; off += seg) {
      post(c, phase, step, {p.peer, p.send, data + off, std::min<size_t>(seg, p.bytes - off)},
           posted);
    }
  }
  constexpr size_t kCopyStep = 256 << 10;
  auto* dst = static_cast<uint8_t*>(copy.dst);
  const auto* src = static_cast<const uint8_t*>(copy.src);
  for (size_t off = 0; dst != src && off < copy.bytes; off += kCopyStep) {
    std::memcpy(dst + off, src + off, std::min(kCopyStep, copy.bytes - off));
    for (auto& r : posted.requests) r->test();
  }
  finish(c, posted);
}

uint8_t* P2pGroup::scratch(size_t bytes) {
  if (bytes > scratch_size_) {
    scratch_.reset();                    // free the old one before taking the new one
    scratch_.reset(new uint8_t[bytes]);  // uninitialized: every byte is received before use
    scratch_size_ = bytes;
  }
  return scratch_.get();
}

// Note [Cross-rank check]: every collective starts with a Bruck all-gather of each rank's
// CallHeader (ceil(log2 n) rounds: at distance d send the records held so far to rank r - d,
// receive from r + d). Every rank then holds every rank's call and compares them all with its
// own, so a mismatch fails on every rank, naming both ranks and both calls in the shm
// backend's wording. The same rounds share the premul_sum factors and are the barrier.
//
// Note [Fused check]: a small call whose latency algorithm moves every rank's data to every
// rank anyway (all_reduce, reduce, reduce_scatter, all_gather, broadcast) sends that data in
// the check's own messages, after its header: one exchange per call instead of two. Each rank
// decides for itself from its own call and options (fuses, fused_bytes) and says so in its
// header; the data is used only when every rank's header says fused, so ranks that decide
// differently (other options, or different calls) still agree: they all run the ordinary
// algorithms, or fail the check. A record is the header and the data padded to 16 bytes;
// round d sends the first min(d, n - d) records as they lie in the buffer and receives into
// room for as many records of the largest size (fuse_limit), so no rank needs to know the
// others' sizes in advance. The reductions fold every rank's raw data in rank order, as the
// latency algorithms do, so the bits are those of every other algorithm.
size_t P2pGroup::fused_bytes(const CollectiveDesc& d, int rank) const {
  const size_t bytes = static_cast<size_t>(d.count) * dtype_size(d.dtype);
  switch (d.kind) {
    case CollectiveKind::kReduceScatter:
      return n_ * bytes;  // the whole input: every rank folds its own block of everybody's
    case CollectiveKind::kBroadcast:
      return rank == d.root ? bytes : 0;
    default:  // all_reduce, reduce: the input; all_gather: this rank's block
      return bytes;
  }
}

bool P2pGroup::fuses(const CollectiveDesc& d) const {
  if (n_ < 2 || options_.algo == Algo::kRing) return false;
  const size_t bytes = static_cast<size_t>(d.count) * dtype_size(d.dtype);
  size_t largest = bytes;  // this rank's largest buffer, as Options::small_bytes counts it
  switch (d.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
    case CollectiveKind::kBroadcast:
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
      largest = n_ * bytes;
      break;
    default:
      return false;
  }
  if (options_.algo == Algo::kAuto && largest > options_.small_bytes) return false;
  return fused_bytes(d, d.root) <= fuse_limit(n_);  // the largest record of the call
}

void P2pGroup::split_records(const Call& c, int from, const uint8_t* at, size_t got, int cnt,
                             std::vector<size_t>& ends) const {
  size_t off = 0;
  for (int i = 0; i < cnt; ++i) {
    CallHeader h;
    const bool whole = got - off >= sizeof(CallHeader);
    if (whole) std::memcpy(&h, at + off, sizeof(CallHeader));
    const bool ok = whole && (h.fused || h.payload == 0) && h.payload <= fuse_limit(n_) &&
                    record_bytes(h.payload) <= got - off;
    BRAID_CHECK(ok, kInvalidArgument, describe_call(c),
                ": the cross-rank check message from group rank ", from, " (world rank ",
                ctx_.global_ranks[from], ") has ", got, " bytes, which are not ", cnt,
                " call records; expected every rank to run the same braid build");
    off += record_bytes(h.payload);
    ends.push_back(ends.back() + record_bytes(h.payload));
  }
  BRAID_CHECK(off == got, kInvalidArgument, describe_call(c),
              ": the cross-rank check message from group rank ", from, " (world rank ",
              ctx_.global_ranks[from], ") has ", got, " bytes, ", got - off, " more than its ", cnt,
              " call records; expected every rank to run the same braid build");
}

void P2pGroup::check_across_ranks(Call& c) {
  const CollectiveDesc& d = c.desc;
  CallHeader mine = make_header(d, c.index);
  mine.algo = static_cast<uint8_t>(options_.algo);
  mine.segment = options_.segment_bytes;
  mine.fused = fuses(d);
  mine.payload = mine.fused ? static_cast<uint32_t>(fused_bytes(d, me_)) : 0;
  const size_t room = record_bytes(fuse_limit(n_));  // the largest record
  if (check_buf_.size() < n_ * room) check_buf_.resize(n_ * room);
  uint8_t* buf = check_buf_.data();
  std::memcpy(buf, &mine, sizeof(CallHeader));
  if (mine.payload > 0) std::memcpy(buf + sizeof(CallHeader), d.send, mine.payload);
  std::vector<size_t> ends{0, record_bytes(mine.payload)};  // record j: rank (me + j) % n
  uint64_t step = 0;
  for (int dist = 1; dist < n_; dist *= 2, ++step) {
    const int cnt = std::min(dist, n_ - dist);
    const int to = (me_ - dist + n_) % n_, from = (me_ + dist) % n_;
    const uint64_t tag = collective_tag(c.index, kCheckPhase, step);
    std::vector<std::unique_ptr<Request>> requests;
    requests.push_back(transport_->isend(to, tag, buf, ends[cnt]));
    requests.push_back(transport_->irecv(from, tag, buf + ends[dist], cnt * room));
    transport_->wait_all(requests, {to, from}, c.deadline, where(c, kCheckPhase, step));
    split_records(c, from, buf + ends[dist], requests[1]->received(), cnt, ends);
  }
  c.headers.resize(n_);
  c.data.resize(n_);
  c.fused = true;
  for (int j = 0; j < n_; ++j) {
    const int p = (me_ + j) % n_;
    std::memcpy(&c.headers[p], buf + ends[j], sizeof(CallHeader));
    c.data[p] = buf + ends[j] + sizeof(CallHeader);
    c.fused = c.fused && c.headers[p].fused;
  }
  c.segment = c.headers[0].segment;  // the check's own rounds above were never segmented
  for (int p = 0; p < n_; ++p) {
    const CallHeader& theirs = c.headers[p];
    if (same_call(mine, theirs)) continue;
    BRAID_FAIL(kInvalidArgument, name_, ": collective mismatch at group call #", mine.index,
               ": group rank ", me_, " (world rank ", ctx_.global_ranks[me_], ") called ",
               describe_header(mine), " (seq ", mine.seq, ", call #", mine.index,
               ") but group rank ", p, " (world rank ", ctx_.global_ranks[p], ") called ",
               describe_header(theirs), " (seq ", theirs.seq, ", call #", theirs.index,
               "); expected every rank of the group to make the same collective calls in the "
               "same order");
  }
  for (int p = 0; c.fused && p < n_; ++p) {  // the same call everywhere: the same sizes
    const size_t want = fused_bytes(d, p);
    BRAID_CHECK(c.headers[p].payload == want, kInvalidArgument, describe_call(c), ": group rank ",
                p, " (world rank ", ctx_.global_ranks[p], ") sent ", c.headers[p].payload,
                " bytes of data with its call; expected ", want);
  }
  if (d.op == ReduceOp::kPremulSum && is_reduction(d.kind)) {
    c.factors.resize(n_);
    for (int p = 0; p < n_; ++p) c.factors[p] = c.headers[p].premul;
  }
}

void P2pGroup::send(Call& c) {
  const CollectiveDesc& d = c.desc;
  std::vector<std::unique_ptr<Request>> requests;
  requests.push_back(transport_->isend(d.peer, static_cast<uint64_t>(d.tag), d.send,
                                       d.count * dtype_size(d.dtype)));
  transport_->wait_all(requests, {d.peer}, c.deadline,
                       describe_call(c) + " to group rank " + std::to_string(d.peer) + " tag " +
                           std::to_string(d.tag));
}

void P2pGroup::recv(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t bytes = d.count * dtype_size(d.dtype);
  std::vector<std::unique_ptr<Request>> requests;
  requests.push_back(transport_->irecv(d.peer, static_cast<uint64_t>(d.tag), d.recv, bytes));
  transport_->wait_all(requests, {d.peer}, c.deadline,
                       describe_call(c) + " from group rank " + std::to_string(d.peer) + " tag " +
                           std::to_string(d.tag));
  BRAID_CHECK(requests[0]->received() == bytes, kInvalidArgument, describe_call(c),
              ": the message from group rank ", d.peer, " (world rank ", ctx_.global_ranks[d.peer],
              ") with tag ", d.tag, " has ", requests[0]->received(), " bytes; expected ", bytes,
              " (", d.count, " x ", d.dtype, ")");
}

}  // namespace braid::p2p
