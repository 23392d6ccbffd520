// braid's GPT replayed for the memory estimate (docs/memory.md, "Activations of braid's GPT"):
// every layer's forward and backward of nn/src (gpt.cc, attention.cc, linear.cc, norm.cc,
// activation.cc, dropout.cc, embedding.cc, loss.cc) transcribed with simulated buffers (Buf)
// in place of Tensors, statement by statement, so each buffer is allocated and dropped where
// the layer allocates and drops its tensor: what forward saves, the conversions autocast and
// 16-bit parameters cause, the weight-gradient buffers, and temporaries that live to the end
// of a full expression. A change to a layer's allocations must be mirrored here; the tests
// (shard/tests/memory) compare the replay with the allocator's peak.
#include <map>
#include <optional>
#include <tuple>

#include "braid/core/error.h"
#include "braid/shard/memory.h"
#include "memory_replay.h"

namespace braid::shard {
namespace {

using memory_detail::Buf;
using memory_detail::Ledger;
using memory_detail::ShardReplay;
using memory_detail::Term;

// ---- where the GPT's parameters are ---------------------------------------------------------

struct Param {
  size_t unit = 0, index = 0;
  int64_t numel = 0;
};
struct LinearParams {
  Param w, b;
  int64_t in = 0, out = 0;
  bool bias = true;
};
struct BlockParams {
  Param ln1_w, ln1_b;
  LinearParams c_attn, attn_proj;
  Param ln2_w, ln2_b;
  LinearParams c_fc, mlp_proj;
  std::optional<size_t> unit;  // when the block is a unit of its own
};
struct GptParams {
  Param wte, wpe, lnf_w, lnf_b;
  std::vector<BlockParams> blocks;
  std::vector<std::vector<int64_t>> units;  // each unit's parameter sizes, named_parameters order
};

// The GPT's parameters in named_parameters() order (transformer.wte, .wpe, .h.{i}.*, .ln_f.*;
// lm_head.weight is wte's handle), placed in units: a unit per block and the root, or the root
// alone.
GptParams gpt_params(const nn::GPTConfig& c, bool blocks_are_units) {
  GptParams g;
  const int64_t d = c.n_embd, inner = c.inner(), L = c.n_layer;
  const size_t root = blocks_are_units ? static_cast<size_t>(L) : 0;
  g.units.resize(root + 1);
  const auto add = [&](size_t unit, int64_t numel) {
    Param p{unit, g.units[unit].size(), numel};
    g.units[unit].push_back(numel);
    return p;
  };
  const auto linear = [&](size_t unit, int64_t in, int64_t out) {
    LinearParams l;
    l.in = in;
    l.out = out;
    l.w = add(unit, in * out);
    l.b = add(unit, out);
    return l;
  };
  g.wte = add(root, c.vocab_size * d);
  g.wpe = add(root, c.n_positions * d);
  for (int64_t i = 0; i < L; ++i) {
    const size_t u = blocks_are_units ? static_cast<size_t>(i) : root;
    BlockParams b;
    if (blocks_are_units) b.unit = u;
    b.ln1_w = add(u, d);
    b.ln1_b = add(u, d);
    b.c_attn = linear(u, d, 3 * d);
    b.attn_proj = linear(u, d, d);
    b.ln2_w = add(u, d);
    b.ln2_b = add(u, d);
    b.c_fc = linear(u, d, inner);
    b.mlp_proj = linear(u, inner, d);
    g.blocks.push_back(b);
  }
  g.lnf_w = add(root, d);
  g.lnf_b = add(root, d);
  return g;
}

// Which of the two unit sets the replay knows `units` is, checked parameter by parameter.
GptParams match_units(const nn::GPTConfig& c, const std::vector<UnitSize>& units) {
  for (bool blocks : {true, false}) {
    GptParams g = gpt_params(c, blocks);
    if (g.units.size() != units.size()) continue;
    bool same = true;
    for (size_t u = 0; u < units.size() && same; ++u) {
      const std::string name =
          u + 1 == units.size() ? std::string() : "transformer.h." + std::to_string(u);
      same = units[u].name == name && units[u].params == g.units[u];
    }
    if (same) return g;
  }
  BRAID_FAIL(kNotSupported, "estimate_gpt_memory: the ", units.size(),
             " units given are neither one per GPT2Block plus the root (transformer_based_wrap) "
             "nor the root alone (no_wrap) of this GPTConfig; for other units use "
             "estimate_memory() with gpt_activation_bytes()");
}

// ---- the replay
// ----------------------------------------------------------------------------------

// Saved contexts: what each layer's save_for_backward keeps (one slot each: every layer of the
// GPT runs once per pass; activation checkpointing's first pass saves nothing).
struct LinearCtx {
  Buf x;  // the input in the compute dtype
  DType in_dtype = DType::kF32, compute = DType::kF32;
};
struct NormCtx {
  Buf x, mean, rstd;
  DType in_dtype = DType::kF32;
};
struct DropCtx {
  bool identity = true;
  Buf keep;  // the mask, one byte per element (a std::vector)
};
struct BlockCtx {
  std::optional<NormCtx> ln1, ln2;
  std::optional<LinearCtx> c_attn, attn_proj, c_fc, mlp_proj;
  std::optional<Buf> qkv, gelu_x, ckpt_input;
  std::optional<DropCtx> resid, mlp_drop;
  DType attn_out = DType::kF32, mlp_out = DType::kF32;
};

template <typename T>
T take(std::optional<T>& slot) {
  BRAID_ASSERT(slot.has_value(), "memory replay: backward without a saved forward");
  T v = std::move(*slot);
  slot.reset();
  return v;
}

class GptReplay {
 public:
  GptReplay(Ledger& ledger, ShardReplay& s, const nn::GPTConfig& c, const GptWorkload& w,
            GptParams params)
      : l_(ledger),
        s_(s),
        c_(c),
        p_(std::move(params)),
        seq_(w.seq),
        rows_(w.batch * w.seq),
        low_(w.autocast),
        ctx_(static_cast<size_t>(c.n_layer)) {
    s_.set_owners(p_.wte.unit, p_.wte.index, 2);  // transformer.wte and lm_head register it
  }

