// YAML in and out: apply_config_yaml walks the file's mappings with yaml-cpp and hands each
// key to the key table (config_keys.h); to_yaml writes the table back in Accelerate's layout
// (keys sorted, as PyYAML's safe_dump writes them).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>

#include "braid/accel/config.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "config_keys.h"

namespace braid::accel {
namespace {

using detail::KeyInfo;
using detail::OutValue;
using detail::RawValue;

std::string where(std::string_view source, const YAML::Mark& mark) {
  std::ostringstream out;
  out << source;
  if (!mark.is_null()) out << ':' << mark.line + 1 << ':' << mark.column + 1;
  return out.str();
}

std::string node_kind(const YAML::Node& n) {
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  if (n.IsNull()) return "null";
  return "'" + n.Scalar() + "'";
}

RawValue raw_value(const YAML::Node& n, std::string_view path, const std::string& loc,
                   const std::filesystem::path& base_dir) {
  RawValue v;
  v.base_dir = base_dir;
  if (n.IsNull()) {
    v.kind = RawValue::Kind::kNull;
  } else if (n.IsScalar()) {
    v.kind = RawValue::Kind::kScalar;
    v.text = n.Scalar();
  } else if (n.IsSequence()) {
    v.kind = RawValue::Kind::kList;
    for (const YAML::Node& item : n) {
      BRAID_CHECK(item.IsScalar(), kInvalidArgument, path, " (", loc,
                  "): expected a list of plain values, got an item that is ", node_kind(item));
      v.items.push_back(item.Scalar());
    }
  } else {
    v.kind = RawValue::Kind::kMap;
    for (auto it = n.begin(); it != n.end(); ++it) {
      BRAID_CHECK(it->first.IsScalar() && (it->second.IsScalar() || it->second.IsNull()),
                  kInvalidArgument, path, " (", loc,
                  "): expected a mapping of plain values, got a nested one");
      v.entries.emplace_back(it->first.Scalar(),
                             it->second.IsNull() ? std::string() : it->second.Scalar());
    }
  }
  return v;
}

// The closest known key to `name` met in `section`: a key of the same section by its name,
// or one elsewhere by its dotted path (so a nested key put at the top is pointed home). Only the
// first kSuggestionChars characters of `name` are compared (detail::kSuggestionChars): no key is
// longer, and an edit distance costs the product of the lengths, for every key.
std::string suggestion(std::string_view section, std::string_view full_name,
                       const ConfigOptions& options) {
  const std::string_view name = full_name.substr(0, detail::kSuggestionChars);
  std::string best;
  size_t best_d = SIZE_MAX;
  auto consider = [&](const std::string& shown, std::string_view compared, bool same) {
    // Beating best_d needs 2 * distance + penalty < best_d, i.e. a distance of at most `limit`.
    const size_t penalty = same ? 0 : 1;
    if (best_d <= penalty) return;
    const size_t limit = best_d == SIZE_MAX ? SIZE_MAX : (best_d - penalty - 1) / 2;
    const size_t ed = detail::edit_distance(name, compared, limit);
    if (ed > limit) return;
    size_t d = ed * 2 + penalty;
    if (d < best_d) {
      best_d = d;
      best = shown;
    }
  };
  for (const KeyInfo& k : detail::key_table()) {
    consider(k.section == section ? k.name : k.path(), k.name, k.section == section);
  }
  if (section.empty()) {
    for (const std::string& s : detail::section_names()) consider(s, s, true);
    for (const std::string& e : options.extra_keys) consider(e, e, true);
  }
  return best;
}

[[noreturn]] void unknown_key(std::string_view section, std::string_view name,
                              const std::string& loc, const ConfigOptions& options) {
  std::string in = section.empty() ? "" : " in " + std::string(section);
  BRAID_FAIL(kInvalidArgument, "unknown configuration key '", name, "'", in, " (", loc,
             "); the closest known key is '", suggestion(section, name, options), "'");
}

void apply_section(AcceleratorConfig& config, const std::string& section, const YAML::Node& body,
                   const std::string& loc, std::string_view source,
                   const std::filesystem::path& base_dir, const ConfigOptions& options) {
  if (body.IsNull()) return;  // `fsdp_config: {}` / null: nothing set, as Accelerate
  BRAID_CHECK(body.IsMap(), kInvalidArgument, section, " (", loc, "): expected a mapping of ",
              section, " keys, got ", node_kind(body));
  std::map<std::string, std::string> seen;
  for (auto it = body.begin(); it != body.end(); ++it) {
    std::string kloc = where(source, it->first.Mark());
    BRAID_CHECK(it->first.IsScalar(), kInvalidArgument, section, " (", kloc,
                "): a key must be a plain name");
    const std::string name = it->first.Scalar();
    auto [prev, fresh] = seen.emplace(name, kloc);
    BRAID_CHECK(fresh, kInvalidArgument, "configuration key '", section, ".", name,
                "' appears twice (", prev->second, " and ", kloc, ")");
    if (detail::is_free_section(section)) {
      RawValue v = raw_value(it->second, section + "." + name, kloc, base_dir);
      BRAID_CHECK(v.kind != RawValue::Kind::kList && v.kind != RawValue::Kind::kMap,
                  kInvalidArgument, section, ".", name, " (", kloc, "): expected a plain value");
      if (v.kind == RawValue::Kind::kNull) {
        config.fp8_config.erase(name);
      } else {
        config.fp8_config[name] = v.text;
      }
      continue;
    }
    const KeyInfo* key = detail::find_key(section, name);
    if (key == nullptr) unknown_key(section, name, kloc, options);
    detail::apply_key(config, *key, raw_value(it->second, key->path(), kloc, base_dir), kloc);
  }
}

}  // namespace

void apply_config_yaml(AcceleratorConfig& config, std::string_view yaml,
                       std::string_view source_name, const ConfigOptions& options,
                       const std::filesystem::path& base_dir) {
  detail::check_extra_keys(options);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    BRAID_FAIL(kCorruptData, where(source_name, e.mark), ": not valid YAML: ", e.msg);
  }
  if (!root || root.IsNull()) return;  // an empty file sets nothing
  BRAID_CHECK(root.IsMap(), kCorruptData, source_name,
              ": expected a mapping of configuration keys at the top, got ", node_kind(root));
  AcceleratorConfig work = config;  // the caller's config changes only if everything applies
  std::map<std::string, std::string> seen;
  const std::vector<std::string>& sections = detail::section_names();
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string loc = where(source_name, it->first.Mark());
    BRAID_CHECK(it->first.IsScalar(), kInvalidArgument, source_name, " (", loc,
                "): a key must be a plain name");
    const std::string name = it->first.Scalar();
    auto [prev, fresh] = seen.emplace(name, loc);
    BRAID_CHECK(fresh, kInvalidArgument, "configuration key '", name, "' appears twice (",
                prev->second, " and ", loc, ")");
    if (std::find(sections.begin(), sections.end(), name) != sections.end()) {
      apply_section(work, name, it->second, loc, source_name, base_dir, options);
    } else if (const KeyInfo* key = detail::find_key("", name)) {
      detail::apply_key(work, *key, raw_value(it->second, name, loc, base_dir), loc);
    } else if (options.any_extra_key ||
               std::find(options.extra_keys.begin(), options.extra_keys.end(), name) !=
                   options.extra_keys.end()) {
      const YAML::Node v = it->second;  // a copy: it->second lives in a temporary
      BRAID_CHECK(v.IsScalar() || v.IsNull(), kInvalidArgument, name, " (", loc,
                  "): expected a plain value, got ", node_kind(v));
      if (v.IsNull()) {
        work.extra.erase(name);
      } else {
        work.extra[name] = v.Scalar();
      }
    } else {
      unknown_key("", name, loc, options);
    }
  }
  config = std::move(work);
}

