// CausalSelfAttention (GPT-2's GPT2Attention): c_attn, the fused causal attention core of the
// kernel table of the input's device (causal_attention_forward / _backward: scores, mask, f32
// softmax, attention dropout and the product with v, per (batch, head), without a T x T tensor kept
// for backward), c_proj and the residual dropout. Children carry transformers' names: c_attn,
// c_proj, attn_dropout, resid_dropout.
#include <cmath>
#include <string_view>

#include "braid/core/rng.h"
#include "braid/kernels/table.h"
#include "braid/nn/gpt.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels;

struct AttentionCtx {
  Tensor qkv;  // c_attn's output [B, T, 3C], contiguous, compute dtype
  kc::AttentionArgs args;
  // Tensor parallelism with dropout: the kernel runs per batch row, row b drawing its mask at
  // dropout_offset + b * row_words (Note [Attention dropout under tensor parallelism]).
  bool per_row = false;
  uint64_t row_words = 0;
};

Layer& sub(const Module& m, std::string_view name) {
  return dynamic_cast<Layer&>(*m.child(name));
}

// Runs fn(args, b) for every batch row (args.batch = 1, the row's mask offset), or once for
// the whole batch.
template <typename Fn>
void for_rows(const AttentionCtx& ctx, Fn fn) {
  if (!ctx.per_row) return fn(ctx.args, int64_t{0});
  kc::AttentionArgs row = ctx.args;
  row.batch = 1;
  for (int64_t b = 0; b < ctx.args.batch; ++b) {
    row.dropout_offset = ctx.args.dropout_offset + static_cast<uint64_t>(b) * ctx.row_words;
    fn(row, b);
  }
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& cfg)
    : Layer("GPT2Attention"), n_head_(cfg.n_head), n_embd_(cfg.n_embd), local_heads_(cfg.n_head) {
  cfg.validate();
  register_module("c_attn", std::make_shared<Linear>(cfg.n_embd, 3 * cfg.n_embd, Bias::kYes,
                                                     WeightLayout::kInOut, cfg.dtype));
  register_module("c_proj", std::make_shared<Linear>(cfg.n_embd, cfg.n_embd, Bias::kYes,
                                                     WeightLayout::kInOut, cfg.dtype));
  // attn_dropout holds the probability; the kernel applies it (with the same rule as Dropout,
  // drawn from the default CPU generator).
  attn_drop_ = register_module("attn_dropout", std::make_shared<Dropout>(cfg.attn_pdrop));
  register_module("resid_dropout", std::make_shared<Dropout>(cfg.resid_pdrop));
}

void CausalSelfAttention::set_local_heads(int64_t first, int64_t count) {
  BRAID_CHECK(count > 0 && n_head_ % count == 0 && first >= 0 && first % count == 0 &&
                  first + count <= n_head_,
              kInvalidArgument, "CausalSelfAttention::set_local_heads: heads [", first, ", ",
              first + count, ") are not one of the equal parts of n_head ", n_head_);
  first_head_ = first;
  local_heads_ = count;
}

void CausalSelfAttention::keep_heads(int rank, int parts) {
  BRAID_CHECK(parts >= 1 && rank >= 0 && rank < parts && n_head_ % parts == 0, kInvalidArgument,
              "CausalSelfAttention::keep_heads: n_head = ", n_head_,
              " must be a multiple of the tensor-parallel size ", parts, " (rank ", rank, ")");
  set_local_heads(rank * (n_head_ / parts), n_head_ / parts);
}

