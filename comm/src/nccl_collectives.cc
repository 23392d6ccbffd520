// The NCCL backend's collectives (docs/comm.md, "nccl"): braid's dtypes and reduce ops as
// NCCL's, and each CollectiveKind as NCCL calls on the communication stream. all_reduce,
// reduce, reduce_scatter, broadcast and all_gather are NCCL's own; all_to_all(_v), gather and
// scatter are grouped ncclSend / ncclRecv (NCCL 2.7 and later have them, unlike ncclAlltoAll,
// ncclGather and ncclScatter, which only 2.28 has), as PyTorch's ProcessGroupNCCL does.
#include <algorithm>
#include <cstring>

#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "nccl_backend.h"
#include "overlap.h"

namespace braid::nccl {

bool nccl_dtype(DType dtype, int version, ncclDataType_t* out) {
  switch (dtype) {
    case DType::kF64:
      *out = ncclFloat64;
      return true;
    case DType::kF32:
      *out = ncclFloat32;
      return true;
    case DType::kF16:
      *out = ncclFloat16;
      return true;
    case DType::kBF16:
      *out = ncclBfloat16;  // NCCL 2.10 and later; older libraries refuse it when called
      return true;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case DType::kF8E4M3:
      *out = ncclFloat8e4m3;
      return version >= NCCL_VERSION(2, 24, 0);
    case DType::kF8E5M2:
      *out = ncclFloat8e5m2;
      return version >= NCCL_VERSION(2, 24, 0);
#endif
    case DType::kI64:
      *out = ncclInt64;
      return true;
    case DType::kI32:
      *out = ncclInt32;
      return true;
    case DType::kI8:
      *out = ncclInt8;
      return true;
    case DType::kU8:
      *out = ncclUint8;
      return true;
    default:
      return false;  // i16 and bool: NCCL has no such type
  }
}

namespace {

// One point-to-point transfer of a grouped collective.
struct Transfer {
  bool send;
  const void* buffer;
  size_t count;  // elements
  int peer;
};

// Enqueues one call's NCCL operations; every failure aborts the communicator (settle_locked).
class Enqueuer {
 public:
  Enqueuer(Comm& c, const CollectiveDesc& d, const CallInfo& call, int version)
      : c_(c), d_(d), call_(call) {
    const bool typed = nccl_dtype(d.dtype, version, &type_);
    BRAID_ASSERT(typed || d.kind == CollectiveKind::kBarrier, "nccl: dtype ", d.dtype,
                 " passed the capability check but has no NCCL type");
    elem_ = dtype_size(d.dtype);
  }
  ~Enqueuer() {
    // Allowed once the last call given the op returned; not after an abort freed the comm.
    if (premul_ && !c_.aborted) (void)ncclRedOpDestroy(op_, c_.comm);
    if (staging_ != nullptr) (void)cudaFreeAsync(staging_, c_.stream);  // stream-ordered
  }

  void run() {
    const auto count = static_cast<size_t>(std::max<int64_t>(d_.count, 0));
    switch (d_.kind) {
      case CollectiveKind::kAllReduce:
        return nccl(ncclAllReduce(d_.send, d_.recv, count, type_, reduce_op(), c_.comm, c_.stream),
                    "ncclAllReduce");
      case CollectiveKind::kReduce:
        return nccl(
            ncclReduce(d_.send, d_.recv, count, type_, reduce_op(), d_.root, c_.comm, c_.stream),
            "ncclReduce");
      case CollectiveKind::kReduceScatter:
        return nccl(
            ncclReduceScatter(d_.send, d_.recv, count, type_, reduce_op(), c_.comm, c_.stream),
            "ncclReduceScatter");
      case CollectiveKind::kBroadcast:
        return nccl(ncclBroadcast(d_.send, d_.recv, count, type_, d_.root, c_.comm, c_.stream),
                    "ncclBroadcast");
      case CollectiveKind::kAllGather:
        return nccl(ncclAllGather(d_.send, d_.recv, count, type_, c_.comm, c_.stream),
                    "ncclAllGather");
      case CollectiveKind::kAllToAll:
        return all_to_all(count);
      case CollectiveKind::kAllToAllV:
        return all_to_all_v();
      case CollectiveKind::kGather:
        return gather(count);
      case CollectiveKind::kScatter:
        return scatter(count);
      case CollectiveKind::kBarrier: {
        // One u64 on the device scratch (after the check words), all-reduced.
        void* word = static_cast<uint8_t*>(c_.scratch) + 16;
        return nccl(ncclAllReduce(word, word, 1, ncclUint64, ncclMax, c_.comm, c_.stream),
                    "ncclAllReduce (barrier)");
      }
      case CollectiveKind::kSend:
        return nccl(ncclSend(d_.send, count, type_, d_.peer, c_.comm, c_.stream), "ncclSend");
      case CollectiveKind::kRecv:
        return nccl(ncclRecv(d_.recv, count, type_, d_.peer, c_.comm, c_.stream), "ncclRecv");
    }
  }