void apply_config_file(AcceleratorConfig& config, const std::filesystem::path& path,
                       const ConfigOptions& options) {
  std::string text = read_file(path);  // kIo naming the path
  apply_config_yaml(config, text, path.string(), options, path.parent_path());
}

AcceleratorConfig load_config_file(const std::filesystem::path& path,
                                   const ConfigOptions& options) {
  AcceleratorConfig config;
  apply_config_file(config, path, options);
  return config;
}

// ---- writing ----------------------------------------------------------------------------

namespace {

bool is_reserved_word(std::string_view s) {
  std::string l = detail::lower(s);
  for (const char* w : {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~", ".inf",
                        "-.inf", "+.inf", ".nan"}) {
    if (l == w) return true;
  }
  return false;
}

// Text YAML 1.1 would read as a number, a date or a time: digits with . _ : + - e (sign,
// exponent, sexagesimal and date separators), or 0x / 0o / 0b prefixed digits.
bool looks_numeric(std::string_view s) {
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  std::string_view allowed = "0123456789._:+-eE";
  if (s.size() > 2 && s[0] == '0' &&
      std::string_view("xXoObB").find(s[1]) != std::string_view::npos) {
    s.remove_prefix(2);
    allowed = "0123456789abcdefABCDEF_";
  }
  bool digit = false;
  for (char c : s) {
    if (allowed.find(c) == std::string_view::npos) return false;
    digit |= c >= '0' && c <= '9';
  }
  return digit;
}

std::string quote_scalar(const std::string& s) {
  bool needs = s.empty() || is_reserved_word(s) || looks_numeric(s) ||
               std::string_view("-?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string_view::npos ||
               s.front() == ' ' || s.back() == ' ' || s.find(": ") != std::string::npos ||
               s.find(" #") != std::string::npos || s.back() == ':';
  bool control = false;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) control = true;
  }
  if (control) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
        out += buf;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
  if (!needs) return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// Free-form text (fp8_config, extra keys): its type is unknown, so numbers and words stay
// plain; only text YAML could not read back as the same string is quoted.
std::string plain_or_quoted(const std::string& s) {
  if (!s.empty() && (is_reserved_word(s) || looks_numeric(s))) return s;
  return quote_scalar(s);
}

std::string scalar_text(const OutValue& v) {
  return v.kind == OutValue::Kind::kString ? quote_scalar(v.text) : v.text;
}

// A key as it goes before its ':' on a line indented by `indent`. Keys are quoted as values
// are: fp8_config's and the extra keys come from the input and may hold anything a YAML key can
// (control characters, quotes, a leading '-'); the fuzzer found a raw one that did not read back
// (docs/fuzzing.md, "Third long run"). A key longer than YAML allows an implicit key (1024
// characters; yaml-cpp: "illegal map value") is written in the explicit form, "? key" on its
// own line and the ':' on the next (the fourth long run found one).
std::string key_text(const std::string& indent, const std::string& key) {
  constexpr size_t kImplicitKeyChars = 1024;
  std::string quoted = quote_scalar(key);
  if (quoted.size() < kImplicitKeyChars) return quoted;
  return "? " + quoted + "\n" + indent;
}

void emit(std::ostringstream& out, const std::string& indent, const std::string& key,
          const OutValue& v) {
  out << indent << key_text(indent, key) << ':';
  switch (v.kind) {
    case OutValue::Kind::kList:
      if (v.items.empty()) {
        out << " []\n";
        return;
      }
      out << '\n';
      for (const std::string& item : v.items) out << indent << "- " << quote_scalar(item) << '\n';
      return;
    case OutValue::Kind::kMap:
      out << '\n';
      for (const auto& [k, x] : v.entries) {
        out << indent << "  " << key_text(indent + "  ", k) << ": " << x << '\n';
      }
      return;
    default:
      out << ' ' << scalar_text(v) << '\n';
  }
}

}  // namespace

