// Reading transformers' config.json fields, shared by GPTConfig (gpt_config.cc) and
// LlamaConfig (llama_config.cc). Internal to nn/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "braid/core/error.h"

namespace braid::nn::detail {

// The value of `key` when present and not null, checked against the JSON type of `out`
// (bool, integer, string or number): "<who> json: \"n_embd\" must be an integer, got "768"".
template <typename T>
void read_json_field(const nlohmann::json& j, const char* key, T& out, const char* who) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if constexpr (std::is_same_v<T, bool>) {
    BRAID_CHECK(it->is_boolean(), kInvalidArgument, who, " json: \"", key,
                "\" must be a boolean, got ", it->dump());
    out = it->template get<bool>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    BRAID_CHECK(it->is_number_integer(), kInvalidArgument, who, " json: \"", key,
                "\" must be an integer, got ", it->dump());
    out = it->template get<int64_t>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    BRAID_CHECK(it->is_string(), kInvalidArgument, who, " json: \"", key,
                "\" must be a string, got ", it->dump());
    out = it->template get<std::string>();
  } else {
    static_assert(std::is_same_v<T, double>);
    BRAID_CHECK(it->is_number(), kInvalidArgument, who, " json: \"", key,
                "\" must be a number, got ", it->dump());
    out = it->template get<double>();
  }
}

// The parsed object of a config.json text (kCorruptData naming `who` otherwise).
inline nlohmann::json parse_json_object(const std::string& text, const char* who) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, who, " json: not valid JSON (", e.what(), ")");
  }
  BRAID_CHECK(j.is_object(), kCorruptData, who, " json: expected an object, got ", j.type_name());
  return j;
}

}  // namespace braid::nn::detail
