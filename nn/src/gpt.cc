// GPT-2 (transformers' GPT2LMHeadModel) with hand-written backward: MLP, Block, the model with
// its tied language-model head, GPT-2's initialization and sampling (docs/nn.md, "GPT").
// The attention is in attention.cc, the config in gpt_config.cc.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "braid/nn/gpt.h"
#include "causal_lm_util.h"
#include "gpt_internal.h"

namespace braid::nn {
namespace {

// Residual sums keep the stream's dtype (f32 under autocast, as torch promotes bf16 + f32).
Tensor add_as(const Tensor& a, const Tensor& b) {
  return add(a, b.dtype() == a.dtype() ? b : b.to(a.dtype()));
}

struct BlockCtx {
  DType attn_out, mlp_out;  // dtypes of the two branches' outputs
};

// A child by name, looked up on every pass so that a swapped child (tensor parallelism,
// Module::replace_module) is the one that runs.
template <typename T = Layer>
T& sub(const Module& m, std::string_view name) {
  return dynamic_cast<T&>(*m.child(name));
}

}  // namespace

// ---- MLP -----------------------------------------------------------------------------------

MLP::MLP(const GPTConfig& cfg) : Layer("GPT2MLP") {
  cfg.validate();
  auto c_fc = std::make_shared<Linear>(cfg.n_embd, cfg.inner(), Bias::kYes, WeightLayout::kInOut,
                                       cfg.dtype);
  auto act = std::make_shared<Gelu>(cfg.activation);
  auto c_proj = std::make_shared<Linear>(cfg.inner(), cfg.n_embd, Bias::kYes, WeightLayout::kInOut,
                                         cfg.dtype);
  auto dropout = std::make_shared<Dropout>(cfg.resid_pdrop);
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
  register_module("act", act);
  register_module("dropout", dropout);
}

Tensor MLP::forward_impl(const Tensor& x) {
  const Tensor h = sub(*this, "act").forward(sub(*this, "c_fc").forward(x));
  return sub(*this, "dropout").forward(sub(*this, "c_proj").forward(h));
}

Tensor MLP::backward_impl(const Tensor& grad_output) {
  const Tensor g = sub(*this, "c_proj").backward(sub(*this, "dropout").backward(grad_output));
  return sub(*this, "c_fc").backward(sub(*this, "act").backward(g));
}

// ---- Block ---------------------------------------------------------------------------------

Block::Block(const GPTConfig& cfg) : Layer("GPT2Block") {
  register_module("ln_1", std::make_shared<LayerNorm>(cfg.n_embd, cfg.layer_norm_epsilon,
                                                      Bias::kYes, cfg.dtype));
  register_module("attn", std::make_shared<CausalSelfAttention>(cfg));
  register_module("ln_2", std::make_shared<LayerNorm>(cfg.n_embd, cfg.layer_norm_epsilon,
                                                      Bias::kYes, cfg.dtype));
  register_module("mlp", std::make_shared<MLP>(cfg));
}

Tensor Block::forward_impl(const Tensor& x) {
  const Tensor a = sub(*this, "attn").forward(sub(*this, "ln_1").forward(x));
  const Tensor h = add_as(x, a);
  const Tensor m = sub(*this, "mlp").forward(sub(*this, "ln_2").forward(h));
  save_for_backward(BlockCtx{a.dtype(), m.dtype()});
  return add_as(h, m);
}

Tensor Block::backward_impl(const Tensor& grad_output) {
  const BlockCtx ctx = pop_saved<BlockCtx>();
  // out = h + mlp(ln_2(h)); h = x + attn(ln_1(x)).
  const Tensor dh =
      add_as(grad_output,
             sub(*this, "ln_2").backward(sub(*this, "mlp").backward(grad_output.to(ctx.mlp_out))));
  return add_as(dh, sub(*this, "ln_1").backward(sub(*this, "attn").backward(dh.to(ctx.attn_out))));
}

// ---- embedding (shared with GPTStage, gpt_stage.cc) ------------------------------------------

namespace detail {

Tensor gpt_embed_forward(const GPTConfig& cfg, Embedding& wte, Embedding& wpe, Dropout& drop,
                         const Tensor& ids, const char* who) {
  check_ids_shape(ids, who);
  const int64_t seq = ids.size(1);
  BRAID_CHECK(seq <= cfg.n_positions, kInvalidArgument, who, ": sequence length ", seq,
              " exceeds n_positions ", cfg.n_positions);
  const Tensor idc = ids.contiguous();
  check_id_values(idc, cfg.vocab_size, who);
  const Tensor tok = wte.forward(idc);  // [B, T, d]
  const Tensor pos = wpe.forward(Tensor::arange(0, double(seq), 1, DType::kI64, ids.device()));
  return drop.forward(add(tok, pos));
}

void gpt_embed_backward(Embedding& wte, Embedding& wpe, Dropout& drop, const Tensor& grad) {
  const Tensor g = drop.backward(grad);
  // tok + pos broadcast pos over the batch: its gradient is the sum over the batch.
  wpe.backward(sum(g, 0));
  wte.backward(g);
}

}  // namespace detail

// ---- GPT -----------------------------------------------------------------------------------

GPT::GPT(const GPTConfig& cfg) : CausalLM("GPT2LMHeadModel"), cfg_(cfg) {
  cfg_.validate();
  transformer_ = register_module("transformer", std::make_shared<Module>("GPT2Model"));
  auto wte = transformer_->register_module(
      "wte", std::make_shared<Embedding>(cfg.vocab_size, cfg.n_embd, cfg.dtype));
  wpe_ = transformer_->register_module(
      "wpe", std::make_shared<Embedding>(cfg.n_positions, cfg.n_embd, cfg.dtype));
  transformer_->register_module("drop", std::make_shared<Dropout>(cfg.embd_pdrop));
  h_ = transformer_->register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    auto block = std::make_shared<Block>(cfg);
    block->set_checkpointing(cfg.activation_checkpointing);
    h_->push_back(block);
  }
  transformer_->register_module(
      "ln_f",
      std::make_shared<LayerNorm>(cfg.n_embd, cfg.layer_norm_epsilon, Bias::kYes, cfg.dtype));
  // The head is a Linear ([vocab, d], torch's layout, no bias) whose weight is wte's Parameter
  // handle: one tensor, one gradient (tied). Its own initial weight is drawn from a private
  // generator (the default one is not advanced) and dropped.
  Generator unused(0);
  auto lm_head = register_module(
      "lm_head", std::make_shared<Linear>(cfg.n_embd, cfg.vocab_size, Bias::kNo,
                                          WeightLayout::kOutIn, cfg.dtype, &unused));
  lm_head->set_parameter("weight", wte->weight());
}

