// docs/quantization.md's example of a checkpoint written by bitsandbytes + transformers
// (tests/reference/bnb_checkpoints/gpt2-nf4, copied here from the path given as the argument):
// the model built from its config.json on meta, the quantization config read from the same
// file, the bitsandbytes tensors loaded as they are. Exits 1 unless nothing is missing or left
// over and greedy generation continues the token cycle the model was trained on.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "braid/core/file_util.h"
#include "braid/nn/models.h"
// [snippet]
#include "braid/accel/quantization.h"
// [end snippet]

using namespace braid;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <bnb_checkpoints/gpt2-nf4>\n", argv[0]);
    return 2;
  }
  std::filesystem::copy(argv[1], "gpt2-nf4");
  // [snippet]
  std::shared_ptr<nn::CausalLM> model;
  {
    nn::InitEmptyWeights empty;
    model = nn::causal_lm_from_hf_config(read_file("gpt2-nf4/config.json"));
  }
  auto q = accel::bnb_config_from_hf_config(read_file("gpt2-nf4/config.json"));
  auto r = accel::load_and_quantize_model(*model, q, "gpt2-nf4/");  // the tensors as they are
  // [end snippet]
  model->eval();
  Generator g(0);
  const Tensor out =
      model->generate(Tensor::from_vector({3, 10, 17}, {1, 3}, DType::kI64), 4, 0.0, 0, g);
  const bool ok = q.load_in_4bit && q.bnb_4bit_quant_type == "nf4" && r.missing_keys.empty() &&
                  r.unexpected_keys.empty() && !r.quantized_modules.empty() &&
                  out.to_vector() == std::vector<double>{3, 10, 17, 24, 31, 38, 45};
  if (!ok) std::fprintf(stderr, "FAIL: config, load or generation\n");
  return ok ? 0 : 1;
}
