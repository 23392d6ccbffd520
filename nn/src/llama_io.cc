// Llama folders in Hugging Face's layout: config.json + model.safetensors (or sharded with an
// index), readable by transformers' LlamaForCausalLM.from_pretrained and written by its
// save_pretrained.
#include "braid/nn/llama.h"
#include "causal_lm_util.h"

namespace braid::nn {

void save_pretrained(const Llama& model, const std::filesystem::path& folder,
                     std::string_view max_shard_size) {
  // A tied lm_head.weight is the duplicate transformers drops (it keeps
  // model.embed_tokens.weight and reties on load).
  const bool tied = model.config().tie_word_embeddings;
  NamedTensors tensors;
  for (auto& [name, t] : model.state_dict()) {
    if (tied && name == "lm_head.weight") continue;
    tensors.emplace_back(name, t);
  }
  detail::write_hf_folder(folder, model.config().to_hf_json(), tensors, max_shard_size);
}

std::shared_ptr<Llama> llama_from_pretrained(const std::filesystem::path& folder, DType dtype) {
  LlamaConfig cfg =
      LlamaConfig::from_hf_json(detail::read_hf_config(folder, "llama_from_pretrained"));
  cfg.dtype = dtype;
  auto model = std::make_shared<Llama>(cfg);
  NamedTensors state;
  for (auto& [name, t] : load_safetensors(folder)) {
    // Older transformers saved the rotary inv_freq buffers; braid computes them.
    if (!name.ends_with(".rotary_emb.inv_freq")) state.emplace_back(name, t);
  }
  model->load_state_dict(state, /*strict=*/true);
  return model;
}

}  // namespace braid::nn
