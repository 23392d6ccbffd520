// Pieces of the sharded checkpoint (checkpoint.h) shared by its source files and its tests:
// the CRC32C checksum, the index.json model with its strict parser and writer, the folder
// names of an atomic publish, and a hook the multi-process tests use to kill a rank at a
// chosen point of a save. Internal to shard/: not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/core/crc32c.h"
#include "braid/core/dtype.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/tensor.h"

namespace braid::shard::detail {

// ---- CRC32C: braid::crc32c (core/crc32c.h) ----
using braid::crc32c;
// "e3069283": how index.json stores a checksum.
std::string crc32c_hex(uint32_t crc);

// ---- index.json ----
inline constexpr std::string_view kIndexName = "index.json";
inline constexpr std::string_view kFormatName = "braid-sharded";
inline constexpr int64_t kFormatVersion = 1;

struct IndexFile {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  bool operator==(const IndexFile&) const = default;
};

struct IndexPiece {
  std::string file;  // a key of CheckpointIndex::files
  std::string key;   // the tensor's name inside that file
  int64_t offset = 0;
  int64_t count = 0;  // > 0
  bool operator==(const IndexPiece&) const = default;
};

struct IndexTensor {
  DType dtype = DType::kF32;
  Shape shape;
  int64_t numel = 0;
  std::vector<IndexPiece> pieces;  // sorted by offset, tiling [0, numel) exactly
  bool operator==(const IndexTensor&) const = default;
};

struct CheckpointIndex {
  int64_t world_size = 1;
  StringMap metadata;
  std::map<std::string, IndexFile> files;
  std::map<std::string, IndexTensor> tensors;
  bool operator==(const CheckpointIndex&) const = default;
};

// Parses and validates an index.json text; `what` names the file in errors. Every failure is
// kCorruptData naming `what` and the field ("tensors.'w'.pieces[1].offset"): not an object,
// wrong "format", a missing or mistyped field, a duplicate key, a file name that is not a
// plain name (no '/', no "..", not empty), a dtype braid does not know, a shape whose element
// count overflows, a piece naming an unlisted file, and pieces that leave a gap, overlap or
// run past the tensor. A "version" above kFormatVersion is kNotSupported.
CheckpointIndex parse_checkpoint_index(std::string_view text, std::string_view what);
// Two-space indented JSON with a trailing newline; parse_checkpoint_index reads it back equal.
std::string format_checkpoint_index(const CheckpointIndex& index);

// ---- folder names ----
// "rank-00002-of-00004.safetensors" for rank 2 of 4.
std::string rank_file_name(int rank, int world_size);
// The key of a piece inside its rank file: "<name>@<offset>".
std::string piece_key(const std::string& name, int64_t offset);
// `folder` without a trailing separator (so that the siblings below are siblings).
std::filesystem::path canonical_folder(const std::filesystem::path& folder);
// Where ranks write before the publish: "<folder>.partial".
std::filesystem::path partial_folder(const std::filesystem::path& folder);
// Where the previous checkpoint waits while the new one is renamed into place: "<folder>.old".
std::filesystem::path aside_folder(const std::filesystem::path& folder);

// ---- test hooks ----
// Called by save_sharded_checkpoint on every rank at each stage of a save: "checked" (the
// coverage verdict is in), "file-written" (this rank's file is in the .partial folder), and
// on rank 0 only "index-written", then, replacing a previous checkpoint, "exchanged" (the
// folders swapped in one step) or, where the file system cannot swap (and after
// set_rename_exchange(false)), "old-moved-aside" (the first of two renames), and
// "published". Tests kill or throw from it.
using SaveHook = std::function<void(std::string_view stage, int rank)>;
void set_save_hook(SaveHook hook);  // empty: none (the default)
void run_save_hook(std::string_view stage, int rank);
// false: publish with two renames even where the file system can swap folders in one step
// (Note [Publish by exchange], checkpoint_save.cc); tests of that fallback. Default true.
void set_rename_exchange(bool enabled);
bool rename_exchange_enabled();

}  // namespace braid::shard::detail
