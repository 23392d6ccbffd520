// GPTPipeline (pipeline.h): the GPT cut into GPTStages over the pp ranks, with the tied
// embedding owned by stage 0 and replicated on the last stage, and MegatronLMPlugin's
// num_layers_per_virtual_pipeline_stage turned into virtual stages (docs/parallelism.md).
#include <map>
#include <set>
#include <string>

#include "braid/core/error.h"
#include "braid/shard/pipeline.h"

namespace braid::shard {
namespace {

// Megatron's num_layers_per_virtual_pipeline_stage = L: v = n_layer / (p L) chunks per rank,
// L blocks each.
PipelineOptions resolve(const nn::GPTConfig& cfg, int64_t p, PipelineOptions o) {
  const int64_t L = o.num_layers_per_virtual_pipeline_stage;
  if (L <= 0) return o;
  BRAID_CHECK(cfg.n_layer % (p * L) == 0, kInvalidArgument,
              "GPTPipeline: num_layers_per_virtual_pipeline_stage = ", L, " with pp = ", p,
              " must divide n_layer = ", cfg.n_layer, " into p x L blocks per round");
  o.virtual_stages = cfg.n_layer / (p * L);
  if (o.blocks_per_stage.empty()) {
    o.blocks_per_stage.assign(static_cast<size_t>(p * o.virtual_stages), L);
  }
  return o;
}

}  // namespace

GPTPipeline::GPTPipeline(const nn::GPTConfig& cfg, std::shared_ptr<ProcessGroup> pp,
                         PipelineOptions options) {
  BRAID_CHECK(pp != nullptr && pp->rank() >= 0, kInvalidArgument,
              "GPTPipeline: this rank is not a member of the pp group");
  const int64_t p = pp->size(), r = pp->rank();
  options = resolve(cfg, p, std::move(options));
  const int64_t v = options.virtual_stages, S = p * v;
  BRAID_CHECK(v >= 1, kInvalidArgument, "GPTPipeline: virtual_stages = ", v, " must be >= 1");
  if (options.tp_group) {
    tp_ = options.tp_group;
    tp_options_ = options.tensor_parallel;
    if (options.vocab_size == 0) options.vocab_size = cfg.vocab_size;
  }
  specs_ = partition_gpt(cfg, S, options.blocks_per_stage, options.partition);
  std::vector<std::shared_ptr<nn::Layer>> chunks;
  for (int64_t c = 0; c < v; ++c) {
    auto stage = std::make_shared<nn::GPTStage>(cfg, specs_[static_cast<size_t>(r + c * p)]);
    if (tp_) {
      // Before the Pipeline exists: its tied-weight hooks and replica are the parallel layers'.
      auto plan = parallelize_gpt_stage(*stage, tp_, tp_options_);
      std::map<std::string, TensorSlice> slices;
      for (auto& [name, prm] : stage->named_parameters()) {
        if (const TensorSlice* sl = plan->slice(prm)) slices.emplace(name, *sl);
      }
      plans_.push_back(std::move(plan));
      slices_.push_back(std::move(slices));
    }
    stages_.push_back(stage);
    chunks.push_back(stage);
  }
  TiedWeight tied;
  if (S > 1) tied = TiedWeight{"transformer.wte", "lm_head"};
  pipeline_ = std::make_unique<Pipeline>(std::move(chunks), std::move(pp), std::move(options),
                                         std::move(tied), plans_);
}

std::shared_ptr<const TensorParallelPlan> GPTPipeline::plan(int64_t c) const {
  BRAID_CHECK(c >= 0 && c < static_cast<int64_t>(stages_.size()), kOutOfRange,
              "GPTPipeline::plan: ", c, " is outside [0, ", stages_.size(), ")");
  return plans_.empty() ? nullptr : plans_[static_cast<size_t>(c)];
}

namespace {

// A whole stage of `like`'s shape, built without advancing the default generator (the layers'
// constructors draw from it).
std::unique_ptr<nn::GPTStage> whole_stage(const nn::GPTStage& like) {
  Generator& dflt = default_generator(kCPU);
  const std::vector<uint8_t> state = dflt.get_state();
  auto out = std::make_unique<nn::GPTStage>(like.config(), like.spec());
  dflt.set_state(state);
  return out;
}

}  // namespace

NamedTensors GPTPipeline::local_state(nn::GPTStage& whole) const {
  if (tp_) {
    TensorParallelOptions o = tp_options_;
    o.init = nullptr;  // `whole` holds values
    parallelize_gpt_stage(whole, tp_, o);
  }
  return whole.state_dict();
}

void GPTPipeline::init_weights(const Generator& gen) {
  for (size_t c = 0; c < stages_.size(); ++c) {
    ShardedModel* sm = pipeline_->sharded(static_cast<int64_t>(c));
    if (!sm && !tp_) {
      stages_[c]->init_weights(gen);
      continue;
    }
    // The chunk's parameters belong to the ShardedModel, or are split over tp: compute the
    // whole values on a copy of the stage, split them as the chunk is, and load them.
    auto fresh = whole_stage(*stages_[c]);
    fresh->init_weights(gen);
    const NamedTensors state = local_state(*fresh);
    if (sm) {
      sm->load_full_state_dict(state);
    } else {
      stages_[c]->load_state_dict(state);
    }
  }
}

void GPTPipeline::load_state_dict(const NamedTensors& state) {
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

NamedTensors GPTPipeline::global_state_dict() {
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