 private:
  std::string context() const { return describe_call(call_, c_); }
  void nccl(ncclResult_t rc, const char* what) {
    if (rc != ncclSuccess) c_.settle_locked(rc, call_.deadline, context(), what);
  }
  void cuda(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) fail_cuda(rc, context(), what);
  }
  const uint8_t* at(const void* base, size_t elements) const {
    return static_cast<const uint8_t*>(base) + elements * elem_;
  }
  void* at(void* base, size_t elements) const {
    return static_cast<uint8_t*>(base) + elements * elem_;
  }

  ncclRedOp_t reduce_op() {
    switch (d_.op) {
      case ReduceOp::kSum:
        return ncclSum;
      case ReduceOp::kProd:
        return ncclProd;
      case ReduceOp::kMin:
        return ncclMin;
      case ReduceOp::kMax:
        return ncclMax;
      case ReduceOp::kAvg:
        return ncclAvg;
      case ReduceOp::kPremulSum:
        break;
    }
    // The factor in the dtype, read by NCCL before it returns (ncclScalarHostImmediate).
    union {
      double f64;
      float f32;
      uint16_t u16;
      uint8_t u8;
    } scalar{};
    const auto factor = static_cast<float>(d_.premul_factor);
    switch (d_.dtype) {
      case DType::kF64:
        scalar.f64 = d_.premul_factor;
        break;
      case DType::kF32:
        scalar.f32 = factor;
        break;
      case DType::kF16:
        scalar.u16 = half(factor).bits;
        break;
      case DType::kBF16:
        scalar.u16 = bfloat16(factor).bits;
        break;
      case DType::kF8E4M3:
        scalar.u8 = float8_e4m3fn(factor).bits;
        break;
      case DType::kF8E5M2:
        scalar.u8 = float8_e5m2(factor).bits;
        break;
      default:
        BRAID_ASSERT(false, "nccl: premul_sum on dtype ", d_.dtype, " passed the precheck");
    }
    nccl(ncclRedOpCreatePreMulSum(&op_, &scalar, type_, ncclScalarHostImmediate, c_.comm),
         "ncclRedOpCreatePreMulSum");
    premul_ = true;
    return op_;
  }

