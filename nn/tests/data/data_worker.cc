// One rank of a data-loading job under `braid launch` (docs/data.md, "Distributed"). Every
// rank runs the same cases: it prepares a loader with one DataLoaderConfiguration, iterates
// it, and all-gathers what it got (indices per batch, end_of_dataloader flags, remainder,
// size(), dataset reads). Rank 0 compares every rank's share with Accelerate's result written
// out by hand below (10 samples unless noted; "positions" in the pass's order, which is 0..n-1
// unless the case shuffles), prints one line per case and exits 1 on any mismatch.
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "braid/comm/object.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/nn/data.h"
#include "braid/nn/data_text.h"

namespace braid::nn {
namespace {

using Batches = std::vector<std::vector<int64_t>>;

enum class Order { kSequential, kSeedable, kRandomSynced };

struct Case {
  std::string name;
  int64_t n = 10;
  int64_t batch_size = 3;
  bool drop_last = false;
  DataLoaderConfiguration config{};
  bool iterable = false;
  int64_t skip = 0;
  Order order = Order::kSequential;
  int passes = 1;                 // pass p runs epoch p (the second via set_epoch)
  std::vector<Batches> expected;  // per rank, in positions of the pass's order
  int64_t remainder = -1;
};

constexpr uint64_t kDataSeed = 1234;

class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n) : inner_({.size = n}) {}
  int64_t size() const override { return inner_.size(); }
  Tree get(int64_t i) const override {
    ++reads;
    return inner_.get(i);
  }
  mutable std::atomic<int64_t> reads{0};

 private:
  SyntheticDataset inner_;
};

