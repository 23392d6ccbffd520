// Strict JSON reading shared by the safetensors header and the sharded index parsers
// (internal to tensor/src). nlohmann silently keeps one of two duplicate keys; a checkpoint
// with two records for one tensor name is ambiguous, so braid rejects it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace braid::detail {

// Parses `text` as one JSON value (surrounding whitespace allowed). Throws kCorruptData
// naming `what` on invalid UTF-8 (with the byte offset), a syntax error (with nlohmann's
// position) or a duplicate key in any object (naming the key and its object).
nlohmann::ordered_json parse_json_strict(std::string_view text, std::string_view what);

// Offset of the first byte of `text` that is not part of valid UTF-8 (overlong forms,
// surrogates and code points past U+10FFFF are invalid), or npos.
size_t find_invalid_utf8(std::string_view text);

// A non-negative JSON integer as uint64_t, or false when `v` is anything else (negative,
// fractional, a string, ...).
bool json_to_u64(const nlohmann::ordered_json& v, uint64_t& out);

// "a JSON string" etc. for messages.
std::string json_kind(const nlohmann::ordered_json& v);

}  // namespace braid::detail
