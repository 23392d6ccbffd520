// Stage 0 (DDP) of ShardedModel as a class of its own (docs/sharding.md, "Stage 0: DDP
// buckets"). It shares with the sharded stages what they have in common: the units
// (make_units), the ordered fold (fold_blocks, Note [Deterministic reduction]) and the
// communication queue (ShardedModel::Impl::submit / wait), reached through the Impl it is
// given; it owns the rest: the buckets, the hooks on the parameters' owners, the f32 masters
// of 16-bit parameters, and what the optimizer steps. ShardedModel holds one when its
// ShardingSpec shards nothing (shard_optimizer_state false) and forwards stage 0's calls to it.
// Not installed.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fsdp_impl.h"

namespace braid::shard {

// A bucket of parameters reduced together.
struct Bucket {
  struct Entry {
    const UnitParam* param = nullptr;
    int64_t offset = 0;  // in the bucket's flat buffer
  };
  std::vector<Entry> params;
  int64_t numel = 0;
  int64_t padded = 0;   // padded_numel(numel, world)
  ShardInfo shard;      // this rank's part of the deterministic fold
  int64_t pending = 0;  // parameters whose gradient this backward has not produced yet
  bool launched = false;
  // The step's accumulator in the reduce dtype: [shard.count] of the ordered fold
  // (deterministic), or [padded] sums of all_reduces (undefined: none yet).
  Tensor acc;
};

class DistributedDataParallel {
 public:
  // Takes over the units' parameters: an f32 master for each one held in a 16-bit dtype
  // (precision.param_dtype_for), buckets in reverse registration order, hooks on the Layers
  // that own them (and on the root).
  DistributedDataParallel(ShardedModel::Impl& core, nn::Layer& root, std::vector<Unit>& units);
  ~DistributedDataParallel();  // removes its hooks
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // What the optimizer steps: the parameters, or their f32 masters.
  const std::vector<nn::Parameter>& parameters() const { return params_; }
  // The parameter the optimizer steps for a unit parameter (its master, or itself).
  nn::Parameter target(const UnitParam& up) const;
  // Every bucket's reduced gradient times `scale` becomes its parameters' grad() (all_gather of
  // the folded parts when ordered).
  void finish(double scale);
  // Masters copied (rounded) into their 16-bit parameters.
  void after_step();
  // The unit's reduced gradient flat in f32 [unit.padded] (zero padding) for the norm grid,
  // and each gradient tensor appended to `grads` (to be scaled by clipping).
  Tensor flat_gradient(const Unit& unit, std::vector<Tensor>& grads) const;
  NamedTensors full_state_dict(nn::Layer& model) const;
  void load_full_state_dict(nn::Layer& model, const NamedTensors& state);
  int64_t held_bytes() const;  // accumulators and masters
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

 private:
  struct ParamUse {
    size_t bucket = 0;
    int owners = 0;     // Layers that register the parameter (tied: several)
    int remaining = 0;  // owners whose backward has not ended in this pass
  };
  void build_buckets(nn::Layer& root, std::vector<Unit>& units);
  void begin_backward();
  void owner_done(nn::Module& owner);
  void end_backward();
  void launch_buckets(bool flush);
  void reduce_bucket(Bucket& b);
  void broadcast_buffers(nn::Module& root);

  ShardedModel::Impl& core_;           // the group, the queue, the sync flag, options and spec
  std::vector<nn::Parameter> params_;  // unit order
  std::map<const void*, nn::Parameter> masters_;  // 16-bit parameters' f32 masters, by id
  std::vector<Bucket> buckets_;
  std::map<const void*, ParamUse> uses_;  // by Parameter::id()
  size_t next_bucket_ = 0;                // the next bucket to launch in this backward
  DType reduce_dtype_ = DType::kF32;      // precision.reduce_dtype, or comm_hook's
  std::vector<std::pair<nn::Layer*, nn::ModuleHooks>> hooks_;
};

}  // namespace braid::shard
