// DataLoader on one process: batches, end_of_dataloader / remainder, prefetching (order,
// exceptions, timeouts, early exit), epochs, skip_first_batches, collation, and
// prepare_data_loader on a one-rank group (local and dispatching).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "braid/comm/process_group.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/nn/data.h"
#include "braid/nn/data_text.h"

namespace braid::nn {
namespace {

using ::testing::HasSubstr;
using Batches = std::vector<std::vector<int64_t>>;

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

struct PassResult {
  Batches batches;
  std::vector<bool> end_flags;
  int64_t remainder = -2;
};

PassResult run_pass(DataLoader& loader) {
  PassResult r;
  for (const Tree& batch : loader) {
    r.batches.push_back(ints(batch.at("index").tensor()));
    r.end_flags.push_back(loader.end_of_dataloader());
  }
  r.remainder = loader.remainder();
  return r;
}

std::shared_ptr<SyntheticDataset> synthetic(int64_t n) {
  return std::make_shared<SyntheticDataset>(SyntheticOptions{.size = n});
}

TEST(DataLoader, BatchesInOrderWithEndFlagAndRemainder) {
  for (int prefetch : {0, 1, 3}) {
    DataLoader loader(synthetic(10), {.batch_size = 3, .prefetch = prefetch});
    EXPECT_EQ(loader.size(), 4);
    const PassResult r = run_pass(loader);
    EXPECT_EQ(r.batches, (Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}));
    EXPECT_EQ(r.end_flags, (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(r.remainder, 1);  // 10 % 3
    EXPECT_EQ(loader.epoch(), 1);
  }
}

TEST(DataLoader, DropLastDropsTheShortBatchAndHasNoRemainder) {
  DataLoader loader(synthetic(10), {.batch_size = 3, .drop_last = true});
  EXPECT_EQ(loader.size(), 3);
  const PassResult r = run_pass(loader);
  EXPECT_EQ(r.batches, (Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
  EXPECT_EQ(r.remainder, -1);
}

TEST(DataLoader, CollatesEveryField) {
  DataLoader loader(synthetic(5), {.batch_size = 2});
  auto it = loader.begin();
  const Tree& b = *it;
  EXPECT_EQ(b.at("x").tensor().shape(), (Shape{2, 4}));
  EXPECT_EQ(b.at("x").tensor().dtype(), DType::kF32);
  EXPECT_EQ(b.at("y").tensor().shape(), (Shape{2}));
  SyntheticDataset d({.size = 5});
  EXPECT_EQ(b.at("x").tensor().select(0, 1).to_vector(), d.get(1).at("x").tensor().to_vector());
}

TEST(DataLoader, ShuffleWithASeedIsAPermutationThatChangesEveryEpoch) {
  DataLoader a(synthetic(12), {.batch_size = 4, .shuffle = true, .seed = 9});
  DataLoader b(synthetic(12), {.batch_size = 4, .shuffle = true, .seed = 9});
  const PassResult a0 = run_pass(a), a1 = run_pass(a), b0 = run_pass(b);
  EXPECT_EQ(a0.batches, b0.batches);
  EXPECT_NE(a0.batches, a1.batches);
  Generator g(9);
  const auto perm = g.randperm(12);
  EXPECT_EQ(a0.batches[0], (std::vector<int64_t>(perm.begin(), perm.begin() + 4)));
}

TEST(DataLoader, SeedableSamplerFollowsTheEpoch) {
  auto sampler = std::make_shared<SeedableRandomSampler>(8, 50);
  DataLoader loader(synthetic(8), {.batch_size = 8, .sampler = sampler});
  const PassResult e0 = run_pass(loader);
  const PassResult e1 = run_pass(loader);  // epoch advanced by the finished pass
  loader.set_epoch(0);
  const PassResult again = run_pass(loader);
  EXPECT_EQ(e0.batches, again.batches);
  Generator g0(50), g1(51);
  EXPECT_EQ(e0.batches[0], g0.randperm(8));
  EXPECT_EQ(e1.batches[0], g1.randperm(8));
}

class FailingDataset : public Dataset {
 public:
  int64_t size() const override { return 10; }
  Tree get(int64_t index) const override {
    BRAID_CHECK(index != 7, kCorruptData, "sample 7 is broken");
    return Tree::map({{"index", Tensor::full({}, index, DType::kI64)}});
  }
};

TEST(DataLoader, WorkerExceptionIsRethrownAtItsBatch) {
  for (int prefetch : {0, 2}) {
    DataLoader loader(std::make_shared<FailingDataset>(), {.batch_size = 3, .prefetch = prefetch});
    auto it = loader.begin();
    EXPECT_EQ(ints(it->at("index").tensor()), (std::vector<int64_t>{0, 1, 2}));
    ++it;
    EXPECT_EQ(ints(it->at("index").tensor()), (std::vector<int64_t>{3, 4, 5}));
    try {
      ++it;
      FAIL() << "expected the dataset's error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
      EXPECT_THAT(e.message(), HasSubstr("sample 7"));
    }
    EXPECT_EQ(loader.epoch(), 0);
  }
}

class SlowDataset : public Dataset {
 public:
  int64_t size() const override { return 100; }
  Tree get(int64_t index) const override {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return Tree::map({{"index", Tensor::full({}, index, DType::kI64)}});
  }
  mutable std::atomic<int> calls{0};
};

TEST(DataLoader, ATimeoutNamesTheBatch) {
  DataLoader loader(std::make_shared<SlowDataset>(),
                    {.batch_size = 10, .timeout = std::chrono::milliseconds(30)});
  try {
    loader.begin();
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_THAT(e.message(), HasSubstr("batch 0"));
  }
}

TEST(DataLoader, LeavingAPassEarlyStopsTheThreadAndKeepsTheEpoch) {
  auto data = std::make_shared<SlowDataset>();
  DataLoader loader(data, {.batch_size = 1, .prefetch = 2});
  {
    auto it = loader.begin();
    ++it;
  }  // joins the prefetch thread: at most the 2 queued batches and one in flight were read
  EXPECT_LE(data->calls.load(), 5);
  EXPECT_EQ(loader.epoch(), 0);
}

TEST(DataLoader, SkipFirstBatchesKeepsTheEndAndRemainder) {
  DataLoader loader(synthetic(10), {.batch_size = 3});
  DataLoader skipped = skip_first_batches(loader, 2);
  EXPECT_EQ(skipped.size(), 2);
  const PassResult r = run_pass(skipped);
  EXPECT_EQ(r.batches, (Batches{{6, 7, 8}, {9}}));
  EXPECT_EQ(r.end_flags, (std::vector<bool>{false, true}));
  EXPECT_EQ(r.remainder, 1);
  EXPECT_EQ(skip_first_batches(loader, 9).size(), 0);
  DataLoader all_skipped = skip_first_batches(loader, 9);
  EXPECT_TRUE(run_pass(all_skipped).batches.empty());
  // An empty pass still ends the epoch; the skipped loaders share theirs with `loader`, so the
  // two passes above made it 2.
  EXPECT_EQ(all_skipped.epoch(), 2);
  EXPECT_EQ(loader.epoch(), 2);
  DataLoader twice = skip_first_batches(skipped, 1);
  EXPECT_EQ(run_pass(twice).batches, (Batches{{9}}));
}

TEST(DataLoader, SkipKeepsTheEpochOfASeedableSampler) {
  auto sampler = std::make_shared<SeedableRandomSampler>(9, 3);
  DataLoader loader(synthetic(9), {.batch_size = 3, .sampler = sampler});
  loader.set_epoch(4);
  DataLoader skipped = skip_first_batches(loader, 1);
  const PassResult full = run_pass(loader);
  skipped.set_epoch(4);  // the full pass ended epoch 4 for both (they share it)
  const PassResult rest = run_pass(skipped);
  EXPECT_EQ(rest.batches, (Batches(full.batches.begin() + 1, full.batches.end())));
}

// The position save_state records is the loader's own: counted from the epoch's start even
// in a pass that skipped its first batches, {epoch + 1, 0} once the last batch is out, and
// shared by the loader and the ones skip_first_batches derives from it.
TEST(DataLoader, PositionCountsFromTheEpochStartThroughSkips) {
  DataLoader loader(synthetic(10), {.batch_size = 3});
  EXPECT_EQ(loader.position(), (DataLoaderPosition{0, 0}));
  auto read = loader.position_reader();
  {
    auto it = loader.begin();
    EXPECT_EQ(loader.position(), (DataLoaderPosition{0, 1}));
    ++it;
    EXPECT_EQ(read(), (DataLoaderPosition{0, 2}));
  }
  DataLoader resumed = skip_first_batches(loader, 2);
  auto it = resumed.begin();  // batch 2 of epoch 0
  EXPECT_EQ(resumed.position(), (DataLoaderPosition{0, 3}));
  EXPECT_EQ(loader.position(), (DataLoaderPosition{0, 3}));
  ++it;  // the last batch: the epoch is done
  EXPECT_TRUE(resumed.end_of_dataloader());
  EXPECT_EQ(read(), (DataLoaderPosition{1, 0}));
  ++it;
  EXPECT_TRUE(it == resumed.end());
  EXPECT_EQ(loader.position(), (DataLoaderPosition{1, 0}));
  EXPECT_EQ(loader.epoch(), 1);
  // The next epoch through the original loader starts at its first batch.
  const PassResult next = run_pass(loader);
  EXPECT_EQ(next.batches.front(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(read(), (DataLoaderPosition{2, 0}));
}

class CountingStream : public IterableDataset {
 public:
  explicit CountingStream(int64_t n, bool sized = true) : n_(n), sized_(sized) {}
  std::unique_ptr<SampleStream> stream() override {
    struct S : SampleStream {
      int64_t n, i = 0;
      std::optional<Tree> next() override {
        if (i >= n) return std::nullopt;
        return Tree::map({{"index", Tensor::full({}, i++, DType::kI64)}});
      }
    };
    auto s = std::make_unique<S>();
    s->n = n_;
    return s;
  }
  std::optional<int64_t> size() const override {
    return sized_ ? std::optional<int64_t>(n_) : std::nullopt;
  }

 private:
  int64_t n_;
  bool sized_;
};

TEST(DataLoader, IterableDatasetBatchesItsStream) {
  DataLoader loader(std::make_shared<CountingStream>(7), {.batch_size = 3});
  EXPECT_EQ(loader.size(), 3);
  const PassResult r = run_pass(loader);
  EXPECT_EQ(r.batches, (Batches{{0, 1, 2}, {3, 4, 5}, {6}}));
  EXPECT_EQ(r.end_flags, (std::vector<bool>{false, false, true}));
  DataLoader dropped(std::make_shared<CountingStream>(7), {.batch_size = 3, .drop_last = true});
  EXPECT_EQ(run_pass(dropped).batches, (Batches{{0, 1, 2}, {3, 4, 5}}));
  DataLoader skipped = skip_first_batches(loader, 1);
  EXPECT_EQ(run_pass(skipped).batches, (Batches{{3, 4, 5}, {6}}));
  DataLoader unsized(std::make_shared<CountingStream>(7, false), {.batch_size = 3});
  EXPECT_THROW(unsized.size(), Error);
  EXPECT_THROW(DataLoader(std::make_shared<CountingStream>(7), {.shuffle = true}), Error);
}

TEST(DataLoader, RejectsBadOptions) {
  EXPECT_THROW(DataLoader(synthetic(3), {.batch_size = 0}), Error);
  EXPECT_THROW(DataLoader(synthetic(3), {.prefetch = -1}), Error);
  EXPECT_THROW(DataLoader(synthetic(3), {.sampler = std::make_shared<SequentialSampler>(4)}),
               Error);
  EXPECT_THROW(skip_first_batches(DataLoader(synthetic(3)), -1), Error);
}

std::shared_ptr<ProcessGroup> one_rank_group() {
  ProcessGroupOptions o;
  o.backend = "shm";
  o.store = std::make_shared<InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  o.timeout = std::chrono::milliseconds(30'000);
  return ProcessGroup::create(o);
}

TEST(PrepareDataLoader, OneProcessIteratesLikeTheLoader) {
  auto pg = one_rank_group();
  DataLoader loader(synthetic(10), {.batch_size = 3});
  DataLoader prepared = prepare_data_loader(loader, *pg);
  EXPECT_TRUE(prepared.prepared());
  EXPECT_FALSE(prepared.dispatches());
  EXPECT_EQ(prepared.total_batch_size(), 3);
  EXPECT_EQ(run_pass(prepared).batches, (Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}));
  EXPECT_THROW(prepare_data_loader(prepared, *pg), Error);
}

TEST(PrepareDataLoader, OneProcessDispatchingBroadcastsToItself) {
  auto pg = one_rank_group();
  DataLoader loader(synthetic(10), {.batch_size = 3});
  DataLoader prepared = prepare_data_loader(loader, *pg, {.dispatch_batches = true});
  EXPECT_TRUE(prepared.dispatches());
  EXPECT_EQ(prepared.size(), 4);
  const PassResult r = run_pass(prepared);
  EXPECT_EQ(r.batches, (Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}));
  EXPECT_EQ(r.end_flags, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(r.remainder, 1);  // the last global batch's real size
  DataLoader skipped = skip_first_batches(prepared, 3);
  EXPECT_EQ(run_pass(skipped).batches, (Batches{{9}}));
  // Iterable datasets dispatch by default.
  DataLoader stream(std::make_shared<CountingStream>(5), {.batch_size = 2});
  DataLoader prepared_stream = prepare_data_loader(stream, *pg);
  EXPECT_TRUE(prepared_stream.dispatches());
  EXPECT_EQ(run_pass(prepared_stream).batches, (Batches{{0, 1}, {2, 3}, {4}}));
}

TEST(PrepareDataLoader, SeedableSamplerReplacesTheRandomOne) {
  auto pg = one_rank_group();
  DataLoader loader(synthetic(10), {.batch_size = 10, .shuffle = true, .seed = 1});
  DataLoader prepared =
      prepare_data_loader(loader, *pg, {.use_seedable_sampler = true, .data_seed = 21});
  EXPECT_NE(dynamic_cast<SeedableRandomSampler*>(prepared.sampler().get()), nullptr);
  EXPECT_NE(dynamic_cast<RandomSampler*>(loader.sampler().get()), nullptr);
  prepared.set_epoch(2);
  Generator g(23);
  EXPECT_EQ(run_pass(prepared).batches, (Batches{g.randperm(10)}));
}

}  // namespace
}  // namespace braid::nn
