// SPDX-License-Identifier: Apache-2.0
// Peak per-rank memory of a training step under each ZeRO stage (docs/memory.md): what a
// ShardedModel, its optimizer and one micro-batch's forward and backward hold at the step's
// busiest moment, term by term, as braid's CPU allocator will count it.
//
//   std::vector<UnitSize> units = unit_sizes(make_units(*gpt, policy, /*world_size=*/8));
//   MemoryOptions mo{.stage = ZeroStage::k3, .world_size = 8, .param_dtype = DType::kBF16};
//   GptWorkload w{.batch = 8, .seq = 1024};
//   MemoryEstimate e = estimate_gpt_memory(gpt->config(), w, units, mo);
//   std::printf("%s", e.str().c_str());           // the table `braid estimate-memory` prints
//
// The estimate replays the step the way the code runs it: every tensor the sharding layer,
// the optimizer and the model's layers allocate is counted from the moment it is allocated
// to the moment its last reference goes, and the peak is the largest sum. Nothing is a
// tuned constant; docs/memory.md writes each term out. For models other than braid's GPT,
// estimate_memory() takes the units and a bound on the activations and gives an upper bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/kernels/optim.h"
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/units.h"

namespace braid::shard {

// What the estimate needs of a unit: its parameters' sizes, in the unit's flat order. Built
// from make_units(), which also works on a model built under nn::InitEmptyWeights (meta
// parameters have shapes and no memory).
struct UnitSize {
  std::string name;             // the module's dotted path; "" for the root (always last)
  std::vector<int64_t> params;  // elements of each parameter
  int64_t numel = 0;            // their sum
  int64_t padded = 0;           // padded_numel(numel, shard group size)
};
std::vector<UnitSize> unit_sizes(const std::vector<Unit>& units);

// The optimizer's memory per element it steps: f32 state tensors (SGD with momentum 1,
// without 0; Adam / AdamW 2, with amsgrad 3; Lion 1) and an f32 master copy when it steps
// 16-bit parameters itself (MasterWeights::kAuto; ShardedModel's optimizer parameters are
// f32, shards or stage 0's masters, so never there).
struct OptimizerMemory {
  int states = 2;
  bool master = false;
  static OptimizerMemory of(kernels::OptimAlgo algo, const nn::OptimizerOptions& options);
};

struct MemoryOptions {
  ZeroStage stage = ZeroStage::k3;
  int world_size = 1;
  DType param_dtype = DType::kF32;   // ShardingOptions::param_dtype
  DType reduce_dtype = DType::kF32;  // ShardingOptions::reduce_dtype (stage 0: comm_hook's)
  OptimizerMemory optimizer{};
  bool reshard_after_forward = true;
  // ShardingOptions::overlap (resolved): collectives on the communication thread; at stage 3
  // with the prefetch flags, one unit ahead is gathered while a unit computes.
  bool overlap = false;
  bool forward_prefetch = true;
  bool backward_prefetch = true;
  int64_t shard_group_size = 0;  // HSDP (stages 1-3): 0 or world_size for none
  bool deterministic = true;     // ShardingOptions::deterministic
  // Stage 0: DistributedDataParallelKwargs::bucket_cap_mb and gradient_as_bucket_view.
  double bucket_cap_mb = 25;
  bool gradient_as_bucket_view = false;
  int64_t micro_batches = 1;    // forward / backward pairs per rank per step
  bool clip_grad_norm = false;  // ShardedModel::clip_grad_norm_ after finish_gradients

  // The options of a ShardedModel (overlap resolved as ShardedModel resolves it).
  static MemoryOptions from(const ShardingOptions& sharding, int world_size,
                            OptimizerMemory optimizer = {});
};

// Bytes per rank by what holds them.
struct MemoryBreakdown {
  int64_t parameters = 0;         // full parameters in param_dtype: the model's own (stage 0),
                                  // each unit's flat buffer (stages 1-2)
  int64_t master_shards = 0;      // what the optimizer steps in f32: the shards (stages 1-3),
                                  // whole masters (stage 0 with a 16-bit param_dtype)
  int64_t gathered = 0;           // stage 3: units' flat buffers gathered (and prefetched)
  int64_t gradients = 0;          // per-parameter gradients of a micro-batch, until the unit's
                                  // post_backward packs them
  int64_t reduction = 0;          // packed gradients and all_to_all receive buffers
  int64_t accumulators = 0;       // the step's accumulators (reduce_dtype: a shard of each unit
                                  // or bucket; a whole bucket with deterministic = false)
  int64_t reduced_gradients = 0;  // the step's gradient after finish_gradients (f32; stage 0
                                  // whole), and the buffers that make and clip it
  int64_t optimizer_state = 0;    // f32 state tensors and masters
  int64_t activations = 0;        // saved activations and the running operation's buffers
  int64_t autocast_cache = 0;     // autocast's cached 16-bit copies of weights
  int64_t host_buffers = 0;       // dropout masks and draws: std::vector, not the allocator's
  int64_t total() const;
  int64_t allocator_bytes() const { return total() - host_buffers; }
};

struct MemoryEstimate {
  MemoryBreakdown peak;           // at the step's peak
  std::string peak_at;            // where the step is then, e.g. "backward: lm_head"
  int64_t allocator_peak = 0;     // the peak of peak.allocator_bytes() over the step: what
                                  // get_allocator(kCPU).stats().peak_bytes will grow by
  MemoryBreakdown between_steps;  // what stays allocated after after_step()
  int64_t peak_bytes() const { return peak.total(); }
  // A table for `braid estimate-memory`: each term at the peak and between steps, in MiB.
  std::string str() const;
};

// Any model: the units' sizes and `activation_bytes`, the most its forward, loss and backward
// of one micro-batch hold at once besides the parameters and their gradients (e.g.
// gpt_activation_bytes). That amount is assumed alive for the whole backward, and every
// root parameter's gradient from its start, so this is an upper bound.
MemoryEstimate estimate_memory(const std::vector<UnitSize>& units, const MemoryOptions& options,
                               int64_t activation_bytes);

// One micro-batch of braid's GPT (nn/gpt.h): ids [batch, seq]; `autocast` kF32 for none, or
// the AutocastScope dtype (kBF16, kF16) that wraps the forward and backward. Dropout,
// activation checkpointing and sizes come from the GPTConfig.
struct GptWorkload {
  int64_t batch = 1;
  int64_t seq = 1;
  DType autocast = DType::kF32;
};

// The most a GPT's forward, loss and backward of one micro-batch hold at once besides its
// parameters and their gradients: saved activations, the running layer's buffers, autocast's
// cast cache and dropout masks, with parameters held in `param_dtype`.
int64_t gpt_activation_bytes(const nn::GPTConfig& config, const GptWorkload& workload,
                             DType param_dtype = DType::kF32);

// The step of a sharded GPT, replayed layer by layer: `units` from make_units with
// transformer_based_wrap over "GPT2Block" or no_wrap (kNotSupported for other unit sets:
// use estimate_memory with gpt_activation_bytes).
MemoryEstimate estimate_gpt_memory(const nn::GPTConfig& config, const GptWorkload& workload,
                                   const std::vector<UnitSize>& units,
                                   const MemoryOptions& options);

}  // namespace braid::shard