  // The transfers inside one ncclGroupStart / ncclGroupEnd, so that they progress together.
  // An error inside the group still ends it before it is reported.
  void grouped(const std::vector<Transfer>& transfers) {
    nccl(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    const char* what = "ncclGroupEnd";
    for (const Transfer& t : transfers) {
      if (t.count == 0) continue;  // both sides skip it: the counts agree by construction
      const ncclResult_t rc =
          t.send
              ? ncclSend(t.buffer, t.count, type_, t.peer, c_.comm, c_.stream)
              : ncclRecv(const_cast<void*>(t.buffer), t.count, type_, t.peer, c_.comm, c_.stream);
      if (rc != ncclSuccess && rc != ncclInProgress && first == ncclSuccess) {
        first = rc;
        what = t.send ? "ncclSend" : "ncclRecv";
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    nccl(first != ncclSuccess ? first : end, what);
  }

  // A copy of `bytes` of `src` on the communication stream (stream-ordered allocation, freed
  // after the call), for in-place all_to_all: a receive must not overwrite a block before it
  // was sent.
  const void* staged(const void* src, size_t bytes) {
    cuda(cudaMallocAsync(&staging_, bytes, c_.stream), "cudaMallocAsync (in-place staging)");
    cuda(cudaMemcpyAsync(staging_, src, bytes, cudaMemcpyDeviceToDevice, c_.stream),
         "cudaMemcpyAsync (in-place staging)");
    return staging_;
  }

  void copy_self(void* dst, const void* src, size_t elements) {
    if (elements == 0 || dst == src) return;
    cuda(cudaMemcpyAsync(dst, src, elements * elem_, cudaMemcpyDeviceToDevice, c_.stream),
         "cudaMemcpyAsync (this rank's own block)");
  }

  void all_to_all(size_t count) {
    const size_t bytes = count * static_cast<size_t>(c_.n) * elem_;
    const void* send = d_.send;
    if (overlaps(send, bytes, d_.recv, bytes)) send = staged(send, bytes);
    std::vector<Transfer> t;
    for (int p = 0; p < c_.n; ++p) {
      if (p == c_.me) continue;
      t.push_back({true, at(send, p * count), count, p});
      t.push_back({false, at(d_.recv, p * count), count, p});
    }
    copy_self(at(d_.recv, c_.me * count), at(send, c_.me * count), count);
    grouped(t);
  }

  void all_to_all_v() {
    size_t send_extent = 0, recv_extent = 0;  // elements up to the end of the last block
    for (int p = 0; p < c_.n; ++p) {
      send_extent = std::max<size_t>(send_extent, d_.send_offsets[p] + d_.send_counts[p]);
      recv_extent = std::max<size_t>(recv_extent, d_.recv_offsets[p] + d_.recv_counts[p]);
    }
    const void* send = d_.send;
    if (overlaps(send, send_extent * elem_, d_.recv, recv_extent * elem_)) {
      send = staged(send, send_extent * elem_);
    }
    std::vector<Transfer> t;
    for (int p = 0; p < c_.n; ++p) {
      const auto sc = static_cast<size_t>(d_.send_counts[p]);
      const auto rc = static_cast<size_t>(d_.recv_counts[p]);
      if (p == c_.me) {
        BRAID_CHECK(sc == rc, kInvalidArgument, "nccl: ", context(), ": sends ", sc,
                    " elements to itself but receives ", rc, " (expected the same count)");
        copy_self(at(d_.recv, d_.recv_offsets[p]), at(send, d_.send_offsets[p]), sc);
        continue;
      }
      t.push_back({true, at(send, d_.send_offsets[p]), sc, p});
      t.push_back({false, at(d_.recv, d_.recv_offsets[p]), rc, p});
    }
    grouped(t);
  }

  void gather(size_t count) {
    std::vector<Transfer> t;
    if (c_.me == d_.root) {
      for (int p = 0; p < c_.n; ++p) {
        if (p != c_.me) t.push_back({false, at(d_.recv, p * count), count, p});
      }
      copy_self(at(d_.recv, c_.me * count), d_.send, count);  // nothing when in place
    } else {
      t.push_back({true, d_.send, count, d_.root});
    }
    grouped(t);
  }

  void scatter(size_t count) {
    std::vector<Transfer> t;
    if (c_.me == d_.root) {
      for (int p = 0; p < c_.n; ++p) {
        if (p != c_.me) t.push_back({true, at(d_.send, p * count), count, p});
      }
      copy_self(d_.recv, at(d_.send, c_.me * count), count);  // nothing when in place
    } else {
      t.push_back({false, d_.recv, count, d_.root});
    }
    grouped(t);
  }

  Comm& c_;
  const CollectiveDesc& d_;
  const CallInfo& call_;
  ncclDataType_t type_ = ncclUint8;
  size_t elem_ = 1;
  ncclRedOp_t op_ = ncclSum;
  bool premul_ = false;
  void* staging_ = nullptr;
};

}  // namespace

void enqueue_collective(Comm& comm, const CollectiveDesc& desc, const CallInfo& call, int version) {
  Enqueuer(comm, desc, call, version).run();
}

}  // namespace braid::nccl
