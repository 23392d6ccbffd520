// SPDX-License-Identifier: Apache-2.0
// The Accelerator (docs/accelerator.md): Hugging Face Accelerate's front in C++, built from one
// AcceleratorConfig (config.h), over braid's ProcessGroup, ShardedModel, optimizers, LR
// schedulers, data loaders, GradScaler and trackers.
//
//   braid::accel::Accelerator acc(cfg);                 // the launcher's ranks
//   auto model = acc.prepare_model(gpt);                // PreparedModel from the config's plugin
//   braid::nn::AdamW opt(model->optimizer_parameters(), {.lr = 3e-4});
//   acc.prepare_optimizer(opt);
//   braid::nn::DataLoader train = acc.prepare_data_loader(loader);
//   for (const braid::Tree& batch : train) {
//     auto accumulate = acc.accumulate(train);          // sync_gradients on the window's end
//     auto autocast = acc.autocast();
//     Tensor logits = model->forward(ids);
//     ce.forward(logits, labels);
//     acc.backward(*model, ce.backward());
//     if (acc.sync_gradients()) {
//       acc.clip_grad_norm_(*model, 1.0);
//       acc.step(opt);                                  // GradScaler-aware
//       acc.scheduler_step(sched);
//       acc.zero_grad(opt);
//     }
//   }
//
// Gradients: every micro-batch's loss gradient is a mean over its own samples; the step's
// gradient is their mean over the global batch: finish_gradients(1 / (micro-batches in the
// window x processes)), which is Accelerate's loss / gradient_accumulation_steps followed by
// DDP's average over processes. It runs once per window, lazily, before clipping or the step.
//
// Tensor and pipeline parallelism (tp_degree / pp_degree of the plan; docs/accelerator.md):
// the processes form a mesh (dp, pp, tp); a causal LM (nn::CausalLM, any family) prepared with
// prepare_model is split over tp by its own ParallelPlan (its logits are this rank's
// vocabulary columns: use cross_entropy()), and with pp > 1 cut into stages whose step runs
// every micro-batch of the window (train_step, Accelerate's Megatron-LM train step). Data is
// split over dp only. Every layout gives one PreparedModel (prepared_model.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/accel/config.h"
#include "braid/accel/prepared_model.h"
#include "braid/accel/progress.h"
#include "braid/accel/trackers.h"
#include "braid/amp/autocast.h"
#include "braid/amp/fp8.h"
#include "braid/amp/grad_scaler.h"
#include "braid/comm/process_group.h"
#include "braid/nn/data.h"
#include "braid/nn/loss.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/module.h"
#include "braid/nn/optim.h"
#include "braid/shard/device_mesh.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/pipeline.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/tree.h"

namespace braid::accel {

// An object save_state / load_state carry (register_for_checkpointing): anything with a JSON
// state. Saved as custom_checkpoint_<i>.json, i in registration order.
struct Checkpointable {
  std::function<std::string()> state_json;
  std::function<void(const std::string&)> load_state_json;
};

// The language-model loss of a prepared causal LM: nn::CrossEntropyLoss, or under tensor
// parallelism shard::VocabParallelCrossEntropy over the tp group (the logits are this rank's
// vocabulary columns; the loss and the targets are the same on every tp rank).
class CrossEntropy {
 public:
  explicit CrossEntropy(nn::CrossEntropyOptions options = {},
                        std::shared_ptr<ProcessGroup> tp = nullptr, int64_t vocab_size = 0);
  Tensor forward(const Tensor& logits, const Tensor& targets);
  Tensor backward(const Tensor& grad_loss = {});

