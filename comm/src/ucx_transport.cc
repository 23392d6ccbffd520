// The UCX transport (docs/ucx.md): start-up (context, workers, address exchange through the
// store, endpoints), isend / irecv on ucp_tag_send_nbx / ucp_tag_recv_nbx, the wait (progress,
// a short spin, then blocking on the workers' event fds until the deadline) and shut-down.
//
// Note [One worker per peer]: UCP tag matching matches the 64-bit tag only, never the sender,
// and p2p::Transport's tags use all 64 bits (p2p_collectives.h's layout), so no bits are left
// to carry the source rank. Each rank therefore opens one worker per peer (itself included)
// with exactly one endpoint on it that carries messages (with BRAID_UCX_UNCHECKED_DATA=1 a
// second one carries none, Note [Unchecked data]): a receive posted on peer q's worker can only
// match what q sent, and messages of one (peer, tag) stay in order because one endpoint carries
// them.
#include "ucx_transport.h"

#include <dlfcn.h>
#include <poll.h>
#include <sched.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "wait_policy.h"

namespace braid {
namespace {

using p2p::Clock;

// Progress back to back for this long before blocking on the event fds: a reply that is
// already on its way costs no system call.
constexpr std::chrono::microseconds kSpinTime{50};
// ... and, while progress delivers events, for this long after the last one (Note [Spin while
// data flows], wait_policy.h). 1 ms was not enough between the tcp pieces of a 4 MiB message
// on the development VM; 5 ms was.
constexpr std::chrono::milliseconds kActiveSpinTime{5};
// Longest single poll(): bounds how late a completion is noticed should a transport not
// signal its event fd (the wait still sleeps, it does not spin).
constexpr int kMaxPollMs = 10;
// How long shut-down waits for endpoints to flush before it forces them closed.
constexpr std::chrono::milliseconds kCloseTime{2000};
// How long the requests abandoned by one error may wait, all together, for UCX to let go of
// their buffers (Note [Abandoned requests]). A live peer finishes a matched message in
// milliseconds; two ranks that abandon requests on each other at once wait out the whole time,
// and the error is reported only after it, so it must stay well below `braid launch`'s grace
// period (1 s in the fault tests): at 2 s per lane the surviving ranks of the two-node kill test
// were killed before reporting in about 1 run in 10.
constexpr std::chrono::milliseconds kAbandonTime{300};

// What one of UCX's ucp_*_print_info calls writes, as text ("" when no stream can be opened).
template <typename Print>
std::string ucx_info_text(Print print) {
  char* text = nullptr;
  size_t length = 0;
  FILE* out = open_memstream(&text, &length);
  if (out == nullptr) return "";
  print(out);
  std::fclose(out);
  std::string result(text, length);
  std::free(text);
  return result;
}

// The names of the transports `context` uses (tcp, self, posix, rc_mlx5, ...), from
// ucp_context_print_info's resource lines ("#  resource 1  :  md 1  dev 1  flags -- tcp/eth0");
// empty when the text has no such line.
std::vector<std::string> context_transports(ucp_context_h context) {
  std::istringstream lines(
      ucx_info_text([context](FILE* out) { ucp_context_print_info(context, out); }));
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    const size_t marker = line.find("-- ");
    if (line.find("resource") == std::string::npos || marker == std::string::npos) continue;
    const std::string tl_dev = line.substr(marker + 3);
    names.push_back(tl_dev.substr(0, tl_dev.find('/')));
  }
  return names;
}

// Note [Copy mode on tcp]: UCX 1.13's tcp transport completes a zero-copy send twice when the
// peer dies under it and aborts the process on an assertion (docs/ucx.md, "Known issue"); a
// copying send has no such path. With braid's 512 KiB tcp segments copying measured no slower
// for a one-way transfer and 5-9% slower where both directions are busy (docs/performance.md).
// So where tcp is the only network transport, braid turns zero-copy off
// (UCX_ZCOPY_THRESH=inf) unless the job set UCX_ZCOPY_THRESH itself. Any other network
// transport (InfiniBand, or one not in this list) keeps UCX's zero-copy: there it is what
// moves large messages fast.
bool tcp_is_the_only_network(ucp_context_h context) {
  bool tcp = false;
  for (const std::string& name : context_transports(context)) {
    if (name == "tcp") {
      tcp = true;
    } else if (name != "self" && name != "posix" && name != "sysv" && name != "cma" &&
               name != "knem" && name != "xpmem") {
      return false;
    }
  }
  return tcp;
}

struct OpState {
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;
};

void on_send(void* /*request*/, ucs_status_t status, void* user) {
  auto* s = static_cast<OpState*>(user);
  s->status = status;
  s->done = true;
}

void on_recv(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* s = static_cast<OpState*>(user);
  s->status = status;
  if (status == UCS_OK) s->length = info->length;
  s->done = true;
}

// The connection to one peer (Note [One worker per peer]).
struct Lane {
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;       // with peer error handling (but the lane to itself)
  ucp_ep_h data_ep = nullptr;  // without: carries every message when set (Note [Unchecked data])
  int efd = -1;
  ucs_status_t error = UCS_OK;  // set by `ep`'s error callback: the peer is lost
  int abandoned = 0;            // requests destroyed unfinished (an error or timeout)
  ucp_ep_h send_ep() const { return data_ep ? data_ep : ep; }
  // Its worker is destroyed (Note [Unchecked data], or shut-down), with every request on it.
  bool torn_down() const { return worker == nullptr; }
};

// Note [Unchecked data]: with BRAID_UCX_UNCHECKED_DATA=1 each lane to another rank has two
// endpoints to the peer's worker. `ep` asks for peer error handling and carries nothing: it is
// there to report the peer's loss (on_ep_error). `data_ep` does not ask for it and carries
// every message, so that UCX 1.13 may move a large tcp message by rendezvous with put_zcopy,
// written straight into the receive buffer, where peer error handling forces active-message
// fragments and one more copy (docs/ucx.md, "Bandwidth against ucx_perftest"). One endpoint
// carries all of a lane's messages, so messages of one (peer, tag) stay in order.
// Without error handling UCX cannot be made to let go of a buffer: a matched receive goes on
// taking the bytes that reach the socket, whether the request was freed or not (seen: a
// SIGSEGV in ucp_eager_middle_handler after a node kill, writing into a freed receive buffer).
// So a request abandoned unfinished (Note [Abandoned requests]) tears the whole lane down:
// both endpoints closed with FORCE and the lane's worker destroyed, which closes its sockets,
// so nothing can reach the buffer afterwards. The group is broken after any error anyway
// (docs/p2p.md); the peer sees its own lane to this rank fail and reports a lost peer.
// What braid cannot help: UCX 1.13's tcp put_zcopy, which only data_ep uses, aborts the process
// on its own assertion (UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK) in about 1 node kill in 100 with 1
// rank per node, inside ucp_worker_progress, before any error reaches braid (docs/ucx.md). That
// abort is why the mode is an opt-in.

void on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  static_cast<Lane*>(arg)->error = status;
}