// Note [Attention dropout under tensor parallelism]: the kernel keeps element (b, h, i, j)
// when word ((b * heads + h) * T + i) * T + j after the call's offset is >= p. A rank holding
// heads [first, first + n) of H runs the kernel per batch row b with n heads: when n T^2 is a
// multiple of 4 (T even, or n a multiple of 4) row b starts at word (b H + first) T^2, which is
// a multiple of 4 as the kernel requires, and every head draws the mask the unparallelized
// model draws for it; the generator advances by what the whole model's draw takes. Otherwise
// each (row, rank) block of n T^2 words is rounded up to a multiple of 4: masks are still
// distinct per global head and the same on every run, but not the unparallelized ones.
Tensor CausalSelfAttention::forward_impl(const Tensor& x) {
  BRAID_CHECK(x.defined() && x.dim() == 3 && x.size(2) == n_embd_, kInvalidArgument,
              "CausalSelfAttention: input must be [batch, seq, n_embd ", n_embd_, "], got ",
              x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  const Tensor qkv = sub(*this, "c_attn").forward(x).contiguous();
  const int64_t head_dim = n_embd_ / n_head_, width = local_heads_ * head_dim;
  // Batch and sequence from c_attn's output: under sequence parallelism x holds only this
  // rank's part of the sequence and c_attn gathers the rest.
  BRAID_CHECK(qkv.dim() == 3 && qkv.size(2) == 3 * width, kInvalidArgument,
              "CausalSelfAttention: c_attn gave ", shape_str(qkv.shape()),
              ", expected [batch, seq, ", 3 * width, "] for ", local_heads_, " heads of ",
              head_dim);
  AttentionCtx ctx;
  kc::AttentionArgs& a = ctx.args;
  a.batch = qkv.size(0);
  a.seq = qkv.size(1);
  a.n_head = local_heads_;
  a.head_dim = head_dim;
  a.dtype = qkv.dtype();
  if (attn_drop_->is_training() && attn_drop_->p() > 0.0) {
    // Take the B * n_head * T * T words the mask reads (cpu.h, "attention"), as a Dropout
    // over the probabilities would.
    Generator& gen = default_generator(kCPU);
    const auto square = static_cast<uint64_t>(a.seq * a.seq);
    uint64_t words = static_cast<uint64_t>(a.batch * n_head_) * square;
    a.dropout_p = attn_drop_->p();
    a.dropout_seed = gen.seed();
    a.dropout_offset = gen.offset();
    if (local_heads_ != n_head_) {
      const auto block = static_cast<uint64_t>(local_heads_) * square;
      const auto parts = static_cast<uint64_t>(n_head_ / local_heads_);
      const auto part = static_cast<uint64_t>(first_head_ / local_heads_);
      ctx.per_row = true;
      ctx.row_words = block % 4 == 0 ? parts * block : parts * ((block + 3) / 4 * 4);
      a.dropout_offset += block % 4 == 0 ? part * block : part * ((block + 3) / 4 * 4);
      words = static_cast<uint64_t>(a.batch) * ctx.row_words;
    }
    gen.set_offset(gen.offset() + (words + 3) / 4 * 4);
  }
  const kc::KernelTable& k = kc::kernels_for(qkv.device());
  kc::require_support(k, kc::Op::kAttentionForward, qkv.dtype());
  const Stream s = kc::stream_for(qkv.device());
  Tensor y = Tensor::empty({a.batch, a.seq, width}, qkv.dtype(), qkv.device());
  const int64_t qkv_row = a.seq * 3 * width * static_cast<int64_t>(qkv.element_size());
  const int64_t y_row = a.seq * width * static_cast<int64_t>(y.element_size());
  ctx.qkv = qkv;
  for_rows(ctx, [&](const kc::AttentionArgs& args, int64_t b) {
    k.causal_attention_forward(s, args, static_cast<const char*>(qkv.data_ptr()) + b * qkv_row,
                               static_cast<char*>(y.data_ptr()) + b * y_row);
  });
  save_for_backward(std::move(ctx));
  return sub(*this, "resid_dropout").forward(sub(*this, "c_proj").forward(y));
}

Tensor CausalSelfAttention::backward_impl(const Tensor& grad_output) {
  const Tensor dy =
      sub(*this, "c_proj").backward(sub(*this, "resid_dropout").backward(grad_output));
  AttentionCtx ctx = pop_saved<AttentionCtx>();
  const Tensor dyc = dy.to(ctx.qkv.dtype()).contiguous();
  const kc::KernelTable& k = kc::kernels_for(ctx.qkv.device());
  kc::require_support(k, kc::Op::kAttentionBackward, ctx.qkv.dtype());
  const Stream s = kc::stream_for(ctx.qkv.device());
  Tensor dqkv = Tensor::empty(ctx.qkv.shape(), ctx.qkv.dtype(), ctx.qkv.device());
  const int64_t width = ctx.args.n_head * ctx.args.head_dim;
  const int64_t qkv_row = ctx.args.seq * 3 * width * static_cast<int64_t>(dqkv.element_size());
  const int64_t y_row = ctx.args.seq * width * static_cast<int64_t>(dyc.element_size());
  for_rows(ctx, [&](const kc::AttentionArgs& args, int64_t b) {
    k.causal_attention_backward(s, args, static_cast<const char*>(ctx.qkv.data_ptr()) + b * qkv_row,
                                static_cast<const char*>(dyc.data_ptr()) + b * y_row,
                                static_cast<char*>(dqkv.data_ptr()) + b * qkv_row);
  });
  return sub(*this, "c_attn").backward(dqkv);
}

}  // namespace braid::nn
