// Samplers, batching and Accelerate's sharding rules, with every expected index sequence
// written out by hand from accelerate/data_loader.py (BatchSamplerShard, IterableDatasetShard).
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/data.h"
#include "braid/nn/data_shard.h"

namespace braid::nn {
namespace {

using Batches = std::vector<std::vector<int64_t>>;

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

Batches shard(int64_t n, int64_t bs, bool drop_last, int np, int rank, bool split, bool even) {
  return shard_batches(batch_indices(iota(n), bs, drop_last), bs, drop_last,
                       ShardSpec{np, rank, split, even});
}

TEST(Samplers, SequentialIsInOrder) {
  SequentialSampler s(4);
  EXPECT_EQ(s.order(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_FALSE(s.takes_epoch());
  EXPECT_EQ(s.generator(), nullptr);
}

TEST(Samplers, RandomAdvancesEveryPassAndIsReproducible) {
  RandomSampler a(20, 5), b(20, 5);
  const auto a0 = a.order(), a1 = a.order();
  EXPECT_EQ(a0, b.order());
  EXPECT_EQ(a1, b.order());
  EXPECT_NE(a0, a1);
  auto sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(20));
  Generator g(5);
  EXPECT_EQ(a0, g.randperm(20));
}

TEST(Samplers, SeedableIsRandpermOfSeedPlusEpoch) {
  SeedableRandomSampler s(12, 1000);
  s.set_epoch(3);
  Generator g(1003);
  EXPECT_EQ(s.order(), g.randperm(12));
  EXPECT_EQ(s.epoch(), 4);  // advanced after a pass, as Accelerate's
  SeedableRandomSampler t(12, 1000);
  t.set_epoch(3);
  Generator g3(1003);
  EXPECT_EQ(t.order(), g3.randperm(12));
}

TEST(Samplers, SeedableDefaultsToTheDefaultGeneratorsSeed) {
  set_seed(77);
  SeedableRandomSampler s(5);
  EXPECT_EQ(s.initial_seed(), 77u);
  set_seed(0);
}

TEST(Batching, BatchSamplerKeepsOrDropsTheShortLastBatch) {
  EXPECT_EQ(batch_indices(iota(7), 3, false), (Batches{{0, 1, 2}, {3, 4, 5}, {6}}));
  EXPECT_EQ(batch_indices(iota(7), 3, true), (Batches{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(batch_indices({}, 3, false), Batches{});
  EXPECT_EQ(num_batches(7, 3, false), 3);
  EXPECT_EQ(num_batches(7, 3, true), 2);
  EXPECT_THROW(batch_indices(iota(3), 0, false), Error);
}

// 10 samples, batch 3, 2 processes: base batches [0 1 2] [3 4 5] [6 7 8] [9].
TEST(BatchSamplerShard, TwoProcessesDealing) {
  // even_batches: rank 1's short [9] is completed from the start: [9 0 1].
  EXPECT_EQ(shard(10, 3, false, 2, 0, false, true), (Batches{{0, 1, 2}, {6, 7, 8}}));
  EXPECT_EQ(shard(10, 3, false, 2, 1, false, true), (Batches{{3, 4, 5}, {9, 0, 1}}));
  EXPECT_EQ(shard(10, 3, false, 2, 0, false, false), (Batches{{0, 1, 2}, {6, 7, 8}}));
  EXPECT_EQ(shard(10, 3, false, 2, 1, false, false), (Batches{{3, 4, 5}, {9}}));
  EXPECT_EQ(shard(10, 3, true, 2, 0, false, true), (Batches{{0, 1, 2}}));
  EXPECT_EQ(shard(10, 3, true, 2, 1, false, true), (Batches{{3, 4, 5}}));
  // 12 samples: every round full, nothing added.
  EXPECT_EQ(shard(12, 3, false, 2, 1, false, true), (Batches{{3, 4, 5}, {9, 10, 11}}));
  // 7 samples: [0 1 2] [3 4 5] [6]; rank 0 gets [6 0 1], rank 1 [2 3 4].
  EXPECT_EQ(shard(7, 3, false, 2, 0, false, true), (Batches{{0, 1, 2}, {6, 0, 1}}));
  EXPECT_EQ(shard(7, 3, false, 2, 1, false, true), (Batches{{3, 4, 5}, {2, 3, 4}}));
  // 7 samples, not even: rank 0 [6], rank 1 nothing more.
  EXPECT_EQ(shard(7, 3, false, 2, 1, false, false), (Batches{{3, 4, 5}}));
  // Fewer samples than one global batch: the start is repeated.
  EXPECT_EQ(shard(2, 3, false, 2, 0, false, true), (Batches{{0, 1, 0}}));
  EXPECT_EQ(shard(2, 3, false, 2, 1, false, true), (Batches{{1, 0, 1}}));
}

TEST(BatchSamplerShard, ThreeProcessesDealing) {
  EXPECT_EQ(shard(10, 3, false, 3, 0, false, true), (Batches{{0, 1, 2}, {9, 0, 1}}));
  EXPECT_EQ(shard(10, 3, false, 3, 1, false, true), (Batches{{3, 4, 5}, {2, 3, 4}}));
  EXPECT_EQ(shard(10, 3, false, 3, 2, false, true), (Batches{{6, 7, 8}, {5, 6, 7}}));
  EXPECT_EQ(shard(10, 3, false, 3, 0, false, false), (Batches{{0, 1, 2}, {9}}));
  EXPECT_EQ(shard(10, 3, false, 3, 1, false, false), (Batches{{3, 4, 5}}));
  EXPECT_EQ(shard(10, 3, true, 3, 2, false, true), (Batches{{6, 7, 8}}));
}

TEST(BatchSamplerShard, SplitBatches) {
  // Batch 4 on 2 processes: [0..3] [4..7] [8 9].
  EXPECT_EQ(shard(10, 4, false, 2, 0, true, true), (Batches{{0, 1}, {4, 5}, {8, 9}}));
  EXPECT_EQ(shard(10, 4, false, 2, 1, true, true), (Batches{{2, 3}, {6, 7}, {0, 1}}));
  EXPECT_EQ(shard(10, 4, false, 2, 0, true, false), (Batches{{0, 1}, {4, 5}, {8, 9}}));
  EXPECT_EQ(shard(10, 4, false, 2, 1, true, false), (Batches{{2, 3}, {6, 7}}));
  EXPECT_EQ(shard(10, 4, true, 2, 1, true, true), (Batches{{2, 3}, {6, 7}}));
  // Batch 3 on 3 processes: [9] becomes [9 0 1 2].
  EXPECT_EQ(shard(10, 3, false, 3, 0, true, true), (Batches{{0}, {3}, {6}, {9}}));
  EXPECT_EQ(shard(10, 3, false, 3, 1, true, true), (Batches{{1}, {4}, {7}, {0}}));
  EXPECT_EQ(shard(10, 3, false, 3, 2, true, true), (Batches{{2}, {5}, {8}, {1}}));
  EXPECT_EQ(shard(10, 3, false, 3, 1, true, false), (Batches{{1}, {4}, {7}}));
  EXPECT_THROW(shard(10, 3, false, 2, 0, true, true), Error);  // 3 % 2 != 0
}

TEST(BatchSamplerShard, LengthMatchesWhatIsYielded) {
  for (int64_t n : {0, 1, 2, 7, 10, 12, 13}) {
    for (int np : {1, 2, 3}) {
      for (bool drop : {false, true}) {
        for (bool even : {false, true}) {
          for (bool split : {false, true}) {
            const int64_t bs = split ? 3 * np : 3;
            for (int r = 0; r < np; ++r) {
              if (split && !even)
                continue;  // Accelerate's len() counts the last rank's
                           // missing piece there; see the next test
              const ShardSpec spec{np, r, split, even};
              const auto got = shard(n, bs, drop, np, r, split, even);
              EXPECT_EQ(sharded_length(num_batches(n, bs, drop), drop, spec),
                        static_cast<int64_t>(got.size()))
                  << "n=" << n << " np=" << np << " rank=" << r << " drop=" << drop
                  << " even=" << even << " split=" << split;
            }
          }
        }
      }
    }
  }
}

TEST(BatchSamplerShard, SplitWithoutEvenKeepsAcceleratesLength) {
  // len(BatchSamplerShard) with split_batches is len(batch_sampler) on every rank, even when
  // the last rank's share of the short last batch is empty.
  EXPECT_EQ(sharded_length(3, false, ShardSpec{2, 1, true, false}), 3);
  EXPECT_EQ(shard(10, 4, false, 2, 1, true, false).size(), 2u);
}

class IntStream : public SampleStream {
 public:
  explicit IntStream(int64_t n) : n_(n) {}
  std::optional<Tree> next() override {
    if (i_ >= n_) return std::nullopt;
    return Tree(i_++);
  }

 private:
  int64_t n_, i_ = 0;
};

std::vector<int64_t> drain(SampleStream& s) {
  std::vector<int64_t> out;
  while (std::optional<Tree> t = s.next()) out.push_back(t->as_int());
  return out;
}

std::vector<int64_t> iterable_shard(int64_t n, int64_t bs, bool drop, int np, int r, bool split) {
  IterableShardStream s(std::make_unique<IntStream>(n), bs, drop, ShardSpec{np, r, split, true});
  return drain(s);
}

TEST(IterableDatasetShard, BuffersAGlobalBatchAndCompletesTheLast) {
  // Global batch 6 (3 x 2): [0..5] then [6 7 8 9 0 1 ...].
  EXPECT_EQ(iterable_shard(10, 3, false, 2, 0, false), (std::vector<int64_t>{0, 1, 2, 6, 7, 8}));
  EXPECT_EQ(iterable_shard(10, 3, false, 2, 1, false), (std::vector<int64_t>{3, 4, 5, 9, 0, 1}));
  EXPECT_EQ(iterable_shard(10, 3, true, 2, 1, false), (std::vector<int64_t>{3, 4, 5}));
  // Split, batch 4: [0..3] [4..7] [8 9 0 1 2 3].
  EXPECT_EQ(iterable_shard(10, 4, false, 2, 0, true), (std::vector<int64_t>{0, 1, 4, 5, 8, 9}));
  EXPECT_EQ(iterable_shard(10, 4, false, 2, 1, true), (std::vector<int64_t>{2, 3, 6, 7, 0, 1}));
  // Shorter than one global batch: it is repeated.
  EXPECT_EQ(iterable_shard(2, 3, false, 2, 1, false), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(iterable_shard(0, 3, false, 2, 0, false), std::vector<int64_t>{});
}

}  // namespace
}  // namespace braid::nn
