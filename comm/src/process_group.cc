// ProcessGroup: creation (world group and subgroups) and the one path every collective takes
// (Impl::submit): capabilities, sequence number, signature, timeout, debug-mode cross-rank
// check, backend.run, and the wait for blocking calls. docs/comm.md describes each step.
#include "braid/comm/process_group.h"

#include <algorithm>
#include <sstream>

#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/comm/work.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"
#include "meta_backend.h"
#include "process_group_impl.h"

namespace braid {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

// splitmix64's finalizer: every input bit affects every output bit.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string job_id_from_env() {
  auto token = get_env_string("BRAID_STORE_TOKEN");
  if (!token || token->empty()) return "local";
  return token->substr(0, 12);
}

std::shared_ptr<Store> group_store(const std::shared_ptr<Store>& root, const std::string& id) {
  return std::make_shared<PrefixStore>("braid/pg/" + id, root);
}

}  // namespace

// ---------------------------------------------------------------- Impl

void ProcessGroup::Impl::make_backend() {
  BackendContext ctx;
  ctx.store = std::make_shared<PrefixStore>("backend", store);
  ctx.rank = rank;
  ctx.size = size;
  ctx.global_ranks = global_ranks;
  ctx.job_id = job_id_from_env();
  ctx.timeout = timeout;
  backend = create_backend(backend_name, ctx);
  // Capabilities are data and fixed for the backend's life: bit sets make the per-call
  // check a few tests instead of three list scans.
  const BackendCapabilities& caps = backend->capabilities();
  for (CollectiveKind k : caps.collectives) kind_bits |= uint64_t{1} << static_cast<int>(k);
  for (DType d : caps.dtypes) dtype_bits |= uint64_t{1} << static_cast<int>(d);
  for (DeviceType t : caps.devices) device_bits |= uint64_t{1} << static_cast<int>(t);
}

std::string ProcessGroup::Impl::describe() const {
  return "group " + id + " (world ranks " + int_list_str(global_ranks) + ")";
}

std::string ProcessGroup::Impl::rank_name(int group_rank) const {
  return "rank " + std::to_string(group_rank) + " (world rank " +
         std::to_string(global_ranks.at(group_rank)) + ")";
}

void ProcessGroup::Impl::require_member(std::string_view what) const {
  BRAID_CHECK(member(), kInvalidArgument, what, ": world rank ", world_rank, " is not a member of ",
              describe(), "; new_group() gave it a placeholder on which collectives cannot run");
}

void ProcessGroup::Impl::check_capabilities(const CollectiveDesc& desc) const {
  auto has = [](uint64_t bits, int i) { return i >= 0 && i < 64 && (bits >> i & 1) != 0; };
  const bool point_to_point =
      desc.kind == CollectiveKind::kSend || desc.kind == CollectiveKind::kRecv;
  if (has(kind_bits, static_cast<int>(desc.kind)) &&
      (!point_to_point || backend->capabilities().point_to_point) &&
      (desc.kind == CollectiveKind::kBarrier ||
       (has(device_bits, static_cast<int>(desc.device.type)) &&
        has(dtype_bits, static_cast<int>(desc.dtype))))) {
    return;
  }
  // Not supported: the full check names what is missing.
  const BackendCapabilities& caps = backend->capabilities();
  const auto name = collective_name(desc.kind);
  BRAID_CHECK(contains(caps.collectives, desc.kind), kNotSupported, "backend '", backend_name,
              "' does not implement ", name);
  if (desc.kind == CollectiveKind::kSend || desc.kind == CollectiveKind::kRecv) {
    BRAID_CHECK(caps.point_to_point, kNotSupported, "backend '", backend_name,
                "' does not implement point-to-point ", name);
  }
  if (desc.kind == CollectiveKind::kBarrier) return;  // no buffers
  BRAID_CHECK(contains(caps.devices, desc.device.type), kNotSupported, name, ": backend '",
              backend_name, "' cannot use memory on device ", desc.device.str());
  if (!contains(caps.dtypes, desc.dtype)) {
    std::ostringstream supported;
    for (size_t i = 0; i < caps.dtypes.size(); ++i) {
      supported << (i ? ", " : "") << dtype_name(caps.dtypes[i]);
    }
    BRAID_FAIL(kNotSupported, name, ": backend '", backend_name, "' does not support dtype ",
               dtype_name(desc.dtype), "; supported: ", supported.str());
  }
}

