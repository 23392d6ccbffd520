// Llama (transformers' LlamaForCausalLM) with hand-written backward: LlamaMLP, the decoder
// layer, the model with its head, the parallel plan, initialization and sampling (docs/nn.md,
// "Llama"). The attention is in llama_attention.cc, the config in llama_config.cc, pipeline
// stages in llama_stage.cc, folders in llama_io.cc.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "braid/nn/llama.h"
#include "braid/tensor/ops.h"
#include "causal_lm_util.h"
#include "llama_internal.h"

namespace braid::nn {
namespace {

// Residual sums keep the stream's dtype (f32 under autocast, as torch promotes bf16 + f32).
Tensor add_as(const Tensor& a, const Tensor& b) {
  return add(a, b.dtype() == a.dtype() ? b : b.to(a.dtype()));
}

template <typename T = Layer>
T& sub(const Module& m, std::string_view name) {
  return dynamic_cast<T&>(*m.child(name));
}

struct MlpCtx {
  Tensor act, up;  // silu(gate(x)) and up(x)
};

struct LayerCtx {
  DType attn_out, mlp_out;
};

}  // namespace

// ---- LlamaMLP --------------------------------------------------------------------------------

LlamaMLP::LlamaMLP(const LlamaConfig& cfg) : Layer("LlamaMLP") {
  cfg.validate();
  const Bias bias = cfg.mlp_bias ? Bias::kYes : Bias::kNo;
  const int64_t d = cfg.hidden_size, inter = cfg.intermediate_size;
  register_module("gate_proj",
                  std::make_shared<Linear>(d, inter, bias, WeightLayout::kOutIn, cfg.dtype));
  register_module("up_proj",
                  std::make_shared<Linear>(d, inter, bias, WeightLayout::kOutIn, cfg.dtype));
  register_module("down_proj",
                  std::make_shared<Linear>(inter, d, bias, WeightLayout::kOutIn, cfg.dtype));
  register_module("act_fn", std::make_shared<Silu>());
}

Tensor LlamaMLP::forward_impl(const Tensor& x) {
  const Tensor act = sub(*this, "act_fn").forward(sub(*this, "gate_proj").forward(x));
  const Tensor up = sub(*this, "up_proj").forward(x);
  save_for_backward(MlpCtx{act, up});
  return sub(*this, "down_proj").forward(mul(act, up.to(act.dtype())));
}

Tensor LlamaMLP::backward_impl(const Tensor& grad_output) {
  const MlpCtx ctx = pop_saved<MlpCtx>();
  const Tensor dh = sub(*this, "down_proj").backward(grad_output).to(ctx.act.dtype());
  // h = act * up: d act = dh * up, d up = dh * act.
  const Tensor dgate = sub(*this, "act_fn").backward(mul(dh, ctx.up.to(dh.dtype())));
  const Tensor dx = sub(*this, "gate_proj").backward(dgate);
  return add(dx, sub(*this, "up_proj").backward(mul(dh, ctx.act).to(ctx.up.dtype())));
}

// ---- LlamaDecoderLayer -----------------------------------------------------------------------

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& cfg) : Layer("LlamaDecoderLayer") {
  register_module("self_attn", std::make_shared<LlamaAttention>(cfg));
  register_module("mlp", std::make_shared<LlamaMLP>(cfg));
  register_module("input_layernorm", detail::llama_rms_norm(cfg));
  register_module("post_attention_layernorm", detail::llama_rms_norm(cfg));
}

Tensor LlamaDecoderLayer::forward_impl(const Tensor& x) {
  const Tensor a = sub(*this, "self_attn").forward(sub(*this, "input_layernorm").forward(x));
  const Tensor h = add_as(x, a);
  const Tensor m = sub(*this, "mlp").forward(sub(*this, "post_attention_layernorm").forward(h));
  save_for_backward(LayerCtx{a.dtype(), m.dtype()});
  return add_as(h, m);
}

