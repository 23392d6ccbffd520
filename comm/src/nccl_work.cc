// The NCCL backend's Work (docs/comm.md, "nccl", "Errors and timeouts"): a call is finished
// when the event recorded after it on the communication stream completed. wait() polls that
// event and the communicator's asynchronous error with short sleeps (design.md promise 2: it
// never spins for the whole wait) until the call's deadline; then it aborts the communicator and
// throws kTimeout naming the call and the ranks that had not entered it. The result of the
// cross-rank check (Note [Cross-rank check], nccl_backend.cc) is read here too.
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "nccl_backend.h"

namespace braid::nccl {
namespace {

// Note [Polling]: a small collective finishes within tens of microseconds, so a wait yields
// for the first kYieldTime, then sleeps, doubling from kFirstSleep to kMaxSleep.
constexpr std::chrono::microseconds kYieldTime{50};
constexpr std::chrono::microseconds kFirstSleep{10};
constexpr std::chrono::microseconds kMaxSleep{1000};
// How long an error path waits for the peers' reports in the store (at most a tenth of the
// call's timeout): the error then names them.
constexpr std::chrono::milliseconds kReportWait{5000};

std::exception_ptr make_error(ErrorKind kind, std::string message) {
  return std::make_exception_ptr(Error(kind, std::move(message)));
}

// "all_reduce f32 x 1024 sum", "broadcast bf16 x 7 root 2", "barrier" (as shm and mpi).
std::string call_text(const CallInfo& c) {
  std::ostringstream out;
  out << collective_name(c.kind);
  if (c.kind != CollectiveKind::kBarrier) {
    out << " " << c.dtype << (c.kind == CollectiveKind::kAllToAllV ? " rows of " : " x ")
        << c.count;
    if (is_reduction(c.kind)) out << " " << reduce_op_name(c.op);
    if (is_rooted(c.kind)) out << " root " << c.root;
  }
  out << " (seq " << c.seq << ", call #" << c.index << ")";
  return out.str();
}

std::chrono::milliseconds report_wait(const CallInfo& c) {
  return std::max(std::chrono::milliseconds(1), std::min(kReportWait, c.timeout / 10));
}

}  // namespace

NcclWork::NcclWork(std::shared_ptr<Comm> comm, CallInfo call, cudaEvent_t end,
                   cudaEvent_t check_done, CheckWords* words)
    : comm_(std::move(comm)), call_(call), end_(end), check_done_(check_done), words_(words) {}

NcclWork::~NcclWork() {
  DeviceGuard guard(comm_->device);
  if (end_ != nullptr) (void)cudaEventDestroy(end_);  // released once it completed
  if (words_ != nullptr) {
    comm_->retire_check_words(words_, check_done_);  // the event now belongs to the pool
  } else if (check_done_ != nullptr) {
    (void)cudaEventDestroy(check_done_);
  }
}

bool NcclWork::test() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return done_;  // a waiter is polling
  return poll_locked();
}

std::exception_ptr NcclWork::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void NcclWork::finish_locked(std::exception_ptr error) {
  done_ = true;
  error_ = std::move(error);
}

bool NcclWork::poll_locked() {
  if (done_) return true;
  Comm& c = *comm_;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.aborted) {
      // Another call's timeout or error aborted the communicator: NCCL stopped its kernels, so
      // this call's event may complete without the data having moved.
      finish_locked(c.broken ? c.broken
                             : make_error(ErrorKind::kInternal,
                                          "nccl: " + describe_call(call_, c) +
                                              ": the communicator was aborted before it finished"));
      return true;
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(c.comm, &state) != ncclSuccess) state = ncclInternalError;
    if (state != ncclSuccess && state != ncclInProgress) {
      const ErrorKind kind = state == ncclRemoteError || state == ncclSystemError
                                 ? ErrorKind::kPeerLost
                                 : ErrorKind::kInternal;
      auto error = make_error(
          kind, "nccl: " + describe_call(call_, c) +
                    ": NCCL reported an asynchronous error: " + nccl_error_text(state) +
                    " (a peer died or the network failed); the communicator was aborted, so this "
                    "group is unusable");
      c.abort_locked(error);
      finish_locked(error);
      return true;
    }
  }
  if (check_done_ != nullptr && words_ != nullptr && !check_read_) {
    const cudaError_t q = cudaEventQuery(check_done_);
    if (q == cudaSuccess) {
      check_read_ = true;
      if (words_->all[0] != ~words_->all[1]) {
        finish_locked(mismatch());
        return true;
      }
    } else if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();
      finish_locked(make_error(
          ErrorKind::kInternal,
          "nccl: " + describe_call(call_, c) + ": cudaEventQuery failed: " + cuda_error_text(q)));
      return true;
    }
  }
  const cudaError_t q = cudaEventQuery(end_);
  if (q == cudaErrorNotReady) return false;
  if (q == cudaSuccess) {
    finish_locked(nullptr);
    return true;
  }
  (void)cudaGetLastError();
  auto error =
      make_error(ErrorKind::kInternal, "nccl: " + describe_call(call_, c) +
                                           ": the GPU failed the call: " + cuda_error_text(q));
  std::lock_guard<std::mutex> lock(c.mu);
  c.abort_locked(error);
  finish_locked(error);
  return true;
}

