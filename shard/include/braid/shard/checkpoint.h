// SPDX-License-Identifier: Apache-2.0
// Sharded checkpoints (docs/sharding.md, "Checkpoints"): every rank writes the pieces of the
// tensors it owns; one index lists every piece; any world size reads any slice back.
//
// A piece is a contiguous run of a tensor's elements in row-major order (a flat slice):
// FSDP's flat shards cut parameters at arbitrary element boundaries, so a rank owns, of each
// parameter, at most one such run. A checkpoint folder:
//   index.json                      {"format": "braid-sharded", "version": 1, "world_size": W,
//                                    "metadata": {...}, "files":
//                                    {"rank-00000-of-00004.safetensors":
//                                    {"bytes": n, "crc32c"|"sha256": ...}},
//                                    "tensors": {name: {"dtype", "shape", "pieces":
//                                    [{"file", "key", "offset", "count"}]}}}
//   rank-0000r-of-0000W.safetensors the pieces rank r wrote, as 1-D tensors ("<name>@<offset>")
// No pickle anywhere. Writes are atomic for the whole folder: ranks write into
// "<folder>.partial/", rank 0 checks every file, writes the index last and renames the folder
// into place (the previous checkpoint, if any, is replaced only then), so a crash mid-save
// leaves the last complete checkpoint loadable.
//
//   std::vector<Piece> mine = ...;                    // this rank's runs
//   save_sharded_checkpoint(folder, mine, *pg, {{"step", "100"}});
//   ShardedCheckpoint ckpt(folder);                   // any process, any world size
//   ckpt.read_range("transformer.wte.weight", 0, 4096, dst);
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/tensor/safetensors.h"
#include "braid/tensor/tensor.h"

namespace braid::shard {

// A run of `data.numel()` elements of tensor `name` (whole shape `shape`, dtype of data),
// starting at row-major element `offset`. data: 1-D, contiguous, CPU.
struct Piece {
  std::string name;
  Shape shape;
  int64_t offset = 0;
  Tensor data;
};

// Collective over `pg` (every rank calls it, with its own pieces; a rank may have none).
// Checks that the pieces of all ranks together cover every tensor exactly once with one
// dtype and shape per name (kInvalidArgument naming the tensor and the gap or overlap),
// writes them, and publishes the folder atomically as described above. `metadata` (string ->
// string, e.g. the step, the JSON of an optimizer's scalars) goes into index.json.
void save_sharded_checkpoint(const std::filesystem::path& folder, const std::vector<Piece>& pieces,
                             ProcessGroup& pg, const StringMap& metadata = {});

// A checkpoint folder opened for reading (no ProcessGroup needed). The constructor reads and
// validates index.json (kCorruptData naming the field) and, when the folder is missing but a
// "<folder>.partial" or leftover of an interrupted publish exists, says so in the error.
// File checksums are verified the first time a file is read (kCorruptData naming the file).
class ShardedCheckpoint {
 public:
  explicit ShardedCheckpoint(const std::filesystem::path& folder);
  int world_size() const;  // of the run that wrote it
  const StringMap& metadata() const;
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  Shape shape(const std::string& name) const;  // kOutOfRange naming an unknown tensor
  DType dtype(const std::string& name) const;
  // Elements [offset, offset + count) of the row-major tensor, converted to `dst_dtype`, into
  // dst (count elements); any range, whatever pieces it spans (resharding).
  void read_range(const std::string& name, int64_t offset, int64_t count, void* dst,
                  DType dst_dtype) const;
  // The whole tensor.
  Tensor read(const std::string& name) const;
  // Every tensor whole, in name order (merge-weights).
  NamedTensors read_all() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The `braid merge-weights` command (Accelerate's merge-weights): writes every tensor of a
// sharded checkpoint whole into `out_folder` as model.safetensors, or as
// model-0000i-of-0000N.safetensors + model.safetensors.index.json beyond max_shard_size
// (save_sharded's rule), with {"format": "pt"} metadata. `names` filters (empty: all; a name
// ending in '.' keeps that prefix, e.g. "model."). `progress(done, total)` after each tensor
// is read (the CLI's progress bar). Returns the files written.
std::vector<std::filesystem::path> merge_weights(
    const std::filesystem::path& checkpoint, const std::filesystem::path& out_folder,
    std::string_view max_shard_size = "5GB", const std::vector<std::string>& names = {},
    const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace braid::shard
