// GPT-2 (transformers' GPT2LMHeadModel) with hand-written backward: MLP, Block, the model with
// its tied language-model head, GPT-2's initialization and sampling (docs/nn.md, "GPT").
// The attention is in attention.cc, the config in gpt_config.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "braid/nn/gpt.h"
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
  BRAID_CHECK(ids.defined(), kInvalidArgument, who, ": ids are undefined");
  BRAID_CHECK(ids.dtype() == DType::kI64 || ids.dtype() == DType::kI32, kInvalidArgument, who,
              ": ids must be i64 or i32 token ids, got dtype ", ids.dtype());
  BRAID_CHECK(ids.dim() == 2, kInvalidArgument, who, ": ids must be [batch, seq], got shape ",
              shape_str(ids.shape()));
  const int64_t seq = ids.size(1);
  BRAID_CHECK(seq <= cfg.n_positions, kInvalidArgument, who, ": sequence length ", seq,
              " exceeds n_positions ", cfg.n_positions);
  const Tensor idc = ids.contiguous();
  // Checked on the host (one small copy from a GPU; meta ids have no values), so a bad id is
  // this message rather than a device fault.
  const Tensor ih = idc.device().is_meta() ? Tensor() : idc.to(kCPU);
  for (int64_t i = 0; ih.defined() && i < ih.numel(); ++i) {
    const int64_t id = ih.dtype() == DType::kI64 ? ih.data<int64_t>()[i] : ih.data<int32_t>()[i];
    BRAID_CHECK(id >= 0 && id < cfg.vocab_size, kOutOfRange, who, ": token id ", id, " at [",
                i / std::max<int64_t>(seq, 1), ", ", i % std::max<int64_t>(seq, 1),
                "] is outside [0, vocab_size ", cfg.vocab_size, ")");
  }
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

