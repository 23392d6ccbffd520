// Collectives and requests through the C ABI (docs/embedding.md, "Collectives"). Every call
// checks its C arguments (naming them as braid.h does), packs one CollectiveDesc and goes
// through ProcessGroup::run, the front's one path (docs/comm.md); a non-NULL `request` makes
// it an async call whose Work the request wraps.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "braid/comm/work.h"
#include "braid/core/error.h"
#include "c_api_internal.h"

namespace braid::capi {
namespace {

using Kind = CollectiveKind;

CallOptions call_options(const braidCallOptions_t* options, const braidComm& comm) {
  CallOptions o;
  if (options == nullptr) return o;
  check_struct_size(options->size, sizeof(braidCallOptions_t), "options");
  BRAID_CHECK(options->timeout_ms >= 0, kInvalidArgument, "options->timeout_ms is ",
              options->timeout_ms, "; expected > 0, or 0 for the communicator's timeout");
  if (options->timeout_ms > 0) o.timeout = std::chrono::milliseconds(options->timeout_ms);
  o.stream = Stream{comm.buffer_device, options->stream};
  return o;
}

int64_t element_count(size_t count, const char* what) {
  BRAID_CHECK(count <= static_cast<size_t>(std::numeric_limits<int64_t>::max()), kInvalidArgument,
              what, " ", count, " is too large; expected at most ",
              std::numeric_limits<int64_t>::max(), " elements");
  return static_cast<int64_t>(count);
}

void check_rank(const braidComm& comm, int value, const char* what) {
  const int n = comm.pg->size();
  BRAID_CHECK(value >= 0 && value < n, kInvalidArgument, what, " ", value,
              " is outside the communicator's ranks [0, ", n, ")");
}

// A buffer this rank reads or writes: NULL only when it moves nothing.
void check_buffer(const void* p, const char* what, int64_t count) {
  BRAID_CHECK(p != nullptr || count == 0, kInvalidArgument, what, " is NULL with count ", count,
              "; expected a buffer of ", count, " elements");
}

// A new request for `comm`'s state (made before the call starts, so that nothing can fail
// between starting a call and handing out its handle).
std::unique_ptr<braidRequest> new_request(const braidComm& comm, const char* function) {
  auto r = std::make_unique<braidRequest>();
  r->state = comm.state;
  r->function = function;
  return r;
}

// Runs `start(options)` (which returns the call's Work) blocking, or async into *request.
template <typename Start>
void submit(const char* function, braidComm& comm, const braidCallOptions_t* options,
            braidRequest_t* request, Start&& start) {
  CallOptions o = call_options(options, comm);
  std::unique_ptr<braidRequest> r;
  if (request != nullptr) {
    r = new_request(comm, function);
    std::lock_guard<std::mutex> lock(r->state->mu);
    r->state->requests.reserve(r->state->requests.size() + 1);  // registering cannot throw
    o.async = AsyncOp::kYes;
  }
  std::shared_ptr<Work> work = start(o);
  if (r) {
    r->work = std::move(work);
    std::lock_guard<std::mutex> lock(r->state->mu);
    r->state->requests.push_back(r.get());
    *request = r.release();
  }
}

// The common path of the raw-buffer calls.
template <typename Fill>
braidResult_t raw_call(const char* function, braidComm_t comm, const braidCallOptions_t* options,
                       braidRequest_t* request, Fill&& fill) {
  return guard(function, [&] {
    if (request != nullptr) *request = nullptr;
    require(comm, "comm");
    CollectiveDesc d;
    d.device = comm->buffer_device;
    fill(d, *comm);
    submit(function, *comm, options, request,
           [&](const CallOptions& o) { return comm->pg->run(d, o); });
  });
}

bool is_aborted(const braidRequest& r) {
  std::lock_guard<std::mutex> lock(r.state->mu);
  return r.aborted;
}

// Blocks until the request's call ended; throws its error.
void wait_for(braidRequest& r) {
  BRAID_CHECK(r.work->wait(), kTimeout, r.function,
              ": the request's call did not finish by its deadline");
}

[[noreturn]] void fail_aborted() {
  BRAID_FAIL(kPeerLost,
             "the communicator was aborted (braidCommAbort) while this request's call was "
             "running; its buffers hold no defined result");
}

// braidRequestWait's work: the call's error, or kPeerLost once it ended after an abort.
void wait_for_result(braidRequest& r) {
  if (!is_aborted(r)) {
    wait_for(r);
    return;
  }
  try {
    wait_for(r);
  } catch (...) {
  }
  fail_aborted();
}

}  // namespace
}  // namespace braid::capi

