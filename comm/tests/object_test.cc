// Tree serialization (round trips, the byte layout, every kind of corrupt buffer) and the
// object collectives on the shm backend (threads and forked processes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "braid/comm/object.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"

namespace braid {
namespace {

using testing::run_threads;

// Structural equality, tensors compared by dtype, shape and values.
void expect_same_tree(const Tree& a, const Tree& b, const std::string& path = "root") {
  ASSERT_EQ(a.kind(), b.kind()) << path;
  switch (a.kind()) {
    case Tree::Kind::kNone:
      return;
    case Tree::Kind::kBool:
      EXPECT_EQ(a.as_bool(), b.as_bool()) << path;
      return;
    case Tree::Kind::kInt:
      EXPECT_EQ(a.as_int(), b.as_int()) << path;
      return;
    case Tree::Kind::kDouble: {
      const double x = a.as_double(), y = b.as_double();
      EXPECT_TRUE(std::memcmp(&x, &y, sizeof x) == 0) << path << ": " << x << " vs " << y;
      return;
    }
    case Tree::Kind::kString:
      EXPECT_EQ(a.as_string(), b.as_string()) << path;
      return;
    case Tree::Kind::kTensor:
      EXPECT_EQ(a.tensor().dtype(), b.tensor().dtype()) << path;
      EXPECT_EQ(a.tensor().shape(), b.tensor().shape()) << path;
      EXPECT_TRUE(equal(a.tensor(), b.tensor(), /*equal_nan=*/true)) << path;
      return;
    case Tree::Kind::kList:
      ASSERT_EQ(a.list().size(), b.list().size()) << path;
      for (size_t i = 0; i < a.list().size(); ++i) {
        expect_same_tree(a.list()[i], b.list()[i], path + "[" + std::to_string(i) + "]");
      }
      return;
    case Tree::Kind::kMap:
      ASSERT_EQ(a.map().size(), b.map().size()) << path;
      for (size_t i = 0; i < a.map().size(); ++i) {
        EXPECT_EQ(a.map()[i].first, b.map()[i].first) << path;
        expect_same_tree(a.map()[i].second, b.map()[i].second, path + "." + a.map()[i].first);
      }
      return;
  }
}

Tree sample_tree() {
  Tensor bf = Tensor::from_vector({1.5, -2.25, 1e30}, {3}, DType::kBF16);
  Tensor flags = Tensor::from_vector({1, 0, 1, 1}, {2, 2}, DType::kBool);
  Tensor scalar = Tensor::full({}, 42, DType::kI64);
  Tensor empty = Tensor::zeros({0, 5}, DType::kF16);
  return Tree::map({
      {"none", Tree()},
      {"flag", true},
      {"step", int64_t{-9007199254740993}},
      {"lr", 0.1},
      {"nan", std::nan("")},
      {"name", std::string("r\0sum\xff", 6)},
      {"tensors", Tree::list({bf, flags, scalar, empty})},
      {"nested", Tree::list({Tree::list({}), Tree::map({}), Tree::map({{"", 1}})})},
  });
}

std::string corrupt_message(const std::vector<uint8_t>& bytes) {
  try {
    deserialize_tree(bytes);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "a corrupt buffer of " << bytes.size() << " bytes was accepted";
  return "";
}

void set_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = uint8_t(v >> (8 * i));
}

// ------------------------------------------------------------------ format

TEST(TreeFormat, RoundTripsEveryKind) {
  const Tree tree = sample_tree();
  expect_same_tree(deserialize_tree(serialize_tree(tree)), tree);
  for (const Tree& leaf : {Tree(), Tree(false), Tree(int64_t{0}), Tree(-0.0), Tree("")}) {
    expect_same_tree(deserialize_tree(serialize_tree(leaf)), leaf);
  }
}

TEST(TreeFormat, NonContiguousTensorsTravelAsTheirValues) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32).t();
  Tree back = deserialize_tree(serialize_tree(Tree(t)));
  EXPECT_EQ(back.tensor().shape(), (Shape{3, 2}));
  EXPECT_TRUE(back.tensor().is_contiguous());
  EXPECT_EQ(back.tensor().to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(TreeFormat, LayoutIsTheDocumentedOne) {
  // An int 5 in a one-element list: header, list tag, count, int tag, value.
  const auto b = serialize_tree(Tree::list({5}));
  const std::vector<uint8_t> expected = {
      'B', 'R', 'T', 'R', 1, 0, 0, 0,      // magic, version, reserved
      18,  0,   0,   0,   0, 0, 0, 0,      // payload bytes: 1 + 8 + 1 + 8
      6,   1,   0,   0,   0, 0, 0, 0, 0,   // list of 1
      2,   5,   0,   0,   0, 0, 0, 0, 0};  // int 5
  EXPECT_EQ(b, expected);
  // A tensor: tag, dtype name, rank, dims, byte count, bytes.
  const auto t = serialize_tree(Tree(Tensor::from_vector({1, 2}, {2}, DType::kI16)));
  const std::vector<uint8_t> tensor_payload = {5, 3, 'i', '1', '6', 1, 0, 0, 0, 2, 0, 0, 0, 0, 0,
                                               0, 0, 4,   0,   0,   0, 0, 0, 0, 0, 1, 0, 2, 0};
  EXPECT_EQ(std::vector<uint8_t>(t.begin() + 16, t.end()), tensor_payload);
}

TEST(TreeFormat, MetaTensorsCannotBeSerialized) {
  try {
    serialize_tree(Tree(Tensor::empty({2}, DType::kF32, kMeta)));
    ADD_FAILURE() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("meta"), std::string::npos) << e.message();
  }
}

TEST(TreeFormat, EveryTruncationIsCorrupt) {
  const auto bytes = serialize_tree(sample_tree());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    corrupt_message(cut);
    if (::testing::Test::HasFailure()) FAIL() << "at length " << n;
  }
}

// Found by tests/fuzz/object_format_fuzz: an empty tensor [0, 2^40, 2^40, 2^40] passed every
// check, then overflowed int64 computing its strides (undefined behaviour).
TEST(TreeFormat, EmptyTensorWithOverflowingStridesIsCorrupt) {
  auto bytes = serialize_tree(Tree(Tensor::empty({0, 1, 1, 1})));
  // 16-byte header, tag, name length, "f32", u32 rank: the dimensions start at byte 25.
  for (size_t k = 1; k < 4; ++k) set_u64(bytes, 25 + 8 * k, uint64_t{1} << 40);
  const auto msg = corrupt_message(bytes);
  EXPECT_NE(msg.find("2^63"), std::string::npos) << msg;
}

TEST(TreeFormat, TruncatedPayloadWithPatchedLengthNamesTheOffset) {
  auto bytes = serialize_tree(Tree("hello"));
  bytes.pop_back();
  set_u64(bytes, 8, bytes.size() - 16);
  const auto msg = corrupt_message(bytes);
  EXPECT_NE(msg.find("string length 5"), std::string::npos) << msg;
}

TEST(TreeFormat, CorruptHeadersAndNodes) {
  const auto good = serialize_tree(Tree::list({Tree(Tensor::zeros({2}, DType::kBool)), true}));
  auto b = good;
  b[0] = 'X';
  EXPECT_NE(corrupt_message(b).find("magic"), std::string::npos);
  b = good;
  b[4] = 2;
  EXPECT_NE(corrupt_message(b).find("version 2"), std::string::npos);
  b = good;
  b[6] = 1;
  EXPECT_NE(corrupt_message(b).find("reserved"), std::string::npos);
  b = good;
  b.push_back(0);
  EXPECT_NE(corrupt_message(b).find("header declares"), std::string::npos);
  b = good;
  b.push_back(0);
  set_u64(b, 8, b.size() - 16);
  EXPECT_NE(corrupt_message(b).find("1 trailing bytes"), std::string::npos);
  b = good;
  b[16] = 9;  // the list tag
  EXPECT_NE(corrupt_message(b).find("unknown node tag 9 at byte 16"), std::string::npos);
  b = good;
  set_u64(b, 17, uint64_t{1} << 60);  // the list count
  EXPECT_NE(corrupt_message(b).find("list length"), std::string::npos);
  b = good;
  b.back() = 2;  // the trailing bool
  EXPECT_NE(corrupt_message(b).find("expected 0 or 1"), std::string::npos);
  b = good;
  b[b.size() - 4] = 7;  // a byte of the bool tensor
  EXPECT_NE(corrupt_message(b).find("bool tensor byte"), std::string::npos);
}

