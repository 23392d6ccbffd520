// ShardedCheckpoint (reading any range of any tensor, whatever world size wrote it) and
// merge_weights (docs/sharding.md, "Checkpoints"). The index is parsed and validated once;
// each rank file is opened, size-checked and CRC32C-checked the first time a read needs it,
// then kept mapped.
#include <algorithm>
#include <mutex>

#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/kernels/table.h"
#include "braid/shard/checkpoint.h"
#include "checkpoint_internal.h"

namespace braid::shard {
namespace fs = std::filesystem;
using namespace detail;

struct ShardedCheckpoint::Impl {
  fs::path folder;
  CheckpointIndex index;
  mutable std::mutex mutex;
  mutable std::map<std::string, std::shared_ptr<const SafetensorsFile>> open;

  const IndexTensor& tensor(const std::string& name) const {
    auto it = index.tensors.find(name);
    BRAID_CHECK(it != index.tensors.end(), kOutOfRange, "sharded checkpoint ", folder,
                " has no tensor '", name, "' (", index.tensors.size(), " tensors)");
    return it->second;
  }

  // The rank file, verified against the index on first use.
  std::shared_ptr<const SafetensorsFile> file(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = open.find(name); it != open.end()) return it->second;
    const fs::path path = folder / name;
    const IndexFile& want = index.files.at(name);
    BRAID_CHECK(fs::exists(path), kCorruptData, "sharded checkpoint ", folder, ": ", kIndexName,
                " lists ", name, ", which does not exist");
    {
      const MappedFile map = MappedFile::open(path);
      BRAID_CHECK(map.size() == want.bytes, kCorruptData, path, ": ", map.size(),
                  " bytes, but the index says ", want.bytes, " (truncated or replaced?)");
      const uint32_t crc = crc32c(map.bytes());
      BRAID_CHECK(crc == want.crc32c, kCorruptData, path, ": CRC32C ", crc32c_hex(crc),
                  ", but the index says ", crc32c_hex(want.crc32c), " (the file is corrupt)");
    }
    auto f = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
    open.emplace(name, f);
    return f;
  }

  // The piece as a 1-D tensor of the tensor's dtype, checked against the index.
  Tensor piece(const std::string& name, const IndexTensor& t, const IndexPiece& p) const {
    const auto f = file(p.file);
    const fs::path path = folder / p.file;
    BRAID_CHECK(f->contains(p.key), kCorruptData, path, " lacks '", p.key,
                "', which the index gives as elements [", p.offset, ", ", p.offset + p.count,
                ") of '", name, "'");
    const SafetensorsEntry& e = f->info(p.key);
    BRAID_CHECK(e.dtype == t.dtype && e.shape == Shape{p.count}, kCorruptData, path, ": '", p.key,
                "' is ", e.dtype, " with ", e.shape.size(), " dimensions, expected ", t.dtype, " [",
                p.count, "] as the index says");
    return f->get(p.key);
  }
};

ShardedCheckpoint::ShardedCheckpoint(const fs::path& folder) : impl_(std::make_shared<Impl>()) {
  const fs::path target = canonical_folder(folder);
  impl_->folder = target;
  if (!fs::exists(target)) {
    const fs::path aside = aside_folder(target);
    const fs::path partial = partial_folder(target);
    BRAID_CHECK(!fs::exists(aside / kIndexName), kIo, "sharded checkpoint ", target,
                " does not exist, but ", aside,
                " holds the previous complete checkpoint: a save was stopped between its two "
                "renames. Rename it back to ",
                target, ", or save again (which restores it first)");
    BRAID_CHECK(!fs::exists(partial), kIo, "sharded checkpoint ", target, " does not exist; ",
                partial, " is what an interrupted first save left (incomplete: never load it)");
    BRAID_FAIL(kIo, "sharded checkpoint ", target, " does not exist");
  }
  const fs::path index_path = target / kIndexName;
  if (!fs::exists(index_path)) {
    const bool safetensors = fs::exists(target / "model.safetensors") ||
                             fs::exists(target / "model.safetensors.index.json");
    BRAID_FAIL(kIo, "sharded checkpoint ", target, " has no ", kIndexName,
               safetensors ? " (it holds model.safetensors files: open it with load_safetensors)"
                           : " (not a folder written by save_sharded_checkpoint)");
  }
  impl_->index = parse_checkpoint_index(read_file(index_path), index_path.string());
}

int ShardedCheckpoint::world_size() const {
  return static_cast<int>(impl_->index.world_size);
}
const StringMap& ShardedCheckpoint::metadata() const {
  return impl_->index.metadata;
}

std::vector<std::string> ShardedCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : impl_->index.tensors) out.push_back(name);
  return out;
}