Tensor LlamaDecoderLayer::backward_impl(const Tensor& grad_output) {
  const LayerCtx ctx = pop_saved<LayerCtx>();
  // out = h + mlp(post_ln(h)); h = x + self_attn(input_ln(x)).
  const Tensor dh =
      add_as(grad_output, sub(*this, "post_attention_layernorm")
                              .backward(sub(*this, "mlp").backward(grad_output.to(ctx.mlp_out))));
  return add_as(dh, sub(*this, "input_layernorm")
                        .backward(sub(*this, "self_attn").backward(dh.to(ctx.attn_out))));
}

// ---- embedding and head (shared with LlamaStage) --------------------------------------------

namespace detail {

std::shared_ptr<Embedding> llama_embedding(const LlamaConfig& cfg) {
  auto embed = std::make_shared<Embedding>(cfg.vocab_size, cfg.hidden_size, cfg.dtype);
  // torch's padding_idx: positions holding the pad id add nothing to the embedding's gradient
  // (a tied head's contribution to that row stays, as in torch).
  if (cfg.pad_token_id >= 0) embed->set_padding_idx(cfg.pad_token_id);
  return embed;
}

Tensor llama_embed_forward(const LlamaConfig& cfg, Layer& embed, const Tensor& ids,
                           const char* who) {
  check_ids_shape(ids, who);
  const Tensor idc = ids.contiguous();
  check_id_values(idc, cfg.vocab_size, who);
  return embed.forward(idc);
}

InitRule llama_init_rule(const LlamaConfig& cfg) {
  const double std = cfg.initializer_range;
  return [std](const std::string& name) {
    using D = InitDraw;
    if (name.ends_with(".bias")) return D{D::kZeros};
    if (name.ends_with("norm.weight"))
      return D{D::kOnes};  // every RMSNorm ("...layernorm", "norm")
    return D{D::kNormal, std};
  };
}

}  // namespace detail

// ---- Llama -----------------------------------------------------------------------------------

Llama::Llama(const LlamaConfig& cfg) : CausalLM("LlamaForCausalLM"), cfg_(cfg) {
  cfg_.validate();
  model_ = register_module("model", std::make_shared<Module>("LlamaModel"));
  auto embed = model_->register_module("embed_tokens", detail::llama_embedding(cfg));
  layers_ = model_->register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    auto layer = std::make_shared<LlamaDecoderLayer>(cfg);
    layer->set_checkpointing(cfg.activation_checkpointing);
    layers_->push_back(layer);
  }
  model_->register_module("norm", detail::llama_rms_norm(cfg));
  // Tied: the head's own initial weight comes from a private generator (the default one is not
  // advanced) and is replaced by embed_tokens' handle. Untied: its own parameter.
  Generator unused(0);
  auto lm_head = register_module(
      "lm_head",
      std::make_shared<Linear>(cfg.hidden_size, cfg.vocab_size, Bias::kNo, WeightLayout::kOutIn,
                               cfg.dtype, cfg.tie_word_embeddings ? &unused : nullptr));
  if (cfg.tie_word_embeddings) lm_head->set_parameter("weight", embed->weight());
  plan_ = detail::llama_parallel_plan(cfg_);
}