  // One micro-batch as fsdp_worker runs it: under an autocast scope, the loss of the forward,
  // then the backward of the loss's gradient; the scope's end drops the cast cache.
  void micro_batch() {
    {
      Buf dlogits;
      {
        l_.at("forward");
        Buf logits = gpt_forward();
        l_.at("loss");
        ce_forward(logits);
      }
      dlogits = ce_backward();
      gpt_backward(dlogits);
    }
    cache_.clear();
  }

 private:
  bool autocast() const { return low_ != DType::kF32; }
  DType pd() const { return s_.layer_param_dtype(); }
  Buf act(int64_t numel, DType dt) { return l_.alloc(Term::kActivations, numel, dt); }
  // Tensor::to(dtype): the tensor itself when the dtype is the same, else a new buffer.
  Buf to(const Buf& x, DType dt) {
    return !x.defined() || x.dtype() == dt ? x : act(x.numel(), dt);
  }
  void grad(const Param& p, const Buf& g) {
    s_.accumulate_grad(p.unit, p.index, g.numel(), g.dtype());
  }
  void done(const Param& p) { s_.owner_done(p.unit, p.index); }

  // autocast_cast(p, kMatmul): under autocast an f32 parameter's low-precision copy, cached for
  // the scope with a weak reference to its source storage (a released stage-3 unit is freed;
  // its next gather is a new storage, a miss); then .to(compute) when still different
  // (linear.cc, param_in).
  Buf param_in(const Param& p, DType compute) {
    Buf t;
    DType dt = pd();
    if (autocast() && dt != low_) {
      if (dt == DType::kF32) {
        Buf source = s_.storage(p.unit);
        auto key = std::make_tuple(source.id(), p.unit, p.index);
        auto it = cache_.find(key);
        if (it == cache_.end() || it->second.first.expired()) {
          // A new cast, then (an address reused after its source expired) the old entry goes.
          Buf cast = l_.alloc(Term::kAutocastCache, p.numel, low_);
          it = cache_.insert_or_assign(key, std::make_pair(source.weak(), cast)).first;
        }
        t = it->second.second;
      } else {
        t = act(p.numel, low_);
      }
      dt = low_;
    }
    if (dt != compute) t = act(p.numel, compute);
    return t;
  }