bool ShardedCheckpoint::contains(const std::string& name) const {
  return impl_->index.tensors.count(name) > 0;
}
Shape ShardedCheckpoint::shape(const std::string& name) const {
  return impl_->tensor(name).shape;
}
DType ShardedCheckpoint::dtype(const std::string& name) const {
  return impl_->tensor(name).dtype;
}

void ShardedCheckpoint::read_range(const std::string& name, int64_t offset, int64_t count,
                                   void* dst, DType dst_dtype) const {
  const IndexTensor& t = impl_->tensor(name);
  BRAID_CHECK(offset >= 0 && count >= 0 && offset <= t.numel && count <= t.numel - offset,
              kOutOfRange, "read_range('", name, "', offset ", offset, ", count ", count,
              "): tensor '", name, "' has ", t.numel, " elements");
  if (count == 0) return;
  BRAID_CHECK(dst != nullptr, kInvalidArgument, "read_range('", name, "', offset ", offset,
              ", count ", count, "): dst is null");
  // The first piece that ends past `offset`; the pieces tile [0, numel) in order.
  auto it = std::upper_bound(t.pieces.begin(), t.pieces.end(), offset,
                             [](int64_t v, const IndexPiece& p) { return v < p.offset + p.count; });
  const int64_t end = offset + count;
  auto* out = static_cast<std::byte*>(dst);
  const size_t dst_size = dtype_size(dst_dtype);
  for (; it != t.pieces.end() && it->offset < end; ++it) {
    const int64_t lo = std::max(offset, it->offset);
    const int64_t hi = std::min(end, it->offset + it->count);
    const Tensor src = impl_->piece(name, t, *it);
    const auto* from = static_cast<const std::byte*>(src.data_ptr()) +
                       (lo - it->offset) * static_cast<int64_t>(src.element_size());
    // Pieces are mapped file bytes and `dst` host memory: the cpu table converts.
    kernels::kernels_for(kCPU).cast(Stream{kCPU}, from, t.dtype,
                                    out + (lo - offset) * static_cast<int64_t>(dst_size), dst_dtype,
                                    hi - lo, kernels::CastMode::kDefault);
  }
}

Tensor ShardedCheckpoint::read(const std::string& name) const {
  const IndexTensor& t = impl_->tensor(name);
  // One piece: a zero-copy view of the mapped file (as SafetensorsFile::get).
  if (t.pieces.size() == 1) return impl_->piece(name, t, t.pieces[0]).reshape(t.shape);
  Tensor out = Tensor::empty(t.shape, t.dtype);
  read_range(name, 0, t.numel, out.data_ptr(), t.dtype);
  return out;
}

NamedTensors ShardedCheckpoint::read_all() const {
  NamedTensors out;
  for (const auto& [name, t] : impl_->index.tensors) out.emplace_back(name, read(name));
  return out;
}

std::vector<fs::path> merge_weights(const fs::path& checkpoint, const fs::path& out_folder,
                                    std::string_view max_shard_size,
                                    const std::vector<std::string>& names,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  const uint64_t limit = parse_size(max_shard_size);
  BRAID_CHECK(limit > 0, kInvalidArgument, "merge_weights: max_shard_size '", max_shard_size,
              "' is 0 bytes");
  const ShardedCheckpoint ckpt(checkpoint);
  // A filter is a name, or a prefix when it ends in '.'.
  auto matches = [](const std::string& name, const std::string& filter) {
    return filter.back() == '.' ? name.starts_with(filter) : name == filter;
  };
  for (const std::string& filter : names) {
    BRAID_CHECK(!filter.empty(), kInvalidArgument, "merge_weights: an empty name filter");
    const auto all = ckpt.names();
    BRAID_CHECK(std::any_of(all.begin(), all.end(),
                            [&](const std::string& name) { return matches(name, filter); }),
                kInvalidArgument, "merge_weights: '", filter, "' matches no tensor of ", checkpoint,
                " (a name, or a prefix ending in '.')");
  }
  auto wanted = [&](const std::string& name) {
    return names.empty() || std::any_of(names.begin(), names.end(),
                                        [&](const std::string& f) { return matches(name, f); });
  };
  std::vector<std::string> chosen;
  for (const std::string& name : ckpt.names()) {
    if (wanted(name)) chosen.push_back(name);
  }
  NamedTensors tensors;
  for (const std::string& name : chosen) {
    tensors.emplace_back(name, ckpt.read(name));
    if (progress) {
      progress(static_cast<int64_t>(tensors.size()), static_cast<int64_t>(chosen.size()));
    }
  }
  const ShardedSaveResult saved = save_sharded(out_folder, tensors, limit, {{"format", "pt"}});
  std::vector<fs::path> written = saved.files;
  if (!saved.index.empty()) written.push_back(saved.index);
  return written;
}

}  // namespace braid::shard
