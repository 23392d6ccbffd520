// SPDX-License-Identifier: Apache-2.0
// ZeRO stages 0-3 over units (docs/sharding.md): a model whose parameters are grouped into
// units and, from stage 1 on, whose optimizer state, gradients and parameters are split over
// the ranks of a ProcessGroup. One step:
//
//   ShardedModel sm(gpt, pg, {.stage = ZeroStage::k3, .wrap = policy});
//   nn::AdamW opt(sm.optimizer_parameters(), {.lr = 3e-4});
//   for (int64_t j = 0; j < rounds; ++j) {           // micro-batch m = j * world + rank
//     Tensor logits = sm.forward(ids[m]);
//     ce.forward(logits, labels[m]);
//     sm.backward(ce.backward());                    // folds each unit's gradient as it ends
//   }
//   sm.finish_gradients(1.0 / (rounds * world));     // mean over the global batch
//   opt.step();
//   sm.after_step();                                 // stages 1-2: gather the new parameters
//
// Note [Deterministic reduction]: the global gradient is the left fold g_0 + g_1 + ... +
// g_{G-1} over the G micro-batches of the global batch in index order, in f32, then scaled
// once. Rank r runs micro-batches r, r + W, r + 2W, ...; in round j the ranks hold
// g_{jW} .. g_{jW+W-1}, and as each unit's backward ends an all_to_all hands every rank the W
// contributions to its shard, which it folds in rank order into its accumulator. So the fold
// order is the same for every world size W dividing G, and so are the bits: the same as one
// process adding the G micro-batch gradients in order (plain gradient accumulation), for every
// stage (docs/sharding.md has the proof and the cost).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "braid/amp/grad_scaler.h"
#include "braid/amp/precision.h"
#include "braid/comm/process_group.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/module.h"
#include "braid/nn/offload.h"
#include "braid/nn/optim.h"
#include "braid/shard/units.h"
#include "braid/tensor/safetensors.h"

