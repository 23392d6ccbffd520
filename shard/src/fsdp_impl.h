// ShardedModel's private state, shared by fsdp.cc (stages, hooks, reduction) and
// fsdp_ckpt.cc (sharded checkpoints). Not installed.
#pragma once

#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/module.h"
#include "braid/shard/fsdp.h"
#include "comm_queue.h"

namespace braid::shard {

struct UnitState {
  Unit* unit = nullptr;
  ShardInfo shard;
  Tensor flat;         // [padded] param_dtype full parameters (stages 1-2; 3 while gathered)
  Tensor shard_param;  // [count] f32: the optimizer's parameter (stages 1-3)
  nn::Parameter opt_param;
  Tensor acc;  // [count] reduce_dtype fold accumulator of the step (undefined: none yet)
  bool gathered = false;
  // Stage 3 with overlap: an all_gather submitted ahead of use (prefetch) into pending_flat.
  std::shared_ptr<CommQueue::Op> gather_op;
  Tensor pending_flat;
};

struct ShardedModel::Impl {
  std::shared_ptr<ProcessGroup> pg;    // the caller's group
  std::shared_ptr<ProcessGroup> comm;  // ShardedModel's own group over the same ranks
  ShardingOptions options;
  std::vector<UnitState> states;
  std::vector<nn::Parameter> stage0_params;  // stage 0: the model's parameters, unit order
  std::unique_ptr<CommQueue> queue;          // null without overlap
  // Unit indices in the order their forward / backward started in the first pass.
  std::vector<size_t> forward_order, backward_order;
  bool orders_done = false;
  bool in_backward = false;
  bool sync = true;  // set_gradient_sync

  int world() const { return comm->size(); }
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
};

}  // namespace braid::shard
