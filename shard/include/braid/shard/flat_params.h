// SPDX-License-Identifier: Apache-2.0
// ZeRO for frameworks with their own autograd (docs/embedding.md, "ZeRO for frameworks with
// their own autograd"): FSDP's FlatParameter and DeepSpeed's stage-3 hooks as calls. The
// framework registers its units' parameters (names, shapes, initial values); braid keeps
// them as f32 shards over the ranks (ShardedModel, all four stages, the same ordered
// reduction and so the same bits for every world size) and the framework brackets each use
// of a unit:
//
//   FlatParameters fp(units, pg, {.stage = ZeroStage::k3});
//   nn::AdamW opt(fp.sharded().optimizer_parameters(), {.lr = 1e-3});
//   for (each micro-batch of this rank) {
//     fp.begin_forward();
//     for (u : forward order) { fp.gather(u); run u with fp.param(u, i); fp.release(u); }
//     fp.end_forward();
//     fp.begin_backward();
//     for (u : backward order) { fp.gather(u); backward of u; fp.reduce_gradients(u, grads); }
//     fp.end_backward();
//   }
//   fp.sharded().finish_gradients(1.0 / global_micro_batches);
//   opt.step();
//   opt.zero_grad();                  // as with torch: stage 0 steps the parameters themselves
//   fp.sharded().after_step();
//
// Parameters are f32 masters; fp.param() gives the gathered values in param_dtype, as views
// of braid's flat buffer (at stage 3 a new buffer per gather: ask again after each gather).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/shard/fsdp.h"
#include "braid/tensor/tensor.h"

namespace braid::shard {

struct FlatParamSpec {
  // Relative to the unit ("attn.weight"; dots allowed); the parameter's checkpoint and
  // state-dict name is "<unit>.<name>".
  std::string name;
  // The initial values, f32 on the CPU (copied; rank 0's are broadcast with
  // ShardingOptions::sync_module_states). Undefined: `shape` is used and
  // ShardingOptions::param_init gives the values (by full name), each rank only its shard's.
  Tensor initial;
  Shape shape;  // only read when `initial` is undefined
};

struct FlatUnitSpec {
  // A non-empty dotted path ("transformer.h.0"), neither inside nor around another unit.
  std::string name;
  std::vector<FlatParamSpec> params;  // at least one
};

class FlatParameters {
 public:
  // Every rank passes the same units (names, shapes) in the same order; collective over pg.
  // options.wrap is replaced: each FlatUnitSpec is one unit. kInvalidArgument naming the unit
  // or parameter for an empty or duplicate name, a nested unit, a non-f32 or non-CPU initial
  // value, or a missing param_init.
  FlatParameters(std::vector<FlatUnitSpec> units, std::shared_ptr<ProcessGroup> pg,
                 ShardingOptions options = {});
  ~FlatParameters();
  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  size_t num_units() const;
  const std::string& unit_name(size_t unit) const;
  size_t num_params(size_t unit) const;
  // "<unit>.<name>".
  const std::string& param_name(size_t unit, size_t i) const;
  const Shape& param_shape(size_t unit, size_t i) const;

  // The pass brackets. One micro-batch: begin_forward, gathers / releases, end_forward,
  // begin_backward, gathers / reduce_gradients, end_backward. Out of order: kInvalidArgument
  // naming the call and the phase.
  void begin_forward();
  void end_forward();
  void begin_backward();
  void end_backward();

  // Makes the unit's full parameters available (stage 3: all_gather; idempotent). In the
  // forward or the backward phase only.
  void gather(size_t unit);
  // Parameter i of the unit, param_dtype, CPU: a view of braid's buffer (writes are seen by
  // braid). kInvalidArgument when the unit is not gathered (stage 3).
  Tensor param(size_t unit, size_t i) const;
  // Forward only: the unit may be freed (stage 3 with reshard_after_forward).
  void release(size_t unit);
  // Backward only: this micro-batch's gradient of each of the unit's parameters, in order
  // (f32 / bf16 / f16 CPU tensors shaped as the parameter; an undefined entry is zero),
  // read before it returns; the unit is then reduced (as ShardedModel reduces a unit whose
  // backward ended) and freed.
  void reduce_gradients(size_t unit, std::span<const Tensor> grads);

  // Everything else of the step: finish_gradients, optimizer_parameters, after_step,
  // clip_grad_norm_, full_state_dict, save_checkpoint / load_checkpoint, set_gradient_sync.
  // Its state dicts and flat shards list a unit's parameters in module-tree order, as
  // torch's named_parameters: those registered directly under the unit ("bias") before those
  // under a sub-path ("attn.weight"); param(unit, i) keeps the registration order.
  ShardedModel& sharded();
  const ShardedModel& sharded() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::shard
