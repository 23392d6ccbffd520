// The MPI backend's cross-rank check (always on; docs/mpi.md, "Cross-rank check"). Before each
// collective every rank all-reduces {signature, ~signature} with MPI_MAX: the result is
// {max, ~min} of the signatures, the same on every rank, so every rank learns at once whether
// all signatures agree. Only when they do not, an all-gather of each rank's call (group call
// index, seq, kind, dtype, count, op, root) names the ranks and the calls, on every rank.
// The same all-reduce doubles as the barrier: it completes only once every rank entered.
#include <sstream>

#include "braid/core/error.h"
#include "mpi_backend.h"

namespace braid::mpi {
namespace {

// One rank's call as the all-gather carries it: eight int64.
struct CallRecord {
  int64_t index, seq, signature, count, kind, dtype, op, root;
};
static_assert(sizeof(CallRecord) == 8 * sizeof(int64_t));

// "all_reduce f32 x 1024 sum", "broadcast bf16 x 7 root 2", "barrier" (as the shm backend).
std::string describe(const CallRecord& r) {
  const auto kind = static_cast<CollectiveKind>(r.kind);
  std::ostringstream out;
  out << collective_name(kind);
  if (kind == CollectiveKind::kBarrier) return out.str();
  out << " " << static_cast<DType>(r.dtype);
  out << (kind == CollectiveKind::kAllToAllV ? " rows of " : " x ") << r.count;
  if (is_reduction(kind)) out << " " << reduce_op_name(static_cast<ReduceOp>(r.op));
  if (is_rooted(kind)) out << " root " << r.root;
  return out.str();
}

}  // namespace

void MpiGroup::check_across_ranks(Call& c) {
  // In scratch, not on this stack: after a timeout MPI may still write the result, and the
  // call's scratch then stays with the group (MpiGroup::abandon).
  auto* words = reinterpret_cast<uint64_t*>(c.scratch_bytes(4 * sizeof(uint64_t)));
  uint64_t* mine = words;
  uint64_t* all = words + 2;
  mine[0] = c.desc.signature;
  mine[1] = ~c.desc.signature;
  MPI_Request request = MPI_REQUEST_NULL;
  c.phase =
      "the cross-rank check (an all-reduce every rank enters with this collective: some "
      "rank has not entered it)";
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Iallreduce(mine, all, 2, MPI_UINT64_T, MPI_MAX, comm_, &request), c,
              "MPI_Iallreduce (cross-rank check)");
  }
  wait(c, &request);
  c.phase = "the MPI collective (every rank entered it and the calls agree)";
  if (all[0] == ~all[1]) return;  // max == min: every signature is the same
  fail_mismatch(c);
}

void MpiGroup::fail_mismatch(Call& c) {
  const CollectiveDesc& d = c.desc;
  auto* records = reinterpret_cast<CallRecord*>(c.scratch_bytes(sizeof(CallRecord) * (n_ + 1)));
  CallRecord& mine = records[n_];
  mine = {static_cast<int64_t>(c.index),     static_cast<int64_t>(d.seq),
          static_cast<int64_t>(d.signature), d.count,
          static_cast<int64_t>(d.kind),      static_cast<int64_t>(d.dtype),
          static_cast<int64_t>(d.op),        d.root};
  MPI_Request request = MPI_REQUEST_NULL;
  c.phase = "the all-gather that names the ranks of a cross-rank mismatch";
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Iallgather(&mine, 8, MPI_INT64_T, records, 8, MPI_INT64_T, comm_, &request), c,
              "MPI_Iallgather (cross-rank check)");
  }
  wait(c, &request);
  // Every rank names itself and the first rank whose call differs from its own.
  int other = 0;
  while (other < n_ && records[other].signature == mine.signature) ++other;
  BRAID_ASSERT(other < n_, "mpi: the cross-rank check saw different signatures, but the ",
               "all-gather of the calls found none");
  const CallRecord& theirs = records[other];
  BRAID_FAIL(kInvalidArgument, "mpi: collective mismatch at group call #", mine.index,
             ": group rank ", me_, " (world rank ", context_.global_ranks[me_], ") called ",
             describe(mine), " (seq ", mine.seq, ", call #", mine.index, ") but group rank ", other,
             " (world rank ", context_.global_ranks[other], ") called ", describe(theirs), " (seq ",
             theirs.seq, ", call #", theirs.index,
             "); expected every rank of the group to make the same collective calls in the same "
             "order");
}

}  // namespace braid::mpi
