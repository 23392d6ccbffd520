// GPTStage: a contiguous slice of the GPT (embedding, blocks [a, b), ln_f + head) for one
// pipeline stage, built from the same layers as GPT and run in the same order, so the stages
// of a pipeline together compute the bits GPT computes (docs/parallelism.md, "Pipeline
// parallelism").
#include <string>
#include <string_view>

#include "braid/nn/gpt.h"
#include "causal_lm_util.h"
#include "gpt_internal.h"

namespace braid::nn {
namespace {

// A child by name, looked up on every pass so that a swapped child (tensor parallelism,
// Module::replace_module) is the one that runs.
template <typename T>
T& sub(const Module& m, std::string_view name) {
  return dynamic_cast<T&>(*m.child(name));
}

}  // namespace

GPTStage::GPTStage(const GPTConfig& cfg, StageSpec spec)
    : CausalLMStage("GPTStage"), cfg_(cfg), spec_(spec) {
  cfg_.validate();
  BRAID_CHECK(
      spec.first_block >= 0 && spec.first_block <= spec.end_block && spec.end_block <= cfg.n_layer,
      kInvalidArgument, "GPTStage: blocks [", spec.first_block, ", ", spec.end_block,
      ") are not a range inside [0, n_layer ", cfg.n_layer, "]");
  BRAID_CHECK(spec.embedding || spec.head || spec.first_block < spec.end_block, kInvalidArgument,
              "GPTStage: blocks [", spec.first_block, ", ", spec.end_block,
              ") without the embedding or the head hold nothing");
  auto transformer = register_module("transformer", std::make_shared<Module>("GPT2Model"));
  transformer_ = transformer;
  std::shared_ptr<Embedding> wte;
  if (spec.embedding) {
    wte = transformer->register_module(
        "wte", std::make_shared<Embedding>(cfg.vocab_size, cfg.n_embd, cfg.dtype));
    transformer->register_module(
        "wpe", std::make_shared<Embedding>(cfg.n_positions, cfg.n_embd, cfg.dtype));
    transformer->register_module("drop", std::make_shared<Dropout>(cfg.embd_pdrop));
  }
  // A container without a forward (as GPT's ModuleList), its children named by their index in
  // the whole model, so the parameter names are GPT's.
  h_ = transformer->register_module("h", std::make_shared<Module>("ModuleList"));
  for (int64_t i = spec.first_block; i < spec.end_block; ++i) {
    auto block = h_->register_module(std::to_string(i), std::make_shared<Block>(cfg));
    block->set_checkpointing(cfg.activation_checkpointing);
  }
  if (spec.head) {
    transformer->register_module(
        "ln_f",
        std::make_shared<LayerNorm>(cfg.n_embd, cfg.layer_norm_epsilon, Bias::kYes, cfg.dtype));
    // As GPT: the head's own initial weight comes from a private generator and is dropped (tied)
    // or overwritten (the replica: init_weights, a state dict, or the pipeline's first sync).
    Generator unused(0);
    auto lm_head = register_module(
        "lm_head", std::make_shared<Linear>(cfg.n_embd, cfg.vocab_size, Bias::kNo,
                                            WeightLayout::kOutIn, cfg.dtype, &unused));
    if (spec.embedding) lm_head->set_parameter("weight", wte->weight());
  }
}

Block& GPTStage::block(int64_t i) {
  BRAID_CHECK(i >= spec_.first_block && i < spec_.end_block, kOutOfRange, "GPTStage::block: index ",
              i, " is outside this stage's blocks [", spec_.first_block, ", ", spec_.end_block,
              ")");
  return dynamic_cast<Block&>(*h_->child(std::to_string(i)));
}

void GPTStage::init_weights(const Generator& gen) {
  // A GPT on the meta device knows where each parameter's draws start (init_weights_range).
  const GPTConfig cfg = cfg_;
  const auto whole = detail::build_on_meta([&] { return std::make_shared<GPT>(cfg); });
  // The replica of the tied head takes wte's values.
  detail::init_stage_from_whole(*this, *whole, gen, "lm_head.weight", "transformer.wte.weight",
                                "GPTStage");
}

Tensor GPTStage::forward_impl(const Tensor& x) {
  Tensor h;
  if (spec_.embedding) {
    h = detail::gpt_embed_forward(cfg_, sub<Embedding>(*transformer_, "wte"),
                                  sub<Embedding>(*transformer_, "wpe"),
                                  sub<Dropout>(*transformer_, "drop"), x, "GPTStage");
  } else {
    BRAID_CHECK(x.defined() && x.dim() == 3 && x.size(2) == cfg_.n_embd, kInvalidArgument,
                "GPTStage (blocks [", spec_.first_block, ", ", spec_.end_block,
                ")): the input must be hidden states [batch, seq, n_embd ", cfg_.n_embd, "], got ",
                x.defined() ? shape_str(x.shape()) : std::string("undefined"));
    h = x;
  }
  for (int64_t i = spec_.first_block; i < spec_.end_block; ++i) h = block(i).forward(h);
  if (spec_.head) {
    h = sub<Layer>(*transformer_, "ln_f").forward(h);
    h = sub<Layer>(*this, "lm_head").forward(h);
  }
  return h;
}

Tensor GPTStage::backward_impl(const Tensor& grad_output) {
  Tensor g = grad_output;
  if (spec_.head) {
    g = sub<Layer>(*transformer_, "ln_f").backward(sub<Layer>(*this, "lm_head").backward(g));
  }
  for (int64_t i = spec_.end_block - 1; i >= spec_.first_block; --i) g = block(i).backward(g);
  if (!spec_.embedding) return g;
  detail::gpt_embed_backward(sub<Embedding>(*transformer_, "wte"),
                             sub<Embedding>(*transformer_, "wpe"),
                             sub<Dropout>(*transformer_, "drop"), g);
  return {};
}

}  // namespace braid::nn