  // ---- layers (nn/src/*.cc) ----

  Buf linear_forward(std::optional<LinearCtx>& ctx, const LinearParams& lp, const Buf& x) {
    const DType compute = autocast() ? low_ : x.dtype();
    const Buf xc = to(x, compute);
    const Buf w = param_in(lp.w, compute);
    Buf y = act(rows_ * lp.out, compute);
    if (lp.bias) param_in(lp.b, compute);
    if (grad_) ctx = LinearCtx{xc, x.dtype(), compute};
    return y;
  }

  // Layer::backward: backward_impl, then the post_backward hook (stage 0: the owner is done).
  Buf linear_backward(std::optional<LinearCtx>& slot, const LinearParams& lp, const Buf& g) {
    Buf dx = linear_backward_impl(slot, lp, g);
    done(lp.w);
    if (lp.bias) done(lp.b);
    return dx;
  }

  Buf linear_backward_impl(std::optional<LinearCtx>& slot, const LinearParams& lp, const Buf& g) {
    const LinearCtx ctx = take(slot);
    const Buf dy = to(g, ctx.compute);
    const Buf w = pd() == ctx.compute ? Buf() : act(lp.w.numel, ctx.compute);
    Buf dx = act(rows_ * lp.in, ctx.compute);
    {
      const Buf dw = act(lp.w.numel, DType::kF32);  // accumulated in f32 for 16-bit data
      grad(lp.w, dw);
    }
    if (lp.bias) {
      const Buf db = act(lp.out, DType::kF32);
      grad(lp.b, db);
    }
    return to(dx, ctx.in_dtype);
  }

  // LayerNorm: computed in f32; under autocast the output is f32, else the input's dtype.
  Buf norm_forward(std::optional<NormCtx>& ctx, const Buf& x) {
    const int64_t d = c_.n_embd;
    const Buf xc = to(x, DType::kF32);
    const Buf w = pd() == DType::kF32 ? Buf() : act(d, DType::kF32);
    const Buf b = pd() == DType::kF32 ? Buf() : act(d, DType::kF32);
    const Buf y = act(rows_ * d, DType::kF32);
    const Buf mean = act(rows_, DType::kF32);
    const Buf rstd = act(rows_, DType::kF32);
    if (grad_) ctx = NormCtx{xc, mean, rstd, x.dtype()};
    return to(y, autocast() ? DType::kF32 : x.dtype());
  }

  Buf norm_backward(std::optional<NormCtx>& slot, const Param& pw, const Param& pb, const Buf& g) {
    Buf dx = norm_backward_impl(slot, pw, pb, g);
    done(pw);
    done(pb);
    return dx;
  }

  Buf norm_backward_impl(std::optional<NormCtx>& slot, const Param& pw, const Param& pb,
                         const Buf& g) {
    const NormCtx ctx = take(slot);
    const int64_t d = c_.n_embd;
    const Buf dy = to(g, DType::kF32);
    const Buf w = pd() == DType::kF32 ? Buf() : act(d, DType::kF32);
    const Buf dx = act(rows_ * d, DType::kF32);
    const Buf dw = act(d, DType::kF32);
    const Buf db = act(d, DType::kF32);
    grad(pw, dw);
    grad(pb, db);
    return to(dx, ctx.in_dtype);
  }