 private:
  std::unique_ptr<nn::CrossEntropyLoss> plain_;
  std::unique_ptr<shard::VocabParallelCrossEntropy> parallel_;
};

class Accelerator {
 public:
  // `pg`: the group to run on; null: ProcessGroup::create from the launcher's environment
  // (a one-process job without a launcher is a one-rank group) with the config's
  // InitProcessGroupKwargs. Applies the config's seed (set_seed) when given. Throws what
  // validate_config throws.
  explicit Accelerator(AcceleratorConfig config = {}, std::shared_ptr<ProcessGroup> pg = nullptr);
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // ---- state (AcceleratorState) ----
  const AcceleratorConfig& config() const { return config_; }
  const ShardingPlan& sharding_plan() const { return plan_; }
  // plan's options resolved over the data-parallel ranks (shard::resolve): the ZeRO stage as
  // what is sharded, the (dp_replicate, dp_shard) mesh, FSDP's strategy name.
  const shard::ShardingSpec& sharding_spec() const { return spec_; }
  // The config's distributed_type; NO with several processes becomes MULTI_CPU (as
  // Accelerate infers from the launcher).
  DistributedType distributed_type() const { return distributed_type_; }
  int num_processes() const;
  int process_index() const;
  // The data-parallel dimension: num_processes / (tp_degree x pp_degree) ranks, each with its
  // own samples (the ranks of one dp index share theirs). Without model parallelism: all.
  int data_parallel_size() const { return dp_->size(); }
  int data_parallel_rank() const { return dp_->rank(); }
  int64_t tp_degree() const { return plan_.tp_degree; }
  int64_t pp_degree() const { return plan_.pp_degree; }
  // The (dp, pp, tp) mesh; null without tensor or pipeline parallelism.
  std::shared_ptr<shard::DeviceMesh> mesh() const { return mesh_; }
  std::shared_ptr<ProcessGroup> data_parallel_group() const { return dp_; }
  int local_process_index() const;
  bool is_main_process() const { return process_index() == 0; }
  bool is_local_main_process() const { return local_process_index() == 0; }
  bool is_last_process() const { return process_index() == num_processes() - 1; }
  Device device() const { return kCPU; }
  amp::PrecisionType mixed_precision() const { return config_.mixed_precision; }
  // The job's one precision policy (precision_policy(config), held in the sharding plan's
  // options): what prepared models hold and reduce in, autocast's dtype, whether the
  // GradScaler is on, the optimizer's master and state dtypes.
  const amp::PrecisionPolicy& precision() const { return plan_.options.precision; }
  // Accelerate's accelerator.scaler: the GradScaler under fp16 (precision().needs_grad_scaler()),
  // else null.
  const amp::GradScaler* scaler() const { return scaler_.get(); }
  int64_t gradient_accumulation_steps() const { return accumulation_.num_steps; }
  std::shared_ptr<ProcessGroup> process_group() const { return pg_; }

  // ---- prepare ----
  // Prepares the model for the config's layout (prepared_model.h): a ShardedModel with the
  // sharding plan (stage, wrap policy, MixedPrecision, prefetch, HSDP, offload_param, DDP
  // kwargs), turning on activation checkpointing of its units when the plugin asks.
  // `param_init`: for a model built on the meta device (model_init_context; the whole values
  // of a parameter's elements by name, e.g. CausalLM::init_weights_range bound to a
  // generator): each rank fills only its shards and slices. Without it the model holds its
  // whole initialized values on every rank (the same on all).
  // tp_degree > 1 or pp_degree > 1: the model must be an nn::CausalLM (kNotSupported naming
  // its type otherwise). tp: split over the tp group by its parallel_plan() (shard::parallelize;
  // sequence_parallel from the plan), then sharded over dp. pp: cut into pp_degree stages
  // (shard::CausalLMPipeline, 1F1B; interleaved with num_layers_per_virtual_pipeline_stage),
  // each stage split over tp and sharded over dp; num_micro_batches per step: the plan's, else
  // gradient_accumulation_steps, which gradient_accumulation_steps() returns after.
  // fp16: the GradScaler scales the last stage's loss gradient (Pipeline::set_loss_scale).
  // One pipeline, or any number of other models, per Accelerator.
  std::shared_ptr<PreparedModel> prepare_model(
      std::shared_ptr<nn::Layer> model,
      std::function<void(const std::string&, int64_t, int64_t, float*)> param_init = {});
  // zero3_init_flag (DeepSpeed stage 3) and fsdp_cpu_ram_efficient_loading: a scope in which
  // the model is built on the meta device (nn::InitEmptyWeights; DeepSpeed's
  // zero3_init_context_manager), so no rank ever holds it whole: give prepare_model a
  // param_init (e.g. CausalLM::init_weights_range) that fills each rank's shards. Null when the
  // configuration does not ask for it (the model is built as usual).
  //   std::shared_ptr<nn::CausalLM> model;
  //   { auto scope = acc.model_init_context(); model = build_model(cfg); }
  std::unique_ptr<nn::InitEmptyWeights> model_init_context() const;
  // The loss for the prepared causal LM (vocab-parallel under tp_degree > 1).
  CrossEntropy cross_entropy(nn::CrossEntropyOptions options = {}) const;
  // The optimizer built on prepare_model(...)->optimizer_parameters(): applies the plugin's
  // optimizer offload and registers it for step / save_state. One optimizer per Accelerator.
  void prepare_optimizer(nn::Optimizer& optimizer);
  // Registers the scheduler for scheduler_step / save_state.
  void prepare_scheduler(nn::LRScheduler& scheduler);
  // prepare_data_loader with the config's DataLoaderConfiguration over this group; the
  // accumulate scope reads its end_of_dataloader (sync_with_dataloader).
  // With model parallelism the loader is split over the dp group: the ranks of one dp index
  // get the same batches. save_state records where each prepared loader stands (the loader's
  // own DataLoader::position, which loaders skip_first_batches derives from it share), in
  // order of preparation.
  nn::DataLoader prepare_data_loader(const nn::DataLoader& loader);