// Closes `ep` (with FORCE, or flushing it first) and clears it; returns UCX's close request to
// wait on, or nullptr when the close finished at once or failed.
ucs_status_ptr_t close_endpoint(ucp_ep_h& ep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t closing = ucp_ep_close_nbx(ep, &p);
  ep = nullptr;
  return closing == nullptr || UCS_PTR_IS_ERR(closing) ? nullptr : closing;
}

// Note [Unchecked data]: ends everything UCX does for this lane. The endpoints' close requests
// are let go at once; destroying the worker ends them, with every request still on it.
void tear_down(Lane& lane) {
  for (ucp_ep_h* ep : {&lane.data_ep, &lane.ep}) {
    if (!*ep) continue;
    if (ucs_status_ptr_t closing = close_endpoint(*ep, true)) ucp_request_free(closing);
  }
  ucp_worker_destroy(lane.worker);
  lane.worker = nullptr;
  lane.efd = -1;
  if (lane.error == UCS_OK) lane.error = UCS_ERR_CANCELED;
}

void check_ucs(ucs_status_t status, const char* what) {
  BRAID_CHECK(status == UCS_OK, kInternal, "ucx transport: ", what,
              " failed: ", ucs_status_string(status));
}

// Note [braid's UCX defaults]: settings braid gives UCX where the job has not set the variable
// itself (an `UCX_<name>` in the environment always wins). tcp's segment sizes: UCX 1.13's
// defaults (8 KiB to send, 64 KiB to receive) cut a large message into active-message
// fragments of at most 64 KiB, and with peer error handling (which braid's endpoints need)
// large tcp messages go that way rather than by put_zcopy (docs/ucx.md, "Bandwidth against
// ucx_perftest"). 512 KiB, the size of UCX's own rendezvous fragments, moved a 64 MiB
// ucx_perftest `-e` message 6.9-8.5 GB/s between the namespaces against 4.8-5.9 with the
// defaults (256 KiB: 6.2-7.7, 1 MiB: 7.2-7.4, 2 MiB: 5.1-5.6; docs/performance.md).
struct UcxDefault {
  const char* key;           // as UCX 1.13's ucp_config_modify takes it: without the prefix
  const char* prefixed_key;  // as later UCX takes it (1.22 refuses `key`): with the prefix
  const char* env;           // the variable that, when set, keeps the job's own value
  const char* value;
};
constexpr UcxDefault kUcxDefaults[] = {
    {"TX_SEG_SIZE", "TCP_TX_SEG_SIZE", "UCX_TCP_TX_SEG_SIZE", "512K"},
    {"RX_SEG_SIZE", "TCP_RX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE", "512K"},
};

