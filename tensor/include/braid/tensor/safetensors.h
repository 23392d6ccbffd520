// SPDX-License-Identifier: Apache-2.0
// safetensors files and sharded checkpoints (docs/files.md).
//
// The format, as the reference implementation (huggingface/safetensors) writes it:
//   8 bytes   N, little-endian u64
//   N bytes   UTF-8 JSON object {"<name>": {"dtype": "F32", "shape": [2, 3],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}},
//             padded with spaces so the data starts on an 8-byte boundary
//   the rest  the data section: each tensor's bytes, C order, little endian, at
//             [begin, end) relative to the start of the data section
//
// Reading validates everything before any tensor is handed out (every failure is kCorruptData
// naming the file and the field); tensors are zero-copy views into a private memory map
// that stays alive as long as any tensor uses it. Writing goes through AtomicFile.
//
//   save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"format", "pt"}});
//   SafetensorsFile f = SafetensorsFile::open("model.safetensors");
//   Tensor w2 = f.get("w");
//   save_sharded("ckpt/", named, parse_size("5GB"));   // model-0000i-of-0000N + index
//   NamedTensors all = load_safetensors("ckpt/");
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/tensor/tensor.h"

namespace braid {

class MappedFile;

// Named tensors in a chosen order: what is written, and what is read back (file order).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// A file's "__metadata__": free-form string -> string.
using StringMap = std::map<std::string, std::string>;

// The reference implementation refuses headers above this size; so does braid.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor's header record. Offsets are bytes relative to the start of the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

// A parsed and validated header.
struct SafetensorsHeader {
  uint64_t header_bytes = 0;              // N, padding included
  uint64_t data_bytes = 0;                // size of the data section
  std::vector<SafetensorsEntry> entries;  // in the order the JSON lists them
  StringMap metadata;
  uint64_t data_start() const { return 8 + header_bytes; }
};

// Parses and validates the header of a whole file held in `file`; `what` names the file in
// errors. Checks the rules in docs/files.md ("Validation") and never reads outside `file`.
// Throws kCorruptData naming `what` and the field, or kNotSupported for a dtype the format
// defines but braid does not store (U16, U32, U64, C64, F8_E8M0, ...).
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, std::string_view what);

// An open .safetensors file: the validated header plus a copy-on-write map of the file.
class SafetensorsFile {
 public:
  // Throws kIo (cannot open / map), kCorruptData (invalid file), kNotSupported (dtype).
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  // Tensor names in file order.
  std::vector<std::string> names() const;
  const StringMap& metadata() const { return header_.metadata; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const SafetensorsHeader& header() const { return header_; }
  bool contains(std::string_view name) const;
  // Throws kOutOfRange naming the file and the tensor when absent.
  const SafetensorsEntry& info(std::string_view name) const;
  // The tensor's bytes inside the mapping.
  std::span<const std::byte> raw_bytes(std::string_view name) const;

  // A CPU tensor viewing the mapped bytes: no copy. The mapping lives as long as any such
  // tensor. Writes to it change this process's copy only, never the file. When the data is
  // not aligned to the element size (possible only in files from other writers) the tensor
  // is an aligned copy instead. BOOL bytes other than 0 / 1 are kCorruptData.
  Tensor get(std::string_view name) const;
  // Every tensor, in file order (views as get()).
  NamedTensors load_all() const;

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Writes `tensors` (in this order, data contiguous, C order, little endian) and `metadata`
// (omitted from the header when empty) to `path` through AtomicFile. Non-contiguous
// tensors are made contiguous and non-CPU tensors copied to the CPU, one at a time.
// Throws kInvalidArgument for an undefined or meta tensor, a duplicate name, the name
// "__metadata__", or a name / metadata string that is not valid UTF-8; kIo from the file.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const StringMap& metadata = {});

// Loads every tensor from a .safetensors file, a model.safetensors.index.json, or a folder
// holding one of them. A folder's model.safetensors is preferred to its index (the order
// transformers uses). Throws kIo naming the folder and both names when neither exists.
NamedTensors load_safetensors(const std::filesystem::path& path_or_folder);

// ---- sharded checkpoints ----

// A size as transformers' / Accelerate's convert_file_size_to_int reads it: "5GB" =
// 5 * 10^9, "5GiB" = 5 * 2^30, also KB / MB / TB and KiB / MiB / TiB, units in any case;
// a unit ending in a lowercase 'b' ("5Gb", "500mb") means bits, i.e. bytes / 8, as there;
// a decimal value ("1.5GB") is allowed; a bare integer is bytes. Throws kInvalidArgument
// naming the text and the accepted forms.
uint64_t parse_size(std::string_view text);

// The split rule: tensors in order fill a shard until the next one would take it past
// `max_shard_size`; a tensor larger than the limit goes alone in its own shard. Returns the
// tensor indices of each shard. `sizes` are bytes.
std::vector<std::vector<size_t>> plan_shards(std::span<const uint64_t> sizes,
                                             uint64_t max_shard_size);

// "model-00002-of-00005.safetensors" for index 1 (0-based) of 5.
std::string shard_file_name(size_t index, size_t count);

// The contents of a model.safetensors.index.json.
struct SafetensorsIndex {
  std::optional<uint64_t> total_size;                           // metadata.total_size
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> file, JSON order
};

// Parses an index; kCorruptData naming `what` and the field when it is not an object with a
// "weight_map" object of string -> string (no duplicate names, file names relative and
// without ".."), and an optional "metadata" object whose "total_size" is an integer.
SafetensorsIndex parse_safetensors_index(std::string_view json_text, std::string_view what);
// The JSON transformers writes: sorted keys, two-space indent, trailing newline.
std::string format_safetensors_index(const SafetensorsIndex& index);

struct ShardedSaveResult {
  std::vector<std::filesystem::path> files;  // the .safetensors files written, in order
  std::filesystem::path index;               // empty when one shard was enough
  uint64_t total_size = 0;                   // tensor bytes, as in the index
};

// Writes `tensors` into `folder` (created if missing) split by plan_shards: one shard is
// written as model.safetensors with no index; N > 1 shards as
// model-0000i-of-0000N.safetensors plus model.safetensors.index.json. `metadata` goes into
// every shard's header. Files of an earlier save that the new layout does not use
// (model.safetensors, the index, model-*-of-*.safetensors) are removed after the new files
// are in place. Throws kInvalidArgument when max_shard_size is 0.
ShardedSaveResult save_sharded(const std::filesystem::path& folder, const NamedTensors& tensors,
                               uint64_t max_shard_size, const StringMap& metadata = {});
ShardedSaveResult save_sharded(const std::filesystem::path& folder, const NamedTensors& tensors,
                               std::string_view max_shard_size, const StringMap& metadata = {});

// Loads every tensor an index names: shard files in name order (model-00001 first), tensors
// in each shard's file order, so a braid-written checkpoint comes back in its saved order.
// Tensors a shard holds but the index does not name are skipped. kCorruptData naming the index and
// the missing file or tensor when a referenced file does not exist or lacks a tensor mapped to it.
NamedTensors load_sharded(const std::filesystem::path& index_path);

}  // namespace braid
