// Tree data ops (Accelerate's gather, gather_object, broadcast, reduce, pad_across_processes,
// wait_for_everyone, concatenate) on the shm backend, 1 to 4 ranks as threads and a forked run.
// Expected values come from formulas over the ranks' inputs, never from the code under test.
#include <gtest/gtest.h>

#include "braid/comm/tree_ops.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"

namespace braid {
namespace {

using testing::run_threads;

// rank r's rows: `rows` rows of `cols` values r * 100 + row * 10 + col.
Tensor block(int rank, int64_t rows, int64_t cols, DType dtype = DType::kF32) {
  std::vector<double> v;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) v.push_back(rank * 100.0 + i * 10.0 + j);
  }
  return Tensor::from_vector(v, {rows, cols}, dtype);
}

void expect_error_kind(const std::function<void()>& fn, ErrorKind kind, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected " << to_string(kind);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
  }
}

class TreeOps : public ::testing::TestWithParam<int> {};

TEST_P(TreeOps, GatherConcatenatesRanksOnDimZero) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    Tree data = Tree::map({{"x", block(rank, 2, 3)},
                           {"loss", Tensor::full({}, rank + 0.5, DType::kF64)},
                           {"ids", Tree::list({block(rank, 1, 1, DType::kI64)})}});
    Tree out = gather(*pg, data);
    std::vector<Tensor> xs, ids;
    std::vector<double> losses;
    for (int r = 0; r < size; ++r) {
      xs.push_back(block(r, 2, 3));
      ids.push_back(block(r, 1, 1, DType::kI64));
      losses.push_back(r + 0.5);
    }
    EXPECT_TRUE(equal(out.at("x").tensor(), cat(xs, 0)));
    EXPECT_EQ(out.at("loss").tensor().shape(), (Shape{size}));
    EXPECT_EQ(out.at("loss").tensor().to_vector(), losses);
    EXPECT_TRUE(equal(out.at("ids").at(0).tensor(), cat(ids, 0)));
    expect_error_kind([&] { gather(*pg, Tree::list({Tree("text")})); }, ErrorKind::kInvalidArgument,
                      "string");
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(TreeOps, GatherObjectFlattensLists) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    Tree::List mine;
    for (int i = 0; i < rank + 1; ++i) mine.push_back(Tree(rank * 10 + i));
    Tree all = gather_object(*pg, Tree(mine));
    std::vector<int64_t> got, expected;
    for (const Tree& t : all.list()) got.push_back(t.as_int());
    for (int r = 0; r < size; ++r) {
      for (int i = 0; i < r + 1; ++i) expected.push_back(r * 10 + i);
    }
    EXPECT_EQ(got, expected);
    Tree names = gather_object(*pg, Tree("rank" + std::to_string(rank)));
    ASSERT_EQ(names.size(), size_t(size));
    EXPECT_EQ(names.at(size - 1).as_string(), "rank" + std::to_string(size - 1));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(TreeOps, BroadcastOverwritesInPlace) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    const int from = size - 1;
    Tensor a = block(rank, 2, 2);
    Tensor wide = block(rank, 3, 2);
    Tensor strided = wide.t();  // not contiguous: staged and copied back
    Tree data = Tree::list({a, Tree::map({{"s", strided}})});
    Tree out = broadcast(*pg, data, from);
    EXPECT_TRUE(equal(a, block(from, 2, 2)));  // the caller's tensor itself
    EXPECT_TRUE(equal(wide, block(from, 3, 2)));
    EXPECT_TRUE(out.at(0).tensor().shares_storage(a));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(TreeOps, ReduceMeanSumMaxNoneAndScale) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    Tensor x = block(rank, 1, 3, DType::kF64);
    double rank_sum = 0;
    for (int r = 0; r < size; ++r) rank_sum += r * 100.0;
    std::vector<double> sum, mean, mx;
    for (int j = 0; j < 3; ++j) {
      sum.push_back(rank_sum + size * j);
      mean.push_back((rank_sum + size * j) / size);
      mx.push_back((size - 1) * 100.0 + j);
    }
    EXPECT_EQ(reduce(*pg, Tree(x), "sum").tensor().to_vector(), sum);
    EXPECT_EQ(reduce(*pg, Tree(x), "mean").tensor().to_vector(), mean);
    EXPECT_EQ(reduce(*pg, Tree(x), "max").tensor().to_vector(), mx);
    auto scaled = reduce(*pg, Tree::map({{"x", x}}), "sum", 0.5).at("x").tensor().to_vector();
    for (int j = 0; j < 3; ++j) EXPECT_EQ(scaled[j], sum[j] * 0.5);
    Tree none = reduce(*pg, Tree(x), "none");
    EXPECT_TRUE(equal(none.tensor(), x));
    EXPECT_FALSE(none.tensor().shares_storage(x));
    EXPECT_EQ(x.to_vector(), block(rank, 1, 3, DType::kF64).to_vector()) << "input untouched";
    expect_error_kind([&] { reduce(*pg, Tree(x), "median"); }, ErrorKind::kInvalidArgument,
                      "'median'");
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(TreeOps, PadAcrossProcessesPadsToTheLongest) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    Tensor x = block(rank, rank + 1, 2);  // rank r has r + 1 rows
    Tree out = pad_across_processes(*pg, Tree::list({x}), 0, -1.0);
    Tensor p = out.at(0).tensor();
    ASSERT_EQ(p.shape(), (Shape{size, 2}));
    EXPECT_TRUE(equal(p.narrow(0, 0, rank + 1), x));
    if (rank + 1 < size) {
      EXPECT_EQ(p.narrow(0, rank + 1, size - rank - 1).to_vector(),
                std::vector<double>(2 * (size - rank - 1), -1.0));
    }
    Tensor first = pad_across_processes(*pg, Tree(x), 0, 7.0, /*pad_first=*/true).tensor();
    EXPECT_TRUE(equal(first.narrow(0, size - rank - 1, rank + 1), x));
    Tensor cols = pad_across_processes(*pg, Tree(block(rank, 2, rank + 1)), -1).tensor();
    EXPECT_EQ(cols.shape(), (Shape{2, size}));
    Tensor flat = Tensor::zeros({3});
    EXPECT_TRUE(pad_across_processes(*pg, Tree(flat), 1).tensor().shares_storage(flat))
        << "dim beyond the tensor's rank: returned as it is";
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(TreeOps, ConcatenateAcceptsUnevenSizes) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    std::vector<Tensor> rows, cols;
    for (int r = 0; r < size; ++r) {
      rows.push_back(block(r, r + 1, 2));
      cols.push_back(block(r, 2, size - r));
    }
    EXPECT_TRUE(equal(concatenate(*pg, Tree(block(rank, rank + 1, 2)), 0).tensor(), cat(rows, 0)));
    EXPECT_TRUE(
        equal(concatenate(*pg, Tree(block(rank, 2, size - rank)), 1).tensor(), cat(cols, 1)));
    if (size > 1) {
      expect_error_kind([&] { concatenate(*pg, Tree(block(rank, 2, rank + 1)), 0); },
                        ErrorKind::kInvalidArgument, "every dimension but 0");
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(TreeOps, WaitForEveryoneAndDimensionMismatch) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    wait_for_everyone(*pg);
    if (size == 1) return;
    Tensor t = rank == 0 ? Tensor::zeros({2}) : Tensor::zeros({2, 1});
    expect_error_kind([&] { pad_across_processes(*pg, Tree(t)); }, ErrorKind::kInvalidArgument,
                      "rank 1: 2");
    wait_for_everyone(*pg);  // every rank failed the same way and the group is still usable
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

INSTANTIATE_TEST_SUITE_P(Ranks, TreeOps, ::testing::Values(1, 2, 3, 4));

TEST(TreeOpsForked, GatherReducePadAcrossProcesses) {
  auto result = testing::run_processes(3, [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    Tree padded = pad_across_processes(*pg, Tree(block(rank, rank + 1, 2)));
    Tree all = gather(*pg, padded);
    if (all.tensor().shape() != Shape{size * size, 2}) BRAID_FAIL(kInternal, "bad gather shape");
    Tree total = reduce(*pg, Tree(Tensor::full({1}, rank, DType::kF64)), "sum");
    if (total.tensor().item() != 0 + 1 + 2)
      BRAID_FAIL(kInternal, "bad sum ", total.tensor().item());
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid
