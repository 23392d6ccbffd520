// The Accelerator (accelerator.h, docs/accelerator.md).
#include "braid/accel/accelerator.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "braid/accel/env_utils.h"
#include "braid/comm/object.h"
#include "braid/comm/rank_info.h"
#include "braid/comm/tree_ops.h"
#include "braid/core/allocator.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/core/logging.h"
#include "braid/core/rng.h"
#include "braid/shard/units.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace braid::accel {

namespace {

// The text of a file, or kIo naming it.
std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  BRAID_CHECK(in.good(), kIo, "load_state: cannot open ", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_atomic(const std::filesystem::path& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

// MULTI_GPU means one GPU per process (Accelerate's meaning). The Accelerator trains on cpu
// ranks only so far (docs/gpu.md, "What runs where"): MULTI_GPU is refused with the reason,
// never run silently on the CPU.
[[noreturn]] void refuse_multi_gpu() {
  std::string why;
  try {
    (void)device_runtime(DeviceType::kCUDA);
    why = "a CUDA device is visible, but the Accelerator does not train on GPUs yet (docs/gpu.md)";
  } catch (const Error& e) {
    why = "no usable GPU: " + e.message();
  }
  BRAID_FAIL(kNotSupported, "Accelerator: distributed_type MULTI_GPU: ", why,
             "; use MULTI_CPU (or use_cpu: true) to train on the CPU");
}

}  // namespace

Accelerator::Accelerator(AcceleratorConfig config, std::shared_ptr<ProcessGroup> pg)
    : config_(std::move(config)) {
  validate_config(config_);
  if (config_.distributed_type == DistributedType::kMultiGpu) refuse_multi_gpu();
  plan_ = accel::sharding_plan(config_);
  accumulation_ = gradient_accumulation_plugin(config_);
  BRAID_CHECK(accumulation_.num_steps >= 1, kInvalidArgument,
              "Accelerator: gradient accumulation steps must be >= 1, got ",
              accumulation_.num_steps);
  if (pg == nullptr) {
    ProcessGroupOptions o;
    if (config_.init_process_group_kwargs.backend != "auto" &&
        !config_.init_process_group_kwargs.backend.empty()) {
      o.backend = config_.init_process_group_kwargs.backend;
    }
    o.timeout = config_.init_process_group_kwargs.timeout;
    // debug (ACCELERATE_DEBUG_MODE): the cross-rank check of every collective's arguments.
    if (config_.debug) o.debug_mode = true;
    pg = ProcessGroup::create(o);
  }
  pg_ = std::move(pg);
  const int64_t mp = plan_.tp_degree * plan_.pp_degree;
  if (mp > 1) {
    BRAID_CHECK(pg_->size() % mp == 0, kInvalidArgument, "Accelerator: ", pg_->size(),
                " processes are not a multiple of tp_degree x pp_degree = ", plan_.tp_degree, " x ",
                plan_.pp_degree);
    // tp innermost (neighbouring ranks), as Megatron places it; then pp, then dp.
    mesh_ = std::make_shared<shard::DeviceMesh>(
        pg_, std::vector<int64_t>{pg_->size() / mp, plan_.pp_degree, plan_.tp_degree},
        std::vector<std::string>{"dp", "pp", "tp"});
    dp_ = mesh_->group("dp");
  } else {
    dp_ = pg_;
  }
  // The sharding options over the data-parallel ranks, validated once, before any model.
  spec_ = shard::resolve(plan_.options, dp_->size());
  distributed_type_ = config_.distributed_type;
  if (distributed_type_ == DistributedType::kNo && pg_->size() > 1) {
    distributed_type_ = DistributedType::kMultiCpu;
  }
  for (const std::string& w : plan_.warnings) {
    if (is_main_process()) BRAID_LOG(kWarning) << w;
  }
  if (config_.enable_cpu_affinity) {
    // Accelerate's enable_cpu_affinity: each local process bound to its share of the machine
    // (env_utils.h: by NUMA node), before any worker thread starts.
    const std::vector<int> cpus = set_numa_affinity(local_process_index());
    if (config_.debug) {
      std::string list;
      for (int c : cpus) list += (list.empty() ? "" : ",") + std::to_string(c);
      BRAID_LOG(kInfo) << "enable_cpu_affinity: local process " << local_process_index()
                       << " runs on CPUs " << list;
    }
  }
  iteration_ = config_.project_config.iteration;
  if (config_.seed.has_value()) set_seed(*config_.seed);
  if (precision().needs_grad_scaler()) {
    scaler_ = std::make_unique<amp::GradScaler>(
        amp::GradScaler::for_policy(precision(), config_.grad_scaler_kwargs, pg_));
  }
  if (precision().type == amp::PrecisionType::kFp8) {
    fp8_ = std::make_unique<amp::Fp8Training>(fp8_training_options(config_));
  }
}

Accelerator::~Accelerator() = default;

int Accelerator::num_processes() const {
  return pg_->size();
}
int Accelerator::process_index() const {
  return pg_->rank();
}
int Accelerator::local_process_index() const {
  static const int local = detect_rank_info().local_rank;
  return pg_->size() == 1 ? 0 : local;
}

// ---- prepare --------------------------------------------------------------------------------

std::unique_ptr<nn::InitEmptyWeights> Accelerator::model_init_context() const {
  if (!plan_.init_on_meta) return nullptr;
  return std::make_unique<nn::InitEmptyWeights>();
}

CrossEntropy Accelerator::cross_entropy(nn::CrossEntropyOptions options) const {
  if (plan_.tp_degree > 1 && mesh_) return CrossEntropy(options, mesh_->group("tp"), vocab_size_);
  return CrossEntropy(options);
}

CrossEntropy::CrossEntropy(nn::CrossEntropyOptions options, std::shared_ptr<ProcessGroup> tp,
                           int64_t vocab_size) {
  if (tp) {
    parallel_ = std::make_unique<shard::VocabParallelCrossEntropy>(
        std::move(tp),
        shard::VocabParallelCrossEntropyOptions{.ignore_index = options.ignore_index,
                                                .reduction = options.reduction,
                                                .label_smoothing = options.label_smoothing,
                                                .vocab_size = vocab_size});
  } else {
    plain_ = std::make_unique<nn::CrossEntropyLoss>(options);
  }
}

Tensor CrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  return parallel_ ? parallel_->forward(logits, targets) : plain_->forward(logits, targets);
}

Tensor CrossEntropy::backward(const Tensor& grad_loss) {
  return parallel_ ? parallel_->backward(grad_loss) : plain_->backward(grad_loss);
}

void Accelerator::prepare_optimizer(nn::Optimizer& optimizer) {
  BRAID_CHECK(optimizer_ == nullptr || optimizer_ == &optimizer, kInvalidArgument,
              "Accelerator::prepare_optimizer: one optimizer per Accelerator");
  check_optimizer_precision(optimizer);
  if (plan_.offload_optimizer.device != nn::OffloadDevice::kNone) {
    optimizer.set_offload(plan_.offload_optimizer);
  }
  optimizer_ = &optimizer;
}

// The policy's master_dtype and state_dtype against what the optimizer keeps: braid's
// optimizers keep f32 state and, with MasterWeights::kAuto, an f32 master for every parameter
// stored narrower (prepared models hand them f32 masters or shards already).
void Accelerator::check_optimizer_precision(const nn::Optimizer& optimizer) const {
  const amp::PrecisionPolicy& p = precision();
  BRAID_CHECK(p.master_dtype == DType::kF32 && p.state_dtype == DType::kF32, kNotSupported,
              "Accelerator::prepare_optimizer: the precision policy asks for master_dtype ",
              dtype_name(p.master_dtype), " and state_dtype ", dtype_name(p.state_dtype),
              "; braid's optimizers keep both in f32");
  if (optimizer.master_weights() != nn::MasterWeights::kNone) return;
  size_t i = 0;
  for (const nn::ParamGroup& g : optimizer.param_groups()) {
    for (const nn::Parameter& param : g.params) {
      const DType d = param.data().dtype();
      const bool narrower = is_floating(d) && dtype_size(d) < dtype_size(p.master_dtype);
      BRAID_CHECK(!param.data().defined() || !narrower, kInvalidArgument,
                  "Accelerator::prepare_optimizer: parameter ", i, " is ", dtype_name(d),
                  " and the precision policy keeps ", dtype_name(p.master_dtype),
                  " masters, but the optimizer was built with MasterWeights::kNone; build it "
                  "with MasterWeights::kAuto");
      ++i;
    }
  }
}

void Accelerator::prepare_scheduler(nn::LRScheduler& scheduler) {
  scheduler_ = &scheduler;
}

nn::DataLoader Accelerator::prepare_data_loader(const nn::DataLoader& loader) {
  nn::DataLoader prepared =
      nn::prepare_data_loader(loader, *dp_, config_.dataloader_config, device());
  loaders_.push_back({prepared.position_reader(), prepared.total_batch_size()});
  return prepared;
}

// ---- a training step ---------------------------------------------------------------------

amp::AutocastScope Accelerator::autocast() const {
  return precision().autocast(config_.autocast_kwargs, fp8_.get());
}

Accelerator::AccumulateScope Accelerator::accumulate(const nn::DataLoader* loader) {
  BRAID_CHECK(!in_accumulate_, kInvalidArgument,
              "Accelerator::accumulate: scopes do not nest (one per micro-batch)");
  begin_micro_batch(loader);
  return AccumulateScope(this);
}

Accelerator::AccumulateScope::~AccumulateScope() {
  if (acc_ != nullptr) acc_->end_micro_batch();
}
Accelerator::AccumulateScope::AccumulateScope(AccumulateScope&& other) noexcept
    : acc_(std::exchange(other.acc_, nullptr)) {}

void Accelerator::begin_micro_batch(const nn::DataLoader* loader) {
  in_accumulate_ = true;
  const bool at_end = loader != nullptr && loader->end_of_dataloader();
  ++micro_in_window_;
  sync_gradients_ =
      micro_in_window_ >= accumulation_.num_steps || (accumulation_.sync_with_dataloader && at_end);
  const bool sync = sync_gradients_ || accumulation_.sync_each_batch;
  for (auto& m : models_) m->set_gradient_sync(sync);
}

void Accelerator::end_micro_batch() {
  in_accumulate_ = false;
  if (sync_gradients_) {
    window_size_ = micro_in_window_;
    micro_in_window_ = 0;
  }
}

Accelerator::NoSyncScope Accelerator::no_sync(PreparedModel& model) {
  shard::ShardedModel& sm = model.sharded();
  const bool previous = sm.gradient_sync();
  sm.set_gradient_sync(false);
  return NoSyncScope(&sm, previous);
}
Accelerator::NoSyncScope::~NoSyncScope() {
  if (model_ != nullptr) model_->set_gradient_sync(previous_);
}
Accelerator::NoSyncScope::NoSyncScope(NoSyncScope&& other) noexcept
    : model_(std::exchange(other.model_, nullptr)), previous_(other.previous_) {}

Tensor Accelerator::backward(PreparedModel& prepared, const Tensor& grad_of_loss) {
  BRAID_CHECK(!prepared.pipelined(), kInvalidArgument,
              "Accelerator::backward: a pipeline runs its backwards in train_step");
  shard::ShardedModel& model = prepared.sharded();
  if (!in_accumulate_) {
    // Outside accumulate(): every backward ends a window of one (Accelerate's default).
    micro_in_window_ = 0;
    sync_gradients_ = true;
    window_size_ = 1;
    model.set_gradient_sync(true);
  }
  finished_ = false;
  if (scaler_ && scaler_->is_enabled()) return model.backward(scaler_->scale(grad_of_loss));
  return model.backward(grad_of_loss);
}

void Accelerator::finish_gradients(PreparedModel& prepared) {
  if (finished_) return;
  BRAID_CHECK(!prepared.pipelined(), kInvalidArgument,
              "Accelerator::finish_gradients: run train_step first (a pipeline finishes its "
              "gradients there)");
  shard::ShardedModel& model = prepared.sharded();
  BRAID_CHECK(sync_gradients_, kInvalidArgument,
              "Accelerator: gradients are finished at the end of an accumulation window only "
              "(sync_gradients() is false)");
  const int64_t micro = in_accumulate_ ? micro_in_window_ : std::max<int64_t>(window_size_, 1);
  const double scale = 1.0 / (static_cast<double>(micro) * data_parallel_size());
  model.finish_gradients(scale);
  for (auto& m : models_) {
    if (m.get() != &model) m->finish_gradients(scale);
  }
  if (scaler_ && scaler_->is_enabled() && optimizer_ != nullptr) scaler_->unscale_(*optimizer_);
  finished_ = true;
}

double Accelerator::clip_grad_norm_(PreparedModel& model, double max_norm) {
  if (model.pipelined()) {
    BRAID_CHECK(finished_, kInvalidArgument, "Accelerator::clip_grad_norm_: run train_step first");
    return model.pipeline().pipeline().clip_grad_norm_(max_norm);
  }
  finish_gradients(model);
  return model.sharded().clip_grad_norm_(max_norm);
}

void Accelerator::clip_grad_value_(PreparedModel& model, double clip_value) {
  BRAID_CHECK(clip_value >= 0, kInvalidArgument, "clip_grad_value_: clip_value must be >= 0, got ",
              clip_value);
  if (model.pipelined()) {
    BRAID_CHECK(finished_, kInvalidArgument, "Accelerator::clip_grad_value_: run train_step first");
  } else {
    finish_gradients(model);
  }
  for (auto& p : model.optimizer_parameters()) {
    Tensor& g = p.grad();
    if (!g.defined()) continue;
    BRAID_CHECK(g.dtype() == DType::kF32 && g.is_contiguous(), kInternal,
                "clip_grad_value_: expected contiguous f32 gradients");
    float* x = g.data<float>();
    const auto c = static_cast<float>(clip_value);
    for (int64_t i = 0; i < g.numel(); ++i) x[i] = std::clamp(x[i], -c, c);  // NaN stays NaN
  }
}

bool Accelerator::step(nn::Optimizer& optimizer) {
  step_was_skipped_ = false;
  if (!sync_gradients_) return false;
  if (pipeline_) {
    BRAID_CHECK(finished_, kInvalidArgument, "Accelerator::step: run train_step first");
    if (plan_.gradient_clipping) pipeline_->pipeline().clip_grad_norm_(*plan_.gradient_clipping);
    bool stepped = true;
    if (scaler_ && scaler_->is_enabled()) {
      stepped = scaler_->step(optimizer);  // skipped when any process found Inf / NaN
      scaler_->update();
    } else {
      optimizer.step();
    }
    step_was_skipped_ = !stepped;
    // fp8: the step's amaxes (the same layers on every dp rank of this stage) give the scales.
    if (fp8_) fp8_->update(dp_.get());
    pipeline_->after_step();
    finished_ = false;
    return stepped;
  }
  BRAID_CHECK(!prepared_.empty(), kInvalidArgument, "Accelerator::step: prepare a model first");
  finish_gradients(*prepared_.front());
  // DeepSpeed's / Megatron-LM's gradient_clipping: the engine clips every step at that norm
  // (on top of any clip_grad_norm_ the program ran: the smaller bound holds).
  if (plan_.gradient_clipping) {
    for (auto& m : models_) m->clip_grad_norm_(*plan_.gradient_clipping);
  }
  bool stepped = true;
  if (scaler_ && scaler_->is_enabled()) {
    stepped = scaler_->step(optimizer);
    scaler_->update();
  } else {
    optimizer.step();
  }
  step_was_skipped_ = !stepped;
  if (fp8_) fp8_->update(dp_.get());
  for (auto& m : models_) m->after_step();
  finished_ = false;
  return stepped;
}

void Accelerator::scheduler_step(nn::LRScheduler& scheduler) {
  nn::AcceleratedStepContext ctx;
  ctx.sync_gradients = sync_gradients_;
  ctx.adjust_scheduler = accumulation_.adjust_scheduler;
  ctx.split_batches = config_.dataloader_config.split_batches;
  ctx.num_processes = num_processes();
  ctx.optimizer_step_was_skipped = step_was_skipped_;
  nn::accelerated_scheduler_step(scheduler, ctx);
}

void Accelerator::zero_grad(nn::Optimizer& optimizer) {
  if (sync_gradients_) optimizer.zero_grad();
}

// ---- data across processes ------------------------------------------------------------------

Tree Accelerator::gather(const Tree& data) {
  return braid::gather(*dp_, data);
}

Tree Accelerator::gather_for_metrics(const Tree& data, const nn::DataLoader& loader) {
  Tree all = braid::gather(*dp_, data);
  if (!loader.end_of_dataloader()) return all;
  const int64_t remainder = loader.remainder();
  if (remainder <= 0) return all;
  return slice_tensors(all, 0, remainder);
}

Tree Accelerator::reduce(const Tree& data, std::string_view reduction) {
  return braid::reduce(*dp_, data, reduction);
}

Tree Accelerator::pad_across_processes(const Tree& data, int dim, double pad_index,
                                       bool pad_first) {
  return braid::pad_across_processes(*dp_, data, dim, pad_index, pad_first);
}

Tree Accelerator::broadcast(const Tree& data, int from_process) {
  return braid::broadcast(*pg_, data, from_process);
}

// ---- processes --------------------------------------------------------------------------------

void Accelerator::print(const std::string& text) const {
  if (!is_main_process()) return;
  std::cout << text << '\n' << std::flush;
}

ProgressBar Accelerator::progress_bar(ProgressOptions options) const {
  options.enabled = options.enabled && is_main_process();
  return ProgressBar(std::move(options));
}

namespace {

// <i> of a checkpoint_<i> folder (digits, by the callers' regex); nullopt when it does not fit
// an int64 (a folder someone else named), which std::stoll would have thrown for.
std::optional<int64_t> checkpoint_number(const std::string& digits) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

// save_state / load_state report each part they write or read at info level (Accelerate logs
// the same at INFO): the models, then the loaders and registered objects.
ProgressBar checkpoint_progress(const std::string& what, const std::filesystem::path& folder,
                                int64_t parts, bool main) {
  return ProgressBar({.desc = what + " " + folder.string(),
                      .total = parts,
                      .unit = "parts",
                      .enabled = main,
                      .sink = [](const std::string& line) { BRAID_LOG(kInfo) << line; }});
}

}  // namespace

void Accelerator::wait_for_everyone() {
  pg_->barrier();
}

void Accelerator::main_process_first(const std::function<void()>& fn) {
  if (is_main_process()) fn();
  pg_->barrier();
  if (!is_main_process()) fn();
  pg_->barrier();
}

void Accelerator::on_main_process(const std::function<void()>& fn) {
  if (is_main_process()) fn();
}

void Accelerator::on_local_main_process(const std::function<void()>& fn) {
  if (is_local_main_process()) fn();
}

// ---- states -------------------------------------------------------------------------------

void Accelerator::register_for_checkpointing(Checkpointable object) {
  BRAID_CHECK(object.state_json && object.load_state_json, kInvalidArgument,
              "register_for_checkpointing: the object needs state_json and load_state_json");
  custom_.push_back(std::move(object));
}

std::filesystem::path Accelerator::checkpoint_folder(bool for_load) const {
  const ProjectConfiguration& pc = config_.project_config;
  BRAID_CHECK(pc.automatic_checkpoint_naming, kInvalidArgument,
              "Accelerator::", for_load ? "load_state" : "save_state",
              ": give a folder, or set project_config.automatic_checkpoint_naming");
  const auto root = pc.project_dir / "checkpoints";
  if (!for_load) return root / ("checkpoint_" + std::to_string(iteration_));
  // The latest checkpoint_<i>.
  int64_t best = -1;
  if (std::filesystem::is_directory(root)) {
    static const std::regex name("checkpoint_([0-9]+)");
    for (const auto& e : std::filesystem::directory_iterator(root)) {
      std::smatch m;
      const std::string f = e.path().filename().string();
      if (!std::regex_match(f, m, name)) continue;
      if (const auto n = checkpoint_number(m[1].str())) best = std::max(best, *n);
    }
  }
  BRAID_CHECK(best >= 0, kInvalidArgument, "Accelerator::load_state: no checkpoint_<i> in ",
              root.string());
  return root / ("checkpoint_" + std::to_string(best));
}

std::vector<std::vector<shard::ShardedModel*>> Accelerator::checkpointed_models(
    const char* what) const {
  std::vector<std::vector<shard::ShardedModel*>> out;
  if (pipeline_) {
    // A pipeline rank's chunks (several with virtual stages) share the optimizer and a folder.
    std::vector<shard::ShardedModel*> chunks;
    for (int64_t c = 0; c < pipeline_->pipeline().shape().virtual_stages; ++c) {
      chunks.push_back(pipeline_->pipeline().sharded(c));
    }
    out.push_back(chunks);
  } else {
    for (auto& m : models_) out.push_back({m.get()});
  }
  BRAID_CHECK(!out.empty(), kInvalidArgument, "Accelerator::", what, ": prepare a model first");
  return out;
}

std::filesystem::path Accelerator::save_state(const std::filesystem::path& dir) {
  const auto models = checkpointed_models("save_state");
  const bool automatic = dir.empty();
  const std::filesystem::path folder = automatic ? checkpoint_folder(false) : dir;
  if (writes_files()) std::filesystem::create_directories(folder);
  pg_->barrier();
  ProgressBar progress = checkpoint_progress(
      "save_state", folder, static_cast<int64_t>(models.size()) + 1, is_main_process());
  // The model(s) and optimizer: sharded checkpoints whose index also carries the scheduler,
  // the scaler and every rank's RNG state.
  // A pipeline's stages each save their pieces into the same folder (their checkpoint group
  // is every process), under the model's names: it loads at any layout.
  for (size_t i = 0; i < models.size(); ++i) {
    const auto sub = folder / (i == 0 ? std::string("model") : "model_" + std::to_string(i));
    const shard::TrainingState extra{.scheduler = i == 0 ? scheduler_ : nullptr,
                                     .scaler = i == 0 ? scaler_.get() : nullptr,
                                     .rng_states = i == 0};
    shard::ShardedModel::save_checkpoint(models[i], sub, i == 0 ? optimizer_ : nullptr,
                                         {{"iteration", std::to_string(iteration_)}}, extra);
    progress.update();
  }
  if (plan_.state_dict_type == FsdpStateDictType::kFullStateDict) {
    // FULL_STATE_DICT (DDP's and FSDP 1's default, Accelerate's model.safetensors /
    // pytorch_model_fsdp.bin): the model's tensors whole as well, in the file transformers and
    // safetensors read, beside the sharded checkpoint load_state resumes from.
    for (size_t i = 0; i < prepared_.size(); ++i) {
      save_model(*prepared_[i],
                 i == 0 ? folder : folder / ("model_" + std::to_string(i) + "_full"));
    }
  }
  if (writes_files()) {
    for (size_t i = 0; i < loaders_.size(); ++i) {
      const nn::DataLoaderPosition at = loaders_[i].position();
      nlohmann::json j = {{"epoch", at.epoch},
                          {"batches", at.batches},
                          {"samples", at.batches * loaders_[i].total_batch_size}};
      write_text_atomic(folder / ("dataloader_" + std::to_string(i) + ".json"), j.dump());
    }
    for (size_t i = 0; i < custom_.size(); ++i) {
      write_text_atomic(folder / ("custom_checkpoint_" + std::to_string(i) + ".json"),
                        custom_[i].state_json());
    }
  }
  pg_->barrier();
  progress.update();
  if (automatic) {
    ++iteration_;
    // total_limit: the oldest checkpoint_<i> beyond the limit go (Accelerate's rotation).
    const auto& limit = config_.project_config.total_limit;
    if (limit.has_value() && writes_files()) {
      std::vector<std::pair<int64_t, std::filesystem::path>> all;
      static const std::regex name("checkpoint_([0-9]+)");
      for (const auto& e : std::filesystem::directory_iterator(folder.parent_path())) {
        std::smatch m;
        const std::string f = e.path().filename().string();
        if (!std::regex_match(f, m, name)) continue;
        if (const auto n = checkpoint_number(m[1].str())) all.emplace_back(*n, e.path());
      }
      std::sort(all.begin(), all.end());
      for (size_t i = 0; i + static_cast<size_t>(*limit) < all.size(); ++i) {
        std::filesystem::remove_all(all[i].second);
      }
    }
    pg_->barrier();
  }
  return folder;
}

void Accelerator::load_state(const std::filesystem::path& dir) {
  const auto models = checkpointed_models("load_state");
  const bool automatic = dir.empty();
  const std::filesystem::path folder = automatic ? checkpoint_folder(true) : dir;
  BRAID_CHECK(std::filesystem::is_directory(folder / "model"), kInvalidArgument,
              "Accelerator::load_state: ", folder.string(),
              " is not a saved state (no model/ folder)");
  ProgressBar progress = checkpoint_progress(
      "load_state", folder, static_cast<int64_t>(models.size()) + 1, is_main_process());
  for (size_t i = 0; i < models.size(); ++i) {
    const auto sub = folder / (i == 0 ? std::string("model") : "model_" + std::to_string(i));
    const shard::TrainingState extra{.scheduler = i == 0 ? scheduler_ : nullptr,
                                     .scaler = i == 0 ? scaler_.get() : nullptr,
                                     .rng_states = i == 0};
    shard::ShardedModel::load_checkpoint(models[i], sub, i == 0 ? optimizer_ : nullptr, extra);
    progress.update();
  }
  resumed_.clear();
  for (size_t i = 0;; ++i) {
    const auto f = folder / ("dataloader_" + std::to_string(i) + ".json");
    if (!std::filesystem::exists(f)) break;
    const std::string text = read_text(f);
    try {  // a file from disk: what the JSON library throws on it is corrupt data
      const auto j = nlohmann::json::parse(text);
      // Integers only: get<int64_t> converts a JSON float (1e48) with undefined behaviour.
      const auto integer = [&](const char* key) {
        const nlohmann::json& v = j.at(key);
        BRAID_CHECK(v.is_number_integer(), kCorruptData, "Accelerator::load_state: ", f.string(),
                    ": ", key, " is ", v.dump(), ", expected an integer");
        return v.get<int64_t>();
      };
      resumed_.push_back({integer("epoch"), integer("batches"), integer("samples")});
    } catch (const nlohmann::json::exception& e) {
      BRAID_FAIL(kCorruptData, "Accelerator::load_state: ", f.string(),
                 " is not the data loader position save_state writes (an object of integers "
                 "epoch, batches, samples): ",
                 e.what());
    }
  }
  for (size_t i = 0; i < custom_.size(); ++i) {
    const auto f = folder / ("custom_checkpoint_" + std::to_string(i) + ".json");
    BRAID_CHECK(std::filesystem::exists(f), kInvalidArgument,
                "Accelerator::load_state: ", folder.string(), " has no ", f.filename().string(),
                " for registered object ", i);
    custom_[i].load_state_json(read_text(f));
  }
  if (automatic) {
    // The next automatic save follows the loaded one.
    // checkpoint_folder(true) found it by its number, which fits an int64.
    iteration_ =
        *checkpoint_number(folder.filename().string().substr(std::string("checkpoint_").size())) +
        1;
  }
  progress.update();
  micro_in_window_ = 0;
  finished_ = false;
}

bool Accelerator::writes_files() const {
  // save_on_each_node: the main process of every machine writes (non-shared file systems).
  return is_main_process() || (config_.project_config.save_on_each_node && is_local_main_process());
}

NamedTensors Accelerator::saved_dtype(NamedTensors state) const {
  if (!plan_.save_16bit_model) return state;
  // zero3_save_16bit_model: the weights in the 16-bit dtype the model computes in (bf16 or
  // f16 under mixed precision; f32 without, and for keep_in_fp32_modules), as DeepSpeed's
  // consolidated 16-bit state dict.
  for (auto& [name, t] : state) {
    const DType dtype = precision().param_dtype_for(name);
    if (is_floating(t.dtype()) && t.dtype() != dtype) t = t.to(dtype);
  }
  return state;
}

Accelerator::ResumePosition Accelerator::resumed_position(size_t loader_index) const {
  if (loader_index >= resumed_.size()) return {};
  return resumed_[loader_index];
}

NamedTensors Accelerator::get_state_dict(PreparedModel& model) {
  return model.pipelined() ? pipeline_state_dict(model.pipeline())
                           : sharded_state_dict(model.sharded());
}

NamedTensors Accelerator::sharded_state_dict(shard::ShardedModel& model) {
  if (model.options().tensor_parallel) {
    return saved_dtype(
        shard::tensor_parallel_full_state_dict(model, *model.options().tensor_parallel));
  }
  return saved_dtype(model.full_state_dict());
}

NamedTensors Accelerator::pipeline_state_dict(shard::CausalLMPipeline& pipeline) {
  // Each stage's tensors, whole (tp gathered), from the first rank of its dp x tp block, to
  // every process (an object all-gather: names, shapes and data in rank order).
  NamedTensors mine = pipeline.global_state_dict();  // collective over dp and tp
  const bool owner = !mesh_ || (mesh_->local_rank("dp") == 0 && mesh_->local_rank("tp") == 0);
  Tree::Map map;
  if (owner) {
    for (auto& [name, t] : mine) map.emplace_back(name, Tree(t));
  }
  NamedTensors out;
  for (const Tree& rank : all_gather_object(*pg_, Tree(std::move(map)))) {
    for (const auto& [name, t] : rank.map()) out.emplace_back(name, t.tensor());
  }
  return saved_dtype(std::move(out));
}

void Accelerator::save_model(PreparedModel& model, const std::filesystem::path& dir,
                             std::string_view max_shard_size) {
  if (!model.pipelined()) {
    save_sharded_model(model.sharded(), dir, max_shard_size);
    return;
  }
  // The pipeline's state dict leaves the tied replica out already.
  NamedTensors state = pipeline_state_dict(model.pipeline());  // collective
  if (writes_files()) save_sharded(dir, state, max_shard_size, {{"format", "pt"}});
  pg_->barrier();
}

void Accelerator::save_sharded_model(shard::ShardedModel& model, const std::filesystem::path& dir,
                                     std::string_view max_shard_size) {
  NamedTensors state = sharded_state_dict(model);  // collective
  if (writes_files()) {
    // Tied weights appear under each of their names in the state dict; safetensors (and
    // transformers' save_pretrained) keep the first: drop the other names.
    std::set<std::string> first_names, all_names;
    for (auto& [name, p] : model.module().named_parameters(/*remove_duplicate=*/true)) {
      first_names.insert(name);
    }
    for (auto& [name, p] : model.module().named_parameters(/*remove_duplicate=*/false)) {
      all_names.insert(name);
    }
    NamedTensors unique;
    for (auto& [name, t] : state) {
      if (all_names.count(name) && !first_names.count(name)) continue;
      unique.emplace_back(name, t);
    }
    save_sharded(dir, unique, max_shard_size, {{"format", "pt"}});
  }
  pg_->barrier();
}

// ---- randomness ---------------------------------------------------------------------------

void Accelerator::set_seed(uint64_t seed, bool device_specific) {
  braid::set_seed(device_specific ? seed + static_cast<uint64_t>(process_index()) : seed);
}

void Accelerator::synchronize_rng_states() {
  std::vector<uint8_t> state = default_generator(kCPU).get_state();
  Tensor t = Tensor::empty({static_cast<int64_t>(state.size())}, DType::kU8);
  std::copy(state.begin(), state.end(), t.data<uint8_t>());
  pg_->broadcast(t, 0);
  default_generator(kCPU).set_state(
      std::span<const uint8_t>(t.data<uint8_t>(), static_cast<size_t>(t.numel())));
}

nn::DataLoader Accelerator::skip_first_batches(const nn::DataLoader& loader,
                                               int64_t num_batches) const {
  return nn::skip_first_batches(loader, num_batches);
}

// ---- trackers -------------------------------------------------------------------------------

void Accelerator::init_trackers(const std::string& project_name, std::optional<HParams> config) {
  TrackersOptions o;
  for (const std::string& name : config_.log_with) o.log_with.push_back(parse_logger_type(name));
  const ProjectConfiguration& pc = config_.project_config;
  o.logging_dir = pc.logging_dir.empty() ? pc.project_dir : pc.logging_dir;
  o.project_name = project_name;
  o.config = std::move(config);
  o.is_main_process = is_main_process();
  trackers_.init(std::move(o));
}

void Accelerator::log(const Scalars& values, int64_t step) {
  trackers_.log(values, step);
}

void Accelerator::end_training() {
  trackers_.end_training();
}

void Accelerator::free_memory() {
  get_allocator(kCPU).empty_cache();
}

// ---- find_executable_batch_size -------------------------------------------------------------

int64_t Accelerator::find_executable_batch_size(const std::function<void(int64_t)>& fn,
                                                int64_t starting_batch_size,
                                                std::function<int64_t(int64_t)> reduce_fn) {
  // The seed's default: the batch size times 0.9 after each failure (int(batch_size * 0.9)).
  if (!reduce_fn) reduce_fn = [](int64_t b) { return static_cast<int64_t>(double(b) * 0.9); };
  int64_t batch = starting_batch_size;
  while (true) {
    BRAID_CHECK(batch > 0, kOutOfMemory,
                "find_executable_batch_size: no batch size down to 1 fits in memory (started at ",
                starting_batch_size, ")");
    bool oom = false;
    std::string message;
    try {
      fn(batch);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOutOfMemory) throw;
      oom = true;
      message = e.message();
    }
    // Every rank learns whether any rank ran out of memory: all shrink together.
    Tensor flag = Tensor::full({1}, oom ? 1.0 : 0.0, DType::kF32);
    CallOptions max;
    max.op = ReduceOp::kMax;
    pg_->all_reduce(flag, max);
    if (flag.item() == 0.0) return batch;
    if (oom) {
      BRAID_LOG(kWarning) << "find_executable_batch_size: batch size " << batch
                          << " ran out of memory (" << message << "); trying smaller";
    }
    free_memory();
    batch = reduce_fn(batch);
  }
}

}  // namespace braid::accel