namespace braid::shard {

class TensorParallelPlan;  // tensor_parallel.h

// DeepSpeed's zero_stage: what is split over the ranks.
enum class ZeroStage : uint8_t {
  k0 = 0,  // nothing (DDP): every rank holds everything and steps the whole model
  k1 = 1,  // optimizer state: each rank steps its shard, then the parameters are gathered
  k2 = 2,  // + gradients: only the shard's reduced gradient is kept
  k3 = 3   // + parameters: a unit's full parameters exist only around its forward / backward
};
ZeroStage zero_stage_from_int(int64_t stage);  // kInvalidArgument unless 0..3

// The seed's DDPCommunicationHookType for comm_hook: gradients compressed to f16 / bf16 for
// the reduction (braid: the stage-0 precision.reduce_dtype). PowerSGD wrappers are not built.
enum class DDPCommunicationHookType : uint8_t { kNo, kFp16, kBf16 };

// The seed's DistributedDataParallelKwargs, for stage 0 (DDP). Gradients are reduced per
// bucket: parameters in reverse registration order (the order backward usually produces
// them, as torch's DDP), a new bucket when the next gradient would pass bucket_cap_mb (the
// first bucket 1 MiB, torch's first_bucket_bytes). A bucket is reduced as soon as the backward
// has produced all of its gradients, buckets in index order, on the communication thread.
// `dim` and `check_reduction` have no equivalent (torch: scatter dim of inputs, deprecated).
struct DistributedDataParallelKwargs {
  // Copy rank 0's buffers to every rank before each forward (broadcast_buffers).
  bool broadcast_buffers = true;
  double bucket_cap_mb = 25;
  // A parameter that got no gradient in a synchronized backward: zeros with true; with false
  // (the default, as torch) kInvalidArgument naming it and this option.
  bool find_unused_parameters = false;
  // finish_gradients leaves gradients as views of their bucket's flat buffer (no copy).
  bool gradient_as_bucket_view = false;
  // Accepted for compatibility: braid's bucket order never changes, so it has no effect.
  bool static_graph = false;
  DDPCommunicationHookType comm_hook = DDPCommunicationHookType::kNo;
};

struct ShardingOptions {
  ZeroStage stage = ZeroStage::k3;
  WrapPolicy wrap{};
  // Stage 3: free a unit's full parameters after its forward and gather them again for its
  // backward (FSDP's FULL_SHARD / reshard_after_forward=True), or keep them from the forward
  // to the end of the backward (SHARD_GRAD_OP).
  bool reshard_after_forward = true;
  // The precision policy (amp/precision.h; FSDP's MixedPrecision and more), read here:
  // param_dtype, what parameters are held and computed in (the optimizer still steps f32
  // masters: shards at stages 1-3, whole copies at stage 0); reduce_dtype, what gradients are
  // packed, exchanged and folded in (f32, bf16 or f16 each); master_dtype and state_dtype must
  // be f32 (the optimizer's). keep_in_fp32_modules: at stage 0 each kept parameter stays f32
  // (param_dtype_for); at stages 1-3 a unit whose parameters are all kept gathers, holds and
  // reduces in f32 (FSDP's own f32 MixedPrecision for such a module), and a unit mixing kept
  // and other parameters is refused (wrap the kept module as its own unit). compute_dtype and
  // type are autocast's (PrecisionPolicy::autocast); buffers keep the model's dtype.
  //   ShardingOptions o{.stage = ZeroStage::k3, .precision = amp::PrecisionPolicy::from("bf16")};
  amp::PrecisionPolicy precision{};
  // HSDP (FSDP's HYBRID_SHARD; HYBRID_SHARD_ZERO2 with stage 2): shard over groups of this
  // many consecutive ranks and replicate across the groups: the 2-D mesh
  // (dp_replicate = W / size, dp_shard = size), row-major, as DeviceMesh lays it out. 0 (the
  // default) or W: shard over every rank. Stages 1-3; must divide W.
  int64_t shard_group_size = 0;
  // DeepSpeed's offload_param_device / offload_param_nvme_path (stage 3): with kNvme each
  // unit's f32 master shard lives in a file (a SwapStore under nvme_path) between uses: read
  // ahead of the unit's gather (the next unit in the pass order is read while this one
  // computes) and dropped once gathered, resident for the optimizer step only (from
  // finish_gradients to after_step). Meanwhile optimizer_parameters()' data() is an empty
  // placeholder. kCpu: the shards are host memory already on cpu ranks (a no-op). The
  // optimizer's own state has its own setting (nn::Optimizer::set_offload).
  nn::OffloadConfig offload_param{};
  // Stage 0 (DDP) bucketing and options (ignored at stages 1-3).
  DistributedDataParallelKwargs ddp{};
  // true: the ordered reduction of Note [Deterministic reduction] (the same bits for every
  // world size, stage and shard group size). false, stage 0: each bucket is all_reduced as
  // torch's DDP does (one collective per bucket and micro-batch); HSDP: each replica folds
  // its own ranks' contributions and finish_gradients all_reduces the shards across replicas
  // (once per step). The bits then depend on the world size. Stages 1-3 without HSDP always
  // use the ordered reduction.
  bool deterministic = true;
  // Copy rank 0's parameter values to every rank at construction (sync_module_states).
  bool sync_module_states = true;
  // zero3_init_flag / cpu_ram_efficient_loading: for parameters on the meta device (a model
  // built under nn::InitEmptyWeights), the values of elements [offset, offset + count) of
  // parameter `name`, row-major, written to dst. Each rank asks only for its own shards
  // (stage 0: whole parameters), so a stage-3 model is never whole on any rank; e.g.
  // GPT::init_weights_range gives the bits of GPT::init_weights. Alternatively build with
  // zeros and load_checkpoint.
  std::function<void(const std::string& name, int64_t offset, int64_t count, float* dst)>
      param_init{};
  // Run collectives on a communication thread, so gathers and reductions overlap compute
  // (off: every collective runs on the calling thread). The bits are the same either way.
  // Unset: on when this node has more CPUs than its ranks' intra-op threads
  // (LOCAL_WORLD_SIZE x get_num_threads()); with one rank per core the thread only takes
  // compute time (measured: docs/performance.md, "Sharding step").
  std::optional<bool> overlap{};
  // With overlap, stage 3: while a unit computes, gather the next unit of the forward order
  // (FSDP's forward_prefetch) and of the backward order (BACKWARD_PRE); the orders are those
  // of the first pass. At most one unit ahead is gathered (limit_all_gathers).
  bool forward_prefetch = true;
  bool backward_prefetch = true;
  // Tensor parallelism (tensor_parallel.h): the plan parallelize returned for the model,
  // whose parameters are then this rank's TP slices. Checkpoints hold the global tensors (each
  // slice's runs written at their global offsets, replicated parameters by tp rank 0 only), so
  // they load at any TP size; clip_grad_norm_ counts the split gradients across tp and the
  // replicated ones once. full_state_dict() still gives this rank's slices.
  std::shared_ptr<const TensorParallelPlan> tensor_parallel{};
  // The group save_checkpoint and load_checkpoint run over: every rank whose pieces belong in
  // the folder (with tensor parallelism, every rank of the dp x tp mesh: mesh.world()). Null:
  // the group given to ShardedModel; required with a tensor_parallel plan over several ranks.
  std::shared_ptr<ProcessGroup> checkpoint_group{};
  // FSDP's activation_checkpointing (Megatron's recompute_activations): every unit's layer but
  // the root's recomputes its forward in the backward instead of keeping its activations
  // (Layer::set_checkpointing; the same bits). With a transformer-based wrap policy, every
  // block. CausalLMPipeline applies it to every block of its stages (whose units are stages).
  bool activation_checkpointing = false;
};

// Whether a ShardedModel with these options runs a communication thread: `overlap` when set,
// else on when this node has more CPUs than its ranks' intra-op threads (LOCAL_WORLD_SIZE x
// get_num_threads()).
bool resolve_overlap(const ShardingOptions& options);

// What a ShardingOptions means over `world_size` ranks, resolved and validated once
// (shard::resolve): ShardedModel, estimate_memory and the Accelerator read this instead of
// testing the ZeRO stage themselves. The data-parallel ranks form the 2-D mesh
// (dp_replicate, dp_shard) of torch's HSDP, row-major as DeviceMesh lays it out: a unit's
// state is split over the dp_shard ranks of a row and replicated down a column.
struct ShardingSpec {
  ZeroStage stage = ZeroStage::k3;
  // Stages 1-3: each rank's optimizer steps its shard of every unit's f32 master.
  bool shard_optimizer_state = false;
  // Stages 1-3: each unit's gradient is folded into this rank's shard as the unit's backward
  // ends, and only the shard's is kept (braid does this from stage 1 on, so stages 1 and 2
  // hold the same memory: docs/sharding.md).
  bool shard_gradients = false;
  // Stage 3: a unit's full parameters exist only around its forward and backward.
  bool shard_parameters = false;
  // Stage 3 with reshard_after_forward (FULL_SHARD): freed after the forward, gathered again
  // for the backward. false at stages 0-2.
  bool reshard_after_forward = false;
  // The mesh: dp_replicate x dp_shard = world. Stage 0 (DDP): (W, 1), everything replicated
  // (its ordered reduction still folds each bucket over all W ranks); stages 1-3: (1, W), or
  // (W / S, S) with HSDP's shard_group_size S.
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  // Note [Deterministic reduction]: the ordered fold, the same bits for every world size
  // (false only for stage 0 and HSDP with deterministic = false).
  bool ordered_reduction = true;
  bool overlap = false;            // resolve_overlap: collectives on a communication thread
  bool forward_prefetch = false;   // stage 3 with overlap and ShardingOptions::forward_prefetch
  bool backward_prefetch = false;  // likewise, backward
  bool offload_param = false;      // stage 3: master shards in files (offload_param = nvme)

  int64_t world() const { return dp_replicate * dp_shard; }
  bool hybrid() const { return shard_optimizer_state && dp_replicate > 1; }  // HSDP
  // FSDP's ShardingStrategy: NO_SHARD (stage 0), SHARD_GRAD_OP (stages 1-2, and stage 3
  // keeping the parameters from forward to backward), FULL_SHARD (stage 3), HYBRID_SHARD,
  // _HYBRID_SHARD_ZERO2.
  std::string_view strategy_name() const;
  // One line, e.g. "ZeRO-3 (FULL_SHARD) over dp_replicate 1 x dp_shard 8, ordered reduction".
  std::string str() const;
};

// Validates `options` for `world_size` ranks and resolves them. kInvalidArgument naming the
// option and the expectation: world_size < 1, a shard_group_size that does not divide the world
// or is given at stage 0, deterministic = false at stages 1-3 without HSDP, offload_param to
// nvme below stage 3 or without a path, a precision whose param_dtype or reduce_dtype is not
// f32 / bf16 / f16 or whose master_dtype or state_dtype is not f32.
ShardingSpec resolve(const ShardingOptions& options, int world_size);

class ShardedCheckpoint;        // checkpoint.h
class DistributedDataParallel;  // shard/src/ddp.h (internal): stage 0
struct Piece;                   // checkpoint.h
struct UnitState;               // fsdp_impl.h

// The rest of a training run's state, saved beside the model and optimizer in a sharded
// checkpoint (Accelerate's save_state / load_state): the LR scheduler's and GradScaler's
// state (the same on every rank; rank 0's is written) and every rank's RNG state (the
// default CPU generator: dropout, data order). Null pointers are skipped.
struct TrainingState {
  nn::LRScheduler* scheduler = nullptr;
  amp::GradScaler* scaler = nullptr;
  bool rng_states = true;
};

class ShardedModel {
 public:
  // Takes over the parameters of `model` (every rank passes the same structure). Parameters
  // must be f32 (they become the f32 master shards; options.precision says what is gathered).
  // From stage 1 on, each unit's parameters become views into one flat buffer per unit; at
  // stage 3 that buffer exists only while the unit is gathered, and the parameters' data() is
  // undefined otherwise.
  ShardedModel(std::shared_ptr<nn::Layer> model, std::shared_ptr<ProcessGroup> pg,
               ShardingOptions options = {});
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  nn::Layer& module() { return *model_; }
  const std::vector<Unit>& units() const { return units_; }
  const ShardingOptions& options() const { return options_; }
  // options() resolved over this group (shard::resolve): what is sharded, the mesh.
  const ShardingSpec& spec() const { return spec_; }
  int rank() const;        // in the group given
  int world_size() const;  // of the group given
  // The group the parameters are sharded over (HSDP: this rank's shard group) and, with
  // HSDP, the group of this rank's replicas (one rank per shard group; null without HSDP).
  std::shared_ptr<ProcessGroup> shard_group() const;
  std::shared_ptr<ProcessGroup> replicate_group() const;