using braid::CollectiveDesc;
using braid::capi::check_buffer;
using braid::capi::check_rank;
using braid::capi::dtype_of;
using braid::capi::element_count;
using braid::capi::guard;
using braid::capi::raw_call;
using braid::capi::reduce_op_of;
using braid::capi::require;
using Kind = braid::CollectiveKind;

extern "C" {

// ---- requests -------------------------------------------------------------------------------

BRAID_API braidResult_t braidRequestTest(braidRequest_t request, int* done) {
  bool finished = false;
  const braidResult_t result = guard("braidRequestTest", [&] {
    require(request, "request");
    require(done, "done");
    *done = 0;
    finished = request->work->test();
    if (!finished) return;
    *done = 1;
    if (braid::capi::is_aborted(*request)) braid::capi::fail_aborted();
    if (std::exception_ptr e = request->work->error()) std::rethrow_exception(e);
  });
  if (result == braidSuccess && !finished) return braidInProgress;  // not an error
  return result;
}

BRAID_API braidResult_t braidRequestWait(braidRequest_t request) {
  return guard("braidRequestWait", [&] {
    require(request, "request");
    braid::capi::wait_for_result(*request);
  });
}

BRAID_API braidResult_t braidRequestFree(braidRequest_t request) {
  if (request == nullptr) return braidSuccess;  // as free(NULL)
  std::unique_ptr<braidRequest> owned(request);
  // A call still running is waited for first (its buffers are in use until it ends), and its
  // result is this call's; one that had finished was the caller's to test or wait.
  braidResult_t result = braidSuccess;
  if (!owned->work->test()) {
    result = guard("braidRequestFree", [&] { braid::capi::wait_for_result(*owned); });
  }
  {
    std::lock_guard<std::mutex> lock(owned->state->mu);
    auto& list = owned->state->requests;
    list.erase(std::remove(list.begin(), list.end(), owned.get()), list.end());
  }
  return result;
}

// ---- collectives ----------------------------------------------------------------------------

BRAID_API braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidAllReduce", comm, options, request, [&](CollectiveDesc& d, braidComm&) {
    d.kind = Kind::kAllReduce;
    d.count = element_count(count, "count");
    d.dtype = dtype_of(datatype, "datatype");
    d.op = reduce_op_of(op, "op");
    check_buffer(sendbuff, "sendbuff", d.count);
    check_buffer(recvbuff, "recvbuff", d.count);
    d.send = sendbuff;
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                       braidDataType_t datatype, int root, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidBroadcast", comm, options, request, [&](CollectiveDesc& d, braidComm& c) {
    d.kind = Kind::kBroadcast;
    d.count = element_count(count, "count");
    d.dtype = dtype_of(datatype, "datatype");
    check_rank(c, root, "root");
    if (c.pg->rank() == root) check_buffer(sendbuff, "sendbuff (on the root)", d.count);
    check_buffer(recvbuff, "recvbuff", d.count);
    d.root = root;
    d.send = c.pg->rank() == root ? sendbuff : nullptr;  // read on the root only
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    braidDataType_t datatype, braidRedOp_t op, int root,
                                    braidComm_t comm, const braidCallOptions_t* options,
                                    braidRequest_t* request) {
  return raw_call("braidReduce", comm, options, request, [&](CollectiveDesc& d, braidComm& c) {
    d.kind = Kind::kReduce;
    d.count = element_count(count, "count");
    d.dtype = dtype_of(datatype, "datatype");
    d.op = reduce_op_of(op, "op");
    check_rank(c, root, "root");
    check_buffer(sendbuff, "sendbuff", d.count);
    if (c.pg->rank() == root) check_buffer(recvbuff, "recvbuff (on the root)", d.count);
    d.root = root;
    d.send = sendbuff;
    d.recv = c.pg->rank() == root ? recvbuff : nullptr;
  });
}