std::string to_yaml(const AcceleratorConfig& config) {
  // Top level: a scalar / list value or a section of values, all sorted by key.
  std::map<std::string, OutValue> top;
  std::map<std::string, std::map<std::string, OutValue>> sections;
  for (const KeyInfo& k : detail::key_table()) {
    std::optional<OutValue> v = k.get(config);
    if (!v) continue;
    if (k.section.empty()) {
      top.emplace(k.name, std::move(*v));
    } else {
      sections[k.section].emplace(k.name, std::move(*v));
    }
  }
  for (const auto& [k, x] : config.fp8_config) {
    sections["fp8_config"].emplace(k, OutValue{OutValue::Kind::kInt, plain_or_quoted(x)});
  }
  for (const auto& [k, x] : config.extra) {
    top.emplace(k, OutValue{OutValue::Kind::kInt, plain_or_quoted(x)});
  }
  std::map<std::string, const void*> order;  // every top-level name, sorted
  for (const auto& [k, v] : top) order.emplace(k, &v);
  for (const auto& [k, v] : sections) order.emplace(k, nullptr);
  std::ostringstream out;
  for (const auto& [name, value] : order) {
    if (value != nullptr) {
      emit(out, "", name, top.at(name));
      continue;
    }
    out << name << ":\n";
    for (const auto& [k, v] : sections.at(name)) {
      if (v.kind == OutValue::Kind::kMap) {
        out << "  " << key_text("  ", k) << ":\n";
        for (const auto& [mk, mv] : v.entries) {
          out << "    " << key_text("    ", mk) << ": " << mv << '\n';
        }
      } else {
        emit(out, "  ", k, v);
      }
    }
  }
  return out.str();
}

}  // namespace braid::accel