bool NcclWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto start = Clock::now();
  const auto limit =
      timeout.count() > 0 ? std::min(start + timeout, call_.deadline) : call_.deadline;
  auto sleep = kFirstSleep;
  while (true) {
    if (poll_locked()) {
      if (error_) std::rethrow_exception(error_);
      return true;
    }
    const auto now = Clock::now();
    if (now >= call_.deadline) {
      Comm& c = *comm_;
      auto error = make_error(
          ErrorKind::kTimeout,
          "nccl: " + describe_call(call_, c) + ": timed out after " +
              std::to_string(call_.timeout.count()) + " ms waiting for the GPU to finish it" +
              missing_ranks() +
              "; the communicator was aborted (ncclCommAbort), so this group is unusable: create "
              "a new group or end the job");
      {
        std::lock_guard<std::mutex> comm_lock(c.mu);
        c.abort_locked(error);
      }
      finish_locked(error);
      std::rethrow_exception(error);
    }
    if (now >= limit) return false;
    if (now - start < kYieldTime) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(sleep, std::max<Clock::duration>(limit - now, {})));
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

std::string NcclWork::missing_ranks() const {
  const Comm& c = *comm_;
  if (call_.index == 0) {
    return "; its peer is group rank " + std::to_string(call_.peer) + " (world rank " +
           std::to_string(c.global_ranks.at(call_.peer)) + ")";
  }
  // Every rank that times out says how many collectives it entered; a rank that does not
  // answer within the report wait never reached this call (stopped before it, or died).
  try {
    Store& store = *c.store;
    const std::string key = c.store_prefix + "entered/";
    uint64_t entered = 0;
    {
      std::lock_guard<std::mutex> lock(comm_->mu);
      entered = c.calls;
    }
    store.set(key + std::to_string(c.me), std::to_string(entered));
    const auto until = Clock::now() + report_wait(call_);
    std::vector<int> behind;
    for (int r = 0; r < c.n; ++r) {
      const std::string k = key + std::to_string(r);
      while (!store.check({k}) && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!store.check({k}) || std::stoull(store.get_string(k)) < call_.index) {
        behind.push_back(c.global_ranks[r]);
      }
    }
    if (behind.empty())
      return "; every rank entered it (NCCL did not finish it: see NCCL_DEBUG=INFO)";
    std::ostringstream out;
    out << "; world ranks [";
    for (size_t i = 0; i < behind.size(); ++i) out << (i ? ", " : "") << behind[i];
    out << "] had not entered it (stopped before it, stuck elsewhere, or died)";
    return out.str();
  } catch (...) {
    return "";  // the store is gone too: the timeout alone is the message
  }
}

std::exception_ptr NcclWork::mismatch() {
  Comm& c = *comm_;
  const std::string mine = call_text(call_);
  std::string theirs = "(no report)";
  int other = -1;
  try {
    Store& store = *c.store;
    const std::string key = c.store_prefix + "mismatch/" + std::to_string(call_.index) + "/";
    char sig[17];
    std::snprintf(sig, sizeof sig, "%016llx", static_cast<unsigned long long>(call_.signature));
    store.set(key + std::to_string(c.me), std::string(sig) + " " + mine);
    // Every rank saw the mismatch (the all-reduced words are the same everywhere): all report.
    const auto until = Clock::now() + report_wait(call_);
    for (int r = 0; r < c.n && other < 0; ++r) {
      if (r == c.me) continue;
      const std::string k = key + std::to_string(r);
      while (!store.check({k}) && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!store.check({k})) continue;
      const std::string value = store.get_string(k);
      if (value.compare(0, 16, sig) != 0) {
        other = r;
        theirs = value.size() > 17 ? value.substr(17) : value;
      }
    }
  } catch (...) {
    // Without the store the message names this rank's call only.
  }
  std::ostringstream out;
  out << "nccl: collective mismatch at group call #" << call_.index << ": group rank " << c.me
      << " (world rank " << c.global_ranks[c.me] << ") called " << mine;
  if (other >= 0) {
    out << " but group rank " << other << " (world rank " << c.global_ranks[other] << ") called "
        << theirs;
  } else {
    out << " but another rank's call differs";
  }
  out << "; expected every rank of the group to make the same collective calls in the same "
         "order; the communicator was aborted, so this group is unusable";
  auto error = make_error(ErrorKind::kInvalidArgument, out.str());
  std::lock_guard<std::mutex> lock(c.mu);
  c.abort_locked(error);
  return error;
}

}  // namespace braid::nccl