  // Dropout in training: p > 0 draws one f32 uniform per element and keeps a byte mask (both
  // std::vector, outside the allocator); p == 0 passes the tensor through.
  Buf dropout_forward(std::optional<DropCtx>& ctx, double p, const Buf& x) {
    if (p == 0.0) {
      if (grad_) ctx = DropCtx{};
      return x;
    }
    const Buf uniforms = l_.alloc(Term::kHostBuffers, x.numel(), DType::kF32);
    Buf keep = l_.alloc(Term::kHostBuffers, x.numel(), DType::kU8);
    Buf y = act(x.numel(), x.dtype());
    if (grad_) ctx = DropCtx{false, keep};
    return y;
  }

  Buf dropout_backward(std::optional<DropCtx>& slot, const Buf& g) {
    const DropCtx ctx = take(slot);
    if (ctx.identity) return g;
    return act(g.numel(), g.dtype());
  }

  // Embedding: gathers rows in the parameters' dtype; backward scatters into a dense f32
  // gradient of the whole table.
  Buf embedding_forward(std::optional<Buf>& ctx, const Buf& ids, int64_t n) {
    Buf out = act(n * c_.n_embd, pd());
    if (grad_) ctx = ids;
    return out;
  }

  void embedding_backward(std::optional<Buf>& slot, const Param& w, int64_t table_rows,
                          const Buf& g) {
    {
      const Buf ids = take(slot);
      const Buf dy = to(g, DType::kF32);
      const Buf dw = act(table_rows * c_.n_embd, DType::kF32);
      grad(w, dw);
    }
    done(w);
  }

  // Residual sums keep the stream's dtype (gpt.cc, add_as).
  Buf add_as(const Buf& a, const Buf& b) {
    const Buf bb = to(b, a.dtype());
    return act(a.numel(), a.dtype());
  }

  Buf attention_forward(BlockCtx& ctx, const BlockParams& bp, const Buf& x) {
    const Buf qkv = linear_forward(ctx.c_attn, bp.c_attn, x);
    const Buf y = act(rows_ * c_.n_embd, qkv.dtype());
    if (grad_) ctx.qkv = qkv;
    return dropout_forward(ctx.resid, c_.resid_pdrop,
                           linear_forward(ctx.attn_proj, bp.attn_proj, y));
  }

  Buf attention_backward(BlockCtx& ctx, const BlockParams& bp, const Buf& g) {
    const Buf dy = linear_backward(ctx.attn_proj, bp.attn_proj, dropout_backward(ctx.resid, g));
    const Buf qkv = take(ctx.qkv);
    const Buf dyc = to(dy, qkv.dtype());
    const Buf dqkv = act(qkv.numel(), qkv.dtype());
    return linear_backward(ctx.c_attn, bp.c_attn, dqkv);
  }

  // The MLP's Sequential: y = layer(y) for c_fc, act, c_proj, dropout; backward in reverse.
  Buf mlp_forward(BlockCtx& ctx, const BlockParams& bp, const Buf& x) {
    Buf y = x;
    y = linear_forward(ctx.c_fc, bp.c_fc, y);
    if (grad_) ctx.gelu_x = y;
    y = act(y.numel(), y.dtype());
    y = linear_forward(ctx.mlp_proj, bp.mlp_proj, y);
    y = dropout_forward(ctx.mlp_drop, c_.resid_pdrop, y);
    return y;
  }

  Buf mlp_backward(BlockCtx& ctx, const BlockParams& bp, const Buf& grad_output) {
    Buf g = grad_output;
    g = dropout_backward(ctx.mlp_drop, g);
    g = linear_backward(ctx.mlp_proj, bp.mlp_proj, g);
    {
      const Buf x = take(ctx.gelu_x);
      const Buf dy = to(g, x.dtype());
      g = act(x.numel(), x.dtype());
    }
    g = linear_backward(ctx.c_fc, bp.c_fc, g);
    return g;
  }

