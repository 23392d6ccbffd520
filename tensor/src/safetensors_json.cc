// Strict JSON parsing: UTF-8 check, nlohmann parse with a callback that catches duplicate
// keys, and small typed accessors used by the header and index readers.
#include "safetensors_json.h"

#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "braid/core/error.h"

namespace braid::detail {

using Json = nlohmann::ordered_json;

size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      return i;  // continuation byte first, 0xC0/0xC1 (overlong) or 0xF5.. (too large)
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    if (overlong || surrogate || cp > 0x10FFFF) return i;
    i += len;
  }
  return std::string_view::npos;
}

Json parse_json_strict(std::string_view text, std::string_view what) {
  const size_t bad = find_invalid_utf8(text);
  BRAID_CHECK(bad == std::string_view::npos, kCorruptData, what, ": not valid UTF-8 at byte ", bad,
              " of the JSON text");
  // JSON never holds a raw NUL (strings escape it), and nlohmann would stop reading at one.
  const size_t nul = text.find('\0');
  BRAID_CHECK(nul == std::string_view::npos, kCorruptData, what,
              ": not valid JSON: a NUL byte at byte ", nul, " of the JSON text");

  // One frame per open object: the keys seen so far and the key the object is the value of.
  struct Frame {
    std::set<std::string> keys;
    std::string name;
  };
  std::vector<Frame> open;
  std::string last_key;
  std::optional<std::pair<std::string, std::string>> duplicate;  // key, object name
  const Json::parser_callback_t on_event = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open.push_back({{}, open.empty() ? std::string() : last_key});
        break;
      case Json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!open.back().keys.insert(last_key).second && !duplicate) {
          duplicate.emplace(last_key, open.back().name);
        }
        break;
      case Json::parse_event_t::object_end:
        open.pop_back();
        break;
      default:
        break;
    }
    return true;
  };

  Json out;
  try {
    out = Json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, what, ": not valid JSON: ", e.what());
  }
  if (duplicate) {
    if (duplicate->second.empty()) {
      BRAID_FAIL(kCorruptData, what, ": duplicate key '", duplicate->first,
                 "' in the top-level object (each name may appear once)");
    }
    BRAID_FAIL(kCorruptData, what, ": duplicate key '", duplicate->first, "' in object '",
               duplicate->second, "'");
  }
  return out;
}

bool json_to_u64(const Json& v, uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return true;
}

std::string json_kind(const Json& v) {
  // Values come from untrusted files: keep what a message quotes short.
  auto quoted = [&v] {
    std::string text = v.dump();
    if (text.size() > 64) text = text.substr(0, 60) + "...";
    return text;
  };
  if (v.is_number_unsigned() || v.is_number_integer()) return "the integer " + quoted();
  if (v.is_number_float()) return "the number " + quoted();
  if (v.is_string()) return "the string " + quoted();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  return "an object";
}

}  // namespace braid::detail