class CountingStream : public IterableDataset {
 public:
  explicit CountingStream(int64_t n) : n_(n) {}
  std::unique_ptr<SampleStream> stream() override {
    ++reads;
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
  std::optional<int64_t> size() const override { return n_; }
  std::atomic<int64_t> reads{0};

 private:
  int64_t n_;
};

std::vector<Case> cases_for(int np) {
  DataLoaderConfiguration shard_uneven{.even_batches = false};
  DataLoaderConfiguration split{.split_batches = true};
  DataLoaderConfiguration split_uneven{.split_batches = true, .even_batches = false};
  DataLoaderConfiguration dispatch{.dispatch_batches = true};
  DataLoaderConfiguration dispatch_split{.split_batches = true, .dispatch_batches = true};
  DataLoaderConfiguration no_dispatch{.dispatch_batches = false};
  DataLoaderConfiguration seedable{.use_seedable_sampler = true, .data_seed = kDataSeed};
  DataLoaderConfiguration seedable_dispatch{
      .dispatch_batches = true, .use_seedable_sampler = true, .data_seed = kDataSeed};
  std::vector<Case> c;
  if (np == 2) {
    const std::vector<Batches> even = {{{0, 1, 2}, {6, 7, 8}}, {{3, 4, 5}, {9, 0, 1}}};
    const std::vector<Batches> disp = {{{0, 1, 2}, {6, 7}}, {{3, 4, 5}, {8, 9}}};
    c.push_back({.name = "shard_even", .expected = even, .remainder = 4});
    c.push_back({.name = "shard_uneven",
                 .config = shard_uneven,
                 .expected = {{{0, 1, 2}, {6, 7, 8}}, {{3, 4, 5}, {9}}},
                 .remainder = 4});
    c.push_back({.name = "shard_drop_last",
                 .drop_last = true,
                 .expected = {{{0, 1, 2}}, {{3, 4, 5}}},
                 .remainder = -1});
    c.push_back({.name = "split_even",
                 .batch_size = 4,
                 .config = split,
                 .expected = {{{0, 1}, {4, 5}, {8, 9}}, {{2, 3}, {6, 7}, {0, 1}}},
                 .remainder = 2});
    c.push_back({.name = "split_uneven",
                 .batch_size = 4,
                 .config = split_uneven,
                 .expected = {{{0, 1}, {4, 5}, {8, 9}}, {{2, 3}, {6, 7}}},
                 .remainder = 2});
    c.push_back({.name = "dispatch", .config = dispatch, .expected = disp, .remainder = 4});
    c.push_back({.name = "dispatch_split",
                 .batch_size = 4,
                 .config = dispatch_split,
                 .expected = {{{0, 1}, {4, 5}, {8}}, {{2, 3}, {6, 7}, {9}}},
                 .remainder = 2});
    c.push_back({.name = "dispatch_drop_last",
                 .drop_last = true,
                 .config = dispatch,
                 .expected = {{{0, 1, 2}}, {{3, 4, 5}}},
                 .remainder = 6});
    // 9 samples, batch 2: the last global batch [8] is padded with the first batch's [0 1].
    c.push_back({.name = "dispatch_pad",
                 .n = 9,
                 .batch_size = 2,
                 .config = dispatch,
                 .expected = {{{0, 1}, {4, 5}, {8}}, {{2, 3}, {6, 7}, {0}}},
                 .remainder = 1});
    c.push_back({.name = "dispatch_pad_skip2",
                 .n = 9,
                 .batch_size = 2,
                 .config = dispatch,
                 .skip = 2,
                 .expected = {{{8}}, {{0}}},
                 .remainder = 1});
    c.push_back({.name = "shard_even_skip1",
                 .skip = 1,
                 .expected = {{{6, 7, 8}}, {{9, 0, 1}}},
                 .remainder = 4});
    c.push_back({.name = "dispatch_skip1",
                 .config = dispatch,
                 .skip = 1,
                 .expected = {{{6, 7}}, {{8, 9}}},
                 .remainder = 4});
    c.push_back({.name = "iterable_shard",
                 .config = no_dispatch,
                 .iterable = true,
                 .expected = even,
                 .remainder = 4});
    c.push_back(
        {.name = "iterable_dispatch_default", .iterable = true, .expected = disp, .remainder = 4});
    c.push_back({.name = "seedable_data_seed_2_epochs",
                 .config = seedable,
                 .order = Order::kSeedable,
                 .passes = 2,
                 .expected = even,
                 .remainder = 4});
    c.push_back({.name = "random_sampler_synced_2_passes",
                 .order = Order::kRandomSynced,
                 .passes = 2,
                 .expected = even,
                 .remainder = 4});
    c.push_back({.name = "seedable_dispatch_2_epochs",
                 .config = seedable_dispatch,
                 .order = Order::kSeedable,
                 .passes = 2,
                 .expected = disp,
                 .remainder = 4});
    c.push_back({.name = "seedable_skip1_epoch1",
                 .config = seedable,
                 .skip = 1,
                 .order = Order::kSeedable,
                 .passes = 2,
                 .expected = {{{6, 7, 8}}, {{9, 0, 1}}},
                 .remainder = 4});
  } else if (np == 3) {
    const std::vector<Batches> even = {
        {{0, 1, 2}, {9, 0, 1}}, {{3, 4, 5}, {2, 3, 4}}, {{6, 7, 8}, {5, 6, 7}}};
    const std::vector<Batches> disp = {{{0, 1, 2}, {9}}, {{3, 4, 5}, {0}}, {{6, 7, 8}, {1}}};
    c.push_back({.name = "shard_even", .expected = even, .remainder = 1});
    c.push_back({.name = "shard_uneven",
                 .config = shard_uneven,
                 .expected = {{{0, 1, 2}, {9}}, {{3, 4, 5}}, {{6, 7, 8}}},
                 .remainder = 1});
    c.push_back({.name = "shard_drop_last",
                 .drop_last = true,
                 .expected = {{{0, 1, 2}}, {{3, 4, 5}}, {{6, 7, 8}}},
                 .remainder = -1});
    c.push_back({.name = "split_even",
                 .config = split,
                 .expected = {{{0}, {3}, {6}, {9}}, {{1}, {4}, {7}, {0}}, {{2}, {5}, {8}, {1}}},
                 .remainder = 1});
    c.push_back({.name = "split_uneven",
                 .config = split_uneven,
                 .expected = {{{0}, {3}, {6}, {9}}, {{1}, {4}, {7}}, {{2}, {5}, {8}}},
                 .remainder = 1});
    c.push_back({.name = "dispatch", .config = dispatch, .expected = disp, .remainder = 1});
    c.push_back({.name = "dispatch_split",
                 .config = dispatch_split,
                 .expected = {{{0}, {3}, {6}, {9}}, {{1}, {4}, {7}, {0}}, {{2}, {5}, {8}, {1}}},
                 .remainder = 1});
    c.push_back({.name = "dispatch_drop_last",
                 .drop_last = true,
                 .config = dispatch,
                 .expected = {{{0, 1, 2}}, {{3, 4, 5}}, {{6, 7, 8}}},
                 .remainder = 9});
    c.push_back({.name = "shard_even_skip1",
                 .skip = 1,
                 .expected = {{{9, 0, 1}}, {{2, 3, 4}}, {{5, 6, 7}}},
                 .remainder = 1});
    c.push_back({.name = "dispatch_skip1",
                 .config = dispatch,
                 .skip = 1,
                 .expected = {{{9}}, {{0}}, {{1}}},
                 .remainder = 1});
    c.push_back({.name = "iterable_shard",
                 .config = no_dispatch,
                 .iterable = true,
                 .expected = even,
                 .remainder = 1});
    c.push_back(
        {.name = "iterable_dispatch_default", .iterable = true, .expected = disp, .remainder = 1});
    c.push_back({.name = "seedable_data_seed_2_epochs",
                 .config = seedable,
                 .order = Order::kSeedable,
                 .passes = 2,
                 .expected = even,
                 .remainder = 1});
    c.push_back({.name = "random_sampler_synced_2_passes",
                 .order = Order::kRandomSynced,
                 .passes = 2,
                 .expected = even,
                 .remainder = 1});
    c.push_back({.name = "seedable_dispatch_2_epochs",
                 .config = seedable_dispatch,
                 .order = Order::kSeedable,
                 .passes = 2,
                 .expected = disp,
                 .remainder = 1});
    c.push_back({.name = "seedable_skip1_epoch1",
                 .config = seedable,
                 .skip = 1,
                 .order = Order::kSeedable,
                 .passes = 2,
                 .expected = {{{9, 0, 1}}, {{2, 3, 4}}, {{5, 6, 7}}},
                 .remainder = 1});
  }
  return c;
}

Tree int_list(const std::vector<int64_t>& v) {
  Tree::List out;
  for (int64_t x : v) out.emplace_back(x);
  return out;
}

// One pass on this rank, as a Tree to all-gather.
Tree run_pass(DataLoader& loader) {
  Tree::List batches, ends;
  for (const Tree& batch : loader) {
    std::vector<int64_t> idx;
    for (double v : batch.at("index").tensor().to_vector()) idx.push_back(static_cast<int64_t>(v));
    batches.push_back(int_list(idx));
    ends.emplace_back(loader.end_of_dataloader());
  }
  return Tree::map({{"batches", Tree(batches)},
                    {"ends", Tree(ends)},
                    {"remainder", loader.remainder()},
                    {"size", loader.size()}});
}

std::string str(const Tree& t) {
  if (t.is_list()) {
    std::string s = "[";
    for (size_t i = 0; i < t.size(); ++i) s.append(i ? " " : "").append(str(t.at(i)));
    return s + "]";
  }
  return std::to_string(t.as_int());
}

// The pass's order on every rank: what rank 0's sampler draws.
std::vector<int64_t> order_of(const Case& c, int pass) {
  if (c.order == Order::kSeedable) return Generator(kDataSeed + pass).randperm(c.n);
  std::vector<int64_t> order;
  if (c.order == Order::kRandomSynced) {
    Generator g(100);  // rank 0's seed; every pass draws on from its synced state
    for (int p = 0; p <= pass; ++p) order = g.randperm(c.n);
    return order;
  }
  for (int64_t i = 0; i < c.n; ++i) order.push_back(i);
  return order;
}

// Mismatch lines for one pass of one case (rank 0).
std::vector<std::string> check(const Case& c, int pass, const std::vector<Tree>& got,
                               const std::vector<int64_t>& reads, bool dispatch) {
  std::vector<std::string> bad;
  const std::vector<int64_t> order = order_of(c, pass);
  for (size_t r = 0; r < got.size(); ++r) {
    Tree::List want;
    for (const auto& b : c.expected[r]) {
      std::vector<int64_t> idx;
      for (int64_t pos : b) idx.push_back(order[static_cast<size_t>(pos)]);
      want.push_back(int_list(idx));
    }
    const std::string where =
        c.name + " pass " + std::to_string(pass) + " rank " + std::to_string(r) + ": ";
    const Tree& g = got[r];
    if (str(g.at("batches")) != str(Tree(want))) {
      bad.push_back(where + "batches " + str(g.at("batches")) + ", expected " + str(Tree(want)));
    }
    const Tree& ends = g.at("ends");
    for (size_t i = 0; i < ends.size(); ++i) {
      if (ends.at(i).as_bool() != (i + 1 == ends.size())) {
        bad.push_back(where + "end_of_dataloader wrong at batch " + std::to_string(i));
      }
    }
    if (g.at("remainder").as_int() != c.remainder) {
      bad.push_back(where + "remainder " + std::to_string(g.at("remainder").as_int()) +
                    ", expected " + std::to_string(c.remainder));
    }
    // len() of a split, uneven shard is Accelerate's len(batch_sampler) on every rank.
    const bool split_uneven = c.config.split_batches && !c.config.even_batches;
    if (!split_uneven && g.at("size").as_int() != static_cast<int64_t>(want.size())) {
      bad.push_back(where + "size() " + std::to_string(g.at("size").as_int()) + ", expected " +
                    std::to_string(want.size()));
    }
    if (dispatch && r > 0 && reads[r] != 0) {
      bad.push_back(where + "read the dataset " + std::to_string(reads[r]) +
                    " times while dispatching");
    }
  }
  return bad;
}

int run_all(ProcessGroup& pg) {
  const int np = pg.size();
  const std::vector<Case> cases = cases_for(np);
  if (cases.empty()) {
    std::fprintf(stderr, "data_worker: no cases for %d processes (2 or 3)\n", np);
    return 2;
  }
  int failures = 0;
  for (const Case& c : cases) {
    std::shared_ptr<CountingDataset> map_data;
    std::shared_ptr<CountingStream> stream_data;
    DataLoaderOptions o{.batch_size = c.batch_size, .drop_last = c.drop_last};
    if (c.order != Order::kSequential) o.shuffle = true;
    if (c.order == Order::kRandomSynced) o.seed = 100 + pg.rank();  // differs until synced
    std::optional<DataLoader> base;
    if (c.iterable) {
      stream_data = std::make_shared<CountingStream>(c.n);
      base.emplace(stream_data, o);
    } else {
      map_data = std::make_shared<CountingDataset>(c.n);
      base.emplace(map_data, o);
    }
    DataLoader prepared = prepare_data_loader(*base, pg, c.config);
    for (int pass = 0; pass < c.passes; ++pass) {
      if (pass > 0) prepared.set_epoch(pass);
      Tree mine;
      if (c.skip > 0 && pass == c.passes - 1) {
        DataLoader skipped = skip_first_batches(prepared, c.skip);
        mine = run_pass(skipped);
      } else {
        mine = run_pass(prepared);
      }
      const int64_t reads = map_data ? map_data->reads.load() : stream_data->reads.load();
      std::vector<Tree> got = all_gather_object(pg, mine);
      std::vector<Tree> read_trees = all_gather_object(pg, Tree(reads));
      if (pg.rank() != 0) continue;
      std::vector<int64_t> all_reads;
      for (const Tree& t : read_trees) all_reads.push_back(t.as_int());
      const bool skip_pass = c.skip > 0 && pass != c.passes - 1;
      if (skip_pass) continue;  // the pass before a skip only moves the epoch on
      std::vector<std::string> bad = check(c, pass, got, all_reads, prepared.dispatches());
      for (const std::string& line : bad) std::printf("MISMATCH %s\n", line.c_str());
      std::printf("%s %s (pass %d, %d ranks)\n", bad.empty() ? "ok" : "FAILED", c.name.c_str(),
                  pass, np);
      failures += bad.empty() ? 0 : 1;
    }
  }
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace braid::nn

int main() {
  try {
    auto pg = braid::ProcessGroup::create({});
    const int rc = braid::nn::run_all(*pg);
    pg->barrier();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  }
}