std::chrono::milliseconds ProcessGroup::Impl::resolve_timeout(const CallOptions& o) const {
  if (!o.timeout) return timeout;
  BRAID_CHECK(o.timeout->count() > 0, kInvalidArgument, "CallOptions.timeout must be > 0 ms, got ",
              o.timeout->count(), " ms");
  return *o.timeout;
}

uint64_t ProcessGroup::Impl::signature(const CollectiveDesc& desc) const {
  // Fields that differ legitimately between ranks are left out: op for kinds that do not
  // reduce, root for kinds without one, the peer of send / recv.
  const uint64_t op = static_cast<uint8_t>(is_reduction(desc.kind) ? desc.op : ReduceOp::kSum);
  const uint64_t root = static_cast<uint32_t>(is_rooted(desc.kind) ? desc.root : 0);
  const uint64_t small = static_cast<uint64_t>(desc.kind) |
                         uint64_t{static_cast<uint8_t>(desc.dtype)} << 8 | op << 16 | root << 32;
  const auto count = static_cast<uint64_t>(desc.count);
  // A loop of like calls hashes once: the two mixes were 5% of a 16-byte call. The last inputs
  // and result are the calling thread's own, so calls from several threads cannot mix them.
  struct Last {
    uint64_t id_hash = 0, small = ~uint64_t{0}, count = 0, hash = 0;
  };
  thread_local Last last;
  if (id_hash != last.id_hash || small != last.small || count != last.count) {
    last = {id_hash, small, count, mix(mix(id_hash ^ small) ^ count)};
  }
  return last.hash;
}

std::shared_ptr<Work> ProcessGroup::Impl::submit(CollectiveDesc& desc, const CallOptions& o,
                                                 const CallRecord& rec,
                                                 std::function<void()> then) {
  if (!member()) require_member(collective_name(desc.kind));
  check_capabilities(desc);
  desc.timeout = resolve_timeout(o);
  // Not a fetch_add: a group's calls are made one at a time (their order is what every rank
  // must agree on, as in c10d), and the locked instruction was 4-5% of a 16-byte call.
  desc.seq = seq.load(std::memory_order_relaxed) + 1;
  seq.store(desc.seq, std::memory_order_relaxed);
  desc.signature = signature(desc);
  if (debug_mode) debug_check(desc, rec);
  BRAID_LOG(kTrace) << collective_name(desc.kind) << " #" << desc.seq << " on group " << id << ": "
                    << call_text(desc, rec);
  if (o.async == AsyncOp::kYes && backend->capabilities().runs_on_any_thread) {
    return submit_on_call_thread(desc, rec, std::move(then));
  }
  // Note [Async calls]: the backend runs one call at a time, in sequence order; a call made
  // here waits for the async calls queued before it (only this thread queues calls).
  if (const size_t queued = call_thread ? call_thread->pending() : 0; queued > 0) {
    call_thread->drain(desc.timeout * static_cast<int64_t>(queued + 1), call_name(desc));
  }
  std::shared_ptr<Work> work = run_on_backend(desc);
  if (then) work = then_work(std::move(work), std::move(then));
  if (o.async == AsyncOp::kNo) {
    // wait(0) waits until the collective's deadline and throws its error; false is a backend
    // that broke the Work contract, still reported as the timeout it amounts to.
    BRAID_CHECK(work->wait(), kTimeout, collective_name(desc.kind), " #", desc.seq, " on ",
                describe(), " did not complete within ", desc.timeout.count(), " ms");
  }
  return work;
}

std::string ProcessGroup::Impl::call_name(const CollectiveDesc& desc) const {
  return std::string(collective_name(desc.kind)) + " #" + std::to_string(desc.seq) + " on " +
         describe();
}

std::shared_ptr<Work> ProcessGroup::Impl::run_on_backend(const CollectiveDesc& desc) {
  std::shared_ptr<Work> work = backend->run(desc);
  BRAID_ASSERT(work != nullptr, "backend '", backend_name, "' returned a null Work for ",
               collective_name(desc.kind), " #", desc.seq);
  return work;
}

