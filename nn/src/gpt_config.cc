// GPTConfig: validation and transformers' config.json (GPT2Config) in both directions.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "hf_json.h"

namespace braid::nn {
namespace {

using nlohmann::json;

void check_positive(const char* field, int64_t v) {
  BRAID_CHECK(v > 0, kInvalidArgument, "GPTConfig: ", field, " = ", v, " must be > 0");
}
void check_probability(const char* field, double p) {
  BRAID_CHECK(p >= 0.0 && p < 1.0, kInvalidArgument, "GPTConfig: ", field, " = ", p,
              " must be in [0, 1)");
}

const char* activation_name(GeluApproximate a) {
  return a == GeluApproximate::kTanh ? "gelu_new" : "gelu";
}

template <typename T>
void read(const json& j, const char* key, T& out) {
  detail::read_json_field(j, key, out, "GPTConfig");
}

}  // namespace

void GPTConfig::validate() const {
  check_positive("vocab_size", vocab_size);
  check_positive("n_positions", n_positions);
  check_positive("n_embd", n_embd);
  check_positive("n_layer", n_layer);
  check_positive("n_head", n_head);
  BRAID_CHECK(n_embd % n_head == 0, kInvalidArgument, "GPTConfig: n_embd = ", n_embd,
              " must be a multiple of n_head = ", n_head);
  BRAID_CHECK(n_inner >= 0, kInvalidArgument, "GPTConfig: n_inner = ", n_inner,
              " must be >= 0 (0 means 4 * n_embd)");
  BRAID_CHECK(layer_norm_epsilon > 0.0 && std::isfinite(layer_norm_epsilon), kInvalidArgument,
              "GPTConfig: layer_norm_epsilon = ", layer_norm_epsilon, " must be finite and > 0");
  check_probability("embd_pdrop", embd_pdrop);
  check_probability("attn_pdrop", attn_pdrop);
  check_probability("resid_pdrop", resid_pdrop);
  BRAID_CHECK(initializer_range >= 0.0 && std::isfinite(initializer_range), kInvalidArgument,
              "GPTConfig: initializer_range = ", initializer_range, " must be finite and >= 0");
  BRAID_CHECK(
      dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
      kInvalidArgument, "GPTConfig: dtype ", dtype,
      " must be a floating dtype (f64, f32, f16 or bf16)");
}

std::string GPTConfig::to_hf_json() const {
  json j;
  j["activation_function"] = activation_name(activation);
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  j["attn_pdrop"] = attn_pdrop;
  // GPT-2's <|endoftext|> is the last id of its vocabulary (50256).
  j["bos_token_id"] = vocab_size - 1;
  j["embd_pdrop"] = embd_pdrop;
  j["eos_token_id"] = vocab_size - 1;
  j["initializer_range"] = initializer_range;
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["model_type"] = "gpt2";
  j["n_embd"] = n_embd;
  j["n_head"] = n_head;
  j["n_inner"] = n_inner > 0 ? json(n_inner) : json(nullptr);
  j["n_layer"] = n_layer;
  j["n_positions"] = n_positions;
  j["resid_pdrop"] = resid_pdrop;
  j["tie_word_embeddings"] = true;
  j["vocab_size"] = vocab_size;
  return j.dump(2) + "\n";
}

GPTConfig GPTConfig::from_hf_json(const std::string& json_text) {
  const json j = detail::parse_json_object(json_text, "GPTConfig");
  if (const auto it = j.find("model_type"); it != j.end()) {
    BRAID_CHECK(it->is_string() && it->get<std::string>() == "gpt2", kInvalidArgument,
                "GPTConfig json: model_type ", it->dump(), " is not \"gpt2\"");
  }
  GPTConfig cfg;
  read(j, "vocab_size", cfg.vocab_size);
  read(j, "n_positions", cfg.n_positions);
  read(j, "n_embd", cfg.n_embd);
  read(j, "n_layer", cfg.n_layer);
  read(j, "n_head", cfg.n_head);
  read(j, "n_inner", cfg.n_inner);  // null: 4 * n_embd
  read(j, "layer_norm_epsilon", cfg.layer_norm_epsilon);
  read(j, "embd_pdrop", cfg.embd_pdrop);
  read(j, "attn_pdrop", cfg.attn_pdrop);
  read(j, "resid_pdrop", cfg.resid_pdrop);
  read(j, "initializer_range", cfg.initializer_range);
  if (const auto it = j.find("activation_function"); it != j.end()) {
    const std::string a = it->is_string() ? it->get<std::string>() : it->dump();
    if (a == "gelu_new" || a == "gelu_pytorch_tanh") {
      cfg.activation = GeluApproximate::kTanh;
    } else if (a == "gelu") {
      cfg.activation = GeluApproximate::kNone;
    } else {
      BRAID_FAIL(kInvalidArgument, "GPTConfig json: activation_function \"", a,
                 "\" is not supported (expected \"gelu_new\", \"gelu_pytorch_tanh\" or \"gelu\")");
    }
  }
  if (const auto it = j.find("tie_word_embeddings"); it != j.end() && it->is_boolean()) {
    BRAID_CHECK(it->get<bool>(), kNotSupported,
                "GPTConfig json: tie_word_embeddings false is not supported (braid's GPT ties "
                "lm_head.weight to transformer.wte.weight)");
  }
  cfg.validate();
  return cfg;
}

}  // namespace braid::nn
