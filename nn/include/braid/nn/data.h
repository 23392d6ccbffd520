// SPDX-License-Identifier: Apache-2.0
// Data loading (docs/data.md): datasets, samplers, collation, and a DataLoader that loads
// batches on a background thread, plus its distributed preparation with Hugging Face
// Accelerate's DataLoaderConfiguration semantics (BatchSamplerShard, IterableDatasetShard,
// DataLoaderShard, DataLoaderDispatcher, SeedableRandomSampler, skip_first_batches).
//
//   auto data = std::make_shared<braid::nn::SyntheticDataset>(
//       braid::nn::SyntheticOptions{.size = 1000});
//   braid::nn::DataLoader loader(data, {.batch_size = 32, .shuffle = true});
//   auto train = braid::nn::prepare_data_loader(loader, *pg, {.use_seedable_sampler = true});
//   for (const braid::Tree& batch : train) { ... }   // train.end_of_dataloader() on the last
//
// Collectives (dispatching, the random sampler's generator sync) run on the caller's thread
// only, never on the prefetch thread, so they cannot interleave with the caller's own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "braid/core/device.h"
#include "braid/core/rng.h"
#include "braid/tensor/tree.h"

namespace braid {
class ProcessGroup;
}

namespace braid::nn {

// ---- datasets ----------------------------------------------------------------------------

// A map-style dataset. get() runs on the loader's prefetch thread, and when dispatching with
// skip_first_batches also on the caller's at the same time: it must be safe to call
// concurrently and must not depend on state the caller changes while a pass runs.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Sample `index` in [0, size()); out of range is kOutOfRange.
  virtual Tree get(int64_t index) const = 0;
  // Called at the start of every pass when the sampler does not take the epoch.
  virtual void set_epoch(int64_t /*epoch*/) {}
};

// One pass over an IterableDataset: next() until it returns nullopt.
class SampleStream {
 public:
  virtual ~SampleStream() = default;
  virtual std::optional<Tree> next() = 0;
};

// A stream of samples (torch's IterableDataset). stream() is called on the caller's thread at
// the start of a pass; the stream is then read on the prefetch thread.
class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  virtual std::unique_ptr<SampleStream> stream() = 0;
  // The number of samples when known (len()); nullopt makes DataLoader::size() throw.
  virtual std::optional<int64_t> size() const { return std::nullopt; }
  virtual void set_epoch(int64_t /*epoch*/) {}
};

// ---- samplers ----------------------------------------------------------------------------

// The order of the dataset's indices for one pass.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual int64_t size() const = 0;
  // One pass's order; called once at the start of every pass.
  virtual std::vector<int64_t> order() = 0;
  // Whether the sampler takes the epoch (then the dataset's set_epoch is not called).
  virtual bool takes_epoch() const { return false; }
  virtual void set_epoch(int64_t /*epoch*/) {}
  // The generator whose state must agree across ranks before a pass, or null.
  virtual Generator* generator() { return nullptr; }
};

// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> order() override;

 private:
  int64_t n_;
};

// A random permutation per pass from a Philox generator whose stream advances every pass
// (torch's RandomSampler with a generator). Seeded with `seed`, else with a 64-bit draw from
// default_generator() at construction.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, std::optional<uint64_t> seed = std::nullopt);
  int64_t size() const override { return n_; }
  std::vector<int64_t> order() override;
  Generator* generator() override { return &gen_; }

 private:
  int64_t n_;
  Generator gen_;
};

