// index.json of a sharded checkpoint: strict parsing (every field checked, errors naming the
// file and the field path) and writing. The reader relies on what the parser guarantees:
// every piece names a listed file, and each tensor's pieces tile [0, numel) in order.
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/tensor/shape_checks.h"
#include "checkpoint_internal.h"

namespace braid::shard::detail {
namespace {

using Json = nlohmann::ordered_json;

// nlohmann keeps one of two equal keys silently; two records for one tensor or file would be
// ambiguous, so a duplicate key anywhere is an error.
Json parse_strict(std::string_view text, std::string_view what) {
  std::vector<std::set<std::string>> open;
  std::optional<std::string> duplicate;
  const Json::parser_callback_t on_event = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      open.pop_back();
    } else if (event == Json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second && !duplicate) duplicate = key;
    }
    return true;
  };
  const size_t nul = text.find('\0');
  BRAID_CHECK(nul == std::string_view::npos, kCorruptData, what,
              ": not valid JSON: a NUL byte at byte ", nul);
  Json out;
  try {
    out = Json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    BRAID_FAIL(kCorruptData, what, ": not valid JSON: ", e.what());
  }
  BRAID_CHECK(!duplicate, kCorruptData, what, ": duplicate key '", *duplicate,
              "' (each name may appear once per object)");
  return out;
}

std::string kind_of(const Json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  if (v.is_string()) return "the string " + v.dump();
  if (v.is_boolean()) return "the boolean " + v.dump();
  if (v.is_null()) return "null";
  if (v.is_number_float()) return "the number " + v.dump();
  return "the integer " + v.dump();
}

// Field access with the path in every message.
class Reader {
 public:
  explicit Reader(std::string_view what) : what_(what) {}

  const Json& field(const Json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    BRAID_CHECK(it != obj.end(), kCorruptData, what_, ": ", path, " has no \"", key, "\"");
    return *it;
  }
  void expect(bool ok, const std::string& path, const Json& v, std::string_view expected) const {
    BRAID_CHECK(ok, kCorruptData, what_, ": ", path, " is ", kind_of(v), ", expected ", expected);
  }
  const Json& object(const Json& v, const std::string& path) const {
    expect(v.is_object(), path, v, "an object");
    return v;
  }
  const std::string& string(const Json& v, const std::string& path) const {
    expect(v.is_string(), path, v, "a string");
    return v.get_ref<const std::string&>();
  }
  // An integer in [lo, INT64_MAX].
  int64_t integer(const Json& v, const std::string& path, int64_t lo) const {
    bool ok = false;
    int64_t out = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      ok = u <= uint64_t(std::numeric_limits<int64_t>::max());
      out = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      out = v.get<int64_t>();
      ok = true;
    }
    ok = ok && out >= lo;
    expect(ok, path, v, "an integer >= " + std::to_string(lo));
    return out;
  }
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    BRAID_FAIL(kCorruptData, what_, ": ", path, " ", message);
  }

 private:
  std::string_view what_;
};

std::string json_quoted(const std::string& s) {
  return Json(s).dump();
}

std::optional<DType> dtype_by_safetensors_name(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (dtype_safetensors_name(t) == name) return t;
  }
  return std::nullopt;
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

std::optional<uint32_t> parse_hex32(const std::string& s) {
  if (s.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    v = v << 4 | uint32_t(d);
  }
  return v;
}

IndexTensor parse_tensor(const Reader& r, const Json& v, const std::string& path,
                         const std::map<std::string, IndexFile>& files) {
  r.object(v, path);
  IndexTensor t;
  const Json& dt = r.field(v, path, "dtype");
  const auto dtype = dtype_by_safetensors_name(r.string(dt, path + ".dtype"));
  if (!dtype) r.fail(path + ".dtype", "is the unknown dtype " + dt.dump());
  t.dtype = *dtype;

  const Json& shape = r.field(v, path, "shape");
  r.expect(shape.is_array(), path + ".shape", shape, "an array of integers >= 0");
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = r.integer(shape[i], path + ".shape[" + std::to_string(i) + "]", 0);
    t.shape.push_back(d);
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d) {
      r.fail(path + ".shape", "has more than 2^63-1 elements");
    }
    numel *= d;
  }
  if (!strides_fit(t.shape)) {
    r.fail(path + ".shape", "cannot be a tensor: its non-zero dimensions multiply past 2^63 - 1");
  }
  t.numel = numel;

  const Json& pieces = r.field(v, path, "pieces");
  r.expect(pieces.is_array(), path + ".pieces", pieces, "an array");
  int64_t covered = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string pp = path + ".pieces[" + std::to_string(i) + "]";
    const Json& pj = r.object(pieces[i], pp);
    IndexPiece p;
    p.file = r.string(r.field(pj, pp, "file"), pp + ".file");
    if (!files.count(p.file))
      r.fail(pp + ".file", json_quoted(p.file) + " is not listed in \"files\"");
    p.key = r.string(r.field(pj, pp, "key"), pp + ".key");
    p.offset = r.integer(r.field(pj, pp, "offset"), pp + ".offset", 0);
    p.count = r.integer(r.field(pj, pp, "count"), pp + ".count", 1);
    if (p.offset != covered) {
      const std::string prev = i == 0 ? "the tensor starts" : "the previous piece ends";
      if (p.offset > covered) {
        r.fail(pp + ".offset", "is " + std::to_string(p.offset) + " but " + prev + " at " +
                                   std::to_string(covered) + ": elements [" +
                                   std::to_string(covered) + ", " + std::to_string(p.offset) +
                                   ") are in no piece");
      }
      r.fail(pp + ".offset", "is " + std::to_string(p.offset) + " but " + prev + " at " +
                                 std::to_string(covered) + ": the pieces overlap");
    }
    if (p.count > numel - p.offset) {
      r.fail(pp, "covers [" + std::to_string(p.offset) + ", " + std::to_string(p.offset) + " + " +
                     std::to_string(p.count) + "), past the tensor's " + std::to_string(numel) +
                     " elements");
    }
    covered = p.offset + p.count;
    t.pieces.push_back(std::move(p));
  }
  if (covered != numel) {
    r.fail(path + ".pieces", "cover elements [0, " + std::to_string(covered) + ") of " +
                                 std::to_string(numel) + ": elements [" + std::to_string(covered) +
                                 ", " + std::to_string(numel) + ") are in no piece");
  }
  return t;
}

}  // namespace