// UCX 1.13's ucp_config_modify keeps a key it does not know itself for the transports, which
// apply it when UCX opens them (`ucp_ep_print_info` shows it: with 512 KiB tcp sends eagerly up
// to 524281 bytes), and it accepts any key that way, but the transports only match the key
// without its "TCP_" (they warn "invalid configurations" about the prefixed one). Later UCX
// (1.22 from PyPI's libucx wheels) matches a transport's key with its prefix and refuses the
// other as an invalid parameter. So the key without the prefix goes first and the prefixed one
// only where that is refused. It overrides the environment, so only keys the job leaves unset
// are given. Only tcp has these keys; other transports ignore them.
void apply_ucx_defaults(ucp_config_t* config) {
  for (const UcxDefault& d : kUcxDefaults) {
    if (std::getenv(d.env) != nullptr) continue;
    if (ucp_config_modify(config, d.key, d.value) == UCS_OK) continue;
    const ucs_status_t st = ucp_config_modify(config, d.prefixed_key, d.value);
    BRAID_CHECK(st == UCS_OK, kInternal, "ucx transport: UCX takes neither ", d.key, " nor ",
                d.prefixed_key, " as a setting (braid's default ", d.env, "=", d.value, "; set ",
                d.env, " to choose it yourself): ", ucs_status_string(st));
  }
}

class UcxRequest final : public p2p::Request {
 public:
  // `abandon_deadline`: the transport's, shared by all its requests (Note [Abandoned
  // requests]): set by the first abandoned request that waits, reset by every wait_all; every
  // later one waits no longer than that, so the requests one error leaves behind cost at most
  // kAbandonTime together, on every lane.
  UcxRequest(Lane& lane, int peer, std::optional<Clock::time_point>& abandon_deadline)
      : lane_(lane), peer_(peer), abandon_deadline_(abandon_deadline) {}
  ~UcxRequest() override {
    if (!handle_) return;
    if (!state_.done) abandon();
    // After free, UCX calls no callback, so state_ may go. A torn-down lane's worker took its
    // requests with it (Note [Unchecked data]).
    if (!lane_.torn_down()) ucp_request_free(handle_);
  }
  bool test() override {
    if (!state_.done && !lane_.torn_down()) ucp_worker_progress(lane_.worker);
    return state_.done;
  }
  size_t received() const override { return state_.length; }
  bool done() const { return state_.done; }