// Accelerate's SeedableRandomSampler: the permutation of pass e is randperm(n) from a fresh
// generator seeded initial_seed + epoch, the same on every rank; the epoch then advances by
// one (the loader sets it before each pass anyway). initial_seed: `data_seed`, else the seed
// of default_generator() (set_seed's), as torch.random.initial_seed().
class SeedableRandomSampler : public Sampler {
 public:
  explicit SeedableRandomSampler(int64_t n, std::optional<uint64_t> data_seed = std::nullopt);
  int64_t size() const override { return n_; }
  std::vector<int64_t> order() override;
  bool takes_epoch() const override { return true; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  uint64_t initial_seed() const { return initial_seed_; }

 private:
  int64_t n_;
  uint64_t initial_seed_;
  int64_t epoch_ = 0;
};

// torch's BatchSampler: consecutive groups of batch_size (> 0) indices; the last one is
// shorter, or dropped with drop_last.
std::vector<std::vector<int64_t>> batch_indices(const std::vector<int64_t>& order,
                                                int64_t batch_size, bool drop_last);
// The number of batches batch_indices gives for n indices.
int64_t num_batches(int64_t n, int64_t batch_size, bool drop_last);

// ---- collation ---------------------------------------------------------------------------

using CollateFn = std::function<Tree(const std::vector<Tree>& samples)>;

// torch's default_collate on Trees: tensors are stacked along a new dimension 0 (same dtype,
// shape and device, else kInvalidArgument naming the sample); ints become an i64 [B] tensor,
// doubles f64 [B], bools bool [B]; strings a list; maps key by key (sample 0's keys, which
// every sample must have); lists position by position (equal lengths). None, an empty sample
// list or samples of different kinds are kInvalidArgument.
Tree default_collate(const std::vector<Tree>& samples);

// ---- the loader --------------------------------------------------------------------------

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;                // a RandomSampler (map-style datasets only)
  std::optional<uint64_t> seed{};      // the RandomSampler's seed
  std::shared_ptr<Sampler> sampler{};  // overrides shuffle; size() must match the dataset
  bool drop_last = false;
  CollateFn collate{};                         // empty: default_collate
  int prefetch = 2;                            // batches loaded ahead on a thread; 0: no thread
  std::chrono::milliseconds timeout{300'000};  // deadline for one batch from that thread
};

// Accelerate's DataLoaderConfiguration (docs/data.md has each flag's effect).
struct DataLoaderConfiguration {
  bool split_batches = false;
  std::optional<bool> dispatch_batches{};  // unset: true for an IterableDataset
  bool even_batches = true;
  bool use_seedable_sampler = false;
  std::optional<uint64_t> data_seed{};
  bool non_blocking = false;  // no effect on CPU (documented no-op)
};

// Where a loader stands: the epoch, and the batches this rank has taken in it. Owned by the
// loader (shared with the loaders skip_first_batches derives from it), so it survives a
// resume: a pass that starts at batch n counts from n.
struct DataLoaderPosition {
  int64_t epoch = 0;
  int64_t batches = 0;
  bool operator==(const DataLoaderPosition&) const = default;
};

class DataLoader {
 public:
  class Iterator;

  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});
  DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options = {});
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  ~DataLoader();

  // Starts a pass: resets end_of_dataloader / remainder, sets the epoch on the sampler (else
  // the dataset), syncs a random sampler's generator across ranks when prepared, and starts the
  // prefetch thread. A pass that runs to the end increments epoch().
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  // The number of batches a pass yields on this rank (len()). kNotSupported for an
  // IterableDataset without a size.
  int64_t size() const;
  // The epoch the next (or current) pass draws; shared with the loaders skip_first_batches
  // derives from this one, so a skipped pass that runs to the end advances both.
  void set_epoch(int64_t epoch);
  int64_t epoch() const;
  // Where this loader (or one skip_first_batches derived from it) stands: the batches of the
  // current pass taken on this rank, skipped ones included; once the pass's last batch is out,
  // {epoch + 1, 0}. What save_state records (Accelerate's dataloader state).
  DataLoaderPosition position() const;
  // position(), readable after the loader is gone (the Accelerator keeps one per prepared
  // loader rather than a pointer to it).
  std::function<DataLoaderPosition()> position_reader() const;
  // True while the last batch of the pass is in hand (GradientState.end_of_dataloader).
  bool end_of_dataloader() const;
  // Real samples in the last global batch, for gather_for_metrics; -1 when unknown
  // (GradientState.remainder, docs/data.md).
  int64_t remainder() const;
  // batch_size, or batch_size * num_processes when prepared without split_batches.
  int64_t total_batch_size() const;
  std::optional<int64_t> total_dataset_length() const;

  const DataLoaderOptions& options() const;
  const std::shared_ptr<Sampler>& sampler() const;  // null for an IterableDataset
  int num_processes() const;                        // 1 until prepared
  int process_index() const;
  bool prepared() const;
  bool dispatches() const;
  int64_t skip_batches() const;

 private:
  struct State;
  struct Pass;
  explicit DataLoader(std::shared_ptr<State> state);
  friend DataLoader prepare_data_loader(const DataLoader&, ProcessGroup&,
                                        const DataLoaderConfiguration&, Device);
  friend DataLoader skip_first_batches(const DataLoader&, int64_t);

  std::shared_ptr<State> s_;
};

// An input iterator over one pass. Holds the pass (and the loader's state) alive.
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Tree;
  using difference_type = std::ptrdiff_t;
  using pointer = const Tree*;
  using reference = const Tree&;

  Iterator() = default;
  const Tree& operator*() const;
  const Tree* operator->() const { return &**this; }
  Iterator& operator++();
  void operator++(int) { ++*this; }
  bool operator==(std::default_sentinel_t) const;

 private:
  friend class DataLoader;
  explicit Iterator(std::shared_ptr<Pass> pass) : pass_(std::move(pass)) {}
  std::shared_ptr<Pass> pass_;
};

// Accelerate's prepare_data_loader: a loader that gives this rank (pg.rank() of pg.size())
// its share of every global batch under `config`; batches are moved to `device`. `loader`
// must not be prepared already. The group must outlive the returned loader. With one process
// and no dispatching the result iterates like `loader` (Accelerate does not shard then).
DataLoader prepare_data_loader(const DataLoader& loader, ProcessGroup& pg,
                               const DataLoaderConfiguration& config = {}, Device device = kCPU);

// A loader whose passes start at this rank's n-th batch (n >= 0): same dataset, sampler,
// configuration and epoch; padding, end_of_dataloader and remainder as the unskipped pass.
DataLoader skip_first_batches(const DataLoader& loader, int64_t n);

}  // namespace braid::nn