  // ---- a training step ----
  // The autocast scope of the precision policy (precision().autocast(): its compute dtype, bf16
  // or f16; "no": none) with the config's AutocastKwargs (Accelerator.autocast). fp8: bf16 autocast
  // with every Linear whose sizes are multiples of 16 running its GEMMs on fp8 operands under
  // fp8_config's delayed-scaling recipe (Transformer Engine's; the scales are updated at each step,
  // the same on every rank).
  amp::AutocastScope autocast() const;

  // Accelerator.accumulate: one micro-batch. sync_gradients() is true when this micro-batch
  // ends an accumulation window (every num_steps micro-batches, or at the end of `loader`
  // with sync_with_dataloader); with sync_each_batch false the model runs without gradient
  // sync inside the window (no_sync).
  class AccumulateScope {
   public:
    ~AccumulateScope();
    AccumulateScope(AccumulateScope&& other) noexcept;
    AccumulateScope(const AccumulateScope&) = delete;
    AccumulateScope& operator=(const AccumulateScope&) = delete;
    AccumulateScope& operator=(AccumulateScope&&) = delete;

   private:
    friend class Accelerator;
    explicit AccumulateScope(Accelerator* acc) : acc_(acc) {}
    Accelerator* acc_;
  };
  AccumulateScope accumulate(const nn::DataLoader* loader = nullptr);
  AccumulateScope accumulate(const nn::DataLoader& loader) { return accumulate(&loader); }
  bool sync_gradients() const { return sync_gradients_; }
  // Accelerator.no_sync: gradients of the next backwards stay local until a synced backward.
  class NoSyncScope {
   public:
    ~NoSyncScope();
    NoSyncScope(NoSyncScope&& other) noexcept;
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;
    NoSyncScope& operator=(NoSyncScope&&) = delete;

   private:
    friend class Accelerator;
    NoSyncScope(shard::ShardedModel* model, bool previous) : model_(model), previous_(previous) {}
    shard::ShardedModel* model_;
    bool previous_;
  };
  NoSyncScope no_sync(PreparedModel& model);

  // Accelerator.backward: the model's backward of the loss gradient (times the GradScaler's
  // scale with fp16). Returns the input's gradient. Not for a pipeline (train_step).
  Tensor backward(PreparedModel& model, const Tensor& grad_of_loss);
  // The window's gradient: finish_gradients once (the mean over the window's micro-batches
  // and the processes), unscaled by the GradScaler with fp16. Called by clip_grad_norm_,
  // clip_grad_value_ and step; idempotent within a window.
  void finish_gradients(PreparedModel& model);
  // The global 2-norm of the whole model's gradient over every dp shard, tp slice and pipeline
  // stage (ShardedModel::clip_grad_norm_, Pipeline::clip_grad_norm_), after finish_gradients.
  // Returns the norm before clipping.
  double clip_grad_norm_(PreparedModel& model, double max_norm);
  // Every gradient element clamped to [-clip_value, clip_value].
  void clip_grad_value_(PreparedModel& model, double clip_value);

  // One optimizer step's forwards and backwards for a causal LM, whatever the layout
  // (Megatron-LM's train_step, which Accelerate's Megatron integration calls): ids[m] /
  // labels[m] for the micro-batches of this dp rank's window, each run under autocast() with
  // cross_entropy()'s loss: one after another with the gradient sync on the last (no
  // pipeline; any count >= 1), or by the pipeline's schedule (exactly its num_micro_batches).
  // The gradients are then finished (the mean over the micro-batches and dp ranks). Ends a
  // window (sync_gradients() true); call it outside accumulate(). Returns the mean loss over
  // the micro-batches.
  double train_step(PreparedModel& model, const std::vector<Tensor>& ids,
                    const std::vector<Tensor>& labels);
  // The optimizer step (through the GradScaler with fp16: skipped when any rank found Inf /
  // NaN), then after_step of every prepared model (and pipeline). Only when sync_gradients();
  // returns whether the optimizer stepped.
  bool step(nn::Optimizer& optimizer);
  bool optimizer_step_was_skipped() const { return step_was_skipped_; }
  // AcceleratedScheduler.step: steps the scheduler only at the end of a window (and
  // num_processes times without split_batches, as Accelerate), not after a skipped step.
  void scheduler_step(nn::LRScheduler& scheduler);
  void zero_grad(nn::Optimizer& optimizer);