  Buf block_forward_impl(size_t i, const Buf& x) {
    BlockCtx& ctx = ctx_[i];
    const BlockParams& bp = p_.blocks[i];
    const Buf a = attention_forward(ctx, bp, norm_forward(ctx.ln1, x));
    const Buf h = add_as(x, a);
    const Buf m = mlp_forward(ctx, bp, norm_forward(ctx.ln2, h));
    if (grad_) {
      ctx.attn_out = a.dtype();
      ctx.mlp_out = m.dtype();
    }
    return add_as(h, m);
  }

  Buf block_backward_impl(size_t i, const Buf& g) {
    BlockCtx& ctx = ctx_[i];
    const BlockParams& bp = p_.blocks[i];
    const DType attn_out = ctx.attn_out, mlp_out = ctx.mlp_out;
    const Buf dh = add_as(
        g, norm_backward(ctx.ln2, bp.ln2_w, bp.ln2_b, mlp_backward(ctx, bp, to(g, mlp_out))));
    return add_as(dh, norm_backward(ctx.ln1, bp.ln1_w, bp.ln1_b,
                                    attention_backward(ctx, bp, to(dh, attn_out))));
  }

  // Layer::forward / backward of a block: its unit's hooks, and activation checkpointing (the
  // forward without saving, keeping its input; the backward runs it again, saving).
  Buf block_forward(size_t i, const Buf& x) {
    const auto& unit = p_.blocks[i].unit;
    l_.at("forward: transformer.h." + std::to_string(i));
    if (unit) s_.pre_forward(*unit);
    Buf y;
    if (c_.activation_checkpointing && grad_) {
      grad_ = false;
      y = block_forward_impl(i, x);
      grad_ = true;
      ctx_[i].ckpt_input = x;
    } else {
      y = block_forward_impl(i, x);
    }
    if (unit) s_.post_forward(*unit);
    return y;
  }

  Buf block_backward(size_t i, const Buf& g) {
    const auto& unit = p_.blocks[i].unit;
    l_.at("backward: transformer.h." + std::to_string(i));
    if (unit) s_.pre_backward(*unit);
    if (c_.activation_checkpointing) {
      const Buf input = take(ctx_[i].ckpt_input);
      block_forward_impl(i, input);
    }
    Buf dx = block_backward_impl(i, g);
    if (unit) s_.post_backward(*unit);
    return dx;
  }

  Buf gpt_forward() {
    s_.pre_forward(s_.root());
    Buf logits;
    {
      const Buf ids;  // the caller's batch: not the model's
      const Buf tok = embedding_forward(wte_ids_, ids, rows_);
      const Buf pos = embedding_forward(wpe_ids_, act(seq_, DType::kI64), seq_);  // arange(T)
      Buf h = dropout_forward(drop_, c_.embd_pdrop, act(rows_ * c_.n_embd, tok.dtype()));
      for (size_t i = 0; i < ctx_.size(); ++i) h = block_forward(i, h);
      l_.at("forward: lm_head");
      h = norm_forward(ln_f_, h);
      logits = linear_forward(head_, head_params(), h);
    }
    s_.post_forward(s_.root());
    return logits;
  }

  void gpt_backward(const Buf& dlogits) {
    s_.pre_backward(s_.root());
    {
      l_.at("backward: lm_head");
      Buf g =
          norm_backward(ln_f_, p_.lnf_w, p_.lnf_b, linear_backward(head_, head_params(), dlogits));
      for (size_t i = ctx_.size(); i-- > 0;) g = block_backward(i, g);
      l_.at("backward: embeddings");
      g = dropout_backward(drop_, g);
      embedding_backward(wpe_ids_, p_.wpe, c_.n_positions, act(seq_ * c_.n_embd, g.dtype()));
      embedding_backward(wte_ids_, p_.wte, c_.vocab_size, g);
    }
    s_.post_backward(s_.root());
  }

