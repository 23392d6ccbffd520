// GPT folders in Hugging Face's layout: config.json + model.safetensors (or sharded with an
// index), readable by transformers' GPT2LMHeadModel.from_pretrained and written by its
// save_pretrained.
#include <algorithm>

#include "braid/core/file_util.h"
#include "braid/nn/gpt.h"

namespace braid::nn {

void save_pretrained(const GPT& model, const std::filesystem::path& folder,
                     std::string_view max_shard_size) {
  std::filesystem::create_directories(folder);
  // Tied names after the first (sorted: lm_head.weight < transformer.wte.weight) are the
  // duplicates transformers drops; it keeps transformer.wte.weight and reties on load.
  NamedTensors tensors;
  for (auto& [name, t] : model.state_dict()) {
    if (name == "lm_head.weight") continue;
    tensors.emplace_back(name, t);
  }
  write_file_atomic(folder / "config.json", model.config().to_hf_json());
  save_sharded(folder, tensors, max_shard_size, {{"format", "pt"}});
}

std::shared_ptr<GPT> from_pretrained(const std::filesystem::path& folder, DType dtype) {
  const auto config_path = folder / "config.json";
  BRAID_CHECK(std::filesystem::exists(config_path), kIo, "from_pretrained: ", folder.string(),
              " has no config.json");
  GPTConfig cfg = GPTConfig::from_hf_json(read_file(config_path));
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