  // ---- data across processes (Trees; comm/tree_ops.h) ----
  // gather, gather_for_metrics, reduce and pad_across_processes run over the dp group (the
  // processes that hold different samples); broadcast over every process.
  Tree gather(const Tree& data);
  // gather, then without the samples even_batches repeated to fill the last global batch of
  // `loader`'s pass (GradientState.remainder) when it is at its end.
  Tree gather_for_metrics(const Tree& data, const nn::DataLoader& loader);
  Tree reduce(const Tree& data, std::string_view reduction = "mean");
  Tree pad_across_processes(const Tree& data, int dim = 0, double pad_index = 0,
                            bool pad_first = false);
  Tree broadcast(const Tree& data, int from_process = 0);

  // ---- processes ----
  void print(const std::string& text) const;  // main process only, with a newline
  // A progress bar that reports on the main process only (Accelerate's
  // tqdm(main_process_only=True)); progress.h.
  ProgressBar progress_bar(ProgressOptions options) const;
  void wait_for_everyone();
  // main_process_first: the main process runs fn first, the others after it finished.
  void main_process_first(const std::function<void()>& fn);
  void on_main_process(const std::function<void()>& fn);
  void on_local_main_process(const std::function<void()>& fn);

  // ---- models and states ----
  nn::Layer& unwrap_model(PreparedModel& model) { return model.module(); }
  void register_for_checkpointing(Checkpointable object);
  // save_state: the model and optimizer as a sharded checkpoint (model/, loads at any world
  // size and stage), scheduler, GradScaler and every rank's RNG state in its index, data
  // loader positions (dataloader_<i>.json) and registered objects (custom_checkpoint_<i>.json).
  // `dir` empty: project_dir/checkpoints/checkpoint_<iteration> with
  // automatic_checkpoint_naming (then total_limit oldest ones removed). Returns the folder.
  std::filesystem::path save_state(const std::filesystem::path& dir = {});
  // load_state: the inverse; `dir` empty: the latest checkpoint_<i> under project_dir.
  void load_state(const std::filesystem::path& dir = {});
  // Where the i-th prepared loader was when the loaded state was saved: its epoch, the batches
  // this rank had taken in it (skipped ones of a resumed run included), and the samples all
  // ranks had taken (batches x total_batch_size: divide by the new loader's total_batch_size()
  // to resume at another world size). Resume with set_epoch(epoch) and skip_first_batches;
  // a save after that records the position from the epoch's start again. All zero without a
  // load.
  struct ResumePosition {
    int64_t epoch = 0;
    int64_t batches = 0;
    int64_t samples = 0;
  };
  ResumePosition resumed_position(size_t loader_index = 0) const;
  // save_model: every parameter whole (f32 masters), written by the main process as
  // model.safetensors, or shards + model.safetensors.index.json beyond max_shard_size.
  void save_model(PreparedModel& model, const std::filesystem::path& dir,
                  std::string_view max_shard_size = "10GB");
  // Accelerate's get_state_dict: every parameter whole (f32 masters; tp slices gathered; a
  // pipeline's stages from their ranks) on every process, under the model's state_dict()
  // names. Collective.
  NamedTensors get_state_dict(PreparedModel& model);

  // ---- randomness ----
  void set_seed(uint64_t seed, bool device_specific = false);
  // synchronize_rng_states: every rank takes the main process's generator state.
  void synchronize_rng_states();
  nn::DataLoader skip_first_batches(const nn::DataLoader& loader, int64_t num_batches) const;

  // ---- trackers ----
  void init_trackers(const std::string& project_name, std::optional<HParams> config = {});
  void log(const Scalars& values, int64_t step);
  GeneralTracker& get_tracker(std::string_view name) { return trackers_.get_tracker(name); }
  // Ends the trackers (Accelerator.end_training); the group stays usable.
  void end_training();

  // free_memory: returns the CPU allocator's cached blocks to the OS.
  void free_memory();

