// ShardedModel's private state, shared by fsdp.cc (stages, hooks, reduction) and
// fsdp_ckpt.cc (sharded checkpoints). Not installed.
#pragma once

#include <map>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/module.h"
#include "braid/shard/fsdp.h"
#include "braid/tensor/swap_store.h"
#include "comm_queue.h"

namespace braid::shard {

// The dtypes one unit is gathered / held in and reduced in (fsdp_precision.cc).
struct UnitDtypes {
  DType param = DType::kF32;
  DType reduce = DType::kF32;
};

// kInvalidArgument naming the field unless param_dtype and reduce_dtype are f32, bf16 or f16
// and master_dtype and state_dtype f32.
void check_sharding_precision(const amp::PrecisionPolicy& policy);
// Stages 1-3: the policy's dtypes, or f32 for a unit whose parameters are all in
// keep_in_fp32_modules; kInvalidArgument naming the unit and both parameters for a unit that
// mixes kept and other parameters.
UnitDtypes unit_dtypes(const Unit& unit, const amp::PrecisionPolicy& policy);

struct UnitState {
  Unit* unit = nullptr;
  size_t index = 0;  // in units()
  ShardInfo shard;
  UnitDtypes dtypes;   // stages 1-3
  Tensor flat;         // [padded] dtypes.param full parameters (stages 1-2; 3 while gathered)
  Tensor shard_param;  // [count] f32: the optimizer's parameter (stages 1-3)
  nn::Parameter opt_param;
  Tensor acc;  // [count] dtypes.reduce fold accumulator of the step (undefined: none yet)
  bool gathered = false;
  // Stage 3 with overlap: an all_gather submitted ahead of use (prefetch) into pending_flat.
  std::shared_ptr<CommQueue::Op> gather_op;
  Tensor pending_flat;
};

class DistributedDataParallel;  // ddp.h: stage 0

struct ShardedModel::Impl {
  std::shared_ptr<ProcessGroup> pg;   // the caller's group
  std::shared_ptr<ProcessGroup> all;  // ShardedModel's own group over the same ranks
  // The shard group: `all` without HSDP, else this rank's group of shard_group_size ranks.
  std::shared_ptr<ProcessGroup> comm;
  std::shared_ptr<ProcessGroup> replicas;  // HSDP: this rank's replicas (null without HSDP)
  ShardingOptions options;
  ShardingSpec spec;  // options resolved (resolve): read this, not options.stage
  // Where the flat buffers, shards and reductions live: cpu, or meta for a measurement run
  // (estimate_memory: meta parameters, no param_init, a 'meta' group).
  Device device = kCPU;
  std::vector<UnitState> states;                 // stages 1-3
  std::unique_ptr<DistributedDataParallel> ddp;  // stage 0 (spec.shard_optimizer_state false)
  std::unique_ptr<CommQueue> queue;              // null without overlap
  // Unit indices in the order their forward / backward started in the first pass.
  std::vector<size_t> forward_order, backward_order;
  bool orders_done = false;
  bool in_backward = false;
  bool sync = true;  // set_gradient_sync

  // offload_param = kNvme (stage 3): the master shards' home between uses.
  std::unique_ptr<SwapStore> param_store;

  int world() const { return comm->size(); }  // the shard group's size
  // The group checkpoints are saved and loaded over (options.checkpoint_group, else pg);
  // kInvalidArgument when tensor parallelism needs one and none was given (fsdp_ckpt.cc).
  ProcessGroup& checkpoint_group() const;
  int num_replicas() const { return replicas ? replicas->size() : 1; }
  // Runs fn on the communication thread (or here, without overlap).
  std::shared_ptr<CommQueue::Op> submit(std::string what, std::function<void()> fn);
  void wait(const std::shared_ptr<CommQueue::Op>& op);
  void drain();
  void issue_gather(UnitState& s);
  void gather(UnitState& s);
  void release(UnitState& s);
  void reduce(UnitState& s);
  void prefetch_after(size_t unit, const std::vector<size_t>& order);
  void drop_prefetches();
  void gather_into_flat(UnitState& s);

  // offload_param: the unit's master shard, resident (s.shard_param) or read from the store
  // (a copy the store keeps until released); unpark makes it resident, park writes it back
  // and drops it (no-ops without offload).
  std::string shard_key(const UnitState& s) const;
  Tensor master_shard(UnitState& s);
  void unpark(UnitState& s);
  void park(UnitState& s, bool changed);
  void prefetch_shard_after(size_t unit, const std::vector<size_t>& order);
};

// The W blocks of an all_to_all result folded in rank order into acc (acc = acc + block, the
// operation accumulate_grad uses): Note [Deterministic reduction].
void fold_blocks(const Tensor& blocks, int world, int64_t count, Tensor& acc);

}  // namespace braid::shard