  // Takes what ucp_*_nbx returned: NULL (done), an error, or a request handle.
  void adopt(ucs_status_ptr_t r) {
    if (r == nullptr) {
      state_.done = true;
    } else if (UCS_PTR_IS_ERR(r)) {
      state_.status = UCS_PTR_STATUS(r);
      state_.done = true;
    } else {
      handle_ = r;
    }
  }
  OpState& state() { return state_; }
  int peer() const { return peer_; }

 private:
  // Note [Abandoned requests]: an error or a timeout ended the wait with this request
  // unfinished, and its buffer may be freed as soon as this returns. An unmatched receive is
  // cancelled. A receive already matched (rendezvous data arriving) or a send in flight cannot
  // be, and UCX would go on reading or writing the buffer: seen under ASan as a write into a
  // freed buffer during shut-down after a node was killed. Those close the lane's endpoint
  // with FORCE, which completes its outstanding operations, and wait until this one has, at
  // most until kAbandonTime after the transport's first such wait: closing the endpoint is not
  // enough, the peer's own connection to this rank's worker can still deliver the rest of a
  // matched message (tried: waiting only for the close let UCX's eager handler write into a
  // freed buffer, a SIGSEGV in 2 of 12 two-node kill runs). A lane whose endpoint UCX has
  // failed (the peer is lost) is not waited on: no more of that peer's data can arrive.
  void abandon();

  Lane& lane_;
  int peer_;
  std::optional<Clock::time_point>& abandon_deadline_;
  OpState state_;
  void* handle_ = nullptr;
};

void UcxRequest::abandon() {
  ++lane_.abandoned;
  if (lane_.torn_down()) return;
  const bool peer_failed = lane_.error != UCS_OK && lane_.error != UCS_ERR_CANCELED;
  ucp_request_cancel(lane_.worker, handle_);
  ucp_worker_progress(lane_.worker);
  if (state_.done) return;
  if (lane_.data_ep) {  // Note [Unchecked data]
    tear_down(lane_);
    return;
  }
  // UCX failed this lane's endpoint itself (the peer is lost): the connection is gone, so
  // nothing more from that peer can reach the buffer, and UCX never completes what was left on
  // it (waiting only held the error back by 2 s per request, past `braid launch`'s grace
  // period, on the ranks of the surviving node).
  if (peer_failed) return;
  ucs_status_ptr_t closing = nullptr;
  if (lane_.ep) {  // else an earlier abandoned request of this lane closed it
    closing = close_endpoint(lane_.ep, true);
    if (lane_.error == UCS_OK) lane_.error = UCS_ERR_CANCELED;
  }
  if (!abandon_deadline_) abandon_deadline_ = Clock::now() + kAbandonTime;
  const Clock::time_point end = *abandon_deadline_;
  while ((!state_.done || (closing && ucp_request_check_status(closing) == UCS_INPROGRESS)) &&
         Clock::now() < end) {
    if (ucp_worker_progress(lane_.worker) == 0) {
      pollfd fd{lane_.efd, POLLIN, 0};
      if (ucp_worker_arm(lane_.worker) == UCS_OK) ::poll(&fd, 1, 1);
    }
  }
  if (closing) ucp_request_free(closing);
}

class UcxTransport final : public p2p::Transport {
 public:
  explicit UcxTransport(const BackendContext& ctx) : ctx_(ctx), lanes_(ctx.size) {
    BRAID_CHECK(ctx.size >= 1 && ctx.rank >= 0 && ctx.rank < ctx.size, kInvalidArgument,
                "make_ucx_transport: rank ", ctx.rank, " of size ", ctx.size,
                ": expected 0 <= rank < size");
    BRAID_CHECK(ctx.store != nullptr, kInvalidArgument, "make_ucx_transport: no store");
    for (int q = 0; q < ctx.size; ++q) all_peers_.push_back(q);
    try {
      start();
    } catch (...) {
      shut_down();
      throw;
    }
  }
  ~UcxTransport() override { shut_down(); }

