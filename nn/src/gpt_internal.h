// The GPT's embedding step, shared by GPT (gpt.cc) and GPTStage (gpt_stage.cc) so that a
// pipeline's first stage runs exactly the layers GPT runs. Internal to nn/.
#pragma once

#include "braid/nn/gpt.h"

namespace braid::nn::detail {

// Checks the token ids (`who` names the model in errors: "GPT: token id 40 at [0, 3] is
// outside [0, vocab_size 37)"), then h = drop(wte(ids) + wpe(arange(T))).
Tensor gpt_embed_forward(const GPTConfig& cfg, Embedding& wte, Embedding& wpe, Dropout& drop,
                         const Tensor& ids, const char* who);
// The backward of gpt_embed_forward: drop, then wpe (summed over the batch), then wte.
void gpt_embed_backward(Embedding& wte, Embedding& wpe, Dropout& drop, const Tensor& grad);

}  // namespace braid::nn::detail