TEST(TreeFormat, CorruptTensorHeaders) {
  const auto good = serialize_tree(Tree(Tensor::zeros({3}, DType::kF32)));
  // Payload: tag(16) name_len(17) "f32"(18..20) ndim(21..24) dim(25..32) nbytes(33..40) data
  auto b = good;
  b[18] = 'q';
  EXPECT_NE(corrupt_message(b).find("unknown dtype 'q32'"), std::string::npos);
  b = good;
  set_u64(b, 33, 8);
  EXPECT_NE(corrupt_message(b).find("declares 8 bytes, expected 12"), std::string::npos);
  b = good;
  set_u64(b, 25, uint64_t{1} << 50);
  EXPECT_NE(corrupt_message(b).find("implausibly large"), std::string::npos);
  b = good;
  b[21] = 200;  // rank 200: more dimensions than bytes remain
  EXPECT_NE(corrupt_message(b).find("tensor rank 200"), std::string::npos);
}

TEST(TreeFormat, DeepNestingIsCorruptNotAStackOverflow) {
  std::vector<uint8_t> b = {'B', 'R', 'T', 'R', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 100000; ++i) {
    b.push_back(6);
    for (int k = 0; k < 8; ++k) b.push_back(k == 0 ? 1 : 0);
  }
  b.push_back(0);
  set_u64(b, 8, b.size() - 16);
  EXPECT_NE(corrupt_message(b).find("nesting deeper than 512"), std::string::npos);
}

// ------------------------------------------------------------------ collectives

class ObjectCollectives : public ::testing::TestWithParam<int> {};

// Rank r's object: sizes differ by rank so the padding path is exercised.
Tree object_of(int rank) {
  Tree::List items;
  for (int i = 0; i <= rank; ++i)
    items.push_back(Tree(std::string(size_t(rank * 37 + i), 'a' + i)));
  return Tree::map({{"rank", rank},
                    {"t", Tensor::full({rank + 1}, rank * 0.5, DType::kF64)},
                    {"items", Tree(items)}});
}

TEST_P(ObjectCollectives, BroadcastGatherAllGather) {
  auto result = run_threads(GetParam(), [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    for (int root = 0; root < size; ++root) {
      std::vector<Tree> list = {Tree("stale"), Tree(rank)};
      if (rank == root) list = {object_of(root), Tree(), Tree(3.5)};
      broadcast_object_list(*pg, list, root);
      ASSERT_EQ(list.size(), 3u);
      expect_same_tree(list[0], object_of(root));
      expect_same_tree(list[2], Tree(3.5));

      auto gathered = gather_object(*pg, object_of(rank), root);
      ASSERT_EQ(gathered.size(), rank == root ? size_t(size) : 0u);
      for (size_t r = 0; r < gathered.size(); ++r) expect_same_tree(gathered[r], object_of(r));
    }
    auto all = all_gather_object(*pg, object_of(rank));
    ASSERT_EQ(all.size(), size_t(size));
    for (int r = 0; r < size; ++r) expect_same_tree(all[r], object_of(r));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

INSTANTIATE_TEST_SUITE_P(Ranks, ObjectCollectives, ::testing::Values(1, 2, 3, 4));

TEST(ObjectCollectivesForked, AllGatherAcrossProcesses) {
  auto result = testing::run_processes(3, [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    auto all = all_gather_object(*pg, object_of(rank));
    if (all.size() != size_t(size)) BRAID_FAIL(kInternal, "got ", all.size(), " objects");
    for (int r = 0; r < size; ++r) expect_same_tree(all[r], object_of(r));
    std::vector<Tree> list;
    if (rank == 1) list = {Tree("from rank 1")};
    broadcast_object_list(*pg, list, 1);
    if (list.size() != 1 || list[0].as_string() != "from rank 1") {
      BRAID_FAIL(kInternal, "broadcast_object_list delivered the wrong list");
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid
