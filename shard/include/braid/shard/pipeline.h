// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism (docs/parallelism.md, "Pipeline parallelism"): a model cut into S
// stages over the p ranks of a "pp" group (rank r holds the chunks r, r + p, r + 2p, ...: v
// virtual stages per rank), a step's batch cut into M micro-batches, and a schedule that says,
// per rank, in which order to run the forward and backward of each (stage, micro-batch) and
// to send and receive activations and their gradients. Modelled on
// torch.distributed.pipelining (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B) and
// Megatron-Core's pipeline_parallel/schedules.py.
//
//   DeviceMesh mesh(world, {2, 2}, {"dp", "pp"});
//   PipelineOptions opt{.schedule = PipelineSchedule::k1F1B, .num_micro_batches = 4};
//   CausalLMPipeline pipe(model, mesh.group("pp"), opt);  // this rank's stages of any CausalLM
//   pipe.init_weights(gen);                               // the bits of model->init_weights
//   nn::AdamW adam(pipe.parameters(), {.lr = 3e-4});
//   double loss = pipe.step(ids, labels);             // M micro-batches: forward + backward
//   adam.step();  adam.zero_grad();  pipe.after_step();
//
// Tensor parallelism inside the stages: a mesh (dp, pp, tp) and PipelineOptions::tp_group =
// mesh.group("tp") (docs/parallelism.md, "TP x PP and DP x TP x PP").
//
// A schedule is data: pipeline_order() lists every rank's actions (0F0 = forward of stage 0 on
// micro-batch 0, 1RECV_F0, 0SEND_F0, 1B0, ...), validate_pipeline_order() checks it, and one
// runtime (Pipeline) executes any valid list.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/rng.h"
#include "braid/nn/causal_lm.h"
#include "braid/nn/loss.h"
#include "braid/nn/module.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/safetensors.h"