BRAID_API braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       braidDataType_t datatype, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidAllGather", comm, options, request, [&](CollectiveDesc& d, braidComm&) {
    d.kind = Kind::kAllGather;
    d.count = element_count(sendcount, "sendcount");
    d.dtype = dtype_of(datatype, "datatype");
    check_buffer(sendbuff, "sendbuff", d.count);
    check_buffer(recvbuff, "recvbuff", d.count);
    d.send = sendbuff;
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           braidDataType_t datatype, braidRedOp_t op,
                                           braidComm_t comm, const braidCallOptions_t* options,
                                           braidRequest_t* request) {
  return raw_call("braidReduceScatter", comm, options, request, [&](CollectiveDesc& d, braidComm&) {
    d.kind = Kind::kReduceScatter;
    d.count = element_count(recvcount, "recvcount");
    d.dtype = dtype_of(datatype, "datatype");
    d.op = reduce_op_of(op, "op");
    check_buffer(sendbuff, "sendbuff", d.count);
    check_buffer(recvbuff, "recvbuff", d.count);
    d.send = sendbuff;
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                      braidDataType_t datatype, braidComm_t comm,
                                      const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidAllToAll", comm, options, request, [&](CollectiveDesc& d, braidComm&) {
    d.kind = Kind::kAllToAll;
    d.count = element_count(count, "count");
    d.dtype = dtype_of(datatype, "datatype");
    check_buffer(sendbuff, "sendbuff", d.count);
    check_buffer(recvbuff, "recvbuff", d.count);
    d.send = sendbuff;
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidAllToAllv(const void* sendbuff, const size_t* sendcounts,
                                       const size_t* sdispls, void* recvbuff,
                                       const size_t* recvcounts, const size_t* rdispls,
                                       braidDataType_t datatype, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidAllToAllv", comm, options, request, [&](CollectiveDesc& d, braidComm& c) {
    d.kind = Kind::kAllToAllV;
    d.count = 1;  // a "row" is one element: the counts and displacements are elements
    d.dtype = dtype_of(datatype, "datatype");
    require(sendcounts, "sendcounts");
    require(sdispls, "sdispls");
    require(recvcounts, "recvcounts");
    require(rdispls, "rdispls");
    require(sendbuff, "sendbuff");
    require(recvbuff, "recvbuff");
    const int n = c.pg->size();
    auto copy = [n](const size_t* from, const char* what) {
      std::vector<int64_t> v(n);
      for (int r = 0; r < n; ++r) {
        if (from[r] <= static_cast<size_t>(std::numeric_limits<int64_t>::max())) {
          v[r] = static_cast<int64_t>(from[r]);
          continue;
        }
        std::string name(what);  // appended: GCC 12 warns falsely (-Wrestrict) on "[" + string
        name += '[';
        name += std::to_string(r);
        name += ']';
        v[r] = element_count(from[r], name.c_str());
      }
      return v;
    };
    d.send_counts = copy(sendcounts, "sendcounts");
    d.send_offsets = copy(sdispls, "sdispls");
    d.recv_counts = copy(recvcounts, "recvcounts");
    d.recv_offsets = copy(rdispls, "rdispls");
    d.send = sendbuff;
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    braidDataType_t datatype, int root, braidComm_t comm,
                                    const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidGather", comm, options, request, [&](CollectiveDesc& d, braidComm& c) {
    d.kind = Kind::kGather;
    d.count = element_count(sendcount, "sendcount");
    d.dtype = dtype_of(datatype, "datatype");
    check_rank(c, root, "root");
    check_buffer(sendbuff, "sendbuff", d.count);
    if (c.pg->rank() == root) check_buffer(recvbuff, "recvbuff (on the root)", d.count);
    d.root = root;
    d.send = sendbuff;
    d.recv = c.pg->rank() == root ? recvbuff : nullptr;
  });
}

BRAID_API braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     braidDataType_t datatype, int root, braidComm_t comm,
                                     const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidScatter", comm, options, request, [&](CollectiveDesc& d, braidComm& c) {
    d.kind = Kind::kScatter;
    d.count = element_count(recvcount, "recvcount");
    d.dtype = dtype_of(datatype, "datatype");
    check_rank(c, root, "root");
    if (c.pg->rank() == root) check_buffer(sendbuff, "sendbuff (on the root)", d.count);
    check_buffer(recvbuff, "recvbuff", d.count);
    d.root = root;
    d.send = c.pg->rank() == root ? sendbuff : nullptr;
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidBarrier(braidComm_t comm, const braidCallOptions_t* options,
                                     braidRequest_t* request) {
  return raw_call("braidBarrier", comm, options, request,
                  [&](CollectiveDesc& d, braidComm&) { d.kind = Kind::kBarrier; });
}

BRAID_API braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype,
                                  int peer, int64_t tag, braidComm_t comm,
                                  const braidCallOptions_t* options, braidRequest_t* request) {
  return raw_call("braidSend", comm, options, request, [&](CollectiveDesc& d, braidComm& c) {
    d.kind = Kind::kSend;
    d.count = element_count(count, "count");
    d.dtype = dtype_of(datatype, "datatype");
    check_rank(c, peer, "peer");
    BRAID_CHECK(peer != c.pg->rank(), kInvalidArgument, "peer ", peer,
                " is this rank itself; expected another rank of the communicator");
    check_buffer(sendbuff, "sendbuff", d.count);
    d.peer = peer;
    d.tag = tag;
    d.send = sendbuff;
  });
}

