// LlamaConfig: validation and transformers' config.json (LlamaConfig) in both directions.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/core/error.h"
#include "braid/nn/llama.h"
#include "hf_json.h"

namespace braid::nn {
namespace {

using nlohmann::json;

void check_positive(const char* field, int64_t v) {
  BRAID_CHECK(v > 0, kInvalidArgument, "LlamaConfig: ", field, " = ", v, " must be > 0");
}
void check_finite_positive(const char* field, double v) {
  BRAID_CHECK(v > 0.0 && std::isfinite(v), kInvalidArgument, "LlamaConfig: ", field, " = ", v,
              " must be finite and > 0");
}

const char* torch_dtype_name(DType dt) {
  switch (dt) {
    case DType::kF64:
      return "float64";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    default:
      return "float32";
  }
}

template <typename T>
void read(const json& j, const char* key, T& out) {
  detail::read_json_field(j, key, out, "LlamaConfig");
}

// A token id: an integer, or null (-1). transformers also allows a list for eos_token_id;
// braid keeps the first.
void read_token_id(const json& j, const char* key, int64_t& out) {
  const auto it = j.find(key);
  if (it == j.end()) return;
  if (it->is_null()) {
    out = -1;
  } else if (it->is_array() && !it->empty() && it->front().is_number_integer()) {
    out = it->front().get<int64_t>();
  } else {
    BRAID_CHECK(it->is_number_integer(), kInvalidArgument, "LlamaConfig json: \"", key,
                "\" must be an integer or null, got ", it->dump());
    out = it->get<int64_t>();
  }
}

json token_id_json(int64_t id) {
  return id >= 0 ? json(id) : json(nullptr);
}

}  // namespace

void LlamaConfig::validate() const {
  check_positive("vocab_size", vocab_size);
  check_positive("hidden_size", hidden_size);
  check_positive("intermediate_size", intermediate_size);
  check_positive("num_hidden_layers", num_hidden_layers);
  check_positive("num_attention_heads", num_attention_heads);
  check_positive("max_position_embeddings", max_position_embeddings);
  BRAID_CHECK(num_key_value_heads >= 0, kInvalidArgument,
              "LlamaConfig: num_key_value_heads = ", num_key_value_heads,
              " must be > 0 (or 0 for num_attention_heads)");
  BRAID_CHECK(hidden_size % num_attention_heads == 0, kInvalidArgument,
              "LlamaConfig: hidden_size = ", hidden_size,
              " must be a multiple of num_attention_heads = ", num_attention_heads);
  BRAID_CHECK(head_dim() % 2 == 0, kInvalidArgument,
              "LlamaConfig: head_dim = hidden_size / "
              "num_attention_heads = ",
              head_dim(), " must be even (rotary embeddings)");
  BRAID_CHECK(num_attention_heads % kv_heads() == 0, kInvalidArgument,
              "LlamaConfig: num_attention_heads = ", num_attention_heads,
              " must be a multiple of num_key_value_heads = ", kv_heads());
  BRAID_CHECK(hidden_act == "silu", kNotSupported, "LlamaConfig: hidden_act \"", hidden_act,
              "\" is not supported (only \"silu\")");
  BRAID_CHECK(attention_dropout == 0.0, kNotSupported,
              "LlamaConfig: attention_dropout = ", attention_dropout,
              " is not supported (only 0.0)");
  check_finite_positive("rms_norm_eps", rms_norm_eps);
  check_finite_positive("rope_theta", rope_theta);
  BRAID_CHECK(initializer_range >= 0.0 && std::isfinite(initializer_range), kInvalidArgument,
              "LlamaConfig: initializer_range = ", initializer_range, " must be finite and >= 0");
  BRAID_CHECK(pad_token_id >= -1 && pad_token_id < vocab_size, kInvalidArgument,
              "LlamaConfig: pad_token_id = ", pad_token_id, " must be in [0, vocab_size ",
              vocab_size, ") or -1 (none)");
  BRAID_CHECK(
      dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
      kInvalidArgument, "LlamaConfig: dtype ", dtype,
      " must be a floating dtype (f64, f32, f16 or bf16)");
}

std::string LlamaConfig::to_hf_json() const {
  json j;
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["attention_bias"] = attention_bias;
  j["attention_dropout"] = attention_dropout;
  j["bos_token_id"] = token_id_json(bos_token_id);
  j["eos_token_id"] = token_id_json(eos_token_id);
  j["hidden_act"] = hidden_act;
  j["hidden_size"] = hidden_size;
  j["initializer_range"] = initializer_range;
  j["intermediate_size"] = intermediate_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["mlp_bias"] = mlp_bias;
  j["model_type"] = "llama";
  j["num_attention_heads"] = num_attention_heads;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_key_value_heads"] = kv_heads();
  j["pad_token_id"] = token_id_json(pad_token_id);
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = rope_theta;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["use_cache"] = true;
  j["vocab_size"] = vocab_size;
  return j.dump(2) + "\n";
}

LlamaConfig LlamaConfig::from_hf_json(const std::string& json_text) {
  const json j = detail::parse_json_object(json_text, "LlamaConfig");
  if (const auto it = j.find("model_type"); it != j.end()) {
    BRAID_CHECK(it->is_string() && it->get<std::string>() == "llama", kInvalidArgument,
                "LlamaConfig json: model_type ", it->dump(), " is not \"llama\"");
  }
  if (const auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    BRAID_FAIL(kNotSupported, "LlamaConfig json: rope_scaling ", it->dump(),
               " is not supported (only null: plain rotary embeddings)");
  }
  LlamaConfig cfg;
  read(j, "vocab_size", cfg.vocab_size);
  read(j, "hidden_size", cfg.hidden_size);
  read(j, "intermediate_size", cfg.intermediate_size);
  read(j, "num_hidden_layers", cfg.num_hidden_layers);
  read(j, "num_attention_heads", cfg.num_attention_heads);
  read(j, "num_key_value_heads", cfg.num_key_value_heads);  // null: num_attention_heads
  read(j, "hidden_act", cfg.hidden_act);
  read(j, "max_position_embeddings", cfg.max_position_embeddings);
  read(j, "initializer_range", cfg.initializer_range);
  read(j, "rms_norm_eps", cfg.rms_norm_eps);
  read(j, "tie_word_embeddings", cfg.tie_word_embeddings);
  read(j, "rope_theta", cfg.rope_theta);
  read(j, "attention_bias", cfg.attention_bias);
  read(j, "attention_dropout", cfg.attention_dropout);
  read(j, "mlp_bias", cfg.mlp_bias);
  read_token_id(j, "pad_token_id", cfg.pad_token_id);
  read_token_id(j, "bos_token_id", cfg.bos_token_id);
  read_token_id(j, "eos_token_id", cfg.eos_token_id);
  if (const auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) {
    const std::string t = it->get<std::string>();
    if (t == "float64") cfg.dtype = DType::kF64;
    if (t == "float16") cfg.dtype = DType::kF16;
    if (t == "bfloat16") cfg.dtype = DType::kBF16;
  }
  BRAID_CHECK(cfg.hidden_act == "silu", kNotSupported, "LlamaConfig json: hidden_act \"",
              cfg.hidden_act, "\" is not supported (only \"silu\")");
  cfg.validate();
  return cfg;
}

}  // namespace braid::nn