namespace detail {

ParallelPlan llama_parallel_plan(const LlamaConfig& cfg) {
  using S = TensorParallelStyle;
  ParallelPlan p;
  p.tensor_parallel = {
      {"model.layers.*.self_attn.q_proj", S::kColumnwise},
      {"model.layers.*.self_attn.k_proj", S::kColumnwise},
      {"model.layers.*.self_attn.v_proj", S::kColumnwise},
      {"model.layers.*.self_attn.o_proj", S::kRowwise},
      {"model.layers.*.self_attn", S::kHeads},
      {"model.layers.*.mlp.gate_proj", S::kColumnwise},
      {"model.layers.*.mlp.up_proj", S::kColumnwise},
      {"model.layers.*.mlp.down_proj", S::kRowwise},
      {"model.embed_tokens", S::kVocabEmbedding},
      {"lm_head", S::kVocabHead},
  };
  // Sequence parallelism (Megatron's, as for Llama in Megatron-LM and torch's SequenceParallel
  // style): the residual stream between the column / row pairs holds seq / tp positions. Llama
  // has no dropout after the embedding, so the sequence is split at the embedding itself: its
  // vocab-parallel partial rows are reduce-scattered along the sequence instead of all-reduced.
  // The RMSNorms run on the rank's positions; q/k/v, gate/up and the head all-gather the
  // sequence, so the rotary angles see whole sequences (positions 0 .. T-1).
  p.sequence_parallel = {
      {"model.embed_tokens", S::kSequenceScatter},
      {"model.layers.*.input_layernorm", S::kSequenceNorm},
      {"model.layers.*.post_attention_layernorm", S::kSequenceNorm},
      {"model.norm", S::kSequenceNorm},
  };
  p.blocks = "model.layers";
  if (cfg.tie_word_embeddings) {
    p.tied_embedding = "model.embed_tokens";
    p.tied_head = "lm_head";
  }
  return p;
}

}  // namespace detail

std::shared_ptr<CausalLMStage> Llama::make_stage(const StageSpec& spec) const {
  return std::make_shared<LlamaStage>(cfg_, spec);
}

LlamaDecoderLayer& Llama::layer(int64_t i) {
  BRAID_CHECK(i >= 0 && i < cfg_.num_hidden_layers, kOutOfRange, "Llama::layer: index ", i,
              " is outside [0, num_hidden_layers ", cfg_.num_hidden_layers, ")");
  return layers_->at<LlamaDecoderLayer>(static_cast<size_t>(i));
}

void Llama::init_weights(Generator& gen) {
  detail::init_by_rule(*this, gen, detail::llama_init_rule(cfg_));
  if (cfg_.pad_token_id >= 0) {
    get_submodule("model.embed_tokens").param("weight").data().select(0, cfg_.pad_token_id).zero_();
  }
}

void Llama::init_weights_range(const Generator& gen, const std::string& name, int64_t offset,
                               int64_t count, float* dst) const {
  detail::init_range_by_rule(*this, gen, name, offset, count, dst, detail::llama_init_rule(cfg_),
                             "Llama");
  // transformers zeroes the padding_idx row after the draw.
  if (cfg_.pad_token_id < 0 || name != "model.embed_tokens.weight") return;
  const int64_t row_begin = cfg_.pad_token_id * cfg_.hidden_size;
  const int64_t begin = std::max(offset, row_begin);
  const int64_t end = std::min(offset + count, row_begin + cfg_.hidden_size);
  for (int64_t i = begin; i < end; ++i) dst[i - offset] = 0.0f;
}

Tensor Llama::forward_impl(const Tensor& ids) {
  Tensor h = detail::llama_embed_forward(cfg_, sub(*model_, "embed_tokens"), ids, "Llama");
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) h = layer(i).forward(h);
  return sub(*this, "lm_head").forward(sub(*model_, "norm").forward(h));
}

Tensor Llama::backward_impl(const Tensor& grad_output) {
  Tensor g = sub(*model_, "norm").backward(sub(*this, "lm_head").backward(grad_output));
  for (int64_t i = cfg_.num_hidden_layers - 1; i >= 0; --i) g = layer(i).backward(g);
  sub(*model_, "embed_tokens").backward(g);
  return {};
}

Tensor Llama::generate(const Tensor& ids, int64_t max_new_tokens, double temperature, int64_t top_k,
                       Generator& gen) {
  return detail::generate_tokens(*this, ids,
                                 {.max_new_tokens = max_new_tokens,
                                  .temperature = temperature,
                                  .top_k = top_k,
                                  .context = cfg_.max_position_embeddings,
                                  .vocab = cfg_.vocab_size},
                                 gen, "Llama");
}

}  // namespace braid::nn