BRAID_API braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer,
                                  int64_t tag, braidComm_t comm, const braidCallOptions_t* options,
                                  braidRequest_t* request) {
  return raw_call("braidRecv", comm, options, request, [&](CollectiveDesc& d, braidComm& c) {
    d.kind = Kind::kRecv;
    d.count = element_count(count, "count");
    d.dtype = dtype_of(datatype, "datatype");
    check_rank(c, peer, "peer");
    BRAID_CHECK(peer != c.pg->rank(), kInvalidArgument, "peer ", peer,
                " is this rank itself; expected another rank of the communicator");
    check_buffer(recvbuff, "recvbuff", d.count);
    d.peer = peer;
    d.tag = tag;
    d.recv = recvbuff;
  });
}

BRAID_API braidResult_t braidAllReduceTensor(DLTensor* tensor, braidRedOp_t op, braidComm_t comm,
                                             const braidCallOptions_t* options,
                                             braidRequest_t* request) {
  return guard("braidAllReduceTensor", [&] {
    if (request != nullptr) *request = nullptr;
    require(comm, "comm");
    braid::Tensor t = braid::capi::tensor_from_dlpack(tensor, "tensor");
    BRAID_CHECK(t.is_contiguous(), kInvalidArgument, "tensor (shape ", braid::shape_str(t.shape()),
                ", strides ", braid::shape_str(t.strides()),
                ") is not contiguous; expected row-major strides ",
                braid::shape_str(braid::contiguous_strides(t.shape())), " or NULL");
    braid::CallOptions base;
    base.op = reduce_op_of(op, "op");
    braid::capi::submit("braidAllReduceTensor", *comm, options, request, [&](braid::CallOptions o) {
      o.op = base.op;
      o.stream.device = t.device();
      return comm->pg->all_reduce(t, o);
    });
  });
}

}  // extern "C"