  LinearParams head_params() const {
    LinearParams h;
    h.w = p_.wte;
    h.in = c_.n_embd;
    h.out = c_.vocab_size;
    h.bias = false;
    return h;
  }

  // CrossEntropyLoss (loss.cc): per-row losses and log-sum-exps in f32, the logits saved; the
  // backward's gradient has the logits' dtype.
  void ce_forward(const Buf& logits) {
    const Buf loss = act(rows_, DType::kF32);
    const Buf lse = act(rows_, DType::kF32);
    ce_ = std::make_pair(logits, lse);
    l_.touch(Term::kActivations, 1, DType::kF32);  // sum(loss)
  }

  Buf ce_backward() {
    l_.at("loss backward");
    const auto ctx = take(ce_);
    const Buf scale = act(rows_, DType::kF32);
    return act(ctx.first.numel(), ctx.first.dtype());
  }

  Ledger& l_;
  ShardReplay& s_;
  nn::GPTConfig c_;
  GptParams p_;
  int64_t seq_, rows_;
  DType low_;
  bool grad_ = true;
  std::vector<BlockCtx> ctx_;
  std::optional<Buf> wte_ids_, wpe_ids_;
  std::optional<DropCtx> drop_;
  std::optional<NormCtx> ln_f_;
  std::optional<LinearCtx> head_;
  std::optional<std::pair<Buf, Buf>> ce_;
  // autocast's cast cache: (source storage, parameter) -> (source, weakly; cast)
  std::map<std::tuple<const void*, size_t, size_t>, std::pair<std::weak_ptr<const void>, Buf>>
      cache_;
};

void check_workload(const nn::GPTConfig& c, const GptWorkload& w) {
  c.validate();
  BRAID_CHECK(w.batch >= 1 && w.seq >= 1 && w.seq <= c.n_positions, kInvalidArgument,
              "GPT memory estimate: batch ", w.batch, " and seq ", w.seq,
              " must be >= 1, seq <= n_positions ", c.n_positions);
  BRAID_CHECK(w.autocast == DType::kF32 || w.autocast == DType::kBF16 || w.autocast == DType::kF16,
              kInvalidArgument,
              "GPT memory estimate: autocast must be f32 (none), bf16 or f16, got ",
              dtype_name(w.autocast));
  BRAID_CHECK(c.dtype == DType::kF32, kInvalidArgument,
              "GPT memory estimate: the model's parameters must be f32 (ShardedModel's rule), got ",
              dtype_name(c.dtype));
}

}  // namespace

int64_t gpt_activation_bytes(const nn::GPTConfig& config, const GptWorkload& workload,
                             DType param_dtype) {
  check_workload(config, workload);
  GptParams p = gpt_params(config, /*blocks_are_units=*/false);
  UnitSize root{"", p.units[0], 0, 0};
  for (int64_t n : root.params) root.numel += n;
  root.padded = padded_numel(root.numel, 1);
  MemoryOptions o;
  o.stage = ZeroStage::k0;
  o.param_dtype = param_dtype;
  Ledger ledger;
  ShardReplay s(ledger, {root}, o);
  GptReplay r(ledger, s, config, workload, std::move(p));
  memory_detail::replay_steps(ledger, s, [&] { r.micro_batch(); });
  return ledger.activation_peak();
}

MemoryEstimate estimate_gpt_memory(const nn::GPTConfig& config, const GptWorkload& workload,
                                   const std::vector<UnitSize>& units,
                                   const MemoryOptions& options) {
  check_workload(config, workload);
  GptParams p = match_units(config, units);
  Ledger ledger;
  ShardReplay s(ledger, units, options);
  GptReplay r(ledger, s, config, workload, std::move(p));
  return memory_detail::replay_steps(ledger, s, [&] { r.micro_batch(); });
}

}  // namespace braid::shard
