// SPDX-License-Identifier: Apache-2.0
// Accelerate's sharding rules as plain functions (docs/data.md, "Distributed"): which batch
// indices (BatchSamplerShard) or which stream samples (IterableDatasetShard) one rank gets.
// DataLoader uses them after prepare_data_loader; tests check them against hand-written cases.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "braid/nn/data.h"

namespace braid::nn {

struct ShardSpec {
  int num_processes = 1;
  int process_index = 0;
  bool split_batches = false;  // split each batch instead of dealing whole batches
  bool even_batches = true;    // complete the last batches from the start of the order
};

// BatchSamplerShard: this rank's batches, given every base batch of a pass (batch_indices'
// output for batch_size and drop_last). split_batches needs batch_size % num_processes == 0.
std::vector<std::vector<int64_t>> shard_batches(const std::vector<std::vector<int64_t>>& batches,
                                                int64_t batch_size, bool drop_last,
                                                const ShardSpec& spec);
// len(BatchSamplerShard) for `num_batches` base batches.
int64_t sharded_length(int64_t num_batches, bool drop_last, const ShardSpec& spec);

// IterableDatasetShard over a stream: global batches of batch_size (split) or
// batch_size * num_processes are buffered and this rank's slice of each is yielded; the last
// is completed by repeating the first global batch unless drop_last (then dropped).
class IterableShardStream : public SampleStream {
 public:
  IterableShardStream(std::unique_ptr<SampleStream> inner, int64_t batch_size, bool drop_last,
                      const ShardSpec& spec);
  std::optional<Tree> next() override;

 private:
  bool refill();  // loads the next global batch into buffer_; false at the end

  std::unique_ptr<SampleStream> inner_;
  bool drop_last_;
  int64_t real_batch_size_;
  int64_t begin_, end_;  // this rank's slice of a global batch
  std::vector<Tree> buffer_;
  std::vector<Tree> first_batch_;
  size_t pos_ = 0;
  bool done_ = false;
};

}  // namespace braid::nn