// Note [Async calls] (docs/comm.md, "Async calls"): a backend that finishes its calls inside
// run() (shm, ucx, hier, mpi) would give an async call no overlap at all: the caller would
// return only once the collective finished. So such a call goes to the group's communication
// thread, which runs the calls in the order they were made (the sequence numbers and the
// checks above were taken on the caller's thread, in that order), and the caller gets an
// AsyncWork that the thread completes with the call's result. A blocking call first waits for
// the queue to run out, so the backend still sees one call at a time in sequence order. The
// AsyncWork's own deadline, (calls queued before it + 1) x the call's timeout, only backs up
// the backend's: every call ends by its own deadline with the backend's error.
std::shared_ptr<Work> ProcessGroup::Impl::submit_on_call_thread(CollectiveDesc desc,
                                                                const CallRecord& rec,
                                                                std::function<void()> then) {
  if (!call_thread) call_thread = std::make_unique<CallThread>();
  const auto ahead = static_cast<int64_t>(call_thread->pending());
  auto work = std::make_shared<AsyncWork>(call_name(desc), desc.timeout * (ahead + 1));
  std::vector<Tensor> held;
  for (const Tensor* t : rec.tensors) {
    if (t) held.push_back(*t);
  }
  call_thread->post(
      [this, desc = std::move(desc), then = std::move(then), work, held = std::move(held)] {
        std::exception_ptr error;
        try {
          run_on_backend(desc)->wait();  // throws the call's error
          if (then) then();
        } catch (...) {
          error = std::current_exception();
        }
        work->complete(error);
      });
  return work;
}

// ---------------------------------------------------------------- creation

