// Sharded checkpoints: the size parser, the split rule, the index JSON, save_sharded and
// the loaders that accept a file, an index or a folder. docs/files.md, "Sharding".
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/tensor/checkpoint_names.h"
#include "braid/tensor/safetensors.h"
#include "safetensors_json.h"

namespace braid {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr std::string_view kSizeForms =
    "expected a number of bytes or a number with a unit: KB, MB, GB, TB (powers of 10), "
    "KiB, MiB, GiB, TiB (powers of 2), a lowercase final 'b' meaning bits; e.g. '5GB', "
    "'500MB', '1.5GiB', '1000000'";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The multiplier of a unit, 0 when unknown.
uint64_t unit_multiplier(const std::string& unit) {
  struct Unit {
    std::string_view name;
    uint64_t multiplier;
  };
  constexpr Unit kUnits[] = {{"KB", 1'000ull},         {"MB", 1'000'000ull},
                             {"GB", 1'000'000'000ull}, {"TB", 1'000'000'000'000ull},
                             {"KIB", 1ull << 10},      {"MIB", 1ull << 20},
                             {"GIB", 1ull << 30},      {"TIB", 1ull << 40}};
  for (const Unit& u : kUnits) {
    if (unit == u.name) return u.multiplier;
  }
  return 0;
}

bool is_shard_file_name(const std::string& name) {
  // model-DDDDD-of-DDDDD.safetensors
  constexpr std::string_view kPrefix = "model-", kMiddle = "-of-", kSuffix = ".safetensors";
  if (name.size() != kPrefix.size() + 5 + kMiddle.size() + 5 + kSuffix.size()) return false;
  std::string_view s = name;
  auto digits = [](std::string_view d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return s.starts_with(kPrefix) && digits(s.substr(6, 5)) && s.substr(11, 4) == kMiddle &&
         digits(s.substr(15, 5)) && s.ends_with(kSuffix);
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  BRAID_CHECK(!ec, kIo, "remove stale checkpoint file '", p.string(), "': ", ec.message());
}

// Files of an earlier save in `folder` that the new layout `keep` does not use.
void remove_stale(const fs::path& folder, const std::set<std::string>& keep) {
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    const bool ours =
        name == kSafeWeightsName || name == kSafeWeightsIndexName || is_shard_file_name(name);
    if (ours && !keep.contains(name) && entry.is_regular_file()) stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) remove_file(p);
}

void check_index_file_name(const std::string& file, const std::string& tensor,
                           std::string_view what) {
  const fs::path p(file);
  bool escapes = p.is_absolute() || file.empty();
  for (const auto& part : p) escapes = escapes || part == "..";
  BRAID_CHECK(!escapes, kCorruptData, what, ": weight_map maps tensor '", tensor, "' to '", file,
              "', expected a file name relative to the index's folder (no '..', not absolute)");
}

}  // namespace

// ---- sizes and the split rule ----

uint64_t parse_size(std::string_view text) {
  const std::string_view s = trim(text);
  size_t split = 0;
  while (split < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[split])) || s[split] == '.')) {
    ++split;
  }
  const std::string_view number = s.substr(0, split);
  const std::string_view unit = trim(s.substr(split));
  const bool has_digit = std::any_of(number.begin(), number.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  const size_t dots = std::count(number.begin(), number.end(), '.');
  const uint64_t multiplier = unit.empty() ? 1 : unit_multiplier(upper(unit));
  BRAID_CHECK(has_digit && dots <= 1 && multiplier != 0 && (dots == 0 || !unit.empty()),
              kInvalidArgument, "size '", text, "' is not understood; ", kSizeForms);
  // A decimal unit spelled with a lowercase final 'b' counts bits, as transformers does.
  const bool bits = !unit.empty() && unit.back() == 'b' && upper(unit).size() == 2;

  uint64_t bytes = 0;
  if (dots == 0) {
    uint64_t value = 0;
    for (char c : number) {
      BRAID_CHECK(value <= (std::numeric_limits<uint64_t>::max() - 9) / 10, kInvalidArgument,
                  "size '", text, "' does not fit in 64 bits");
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    BRAID_CHECK(value <= std::numeric_limits<uint64_t>::max() / multiplier, kInvalidArgument,
                "size '", text, "' does not fit in 64 bits");
    bytes = value * multiplier;
  } else {
    const double value = std::strtod(std::string(number).c_str(), nullptr) * double(multiplier);
    BRAID_CHECK(value < 18446744073709551616.0, kInvalidArgument, "size '", text,
                "' does not fit in 64 bits");
    bytes = static_cast<uint64_t>(value);  // truncates, as Python's int(float)
  }
  return bits ? bytes / 8 : bytes;
}

std::vector<std::vector<size_t>> plan_shards(std::span<const uint64_t> sizes,
                                             uint64_t max_shard_size) {
  std::vector<std::vector<size_t>> shards;
  uint64_t current = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool fits = !shards.empty() && !shards.back().empty() && current <= max_shard_size &&
                      sizes[i] <= max_shard_size - current;
    if (!fits) {
      // A tensor larger than the limit still goes alone in its own shard.
      if (shards.empty() || !shards.back().empty()) shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += sizes[i];
  }
  return shards;
}

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

// ---- the index ----

SafetensorsIndex parse_safetensors_index(std::string_view json_text, std::string_view path) {
  const std::string what = "safetensors index '" + std::string(path) + "'";
  const Json j = detail::parse_json_strict(json_text, what);
  BRAID_CHECK(j.is_object(), kCorruptData, what, " is ", detail::json_kind(j),
              ", expected a JSON object with \"weight_map\"");
  SafetensorsIndex out;
  if (j.contains("metadata")) {
    const Json& m = j["metadata"];
    BRAID_CHECK(m.is_object(), kCorruptData, what, ": \"metadata\" is ", detail::json_kind(m),
                ", expected an object");
    if (m.contains("total_size")) {
      const Json& t = m["total_size"];
      uint64_t total = 0;
      // Some writers store it as a float; an integral, non-negative value is accepted.
      const bool integral_float = t.is_number_float() && t.get<double>() >= 0 &&
                                  t.get<double>() < 1.8e19 &&
                                  std::floor(t.get<double>()) == t.get<double>();
      BRAID_CHECK(detail::json_to_u64(t, total) || integral_float, kCorruptData, what,
                  ": metadata.total_size is ", detail::json_kind(t),
                  ", expected a non-negative integer");
      out.total_size = integral_float ? static_cast<uint64_t>(t.get<double>()) : total;
    }
  }
  BRAID_CHECK(j.contains("weight_map"), kCorruptData, what, " has no \"weight_map\"");
  const Json& map = j["weight_map"];
  BRAID_CHECK(map.is_object(), kCorruptData, what, ": \"weight_map\" is ", detail::json_kind(map),
              ", expected an object of tensor name -> file name");
  for (const auto& [name, file] : map.items()) {
    BRAID_CHECK(file.is_string(), kCorruptData, what, ": weight_map entry for tensor '", name,
                "' is ", detail::json_kind(file), ", expected a file name string");
    check_index_file_name(file.get<std::string>(), name, what);
    out.weight_map.emplace_back(name, file.get<std::string>());
  }
  return out;
}

std::string format_safetensors_index(const SafetensorsIndex& index) {
  nlohmann::json j;  // std::map-backed: keys come out sorted, as json.dumps(sort_keys=True)
  j["metadata"] = nlohmann::json::object();
  if (index.total_size) j["metadata"]["total_size"] = *index.total_size;
  j["weight_map"] = nlohmann::json::object();
  for (const auto& [name, file] : index.weight_map) j["weight_map"][name] = file;
  return j.dump(2) + "\n";
}

// ---- save ----

ShardedSaveResult save_sharded(const fs::path& folder, const NamedTensors& tensors,
                               uint64_t max_shard_size, const StringMap& metadata) {
  BRAID_CHECK(max_shard_size > 0, kInvalidArgument, "save_sharded '", folder.string(),
              "': max_shard_size is 0, expected a positive number of bytes");
  std::vector<uint64_t> sizes;
  std::set<std::string_view> names;
  ShardedSaveResult result;
  for (const auto& [name, t] : tensors) {
    BRAID_CHECK(t.defined(), kInvalidArgument, "save_sharded '", folder.string(), "': tensor '",
                name, "' is undefined");
    BRAID_CHECK(names.insert(name).second, kInvalidArgument, "save_sharded '", folder.string(),
                "': tensor name '", name, "' appears twice");
    sizes.push_back(t.nbytes());
    result.total_size += t.nbytes();
  }
  std::error_code ec;
  fs::create_directories(folder, ec);
  BRAID_CHECK(!ec, kIo, "save_sharded: create folder '", folder.string(), "': ", ec.message());

  const auto plan = plan_shards(sizes, max_shard_size);
  if (plan.size() <= 1) {
    result.files.push_back(folder / kSafeWeightsName);
    save_safetensors(result.files.back(), tensors, metadata);
    remove_stale(folder, {std::string(kSafeWeightsName)});
    return result;
  }

  SafetensorsIndex index;
  index.total_size = result.total_size;
  std::set<std::string> keep{std::string(kSafeWeightsIndexName)};
  for (size_t s = 0; s < plan.size(); ++s) {
    const std::string file = shard_file_name(s, plan.size());
    NamedTensors shard;
    for (size_t i : plan[s]) {
      shard.push_back(tensors[i]);
      index.weight_map.emplace_back(tensors[i].first, file);
    }
    result.files.push_back(folder / file);
    save_safetensors(result.files.back(), shard, metadata);
    keep.insert(file);
  }
  // The index goes last: until it is in place, a reader still sees the previous checkpoint.
  result.index = folder / kSafeWeightsIndexName;
  write_file_atomic(result.index, format_safetensors_index(index));
  remove_stale(folder, keep);
  return result;
}

ShardedSaveResult save_sharded(const fs::path& folder, const NamedTensors& tensors,
                               std::string_view max_shard_size, const StringMap& metadata) {
  return save_sharded(folder, tensors, parse_size(max_shard_size), metadata);
}

// ---- load ----

NamedTensors load_sharded(const fs::path& index_path) {
  const SafetensorsIndex index =
      parse_safetensors_index(read_file(index_path), index_path.string());
  const std::string what = "safetensors index '" + index_path.string() + "'";
  const fs::path folder = index_path.parent_path();

  std::map<std::string, std::set<std::string>> by_file;  // sorted: model-00001 first
  for (const auto& [name, file] : index.weight_map) by_file[file].insert(name);

  NamedTensors out;
  out.reserve(index.weight_map.size());
  for (const auto& [file, wanted] : by_file) {
    const fs::path shard_path = folder / file;
    BRAID_CHECK(fs::is_regular_file(shard_path), kCorruptData, what, " maps tensor '",
                *wanted.begin(), "' to '", file, "', which does not exist in '", folder.string(),
                "'");
    const SafetensorsFile shard = SafetensorsFile::open(shard_path);
    size_t found = 0;
    for (const SafetensorsEntry& e : shard.entries()) {
      if (!wanted.contains(e.name)) continue;
      out.emplace_back(e.name, shard.get(e.name));
      ++found;
    }
    if (found != wanted.size()) {
      for (const std::string& name : wanted) {
        BRAID_CHECK(shard.contains(name), kCorruptData, what, " maps tensor '", name, "' to '",
                    file, "', but that file has no such tensor");
      }
    }
  }
  return out;
}

NamedTensors load_safetensors(const fs::path& path) {
  if (fs::is_directory(path)) {
    const fs::path single = path / kSafeWeightsName;
    const fs::path index = path / kSafeWeightsIndexName;
    if (fs::exists(single)) return SafetensorsFile::open(single).load_all();
    if (fs::exists(index)) return load_sharded(index);
    BRAID_FAIL(kIo, "folder '", path.string(), "' holds neither ", kSafeWeightsName, " nor ",
               kSafeWeightsIndexName);
  }
  if (path.filename().string().ends_with(".index.json")) return load_sharded(path);
  return SafetensorsFile::open(path).load_all();
}

}  // namespace braid
