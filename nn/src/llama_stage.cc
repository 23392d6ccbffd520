// LlamaStage: a contiguous slice of the Llama (embed_tokens, layers [a, b), norm + lm_head) for
// one pipeline stage, built from the same layers as Llama and run in the same order, so the
// stages of a pipeline together compute the bits Llama computes (as GPTStage).
#include <string>
#include <string_view>

#include "braid/nn/llama.h"
#include "llama_internal.h"

namespace braid::nn {
namespace {

template <typename T = Layer>
T& sub(const Module& m, std::string_view name) {
  return dynamic_cast<T&>(*m.child(name));
}

}  // namespace

LlamaStage::LlamaStage(const LlamaConfig& cfg, StageSpec spec)
    : CausalLMStage("LlamaStage"), cfg_(cfg), spec_(spec) {
  cfg_.validate();
  const int64_t n = cfg.num_hidden_layers;
  BRAID_CHECK(spec.first_block >= 0 && spec.first_block <= spec.end_block && spec.end_block <= n,
              kInvalidArgument, "LlamaStage: layers [", spec.first_block, ", ", spec.end_block,
              ") are not a range inside [0, num_hidden_layers ", n, "]");
  BRAID_CHECK(spec.embedding || spec.head || spec.first_block < spec.end_block, kInvalidArgument,
              "LlamaStage: layers [", spec.first_block, ", ", spec.end_block,
              ") without the embedding or the head hold nothing");
  model_ = register_module("model", std::make_shared<Module>("LlamaModel"));
  std::shared_ptr<Embedding> embed;
  if (spec.embedding) {
    embed = model_->register_module("embed_tokens", detail::llama_embedding(cfg));
  }
  // Children named by their index in the whole model, so the parameter names are Llama's.
  layers_ = model_->register_module("layers", std::make_shared<Module>("ModuleList"));
  for (int64_t i = spec.first_block; i < spec.end_block; ++i) {
    auto layer =
        layers_->register_module(std::to_string(i), std::make_shared<LlamaDecoderLayer>(cfg));
    layer->set_checkpointing(cfg.activation_checkpointing);
  }
  if (spec.head) {
    model_->register_module("norm", detail::llama_rms_norm(cfg));
    // Tied with the embedding here: its handle. Tied with the embedding on another stage: a
    // replica the pipeline keeps equal to it. Untied: the head's own weight.
    Generator unused(0);
    auto lm_head = register_module(
        "lm_head", std::make_shared<Linear>(cfg.hidden_size, cfg.vocab_size, Bias::kNo,
                                            WeightLayout::kOutIn, cfg.dtype, &unused));
    if (cfg.tie_word_embeddings && spec.embedding)
      lm_head->set_parameter("weight", embed->weight());
  }
}

LlamaDecoderLayer& LlamaStage::layer(int64_t i) {
  BRAID_CHECK(i >= spec_.first_block && i < spec_.end_block, kOutOfRange,
              "LlamaStage::layer: index ", i, " is outside this stage's layers [",
              spec_.first_block, ", ", spec_.end_block, ")");
  return dynamic_cast<LlamaDecoderLayer&>(*layers_->child(std::to_string(i)));
}

void LlamaStage::init_weights(const Generator& gen) {
  const LlamaConfig cfg = cfg_;
  const auto whole = detail::build_on_meta([&] { return std::make_shared<Llama>(cfg); });
  // A tied head's replica takes embed_tokens' values; an untied head has its own.
  detail::init_stage_from_whole(*this, *whole, gen, cfg.tie_word_embeddings ? "lm_head.weight" : "",
                                "model.embed_tokens.weight", "LlamaStage");
}

Tensor LlamaStage::forward_impl(const Tensor& x) {
  Tensor h;
  if (spec_.embedding) {
    h = detail::llama_embed_forward(cfg_, sub(*model_, "embed_tokens"), x, "LlamaStage");
  } else {
    BRAID_CHECK(x.defined() && x.dim() == 3 && x.size(2) == cfg_.hidden_size, kInvalidArgument,
                "LlamaStage (layers [", spec_.first_block, ", ", spec_.end_block,
                ")): the input must be hidden states [batch, seq, hidden_size ", cfg_.hidden_size,
                "], got ", x.defined() ? shape_str(x.shape()) : std::string("undefined"));
    h = x;
  }
  for (int64_t i = spec_.first_block; i < spec_.end_block; ++i) h = layer(i).forward(h);
  if (spec_.head) h = sub(*this, "lm_head").forward(sub(*model_, "norm").forward(h));
  return h;
}

Tensor LlamaStage::backward_impl(const Tensor& grad_output) {
  Tensor g = grad_output;
  if (spec_.head) g = sub(*model_, "norm").backward(sub(*this, "lm_head").backward(g));
  for (int64_t i = spec_.end_block - 1; i >= spec_.first_block; --i) g = layer(i).backward(g);
  if (!spec_.embedding) return g;
  sub(*model_, "embed_tokens").backward(g);
  return {};
}

}  // namespace braid::nn
