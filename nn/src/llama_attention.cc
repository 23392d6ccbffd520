// LlamaAttention: q_proj / k_proj / v_proj, rotary embeddings on q and k, grouped key / value
// heads, the fused causal attention kernel of the input's device (as GPT2Attention: scores,
// causal mask, f32 softmax and the product with v without a T x T tensor kept for backward),
// and o_proj.
//
// Note [Llama attention through the GPT kernel]: the kernel reads one packed [B, T, 3 H hd]
// tensor (q | k | v of H heads). Keys and values of KV < H heads are repeated to H heads (head
// h reads key / value head h / (H / KV), transformers' repeat_kv) into that tensor, so grouped
// queries run the same code as GPT's attention; the backward sums the H / KV repeated heads'
// gradients back into their key / value head. The rotation is orthogonal per position (both
// halves share the angle), so its backward is the same formula with sin negated.
#include <cmath>
#include <string_view>
#include <vector>

#include "braid/kernels/table.h"
#include "braid/nn/llama.h"
#include "braid/tensor/ops.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels;

Layer& sub(const Module& m, std::string_view name) {
  return dynamic_cast<Layer&>(*m.child(name));
}

// rotate_half(x) = cat(-x2, x1) over the last dimension of [..., hd].
Tensor rotate_half(const Tensor& x) {
  const int last = x.dim() - 1;
  const int64_t half = x.size(last) / 2;
  return cat({neg(x.narrow(last, half, half)), x.narrow(last, 0, half)}, last);
}

// x [B, T, n, hd]; cos / sin [T, hd] broadcast over batch and heads.
Tensor rotary_forward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const Tensor c = cos.view({1, cos.size(0), 1, cos.size(1)});
  const Tensor s = sin.view({1, sin.size(0), 1, sin.size(1)});
  return add(mul(x, c), mul(rotate_half(x), s));
}

// The transpose of rotary_forward: dx = g cos + rotate_half^T(g sin), rotate_half^T(u) =
// cat(u2, -u1).
Tensor rotary_backward(const Tensor& g, const Tensor& cos, const Tensor& sin) {
  const Tensor c = cos.view({1, cos.size(0), 1, cos.size(1)});
  const Tensor s = sin.view({1, sin.size(0), 1, sin.size(1)});
  const Tensor u = mul(g, s);
  const int last = 3;
  const int64_t half = g.size(last) / 2;
  return add(mul(g, c), cat({u.narrow(last, half, half), neg(u.narrow(last, 0, half))}, last));
}

struct LlamaAttentionCtx {
  Tensor qkv;  // the kernel's packed input [B, T, 3 H hd], contiguous, compute dtype
  Tensor cos, sin;
  kc::AttentionArgs args;
  int64_t kv_heads = 0;
};

}  // namespace

std::pair<Tensor, Tensor> llama_rotary_cos_sin(int64_t seq, int64_t head_dim, double theta,
                                               DType dtype, Device device) {
  const int64_t half = head_dim / 2;
  std::vector<double> c(static_cast<size_t>(seq * head_dim)), s(c.size());
  // transformers: inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim), all in f32; the
  // angle t * inv_freq[i] in f32 (a one-term product), cos and sin of the f32 angle.
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), e);
  }
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t i = 0; i < head_dim; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[static_cast<size_t>(i % half)];
      c[static_cast<size_t>(t * head_dim + i)] = static_cast<double>(std::cos(angle));
      s[static_cast<size_t>(t * head_dim + i)] = static_cast<double>(std::sin(angle));
    }
  }
  // Through f32, as transformers returns f32 cos / sin cast to the activations' dtype.
  const auto make = [&](const std::vector<double>& v) {
    return Tensor::from_vector(v, {seq, head_dim}, DType::kF32).to(dtype).to(device);
  };
  return {make(c), make(s)};
}

LlamaAttention::LlamaAttention(const LlamaConfig& cfg)
    : Layer("LlamaAttention"),
      hidden_(cfg.hidden_size),
      heads_(cfg.num_attention_heads),
      kv_heads_(cfg.kv_heads()),
      head_dim_(cfg.head_dim()),
      theta_(cfg.rope_theta),
      local_heads_(heads_),
      local_kv_heads_(kv_heads_) {
  cfg.validate();
  const Bias bias = cfg.attention_bias ? Bias::kYes : Bias::kNo;
  const auto linear = [&](int64_t in, int64_t out) {
    return std::make_shared<Linear>(in, out, bias, WeightLayout::kOutIn, cfg.dtype);
  };
  register_module("q_proj", linear(hidden_, heads_ * head_dim_));
  register_module("k_proj", linear(hidden_, kv_heads_ * head_dim_));
  register_module("v_proj", linear(hidden_, kv_heads_ * head_dim_));
  register_module("o_proj", linear(heads_ * head_dim_, hidden_));
}

