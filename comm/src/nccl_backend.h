// The NCCL backend (docs/comm.md, "nccl"): a group's collectives and send / recv on CUDA device
// memory through NCCL, one non-blocking communicator per group. Private to comm/; compiled only
// when CMake found NCCL (BRAID_HAVE_NCCL, comm/CMakeLists.txt), registered as "nccl" by
// comm/src/backend_registry.cc. nccl_backend.cc: the communicator (device choice, unique id
// through the store, non-blocking init, shut-down) and run(); nccl_collectives.cc: dtypes, ops
// and each collective as NCCL calls; nccl_work.cc: the Work (event polling, deadline, abort)
// and the cross-rank check.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/comm/backend.h"

namespace braid {

// Registers "nccl" with the backend registry; called by comm/src/backend_registry.cc.
void register_nccl_backend();

// "NCCL 2.28.9 (built against nccl.h 2.28.9)": the library loaded in this process
// (ncclGetVersion) and the header braid was compiled with. Needs no GPU.
std::string nccl_library_version();

namespace nccl {

using Clock = std::chrono::steady_clock;

// Makes `device` current for a scope and restores the caller's device after (Note [Device]):
// the backend never leaves the thread on another device than it found it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// "an illegal memory access was encountered (cudaErrorIllegalAddress, 700)"
std::string cuda_error_text(cudaError_t rc);
// NCCL's name for the code and, where the communicator has one, its last error text.
std::string nccl_error_text(ncclResult_t rc);

// Throws kInternal for a failed CUDA call (kOutOfMemory for cudaErrorMemoryAllocation),
// naming `what` and the call `context` ("all_reduce (seq 3) on group rank 0 ...").
[[noreturn]] void fail_cuda(cudaError_t rc, const std::string& context, const char* what);
inline void check_cuda(cudaError_t rc, const std::string& context, const char* what) {
  if (rc != cudaSuccess) [[unlikely]]
    fail_cuda(rc, context, what);
}

// Pinned host words of one call's cross-rank check (Note [Cross-rank check]): this rank's
// {signature, ~signature} and the group's all-reduced MAX of them.
struct CheckWords {
  uint64_t mine[2];
  uint64_t all[2];
};

// The communicator and what a group's calls and their Works share. Works hold it, so it lives
// until the last Work is gone: the communicator is finalized (or aborted) and its CUDA objects
// freed only then.
class Comm {
 public:
  Comm() = default;
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  ncclComm_t comm = nullptr;
  int device = 0;
  int me = 0, n = 1;
  std::vector<int> global_ranks;
  std::shared_ptr<Store> store;  // the group's (prefixed): names the ranks of a mismatch
  std::string store_prefix;      // "nccl/<instance>/": this communicator's keys
  std::chrono::milliseconds timeout{0};
  cudaStream_t stream = nullptr;  // the communication stream (non-blocking)
  void* scratch = nullptr;        // device: check words [0, 16), barrier word [16, 24)
  bool check = true;              // the cross-rank check runs (rank 0's BRAID_NCCL_CHECK)

  // Every NCCL call on `comm`, and the state below, under this lock.
  std::mutex mu;
  bool aborted = false;       // ncclCommAbort ran: `comm` must not be touched again
  std::exception_ptr broken;  // the error that left the group unusable
  uint64_t calls = 0;         // collectives this rank entered, for messages

  // Aborts the communicator once (NCCL stops its kernels; a rank blocked in one of them is
  // released with an error) and records `why` as the group's error. Caller holds `mu`.
  void abort_locked(std::exception_ptr why);
  // After an NCCL call that may return ncclInProgress (a non-blocking communicator): polls
  // ncclCommGetAsyncError until the call is enqueued or failed, sleeping between polls; past
  // `deadline` aborts and throws kTimeout. Throws for an NCCL error. Caller holds `mu`.
  void settle_locked(ncclResult_t rc, Clock::time_point deadline, const std::string& context,
                     const char* what);
  // "group rank 0 (world rank 0) of the group of world ranks [0, 1]"
  std::string where() const;