CheckpointIndex parse_checkpoint_index(std::string_view text, std::string_view what) {
  const Json root = parse_strict(text, what);
  const Reader r(what);
  r.object(root, "the top level");
  CheckpointIndex index;

  const Json& format = r.field(root, "the top level", "format");
  if (!format.is_string() || format.get_ref<const std::string&>() != kFormatName) {
    r.fail("\"format\"",
           "is " + kind_of(format) + ", expected the string \"" + std::string(kFormatName) + "\"");
  }
  const int64_t version = r.integer(r.field(root, "the top level", "version"), "\"version\"", 1);
  BRAID_CHECK(version <= kFormatVersion, kNotSupported, what, ": format version ", version,
              "; this braid reads version ", kFormatVersion, " (written by a newer braid?)");
  index.world_size = r.integer(r.field(root, "the top level", "world_size"), "\"world_size\"", 1);

  if (auto it = root.find("metadata"); it != root.end()) {
    r.object(*it, "\"metadata\"");
    for (const auto& [k, v] : it->items()) {
      index.metadata[k] = r.string(v, "\"metadata\"." + json_quoted(k));
    }
  }

  const Json& files = r.object(r.field(root, "the top level", "files"), "\"files\"");
  for (const auto& [name, v] : files.items()) {
    const std::string path = "files." + json_quoted(name);
    if (!plain_file_name(name)) r.fail(path, "is not a plain file name inside the folder");
    r.object(v, path);
    IndexFile f;
    const Json& bytes = r.field(v, path, "bytes");
    f.bytes = static_cast<uint64_t>(r.integer(bytes, path + ".bytes", 0));
    const Json& crc = r.field(v, path, "crc32c");
    const auto parsed = parse_hex32(r.string(crc, path + ".crc32c"));
    if (!parsed) r.fail(path + ".crc32c", "is " + crc.dump() + ", expected 8 hex digits");
    f.crc32c = *parsed;
    index.files.emplace(name, f);
  }

  const Json& tensors = r.object(r.field(root, "the top level", "tensors"), "\"tensors\"");
  for (const auto& [name, v] : tensors.items()) {
    const std::string path = "tensors." + json_quoted(name);
    if (name.empty()) r.fail(path, "has an empty name");
    index.tensors.emplace(name, parse_tensor(r, v, path, index.files));
  }
  return index;
}

std::string format_checkpoint_index(const CheckpointIndex& index) {
  Json root = Json::object();
  root["format"] = kFormatName;
  root["version"] = kFormatVersion;
  root["world_size"] = index.world_size;
  root["metadata"] = Json::object();
  for (const auto& [k, v] : index.metadata) root["metadata"][k] = v;
  root["files"] = Json::object();
  for (const auto& [name, f] : index.files) {
    root["files"][name] = {{"bytes", f.bytes}, {"crc32c", crc32c_hex(f.crc32c)}};
  }
  root["tensors"] = Json::object();
  for (const auto& [name, t] : index.tensors) {
    Json pieces = Json::array();
    for (const auto& p : t.pieces) {
      pieces.push_back(
          {{"file", p.file}, {"key", p.key}, {"offset", p.offset}, {"count", p.count}});
    }
    root["tensors"][name] = {
        {"dtype", dtype_safetensors_name(t.dtype)}, {"shape", t.shape}, {"pieces", pieces}};
  }
  try {
    return root.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {  // a name or metadata string not UTF-8
    BRAID_FAIL(kInvalidArgument, "sharded checkpoint index: ", e.what(),
               " (tensor names and metadata must be valid UTF-8)");
  }
}

std::string rank_file_name(int rank, int world_size) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rank-%05d-of-%05d.safetensors", rank, world_size);
  return buf;
}

std::string piece_key(const std::string& name, int64_t offset) {
  return name + "@" + std::to_string(offset);
}

std::filesystem::path canonical_folder(const std::filesystem::path& folder) {
  std::filesystem::path p = folder.lexically_normal();
  if (p.has_relative_path() && !p.has_filename()) p = p.parent_path();
  return p;
}

std::filesystem::path partial_folder(const std::filesystem::path& folder) {
  const auto f = canonical_folder(folder);
  return f.parent_path() / (f.filename().string() + ".partial");
}

std::filesystem::path aside_folder(const std::filesystem::path& folder) {
  const auto f = canonical_folder(folder);
  return f.parent_path() / (f.filename().string() + ".old");
}

std::string crc32c_hex(uint32_t crc) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) out[i] = kDigits[crc & 0xf];
  return out;
}

}  // namespace braid::shard::detail