void GPT::init_weights_range(const Generator& gen, const std::string& name, int64_t offset,
                             int64_t count, float* dst) const {
  const double std_proj =
      cfg_.initializer_range / std::sqrt(2.0 * static_cast<double>(cfg_.n_layer));
  const auto ends_with = [](const std::string& s, std::string_view tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  // The word offset each drawn parameter starts at, as init_weights advances the generator: an
  // f32 normal draw of n elements reads 2 ceil(n / 2) words, rounded up to a block of 4.
  uint64_t words = gen.offset();
  for (auto& [pname, p] : named_parameters()) {
    const int64_t n = p.data().numel();
    const bool is_bias = ends_with(pname, ".bias");
    const bool is_norm = pname.find(".ln_") != std::string::npos;
    const bool drawn = !is_bias && !is_norm;
    if (pname != name) {
      if (drawn) words += (2 * static_cast<uint64_t>((n + 1) / 2) + 3) / 4 * 4;
      continue;
    }
    BRAID_CHECK(offset >= 0 && count >= 0 && offset + count <= n, kOutOfRange,
                "GPT::init_weights_range: elements [", offset, ", ", offset + count, ") of '", name,
                "' (", n, " elements)");
    BRAID_CHECK(p.data().dtype() == DType::kF32, kInvalidArgument, "GPT::init_weights_range: '",
                name, "' is ", dtype_name(p.data().dtype()), ", expected f32");
    if (!drawn) {
      std::fill(dst, dst + count, is_bias ? 0.0f : 1.0f);
      return;
    }
    if (count == 0) return;
    // Element i uses words 2 (i / 2) and 2 (i / 2) + 1 of the draw; start at a multiple of 4
    // words (a whole Philox block), i.e. at element offset rounded down to a multiple of 4.
    const int64_t first = offset / 4 * 4;
    Generator local(gen.seed());
    local.set_offset(words + static_cast<uint64_t>(first));
    const double std = ends_with(name, "c_proj.weight") ? std_proj : cfg_.initializer_range;
    Tensor values = scale(Tensor::randn({offset + count - first}, DType::kF32, &local), std);
    std::copy_n(values.data<float>() + (offset - first), count, dst);
    return;
  }
  BRAID_FAIL(kOutOfRange, "GPT::init_weights_range: no parameter '", name, "'");
}

void GPT::init_weights(Generator& gen) {
  const double std_proj =
      cfg_.initializer_range / std::sqrt(2.0 * static_cast<double>(cfg_.n_layer));
  const auto ends_with = [](const std::string& s, std::string_view tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (auto& [name, p] : named_parameters()) {
    Tensor& data = p.data();
    const bool is_norm = name.find(".ln_") != std::string::npos;
    if (ends_with(name, ".bias")) {
      data.zero_();
    } else if (is_norm) {
      data.fill_(1);  // LayerNorm weight
    } else {
      const double std = ends_with(name, "c_proj.weight") ? std_proj : cfg_.initializer_range;
      const DType draw = data.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
      data.copy_(scale(Tensor::randn(data.shape(), draw, &gen), std));
    }
  }
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
  BRAID_CHECK(ids.defined() && ids.dim() == 2 && ids.size(0) == 1, kInvalidArgument,
              "GPT::generate: ids must be [1, T], got ",
              ids.defined() ? shape_str(ids.shape()) : std::string("undefined"));
  BRAID_CHECK(ids.dtype() == DType::kI64 || ids.dtype() == DType::kI32, kInvalidArgument,
              "GPT::generate: ids must be i64 or i32, got dtype ", ids.dtype());
  BRAID_CHECK(ids.size(1) > 0, kInvalidArgument, "GPT::generate: ids must hold at least one token");
  BRAID_CHECK(max_new_tokens >= 0, kInvalidArgument,
              "GPT::generate: max_new_tokens = ", max_new_tokens, " must be >= 0");
  BRAID_CHECK(temperature >= 0.0 && std::isfinite(temperature), kInvalidArgument,
              "GPT::generate: temperature = ", temperature, " must be finite and >= 0");
  BRAID_CHECK(top_k >= 0, kInvalidArgument, "GPT::generate: top_k = ", top_k, " must be >= 0");
  const bool was_training = is_training();
  eval();
  struct RestoreMode {
    GPT* self;
    bool training;
    ~RestoreMode() { self->train(training); }
  } restore{this, was_training};
  NoGradGuard no_grad;

  std::vector<double> tokens = ids.to_vector();
  const int64_t v = cfg_.vocab_size;
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const auto len = static_cast<int64_t>(tokens.size());
    const int64_t ctx_len = std::min(len, cfg_.n_positions);
    const std::vector<double> window(tokens.end() - ctx_len, tokens.end());
    const Tensor logits = forward(Tensor::from_vector(window, {1, ctx_len}, DType::kI64));
    std::vector<double> last = logits.select(1, ctx_len - 1).to_vector();  // [V] as double
    int64_t next = 0;
    if (temperature == 0.0) {
      next = std::max_element(last.begin(), last.end()) - last.begin();  // first maximum
    } else {
      for (double& x : last) x /= temperature;
      if (top_k > 0 && top_k < v) {
        // Keep the top_k largest logits (ties with the k-th kept, as torch's
        // logits < topk(...)[-1] masking).
        std::vector<double> sorted = last;
        std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                         std::greater<double>());
        const double kth = sorted[static_cast<size_t>(top_k - 1)];
        for (double& x : last) {
          if (x < kth) x = -std::numeric_limits<double>::infinity();
        }
      }
      const double m = *std::max_element(last.begin(), last.end());
      double total = 0;
      for (double& x : last) total += (x = std::exp(x - m));
      // Inverse CDF of one uniform draw, in index order.
      const double u = gen.uniform_double() * total;
      double acc = 0;
      next = v - 1;
      for (int64_t i = 0; i < v; ++i) {
        acc += last[static_cast<size_t>(i)];
        if (u < acc) {
          next = i;
          break;
        }
      }
      while (last[static_cast<size_t>(next)] == 0.0 && next > 0) --next;  // never a masked id
    }
    tokens.push_back(static_cast<double>(next));
  }
  return Tensor::from_vector(tokens, {1, static_cast<int64_t>(tokens.size())}, DType::kI64);
}

}  // namespace braid::nn
