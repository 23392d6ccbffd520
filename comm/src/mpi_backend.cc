// The MPI backend's group object (docs/mpi.md): MPI start-up (MPI_Init_thread when the program
// has not initialized MPI, MPI_Finalize at exit only then), the world check against the
// launcher's ranks, one communicator per group, run() with its error handling, the wait loop
// every nonblocking call completes through (the cross-rank check is in mpi_check.cc).
#include "mpi_backend.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "wait_policy.h"

namespace braid {
namespace mpi {
namespace {

// Note [Wait loop] (docs/mpi.md, "Thread level and progress"): MPI progresses only inside MPI
// calls, so a wait is a loop of MPI_Test: back to back for kSpinTime (only while ranks <= CPUs),
// then with sched_yield until kYieldTime, then with sleeps that double from kFirstSleep to
// kMaxSleep. Each MPI_Test takes the process-wide MPI lock for that call only.
constexpr std::chrono::microseconds kSpinTime{20};
constexpr std::chrono::microseconds kYieldTime{500};
constexpr std::chrono::microseconds kFirstSleep{10};
constexpr std::chrono::microseconds kMaxSleep{1000};
constexpr std::chrono::milliseconds kDefaultTimeout{300000};
constexpr int kCreateTag = 0x6272;  // MPI_Comm_create_group's tag ("br")

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, len);
}

// Process-wide MPI state, set up once (under mpi_mutex()) by the first MPI group.
struct Runtime {
  bool initialized_here = false;  // braid called MPI_Init_thread, so it finalizes
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Datatype bytes[9] = {};  // by element size 1, 2, 4, 8
  int64_t max_user_tag = 0;
  int abandoned_groups = 0;  // groups with a pending request: MPI_Finalize would hang
};

Runtime g_runtime;
bool g_runtime_ready = false;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

void finalize_at_exit() {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A timed-out collective cannot be cancelled and MPI_Finalize would wait for it: exit
  // without finalizing, which mpirun reports as an abnormal exit (docs/mpi.md, "Limits").
  if (!finalized && g_runtime.abandoned_groups == 0) MPI_Finalize();
}

// Initializes MPI if needed and the shared types / ops. Caller holds mpi_mutex().
void ensure_runtime() {
  if (g_runtime_ready) return;
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  BRAID_CHECK(!finalized, kInvalidArgument,
              "mpi: MPI was already finalized in this process; the mpi backend needs it running");
  MPI_Initialized(&initialized);
  Runtime& rt = g_runtime;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &rt.thread_level);
    BRAID_CHECK(rc == MPI_SUCCESS, kIo, "mpi: MPI_Init_thread failed: ", mpi_error_text(rc));
    rt.initialized_here = true;
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&rt.thread_level);
  }
  for (int size : {1, 2, 4, 8}) {
    MPI_Type_contiguous(size, MPI_BYTE, &rt.bytes[size]);
    MPI_Type_commit(&rt.bytes[size]);
  }
  void* attr = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag);
  const int64_t tag_ub = flag ? *static_cast<int*>(attr) : 32767;
  rt.max_user_tag = (tag_ub - 15) / 16;
  g_runtime_ready = true;
}

}  // namespace

std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

MPI_Datatype bytes_type(size_t bytes) {
  return g_runtime.bytes[bytes];
}
int64_t max_user_tag() {
  return g_runtime.max_user_tag;
}

uint8_t* Call::scratch_bytes(size_t bytes) {
  scratch.push_back(std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(bytes, 1)));
  return scratch.back().get();
}

// ---- the group ------------------------------------------------------------------------------

