// Tree and Accelerate's nested-structure helpers.
#include "braid/tensor/tree.h"

#include <gtest/gtest.h>

#include "braid/core/error.h"
#include "braid/tensor/ops.h"

namespace braid {
namespace {

using V = std::vector<double>;

Tensor vec(V v, DType dt = DType::kF32) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(v, {n}, dt);
}

Tree batch() {
  return Tree::map({{"input_ids", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, DType::kI64)},
                    {"labels", vec({0, 1, 0}, DType::kI64)},
                    {"extra", Tree::list({vec({1.5, 2.5}, DType::kF16), "text", 7})}});
}

TEST(Tree, AccessAndErrors) {
  Tree b = batch();
  EXPECT_TRUE(b.is_map());
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b.map()[0].first, "input_ids");  // insertion order kept
  EXPECT_EQ(b.at("extra").at(1).as_string(), "text");
  EXPECT_EQ(b.at("extra").at(2).as_int(), 7);
  EXPECT_DOUBLE_EQ(b.at("extra").at(2).as_double(), 7.0);
  b.at("extra").at(0) = Tree(int64_t{11});  // index 0 of a mutable tree: an element to assign
  EXPECT_EQ(b.at("extra").at(0).as_int(), 11);
  EXPECT_THROW(b.at("extra").at(3) = Tree(), Error);
  try {
    b.at("missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("input_ids, labels, extra"), std::string::npos);
  }
  EXPECT_THROW(b.at("labels").as_string(), Error);
  EXPECT_THROW(b.at("extra").at(5), Error);
  b.set("labels", 3);
  EXPECT_EQ(b.map()[1].first, "labels");
  EXPECT_EQ(b.at("labels").as_int(), 3);
}

TEST(Tree, RecursivelyApplyKeepsStructureAndOtherLeaves) {
  Tree out = map_tensors(batch(), [](const Tensor& t) { return t.to(DType::kF64); });
  EXPECT_EQ(out.at("input_ids").tensor().dtype(), DType::kF64);
  EXPECT_EQ(out.at("extra").at(0).tensor().dtype(), DType::kF64);
  EXPECT_EQ(out.at("extra").at(1).as_string(), "text");
  EXPECT_THROW(recursively_apply([](const Tree& t) { return t; }, batch(), {}, true), Error);
  // a custom test: apply to ints only
  Tree ints = recursively_apply([](const Tree& t) { return Tree(t.as_int() * 2); }, batch(),
                                [](const Tree& t) { return t.kind() == Tree::Kind::kInt; });
  EXPECT_EQ(ints.at("extra").at(2).as_int(), 14);
}

TEST(Tree, SendToDeviceHonoursSkipKeysAtAnyDepth) {
  Tree nested =
      Tree::map({{"a", vec({1})}, {"inner", Tree::map({{"skip", vec({2})}, {"b", vec({3})}})}});
  Tree moved = send_to_device(nested, kMeta, {"skip"});
  EXPECT_TRUE(moved.at("a").tensor().device().is_meta());
  EXPECT_TRUE(moved.at("inner").at("b").tensor().device().is_meta());
  EXPECT_TRUE(moved.at("inner").at("skip").tensor().device().is_cpu());
}

TEST(Tree, ConvertToFp32OnlyTouchesHalfTypes) {
  Tree t = Tree::list({vec({1}, DType::kF16), vec({1}, DType::kBF16), vec({1}, DType::kI32),
                       vec({1}, DType::kF64)});
  Tree c = convert_to_fp32(t);
  EXPECT_EQ(c.at(0).tensor().dtype(), DType::kF32);
  EXPECT_EQ(c.at(1).tensor().dtype(), DType::kF32);
  EXPECT_EQ(c.at(2).tensor().dtype(), DType::kI32);
  EXPECT_EQ(c.at(3).tensor().dtype(), DType::kF64);
}

TEST(Tree, Listify) {
  Tree l = listify(batch());
  EXPECT_EQ(l.at("input_ids").at(2).at(1).as_int(), 6);
  EXPECT_DOUBLE_EQ(l.at("extra").at(0).at(1).as_double(), 2.5);
  EXPECT_EQ(listify(Tree(Tensor::full({}, 4, DType::kI32))).as_int(), 4);
}

Tree tensor_batch() {
  return Tree::map({{"input_ids", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, DType::kI64)},
                    {"labels", vec({0, 1, 0}, DType::kI64)},
                    {"extra", Tree::list({vec({1.5, 2.5, 3.5}, DType::kF16)})}});
}

TEST(Tree, ConcatenateSliceAndBatchSize) {
  EXPECT_THROW(concatenate({batch(), batch()}), Error);  // "text" is not a tensor
  Tree joined = concatenate({tensor_batch(), tensor_batch()});
  EXPECT_EQ(joined.at("input_ids").tensor().shape(), (Shape{6, 2}));
  EXPECT_EQ(joined.at("labels").tensor().to_vector(), (V{0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(find_batch_size(joined), 6);
  // "text" is not a tensor: Accelerate raises TypeError there
  EXPECT_THROW(concatenate({Tree::list({"x"}), Tree::list({"y"})}), Error);
  const Tree single = batch();
  Tree one = concatenate({single});  // one batch is returned as is
  EXPECT_TRUE(one.at("labels").tensor().shares_storage(single.at("labels").tensor()));
  Tree sliced = slice_tensors(joined, 1, 3);
  EXPECT_EQ(sliced.at("input_ids").tensor().to_vector(), (V{3, 4, 5, 6}));
  EXPECT_EQ(sliced.at("extra").at(0).tensor().to_vector(), (V{2.5, 3.5}));
  EXPECT_EQ(slice_tensors(batch(), 0, 1).at("extra").at(1).as_string(), "text");
  EXPECT_EQ(find_batch_size(sliced), 2);
  EXPECT_THROW(find_batch_size(Tree(Tree::List{})), Error);
  EXPECT_THROW(find_batch_size(Tree::list({"a"})), Error);
}

}  // namespace
}  // namespace braid
