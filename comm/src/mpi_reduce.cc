// The MPI backend's reductions: all_reduce, reduce, reduce_scatter (docs/mpi.md, "Dtypes and
// reductions").
//
// Note [Ordered float reductions]
// Float dtypes (f64, f32, f16, bf16, fp8) must give the bits of docs/shm.md, "Determinism":
// element i is the left fold x0 op x1 op ... op x(n-1) in rank order, in f32 (f64 for f64),
// rounded once to the dtype. MPI_Allreduce adds in whatever order its algorithm picks (the
// bits then depend on the world size and the message size), and a pairwise MPI_Op on bf16
// would round at every step. So floats are reduced with MPI's movement collectives and the
// shared rank-order fold (Folder):
//   1. MPI_Ialltoallv: rank d receives block d (1/n of the elements) of every rank's input,
//      in the dtype itself (16-bit formats travel as 16 bits, not as f32);
//   2. rank d folds the n rows of block d: widen to f32 once, fold in rank order, premultiply
//      / average as the op says, round once;
//   3. MPI_Iallgatherv (all_reduce) or MPI_Igatherv to the root (reduce) of the folded blocks;
//      reduce_scatter is step 1 with equal blocks (MPI_Ialltoall) and step 2.
// Bytes per rank: (n-1)/n of the message out and in at step 1 and again at step 3, as a ring
// all-reduce. Integers and bool are exact in any order, so they use MPI_Iallreduce /
// MPI_Ireduce / MPI_Ireduce_scatter_block with native types directly.
#include <cstring>

#include "braid/core/error.h"
#include "fold.h"
#include "mpi_backend.h"

namespace braid::mpi {
namespace {

MPI_Datatype integer_type(DType dtype) {
  switch (dtype) {
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI16:
      return MPI_INT16_T;
    case DType::kI8:
      return MPI_INT8_T;
    default:
      return MPI_UINT8_T;  // u8, bool
  }
}

// How an integer / bool reduction runs on MPI's own ops: integer avg sums in i64 and floors
// (the other ops wrap in the dtype, as the shm fold in i64 and its wrapping cast would); bool
// is folded as shm does (in i64, then != 0): sum and max are "any", prod and min "all".
struct NativePlan {
  DType acc;
  MPI_Datatype type;
  MPI_Op op;
};

NativePlan native_plan(DType dtype, ReduceOp op) {
  NativePlan p{dtype, MPI_DATATYPE_NULL, MPI_SUM};
  if (dtype == DType::kBool) {
    p.op = op == ReduceOp::kProd || op == ReduceOp::kMin ? MPI_LAND : MPI_LOR;
  } else {
    if (op == ReduceOp::kAvg) p.acc = DType::kI64;
    if (op == ReduceOp::kProd) p.op = MPI_PROD;
    if (op == ReduceOp::kMin) p.op = MPI_MIN;
    if (op == ReduceOp::kMax) p.op = MPI_MAX;
  }
  p.type = integer_type(p.acc);
  return p;
}

void floor_average(int64_t* p, int64_t count, int n) {
  for (int64_t i = 0; i < count; ++i) {
    int64_t q = p[i] / n;
    if (p[i] % n != 0 && p[i] < 0) --q;
    p[i] = q;
  }
}

// Element range of block r when `count` elements are split into n blocks.
int64_t block_start(int64_t count, int r, int n) {
  return count * r / n;
}

}  // namespace

void MpiGroup::reduction(Call& c) {
  if (is_floating(c.desc.dtype)) return ordered_reduction(c);
  native_reduction(c);
}

void MpiGroup::native_reduction(Call& c) {
  const CollectiveDesc& d = c.desc;
  const NativePlan p = native_plan(d.dtype, d.op);
  const bool scatter = d.kind == CollectiveKind::kReduceScatter;
  const int64_t in_n = scatter ? d.count * n_ : d.count;
  const bool has_result = d.kind != CollectiveKind::kReduce || me_ == d.root;
  const size_t esz = dtype_size(d.dtype), asz = dtype_size(p.acc);
  const void* in = d.send;
  void* out = has_result ? d.recv : nullptr;
  bool in_place = false;
  if (p.acc != d.dtype) {  // integer avg: widened to i64
    uint8_t* wide = c.scratch_bytes(in_n * asz);
    host_kernels().cast(Stream{kCPU}, d.send, d.dtype, wide, p.acc, in_n,
                        kernels::CastMode::kDefault);
    in = wide;
    out = scatter ? c.scratch_bytes(d.count * asz) : (has_result ? wide : nullptr);
    in_place = !scatter && has_result;
  } else if (has_result && !scatter && d.send == d.recv) {
    in_place = true;
  } else if (has_result && overlaps(d.send, in_n * esz, d.recv, d.count * esz)) {
    uint8_t* copy = c.scratch_bytes(in_n * esz);
    std::memcpy(copy, d.send, in_n * esz);
    in = copy;
  }
  const void* send = in_place ? MPI_IN_PLACE : in;
  const int n = static_cast<int>(d.count);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    if (d.kind == CollectiveKind::kAllReduce) {
      check_mpi(MPI_Iallreduce(send, out, n, p.type, p.op, comm_, &request), c, "MPI_Iallreduce");
    } else if (d.kind == CollectiveKind::kReduce) {
      check_mpi(MPI_Ireduce(send, out, n, p.type, p.op, d.root, comm_, &request), c, "MPI_Ireduce");
    } else {
      check_mpi(MPI_Ireduce_scatter_block(send, out, n, p.type, p.op, comm_, &request), c,
                "MPI_Ireduce_scatter_block");
    }
  }
  wait(c, &request);
  if (!has_result || d.op != ReduceOp::kAvg) return;
  floor_average(static_cast<int64_t*>(out), d.count, n_);
  if (p.acc != d.dtype)
    host_kernels().cast(Stream{kCPU}, out, p.acc, d.recv, d.dtype, d.count,
                        kernels::CastMode::kDefault);
}