  int rank() const override { return ctx_.rank; }
  int size() const override { return ctx_.size; }
  // Unchecked data endpoints move a tcp rendezvous straight into the receive buffer, which
  // pays with 4 MiB segments: in place, a 64 MiB broadcast between two network namespaces moved
  // 8.4 GB/s with them and 5.5 with the default 1 MiB (docs/performance.md).
  uint64_t preferred_segment_bytes() const override {
    return unchecked_data_ ? uint64_t{4} << 20 : 0;
  }

  std::string describe(int peer) {
    Lane& lane = lane_of(peer, "describe");
    BRAID_CHECK(lane.ep != nullptr, kPeerLost, "ucx transport describe: the endpoint to peer ",
                peer_text({peer}), " was closed");
    std::string text =
        ucx_info_text([&lane](FILE* out) { ucp_ep_print_info(lane.send_ep(), out); });
    BRAID_CHECK(!text.empty(), kInternal, "ucx transport describe: UCX wrote nothing for peer ",
                peer_text({peer}));
    return text;
  }

  std::unique_ptr<p2p::Request> isend(int peer, uint64_t tag, const void* data,
                                      size_t bytes) override {
    Lane& lane = lane_of(peer, "isend");
    BRAID_CHECK(lane.ep != nullptr, kPeerLost, "ucx transport isend: the endpoint to peer ",
                peer_text({peer}), " was closed after an operation on it was abandoned (",
                ucs_status_string(lane.error), ")");
    auto req = std::make_unique<UcxRequest>(lane, peer, abandon_deadline_);
    ucp_request_param_t p = params(req->state());
    p.cb.send = on_send;
    req->adopt(ucp_tag_send_nbx(lane.send_ep(), data, bytes, tag, &p));
    return req;
  }

  std::unique_ptr<p2p::Request> irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    Lane& lane = lane_of(peer, "irecv");
    BRAID_CHECK(!lane.torn_down(), kPeerLost, "ucx transport irecv: the lane to peer ",
                peer_text({peer}), " was torn down after an operation on it was abandoned");
    auto req = std::make_unique<UcxRequest>(lane, peer, abandon_deadline_);
    ucp_request_param_t p = params(req->state());
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;  // the callback always reports the length
    p.cb.recv = on_recv;
    req->adopt(ucp_tag_recv_nbx(lane.worker, data, bytes, tag, ~uint64_t{0}, &p));
    return req;
  }

  void wait_all(std::vector<std::unique_ptr<p2p::Request>>& requests, const std::vector<int>& peers,
                Clock::time_point deadline, const std::string& what) override;

 private:
  void start();
  void shut_down();
  void close_endpoints();
  Lane& lane_of(int peer, const char* op) {
    BRAID_CHECK(peer >= 0 && peer < ctx_.size, kInvalidArgument, "ucx transport ", op, ": peer ",
                peer, " is outside the group of ", ctx_.size, " ranks");
    return lanes_[peer];
  }
  static ucp_request_param_t params(OpState& state) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.user_data = &state;
    return p;
  }
  // Note [Progress every worker]: a send that UCX reported complete may still sit in the
  // transport's buffer (tcp: the socket was full; the rest goes out when that worker is
  // progressed again), and keepalive and connection traffic need progress too. So every wait
  // progresses all workers, not only those of its requests; otherwise a message to a peer
  // this rank no longer waits on can stay unsent, and that peer times out.
  // Returns the events the workers delivered.
  unsigned progress_all() {
    unsigned events = 0;
    for (Lane& lane : lanes_) {
      if (lane.worker) events += ucp_worker_progress(lane.worker);
    }
    return events;
  }
  // Sleeps on the event fds of `peers`' workers until one fires or `deadline` (at most
  // kMaxPollMs); returns at once when a worker has events pending.
  void block(const std::vector<int>& peers, Clock::time_point deadline);
  std::string peer_text(const std::vector<int>& peers) const;

  BackendContext ctx_;
  ucp_context_h context_ = nullptr;
  std::vector<Lane> lanes_;
  std::vector<int> all_peers_;  // 0 .. size - 1: block() sleeps on every worker
  std::optional<Clock::time_point> abandon_deadline_;  // UcxRequest's abandon_deadline
  // This node's ranks (LOCAL_WORLD_SIZE or the launcher's equivalent) leave a CPU to spare:
  // waits may spin while data flows (Note [Spin while data flows]).
  bool spare_cpu_ = detect_rank_info().local_world_size < usable_cpus();
  bool unchecked_data_ = get_env_bool("BRAID_UCX_UNCHECKED_DATA", false);  // Note [Unchecked data]
};

