// The Llama's embedding step, initialization rule and parallel plan, shared by Llama (llama.cc)
// and LlamaStage (llama_stage.cc) so that a pipeline's stages run exactly the layers Llama
// runs. Internal to nn/.
#pragma once

#include "braid/nn/llama.h"
#include "causal_lm_util.h"

namespace braid::nn::detail {

// embed_tokens: [vocab_size, hidden_size], pad_token_id its padding_idx (positions holding it
// add nothing to its gradient, as torch's nn.Embedding(padding_idx)).
std::shared_ptr<Embedding> llama_embedding(const LlamaConfig& cfg);
// Checks the token ids ("<who>: token id 40 at [0, 3] is outside [0, vocab_size 37)"), then
// embed(ids).
Tensor llama_embed_forward(const LlamaConfig& cfg, Layer& embed, const Tensor& ids,
                           const char* who);
// transformers' _init_weights for Llama: biases 0, RMSNorm weights 1, other weights
// N(0, initializer_range).
InitRule llama_init_rule(const LlamaConfig& cfg);
ParallelPlan llama_parallel_plan(const LlamaConfig& cfg);
// transformers' LlamaRMSNorm: the weight applied after the cast back to the input's dtype.
inline std::shared_ptr<RMSNorm> llama_rms_norm(const LlamaConfig& cfg) {
  return std::make_shared<RMSNorm>(cfg.hidden_size, cfg.rms_norm_eps, cfg.dtype,
                                   RmsNormWeight::kAfterCast);
}

}  // namespace braid::nn::detail
