// SPDX-License-Identifier: Apache-2.0
// Llama (transformers' LlamaForCausalLM) with hand-written backward and Hugging Face's parameter
// names and layout, so a braid folder loads into transformers and the reverse (docs/nn.md,
// "Llama"):
//   model.embed_tokens.weight [vocab, d]
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight    q, o: [H hd, d] / [d, H hd]; k, v: [KV hd,
//   d] model.layers.{i}.mlp.{gate,up}_proj.weight [inter, d] model.layers.{i}.mlp.down_proj.weight
//   model.layers.{i}.input_layernorm.weight [d] model.layers.{i}.post_attention_layernorm.weight
//   model.norm.weight [d]                            lm_head.weight [vocab, d] (own unless tied)
// Linear weights are torch's [out, in] (WeightLayout::kOutIn).
//
//   LlamaConfig cfg{.vocab_size = 256, .hidden_size = 128, .intermediate_size = 344,
//                   .num_hidden_layers = 4, .num_attention_heads = 4, .num_key_value_heads = 2};
//   auto llama = std::make_shared<Llama>(cfg);  llama->init_weights(gen);
//   Tensor logits = llama->forward(ids);        // ids [B, T] i64 -> logits [B, T, vocab]
//   llama->backward(ce.backward());
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "braid/core/rng.h"
#include "braid/nn/causal_lm.h"
#include "braid/nn/layers.h"
#include "braid/nn/module.h"

namespace braid::nn {

// The fields of transformers' LlamaConfig that the model uses, with its defaults.
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads (transformers' None)
  std::string hidden_act = "silu";  // the only one supported
  int64_t max_position_embeddings = 2048;
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  bool attention_bias = false;     // q/k/v/o_proj biases
  double attention_dropout = 0.0;  // only 0 is supported
  bool mlp_bias = false;           // gate/up/down_proj biases (transformers >= 4.41)
  int64_t pad_token_id = -1;       // -1: none (null); its embedding row starts at 0
  int64_t bos_token_id = 1;
  int64_t eos_token_id = 2;
  bool activation_checkpointing = false;  // every decoder layer recomputes its forward
  DType dtype = DType::kF32;              // parameter storage

  int64_t kv_heads() const {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Throws kInvalidArgument naming the field (sizes > 0, hidden_size % num_attention_heads,
  // num_attention_heads % num_key_value_heads, hidden_act, attention_dropout, eps, theta).
  void validate() const;
  // transformers' config.json ("model_type": "llama", "architectures": ["LlamaForCausalLM"]).
  std::string to_hf_json() const;
  // Reads the fields above (others are ignored); refuses another model_type, a non-null
  // rope_scaling, a hidden_act other than "silu" and attention_dropout != 0, by name.
  static LlamaConfig from_hf_json(const std::string& json_text);
};

// Rotary position embedding as transformers 4.40's LlamaRotaryEmbedding: inv_freq[i] =
// 1 / theta^(2i / head_dim) in f32, angle (t, i) = t * inv_freq[i] in f32, cos / sin of
// [angle, angle] (the two halves repeat), then cast to `dtype`. Returns {cos, sin}, each
// [seq, head_dim] on `device`.
std::pair<Tensor, Tensor> llama_rotary_cos_sin(int64_t seq, int64_t head_dim, double theta,
                                               DType dtype, Device device);

// Self-attention with grouped keys and values: q_proj (d -> H hd), k_proj / v_proj
// (d -> KV hd), rotary embeddings on q and k (apply_rotary_pos_emb with rotate_half), query head
// h attends with key / value head h / (H / KV), scores q k^T / sqrt(hd) causal, softmax in f32
// (the fused attention kernel, as GPT's), o_proj (H hd -> d). Type name "LlamaAttention".
// Children looked up by name on every pass, so tensor parallelism can swap them.
class LlamaAttention : public Layer, public AttentionHeads {
 public:
  explicit LlamaAttention(const LlamaConfig& cfg);
  // Query heads [rank H / parts, (rank + 1) H / parts) and key / value heads [rank KV / parts,
  // (rank + 1) KV / parts): the layer then expects q_proj / k_proj / v_proj split by columns and
  // o_proj by rows to those heads (kInvalidArgument when H or KV is not a multiple of parts).
  void keep_heads(int rank, int parts) override;
  int64_t local_heads() const { return local_heads_; }
  int64_t local_kv_heads() const { return local_kv_heads_; }

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  int64_t hidden_, heads_, kv_heads_, head_dim_;
  double theta_;
  int64_t local_heads_, local_kv_heads_;
};

// down_proj(silu(gate_proj(x)) * up_proj(x)). Type name "LlamaMLP"; children gate_proj,
// up_proj, down_proj, act_fn looked up by name on every pass.
class LlamaMLP : public Layer {
 public:
  explicit LlamaMLP(const LlamaConfig& cfg);

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;
};

// x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(.)). Type name
// "LlamaDecoderLayer" (wrap policies match it).
class LlamaDecoderLayer : public Layer {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& cfg);

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;
};

// ids [B, T] (i64 or i32) -> logits [B, T, vocab]. Type name "LlamaForCausalLM". backward
// fills every parameter's gradient and returns an undefined Tensor. model.embed_tokens,
// model.norm and lm_head are looked up by name on every pass.
class Llama : public CausalLM {
 public:
  explicit Llama(const LlamaConfig& cfg);
  const LlamaConfig& config() const { return cfg_; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  int64_t num_blocks() const override { return cfg_.num_hidden_layers; }
  int64_t max_positions() const override { return cfg_.max_position_embeddings; }
  std::string model_type() const override { return "llama"; }
  // q/k/v_proj and gate/up_proj column-parallel, o_proj / down_proj row-parallel, self_attn by
  // heads, embed_tokens vocab-parallel, lm_head over the padded vocabulary; blocks at
  // "model.layers"; the tied pair only with tie_word_embeddings. Sequence parallelism splits
  // the sequence at embed_tokens (reduce-scattered) and runs the RMSNorms on seq / tp positions
  // (see llama.cc).
  const ParallelPlan& parallel_plan() const override { return plan_; }
  std::shared_ptr<CausalLMStage> make_stage(const StageSpec& spec) const override;
  std::string hf_config_json() const override { return cfg_.to_hf_json(); }

  // transformers' _init_weights for Llama: Linear and Embedding weights N(0,
  // initializer_range), biases 0, RMSNorm weights 1, the pad_token_id row of embed_tokens 0;
  // drawn from `gen` in named_parameters() order.
  void init_weights(Generator& gen) override;
  // The bits init_weights(gen) writes into [offset, offset + count) of `name`, computed for
  // that range alone (positional Philox, as GPT's).
  void init_weights_range(const Generator& gen, const std::string& name, int64_t offset,
                          int64_t count, float* dst) const override;

  LlamaDecoderLayer& layer(int64_t i);

  // As GPT::generate: greedy (temperature 0) or top-k sampling, the context cropped to
  // max_position_embeddings; no KV cache (each step runs the whole context).
  Tensor generate(const Tensor& ids, int64_t max_new_tokens, double temperature, int64_t top_k,
                  Generator& gen) override;

 protected:
  Tensor forward_impl(const Tensor& ids) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  LlamaConfig cfg_;
  ParallelPlan plan_;
  std::shared_ptr<Module> model_;
  std::shared_ptr<ModuleList> layers_;
};

// A slice of the Llama for pipeline parallelism under the Llama's names (as GPTStage):
// spec.embedding holds model.embed_tokens, spec.head model.norm and lm_head; with a tied head
// and the embedding elsewhere, lm_head.weight is a replica of embed_tokens' weight. Type name
// "LlamaStage".
class LlamaStage : public CausalLMStage {
 public:
  LlamaStage(const LlamaConfig& cfg, StageSpec spec);
  const LlamaConfig& config() const { return cfg_; }
  const StageSpec& spec() const override { return spec_; }
  void init_weights(const Generator& gen) override;
  LlamaDecoderLayer& layer(int64_t i);  // a global layer index in [first_block, end_block)

 protected:
  Tensor forward_impl(const Tensor& x) override;
  Tensor backward_impl(const Tensor& grad_output) override;

 private:
  LlamaConfig cfg_;
  StageSpec spec_;
  std::shared_ptr<Module> model_, layers_;
};

// ---- Hugging Face folders -----------------------------------------------------------------

// config.json + model.safetensors (or shards with an index above max_shard_size), the tied
// duplicate lm_head.weight left out; LlamaForCausalLM.from_pretrained reads it.
void save_pretrained(const Llama& model, const std::filesystem::path& folder,
                     std::string_view max_shard_size = "5GB");
// Builds a Llama from a folder written by save_pretrained or by transformers (non-persistent
// rotary buffers "*.rotary_emb.inv_freq" are skipped if present; anything else unexpected or
// missing is an error naming it).
std::shared_ptr<Llama> llama_from_pretrained(const std::filesystem::path& folder,
                                             DType dtype = DType::kF32);

}  // namespace braid::nn