const ParallelPlan& GPT::parallel_plan() const {
  return gpt_parallel_plan();
}

const ParallelPlan& gpt_parallel_plan() {
  using S = TensorParallelStyle;
  static const ParallelPlan plan = [] {
    ParallelPlan p;
    p.tensor_parallel = {
        {"transformer.h.*.attn.c_attn", S::kColumnwise, 3},  // this rank's heads of q, k and v
        {"transformer.h.*.attn.c_proj", S::kRowwise},
        {"transformer.h.*.attn", S::kHeads},
        {"transformer.h.*.mlp.c_fc", S::kColumnwise},
        {"transformer.h.*.mlp.c_proj", S::kRowwise},
        {"transformer.wte", S::kVocabEmbedding},
        {"lm_head", S::kVocabHead},
    };
    p.sequence_parallel = {
        {"transformer.drop", S::kSequenceScatter},
        {"transformer.h.*.ln_1", S::kSequenceNorm},
        {"transformer.h.*.ln_2", S::kSequenceNorm},
        {"transformer.h.*.attn.resid_dropout", S::kSequenceDropout},
        {"transformer.h.*.mlp.dropout", S::kSequenceDropout},
        {"transformer.ln_f", S::kSequenceNorm},
    };
    p.blocks = "transformer.h";
    p.tied_embedding = "transformer.wte";
    p.tied_head = "lm_head";
    return p;
  }();
  return plan;
}

std::shared_ptr<CausalLMStage> GPT::make_stage(const StageSpec& spec) const {
  return std::make_shared<GPTStage>(cfg_, spec);
}

Block& GPT::block(int64_t i) {
  BRAID_CHECK(i >= 0 && i < cfg_.n_layer, kOutOfRange, "GPT::block: index ", i,
              " is outside [0, n_layer ", cfg_.n_layer, ")");
  return h_->at<Block>(static_cast<size_t>(i));
}

// GPT-2's _init_weights: biases 0, LayerNorm weights 1, c_proj weights
// N(0, initializer_range / sqrt(2 n_layer)), every other weight N(0, initializer_range).
static detail::InitRule gpt_init_rule(const GPTConfig& cfg) {
  const double std_proj = cfg.initializer_range / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  const double std = cfg.initializer_range;
  return [std, std_proj](const std::string& name) {
    using D = detail::InitDraw;
    if (name.ends_with(".bias")) return D{D::kZeros};
    if (name.find(".ln_") != std::string::npos) return D{D::kOnes};
    return D{D::kNormal, name.ends_with("c_proj.weight") ? std_proj : std};
  };
}

void GPT::init_weights_range(const Generator& gen, const std::string& name, int64_t offset,
                             int64_t count, float* dst) const {
  detail::init_range_by_rule(*this, gen, name, offset, count, dst, gpt_init_rule(cfg_), "GPT");
}

void GPT::init_weights(Generator& gen) {
  detail::init_by_rule(*this, gen, gpt_init_rule(cfg_));
}

Tensor GPT::forward_impl(const Tensor& ids) {
  const Module& t = *transformer_;
  Tensor h = detail::gpt_embed_forward(cfg_, sub<Embedding>(t, "wte"), *wpe_,
                                       sub<Dropout>(t, "drop"), ids, "GPT");
  for (int64_t i = 0; i < cfg_.n_layer; ++i) h = block(i).forward(h);
  h = sub(t, "ln_f").forward(h);

  // The head: logits = h wte^T, a Linear in autocast's matmul dtype.
  Tensor logits = sub(*this, "lm_head").forward(h);
  return logits;
}

Tensor GPT::backward_impl(const Tensor& grad_output) {
  const Module& t = *transformer_;
  Tensor g = sub(t, "ln_f").backward(sub(*this, "lm_head").backward(grad_output));
  for (int64_t i = cfg_.n_layer - 1; i >= 0; --i) g = block(i).backward(g);
  detail::gpt_embed_backward(sub<Embedding>(t, "wte"), *wpe_, sub<Dropout>(t, "drop"), g);
  return {};
}

Tensor GPT::generate(const Tensor& ids, int64_t max_new_tokens, double temperature, int64_t top_k,
                     Generator& gen) {
  return detail::generate_tokens(*this, ids,
                                 {.max_new_tokens = max_new_tokens,
                                  .temperature = temperature,
                                  .top_k = top_k,
                                  .context = cfg_.n_positions,
                                  .vocab = cfg_.vocab_size},
                                 gen, "GPT");
}

}  // namespace braid::nn
