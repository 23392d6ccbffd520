// SafetensorsFile (reading through a memory map) and save_safetensors (writing through
// AtomicFile). Header parsing and validation live in safetensors_header.cc.
#include "braid/tensor/safetensors.h"

#include <cstring>
#include <set>

#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "safetensors_json.h"

namespace braid {
namespace {

using Json = nlohmann::ordered_json;

// The header JSON, padded with spaces to a multiple of 8 (the reference writer's alignment:
// with 8-byte-aligned offsets every element lands aligned in a page-aligned map).
std::string encode_header(const std::vector<SafetensorsEntry>& entries, const StringMap& metadata,
                          const std::filesystem::path& path) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const SafetensorsEntry& e : entries) {
    header[e.name] = {{"dtype", dtype_safetensors_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& err) {
    BRAID_FAIL(kInvalidArgument, "save_safetensors '", path.string(),
               "': a tensor name or metadata string is not valid UTF-8 (", err.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  BRAID_CHECK(text.size() <= kSafetensorsMaxHeaderBytes, kInvalidArgument, "save_safetensors '",
              path.string(), "': the header would be ", text.size(), " bytes, past the ",
              kSafetensorsMaxHeaderBytes,
              "-byte limit readers enforce; split the tensors "
              "over several files (save_sharded)");
  return text;
}

std::vector<SafetensorsEntry> plan_layout(const NamedTensors& tensors,
                                          const std::filesystem::path& path) {
  std::vector<SafetensorsEntry> entries;
  entries.reserve(tensors.size());
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    BRAID_CHECK(t.defined(), kInvalidArgument, "save_safetensors '", path.string(), "': tensor '",
                name, "' is undefined");
    BRAID_CHECK(!t.device().is_meta(), kInvalidArgument, "save_safetensors '", path.string(),
                "': tensor '", name, "' is on the meta device and has no data");
    BRAID_CHECK(name != "__metadata__", kInvalidArgument, "save_safetensors '", path.string(),
                "': '__metadata__' is reserved for the metadata map and cannot name a tensor");
    BRAID_CHECK(seen.insert(name).second, kInvalidArgument, "save_safetensors '", path.string(),
                "': tensor name '", name, "' appears twice");
    const uint64_t n = t.nbytes();
    entries.push_back({name, t.dtype(), t.shape(), offset, offset + n});
    offset += n;
  }
  return entries;
}

}  // namespace

// ---- reading ----

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile out;
  out.path_ = path;
  out.file_ = std::make_shared<MappedFile>(MappedFile::open(path, MapMode::kCopyOnWrite));
  out.header_ = parse_safetensors_header(out.file_->bytes(), path.string());
  for (size_t i = 0; i < out.header_.entries.size(); ++i) {
    out.index_.emplace(out.header_.entries[i].name, i);
  }
  return out;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.entries.size());
  for (const SafetensorsEntry& e : header_.entries) out.push_back(e.name);
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return index_.contains(name);
}

const SafetensorsEntry& SafetensorsFile::info(std::string_view name) const {
  const auto it = index_.find(name);
  BRAID_CHECK(it != index_.end(), kOutOfRange, "safetensors file '", path_.string(),
              "' has no tensor '", name, "' (it holds ", header_.entries.size(), " tensors)");
  return header_.entries[it->second];
}

std::span<const std::byte> SafetensorsFile::raw_bytes(std::string_view name) const {
  const SafetensorsEntry& e = info(name);
  return file_->bytes().subspan(header_.data_start() + e.begin, e.nbytes());
}

Tensor SafetensorsFile::get(std::string_view name) const {
  const SafetensorsEntry& e = info(name);
  std::byte* data = file_->mutable_data() + header_.data_start() + e.begin;
  if (e.dtype == DType::kBool) {
    // Any byte but 0 / 1 in a C++ bool is undefined behaviour downstream.
    for (uint64_t i = 0; i < e.nbytes(); ++i) {
      const auto b = static_cast<uint8_t>(data[i]);
      BRAID_CHECK(b <= 1, kCorruptData, "safetensors file '", path_.string(), "': BOOL tensor '",
                  e.name, "' holds byte ", int{b}, " at element ", i, " (expected 0 or 1)");
    }
  }
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(e.dtype) != 0) {
    Tensor copy = Tensor::empty(e.shape, e.dtype);
    if (e.nbytes() > 0) std::memcpy(copy.data_ptr(), data, e.nbytes());
    return copy;
  }
  std::shared_ptr<MappedFile> keep = file_;
  return Tensor::from_blob(data, e.shape, e.dtype, kCPU,
                           [keep = std::move(keep)](void*) mutable { keep.reset(); });
}

NamedTensors SafetensorsFile::load_all() const {
  NamedTensors out;
  out.reserve(header_.entries.size());
  for (const SafetensorsEntry& e : header_.entries) out.emplace_back(e.name, get(e.name));
  return out;
}

// ---- writing ----

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const StringMap& metadata) {
  const std::vector<SafetensorsEntry> entries = plan_layout(tensors, path);
  const std::string header = encode_header(entries, metadata, path);
  uint64_t n = header.size();
  char prefix[8];
  for (char& c : prefix) {
    c = static_cast<char>(n & 0xff);
    n >>= 8;
  }

  AtomicFile out(path);
  out.write(prefix, sizeof prefix);
  out.write(header);
  // One tensor at a time, so a checkpoint of device tensors never needs them all on the host.
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    const Tensor host = (t.device().is_cpu() ? t : t.to(kCPU)).contiguous();
    out.write(host.data_ptr(), host.nbytes());
  }
  out.commit();
}

}  // namespace braid
