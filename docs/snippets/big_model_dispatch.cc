// docs/big-model.md's dispatch example: a GPT saved as tiny-gpt2/, rebuilt on the meta device
// and loaded with a CPU limit of two thirds of its size: the blocks that do not fit stay on disk
// and stream in around their forward. Exits 1 unless some blocks are on disk and greedy
// generation gives the tokens of the whole model in memory.
#include <cstdio>

#include "braid/core/rng.h"

// [snippet]
#include "braid/accel/big_model.h"
#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"
using namespace braid;

int main() {
  // [end snippet]
  nn::GPTConfig small{.vocab_size = 64, .n_positions = 16, .n_embd = 32, .n_layer = 6, .n_head = 4};
  Tensor expected;
  {
    auto whole = std::make_shared<nn::GPT>(small);
    Generator gen(3);
    whole->init_weights(gen);
    nn::save_pretrained(*whole, "tiny-gpt2");
    expected = whole->generate(Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64), 8, 0.0, 0, gen);
  }

  // [snippet]
  std::shared_ptr<nn::GPT> gpt;
  {
    nn::InitEmptyWeights empty;  // no memory yet
    gpt =
        std::make_shared<nn::GPT>(nn::GPTConfig::from_hf_json(read_file("tiny-gpt2/config.json")));
  }
  accel::DispatchedModel dispatched = accel::load_checkpoint_and_dispatch(
      *gpt, "tiny-gpt2/",
      {.device_map = "auto",
       .max_memory = accel::MaxMemory{{"cpu", "200KiB"}, {"disk", 0}},  // the rest: disk
       .no_split_module_classes = {"GPT2Block"},
       .offload_folder = "offload"});
  // dispatched.offloaded_modules(): {"transformer.h.1", ..., "transformer.ln_f"}; each one's
  // weights are read from offload/ before its forward (the next one ahead) and freed after.
  Generator gen(0);
  Tensor ids = gpt->generate(Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64), 8, 0.0, 0, gen);
  // [end snippet]

  const bool ok = dispatched.offloaded_modules().size() >= 2 &&
                  dispatched.offloaded_modules()[0] == "transformer.h.1" &&
                  ids.to_vector() == expected.to_vector() && dispatched.loaded_bytes() == 0;
  if (!ok) std::fprintf(stderr, "FAIL: no block offloaded, or other tokens than the whole model\n");
  return ok ? 0 : 1;
}
