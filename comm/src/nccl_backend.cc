// The NCCL backend's communicator (docs/comm.md, "nccl"): the device choice, the unique id
// through the group's store, non-blocking init with a deadline, run() (events between the
// caller's stream and the communication stream, the cross-rank check, the collective) and the
// shut-down. The collectives are in nccl_collectives.cc, the Work in nccl_work.cc.
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>

#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "nccl_backend.h"

namespace braid {
namespace nccl {
namespace {

constexpr std::chrono::milliseconds kDefaultTimeout{300000};
// Shut-down waits at most this long for the peers to finalize before aborting.
constexpr std::chrono::milliseconds kFinalizeLimit{30000};
constexpr size_t kWordsPerBlock = 64;

std::string version_text(int code) {
  // NCCL_VERSION(X, Y, Z): X * 1000 + Y * 100 + Z up to 2.8, X * 10000 + Y * 100 + Z after.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << "]";
  return out.str();
}

}  // namespace

// Note [Device]: the backend makes its device current around every CUDA and NCCL call and puts
// the caller's back afterwards, so a program that drives several devices from one thread (or a
// thread that never chose one) sees no change.
DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device) (void)cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
}

std::string cuda_error_text(cudaError_t rc) {
  return std::string(cudaGetErrorString(rc)) + " (" + cudaGetErrorName(rc) + ", " +
         std::to_string(static_cast<int>(rc)) + ")";
}

std::string nccl_error_text(ncclResult_t rc) {
  std::string text = std::string(ncclGetErrorString(rc)) + " (ncclResult_t " +
                     std::to_string(static_cast<int>(rc)) + ")";
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += ": " + std::string(last);
  return text;
}

void fail_cuda(cudaError_t rc, const std::string& context, const char* what) {
  (void)cudaGetLastError();  // clear a non-sticky error so that later calls do not see it
  const ErrorKind kind =
      rc == cudaErrorMemoryAllocation ? ErrorKind::kOutOfMemory : ErrorKind::kInternal;
  detail::throw_error(
      kind, detail::concat("nccl: ", context, ": ", what, " failed: ", cuda_error_text(rc)),
      std::source_location::current());
}

// ---- Comm ------------------------------------------------------------------------------------

std::string Comm::where() const {
  return "group rank " + std::to_string(me) + " (world rank " +
         std::to_string(global_ranks.at(me)) + ") of the group of world ranks " +
         ranks_text(global_ranks);
}

void Comm::abort_locked(std::exception_ptr why) {
  if (!broken) broken = why;
  if (aborted || comm == nullptr) return;
  aborted = true;
  DeviceGuard guard(device);
  (void)ncclCommAbort(comm);
}