  // One micro-batch. forward() gathers units as they run (stage 3); backward() folds each
  // unit's gradient into this rank's accumulator as the unit's backward ends (an all_to_all
  // per unit: every rank must run the same number of micro-batches per step). The collectives
  // run on a group of their own (new_group over the same ranks), so the caller may use `pg`
  // for its own collectives at any time.
  Tensor forward(const Tensor& x);
  Tensor backward(const Tensor& grad_output);

  // no_sync (DDP / FSDP; the seed's GradientAccumulationPlugin sync_each_batch = false): with
  // sync off, a unit's backward leaves its gradient in the parameters' grad() (accumulating
  // over micro-batches, full size, on every rank) instead of reducing it; the next backward
  // with sync on reduces the accumulated gradient as one contribution. One collective per
  // unit per step instead of per micro-batch, but the bits then depend on the world size
  // (the fold sees per-rank sums): the faster, non-identical mode of docs/sharding.md.
  void set_gradient_sync(bool sync);
  bool gradient_sync() const;

  // Ends the step's accumulation: the reduced gradient times `scale` becomes the gradient of
  // optimizer_parameters() (stage 0: every rank gets the whole gradient, by an all_gather of
  // the reduced shards). Starts the next accumulation.
  void finish_gradients(double scale);
  // What the optimizer steps on this rank: stage 0 the model's parameters (those held in a
  // 16-bit precision.param_dtype: their f32 masters, copied into the parameters by after_step);
  // stages 1-3 one f32 Parameter per unit holding this rank's shard of the unit's flat parameters.
  std::vector<nn::Parameter> optimizer_parameters() const;
  // After the optimizer step: stages 1-2 all_gather the updated shards into every rank's full
  // parameters; stage 0 with a 16-bit precision.param_dtype casts the masters into the
  // parameters; otherwise nothing.
  void after_step();

