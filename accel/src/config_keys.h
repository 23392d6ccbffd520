// The table of configuration keys (config_table.cc, built with config_builder.h): for each key its
// section, name, the environment variables that set it, how to parse a value into an
// AcceleratorConfig and how to read it back for to_yaml. Every source (YAML file, environment,
// command line) goes through apply_key, so they accept the same values and raise the same messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/accel/config.h"

namespace braid::accel::detail {

// A value as a source gives it: YAML null, a scalar, a sequence of scalars or a mapping of
// scalars. Environment variables and command-line values are always scalars.
struct RawValue {
  enum class Kind : uint8_t { kNull, kScalar, kList, kMap };
  Kind kind = Kind::kScalar;
  std::string text{};
  std::vector<std::string> items{};
  std::vector<std::pair<std::string, std::string>> entries{};
  // Relative paths in the value (deepspeed_config_file) are resolved against this folder.
  std::filesystem::path base_dir{};

  static RawValue scalar(std::string text) { return RawValue{Kind::kScalar, std::move(text)}; }
};

// Thrown by a key's setter when the value does not parse: `expected` says what would
// (e.g. "true or false"). apply_key turns it into a braid::Error naming key, value and source.
struct ValueError {
  std::string expected;
};

// A value for to_yaml.
struct OutValue {
  enum class Kind : uint8_t { kBool, kInt, kFloat, kString, kList, kMap };
  Kind kind = Kind::kString;
  std::string text{};
  std::vector<std::string> items{};
  std::vector<std::pair<std::string, std::string>> entries{};
};

struct KeyInfo {
  std::string section;   // "" for top-level keys, else "fsdp_config", "deepspeed_config", ...
  std::string name;      // as written inside the section
  std::string expected;  // the accepted values, for messages and docs
  std::function<void(AcceleratorConfig&, const RawValue&)> set{};
  // The value to write, or nullopt to leave the key out.
  std::function<std::optional<OutValue>(const AcceleratorConfig&)> get{};
  std::vector<std::string> env{};  // environment variables read into this key
  std::string path() const { return section.empty() ? name : section + "." + name; }
};

// Every key, in the order docs/config.md lists them.
const std::vector<KeyInfo>& key_table();
// Sections whose keys are free-form (kept as text): "fp8_config".
bool is_free_section(std::string_view section);
// Section names (top-level keys that hold a mapping).
const std::vector<std::string>& section_names();

const KeyInfo* find_key(std::string_view section, std::string_view name);

// Parses `value` into `config` through `key`, or throws kInvalidArgument:
//   "<path> = '<value>' (<source>): expected <...>"
void apply_key(AcceleratorConfig& config, const KeyInfo& key, const RawValue& value,
               std::string_view source);

// What a "did you mean" compares of an unknown name: its first 64 characters. Every known name
// is shorter, and an edit distance costs the product of the two lengths for every candidate, so a
// long unknown key made the error message cost far more than the parse.
inline constexpr size_t kSuggestionChars = 64;
// The closest of `candidates` to the first kSuggestionChars characters of `name` by edit
// distance (ties: the first).
std::string closest(std::string_view name, const std::vector<std::string>& candidates);
// Levenshtein distance of a and b when it is at most `limit`, else some value above `limit`: a
// candidate that cannot beat the best so far is given up after the first row whose every entry
// exceeds it (or at once when the lengths differ by more), which is most of them.
size_t edit_distance(std::string_view a, std::string_view b, size_t limit = SIZE_MAX);

// Value parsing shared with the environment and extras (throw ValueError).
bool parse_bool_value(std::string_view text);
int64_t parse_int_value(std::string_view text);
double parse_real_value(std::string_view text);
std::string lower(std::string_view text);
std::string trim(std::string_view text);
std::vector<std::string> split_list(std::string_view text);  // comma-separated, trimmed

// Reads a DeepSpeed JSON file's zero_optimization, gradient and fp16 / bf16 settings into
// config (config_deepspeed.cc). kIo, kCorruptData or kInvalidArgument naming the file.
void apply_deepspeed_json(AcceleratorConfig& config, const std::filesystem::path& path);
// The same for the file's text; `what` names the file in errors (kCorruptData or
// kInvalidArgument). The fuzz target tests/fuzz/config_deepspeed_fuzz.cc drives this.
void apply_deepspeed_json_text(AcceleratorConfig& config, std::string_view text,
                               std::string_view what);

// Checks ConfigOptions::extra_keys (kInvalidArgument for a name that is a configuration key
// or a section, or is empty).
void check_extra_keys(const ConfigOptions& options);

}  // namespace braid::accel::detail
