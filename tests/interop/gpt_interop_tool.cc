// gpt_interop_tool: the C++ side of the transformers interop test (gpt_transformers.py).
//
//   gpt_interop_tool save <folder>        a seeded GPT -> <folder>/model (save_pretrained) and
//                                         <folder>/braid_logits.safetensors {ids, logits}
//   gpt_interop_tool run <model> <ids> <out>
//                                         from_pretrained(<model>), logits of the "ids" tensor
//                                         of <ids> -> <out> {logits}
#include <iostream>
#include <string>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/gpt.h"
#include "braid/tensor/safetensors.h"

namespace {

using namespace braid;

Tensor ids_of(const NamedTensors& file) {
  for (auto& [name, t] : file) {
    if (name == "ids") return t;
  }
  BRAID_FAIL(kInvalidArgument, "the ids file has no tensor 'ids'");
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "save" && argc == 3) {
    const std::string dir = argv[2];
    nn::GPTConfig cfg;
    cfg.vocab_size = 50;
    cfg.n_positions = 32;
    cfg.n_embd = 24;
    cfg.n_layer = 2;
    cfg.n_head = 3;
    cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0;
    nn::GPT gpt(cfg);
    Generator gen(7);
    gpt.init_weights(gen);
    // Non-zero biases and LayerNorm affines, so a layout mistake in any of them shows.
    for (auto& [name, p] : gpt.named_parameters()) {
      if (name.ends_with("bias") || name.find(".ln_") != std::string::npos) {
        p.data().copy_(add(p.data(), mul(Tensor::randn(p.data().shape(), DType::kF32, &gen), 0.1)));
      }
    }
    nn::save_pretrained(gpt, dir + "/model");
    Tensor ids = Tensor::from_vector(
        {3, 17, 42, 0, 49, 8, 8, 21, 33, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 10}, DType::kI64);
    gpt.eval();
    nn::NoGradGuard no_grad;
    Tensor logits = gpt.forward(ids);
    save_safetensors(dir + "/braid_logits.safetensors", {{"ids", ids}, {"logits", logits}});
    return 0;
  }
  if (cmd == "run" && argc == 5) {
    auto gpt = nn::from_pretrained(argv[2]);
    gpt->eval();
    nn::NoGradGuard no_grad;
    Tensor logits = gpt->forward(ids_of(load_safetensors(argv[3])));
    save_safetensors(argv[4], {{"logits", logits}});
    return 0;
  }
  std::cerr << "usage: gpt_interop_tool save <folder> | run <model> <ids> <out>\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "gpt_interop_tool: " << e.what() << "\n";
    return 1;
  }
}
