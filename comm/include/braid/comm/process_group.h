// SPDX-License-Identifier: Apache-2.0
// ProcessGroup: the front every caller uses (design.md). Each call is checked (defined,
// contiguous, same device, sizes, root / peer in range), packed into one CollectiveDesc,
// numbered, signed for the cross-rank check, and handed to the group's Backend. Calls return a
// Work handle; `.wait()` it (or pass AsyncOp::kNo for a blocking call that waits for you).
//
// Timeouts: per call (options), else per group (ProcessGroupOptions), else BRAID_TIMEOUT
// (seconds; default 300). Every failure names the op, its sequence number in the group and
// the ranks involved.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/comm/backend.h"
#include "braid/comm/types.h"
#include "braid/tensor/tensor.h"

namespace braid {

class Store;

enum class AsyncOp : uint8_t { kNo, kYes };

struct CallOptions {
  ReduceOp op = ReduceOp::kSum;
  double premul_factor = 1.0;                        // for ReduceOp::kPremulSum
  std::optional<std::chrono::milliseconds> timeout;  // overrides the group's
  AsyncOp async = AsyncOp::kNo;                      // kNo: waits before returning
  // GPU backends (nccl): the stream the call is ordered with (CollectiveDesc::stream); the
  // default, a null handle, is the device's default stream. For run(desc): this, else
  // desc.stream.
  Stream stream;
};

struct ProcessGroupOptions {
  // A backend of backend_names(), or "auto": choose_backend() (BRAID_BACKEND, else by layout).
  std::string backend = "auto";
  // null: store_from_env(); a one-rank world without MASTER_PORT (a plain process, no
  // launcher) gets an InMemoryStore of its own.
  std::shared_ptr<Store> store;
  int rank = -1;  // -1: from the environment (detect_rank_info)
  int size = -1;
  std::optional<std::chrono::milliseconds> timeout;  // null: BRAID_TIMEOUT or 300 s
  // The cross-rank check of every collective's arguments (docs/comm.md, "Debug mode");
  // null: BRAID_DEBUG_MODE. Subgroups inherit it.
  std::optional<bool> debug_mode;
};

struct RankInfo;

// The backend a group named `requested` runs on (docs/comm.md, "Choosing the backend"): any
// name but "auto" as given; for "auto" BRAID_BACKEND when set (and not "auto"), else "shm"
// when every rank is on one node (world size == local world size), else for several nodes:
// "mpi" when an MPI launcher started the job (info.source openmpi or pmi) and MPI is built,
// then "hier" when UCX is built, then "mpi". Throws kNotSupported when several nodes have no
// backend in this build.
std::string choose_backend(const std::string& requested, const RankInfo& info);

class ProcessGroup {
 public:
  // Creates the world group (rendezvous through the store).
  static std::shared_ptr<ProcessGroup> create(const ProcessGroupOptions& options);

  int rank() const;
  int size() const;
  const std::vector<int>& global_ranks() const;  // group rank -> world rank
  Backend& backend() const;
  std::chrono::milliseconds timeout() const;

  // A subgroup of this group's ranks (sorted, unique). Every rank of *this* group must call
  // it with the same list (as torch.distributed.new_group); ranks outside the list get a
  // group with rank() == -1 on which every collective throws kInvalidArgument.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks, const std::string& backend = "");

  // ---- collectives on tensors (contiguous, cpu unless the backend says otherwise) ----
  std::shared_ptr<Work> all_reduce(Tensor& tensor, const CallOptions& o = {});
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root, const CallOptions& o = {});
  std::shared_ptr<Work> reduce(Tensor& tensor, int root, const CallOptions& o = {});
  // List form: outputs[r] receives rank r's input.
  std::shared_ptr<Work> all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                   const CallOptions& o = {});
  // Into one buffer: output holds size() blocks shaped like input, stacked on dimension 0.
  std::shared_ptr<Work> all_gather_into(Tensor& output, const Tensor& input,
                                        const CallOptions& o = {});
  // List form: output = reduce over ranks of inputs[rank()].
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                       const CallOptions& o = {});
  // From one buffer: input holds size() blocks shaped like output.
  std::shared_ptr<Work> reduce_scatter_from(Tensor& output, const Tensor& input,
                                            const CallOptions& o = {});
  // Equal splits along dimension 0 (numel divisible by size()).
  std::shared_ptr<Work> all_to_all(Tensor& output, const Tensor& input, const CallOptions& o = {});
  // Variable splits along dimension 0, in rows, as torch's all_to_all_single.
  std::shared_ptr<Work> all_to_all(Tensor& output, const Tensor& input,
                                   const std::vector<int64_t>& output_splits,
                                   const std::vector<int64_t>& input_splits,
                                   const CallOptions& o = {});
  // gather: root's outputs[r] receives rank r's input (outputs ignored elsewhere).
  std::shared_ptr<Work> gather(std::vector<Tensor>& outputs, const Tensor& input, int root,
                               const CallOptions& o = {});
  std::shared_ptr<Work> scatter(Tensor& output, const std::vector<Tensor>& inputs, int root,
                                const CallOptions& o = {});
  std::shared_ptr<Work> barrier(const CallOptions& o = {});
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, int64_t tag = 0,
                             const CallOptions& o = {});
  std::shared_ptr<Work> recv(Tensor& tensor, int peer, int64_t tag = 0, const CallOptions& o = {});

  // ---- raw buffers (the embedding path; same checks, counts in elements) ----
  std::shared_ptr<Work> run(CollectiveDesc desc, const CallOptions& o = {});

  ~ProcessGroup();

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid
