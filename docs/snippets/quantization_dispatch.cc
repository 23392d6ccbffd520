// docs/quantization.md's disk-offload example: a GPT saved as gpt2/, loaded straight into NF4
// with max_memory sending the blocks to disk: their quantized tensors are written to offload/ and
// streamed in around each forward. Exits 1 unless blocks stream, the offload folder holds the
// packed codes and the tokens equal those of the same model quantized whole in memory.
#include <cstdio>
#include <filesystem>

#include "braid/accel/quantization.h"
#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"

using namespace braid;

int main() {
  nn::GPTConfig cfg{.vocab_size = 64, .n_positions = 16, .n_embd = 64, .n_layer = 4, .n_head = 4};
  {
    auto whole = std::make_shared<nn::GPT>(cfg);
    Generator gen(3);
    whole->init_weights(gen);
    nn::save_pretrained(*whole, "gpt2");
  }
  accel::BnbQuantizationConfig q;
  q.load_in_4bit = true;
  q.bnb_4bit_quant_type = "nf4";
  q.bnb_4bit_compute_dtype = "fp32";
  const Tensor prompt = Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64);
  auto build = [&] {
    nn::InitEmptyWeights empty;
    return std::make_shared<nn::GPT>(cfg);
  };
  Tensor want;
  {
    auto whole = build();
    accel::load_and_quantize_model(*whole, q, "gpt2/");
    Generator g(0);
    want = whole->generate(prompt, 20, 0.0, 0, g);
  }
  auto gpt = build();
  Generator g(0);
  // [snippet]
  accel::LoadAndQuantizeResult r = accel::load_and_quantize_model(
      *gpt, q, "gpt2/",
      {.device_map = "auto",
       .max_memory = accel::MaxMemory{{"cpu", "100KiB"}, {"disk", 0}},  // the rest: disk
       .no_split_module_classes = {"GPT2Block"},
       .offload_folder = "offload"});
  // r.device_map; r.dispatched.offloaded_modules(): the blocks streamed from offload/, each
  // read before its forward (the next one ahead) and freed after. Keep r.dispatched alive.
  Tensor out = gpt->generate(prompt, 20, 0.0, 0, g);
  // [end snippet]
  const bool ok = r.dispatched.offloaded_modules().size() >= 2 &&
                  std::filesystem::exists("offload/transformer.h.3.mlp.c_fc.weight.absmax.dat") &&
                  out.to_vector() == want.to_vector();
  if (!ok) std::fprintf(stderr, "FAIL: no blocks on disk, no offload files, or other tokens\n");
  return ok ? 0 : 1;
}
