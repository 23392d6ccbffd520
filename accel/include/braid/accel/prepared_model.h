// SPDX-License-Identifier: Apache-2.0
// What Accelerator::prepare_model returns for every layout: data parallel (DDP, ZeRO 1-3,
// HSDP), tensor parallel, pipeline parallel, or any mix of them (docs/accelerator.md,
// "One prepared model"). The Accelerator's model calls (backward, train_step,
// clip_grad_norm_, save_model, get_state_dict) take it whatever the layout, so a training
// program has no branch on the layout:
//
//   auto model = acc.prepare_model(llama);                 // any nn::CausalLM; any Layer
//   nn::AdamW opt(model->optimizer_parameters(), {.lr = 3e-4});   //   without tp / pp
//   double loss = acc.train_step(*model, window_ids, window_labels);
//   acc.step(opt);
//   acc.save_model(*model, out);
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "braid/nn/module.h"
#include "braid/nn/parameter.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/pipeline.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/tensor.h"

namespace braid::accel {

class PreparedModel {
 public:
  // With pp_degree > 1 the model is cut into pipeline stages (a CausalLMPipeline whose chunks
  // are ShardedModels over dp); otherwise it is one ShardedModel over dp (its layers split over
  // tp first when tp_degree > 1).
  bool pipelined() const { return pipeline_ != nullptr; }
  // The forward of one micro-batch (no pipeline; a pipeline runs its micro-batches in
  // Accelerator::train_step: kInvalidArgument saying so). Under tensor parallelism the logits
  // are this rank's vocabulary columns (Accelerator::cross_entropy gives the matching loss).
  Tensor forward(const Tensor& x);
  // What the optimizer steps on this rank: the ShardedModel's optimizer_parameters(), or the
  // pipeline's chunks' (the tied replica left out).
  std::vector<nn::Parameter> optimizer_parameters() const;
  // The vocabulary of a causal LM (the vocab-parallel loss needs it); 0 for other models.
  int64_t vocab_size() const { return vocab_size_; }
  // The tensor-parallel slices of the model's parameters (null without tp or with a
  // pipeline, whose chunks each have theirs: pipeline().plan(c)).
  const shard::TensorParallelPlan* tensor_parallel() const { return tp_plan_.get(); }
  // The layers underneath, for what the Accelerator does not cover: kInvalidArgument when the
  // layout has none of that kind (sharded() with a pipeline, pipeline() without).
  shard::ShardedModel& sharded();
  shard::CausalLMPipeline& pipeline();
  // The model as the program built it, its parameters now the shard's views (no pipeline).
  nn::Layer& module() { return sharded().module(); }

 private:
  friend class Accelerator;
  PreparedModel() = default;
  std::shared_ptr<shard::ShardedModel> sharded_;
  std::shared_ptr<shard::CausalLMPipeline> pipeline_;
  std::shared_ptr<const shard::TensorParallelPlan> tp_plan_;
  int64_t vocab_size_ = 0;
};

}  // namespace braid::accel