std::string choose_backend(const std::string& requested, const RankInfo& info) {
  if (requested != "auto") return requested;
  if (const char* env = std::getenv("BRAID_BACKEND"); env && *env && std::string(env) != "auto") {
    return env;
  }
  if (info.world_size <= info.local_world_size) return "shm";
  const std::vector<std::string> names = backend_names();
  auto built = [&](const char* n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  if (info.mpi_launcher && built("mpi")) return "mpi";
  if (built("hier")) return "hier";
  if (built("mpi")) return "mpi";
  BRAID_FAIL(kNotSupported, "ProcessGroup: the job spans several nodes (world size ",
             info.world_size, ", ", info.local_world_size, " ranks on this node, from ",
             info.source,
             ") but this build has no backend between nodes (expected UCX for "
             "'hier' or MPI for 'mpi'; set BRAID_BACKEND to choose one)");
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::create(const ProcessGroupOptions& options) {
  auto g = std::make_unique<Impl>();
  int rank = options.rank, size = options.size;
  BRAID_CHECK((rank == -1) == (size == -1), kInvalidArgument,
              "ProcessGroupOptions: set both rank and size, or neither (got rank ", rank, ", size ",
              size, ")");
  if (rank == -1) {
    RankInfo info = detect_rank_info();
    rank = info.rank;
    size = info.world_size;
  }
  BRAID_CHECK(size >= 1, kInvalidArgument, "ProcessGroupOptions.size must be >= 1, got ", size);
  BRAID_CHECK(rank >= 0 && rank < size, kInvalidArgument, "ProcessGroupOptions.rank ", rank,
              " is outside [0, ", size, ")");
  BRAID_CHECK(!options.backend.empty(), kInvalidArgument,
              "ProcessGroupOptions.backend is empty; name one of backend_names() or 'auto'");
  const std::string backend_name =
      options.backend == "auto" ? choose_backend("auto", detect_rank_info()) : options.backend;
  g->id.assign(1, '0');  // not = "0": g++ 12 warns falsely (-Wrestrict) there
  g->id_hash = fnv1a(kFnvOffset, g->id.data(), g->id.size());
  g->rank = rank;
  g->size = size;
  g->world_rank = rank;
  for (int r = 0; r < size; ++r) g->global_ranks.push_back(r);
  g->timeout = resolve_group_timeout(options.timeout);
  // The meta backend simulates every rank in this process: there is no peer to agree with or
  // to check arguments against (meta_backend.h).
  const bool simulated = backend_name == kMetaBackendName;
  g->debug_mode =
      !simulated && options.debug_mode.value_or(get_env_bool("BRAID_DEBUG_MODE", false));
  g->backend_name = backend_name;
  if (options.store) {
    g->root_store = options.store;
  } else if (simulated || (size == 1 && !get_env_string("MASTER_PORT").has_value())) {
    // A plain process with no launcher around it is a valid one-rank world (as torch's
    // init_process_group with world_size 1 and Accelerate's Accelerator()): its store lives in
    // this process.
    g->root_store = std::make_shared<InMemoryStore>(g->timeout);
  } else {
    g->root_store = store_from_env(g->timeout);
  }
  g->store = group_store(g->root_store, g->id);

  // Every rank must agree on the world before any backend rendezvous starts.
  const std::string what = "ProcessGroup::create on group 0";
  std::string hello = "size=" + std::to_string(size) + " backend=" + backend_name;
  if (!simulated) {
    auto values =
        exchange_values(*g->store, "create", hello, rank, g->global_ranks, g->timeout, what);
    require_same(values, g->global_ranks, what, "the group");
  }
  g->make_backend();
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(g)));
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks,
                                                      const std::string& backend) {
  const Impl& parent = *impl_;
  parent.require_member("new_group");
  const uint64_t n = ++impl_->children;
  const std::string child_id = parent.id + "." + std::to_string(n);
  const std::string backend_name = backend.empty() ? parent.backend_name : backend;
  const std::string what = "new_group #" + std::to_string(n) + " on " + parent.describe();

  // Agree first and validate after: every rank then sees the same lists and throws the same
  // error, rather than one rank throwing while the others wait for it.
  const bool simulated = parent.backend_name == kMetaBackendName;
  BRAID_CHECK(!simulated || backend_name == kMetaBackendName, kInvalidArgument, what,
              ": a subgroup of a 'meta' group is simulated in this process too, so its backend "
              "must be 'meta' (or left empty), got '",
              backend_name, "'");
  std::string mine = "ranks=" + int_list_str(ranks) + " backend=" + backend_name;
  if (!simulated) {
    auto values = exchange_values(*parent.store, "new_group/" + std::to_string(n), mine,
                                  parent.rank, parent.global_ranks, parent.timeout, what);
    require_same(values, parent.global_ranks, what, "the arguments");
  }
  BRAID_CHECK(!ranks.empty(), kInvalidArgument, what, ": the rank list is empty");
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    BRAID_CHECK(ranks[i] >= 0 && ranks[i] < parent.size, kOutOfRange, what, ": rank ", ranks[i],
                " is outside [0, ", parent.size, ")");
    BRAID_CHECK(i == 0 || ranks[i] != ranks[i - 1], kInvalidArgument, what, ": rank ", ranks[i],
                " is listed twice");
  }

  auto g = std::make_unique<Impl>();
  g->id = child_id;
  g->id_hash = fnv1a(kFnvOffset, g->id.data(), g->id.size());
  g->world_rank = parent.world_rank;
  for (int r : ranks) g->global_ranks.push_back(parent.global_ranks[r]);
  g->size = static_cast<int>(ranks.size());
  auto it = std::find(ranks.begin(), ranks.end(), parent.rank);
  g->rank = it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
  g->timeout = parent.timeout;
  g->debug_mode = parent.debug_mode;
  g->backend_name = backend_name;
  g->root_store = parent.root_store;
  g->store = group_store(parent.root_store, child_id);
  if (g->member()) g->make_backend();
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(g)));
}

int ProcessGroup::rank() const {
  return impl_->rank;
}
int ProcessGroup::size() const {
  return impl_->size;
}
const std::vector<int>& ProcessGroup::global_ranks() const {
  return impl_->global_ranks;
}
std::chrono::milliseconds ProcessGroup::timeout() const {
  return impl_->timeout;
}

Backend& ProcessGroup::backend() const {
  impl_->require_member("ProcessGroup::backend");
  return *impl_->backend;
}

}  // namespace braid