void LlamaAttention::keep_heads(int rank, int parts) {
  BRAID_CHECK(parts >= 1 && rank >= 0 && rank < parts, kInvalidArgument,
              "LlamaAttention::keep_heads: rank ", rank, " is outside [0, ", parts, ")");
  BRAID_CHECK(heads_ % parts == 0 && kv_heads_ % parts == 0, kInvalidArgument,
              "LlamaAttention::keep_heads: num_attention_heads = ", heads_,
              " and num_key_value_heads = ", kv_heads_,
              " must be multiples of the tensor-parallel size ", parts, " (rank ", rank, ")");
  // Rank r's query heads [r H/p, (r+1) H/p) read key / value heads h / (H / KV), which are
  // exactly [r KV/p, (r+1) KV/p): the local computation is the same grouped attention.
  local_heads_ = heads_ / parts;
  local_kv_heads_ = kv_heads_ / parts;
}

Tensor LlamaAttention::forward_impl(const Tensor& x) {
  BRAID_CHECK(x.defined() && x.dim() == 3 && x.size(2) == hidden_, kInvalidArgument,
              "LlamaAttention: input must be [batch, seq, hidden_size ", hidden_, "], got ",
              x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  const Tensor q = sub(*this, "q_proj").forward(x);
  const Tensor k = sub(*this, "k_proj").forward(x);
  const Tensor v = sub(*this, "v_proj").forward(x);
  const int64_t h = local_heads_, kv = local_kv_heads_, hd = head_dim_;
  const auto check_width = [&](const char* name, const Tensor& t, int64_t n) {
    BRAID_CHECK(t.dim() == 3 && t.size(2) == n * hd, kInvalidArgument, "LlamaAttention: ", name,
                " gave ", shape_str(t.shape()), ", expected [batch, seq, ", n * hd, "] for ", n,
                " heads of ", hd);
  };
  check_width("q_proj", q, h);
  check_width("k_proj", k, kv);
  check_width("v_proj", v, kv);
  const int64_t b = q.size(0), t = q.size(1), groups = h / kv;
  const DType dt = q.dtype();
  auto [cos, sin] = llama_rotary_cos_sin(t, hd, theta_, dt, q.device());
  const Tensor qr = rotary_forward(q.contiguous().view({b, t, h, hd}), cos, sin);
  const Tensor kr = rotary_forward(k.contiguous().view({b, t, kv, hd}), cos, sin);
  // repeat_kv: key / value head j serves query heads [j groups, (j + 1) groups).
  const auto repeat = [&](const Tensor& y) {
    return y.unsqueeze(3).expand({b, t, kv, groups, hd}).reshape({b, t, h * hd});
  };
  const Tensor vv = v.to(dt).contiguous().view({b, t, kv, hd});
  const Tensor qkv = cat({qr.reshape({b, t, h * hd}), repeat(kr.to(dt)), repeat(vv)}, 2);

  LlamaAttentionCtx ctx;
  kc::AttentionArgs& a = ctx.args;
  a.batch = b;
  a.seq = t;
  a.n_head = h;
  a.head_dim = hd;
  a.dtype = dt;
  const kc::KernelTable& kt = kc::kernels_for(qkv.device());
  kc::require_support(kt, kc::Op::kAttentionForward, dt);
  Tensor y = Tensor::empty({b, t, h * hd}, dt, qkv.device());
  kt.causal_attention_forward(kc::stream_for(qkv.device()), a, qkv.data_ptr(), y.data_ptr());
  ctx.qkv = qkv;
  ctx.cos = cos;
  ctx.sin = sin;
  ctx.kv_heads = kv;
  save_for_backward(std::move(ctx));
  return sub(*this, "o_proj").forward(y);
}

Tensor LlamaAttention::backward_impl(const Tensor& grad_output) {
  const Tensor dy = sub(*this, "o_proj").backward(grad_output);
  LlamaAttentionCtx ctx = pop_saved<LlamaAttentionCtx>();
  const kc::AttentionArgs& a = ctx.args;
  const Tensor dyc = dy.to(a.dtype).contiguous();
  const kc::KernelTable& kt = kc::kernels_for(ctx.qkv.device());
  kc::require_support(kt, kc::Op::kAttentionBackward, a.dtype);
  Tensor dqkv = Tensor::empty(ctx.qkv.shape(), a.dtype, ctx.qkv.device());
  kt.causal_attention_backward(kc::stream_for(ctx.qkv.device()), a, ctx.qkv.data_ptr(),
                               dyc.data_ptr(), dqkv.data_ptr());
  const int64_t b = a.batch, t = a.seq, h = a.n_head, hd = a.head_dim, kv = ctx.kv_heads;
  const int64_t width = h * hd;
  // The repeated heads' gradients summed back into their key / value head (in head order).
  const auto unrepeat = [&](int64_t at) {
    return sum(dqkv.narrow(2, at, width).reshape({b, t, kv, h / kv, hd}), 3);
  };
  const Tensor dq =
      rotary_backward(dqkv.narrow(2, 0, width).reshape({b, t, h, hd}), ctx.cos, ctx.sin);
  const Tensor dk = rotary_backward(unrepeat(width), ctx.cos, ctx.sin);
  const Tensor dv = unrepeat(2 * width);
  Tensor dx = sub(*this, "q_proj").backward(dq.reshape({b, t, h * hd}));
  dx = add(dx, sub(*this, "k_proj").backward(dk.reshape({b, t, kv * hd})));
  return add(dx, sub(*this, "v_proj").backward(dv.reshape({b, t, kv * hd})));
}

}  // namespace braid::nn
