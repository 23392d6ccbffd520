// The check of issue 34's "Done when" for a causal language model at a real published size,
// whatever its family (gpt2_small_quant_test.cc, smollm_135m_quant_test.cc): loaded 8-bit and
// 4-bit from braid's and from transformers' safetensors, the same greedy tokens as the
// full-precision model, run under a memory cap of half its size through dispatch.
//
// An untrained model's logits are nearly flat, so any rounding flips its greedy choices and a
// token comparison says nothing. The check therefore first makes the logits peaked: it trains
// the model until it has memorised a few hundred bytes of a licence text (byte-level ids, as
// nn::TextBytesDataset), asserting the loss. Then it saves it with braid's save_pretrained
// (transformers' names), has transformers load that folder, generate greedily and save its own
// checkpoint (transformers_resave.py, under BRAID_TORCH_PYTHON), and checks against things
// computed independently:
//   - the f32 model continues the prompt with the memorised text, and transformers' f32 model
//     gives the same tokens and logits (up to summation order);
//   - int8 (LLM.int8), NF4 with double quantization and FP4 loaded from braid's file give the
//     f32 model's tokens exactly, with a logit error under a stated bound;
//   - the same, through dispatch with max_memory below half the f32 size (blocks on disk): tokens
//     and logits bit for bit those of the quantized model held whole, and the CPU allocator's
//     peak, loading and generating, under half the f32 size;
//   - int8 and NF4 loaded from transformers' file, through dispatch under the cap: the same
//     tokens, and logits bit for bit those from braid's file (the weights are the same values).
// Figures (printed as "[ measured ] " lines): docs/performance.md, "Quantized models under a
// memory cap (issue 34)"; what is asserted and why: docs/quantization.md, "What is verified".
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/nn/causal_lm.h"

namespace braid::accel::quant_large {

// What the check needs to know about a model family.
struct Family {
  std::string name;          // in the printed lines: "GPT-2 small"
  std::string hf_class;      // transformers' class, for transformers_resave.py: "GPT2LMHeadModel"
  std::string block_class;   // the decoder block's type name, kept whole by dispatch: "GPT2Block"
  std::string block_prefix;  // the blocks' module paths begin with it: "transformer.h."
  // The family's model on the meta device (InitEmptyWeights) from transformers' config.json.
  std::function<std::shared_ptr<nn::CausalLM>(const std::string& config_json)> meta_from_config;
  // braid's save_pretrained for the family (config.json + model.safetensors).
  std::function<void(const nn::CausalLM&, const std::filesystem::path&)> save_pretrained;
};

// How the model memorises the text: AdamW (no weight decay) under bf16 autocast, gradients
// clipped, on `batch` windows of `seq` bytes of the text (its first batch * seq + 1 bytes),
// stopped once the batch loss is below stop_loss; max_f32_loss is asserted in f32 afterwards.
struct Training {
  int64_t batch = 4, seq = 64;
  double lr = 3e-4, max_grad_norm = 1.0;
  int max_steps = 80;
  double stop_loss = 0.01, max_f32_loss = 0.05;
};

// A quantization mode ("int8", "nf4-dq", "fp4") and the bound on its logit error: max |logit -
// f32 logit| / max |f32 logit| over the generated positions.
struct Mode {
  const char* name;
  double bound;
};

struct FullSizeCheck {
  Family family{};
  Training training{};
  std::vector<Mode> modes{};
  // max |braid f32 logit - transformers f32 logit| / max |logit|: summation order only.
  double transformers_bound = 1e-4;
  // Loaded from transformers' re-saved file under the cap.
  std::vector<std::string> transformers_modes = {"int8", "nf4-dq"};
  // max_memory's cpu budget, as a fraction of the f32 size. It budgets weights only
  // (activations and logits come on top, as in Accelerate: docs/big-model.md, "Dispatch"), so
  // it sits below the asserted cap of half the f32 size, and below every mode's quantized size
  // so that the blocks go to disk.
  double budget_fraction = 0.4;
};

// Greedy generation: the text's first kPrompt bytes, then kNew new tokens, which must be the
// memorised bytes that follow.
inline constexpr int64_t kPrompt = 32, kNew = 32;

// Initializes `model` (its family's init_weights, seed 1), trains it, and runs every step of
// the check above with gtest assertions, printing "[ measured ] " lines. Releases the model
// after the f32 step, so the caller should not keep it.
void check_at_full_size(std::shared_ptr<nn::CausalLM> model, const FullSizeCheck& check);

}  // namespace braid::accel::quant_large