void Comm::settle_locked(ncclResult_t rc, Clock::time_point deadline, const std::string& context,
                         const char* what) {
  // A non-blocking communicator returns ncclInProgress while it enqueues in the background;
  // nothing may be queued on the stream after it (our end event included) until its state is
  // ncclSuccess (NCCL's user guide, "Non-blocking communicators").
  ncclResult_t state = rc;
  auto sleep = std::chrono::microseconds(5);
  while (state == ncclInProgress) {
    if (Clock::now() >= deadline) {
      auto error = std::make_exception_ptr(Error(
          ErrorKind::kTimeout,
          detail::concat("nccl: ", context, ": ", what,
                         " was still being enqueued at the call's deadline (a peer has not made "
                         "the matching call, or died); the communicator was aborted "
                         "(ncclCommAbort), so this group is unusable: create a new group or end "
                         "the job")));
      abort_locked(error);
      std::rethrow_exception(error);
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
  }
  if (state == ncclSuccess) return;
  const ErrorKind kind =
      state == ncclInvalidArgument || state == ncclInvalidUsage ? ErrorKind::kInvalidArgument
      : state == ncclRemoteError || state == ncclSystemError    ? ErrorKind::kPeerLost
                                                                : ErrorKind::kInternal;
  auto error = std::make_exception_ptr(
      Error(kind, detail::concat("nccl: ", context, ": ", what, " failed: ", nccl_error_text(state),
                                 "; the communicator was aborted, so this group is unusable")));
  abort_locked(error);
  std::rethrow_exception(error);
}

CheckWords* Comm::take_check_words_locked() {
  std::lock_guard<std::mutex> lock(words_mu_);
  // Words whose last copy has completed come back first.
  for (size_t i = 0; i < retired_words_.size();) {
    auto [words, event] = retired_words_[i];
    if (cudaEventQuery(event) == cudaErrorNotReady) {
      ++i;
      continue;
    }
    (void)cudaGetLastError();
    (void)cudaEventDestroy(event);
    free_words_.push_back(words);
    retired_words_[i] = retired_words_.back();
    retired_words_.pop_back();
  }
  if (free_words_.empty()) {
    void* block = nullptr;
    check_cuda(cudaHostAlloc(&block, kWordsPerBlock * sizeof(CheckWords), cudaHostAllocDefault),
               where(), "cudaHostAlloc (pinned words of the cross-rank check)");
    pinned_blocks_.push_back(block);
    auto* words = static_cast<CheckWords*>(block);
    for (size_t i = 0; i < kWordsPerBlock; ++i) free_words_.push_back(words + i);
  }
  CheckWords* words = free_words_.back();
  free_words_.pop_back();
  return words;
}

void Comm::retire_check_words(CheckWords* words, cudaEvent_t after) {
  std::lock_guard<std::mutex> lock(words_mu_);
  retired_words_.emplace_back(words, after);
}

Comm::~Comm() {
  if (comm == nullptr && stream == nullptr && scratch == nullptr && pinned_blocks_.empty()) return;
  DeviceGuard guard(device);
  const auto limit = std::min(timeout.count() > 0 ? timeout : kDefaultTimeout, kFinalizeLimit);
  if (comm != nullptr && !aborted) {
    // Finalize flushes what this rank queued and waits for the peers; a peer that is gone
    // would hold it forever, so past the limit the communicator is aborted instead.
    const auto deadline = Clock::now() + limit;
    ncclResult_t state = ncclCommFinalize(comm);
    while (state == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state == ncclSuccess) {
      (void)ncclCommDestroy(comm);
    } else {
      (void)ncclCommAbort(comm);
    }
  }
  // The stream may still copy into the pinned words or the scratch word: free them only once
  // it is idle (an aborted communicator's kernels exit, so it becomes idle); else leak them.
  bool idle = stream == nullptr;
  const auto deadline = Clock::now() + limit;
  while (!idle && Clock::now() < deadline) {
    const cudaError_t q = cudaStreamQuery(stream);
    idle = q != cudaErrorNotReady;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  (void)cudaGetLastError();
  if (idle) {
    for (auto& [words, event] : retired_words_) (void)cudaEventDestroy(event);
    for (void* block : pinned_blocks_) (void)cudaFreeHost(block);
    if (scratch != nullptr) (void)cudaFree(scratch);
  }
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
  (void)cudaGetLastError();
}

std::string describe_call(const CallInfo& call, const Comm& comm) {
  std::ostringstream out;
  out << collective_name(call.kind) << " (seq " << call.seq;
  if (call.index != 0) out << ", group call #" << call.index;
  if (call.kind == CollectiveKind::kSend || call.kind == CollectiveKind::kRecv) {
    out << ", peer " << call.peer;
  }
  out << ") on " << comm.where();
  return out.str();
}

// ---- the group -------------------------------------------------------------------------------

namespace {

// Creating the communicator: the unique id from rank 0 through the store, then a non-blocking
// ncclCommInitRankConfig polled until it finished or the deadline passed.
class Init {
 public:
  Init(Comm& comm, Store& store) : c_(comm), store_(store) {}

  // Publishes a failure before this rank joined, so that the others stop at once instead of
  // at their deadline (rank 0's failure goes where the others wait for the id).
  void publish_failure(const std::string& message) {
    try {
      store_.set(c_.store_prefix + (c_.me == 0 ? "id" : "failed"), "!" + message);
    } catch (...) {
      // The store itself failing is reported by the others' timeouts.
    }
  }

  ncclUniqueId exchange_id(Clock::time_point deadline) {
    ncclUniqueId id{};
    const std::string key = c_.store_prefix + "id";
    if (c_.me == 0) {
      const ncclResult_t rc = ncclGetUniqueId(&id);
      if (rc != ncclSuccess) {
        const std::string message = "ncclGetUniqueId failed: " + nccl_error_text(rc);
        publish_failure(message);
        BRAID_FAIL(kIo, "nccl: ", c_.where(), ": ", message);
      }
      c_.check = get_env_bool("BRAID_NCCL_CHECK", true);
      std::string value(1, c_.check ? '1' : '0');
      value.append(id.internal, sizeof(id.internal));
      store_.set(key, value);
      return id;
    }
    std::vector<uint8_t> value;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      value = store_.get(key, std::max(left, std::chrono::milliseconds(1)));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kTimeout) throw;
      BRAID_FAIL(kTimeout, "nccl: creating the communicator on ", c_.where(),
                 ": rank 0 (world rank ", c_.global_ranks[0],
                 ") did not publish the unique id within ", c_.timeout.count(), " ms (",
                 e.message(), ")");
    }
    if (!value.empty() && value[0] == '!') {
      BRAID_FAIL(kNotSupported, "nccl: creating the communicator on ", c_.where(),
                 ": rank 0 (world rank ", c_.global_ranks[0],
                 ") could not create its part: ", std::string(value.begin() + 1, value.end()));
    }
    BRAID_CHECK(value.size() == 1 + sizeof(id.internal), kCorruptData, "nccl: ", c_.where(),
                ": the unique id under store key '", key, "' has ", value.size(),
                " bytes, expected ", 1 + sizeof(id.internal));
    c_.check = value[0] == '1';
    std::memcpy(id.internal, value.data() + 1, sizeof(id.internal));
    return id;
  }

  void init(const ncclUniqueId& id, Clock::time_point deadline) {
    store_.set(c_.store_prefix + "joined/" + std::to_string(c_.me), "1");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // returns at once; the state is polled below, up to the deadline
    ncclUniqueId copy = id;
    ncclResult_t state = ncclCommInitRankConfig(&c_.comm, c_.n, copy, c_.me, &config);
    auto next_store_look = Clock::now();
    while (state == ncclInProgress) {
      const auto now = Clock::now();
      if (now >= deadline) fail_timeout();
      if (now >= next_store_look) {
        next_store_look = now + std::chrono::milliseconds(100);
        look_for_failures();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(c_.comm, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state != ncclSuccess) {
      const std::string text = nccl_error_text(state);
      std::lock_guard<std::mutex> lock(c_.mu);
      c_.abort_locked(nullptr);
      BRAID_FAIL(kIo, "nccl: creating the communicator on ", c_.where(),
                 ": ncclCommInitRankConfig failed: ", text);
    }
  }

 private:
  void look_for_failures() {
    const std::string key = c_.store_prefix + "failed";
    if (!store_.check({key})) return;
    const std::string text = store_.get_string(key);
    std::lock_guard<std::mutex> lock(c_.mu);
    c_.abort_locked(nullptr);
    BRAID_FAIL(kNotSupported, "nccl: creating the communicator on ", c_.where(),
               ": another rank could not create its part: ", text.substr(1));
  }

  [[noreturn]] void fail_timeout() {
    std::vector<int> missing;
    for (int r = 0; r < c_.n; ++r) {
      if (!store_.check({c_.store_prefix + "joined/" + std::to_string(r)})) {
        missing.push_back(c_.global_ranks[r]);
      }
    }
    {
      std::lock_guard<std::mutex> lock(c_.mu);
      c_.abort_locked(nullptr);
    }
    if (!missing.empty()) {
      BRAID_FAIL(kTimeout, "nccl: creating the communicator on ", c_.where(), " timed out after ",
                 c_.timeout.count(), " ms: world ranks ", ranks_text(missing),
                 " did not join (never reached ncclCommInitRankConfig)");
    }
    BRAID_FAIL(kTimeout, "nccl: creating the communicator on ", c_.where(), " timed out after ",
               c_.timeout.count(),
               " ms: every rank joined but NCCL's initialization did not finish (its bootstrap "
               "network: see NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO)");
  }

  Comm& c_;
  Store& store_;
};

}  // namespace

NcclGroup::NcclGroup(const BackendContext& context) : context_(context) {
  BRAID_CHECK(context.store, kInvalidArgument,
              "nccl: BackendContext.store is null (expected the group's store)");
  BRAID_CHECK(context.size >= 1 && context.rank >= 0 && context.rank < context.size,
              kInvalidArgument, "nccl: rank ", context.rank, " of group size ", context.size,
              " (expected 0 <= rank < size)");
  if (context_.global_ranks.size() != static_cast<size_t>(context.size)) {
    context_.global_ranks.resize(context.size);
    for (int r = 0; r < context.size; ++r) context_.global_ranks[r] = r;
  }
  auto comm = std::make_shared<Comm>();
  Comm& c = *comm;
  c.me = context.rank;
  c.n = context.size;
  c.global_ranks = context_.global_ranks;
  c.store = context.store;
  c.timeout = context.timeout.count() > 0 ? context.timeout : context.store->timeout();
  if (c.timeout.count() <= 0) c.timeout = kDefaultTimeout;
  const auto deadline = Clock::now() + c.timeout;
  Store& store = *context.store;
  c.store_prefix =
      "nccl/" + std::to_string(store.add("nccl/instances/" + std::to_string(c.me), 1)) + "/";
  Init init(c, store);
  if (ncclGetVersion(&version_) != ncclSuccess) version_ = 0;

  // The device (Note [Device], docs/comm.md "nccl"): cuda:LOCAL_RANK, chosen at creation.
  const int local_rank = detect_rank_info().local_rank;
  try {
    int count = 0;  // left unset by cudaGetDeviceCount when it fails (no driver: error 35)
    const cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      BRAID_FAIL(kNotSupported, "nccl: no CUDA device is visible to ", c.where(),
                 " (cudaGetDeviceCount: ", cuda_error_text(rc),
                 "); the nccl backend needs device cuda:", local_rank, " (LOCAL_RANK ", local_rank,
                 "); use a CPU backend (shm, ucx, mpi) on machines without a GPU");
    }
    try {
      c.device = default_device_index(local_rank, count);
    } catch (const Error& e) {
      BRAID_FAIL(kNotSupported, "nccl: ", c.where(), ": ", e.message());
    }
    DeviceGuard guard(c.device);
    check_cuda(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), c.where(),
               "cudaStreamCreateWithFlags (the communication stream)");
    check_cuda(cudaMalloc(&c.scratch, 64), c.where(), "cudaMalloc (the scratch words)");
  } catch (const Error& e) {
    init.publish_failure("world rank " + std::to_string(c.global_ranks[c.me]) + ": " + e.message());
    throw;
  }
  {
    DeviceGuard guard(c.device);
    init.init(init.exchange_id(deadline), deadline);
  }

  caps_.devices = {DeviceType::kCUDA};
  for (int d = 0; d < kNumDTypes; ++d) {
    ncclDataType_t t;
    if (nccl_dtype(static_cast<DType>(d), version_, &t))
      caps_.dtypes.push_back(static_cast<DType>(d));
  }
  for (int k = 0; k <= static_cast<int>(CollectiveKind::kRecv); ++k) {
    caps_.collectives.push_back(static_cast<CollectiveKind>(k));
  }
  caps_.point_to_point = true;
  caps_.runs_on_any_thread = false;  // the GPU progresses the call: run() returns it pending
  comm_ = std::move(comm);
}

