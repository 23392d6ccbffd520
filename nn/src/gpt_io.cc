// GPT folders in Hugging Face's layout: config.json + model.safetensors (or sharded with an
// index), readable by transformers' GPT2LMHeadModel.from_pretrained and written by its
// save_pretrained.
#include "braid/nn/gpt.h"
#include "causal_lm_util.h"

namespace braid::nn {

void save_pretrained(const GPT& model, const std::filesystem::path& folder,
                     std::string_view max_shard_size) {
  // Tied names after the first (sorted: lm_head.weight < transformer.wte.weight) are the
  // duplicates transformers drops; it keeps transformer.wte.weight and reties on load.
  NamedTensors tensors;
  for (auto& [name, t] : model.state_dict()) {
    if (name == "lm_head.weight") continue;
    tensors.emplace_back(name, t);
  }
  detail::write_hf_folder(folder, model.config().to_hf_json(), tensors, max_shard_size);
}

std::shared_ptr<GPT> from_pretrained(const std::filesystem::path& folder, DType dtype) {
  GPTConfig cfg = GPTConfig::from_hf_json(detail::read_hf_config(folder, "from_pretrained"));
  cfg.dtype = dtype;
  auto model = std::make_shared<GPT>(cfg);
  NamedTensors state;
  for (auto& [name, t] : load_safetensors(folder)) {
    // transformers < 4.31 saved the causal-mask buffers; they are not parameters.
    const bool mask_buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
    if (!mask_buffer) state.emplace_back(name, t);
  }
  model->load_state_dict(state, /*strict=*/true);
  return model;
}

}  // namespace braid::nn
