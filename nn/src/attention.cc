// CausalSelfAttention (GPT-2's GPT2Attention): c_attn, the fused causal attention core of
// kernels::cpu (causal_attention_forward / _backward: scores, mask, f32 softmax, attention
// dropout and the product with v, per (batch, head), without a T x T tensor kept for backward),
// c_proj and the residual dropout. Children carry transformers' names: c_attn, c_proj,
// attn_dropout, resid_dropout.
#include <cmath>

#include "braid/core/rng.h"
#include "braid/kernels/cpu.h"
#include "braid/nn/gpt.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels::cpu;

struct AttentionCtx {
  Tensor qkv;  // c_attn's output [B, T, 3C], contiguous, compute dtype
  kc::AttentionArgs args;
};

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& cfg)
    : Layer("GPT2Attention"), n_head_(cfg.n_head), n_embd_(cfg.n_embd) {
  cfg.validate();
  c_attn_ =
      register_module("c_attn", std::make_shared<Linear>(cfg.n_embd, 3 * cfg.n_embd, Bias::kYes,
                                                         WeightLayout::kInOut, cfg.dtype));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(cfg.n_embd, cfg.n_embd, Bias::kYes,
                                                               WeightLayout::kInOut, cfg.dtype));
  // attn_dropout holds the probability; the kernel applies it (with the same rule as Dropout,
  // drawn from the default CPU generator).
  attn_drop_ = register_module("attn_dropout", std::make_shared<Dropout>(cfg.attn_pdrop));
  resid_drop_ = register_module("resid_dropout", std::make_shared<Dropout>(cfg.resid_pdrop));
}

Tensor CausalSelfAttention::forward_impl(const Tensor& x) {
  BRAID_CHECK(x.defined() && x.dim() == 3 && x.size(2) == n_embd_, kInvalidArgument,
              "CausalSelfAttention: input must be [batch, seq, n_embd ", n_embd_, "], got ",
              x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  const Tensor qkv = c_attn_->forward(x).contiguous();
  kc::AttentionArgs a;
  a.batch = x.size(0);
  a.seq = x.size(1);
  a.n_head = n_head_;
  a.head_dim = n_embd_ / n_head_;
  a.dtype = qkv.dtype();
  if (attn_drop_->is_training() && attn_drop_->p() > 0.0) {
    // Take the B * n_head * T * T words the mask reads (cpu.h, "attention"), as a Dropout
    // over the probabilities would.
    Generator& gen = default_generator(kCPU);
    const auto words = static_cast<uint64_t>(a.batch * a.n_head * a.seq * a.seq);
    a.dropout_p = attn_drop_->p();
    a.dropout_seed = gen.seed();
    a.dropout_offset = gen.offset();
    gen.set_offset(a.dropout_offset + (words + 3) / 4 * 4);
  }
  Tensor y = Tensor::empty({a.batch, a.seq, n_embd_}, qkv.dtype());
  kc::causal_attention_forward(a, qkv.data_ptr(), y.data_ptr());
  save_for_backward(AttentionCtx{qkv, a});
  return resid_drop_->forward(c_proj_->forward(y));
}

Tensor CausalSelfAttention::backward_impl(const Tensor& grad_output) {
  const Tensor dy = c_proj_->backward(resid_drop_->backward(grad_output));
  AttentionCtx ctx = pop_saved<AttentionCtx>();
  const Tensor dyc = dy.to(ctx.qkv.dtype()).contiguous();
  Tensor dqkv = Tensor::empty(ctx.qkv.shape(), ctx.qkv.dtype());
  kc::causal_attention_backward(ctx.args, ctx.qkv.data_ptr(), dyc.data_ptr(), dqkv.data_ptr());
  return c_attn_->backward(dqkv);
}

}  // namespace braid::nn
