// SPDX-License-Identifier: Apache-2.0
// Vocabulary shared by the ProcessGroup front and every Backend: collective kinds, reduction
// ops, the one descriptor every call is packed into, and Work handles.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "braid/core/device.h"
#include "braid/core/device_runtime.h"
#include "braid/core/dtype.h"

namespace braid {

enum class CollectiveKind : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,      // recv holds world_size * count elements, rank r's block at r * count
  kReduceScatter,  // send holds world_size * count elements, recv count
  kAllToAll,       // equal splits: send and recv hold world_size * count
  kAllToAllV,      // send_counts / recv_counts (and offsets) per rank
  kGather,         // root's recv holds world_size * count
  kScatter,        // root's send holds world_size * count
  kBarrier,
  kSend,
  kRecv,
};
std::string_view collective_name(CollectiveKind kind);  // "all_reduce", ...

// Kinds that combine the ranks' contributions with a ReduceOp.
constexpr bool is_reduction(CollectiveKind k) {
  return k == CollectiveKind::kAllReduce || k == CollectiveKind::kReduce ||
         k == CollectiveKind::kReduceScatter;
}
// Kinds with a root rank.
constexpr bool is_rooted(CollectiveKind k) {
  return k == CollectiveKind::kBroadcast || k == CollectiveKind::kReduce ||
         k == CollectiveKind::kGather || k == CollectiveKind::kScatter;
}

enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg, kPremulSum };
std::string_view reduce_op_name(ReduceOp op);  // "sum", ...

// Everything one collective call needs. Built once by ProcessGroup and handed to the backend
// unchanged (STYLE.md: one choke point). Counts are elements, never bytes. For in-place
// calls send == recv (all_gather in place: send points at this rank's block of recv;
// reduce_scatter in place: recv points at this rank's block of send).
struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;  // elements per rank (see each kind above)
  DType dtype = DType::kF32;
  Device device = kCPU;
  ReduceOp op = ReduceOp::kSum;
  double premul_factor = 1.0;  // kPremulSum: each contribution is scaled before summing
  int root = 0;                // broadcast, reduce, gather, scatter (group rank)
  int peer = -1;               // send / recv (group rank)
  int64_t tag = 0;             // send / recv
  std::vector<int64_t> send_counts, send_offsets, recv_counts, recv_offsets;  // kAllToAllV
  // GPU backends (nccl): the caller's stream. The collective starts after the work queued on it
  // so far, and work queued on it afterwards starts after the collective (events, no host
  // wait). A null handle is the device's default stream. Host backends ignore it.
  Stream stream;
  std::chrono::milliseconds timeout{0};  // resolved by the front: call > group > BRAID_TIMEOUT
  uint64_t seq = 0;                      // this call's sequence number in its group
  uint64_t signature = 0;  // hash of (kind, dtype, count, op, root, group): cross-rank check
};

// An in-flight collective. wait() blocks until completion or the deadline: it returns true on
// success, throws the collective's error (kTimeout / kPeerLost / kInvalidArgument with the op,
// its sequence number and the ranks involved) on failure. A wait never outlives the
// collective's own deadline.
class Work {
 public:
  virtual ~Work() = default;
  // Non-blocking: true once finished (successfully or not).
  virtual bool test() = 0;
  // Blocks until finished; `timeout` of 0 means the collective's own deadline.
  virtual bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) = 0;
  // The failure, if finished with one; null otherwise.
  virtual std::exception_ptr error() const = 0;
};

// A Work that is already complete (backends that run synchronously return this).
std::shared_ptr<Work> completed_work(std::exception_ptr error = nullptr);

}  // namespace braid