std::vector<double> MpiGroup::premul_factors(Call& c) {
  auto* factors = reinterpret_cast<double*>(c.scratch_bytes(sizeof(double) * (n_ + 1)));
  factors[n_] = c.desc.premul_factor;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Iallgather(factors + n_, 1, MPI_DOUBLE, factors, 1, MPI_DOUBLE, comm_, &request),
              c, "MPI_Iallgather (premul_sum factors)");
  }
  wait(c, &request);
  return std::vector<double>(factors, factors + n_);
}

void MpiGroup::ordered_reduction(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype);
  const MPI_Datatype type = bytes_type(esz);
  std::vector<double> factors;
  if (d.op == ReduceOp::kPremulSum) factors = premul_factors(c);
  Folder folder(d.dtype, d.op, std::move(factors), n_, &fold_scratch_);
  std::vector<const void*> rows(n_);

  if (d.kind == CollectiveKind::kReduceScatter) {  // block d of every rank, then fold
    uint8_t* received = c.scratch_bytes(n_ * d.count * esz);
    const int n = static_cast<int>(d.count);
    MPI_Request request = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check_mpi(MPI_Ialltoall(d.send, n, type, received, n, type, comm_, &request), c,
                "MPI_Ialltoall (reduce_scatter)");
    }
    wait(c, &request);
    for (int p = 0; p < n_; ++p) rows[p] = received + p * d.count * esz;
    folder.fold(rows.data(), n_, d.count, d.recv);
    return;
  }

  // Block r of the message is [start(r), start(r + 1)); this rank folds block me_.
  int* ints = reinterpret_cast<int*>(c.scratch_bytes(sizeof(int) * 6 * n_));
  int *send_counts = ints, *send_displs = ints + n_, *recv_counts = ints + 2 * n_,
      *recv_displs = ints + 3 * n_, *block_counts = ints + 4 * n_, *block_displs = ints + 5 * n_;
  const int64_t mine = block_start(d.count, me_ + 1, n_) - block_start(d.count, me_, n_);
  for (int r = 0; r < n_; ++r) {
    block_displs[r] = send_displs[r] = static_cast<int>(block_start(d.count, r, n_));
    block_counts[r] = send_counts[r] =
        static_cast<int>(block_start(d.count, r + 1, n_) - block_start(d.count, r, n_));
    recv_counts[r] = static_cast<int>(mine);
    recv_displs[r] = static_cast<int>(r * mine);
  }
  uint8_t* received = c.scratch_bytes(n_ * mine * esz);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Ialltoallv(d.send, send_counts, send_displs, type, received, recv_counts,
                             recv_displs, type, comm_, &request),
              c, "MPI_Ialltoallv (reduce-scatter step)");
  }
  wait(c, &request);
  const bool has_result = d.kind == CollectiveKind::kAllReduce || me_ == d.root;
  auto* recv = static_cast<uint8_t*>(d.recv);
  uint8_t* folded = has_result ? recv + block_displs[me_] * esz : c.scratch_bytes(mine * esz);
  for (int p = 0; p < n_; ++p) rows[p] = received + p * mine * esz;
  folder.fold(rows.data(), n_, mine, folded);
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    if (d.kind == CollectiveKind::kAllReduce) {
      check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, recv, block_counts, block_displs, type,
                                comm_, &request),
                c, "MPI_Iallgatherv (all-gather step)");
    } else {
      check_mpi(MPI_Igatherv(has_result ? MPI_IN_PLACE : folded, static_cast<int>(mine), type,
                             has_result ? recv : nullptr, block_counts, block_displs, type, d.root,
                             comm_, &request),
                c, "MPI_Igatherv (gather step)");
    }
  }
  wait(c, &request);
}

}  // namespace braid::mpi