void UcxTransport::start() {
  ucp_config_t* config = nullptr;
  check_ucs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  apply_ucx_defaults(config);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(ctx_.size);
  ucs_status_t st = ucp_init(&params, config, &context_);
  // Note [Copy mode on tcp]: where tcp is the only network UCX found, sends copy into UCX's
  // buffers instead of going zero-copy (docs/ucx.md, "Known issue"); the choice needs the
  // context's transports, so the context is made again with it.
  if (st == UCS_OK && std::getenv("UCX_ZCOPY_THRESH") == nullptr &&
      tcp_is_the_only_network(context_)) {
    ucp_cleanup(context_);
    context_ = nullptr;
    st = ucp_config_modify(config, "ZCOPY_THRESH", "inf");
    if (st == UCS_OK) st = ucp_init(&params, config, &context_);
  }
  ucp_config_release(config);
  BRAID_CHECK(st == UCS_OK, kInternal, "ucx transport: ucp_init failed: ", ucs_status_string(st),
              " (UCX_TLS=", std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "<unset>", ")");

  // One worker per peer; publish all their addresses, slot q for peer q, as
  // [u32 length, bytes] records.
  std::vector<uint8_t> blob;
  for (Lane& lane : lanes_) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // the backend serializes calls
    wp.events = UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV;
    check_ucs(ucp_worker_create(context_, &wp, &lane.worker), "ucp_worker_create");
    check_ucs(ucp_worker_get_efd(lane.worker, &lane.efd), "ucp_worker_get_efd");
    ucp_address_t* address = nullptr;
    size_t length = 0;
    check_ucs(ucp_worker_get_address(lane.worker, &address, &length), "ucp_worker_get_address");
    const auto n = static_cast<uint32_t>(length);
    const auto* bytes = reinterpret_cast<const uint8_t*>(address);
    blob.insert(blob.end(), reinterpret_cast<const uint8_t*>(&n),
                reinterpret_cast<const uint8_t*>(&n) + sizeof(n));
    blob.insert(blob.end(), bytes, bytes + length);
    ucp_worker_release_address(lane.worker, address);
  }
  ctx_.store->set("ucx/addr/" + std::to_string(ctx_.rank), std::span<const uint8_t>(blob));

  for (int q = 0; q < ctx_.size; ++q) {
    const std::string key = "ucx/addr/" + std::to_string(q);
    const std::vector<uint8_t> theirs =
        ctx_.timeout.count() > 0 ? ctx_.store->get(key, ctx_.timeout) : ctx_.store->get(key);
    // Find their slot for me.
    size_t off = 0;
    for (int slot = 0;; ++slot) {
      uint32_t n = 0;
      BRAID_CHECK(off + sizeof(n) <= theirs.size(), kCorruptData, "ucx transport: store key '", key,
                  "' holds ", theirs.size(), " bytes: too short for ", ctx_.size,
                  " worker addresses");
      std::memcpy(&n, theirs.data() + off, sizeof(n));
      off += sizeof(n);
      BRAID_CHECK(off + n <= theirs.size(), kCorruptData, "ucx transport: store key '", key,
                  "': address ", slot, " of ", n, " bytes runs past the value's end");
      if (slot == ctx_.rank) {
        Lane& lane = lanes_[q];
        ucp_ep_params_t ep{};
        ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address = reinterpret_cast<const ucp_address_t*>(theirs.data() + off);
        if (q != ctx_.rank) {  // the lane to itself cannot lose its peer (UCX_TLS=tcp,self)
          ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
          ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
          ep.err_handler.cb = on_ep_error;
          ep.err_handler.arg = &lane;
        }
        const ucs_status_t st = ucp_ep_create(lane.worker, &ep, &lane.ep);
        // Peer error handling needs a transport that detects peer failure (tcp, InfiniBand);
        // shared memory alone (UCX_TLS=posix, sysv) cannot reach a peer in this mode.
        BRAID_CHECK(st != UCS_ERR_UNREACHABLE, kNotSupported, "ucx transport: no UCX transport ",
                    "reaches peer ", q, " with peer-failure detection (UCX_TLS=",
                    std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "<unset>",
                    "); expected tcp or an InfiniBand transport among them (docs/ucx.md)");
        check_ucs(st, "ucp_ep_create");
        if (q != ctx_.rank && unchecked_data_) {  // Note [Unchecked data]
          ucp_ep_params_t data{};
          data.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
          data.address = ep.address;
          check_ucs(ucp_ep_create(lane.worker, &data, &lane.data_ep), "ucp_ep_create (data)");
        }
        break;
      }
      off += n;
    }
  }
}

