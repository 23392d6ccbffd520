// docs/quantization.md's example: a GPT saved as gpt2/, rebuilt on the meta device and loaded
// straight into NF4 Linear layers (double quantization, bf16 compute), greedy generation, and
// the quantized weights written in bitsandbytes' names. Exits 1 unless layers were quantized,
// nothing is missing, the tokens have the right shape and the file holds the quant state.
#include <cstdio>
#include <string>

#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"
#include "braid/tensor/safetensors.h"
// [snippet]
#include "braid/accel/quantization.h"
// [end snippet]

using namespace braid;

int main() {
  nn::GPTConfig cfg{.vocab_size = 64, .n_positions = 16, .n_embd = 64, .n_layer = 2, .n_head = 4};
  {
    auto whole = std::make_shared<nn::GPT>(cfg);
    Generator gen(3);
    whole->init_weights(gen);
    nn::save_pretrained(*whole, "gpt2");
  }
  const Tensor prompt = Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64);
  // [snippet]
  std::shared_ptr<nn::GPT> gpt;
  {
    nn::InitEmptyWeights empty;
    gpt = std::make_shared<nn::GPT>(cfg);
  }  // no memory: the weights come from the file
  accel::BnbQuantizationConfig q;
  q.load_in_4bit = true;
  q.bnb_4bit_quant_type = "nf4";
  q.bnb_4bit_use_double_quant = true;
  q.bnb_4bit_compute_dtype = "bf16";
  auto r = accel::load_and_quantize_model(*gpt, q, "gpt2/");  // file, index .json or folder
  // r.quantized_modules, r.missing_keys, r.unexpected_keys
  Generator g(0);
  Tensor out = gpt->generate(prompt, 20, 0.0, 0, g);
  accel::save_quantized_model(*gpt, "gpt2-nf4.safetensors");  // bitsandbytes' names
  // [end snippet]
  bool state = false;
  for (const auto& [name, t] : load_safetensors("gpt2-nf4.safetensors")) {
    if (name.find(".weight.quant_state.bitsandbytes__nf4") != std::string::npos) state = true;
  }
  const bool ok = !r.quantized_modules.empty() && r.missing_keys.empty() &&
                  out.shape() == Shape{1, 23} && state;
  if (!ok) std::fprintf(stderr, "FAIL: quantized load, generation or file\n");
  return ok ? 0 : 1;
}