MpiGroup::MpiGroup(const BackendContext& context)
    : context_(context), me_(context.rank), n_(context.size) {
  BRAID_CHECK(context.store, kInvalidArgument,
              "mpi: BackendContext.store is null (expected the group's store)");
  BRAID_CHECK(n_ >= 1 && me_ >= 0 && me_ < n_, kInvalidArgument, "mpi: rank ", me_,
              " of group size ", n_, " (expected 0 <= rank < size)");
  if (context_.global_ranks.size() != static_cast<size_t>(n_)) {
    context_.global_ranks.resize(n_);
    for (int r = 0; r < n_; ++r) context_.global_ranks[r] = r;
  }
  int world_rank = 0, world_size = 0;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    ensure_runtime();
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  const RankInfo launcher = detect_rank_info();
  BRAID_CHECK(launcher.world_size == world_size && launcher.rank == world_rank, kInvalidArgument,
              "mpi: MPI_COMM_WORLD has rank ", world_rank, " of ", world_size, " but the ",
              launcher.source, " environment says rank ", launcher.rank, " of ",
              launcher.world_size,
              "; expected the same world (start the job with mpirun / srun, not another launcher)");
  const int mine = context_.global_ranks[me_];
  BRAID_CHECK(mine == world_rank, kInvalidArgument, "mpi: group rank ", me_, " is world rank ",
              mine, " but MPI_COMM_WORLD says this process is rank ", world_rank,
              "; expected braid's world ranks to be MPI's");
  for (int r : context_.global_ranks) {
    BRAID_CHECK(r >= 0 && r < world_size, kInvalidArgument, "mpi: world rank ", r,
                " of the group is outside MPI_COMM_WORLD's [0, ", world_size, ")");
  }

  // MPI_Comm_create_group blocks until every member calls it. Meet in the store first, with
  // the deadline, so a missing member is a timeout naming the keys instead of a hang.
  Store& store = *context.store;
  const auto timeout = context.timeout.count() > 0 ? context.timeout : store.timeout();
  const std::string prefix =
      "mpi/" + std::to_string(store.add("mpi/instances/" + std::to_string(me_), 1)) + "/";
  store.set(prefix + std::to_string(me_), std::string("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < n_; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, timeout);

  std::lock_guard<std::mutex> lock(mpi_mutex());
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, n_, context_.global_ranks.data(), &group);
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kCreateTag, &comm_);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  BRAID_CHECK(rc == MPI_SUCCESS, kIo, "mpi: MPI_Comm_create_group for world ranks ", ranks_text(),
              " failed: ", mpi_error_text(rc));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);

  caps_.devices = {DeviceType::kCPU};
#define BRAID_MPI_DTYPE(e, n, st, T, sz, fl) caps_.dtypes.push_back(DType::e);
  BRAID_FOR_EACH_DTYPE(BRAID_MPI_DTYPE)
#undef BRAID_MPI_DTYPE
  for (int k = 0; k <= static_cast<int>(CollectiveKind::kRecv); ++k) {
    caps_.collectives.push_back(static_cast<CollectiveKind>(k));
  }
  caps_.point_to_point = true;
  // Another thread may call MPI from SERIALIZED up (docs/mpi.md, "Thread level and progress").
  caps_.runs_on_any_thread = g_runtime.thread_level >= MPI_THREAD_SERIALIZED;
}

MpiGroup::~MpiGroup() {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  if (abandoned_) {
    // MPI may still write into these: leak them, and the communicator, on purpose.
    for (auto& buffer : graveyard_) buffer.release();
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::shared_ptr<Work> MpiGroup::run(const CollectiveDesc& desc) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (broken_) std::rethrow_exception(broken_);
    precheck(desc);  // errors every rank sees alike, before any MPI call: the group stays usable
  } catch (...) {
    return completed_work(std::current_exception());
  }
  auto timeout = desc.timeout.count() > 0 ? desc.timeout : context_.timeout;
  if (timeout.count() <= 0) timeout = kDefaultTimeout;
  Call c{.desc = desc,
         .deadline = std::chrono::steady_clock::now() + timeout,
         .timeout = timeout,
         .scratch = {}};
  const bool collective = desc.kind != CollectiveKind::kSend && desc.kind != CollectiveKind::kRecv;
  if (collective) c.index = ++calls_;
  try {
    if (collective) check_across_ranks(c);
    dispatch(c);
    return completed_work();
  } catch (...) {
    broken_ = std::current_exception();
  }
  return completed_work(broken_);
}

void MpiGroup::precheck(const CollectiveDesc& d) const {
  const auto name = collective_name(d.kind);
  const bool reducing = d.kind == CollectiveKind::kAllReduce || d.kind == CollectiveKind::kReduce ||
                        d.kind == CollectiveKind::kReduceScatter;
  if (reducing) {
    BRAID_CHECK(d.op != ReduceOp::kPremulSum || is_floating(d.dtype), kNotSupported, "mpi: ", name,
                ": reduce op premul_sum on dtype ", d.dtype,
                " is not supported (expected a float dtype, as torch)");
    BRAID_CHECK(d.op != ReduceOp::kAvg || d.dtype != DType::kBool, kNotSupported, "mpi: ", name,
                ": reduce op avg on dtype bool is not supported (expected a numeric dtype)");
  }
  // MPI counts are int (elements per rank; all_to_all_v's are checked with its counts).
  BRAID_CHECK(d.count <= INT32_MAX, kNotSupported, "mpi: ", name, ": count ", d.count,
              " exceeds MPI's int count limit ", INT32_MAX, "; split the call");
  if (d.kind == CollectiveKind::kSend || d.kind == CollectiveKind::kRecv) {
    BRAID_CHECK(d.tag >= 0 && d.tag <= max_user_tag(), kInvalidArgument, "mpi: ", name, ": tag ",
                d.tag, " is outside [0, ", max_user_tag(),
                "] (MPI_TAG_UB / 16: the low 4 bits carry the dtype)");
  }
  if (g_runtime.thread_level < MPI_THREAD_SERIALIZED) {
    int main_thread = 0;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      MPI_Is_thread_main(&main_thread);
    }
    BRAID_CHECK(main_thread, kNotSupported, "mpi: ", name,
                " called from a thread other than MPI's main thread, but the program initialized "
                "MPI with ",
                thread_level_name(g_runtime.thread_level),
                "; expected MPI_THREAD_SERIALIZED or higher (MPI_Init_thread)");
  }
}

void MpiGroup::dispatch(Call& c) {
  switch (c.desc.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
    case CollectiveKind::kReduceScatter:
      return reduction(c);
    case CollectiveKind::kBroadcast:
      return broadcast(c);
    case CollectiveKind::kAllGather:
      return all_gather(c);
    case CollectiveKind::kGather:
      return gather(c);
    case CollectiveKind::kScatter:
      return scatter(c);
    case CollectiveKind::kAllToAll:
      return all_to_all(c);
    case CollectiveKind::kAllToAllV:
      return all_to_all_v(c);
    case CollectiveKind::kBarrier:
      return;  // the cross-rank check completed on every rank: nobody left before all came
    case CollectiveKind::kSend:
      return send(c);
    case CollectiveKind::kRecv:
      return recv(c);
  }
}

// ---- waiting --------------------------------------------------------------------------------

void MpiGroup::wait(Call& c, MPI_Request* request, MPI_Status* status) {
  wait_for(c, [&] {
    int done = 0;
    check_mpi(MPI_Test(request, &done, status), c, "MPI_Test");
    return done != 0;
  });
}

void MpiGroup::wait_for(Call& c, const std::function<bool()>& poll) {
  const auto start = std::chrono::steady_clock::now();
  const auto spin = n_ <= usable_cpus() ? kSpinTime : std::chrono::microseconds{0};
  auto sleep = kFirstSleep;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      if (poll()) return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= c.deadline) {
      abandon(c);
      detail::throw_error(
          ErrorKind::kTimeout,
          detail::concat("mpi: ", describe_call(c), ": timed out after ", c.timeout.count(),
                         " ms in ", c.phase,
                         "; MPI cannot cancel a started collective, so this group is unusable: "
                         "end the job (MPI_Abort, or let mpirun / the launcher stop it)"),
          std::source_location::current());
    }
    if (now - start < spin) continue;
    if (now - start < kYieldTime) {
      sched_yield();
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(c.deadline - now);
    std::this_thread::sleep_for(std::min(sleep, left));
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

void MpiGroup::abandon(Call& c) {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  for (auto& buffer : c.scratch) graveyard_.push_back(std::move(buffer));
  c.scratch.clear();
  if (!abandoned_) ++g_runtime.abandoned_groups;
  abandoned_ = true;
}

void MpiGroup::check_mpi(int rc, const Call& c, const char* what) const {
  if (rc == MPI_SUCCESS) return;
  int error_class = rc;
  MPI_Error_class(rc, &error_class);
  const ErrorKind kind =
      error_class == MPI_ERR_TRUNCATE ? ErrorKind::kInvalidArgument : ErrorKind::kInternal;
  detail::throw_error(
      kind, detail::concat("mpi: ", describe_call(c), ": ", what, " failed: ", mpi_error_text(rc)),
      std::source_location::current());
}

std::string MpiGroup::describe_call(const Call& c) const {
  std::ostringstream out;
  out << collective_name(c.desc.kind) << " (seq " << c.desc.seq;
  if (c.index != 0) out << ", group call #" << c.index;
  if (c.desc.kind == CollectiveKind::kSend || c.desc.kind == CollectiveKind::kRecv) {
    out << ", peer " << c.desc.peer << ", tag " << c.desc.tag;
  }
  out << ") on group rank " << me_ << " (world rank " << context_.global_ranks[me_]
      << ") of the group of world ranks " << ranks_text();
  return out.str();
}

std::string MpiGroup::ranks_text() const {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < context_.global_ranks.size(); ++i) {
    out << (i ? ", " : "") << context_.global_ranks[i];
  }
  out << "]";
  return out.str();
}

}  // namespace mpi

void register_mpi_backend() {
  register_backend("mpi", [](const BackendContext& context) -> std::unique_ptr<Backend> {
    return std::make_unique<mpi::MpiGroup>(context);
  });
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string version(text, strnlen(text, sizeof(text)));
  version = version.substr(0, version.find_first_of("\r\n"));
  return version.substr(0, version.find_last_not_of(" \t,") + 1);
}

}  // namespace braid

// The comm_mpi component's entry point (backend_registry.cc references it weakly).
extern "C" void braid_comm_register_mpi() {
  braid::register_mpi_backend();
}