void NcclGroup::precheck(const CollectiveDesc& d) const {
  const Comm& c = *comm_;
  const auto name = collective_name(d.kind);
  if (d.kind != CollectiveKind::kBarrier) {
    BRAID_CHECK(d.device.type == DeviceType::kCUDA && d.device.index == c.device, kInvalidArgument,
                "nccl: ", name, ": the buffers are on ", d.device.str(),
                " but this group's communicator is on cuda:", c.device,
                " (chosen from LOCAL_RANK when the group was created); expected tensors on cuda:",
                c.device);
  }
  BRAID_CHECK(d.stream.handle == nullptr || d.stream.device == Device(DeviceType::kCUDA, c.device),
              kInvalidArgument, "nccl: ", name, ": the stream is on ", d.stream.device.str(),
              ", expected a stream of cuda:", c.device);
  if (is_reduction(d.kind)) {
    BRAID_CHECK(d.op != ReduceOp::kPremulSum || is_floating(d.dtype), kNotSupported, "nccl: ", name,
                ": reduce op premul_sum on dtype ", d.dtype,
                " is not supported (expected a float dtype, as torch)");
    BRAID_CHECK(d.op != ReduceOp::kAvg || version_ >= NCCL_VERSION(2, 10, 0), kNotSupported,
                "nccl: ", name, ": reduce op avg needs NCCL 2.10 or later, this process loaded ",
                version_text(version_));
  }
}

