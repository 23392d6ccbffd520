// Pieces every CausalLM family shares (GPT in gpt*.cc, Llama in llama*.cc), written once:
// token-id checks, transformers-style initialization by rule with its positional range form,
// a pipeline stage's initialization from the whole model, sampling, and Hugging Face folders.
// Internal to nn/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "braid/core/rng.h"
#include "braid/nn/causal_lm.h"
#include "braid/nn/module.h"
#include "braid/tensor/safetensors.h"

namespace braid::nn::detail {

// ids must be defined, i64 or i32 and [batch, seq] ("<who>: ids must be [batch, seq], ...").
void check_ids_shape(const Tensor& ids, const char* who);
// Every id in [0, vocab) (checked on the host; meta ids have no values):
// "<who>: token id 40 at [0, 3] is outside [0, vocab_size 37)" (kOutOfRange).
void check_id_values(const Tensor& ids, int64_t vocab, const char* who);

// What transformers' _init_weights writes into one parameter.
struct InitDraw {
  enum Kind : uint8_t { kZeros, kOnes, kNormal } kind = kNormal;
  double std = 0.0;  // kNormal: N(0, std)
};
using InitRule = std::function<InitDraw(const std::string& name)>;

// Every parameter of `m` in named_parameters() order: zeros, ones, or std * randn drawn from
// `gen` (f64 draws for f64 parameters, f32 otherwise).
void init_by_rule(Module& m, Generator& gen, const InitRule& rule);
// What init_by_rule(m, gen, rule) writes into elements [offset, offset + count) of the f32
// parameter `name`, computed for that range alone: an f32 normal draw of n elements reads
// 2 ceil(n / 2) words rounded up to a block of 4, so each parameter's draw starts at a known
// word and element i at word 2 (i / 2) of it (docs/rng.md). `gen` is not advanced.
// kOutOfRange naming `who` for an unknown name or a range outside the parameter.
void init_range_by_rule(const Module& m, const Generator& gen, const std::string& name,
                        int64_t offset, int64_t count, float* dst, const InitRule& rule,
                        const char* who);

// Builds a model with `make` under InitEmptyWeights (meta: no memory) and puts the default CPU
// generator back where it was (the layers' constructors draw from it).
std::shared_ptr<CausalLM> build_on_meta(const std::function<std::shared_ptr<CausalLM>()>& make);
// A stage's CausalLMStage::init_weights: each (contiguous f32 cpu) parameter of `stage` gets
// whole.init_weights_range(gen, name), `replica` taking `source`'s values (a tied head's
// replica of the embedding; empty: none).
void init_stage_from_whole(Module& stage, const CausalLM& whole, const Generator& gen,
                           std::string_view replica, std::string_view source, const char* who);

// Options of generate_tokens (GPT::generate, Llama::generate).
struct GenerateOptions {
  int64_t max_new_tokens = 0;
  double temperature = 0.0;  // 0: the first maximum
  int64_t top_k = 0;         // 0: every token
  int64_t context = 0;       // the last `context` tokens are the model's input
  int64_t vocab = 0;
};
// Appends tokens to ids [1, T] (docs/nn.md, "GPT", generate): eval mode and no grad for the
// duration (the training mode restored, also on an exception). Returns [1, T + new] i64.
Tensor generate_tokens(Layer& model, const Tensor& ids, const GenerateOptions& opt, Generator& gen,
                       const char* who);

// Hugging Face's folder: config.json and the weights as model.safetensors or shards with an
// index, every file carrying {"format": "pt"} (transformers requires it), atomic per file.
void write_hf_folder(const std::filesystem::path& folder, const std::string& config_json,
                     const NamedTensors& tensors, std::string_view max_shard_size);
// config.json's text (kIo naming the folder when there is none).
std::string read_hf_config(const std::filesystem::path& folder, const char* who);

}  // namespace braid::nn::detail
