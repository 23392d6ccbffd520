// SPDX-License-Identifier: Apache-2.0
// A GPT with GPT-2's architecture and Hugging Face's GPT-2 parameter names and layout, so a
// braid checkpoint loads into transformers' GPT2LMHeadModel and the reverse (docs/nn.md,
// "GPT"):
//   transformer.wte.weight [vocab, d]          transformer.wpe.weight [n_positions, d]
//   transformer.h.{i}.ln_1.{weight,bias}       transformer.h.{i}.attn.c_attn.{weight [d, 3d], bias}
//   transformer.h.{i}.attn.c_proj.{weight [d, d], bias}
//   transformer.h.{i}.ln_2.{weight,bias}       transformer.h.{i}.mlp.c_fc.{weight [d, 4d], bias}
//   transformer.h.{i}.mlp.c_proj.{weight [4d, d], bias}
//   transformer.ln_f.{weight,bias}             lm_head.weight (tied to wte)
// Linear weights use Conv1D's [in, out] layout (WeightLayout::kInOut), as GPT-2 stores them.
//
//   GPTConfig cfg{.vocab_size = 256, .n_positions = 256, .n_embd = 256, .n_layer = 4, .n_head = 4};
//   auto gpt = std::make_shared<GPT>(cfg);  gpt->init_weights(gen);
//   Tensor logits = gpt->forward(ids);      // ids [B, T] i64 -> logits [B, T, vocab]
//   gpt->backward(ce.backward());
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "braid/core/rng.h"
#include "braid/nn/causal_lm.h"
#include "braid/nn/layers.h"
#include "braid/nn/loss.h"
#include "braid/nn/module.h"

namespace braid::nn {

// The fields of transformers' GPT2Config that the model uses, with its defaults.
struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  GeluApproximate activation = GeluApproximate::kTanh;  // "gelu_new"; kNone is "gelu"
  double embd_pdrop = 0.1;
  double attn_pdrop = 0.1;
  double resid_pdrop = 0.1;
  double initializer_range = 0.02;
  bool activation_checkpointing = false;  // every block recomputes its forward in backward
  DType dtype = DType::kF32;              // parameter storage

  int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // Throws kInvalidArgument naming the field (n_embd % n_head, sizes > 0, p in [0, 1)).
  void validate() const;
  // transformers' config.json for GPT2LMHeadModel ("model_type": "gpt2", ...).
  std::string to_hf_json() const;
  // Reads the fields above from a transformers config.json (others are ignored).
  static GPTConfig from_hf_json(const std::string& json_text);
};

// Causal multi-head self-attention: c_attn (d -> 3d), scores q k^T / sqrt(head_dim) with a
// causal mask, softmax in f32, attention dropout, c_proj (d -> d), residual dropout.
// [B, T, d] -> [B, T, d].
//
// The sub-layers are looked up by name on every pass, so tensor parallelism
// (shard::parallelize) can swap them for parallel ones with Module::replace_module.
class CausalSelfAttention : public Layer, public AttentionHeads {
 public:
  explicit CausalSelfAttention(const GPTConfig& cfg);

