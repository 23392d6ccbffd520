// ShardedModel's private state, shared by fsdp.cc (stages, hooks, reduction) and
// fsdp_ckpt.cc (sharded checkpoints). Not installed.
#pragma once

#include <vector>

#include "braid/comm/process_group.h"
#include "braid/nn/module.h"
#include "braid/shard/fsdp.h"

namespace braid::shard {

struct UnitState {
  Unit* unit = nullptr;
  ShardInfo shard;
  Tensor flat;         // [padded] f32 full parameters (stages 1-2 always; 3 while gathered)
  Tensor shard_param;  // [count] f32: the optimizer's parameter (stages 1-3)
  nn::Parameter opt_param;
  Tensor acc;  // [count] f32 fold accumulator of the current step (undefined: none yet)
  bool gathered = false;
};

struct ShardedModel::Impl {
  std::shared_ptr<ProcessGroup> pg;
  ZeroStage stage;
  bool reshard_after_forward;
  std::vector<UnitState> states;
  std::vector<nn::Parameter> stage0_params;  // stage 0: the model's parameters, unit order

  int world() const { return pg->size(); }
  void gather(UnitState& s);
  void release(UnitState& s);
  void reduce(UnitState& s);
};

}  // namespace braid::shard