// Note [Forced close]: a healthy transport flushes its endpoints. After any trouble (a lost
// peer, a request left unfinished by an error or timeout) every endpoint is closed with FORCE,
// which completes its outstanding operations as cancelled: UCX 1.13 aborts the process
// (an assertion in ucp_ep_destroy_base) when a worker is destroyed with an endpoint that still
// has requests, and a flush towards a dead peer cannot finish anyway.
void UcxTransport::close_endpoints() {
  progress_all();  // deliver pending error callbacks first
  bool trouble = false;
  for (const Lane& lane : lanes_) trouble |= lane.error != UCS_OK || lane.abandoned > 0;
  std::vector<std::pair<Lane*, void*>> closing;
  for (Lane& lane : lanes_) {
    for (ucp_ep_h* ep : {&lane.data_ep, &lane.ep}) {
      if (!*ep) continue;
      if (ucs_status_ptr_t r = close_endpoint(*ep, trouble)) closing.emplace_back(&lane, r);
    }
  }
  // Wait for the flushes, sleeping on the event fds; force what is left after kCloseTime.
  const auto end = Clock::now() + kCloseTime;
  while (!closing.empty()) {
    std::vector<int> peers;
    for (auto it = closing.begin(); it != closing.end();) {
      ucp_worker_progress(it->first->worker);
      if (ucp_request_check_status(it->second) != UCS_INPROGRESS) {
        ucp_request_free(it->second);
        it = closing.erase(it);
      } else {
        peers.push_back(static_cast<int>(it->first - lanes_.data()));
        ++it;
      }
    }
    if (closing.empty()) break;
    if (Clock::now() >= end) {
      for (auto& [lane, r] : closing) ucp_request_free(r);  // destroying the worker ends them
      break;
    }
    block(peers, end);
  }
}

void UcxTransport::shut_down() {
  if (!context_) return;
  close_endpoints();
  for (Lane& lane : lanes_) {
    if (lane.worker) ucp_worker_destroy(lane.worker);
    lane.worker = nullptr;
  }
  ucp_cleanup(context_);
  context_ = nullptr;
}

void UcxTransport::block(const std::vector<int>& peers, Clock::time_point deadline) {
  std::vector<pollfd> fds;
  for (int q : peers) {
    if (lanes_[q].torn_down()) continue;
    if (std::any_of(fds.begin(), fds.end(), [&](const pollfd& f) { return f.fd == lanes_[q].efd; }))
      continue;
    const ucs_status_t st = ucp_worker_arm(lanes_[q].worker);
    if (st == UCS_ERR_BUSY) return;  // events pending: progress again
    check_ucs(st, "ucp_worker_arm");
    fds.push_back({lanes_[q].efd, POLLIN, 0});
  }
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  const int ms = static_cast<int>(std::clamp<int64_t>(left, 0, kMaxPollMs));
  ::poll(fds.data(), fds.size(), ms);  // EINTR or a timeout: the caller checks and loops
}

