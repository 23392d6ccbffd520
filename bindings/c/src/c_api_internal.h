// What the C ABI's source files share (not installed): the handles' definitions, the
// exception-to-result guard, and DLPack <-> Tensor conversion.
#pragma once

#include <braid.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/tensor.h"

namespace braid::capi {

// What a communicator shares with its requests (docs/embedding.md, "Destroy and abort"). A
// request holds it, so that after braidCommAbort the group lives on until the last request
// whose call was still running is freed: destroying a group waits for its running calls,
// which abort must not do, and those calls still use their buffers until they end.
struct CommState {
  std::mutex mu;
  std::vector<braidRequest*> requests;  // created and not yet freed (guarded by mu)
  std::shared_ptr<void> keep_alive;     // declared before pg: released after it
  std::shared_ptr<ProcessGroup> pg;
};

}  // namespace braid::capi

// An in-flight call (c_api_collectives.cc).
struct braidRequest {
  std::shared_ptr<braid::Work> work;
  std::shared_ptr<braid::capi::CommState> state;
  const char* function = "";  // the call that made it, for messages
  bool aborted = false;       // braidCommAbort found it running (guarded by state->mu)
};

struct braidComm {
  std::shared_ptr<braid::ProcessGroup> pg;
  // braidGetUniqueId's store server when this process hosts the id's store (kept until the
  // communicator is destroyed), and any other object the communicator must keep alive.
  std::shared_ptr<void> keep_alive;
  // Where raw buffers live: cpu, or the device of a backend that serves device memory only
  // (nccl: cuda:LOCAL_RANK, as the backend chose it). Set at creation.
  braid::Device buffer_device = braid::kCPU;
  std::string backend_name;  // what braidCommGetBackend returns
  std::shared_ptr<braid::capi::CommState> state;
};

struct braidTensorList {
  braid::NamedTensors tensors;
};

namespace braid::capi {

// Records `message` as this thread's last error and returns `result`.
braidResult_t fail(braidResult_t result, std::string message);
// braid::ErrorKind -> braidResult_t (same order).
braidResult_t result_of(ErrorKind kind);

// Runs fn(); returns braidSuccess, or the error it threw as a result with the message
// "<function>: <message>" recorded (braid::Error by kind, std::bad_alloc as
// braidOutOfMemory, anything else braidInternalError). No exception escapes.
template <typename Fn>
braidResult_t guard(const char* function, Fn&& fn) noexcept;

// A Tensor viewing a borrowed DLTensor's memory (no copy; strides and byte_offset honoured).
// kInvalidArgument naming `what` for a null tensor or data pointer, kNotSupported for a
// data type or device braid has no equivalent of.
Tensor tensor_from_dlpack(const DLTensor* t, const char* what);
// A new DLManagedTensor that keeps `t` alive (zero-copy); its deleter releases it.
DLManagedTensor* to_dlpack(Tensor t);
DType dtype_of(braidDataType_t dt, const char* what);  // kInvalidArgument when out of range
ReduceOp reduce_op_of(braidRedOp_t op, const char* what);
// kInvalidArgument naming `what` when p is null.
void require(const void* p, const char* what);
// A new communicator handle for `pg` (its backend's name, the device of raw buffers); the
// caller owns it.
braidComm* make_comm(std::shared_ptr<ProcessGroup> pg, std::shared_ptr<void> keep_alive);
// An options struct's `size` field (braidConfig_t, braidCallOptions_t, ...): kInvalidArgument
// naming `what` unless it is `expected`, the only version this library knows.
void check_struct_size(size_t size, size_t expected, const char* what);

// Records "<function>: <message>" as this thread's last error and returns `result`; never
// throws (a message that cannot be allocated is replaced by a fixed one).
braidResult_t record_failure(braidResult_t result, const char* function,
                             std::string_view message) noexcept;

// ---- template definition ----
template <typename Fn>
braidResult_t guard(const char* function, Fn&& fn) noexcept {
  try {
    std::forward<Fn>(fn)();
    return braidSuccess;
  } catch (const Error& e) {
    return record_failure(result_of(e.kind()), function, e.message());
  } catch (const std::bad_alloc& e) {
    return record_failure(braidOutOfMemory, function, "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return record_failure(braidInternalError, function, e.what());
  } catch (...) {
    return record_failure(braidInternalError, function, "unknown exception");
  }
}

}  // namespace braid::capi