cudaEvent_t NcclGroup::enqueue_check(const CallInfo& call, CheckWords* words) {
  // Note [Cross-rank check]: each collective starts with an all-reduce (MAX) of {signature,
  // ~signature} on the communication stream: the result is {max, ~min} on every rank, so all
  // learn whether the signatures agree. The words go through pinned memory both ways, with no
  // host wait; the Work reads the result once the event after the copy back has completed, and
  // names the ranks through the store only when they differ (nccl_work.cc).
  Comm& c = *comm_;
  words->mine[0] = call.signature;
  words->mine[1] = ~call.signature;
  auto ok = [&](cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) fail_cuda(rc, describe_call(call, c), what);
  };
  ok(cudaMemcpyAsync(c.scratch, words->mine, sizeof(words->mine), cudaMemcpyHostToDevice, c.stream),
     "cudaMemcpyAsync (cross-rank check)");
  const ncclResult_t rc =
      ncclAllReduce(c.scratch, c.scratch, 2, ncclUint64, ncclMax, c.comm, c.stream);
  if (rc != ncclSuccess) {
    c.settle_locked(rc, call.deadline, describe_call(call, c), "ncclAllReduce (cross-rank check)");
  }
  ok(cudaMemcpyAsync(words->all, c.scratch, sizeof(words->all), cudaMemcpyDeviceToHost, c.stream),
     "cudaMemcpyAsync (cross-rank check)");
  cudaEvent_t done = nullptr;
  ok(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t rec = cudaEventRecord(done, c.stream);
  if (rec != cudaSuccess) {
    (void)cudaEventDestroy(done);
    fail_cuda(rec, describe_call(call, c), "cudaEventRecord (cross-rank check)");
  }
  return done;
}