std::string UcxTransport::peer_text(const std::vector<int>& peers) const {
  std::vector<int> sorted = peers;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::ostringstream out;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int q = sorted[i];
    out << (i ? ", " : "") << q;
    if (q < static_cast<int>(ctx_.global_ranks.size()) && ctx_.global_ranks[q] != q)
      out << " (world rank " << ctx_.global_ranks[q] << ")";
  }
  return out.str();
}

void UcxTransport::wait_all(std::vector<std::unique_ptr<p2p::Request>>& requests,
                            const std::vector<int>& peers, Clock::time_point deadline,
                            const std::string& what) {
  abandon_deadline_.reset();  // the requests an error of this wait leaves share a new one
  BRAID_CHECK(peers.size() == requests.size(), kInvalidArgument, "ucx transport wait_all(", what,
              "): ", peers.size(), " peers for ", requests.size(),
              " requests; expected one peer per request");
  SpinWindow spin(Clock::now(), kSpinTime, kActiveSpinTime, spare_cpu_);
  while (true) {
    // One progress per worker per pass, not one per request (a segmented round has hundreds:
    // each progress of a tcp worker is a system call).
    const unsigned events = progress_all();
    std::vector<int> pending, lost;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto* r = static_cast<UcxRequest*>(requests[i].get());
      if (!r->done()) {
        pending.push_back(peers[i]);
        if (lanes_[peers[i]].error != UCS_OK) lost.push_back(peers[i]);
        continue;
      }
      const ucs_status_t st = r->state().status;
      if (st == UCS_OK) continue;
      BRAID_CHECK(st != UCS_ERR_MESSAGE_TRUNCATED, kInvalidArgument, "ucx transport: ", what,
                  ": the message from peer ", peer_text({peers[i]}),
                  " is longer than the receive buffer");
      BRAID_FAIL(kPeerLost, "ucx transport: ", what, ": the connection to peer ",
                 peer_text({peers[i]}), " failed: ", ucs_status_string(st));
    }
    if (pending.empty()) return;
    if (!lost.empty()) {
      BRAID_FAIL(kPeerLost, "ucx transport: ", what, ": lost peer ", peer_text(lost), " (",
                 ucs_status_string(lanes_[lost.front()].error), "); waiting on peers ",
                 peer_text(pending));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      BRAID_FAIL(kTimeout, "ucx transport: ", what, ": timed out with ", pending.size(), " of ",
                 requests.size(), " requests unfinished, waiting on peers ", peer_text(pending));
    }
    spin.progressed(now, events);
    if (spin.should_block(now)) {
      block(all_peers_, deadline);
    } else {
      sched_yield();
    }
  }
}

}  // namespace

std::unique_ptr<p2p::Transport> make_ucx_transport(const BackendContext& ctx) {
  return std::make_unique<UcxTransport>(ctx);
}

std::string ucx_library_version() {
  std::ostringstream out;
  out << ucp_get_version_string() << " (built against " << UCP_API_MAJOR << '.' << UCP_API_MINOR;
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&ucp_get_version_string), &where) != 0 &&
      where.dli_fname != nullptr) {
    out << "; " << where.dli_fname;
  }
  out << ')';
  return out.str();
}

std::string describe_ucx_endpoint(p2p::Transport& transport, int peer) {
  auto* ucx = dynamic_cast<UcxTransport*>(&transport);
  BRAID_CHECK(ucx != nullptr, kInvalidArgument,
              "describe_ucx_endpoint: the transport is not UCX's; expected one from "
              "make_ucx_transport");
  return ucx->describe(peer);
}

}  // namespace braid
