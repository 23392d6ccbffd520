// CausalLMPipeline (pipeline.h): any causal LM cut into its stages over the pp ranks, with a
// tied embedding owned by stage 0 and replicated on the last stage, and MegatronLMPlugin's
// num_layers_per_virtual_pipeline_stage turned into virtual stages (docs/parallelism.md).
#include <map>
#include <set>
#include <string>

#include "braid/core/error.h"
#include "braid/shard/pipeline.h"

namespace braid::shard {
namespace {

// Megatron's num_layers_per_virtual_pipeline_stage = L: v = blocks / (p L) chunks per rank,
// L blocks each.
PipelineOptions resolve(int64_t blocks, int64_t p, PipelineOptions o) {
  const int64_t L = o.num_layers_per_virtual_pipeline_stage;
  if (L <= 0) return o;
  BRAID_CHECK(blocks % (p * L) == 0, kInvalidArgument,
              "CausalLMPipeline: num_layers_per_virtual_pipeline_stage = ", L, " with pp = ", p,
              " must divide the model's ", blocks, " blocks into p x L blocks per round");
  o.virtual_stages = blocks / (p * L);
  if (o.blocks_per_stage.empty()) {
    o.blocks_per_stage.assign(static_cast<size_t>(p * o.virtual_stages), L);
  }
  return o;
}

}  // namespace

CausalLMPipeline::CausalLMPipeline(std::shared_ptr<const nn::CausalLM> model,
                                   std::shared_ptr<ProcessGroup> pp, PipelineOptions options)
    : model_(std::move(model)) {
  BRAID_CHECK(model_ != nullptr, kInvalidArgument, "CausalLMPipeline: no model");
  BRAID_CHECK(pp != nullptr && pp->rank() >= 0, kInvalidArgument,
              "CausalLMPipeline: this rank is not a member of the pp group");
  const int64_t p = pp->size(), r = pp->rank();
  options = resolve(model_->num_blocks(), p, std::move(options));
  const int64_t v = options.virtual_stages, S = p * v;
  BRAID_CHECK(v >= 1, kInvalidArgument, "CausalLMPipeline: virtual_stages = ", v, " must be >= 1");
  const nn::ParallelPlan& plan = model_->parallel_plan();
  if (options.tp_group) {
    tp_ = options.tp_group;
    tp_options_ = options.tensor_parallel;
    if (options.vocab_size == 0) options.vocab_size = model_->vocab_size();
  }
  checkpointing_ = options.sharding.activation_checkpointing;
  specs_ = partition_stages(*model_, S, options.blocks_per_stage, options.partition);
  std::vector<std::shared_ptr<nn::Layer>> chunks;
  for (int64_t c = 0; c < v; ++c) {
    auto stage = model_->make_stage(specs_[static_cast<size_t>(r + c * p)]);
    if (checkpointing_) {
      // Every block of the stage (a stage holding only the embedding or the head may have no
      // block list).
      for (auto& [path, m] : stage->named_modules()) {
        if (path != plan.blocks) continue;
        for (auto& [name, block] : m->named_children()) {
          auto* layer = dynamic_cast<nn::Layer*>(block.get());
          BRAID_CHECK(layer != nullptr, kInvalidArgument, "CausalLMPipeline: block '", plan.blocks,
                      ".", name, "' is a ", block->type_name(), ", not a Layer");
          layer->set_checkpointing(true);
        }
      }
    }
    if (tp_) {
      // Before the Pipeline exists: its tied-weight hooks and replica are the parallel layers'.
      auto tp_plan = parallelize(*stage, tp_, plan, tp_options_);
      std::map<std::string, TensorSlice> slices;
      for (auto& [name, prm] : stage->named_parameters()) {
        if (const TensorSlice* sl = tp_plan->slice(prm)) slices.emplace(name, *sl);
      }
      plans_.push_back(std::move(tp_plan));
      slices_.push_back(std::move(slices));
    }
    stages_.push_back(stage);
    chunks.push_back(stage);
  }
  TiedWeight tied;
  if (S > 1 && plan.tied()) tied = TiedWeight{plan.tied_embedding, plan.tied_head};
  pipeline_ = std::make_unique<Pipeline>(std::move(chunks), std::move(pp), std::move(options),
                                         std::move(tied), plans_);
}

std::shared_ptr<const TensorParallelPlan> CausalLMPipeline::plan(int64_t c) const {
  BRAID_CHECK(c >= 0 && c < static_cast<int64_t>(stages_.size()), kOutOfRange,
              "CausalLMPipeline::plan: ", c, " is outside [0, ", stages_.size(), ")");
  return plans_.empty() ? nullptr : plans_[static_cast<size_t>(c)];
}

std::shared_ptr<nn::CausalLMStage> CausalLMPipeline::whole_stage(
    const nn::CausalLMStage& like) const {
  // The layers' constructors draw from the default generator: put it back.
  Generator& dflt = default_generator(kCPU);
  const std::vector<uint8_t> state = dflt.get_state();
  auto out = model_->make_stage(like.spec());
  dflt.set_state(state);
  return out;
}

NamedTensors CausalLMPipeline::local_state(nn::CausalLMStage& whole) const {
  if (tp_) {
    TensorParallelOptions o = tp_options_;
    o.init = nullptr;  // `whole` holds values
    parallelize(whole, tp_, model_->parallel_plan(), o);
  }
  return whole.state_dict();
}

void CausalLMPipeline::init_weights(const Generator& gen) {
  init_from([&](const std::string& name, int64_t offset, int64_t count, float* dst) {
    model_->init_weights_range(gen, name, offset, count, dst);
  });
}

void CausalLMPipeline::init_from(const ParamInit& init) {
  BRAID_CHECK(init != nullptr, kInvalidArgument, "CausalLMPipeline::init_from: no initializer");
  const nn::ParallelPlan& plan = model_->parallel_plan();
  for (size_t c = 0; c < stages_.size(); ++c) {
    // One whole stage at a time: its values from `init` (a tied replica takes the
    // embedding's), split as the chunk is, then loaded into the chunk (or its ShardedModel).
    auto fresh = whole_stage(*stages_[c]);
    for (auto& [name, p] : fresh->named_parameters()) {
      Tensor& data = p.data();
      BRAID_CHECK(data.dtype() == DType::kF32 && data.device() == kCPU && data.is_contiguous(),
                  kInvalidArgument, "CausalLMPipeline::init_from: '", name,
                  "' must be a contiguous f32 cpu tensor, got ", data.dtype(), " on ",
                  data.device().str());
      const bool replica = plan.tied() && name == plan.tied_head + ".weight";
      init(replica ? plan.tied_embedding + ".weight" : name, 0, data.numel(), data.data<float>());
    }
    const NamedTensors state = local_state(*fresh);
    if (ShardedModel* sm = pipeline_->sharded(static_cast<int64_t>(c))) {
      sm->load_full_state_dict(state);
    } else {
      stages_[c]->load_state_dict(state);
    }
  }
}

void CausalLMPipeline::load_state_dict(const NamedTensors& state) {
  for (size_t c = 0; c < stages_.size(); ++c) {
    std::set<std::string> mine;
    for (auto& [name, t] : stages_[c]->state_dict()) mine.insert(name);
    NamedTensors part;
    for (auto& [name, t] : state) {
      if (mine.count(name)) part.emplace_back(name, t);
    }
    if (tp_) {
      // The whole values, then this rank's slices of them.
      auto fresh = whole_stage(*stages_[c]);
      fresh->load_state_dict(part);
      part = local_state(*fresh);
    }
    ShardedModel* sm = pipeline_->sharded(static_cast<int64_t>(c));
    if (sm) {
      sm->load_full_state_dict(part);
    } else {
      stages_[c]->load_state_dict(part);  // strict: every name of the stage must be given
    }
  }
}

NamedTensors CausalLMPipeline::global_state_dict() {
  NamedTensors local = pipeline_->state_dict();  // collective over dp
  if (!tp_) return local;
  NamedTensors out;
  for (auto& [name, t] : local) {
    const TensorSlice* slice = nullptr;
    for (auto& m : slices_) {
      auto it = m.find(name);
      if (it != m.end()) slice = &it->second;
    }
    if (slice == nullptr) {  // replicated: the same on every tp rank
      out.emplace_back(name, t);
      continue;
    }
    out.emplace_back(name, gather_global(t, *slice, *tp_));
  }
  return out;
}

}  // namespace braid::shard