  // find_executable_batch_size: calls fn(batch_size) from starting_batch_size, multiplying it
  // by 0.9 (the seed's default; int(b * 0.9): 128, 115, 103, ...) or applying
  // reduce_batch_size_fn (which, unlike the seed's, gets the failed size) after an
  // out-of-memory error, until fn returns. Collective: after
  // each attempt every rank learns whether any rank ran out of memory, so all ranks shrink
  // together and retry with the same size (Accelerate decides per process). fn must run no
  // collective after the point where it may run out of memory (else the other ranks would wait
  // in it for the failed one until the group's deadline). Returns the batch size that worked;
  // kOutOfMemory when it reaches 0.
  int64_t find_executable_batch_size(const std::function<void(int64_t)>& fn,
                                     int64_t starting_batch_size = 128,
                                     std::function<int64_t(int64_t)> reduce_batch_size_fn = {});

 private:
  void begin_micro_batch(const nn::DataLoader* loader);
  void end_micro_batch();
  std::filesystem::path checkpoint_folder(bool for_load) const;
  // Whether this process writes the files one process writes (save_on_each_node).
  bool writes_files() const;
  // The state dict in the dtype save_model writes (zero3_save_16bit_model).
  NamedTensors saved_dtype(NamedTensors state) const;
  void check_optimizer_precision(const nn::Optimizer& optimizer) const;
  // What save_state / load_state write and read, one folder per entry: each prepared model, or
  // the pipeline rank's chunks together.
  std::vector<std::vector<shard::ShardedModel*>> checkpointed_models(const char* what) const;
  // The pipeline's parts of prepare_model, train_step, get_state_dict.
  void prepare_pipeline(
      PreparedModel& out, std::shared_ptr<nn::CausalLM> model,
      const std::function<void(const std::string&, int64_t, int64_t, float*)>& param_init);
  double pipeline_step(shard::CausalLMPipeline& pipeline, const std::vector<Tensor>& ids,
                       const std::vector<Tensor>& labels);
  NamedTensors pipeline_state_dict(shard::CausalLMPipeline& pipeline);
  NamedTensors sharded_state_dict(shard::ShardedModel& model);
  void save_sharded_model(shard::ShardedModel& model, const std::filesystem::path& dir,
                          std::string_view max_shard_size);

  AcceleratorConfig config_;
  ShardingPlan plan_;
  shard::ShardingSpec spec_;
  GradientAccumulationPlugin accumulation_;
  DistributedType distributed_type_ = DistributedType::kNo;
  std::shared_ptr<ProcessGroup> pg_;
  std::shared_ptr<shard::DeviceMesh> mesh_;  // (dp, pp, tp) with model parallelism
  std::shared_ptr<ProcessGroup> dp_;         // the data-parallel group (pg_ without a mesh)
  int64_t vocab_size_ = 0;                   // of the prepared causal LM (vocab-parallel loss)
  std::vector<std::shared_ptr<PreparedModel>> prepared_;      // in order of prepare_model
  std::vector<std::shared_ptr<shard::ShardedModel>> models_;  // theirs without a pipeline
  std::shared_ptr<shard::CausalLMPipeline> pipeline_;
  nn::Optimizer* optimizer_ = nullptr;
  nn::LRScheduler* scheduler_ = nullptr;
  std::unique_ptr<amp::GradScaler> scaler_;
  // mixed_precision fp8: the delayed scalings of every Linear, updated at each step.
  std::unique_ptr<amp::Fp8Training> fp8_;
  // The loaders prepare_data_loader made, in order: where each stands (the loader's own count,
  // shared with the loaders skip_first_batches derives from it) for save_state's
  // dataloader_<i>.json.
  struct PreparedLoader {
    std::function<nn::DataLoaderPosition()> position;
    int64_t total_batch_size = 0;
  };
  std::vector<PreparedLoader> loaders_;
  std::vector<Checkpointable> custom_;
  std::vector<ResumePosition> resumed_;
  Trackers trackers_;

  // The accumulation window.
  int64_t micro_in_window_ = 0;  // micro-batches run in the current window
  int64_t window_size_ = 0;      // micro-batches of the window that ended (for the scale)
  bool sync_gradients_ = true;
  bool finished_ = false;  // finish_gradients ran for this window
  bool step_was_skipped_ = false;
  bool in_accumulate_ = false;
  int64_t iteration_ = 0;  // save_state's automatic naming (ProjectConfiguration.iteration)
};

}  // namespace braid::accel