  // Tensor parallelism: this rank computes heads [first, first + count) of n_head, so c_attn
  // yields [B, T, 3 * count * head_dim] (q | k | v of those heads) and c_proj takes
  // [B, T, count * head_dim]. count must divide n_head and first be a multiple of count.
  // Attention dropout then draws each head's mask at its global head index (docs/parallelism.md).
  void set_local_heads(int64_t first, int64_t count);
  // AttentionHeads: heads [rank n_head / parts, (rank + 1) n_head / parts).
  void keep_heads(int rank, int parts) override;
  int64_t first_head() const { return first_head_; }
  int64_t local_heads() const { return local_heads_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t n_head_, n_embd_;
  int64_t first_head_ = 0, local_heads_;
  std::shared_ptr<Dropout> attn_drop_;
};

// c_fc (d -> inner), GELU, c_proj (inner -> d), dropout; children looked up by name on every
// pass (as CausalSelfAttention's).
class MLP : public Layer {
 public:
  explicit MLP(const GPTConfig& cfg);

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;
};

// x + attn(ln_1(x)), then + mlp(ln_2(.)). Type name "GPT2Block" (wrap policies match it).
class Block : public Layer {
 public:
  explicit Block(const GPTConfig& cfg);

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;
};

// ids [B, T] (i64 or i32, T <= n_positions) -> logits [B, T, vocab]. Type name
// "GPT2LMHeadModel". backward(dlogits) fills every parameter's gradient and returns an
// undefined Tensor. transformer.wte / .drop / .ln_f and lm_head are looked up by name on every
// pass (tensor parallelism swaps them: shard/tensor_parallel.h).
class GPT : public CausalLM {
 public:
  explicit GPT(const GPTConfig& cfg);
  const GPTConfig& config() const { return cfg_; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t num_blocks() const override { return cfg_.n_layer; }
  int64_t max_positions() const override { return cfg_.n_positions; }
  std::string model_type() const override { return "gpt2"; }
  // Blocks at "transformer.h"; wte / lm_head tied; c_attn column-parallel in 3 blocks (q | k |
  // v), c_proj / mlp.c_proj row-parallel, mlp.c_fc column-parallel, the attention by heads, wte
  // vocab-parallel, lm_head over the padded vocabulary; sequence parallelism: ln_1 / ln_2 /
  // ln_f, the residual dropouts, and transformer.drop where the sequence is split.
  const ParallelPlan& parallel_plan() const override;
  std::shared_ptr<CausalLMStage> make_stage(const StageSpec& spec) const override;
  std::string hf_config_json() const override { return cfg_.to_hf_json(); }

  // GPT-2's initialization (transformers' _init_weights): Linear and Embedding weights
  // N(0, initializer_range), biases 0, LayerNorm 1 / 0, and every c_proj weight
  // N(0, initializer_range / sqrt(2 n_layer)); drawn from `gen` in named_parameters() order.
  void init_weights(Generator& gen) override;

  // What init_weights(gen) writes into elements [offset, offset + count) of the f32 parameter
  // `name` (row-major), computed for that range alone: the Philox stream is positional, so the
  // range's normals are drawn at their own offset (docs/rng.md). `gen` is the generator in the
  // state init_weights would start from; it is not advanced. With it each rank initializes
  // only its shards of a model built under InitEmptyWeights, with the bits of a whole
  // initialization (shard::ShardingOptions::param_init). kOutOfRange for an unknown name or a
  // range outside the parameter.
  void init_weights_range(const Generator& gen, const std::string& name, int64_t offset,
                          int64_t count, float* dst) const override;

  Block& block(int64_t i);

  // Appends max_new_tokens tokens to ids [1, T] (cropping the context to n_positions),
  // sampling from softmax(logits / temperature) restricted to the top_k tokens (0: all) with
  // `gen`; temperature 0 takes the argmax. Runs under NoGradGuard in eval mode and restores
  // the training mode afterwards. Returns [1, T + max_new_tokens] i64.
  Tensor generate(const Tensor& ids, int64_t max_new_tokens, double temperature, int64_t top_k,
                  Generator& gen) override;

 protected:
  Tensor forward_impl(const Tensor& ids) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  GPTConfig cfg_;
  std::shared_ptr<Module> transformer_;
  std::shared_ptr<Embedding> wpe_;
  std::shared_ptr<ModuleList> h_;
};

// ---- pipeline stages -------------------------------------------------------------------------

// A slice of the GPT for pipeline parallelism, with the GPT's parameter names
// ("transformer.h.5.attn.c_attn.weight"), so a GPT state dict loads into it (non-strict: it
// holds only its part). forward(ids [B, T]) or forward(h [B, T, d]) -> h [B, T, d] or logits
// [B, T, vocab]; backward returns the input's gradient (undefined for ids). Each layer runs
// exactly as inside GPT, so a stage computes the bits of its slice of GPT. The head's
// weight: with the embedding on the same stage, wte's handle (tied, as GPT); otherwise
// `lm_head.weight` is a replica of wte that the pipeline keeps equal to the first stage's
// (docs/parallelism.md, "Tied weights"). Type name "GPTStage". Its layers are looked up by name
// on every pass (as GPT's), so tensor parallelism (shard::parallelize) can swap them.
class GPTStage : public CausalLMStage {
 public:
  // spec.embedding: wte, wpe, drop; spec.head: ln_f and lm_head.
  GPTStage(const GPTConfig& cfg, StageSpec spec);
  const GPTConfig& config() const { return cfg_; }
  const StageSpec& spec() const override { return spec_; }

  // The values GPT::init_weights(gen) gives these parameters (the replica: wte's), computed
  // per parameter by GPT::init_weights_range; `gen` (in the state init_weights would start
  // from) is not advanced, nor is the default generator. f32 parameters of the whole
  // (unparallelized) shapes only: initialize before tensor parallelism splits the stage.
  void init_weights(const Generator& gen) override;

  Block& block(int64_t i);  // a global block index in [first_block, end_block)

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  GPTConfig cfg_;
  StageSpec spec_;
  std::shared_ptr<Module> transformer_, h_;  // containers (never replaced)
};

// GPT::parallel_plan() without a model (the plan of any GPT: a pipeline stage's too).
const ParallelPlan& gpt_parallel_plan();

// ---- Hugging Face folders (save_pretrained / from_pretrained) ----------------------------------

// Writes config.json (GPTConfig::to_hf_json) and the weights as model.safetensors, or split
// into model-0000i-of-0000N.safetensors + model.safetensors.index.json when they exceed
// max_shard_size (transformers' "5GB" default). Tied duplicates are left out (lm_head.weight),
// as save_pretrained does, and every file carries the {"format": "pt"} metadata transformers
// requires. Atomic per file (docs/files.md). GPT2LMHeadModel.from_pretrained(folder) reads it.
void save_pretrained(const GPT& model, const std::filesystem::path& folder,
                     std::string_view max_shard_size = "5GB");
// Builds a GPT from a folder written by save_pretrained or by transformers (config.json plus
// model.safetensors or its index; transformers' non-persistent attn.bias / attn.masked_bias
// buffers are ignored if present, anything else unexpected is an error naming it).
std::shared_ptr<GPT> from_pretrained(const std::filesystem::path& folder,
                                     DType dtype = DType::kF32);

}  // namespace braid::nn
