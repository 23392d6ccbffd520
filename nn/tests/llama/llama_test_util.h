// Helpers for the Llama tests: tiny configurations and deterministic inputs.
#pragma once

#include "../gpt/gpt_test_util.h"
#include "braid/core/rng.h"
#include "braid/nn/llama.h"
#include "braid/tensor/ops.h"

namespace braid::nn::llama_testing {

// vocab 13, hidden 16, 4 query heads of 4 and 2 key /
// value heads (grouped), intermediate 20, 2 layers: small enough for finite differences.
inline LlamaConfig tiny_config(DType dtype = DType::kF64, int64_t kv_heads = 2) {
  LlamaConfig cfg;
  cfg.vocab_size = 13;
  cfg.hidden_size = 16;
  cfg.intermediate_size = 20;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = kv_heads;
  cfg.max_position_embeddings = 16;
  cfg.rope_theta = 100.0;  // a short period, so positions differ visibly over a few tokens
  cfg.rms_norm_eps = 1e-5;
  cfg.initializer_range = 0.3;  // larger than 0.02 so every path carries signal
  cfg.dtype = dtype;
  return cfg;
}

using gpt_testing::random_ids;  // ids [batch, seq] in [0, vocab) from a seed

// Every parameter of `m` drawn N(0, scale) from `seed` (norm weights around 1), so biases and
// norms carry signal too.
inline void randomize(Module& m, uint64_t seed, double scale = 0.3) {
  Generator gen(seed);
  for (auto& [name, p] : m.named_parameters()) {
    Tensor r = mul(Tensor::randn(p.data().shape(), DType::kF64, &gen), scale);
    if (name.ends_with("norm.weight")) r = add(r, 1.0);
    p.data().copy_(r.to(p.data().dtype()));
  }
}

}  // namespace braid::nn::llama_testing
