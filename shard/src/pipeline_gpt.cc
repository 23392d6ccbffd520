// GPTPipeline (pipeline.h): the GPT cut into GPTStages over the pp ranks, with the tied
// embedding owned by stage 0 and replicated on the last stage, and MegatronLMPlugin's
// num_layers_per_virtual_pipeline_stage turned into virtual stages (docs/parallelism.md).
#include <set>

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
  specs_ = partition_gpt(cfg, S, options.blocks_per_stage, options.partition);
  std::vector<std::shared_ptr<nn::Layer>> chunks;
  for (int64_t c = 0; c < v; ++c) {
    stages_.push_back(std::make_shared<nn::GPTStage>(cfg, specs_[static_cast<size_t>(r + c * p)]));
    chunks.push_back(stages_.back());
  }
  TiedWeight tied;
  if (S > 1) tied = TiedWeight{"transformer.wte", "lm_head"};
  pipeline_ = std::make_unique<Pipeline>(std::move(chunks), std::move(pp), std::move(options),
                                         std::move(tied));
}

void GPTPipeline::init_weights(const Generator& gen) {
  for (size_t c = 0; c < stages_.size(); ++c) {
    ShardedModel* sm = pipeline_->sharded(static_cast<int64_t>(c));
    if (!sm) {
      stages_[c]->init_weights(gen);
      continue;
    }
    // The chunk's parameters belong to the ShardedModel: compute the values on a copy of the
    // stage and load them through it.
    nn::GPTStage fresh(stages_[c]->config(), stages_[c]->spec());
    fresh.init_weights(gen);
    sm->load_full_state_dict(fresh.state_dict());
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
    ShardedModel* sm = pipeline_->sharded(static_cast<int64_t>(c));
    if (sm) {
      sm->load_full_state_dict(part);
    } else {
      stages_[c]->load_state_dict(part);  // strict: every name of the stage must be given
    }
  }
}

}  // namespace braid::shard
