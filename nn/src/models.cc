// The family registry of models.h.
#include "braid/nn/models.h"

#include <utility>

#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "hf_json.h"

namespace braid::nn {

namespace {

struct Preset {
  const char* name;
  const char* alias;
  const char* json;
};

// The published config.json fields braid reads (transformers' defaults fill the rest).
const Preset kPresets[] = {
    {"gpt2", "openai-community/gpt2",
     R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12})"},
    {"gpt2-medium", "openai-community/gpt2-medium",
     R"({"model_type": "gpt2", "n_layer": 24, "n_embd": 1024, "n_head": 16})"},
    {"gpt2-large", "openai-community/gpt2-large",
     R"({"model_type": "gpt2", "n_layer": 36, "n_embd": 1280, "n_head": 20})"},
    {"gpt2-xl", "openai-community/gpt2-xl",
     R"({"model_type": "gpt2", "n_layer": 48, "n_embd": 1600, "n_head": 25})"},
    {"meta-llama/Llama-2-7b-hf", "llama-2-7b",
     R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
         "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 32, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05})"},
    {"meta-llama/Llama-2-13b-hf", "llama-2-13b",
     R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 5120,
         "intermediate_size": 13824, "num_hidden_layers": 40, "num_attention_heads": 40,
         "num_key_value_heads": 40, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05})"},
    {"TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama",
     R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048,
         "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
         "num_key_value_heads": 4, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05})"},
};

}  // namespace

std::vector<std::string> causal_lm_model_types() {
  return {"gpt2", "llama"};
}

std::shared_ptr<CausalLM> causal_lm_from_hf_config(const std::string& json_text) {
  const nlohmann::json j = detail::parse_json_object(json_text, "config");
  const auto it = j.find("model_type");
  BRAID_CHECK(it != j.end() && it->is_string(), kInvalidArgument,
              "config json: no \"model_type\" string; expected one of \"gpt2\", \"llama\"");
  const std::string type = it->get<std::string>();
  if (type == "gpt2") {
    return std::make_shared<GPT>(GPTConfig::from_hf_json(json_text));
  }
  if (type == "llama") {
    return std::make_shared<Llama>(LlamaConfig::from_hf_json(json_text));
  }
  BRAID_FAIL(kInvalidArgument, "config json: model_type \"", type,
             "\" is not a family braid implements; expected one of \"gpt2\", \"llama\"");
}

std::string causal_lm_preset_config(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name == p.name || name == p.alias) return p.json;
  }
  return "";
}

std::vector<std::string> causal_lm_preset_names() {
  std::vector<std::string> out;
  for (const Preset& p : kPresets) out.emplace_back(p.name);
  return out;
}

std::string block_type_name(const CausalLM& model) {
  const std::string& path = model.parallel_plan().blocks;
  const Module& blocks = model.get_submodule(path);
  const auto children = blocks.named_children();
  BRAID_CHECK(!children.empty(), kInvalidArgument, "block_type_name: the module list '", path,
              "' holds no blocks");
  return children.front().second->type_name();
}

}  // namespace braid::nn
