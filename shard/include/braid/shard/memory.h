// SPDX-License-Identifier: Apache-2.0
// Peak per-rank memory of a training step, measured on the meta device (docs/memory.md).
//
//   shard::MemoryEstimate e = shard::estimate_memory(
//       [&] { return std::make_shared<nn::Llama>(config); },  // built on meta for you
//       sharding_options, /*world_size=*/8, {.batch = 4, .seq = 1024});
//   std::printf("%s", e.str().c_str());  // the table `braid estimate-memory --details` prints
//
// Nothing is replayed or modelled. The model is built under nn::InitEmptyWeights (shapes, no
// memory) and handed to the real ShardedModel over a process group of the 'meta' backend: one
// process stands for rank 0 of world_size, and collectives check shapes and complete at once.
// Two real training steps run (each micro-batch's forward, cross-entropy loss and backward,
// finish_gradients, clip_grad_norm_ when asked, the real optimizer's step, after_step), and
// every tensor the sharding layer, the optimizer and the model allocate goes through the meta
// allocator, which counts requested bytes as braid's CPU allocator does. The second step's
// peak is the estimate: the steady state, with the optimizer state created by the first. So
// any model that runs on meta is estimated, and a change to what a layer allocates changes the
// estimate with it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/kernels/optim.h"
#include "braid/nn/module.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"

namespace braid::shard {

// One step of a causal language model per rank: `micro_batches` micro-batches of token ids
// [batch, seq] (i64), the model's output taken as logits [batch, seq, vocab] for
// nn::CrossEntropyLoss against labels of the ids' shape.
struct MemoryWorkload {
  int64_t batch = 1;
  int64_t seq = 1;
  DType autocast = DType::kF32;  // the AutocastScope around forward and backward; kF32: none
  int64_t micro_batches = 1;     // forward / backward pairs per rank per step
  bool clip_grad_norm = false;   // ShardedModel::clip_grad_norm_ after finish_gradients
};

// The optimizer stepping ShardedModel::optimizer_parameters(): the real nn::SGD, Adam, AdamW or
// Lion with these options, so its state is allocated as in training.
struct MemoryOptimizer {
  kernels::OptimAlgo algo = kernels::OptimAlgo::kAdamW;
  nn::OptimizerOptions options{};
};

struct MemoryPhase {
  std::string name;        // "forward", "backward", "finish_gradients", "clip_grad_norm_",
                           // "optimizer step", "after_step"
  int64_t peak_bytes = 0;  // the most allocated at once during it (every micro-batch's)
};

// Bytes per rank. Tensors the caller owns (the step's ids and labels) are not counted.
struct MemoryEstimate {
  int64_t peak_bytes = 0;             // the second step's peak
  std::string peak_at;                // the phase that reached it
  int64_t between_steps = 0;          // what stays allocated after after_step
  int64_t model_bytes = 0;            // of that: the ShardedModel before any step (parameters,
                                      // flat buffers, master shards, stage 0's masters)
  int64_t optimizer_state_bytes = 0;  // of that: what the optimizer's first step created
  std::vector<MemoryPhase> phases;    // the second step, in order
  // A table for `braid estimate-memory --details`, in MiB.
  std::string str() const;
};

// Builds a model (nn::Layer) of f32 parameters; estimate_memory calls it under
// nn::InitEmptyWeights(include_buffers = true), so nothing is allocated for real.
using ModelFactory = std::function<std::shared_ptr<nn::Layer>()>;

// The measured peak of a ShardedModel step of `build()`'s model with `options` (as given to
// ShardedModel; param_init, sync_module_states and checkpoint_group play no part) over
// `world_size` ranks. kInvalidArgument for what a meta run cannot measure: a tensor-parallel
// plan (estimate its slices' model instead), offload_param to nvme (files hold the shards), or
// a world not divisible by shard_group_size. The meta allocator is process-wide: meta tensors
// allocated by other threads meanwhile would be counted.
MemoryEstimate estimate_memory(const ModelFactory& build, const ShardingOptions& options,
                               int world_size, const MemoryWorkload& workload,
                               const MemoryOptimizer& optimizer = {});

}  // namespace braid::shard
