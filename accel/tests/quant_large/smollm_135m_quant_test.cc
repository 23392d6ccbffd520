// The Llama family at a real published size through issue 34's "Done when": SmolLM-135M's
// configuration (a LlamaForCausalLM of 134.5M parameters: 30 decoder layers, grouped keys and
// values, a tied head), trained until it has memorised a few windows of text, then loaded 8-bit
// and 4-bit from braid's and from transformers' safetensors, the same greedy tokens as the
// full-precision model, run under a memory cap of half its size through dispatch (the check:
// quant_large_util.h). The weights are braid's own training, not SmolLM's: the check needs
// peaked logits on text it knows, and the published weights are not at hand here.
// Figures (printed as "[ measured ]" lines): docs/performance.md, "Quantized models under a
// memory cap (issue 34)". Label "large", like gpt2_small_quant_test.cc.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "braid/nn/llama.h"
#include "quant_large_util.h"

namespace braid::accel {
namespace {

quant_large::Family llama_family() {
  return {.name = "SmolLM-135M",
          .hf_class = "LlamaForCausalLM",
          .block_class = "LlamaDecoderLayer",
          .block_prefix = "model.layers.",
          .meta_from_config = [](const std::string& json) -> std::shared_ptr<nn::CausalLM> {
            nn::InitEmptyWeights empty;
            return std::make_shared<nn::Llama>(nn::LlamaConfig::from_hf_json(json));
          },
          .save_pretrained =
              [](const nn::CausalLM& m, const std::filesystem::path& folder) {
                nn::save_pretrained(dynamic_cast<const nn::Llama&>(m), folder);
              }};
}

// HuggingFaceTB/SmolLM-135M's config.json: 49152 x 576 embedding tied to the head, 30 layers of
// 9 query heads and 3 key / value heads (head dim 64), SwiGLU 1536; 134,515,008 parameters.
nn::LlamaConfig smollm_135m() {
  return {.vocab_size = 49152,
          .hidden_size = 576,
          .intermediate_size = 1536,
          .num_hidden_layers = 30,
          .num_attention_heads = 9,
          .num_key_value_heads = 3,
          .max_position_embeddings = 2048,
          .initializer_range = 0.02,
          .rms_norm_eps = 1e-5,
          .tie_word_embeddings = true,
          .rope_theta = 10000.0,
          .bos_token_id = 0,
          .eos_token_id = 0};
}

TEST(QuantizedDispatch, SmolLm135mAtFullSize) {
  quant_large::FullSizeCheck check{.family = llama_family()};
  // 2 windows of 64 bytes (the check needs the first 64): with GPT-2's 4 the loss stalled
  // between 0.013 and 0.04 for the last 30 of 80 steps (0.093 in f32); with 2 it falls below 0.01
  // in 64 steps of 0.7 to 1 s on the Zen 4 of docs/performance.md.
  check.training = {
      .batch = 2, .seq = 64, .lr = 3e-4, .max_steps = 120, .stop_loss = 0.01, .max_f32_loss = 0.05};
  // Measured 0.4%, 3.3%, 5.4% of the largest f32 logit (13.8) on a Zen 4 and 0.34%, 8.25%, 5.57%
  // (of 13.95) on a Xeon with AMX: the trained model differs with the bf16 GEMM's summation
  // order (the quantized generation at another SIMD level gives the same error to the bit), and
  // the largest NF4 error of the Xeon's model is 2.5 times the Zen 4's. Each bound is below half
  // the smallest f32 top-2 margin over the generated positions (4.85 and 3.52), so an error
  // within it cannot flip a greedy token; a broken dequantization measured 92%.
  check.modes = {{"int8", 0.01}, {"nf4-dq", 0.10}, {"fp4", 0.075}};
  // max_memory at 25% of the f32 size, below the 4-bit models' 168 and 173 MB (31% and 32%): the
  // tied embedding is a smaller share of this model than of GPT-2 small, so at GPT-2's 40% the
  // NF4 model fits and nothing goes to disk.
  check.budget_fraction = 0.25;
  quant_large::check_at_full_size(std::make_shared<nn::Llama>(smollm_135m()), check);
}

}  // namespace
}  // namespace braid::accel
