// The Accelerator's model preparation and training step for every layout (accelerator.h,
// prepared_model.h): data parallel, tensor parallel from the model's own ParallelPlan, and
// pipeline parallel over the model's stages; no model family is named here.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/accel/accelerator.h"
#include "braid/core/error.h"
#include "braid/nn/causal_lm.h"

namespace braid::accel {

// ---- PreparedModel ------------------------------------------------------------------------

Tensor PreparedModel::forward(const Tensor& x) {
  BRAID_CHECK(!pipelined(), kInvalidArgument,
              "PreparedModel::forward: the model is cut into pipeline stages; run its "
              "micro-batches with Accelerator::train_step");
  return sharded_->forward(x);
}

std::vector<nn::Parameter> PreparedModel::optimizer_parameters() const {
  return pipelined() ? pipeline_->parameters() : sharded_->optimizer_parameters();
}

shard::ShardedModel& PreparedModel::sharded() {
  BRAID_CHECK(sharded_ != nullptr, kInvalidArgument,
              "PreparedModel::sharded: the model is cut into pipeline stages (pipeline())");
  return *sharded_;
}

shard::CausalLMPipeline& PreparedModel::pipeline() {
  BRAID_CHECK(pipeline_ != nullptr, kInvalidArgument,
              "PreparedModel::pipeline: the model is not cut into pipeline stages (pp_degree 1)");
  return *pipeline_;
}

// ---- prepare ------------------------------------------------------------------------------

namespace {

std::shared_ptr<nn::CausalLM> as_causal_lm(const std::shared_ptr<nn::Layer>& model,
                                           const char* why) {
  auto lm = std::dynamic_pointer_cast<nn::CausalLM>(model);
  BRAID_CHECK(lm != nullptr, kNotSupported, "Accelerator::prepare_model: ", why,
              " splits a model by its parallel plan (nn::CausalLM); ", model->type_name(),
              " has none");
  return lm;
}

}  // namespace

std::shared_ptr<PreparedModel> Accelerator::prepare_model(
    std::shared_ptr<nn::Layer> model,
    std::function<void(const std::string&, int64_t, int64_t, float*)> param_init) {
  BRAID_CHECK(model != nullptr, kInvalidArgument, "Accelerator::prepare_model: no model");
  BRAID_CHECK(pipeline_ == nullptr, kInvalidArgument,
              "Accelerator::prepare_model: a pipeline is already prepared (one per Accelerator)");
  std::shared_ptr<PreparedModel> out(new PreparedModel());
  if (plan_.pp_degree > 1) {
    BRAID_CHECK(prepared_.empty(), kInvalidArgument, "Accelerator::prepare_model: pp_degree ",
                plan_.pp_degree,
                " makes the model a pipeline, and a pipeline is the only model of an "
                "Accelerator; another model is prepared already");
    prepare_pipeline(*out, as_causal_lm(model, "pp_degree > 1"), param_init);
    prepared_.push_back(out);
    return out;
  }
  shard::ShardingOptions options = plan_.options;
  if (param_init) options.param_init = param_init;
  if (plan_.tp_degree > 1) {
    auto lm = as_causal_lm(model, "tp_degree > 1");
    vocab_size_ = lm->vocab_size();
    out->vocab_size_ = vocab_size_;
    // A model on the meta device gets each module's whole values from param_init just before
    // it is split; afterwards every parameter holds this rank's slice.
    options.tensor_parallel =
        shard::parallelize(*lm, *mesh_, lm->parallel_plan(),
                           {.sequence_parallel = plan_.sequence_parallel, .init = param_init});
    options.param_init = nullptr;
    options.checkpoint_group = pg_;  // every rank of the mesh writes its pieces
    out->tp_plan_ = options.tensor_parallel;
  } else if (auto lm = std::dynamic_pointer_cast<nn::CausalLM>(model)) {
    vocab_size_ = lm->vocab_size();
    out->vocab_size_ = vocab_size_;
  }
  out->sharded_ = std::make_shared<shard::ShardedModel>(std::move(model), dp_, options);
  models_.push_back(out->sharded_);
  prepared_.push_back(out);
  return out;
}

void Accelerator::prepare_pipeline(
    PreparedModel& out, std::shared_ptr<nn::CausalLM> model,
    const std::function<void(const std::string&, int64_t, int64_t, float*)>& param_init) {
  const int64_t M = plan_.num_micro_batches > 0 ? plan_.num_micro_batches : accumulation_.num_steps;
  BRAID_CHECK(plan_.num_micro_batches <= 0 || accumulation_.num_steps == 1 ||
                  accumulation_.num_steps == plan_.num_micro_batches,
              kInvalidArgument, "Accelerator::prepare_model: megatron_lm_num_micro_batches ",
              plan_.num_micro_batches, " and gradient accumulation steps ", accumulation_.num_steps,
              " disagree; a pipeline step runs the micro-batches of one window: give one");
  accumulation_.num_steps = M;  // gradient_accumulation_steps(): the window a step runs
  std::shared_ptr<ProcessGroup> tp;
  if (plan_.tp_degree > 1) tp = mesh_->group("tp");
  shard::PipelineOptions o;
  o.schedule = shard::PipelineSchedule::k1F1B;
  if (plan_.num_layers_per_virtual_pipeline_stage > 0) {
    // Megatron's virtual pipeline: v = blocks / (pp x L) chunks per rank, interleaved 1F1B.
    o.schedule = shard::PipelineSchedule::kInterleaved1F1B;
    o.num_layers_per_virtual_pipeline_stage = plan_.num_layers_per_virtual_pipeline_stage;
  }
  o.num_micro_batches = M;
  o.dp_group = dp_;
  o.sharding = plan_.options;
  o.sharding.checkpoint_group = pg_;  // every stage's ranks write into one folder
  o.tp_group = tp;
  o.tensor_parallel.sequence_parallel = plan_.sequence_parallel && tp != nullptr;
  if (o.sharding.wrap.kind == shard::WrapKind::kTransformerBased) {
    // A stage whose blocks are all wrapped leaves its root unit empty (Pipeline refuses it):
    // each stage is one unit.
    o.sharding.wrap.kind = shard::WrapKind::kNoWrap;
  }
  pipeline_ = std::make_shared<shard::CausalLMPipeline>(model, mesh_->group("pp"), o);
  if (param_init) {
    pipeline_->init_from(param_init);
  } else {
    pipeline_->load_state_dict(model->state_dict());
  }
  vocab_size_ = model->vocab_size();
  out.pipeline_ = pipeline_;
  out.vocab_size_ = vocab_size_;
}

// ---- the training step --------------------------------------------------------------------

double Accelerator::train_step(PreparedModel& model, const std::vector<Tensor>& ids,
                               const std::vector<Tensor>& labels) {
  BRAID_CHECK(!in_accumulate_, kInvalidArgument,
              "Accelerator::train_step: a train step is a whole window; call it outside "
              "accumulate()");
  BRAID_CHECK(!ids.empty() && ids.size() == labels.size(), kInvalidArgument,
              "Accelerator::train_step: ", ids.size(), " micro-batches of ids and ", labels.size(),
              " of labels; expected the same count >= 1");
  if (model.pipelined()) return pipeline_step(model.pipeline(), ids, labels);
  shard::ShardedModel& sm = model.sharded();
  CrossEntropy ce = cross_entropy();
  const auto n = static_cast<int64_t>(ids.size());
  double loss = 0;
  for (int64_t m = 0; m < n; ++m) {
    // As accumulate(): the gradient sync on the window's last micro-batch only (or each,
    // with sync_each_batch).
    sm.set_gradient_sync(m == n - 1 || accumulation_.sync_each_batch);
    auto scope = autocast();
    loss +=
        ce.forward(sm.forward(ids[static_cast<size_t>(m)]), labels[static_cast<size_t>(m)]).item();
    const Tensor g = ce.backward();
    sm.backward(scaler_ && scaler_->is_enabled() ? scaler_->scale(g) : g);
  }
  micro_in_window_ = 0;
  window_size_ = n;
  sync_gradients_ = true;
  finished_ = false;
  finish_gradients(model);  // 1 / (n x dp), unscaled with fp16
  return loss / static_cast<double>(n);
}

double Accelerator::pipeline_step(shard::CausalLMPipeline& pipeline, const std::vector<Tensor>& ids,
                                  const std::vector<Tensor>& labels) {
  const bool scaled = scaler_ && scaler_->is_enabled();
  // fp16: the loss gradient scaled as GradScaler::scale does (its f32 scale).
  if (scaled) {
    pipeline.pipeline().set_loss_scale(static_cast<float>(scaler_->get_scale()));
  }
  double loss = 0;
  {
    auto scope = autocast();
    loss = pipeline.step(ids, labels);  // finishes the gradients: 1 / (M x dp)
  }
  // Unscaled (found-inf agreed by every process) before clipping, as finish_gradients does.
  if (scaled && optimizer_ != nullptr) scaler_->unscale_(*optimizer_);
  micro_in_window_ = 0;
  window_size_ = static_cast<int64_t>(ids.size());
  sync_gradients_ = true;
  finished_ = true;
  return loss;
}

}  // namespace braid::accel
