// SPDX-License-Identifier: Apache-2.0
// Datasets that come with braid (docs/data.md, "Datasets"): the bytes of text files as
// next-byte-prediction windows, and a deterministic synthetic dataset for tests.
//
//   braid::nn::TextBytesDataset text("/usr/share/common-licenses", {.context_length = 128});
//   braid::Tree s = text.get(0);   // {"input_ids": i64 [128], "labels": i64 [128]}
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "braid/nn/data.h"

namespace braid::nn {

struct TextBytesOptions {
  int64_t context_length = 256;  // T
  int64_t stride = 0;            // between window starts; 0: context_length
  uint8_t separator = 0;         // written between two files
};

// The files' bytes concatenated in sorted path order, `separator` between files. Sample i is
// the window of T + 1 bytes starting at i * stride: input_ids = bytes [s, s + T), labels =
// bytes [s + 1, s + T + 1), both i64 [T].
class TextBytesDataset : public Dataset {
 public:
  // A folder (every regular file below it, symlinks followed) or one file.
  TextBytesDataset(const std::filesystem::path& path, TextBytesOptions options = {});
  TextBytesDataset(std::vector<std::filesystem::path> files, TextBytesOptions options = {});

  int64_t size() const override { return size_; }
  Tree get(int64_t index) const override;

  const std::vector<std::filesystem::path>& files() const { return files_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  const TextBytesOptions& options() const { return options_; }

 private:
  void load();

  std::vector<std::filesystem::path> files_;
  TextBytesOptions options_;
  std::vector<uint8_t> bytes_;
  int64_t size_ = 0;
};

struct SyntheticOptions {
  int64_t size = 64;
  int64_t features = 4;
  int64_t classes = 2;
  uint64_t seed = 0;
};

// Sample i: {"index": i64 0-d (= i), "x": f32 [features] uniform in [0, 1), "y": i64 0-d in
// [0, classes)}, a pure function of (seed, i).
class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions options = {});
  int64_t size() const override { return options_.size; }
  Tree get(int64_t index) const override;

 private:
  SyntheticOptions options_;
};

}  // namespace braid::nn