  // clip_grad_norm_ over the whole model's reduced gradient (call after finish_gradients):
  // the global 2-norm, not a per-rank one, computed chunk by chunk on the norm grid
  // (units.h) in a fixed order, so it is the same number on every rank and for every world
  // size; non-finite norms are returned unclipped (torch's error_if_nonfinite=false).
  double clip_grad_norm_(double max_norm);

  // Every parameter whole, on every rank (all_gather of the shards at stage 3), as
  // state_dict() names them; tied names appear under each name.
  NamedTensors full_state_dict();
  // Loads whole tensors (every rank passes the same values) into the shards.
  void load_full_state_dict(const NamedTensors& state);

  // Sharded checkpoint (checkpoint.h) of the parameters and, when given, the state of the
  // optimizer built on optimizer_parameters() (one parameter group): every rank writes the
  // parts of each parameter (and of its optimizer state, as "optimizer.<state>.<name>") that
  // its shard covers, under the parameters' own names, so the folder does not depend on the
  // stage or world size that wrote it. Collective. `metadata` goes into the index.
  // `extra`: scheduler, scaler and RNG states, into the index's metadata ("braid.scheduler",
  // "braid.scaler", "braid.rng.<rank>").
  void save_checkpoint(const std::filesystem::path& folder,
                       const nn::Optimizer* optimizer = nullptr, const StringMap& metadata = {},
                       const TrainingState& extra = {});
  // Loads such a checkpoint, whatever world size and stage wrote it (resharding); with an
  // optimizer, its state too (same algorithm, one group). Errors name the missing tensor.
  // `extra`: a scheduler or scaler given must have been saved (kInvalidArgument otherwise);
  // RNG states are restored, each rank its own, when the checkpoint was written by the same
  // world size (otherwise there is no rank-for-rank match: they are left as they are, with a
  // warning).
  void load_checkpoint(const std::filesystem::path& folder, nn::Optimizer* optimizer = nullptr,
                       const TrainingState& extra = {});
  // The same for several models in one folder that share one optimizer, built on their
  // optimizer_parameters() concatenated in `models` order (a pipeline rank's chunks: each
  // writes and reads its own parameters, under their names). The models' checkpoint group is
  // the same; extra's states go with the first model. The one-model forms call these.
  static void save_checkpoint(const std::vector<ShardedModel*>& models,
                              const std::filesystem::path& folder,
                              const nn::Optimizer* optimizer = nullptr,
                              const StringMap& metadata = {}, const TrainingState& extra = {});
  static void load_checkpoint(const std::vector<ShardedModel*>& models,
                              const std::filesystem::path& folder,
                              nn::Optimizer* optimizer = nullptr, const TrainingState& extra = {});

  // Stage 0: the parameters of each DDP bucket, in reduction order (empty at stages 1-3).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  // Peak and current bytes this object holds for flat buffers, shards and accumulators (for
  // the memory formula's tests).
  int64_t held_bytes() const;

 private:
  // This rank's pieces of the parameters and, with `st`, of the optimizer state of optimizer
  // parameters [first_param, first_param + optimizer_parameters().size()).
  void append_checkpoint_pieces(std::vector<Piece>& pieces, const nn::OptimizerState* st,
                                size_t first_param);
  void load_parameters(const ShardedCheckpoint& ckpt, const std::filesystem::path& folder);
  Tensor read_unit(const ShardedCheckpoint& ckpt, const std::filesystem::path& folder,
                   const std::string& prefix, const UnitState& s, bool whole) const;
  void append_optimizer_state(const ShardedCheckpoint& ckpt, const std::filesystem::path& folder,
                              const std::set<std::string>& state_names, size_t first_param,
                              nn::OptimizerState& st) const;
  // Offloaded master shards (offload_param nvme): resident (false) or back in their files.
  void set_parked(bool parked);
  bool parked() const;
  void load_training_state(const ShardedCheckpoint& ckpt, const std::filesystem::path& folder,
                           const TrainingState& extra);
  struct Impl;
  friend class DistributedDataParallel;  // stage 0 (shard/src/ddp.h) works on the Impl
  std::shared_ptr<nn::Layer> model_;
  ShardingOptions options_;
  ShardingSpec spec_;
  std::vector<Unit> units_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::shard
