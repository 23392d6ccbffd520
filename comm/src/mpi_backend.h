// The MPI backend (docs/mpi.md): a group's collectives and send / recv on MPI's own
// nonblocking calls, one communicator per group. Private to comm/; compiled only when CMake
// found MPI (BRAID_HAVE_MPI, comm/CMakeLists.txt), registered as "mpi" by
// comm/src/backend_registry.cc. mpi_backend.cc: MPI start-up and shut-down, the
// communicator, run() and the wait loop; mpi_check.cc: the cross-rank check; mpi_reduce.cc:
// the reductions; mpi_collectives.cc: the collectives that move data, and send / recv.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/comm/backend.h"
#include "overlap.h"

namespace braid {

// Registers "mpi" with the backend registry; called by comm/src/backend_registry.cc.
void register_mpi_backend();

// The MPI library's own name for itself (MPI_Get_library_version, its first line: "Open MPI
// v4.1.4, package: ..."), for the environment report; callable before MPI_Init.
std::string mpi_library_version();

namespace mpi {

// One call in flight on this rank: the descriptor, its deadline, and the scratch buffers it
// stages through. The buffers live as long as the Call, unless a wait timed out: MPI may still
// write into them then, so the group keeps them (MpiGroup::abandon).
struct Call {
  const CollectiveDesc& desc;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout;
  uint64_t index = 0;      // collectives this rank entered in the group, this one included
  const char* phase = "";  // what the current wait is for (error messages)
  std::vector<std::unique_ptr<uint8_t[]>> scratch;

  uint8_t* scratch_bytes(size_t bytes);
};

class MpiGroup final : public Backend {
 public:
  explicit MpiGroup(const BackendContext& context);
  ~MpiGroup() override;

  std::string_view name() const override { return "mpi"; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::shared_ptr<Work> run(const CollectiveDesc& desc) override;

 private:
  void precheck(const CollectiveDesc& desc) const;
  void dispatch(Call& c);

  // ---- mpi_backend.cc ----
  // Note [Wait loop]: completes `request` by MPI_Test (which also drives MPI's progress) until
  // the call's deadline; kTimeout naming the call and c.phase when it passes.
  void wait(Call& c, MPI_Request* request, MPI_Status* status = MPI_STATUS_IGNORE);
  // The same loop around any poll (called under mpi_mutex(); true: done), e.g. MPI_Improbe.
  void wait_for(Call& c, const std::function<bool()>& poll);
  // The always-on cross-rank check of the call's signature (docs/mpi.md, "Cross-rank check").
  void check_across_ranks(Call& c);
  [[noreturn]] void fail_mismatch(Call& c);
  // Throws for an MPI error code (kInvalidArgument for truncation, else kInternal).
  void check_mpi(int rc, const Call& c, const char* what) const;
  std::string describe_call(const Call& c) const;
  std::string ranks_text() const;
  // Keeps the call's scratch buffers for the group's lifetime (a pending request may write).
  void abandon(Call& c);

  // ---- mpi_collectives.cc ----
  // mpi_reduce.cc: all_reduce, reduce, reduce_scatter (Note [Ordered float reductions])
  void reduction(Call& c);
  void native_reduction(Call& c);   // integers, bool: MPI's own reductions
  void ordered_reduction(Call& c);  // floats: all-to-all, rank-order fold, (all-)gather
  std::vector<double> premul_factors(Call& c);
  void broadcast(Call& c);
  void all_gather(Call& c);
  void gather(Call& c);
  void scatter(Call& c);
  void all_to_all(Call& c);
  void all_to_all_v(Call& c);
  void check_v_counts(Call& c);
  void send(Call& c);
  void recv(Call& c);

  BackendContext context_;
  int me_ = 0, n_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mu_;              // one call at a time on this group
  std::exception_ptr broken_;  // the error that left the group unusable
  bool abandoned_ = false;     // a request of a timed-out call is still pending
  std::vector<std::unique_ptr<uint8_t[]>> graveyard_;
  uint64_t calls_ = 0;
  std::vector<uint8_t> fold_scratch_;  // the fold's block buffers, kept across calls
  BackendCapabilities caps_;
};

// ---- shared by the two files (mpi_backend.cc) ----

// Serializes every MPI call of the process (MPI_THREAD_SERIALIZED): held per MPI call, never
// across a sleep, so groups used from different threads progress independently.
std::mutex& mpi_mutex();
// A contiguous type of `bytes` MPI_BYTEs (1, 2, 4 or 8): the element type of the collectives
// that only move data.
MPI_Datatype bytes_type(size_t bytes);
// The largest user tag send / recv accept (tags carry the dtype in their low 4 bits).
int64_t max_user_tag();

}  // namespace mpi
}  // namespace braid