  // Pinned check words, recycled once the event that follows their last copy completed.
  CheckWords* take_check_words_locked();
  void retire_check_words(CheckWords* words, cudaEvent_t after);

 private:
  std::vector<CheckWords*> free_words_;
  std::vector<std::pair<CheckWords*, cudaEvent_t>> retired_words_;
  std::vector<void*> pinned_blocks_;
  std::mutex words_mu_;  // the two lists above (a Work retires its words without `mu`)
};

// One call as its Work and its error messages see it.
struct CallInfo {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DType dtype = DType::kF32;
  int64_t count = 0;
  ReduceOp op = ReduceOp::kSum;
  int root = 0, peer = -1;
  uint64_t seq = 0, index = 0, signature = 0;
  std::chrono::milliseconds timeout{0};
  Clock::time_point deadline;
};

// "all_reduce (seq 5, group call #3) on group rank 0 (world rank 0) of the group of world
// ranks [0, 1]"
std::string describe_call(const CallInfo& call, const Comm& comm);

// The Work of an NCCL call (nccl_work.cc): finished when the event recorded after the call on
// the communication stream completed. wait() polls it (and the communicator's asynchronous
// error) with short sleeps until the call's deadline, then aborts the communicator and throws
// kTimeout. Thread-safe.
class NcclWork final : public Work {
 public:
  // Takes ownership of the events; `words` (may be null) with `check_done`.
  NcclWork(std::shared_ptr<Comm> comm, CallInfo call, cudaEvent_t end, cudaEvent_t check_done,
           CheckWords* words);
  ~NcclWork() override;
  bool test() override;
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;
  std::exception_ptr error() const override;

 private:
  // One poll; true once finished (error_ set on failure). Caller holds mu_.
  bool poll_locked();
  void finish_locked(std::exception_ptr error);
  // The cross-rank check found different calls: names the other rank's call (through the
  // store) and aborts the communicator.
  std::exception_ptr mismatch();
  // At the deadline: "; world ranks [2] had not entered it ..." (through the store).
  std::string missing_ranks() const;

  std::shared_ptr<Comm> comm_;
  const CallInfo call_;
  cudaEvent_t end_ = nullptr;
  cudaEvent_t check_done_ = nullptr;
  CheckWords* words_ = nullptr;
  mutable std::mutex mu_;
  std::atomic<bool> done_{false};
  bool check_read_ = false;
  std::exception_ptr error_;
};

class NcclGroup final : public Backend {
 public:
  explicit NcclGroup(const BackendContext& context);
  ~NcclGroup() override = default;

  std::string_view name() const override { return "nccl"; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::shared_ptr<Work> run(const CollectiveDesc& desc) override;

 private:
  void precheck(const CollectiveDesc& desc) const;
  // The cross-rank check, enqueued on the communication stream before the call.
  cudaEvent_t enqueue_check(const CallInfo& call, CheckWords* words);

  BackendContext context_;
  std::shared_ptr<Comm> comm_;
  int version_ = 0;  // ncclGetVersion
  BackendCapabilities caps_;
};

// ---- nccl_collectives.cc ----

// NCCL's type for a braid dtype: true and `out` set when this NCCL (`version`, and the header
// braid was compiled with) has one; f64, f32, f16, bf16, i64, i32, i8, u8 always, fp8 e4m3 /
// e5m2 from NCCL 2.24.
bool nccl_dtype(DType dtype, int version, ncclDataType_t* out);

// The NCCL calls of one collective, enqueued on comm.stream, inside ncclGroupStart / End
// where several calls form it; settled (enqueued) before it returns. Caller holds comm.mu and
// has made comm.device current.
void enqueue_collective(Comm& comm, const CollectiveDesc& desc, const CallInfo& call, int version);

}  // namespace nccl
}  // namespace braid