std::shared_ptr<Work> NcclGroup::run(const CollectiveDesc& desc) {
  Comm& c = *comm_;
  std::lock_guard<std::mutex> lock(c.mu);
  try {
    if (c.broken) std::rethrow_exception(c.broken);
    precheck(desc);  // errors every rank sees alike, before any NCCL call: the group stays usable
  } catch (...) {
    return completed_work(std::current_exception());
  }
  CallInfo call{.kind = desc.kind,
                .dtype = desc.dtype,
                .count = desc.count,
                .op = desc.op,
                .root = desc.root,
                .peer = desc.peer,
                .seq = desc.seq,
                .signature = desc.signature};
  call.timeout = desc.timeout.count() > 0 ? desc.timeout : c.timeout;
  call.deadline = Clock::now() + call.timeout;
  const bool collective = desc.kind != CollectiveKind::kSend && desc.kind != CollectiveKind::kRecv;
  if (collective) call.index = ++c.calls;

  DeviceGuard guard(c.device);
  auto user = static_cast<cudaStream_t>(desc.stream.handle);
  cudaEvent_t ready = nullptr, check_done = nullptr, end = nullptr;
  CheckWords* words = nullptr;
  try {
    // Note [Streams]: the communication stream waits for what the caller queued so far, the
    // caller's stream for the collective; no host wait in between (as PyTorch's
    // ProcessGroupNCCL and llm.c order compute and communication).
    auto ok = [&](cudaError_t rc, const char* what) {
      if (rc != cudaSuccess) fail_cuda(rc, describe_call(call, c), what);
    };
    ok(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    ok(cudaEventRecord(ready, user), "cudaEventRecord (the caller's stream)");
    ok(cudaStreamWaitEvent(c.stream, ready, 0), "cudaStreamWaitEvent");
    (void)cudaEventDestroy(ready);  // released by CUDA once the recorded work completed
    ready = nullptr;
    if (collective && c.check) {
      words = c.take_check_words_locked();
      check_done = enqueue_check(call, words);
    }
    enqueue_collective(c, desc, call, version_);
    ok(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), "cudaEventCreate");
    ok(cudaEventRecord(end, c.stream), "cudaEventRecord (end of the call)");
    ok(cudaStreamWaitEvent(user, end, 0), "cudaStreamWaitEvent (the caller's stream)");
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    for (cudaEvent_t e : {ready, end}) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    // A copy may still be queued for the words: they go back only after check_done (else leak).
    if (words != nullptr && check_done != nullptr) c.retire_check_words(words, check_done);
    c.abort_locked(error);  // some ranks may have queued their part: the group cannot go on
    return completed_work(error);
  }
  return std::make_shared<NcclWork>(comm_, call, end, check_done, words);
}

}  // namespace nccl

void register_nccl_backend() {
  register_backend("nccl", [](const BackendContext& context) -> std::unique_ptr<Backend> {
    return std::make_unique<nccl::NcclGroup>(context);
  });
}

std::string nccl_library_version() {
  int loaded = 0;
  const std::string built = nccl::version_text(NCCL_VERSION_CODE);
  if (ncclGetVersion(&loaded) != ncclSuccess) return "unknown (built against nccl.h " + built + ")";
  return "NCCL " + nccl::version_text(loaded) + " (built against nccl.h " + built + ")";
}

}  // namespace braid

// The comm_nccl component's entry point (backend_registry.cc references it weakly).
extern "C" void braid_comm_register_nccl() {
  braid::register_nccl_backend();
}