namespace braid::shard {

// ---- schedules ---------------------------------------------------------------------------------

enum class PipelineSchedule : uint8_t {
  kGPipe,            // every forward, then every backward (one stage per rank)
  k1F1B,             // warmup forwards, one forward / one backward, cooldown backwards
  kInterleaved1F1B,  // 1F1B over v virtual stages per rank, in Megatron's order
};
std::string_view schedule_name(PipelineSchedule schedule);  // "gpipe", "1f1b", "interleaved-1f1b"
// Also accepts torch's class names ("ScheduleGPipe", "Schedule1F1B",
// "ScheduleInterleaved1F1B"); kInvalidArgument listing the names otherwise.
PipelineSchedule parse_pipeline_schedule(std::string_view name);

// torch's _ComputationType: F, B, SEND_F, RECV_F, SEND_B, RECV_B.
enum class ActionKind : uint8_t {
  kForward,
  kBackward,
  kSendActivation,  // this stage's output of the micro-batch to stage + 1
  kRecvActivation,  // this stage's input of the micro-batch from stage - 1
  kSendGradient,    // this stage's input gradient to stage - 1
  kRecvGradient,    // this stage's output gradient from stage + 1
};

struct PipelineAction {
  ActionKind kind = ActionKind::kForward;
  int64_t stage = 0;        // the stage that computes, sends or receives
  int64_t micro_batch = 0;  // in [0, M)
  friend bool operator==(const PipelineAction&, const PipelineAction&) = default;
};
// torch's notation: "<stage><F|B|SEND_F|RECV_F|SEND_B|RECV_B><micro-batch>", e.g. "1RECV_F3".
std::string action_str(const PipelineAction& action);

// What a schedule is generated for. Stage s runs on rank s % ranks as its chunk s / ranks.
struct ScheduleShape {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int64_t ranks = 1;           // p
  int64_t virtual_stages = 1;  // v: chunks per rank (1 for GPipe and 1F1B)
  int64_t micro_batches = 1;   // M
  int64_t num_stages() const { return ranks * virtual_stages; }
};
// kInvalidArgument naming the field: ranks, v, M >= 1; v == 1 unless interleaved; interleaved:
// M a multiple of the rounds max(1, M / p) (torch's rule; M % p == 0 gives Megatron's order).
void check_schedule_shape(const ScheduleShape& shape);

// Forwards a rank runs before its first backward: GPipe M; 1F1B min(p - r - 1, M) (Megatron's
// num_warmup_microbatches); interleaved min((v - 1) R + 2 (p - r - 1), v M), R = micro-batches
// per round (p when p divides M).
int64_t warmup_forwards(const ScheduleShape& shape, int64_t rank);
// The forwards and backwards of one rank, in order.
std::vector<PipelineAction> compute_actions(const ScheduleShape& shape, int64_t rank);
// Every rank's actions with the sends and receives: a receive right before the compute that
// needs it, a send right after the compute that produced it (sends do not block the
// runtime: each goes to a communication thread).
std::vector<std::vector<PipelineAction>> pipeline_order(const ScheduleShape& shape);
// Checks a list of every rank's actions (kInvalidArgument naming the rank, the position and the
// action, with the whole list): each stage runs on its rank; each (stage, micro-batch) is
// forwarded once and backwarded once, after its forward; a forward after the receive of its
// input, a backward after the receive of its output gradient; every receive matched by a send
// of the neighbouring stage; messages of each (sender, receiver, kind) received in the order
// sent; and the ranks run to completion when a receive waits for its send (no deadlock).
void validate_pipeline_order(const ScheduleShape& shape,
                             const std::vector<std::vector<PipelineAction>>& order);
// One line per rank: "rank 0: 0F0 0SEND_F0 0F1 ...".
std::string format_pipeline_order(const std::vector<std::vector<PipelineAction>>& order);

// The idle fraction of a rank in theory, for equal stage times and free communication:
// (p - 1) / (v M + p - 1) (GPipe and 1F1B: v = 1). Megatron states the interleaved bubble as
// (p - 1) / (v M) of the ideal time: the same idle time, divided by v.
double theoretical_bubble(const ScheduleShape& shape);

// The schedule run on a model clock: a forward of one chunk takes forward_cost, a backward
// backward_cost, messages are free; each action starts when its rank is free and its input has
// arrived. ascii draws one line per rank, one cell per time unit ("F3" forward of micro-batch
// 3, "B3" backward, "." idle; interleaved: "F3b" = chunk 1 of the rank).
struct SimulatedPipeline {
  int64_t makespan = 0;
  std::vector<int64_t> busy;   // per rank
  std::vector<double> bubble;  // per rank: 1 - busy / makespan
  std::string ascii;
};
SimulatedPipeline simulate_pipeline(const ScheduleShape& shape, int64_t forward_cost = 1,
                                    int64_t backward_cost = 2);

// ---- partitioning ------------------------------------------------------------------------------

enum class PartitionMethod : uint8_t {
  kParameters,  // minimize the largest stage's parameter count (embedding on the first stage,
                // ln_f + the head's V x d on the last), then the spread
  kUniform,     // Megatron's default: blocks split evenly, the first stages take the remainder
};

// Blocks per stage for S stages (contiguous, in order). `block_params[i]`: parameters of block
// i; `first_extra` / `last_extra`: what the first / last stage holds besides blocks. Every
// stage gets at least one block, except the first and last when their extra is non-zero.
// kInvalidArgument when that is impossible.
std::vector<int64_t> balance_stages(const std::vector<int64_t>& block_params, int64_t first_extra,
                                    int64_t last_extra, int64_t num_stages,
                                    PartitionMethod method = PartitionMethod::kParameters);

// A model's stages: stage 0 with the embedding, stage S - 1 with the head (its plan's cut
// points: the blocks of ParallelPlan::blocks). blocks_per_stage: S counts summing to
// num_blocks() (MegatronLMPlugin's explicit pipeline split); empty: balance_stages(method)
// over the blocks' parameter counts, the embedding's and the head's counted on stages built
// on the meta device. The model may itself be on the meta device.
std::vector<nn::StageSpec> partition_stages(const nn::CausalLM& model, int64_t num_stages,
                                            const std::vector<int64_t>& blocks_per_stage = {},
                                            PartitionMethod method = PartitionMethod::kParameters);

// ---- the runtime -------------------------------------------------------------------------------

// How the head's replica on the last stage contributes to the tied embedding's gradient on the
// first stage (docs/parallelism.md, "Tied weights"). Either way the first stage owns the weight
// and sends it to the last stage at the start of each step.
enum class TiedGradSync : uint8_t {
  // The head's gradient summed over the step's micro-batches, sent once to the first stage and
  // added during its last backward (the bytes of Megatron's embedding-group all_reduce). The
  // embedding's gradient is the same sum in another order: equal to single-process training
  // for M = 1, within rounding otherwise.
  kOncePerStep,
  // The head's gradient of each micro-batch, sent to the first stage and added just before the
  // embedding's own part of that micro-batch: the order of single-process gradient
  // accumulation, so the same bits (M times the bytes).
  kPerMicroBatch,
};

struct PipelineOptions {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  // MegatronLMPlugin num_micro_batches: M. The batch given to step() is cut in M.
  int64_t num_micro_batches = 1;
  // Chunks per rank (interleaved 1F1B). MegatronLMPlugin's
  // num_layers_per_virtual_pipeline_stage = L gives v = blocks / (p L) (CausalLMPipeline).
  int64_t virtual_stages = 1;
  int64_t num_layers_per_virtual_pipeline_stage = 0;  // 0: use virtual_stages
  // CausalLMPipeline's partition: explicit blocks per stage (p v counts), else `partition`.
  std::vector<int64_t> blocks_per_stage{};
  PartitionMethod partition = PartitionMethod::kParameters;
  // The loss on the last stage, per micro-batch; step() returns the mean over micro-batches.
  nn::CrossEntropyOptions loss{};
  // Divide the summed gradients by M (by M W with data parallelism), as torch's scale_grads.
  bool scale_grads = true;
  TiedGradSync tied_grad_sync = TiedGradSync::kOncePerStep;
  // Data parallelism over each stage: every chunk becomes a ShardedModel over dp_group with
  // `sharding` (any ZeRO stage); null: none. The pp group's ranks and the dp group's ranks are
  // two dimensions of one mesh (mesh.group("pp"), mesh.group("dp")).
  std::shared_ptr<ProcessGroup> dp_group{};
  ShardingOptions sharding{};
  // Tensor parallelism inside each stage (TP x PP, DP x TP x PP; docs/parallelism.md): the
  // group of the ranks that split this rank's stages (mesh (dp, pp, tp): mesh.group("tp"),
  // with mesh.group("pp") the pipeline's group, so activations travel between ranks of the
  // same tp and dp coordinates); null: none. The last stage's loss is then a
  // VocabParallelCrossEntropy over tp_group (with `loss`'s ignore_index, reduction and label
  // smoothing, and vocab_size). CausalLMPipeline splits its stages with parallelize (the
  // model's plan) and `tensor_parallel`; with dp_group each chunk's ShardedModel gets the chunk's
  // plan as ShardingOptions::tensor_parallel (set sharding.checkpoint_group to the dp x tp group).
  std::shared_ptr<ProcessGroup> tp_group{};
  TensorParallelOptions tensor_parallel{};
  int64_t vocab_size = 0;  // the true vocabulary for the vocab-parallel loss (CausalLMPipeline:
                           // the model's)
  // Activation checkpointing is sharding.activation_checkpointing: CausalLMPipeline makes every
  // block of every stage recompute its forward in backward (Layer::set_checkpointing).
};

// Busy and idle time of one rank in the last step (steady clock): total runs from entering
// step() to the end of the loss broadcast that closes the step on every pp rank; busy is the
// time in forward, backward and loss computations; bubble() = 1 - busy / total. Every action
// is timed (receives are waits, sends only queue).
struct PipelineStepStats {
  struct Timed {
    PipelineAction action;
    double begin_s = 0, end_s = 0;  // from the start of the step
  };
  double total_s = 0, busy_s = 0;
  double bubble() const { return total_s > 0 ? 1.0 - busy_s / total_s : 0.0; }
  std::vector<Timed> actions;
};

// The tied weight between the first and the last stage: the module (a dotted path in the stage
// module) whose "weight" is the owned tensor on stage 0 and the replica on stage S - 1.
struct TiedWeight {
  std::string first_module;  // "transformer.wte"
  std::string last_module;   // "lm_head"
};

// Executes a schedule over this rank's chunks. Collective over the pp group (and dp_group):
// every rank constructs it with the same options, and every rank calls step() together.
class Pipeline {
 public:
  // chunks[c] is stage rank + c p: the first stage takes token ids, the last returns logits
  // (with options.tp_group: this rank's vocabulary columns). `tied`: empty module names for
  // none. `tp_plans`: with tp_group, chunk c's TensorParallelPlan (one per chunk, or empty),
  // given to its ShardedModel with dp_group.
  Pipeline(std::vector<std::shared_ptr<nn::Layer>> chunks, std::shared_ptr<ProcessGroup> pp,
           PipelineOptions options, TiedWeight tied = {},
           std::vector<std::shared_ptr<const TensorParallelPlan>> tp_plans = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // One step's forwards and backwards over M micro-batches (ids[m] / labels[m]; every rank
  // passes them, the first stage reads ids, the last labels). Gradients accumulate in micro-
  // batch order and are scaled at the end (scale_grads); with dp_group each ShardedModel has
  // finished its reduction. Returns the mean loss over the micro-batches on every pp rank.
  double step(const std::vector<Tensor>& ids, const std::vector<Tensor>& labels);
  // The same with the batch cut into M equal micro-batches along dimension 0.
  double step(const Tensor& ids, const Tensor& labels);

  // What the optimizer steps on this rank: the chunks' parameters without the tied replica
  // (with dp_group: the ShardedModels' optimizer_parameters()).
  std::vector<nn::Parameter> parameters() const;
  // After the optimizer step: ShardedModel::after_step() for each chunk (nothing without DP).
  void after_step();
  // Loss scaling (fp16's GradScaler): the last stage multiplies each micro-batch's loss
  // gradient by `scale` in f32, as GradScaler::scale does (1: none). Every rank sets the same.
  void set_loss_scale(double scale);
  // Gradient clipping over the whole model (after step()): the 2-norm of every stage's
  // gradient, the tied replica left out, split parameters counted once over tp_group and
  // shards over dp_group; each chunk's sum of squares (ShardedModel::clip_grad_norm_, or
  // grad_norm over the chunk's plan), the chunks' added in order on each rank, then the
  // ranks' all-gathered over pp and added in pp-rank order, so every rank gets the same
  // number. Scales parameters()' gradients by min(1, max_norm / (norm + 1e-6)) as torch's
  // clip_grad_norm_; a non-finite norm is returned and nothing is scaled. Collective over pp
  // (and dp, tp). The last bits differ from a one-process model's norm (another order).
  double clip_grad_norm_(double max_norm);

  // This rank's parameters under their model names (the replica left out), whole (DP: gathered
  // by full_state_dict(), a collective over dp).
  NamedTensors state_dict();

  int rank() const;  // in the pp group
  int size() const;  // p
  const ScheduleShape& shape() const { return shape_; }
  const std::vector<PipelineAction>& actions() const;  // this rank's
  const std::vector<std::vector<PipelineAction>>& order() const { return order_; }
  const PipelineStepStats& last_stats() const;
  nn::Layer& chunk(int64_t c);       // chunk c's module
  ShardedModel* sharded(int64_t c);  // null without dp_group

 private:
  struct Impl;
  ScheduleShape shape_;
  std::vector<std::vector<PipelineAction>> order_;
  std::unique_ptr<Impl> impl_;
};

// A causal LM cut into stages (partition_stages over p v stages, CausalLM::make_stage) on
// this pp rank, run by a Pipeline with a tied embedding handled as docs/parallelism.md says.
// `model` is the prototype the stages are made from (its configuration, and init_weights_range
// for init_weights); it may be on the meta device, and its values are not taken: load them
// with load_state_dict or init_weights.
class CausalLMPipeline {
 public:
  CausalLMPipeline(std::shared_ptr<const nn::CausalLM> model, std::shared_ptr<ProcessGroup> pp,
                   PipelineOptions options);
  // Every rank passes the same generator state: each stage gets the values the model's
  // init_weights gives its parameters (CausalLMStage::init_weights; f32). With dp_group the
  // values go through ShardedModel::load_full_state_dict.
  void init_weights(const Generator& gen);
  // The same from any initializer of whole values by parameter name (ShardingOptions::
  // param_init's signature; e.g. the model's init_weights_range bound to a generator, for a
  // model built on the meta device): one whole stage at a time is built, filled, split over tp
  // and loaded.
  using ParamInit = std::function<void(const std::string&, int64_t, int64_t, float*)>;
  void init_from(const ParamInit& init);
  // Loads a whole model's state dict (the model's names): each stage takes its part, a tied
  // replica takes the embedding's. Every rank passes the same values. With tp_group each rank
  // keeps its slices of them.
  void load_state_dict(const NamedTensors& state);
  // This rank's stages' parameters under the model's names as global (unsplit) tensors, the
  // replica left out: state_dict() with every split parameter gathered over tp_group (padding
  // dropped). Collective over dp_group and tp_group. Without tp_group: state_dict().
  NamedTensors global_state_dict();
  double step(const std::vector<Tensor>& ids, const std::vector<Tensor>& labels) {
    return pipeline_->step(ids, labels);
  }
  double step(const Tensor& ids, const Tensor& labels) { return pipeline_->step(ids, labels); }
  std::vector<nn::Parameter> parameters() const { return pipeline_->parameters(); }
  void after_step() { pipeline_->after_step(); }
  NamedTensors state_dict() { return pipeline_->state_dict(); }
  const nn::CausalLM& model() const { return *model_; }
  const std::vector<nn::StageSpec>& stage_specs() const { return specs_; }       // every stage
  std::vector<std::shared_ptr<nn::CausalLMStage>>& stages() { return stages_; }  // this rank's
  Pipeline& pipeline() { return *pipeline_; }
  // With tp_group: chunk c's plan (parallelize); null otherwise.
  std::shared_ptr<const TensorParallelPlan> plan(int64_t c) const;

 private:
  // A fresh whole (unsplit) stage like `like`, built without advancing the default generator.
  std::shared_ptr<nn::CausalLMStage> whole_stage(const nn::CausalLMStage& like) const;
  // A whole stage's values as this rank's state dict of that stage: `whole` is split in place
  // with parallelize when tp_group is set.
  NamedTensors local_state(nn::CausalLMStage& whole) const;
  std::shared_ptr<const nn::CausalLM> model_;
  bool checkpointing_ = false;
  std::vector<nn::StageSpec> specs_;
  std::vector<std::shared_ptr<nn::CausalLMStage>> stages_;
  std::shared_ptr<ProcessGroup> tp_;
  TensorParallelOptions tp_options_;
  std::vector<std::shared_ptr<const TensorParallelPlan>> plans_;
  std::vector<std::map<std::string, TensorSlice>> slices_;  // per chunk, by parameter name
  std::unique_ptr<Pipeline> pipeline_;
};

}  // namespace braid::shard
