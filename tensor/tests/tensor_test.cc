// Tensor: factories, views sharing storage, copies across dtypes, from_blob ownership,
// printing, and the errors for bad shapes and indices.
#include "braid/tensor/tensor.h"

#include <gtest/gtest.h>

#include "braid/core/error.h"
#include "braid/tensor/shape_checks.h"

namespace braid {
namespace {

using V = std::vector<double>;

Tensor iota(Shape shape, DType dtype = DType::kF32) {
  const int64_t n = shape_numel(shape);
  V v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  return Tensor::from_vector(v, shape, dtype);
}

bool equal_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.to_vector() == b.to_vector();
}

template <typename Fn>
ErrorKind kind_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error thrown";
  return ErrorKind::kInternal;
}

TEST(Shape, NumelStridesBroadcast) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({2, 0, 4}), 0);
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(broadcast_shapes({3, 1}, {4}), (Shape{3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}), (Shape{2, 2}));
  EXPECT_EQ(kind_of([] { broadcast_shapes({3}, {4}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([] { shape_numel({2, -1}); }), ErrorKind::kInvalidArgument);
}

// Found by tests/fuzz/object_format_fuzz (docs/fuzzing.md): a shape with no elements but huge
// other dimensions overflowed int64 (undefined behaviour) computing its strides.
TEST(Shape, StridesThatOverflowAreAnError) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_TRUE(strides_fit({0, big, int64_t{1} << 20}));
  EXPECT_FALSE(strides_fit({0, big, big, big}));
  EXPECT_EQ(shape_numel({0, big, big, big}), 0);
  EXPECT_EQ(kind_of([&] { contiguous_strides({0, big, big, big}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { Tensor::empty({0, big, big, big}); }), ErrorKind::kInvalidArgument);
}

TEST(Tensor, FactoriesAndMetadata) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.nbytes(), 24u);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.to_vector(), V(6, 0.0));
  EXPECT_EQ(Tensor::ones({3}, DType::kBF16).to_vector(), V(3, 1.0));
  EXPECT_EQ(Tensor::full({2}, 2.5, DType::kF16).to_vector(), (V{2.5, 2.5}));
  EXPECT_EQ(Tensor::arange(5).to_vector(), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::arange(1, 2, 0.25, DType::kF32).to_vector(), (V{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(Tensor::full({}, 7, DType::kI32).item(), 7);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Tensor::empty({100}).data_ptr()) % kCpuAlignment, 0u);
  EXPECT_EQ(kind_of([] { Tensor::zeros({2}).item(); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([] { Tensor().dim(); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([] { Tensor::zeros({2}).data<double>(); }), ErrorKind::kInvalidArgument);
}

TEST(Tensor, SliceNarrowSelectShareStorage) {
  Tensor t = iota({4, 5});
  Tensor s = t.slice(1, 1, 5, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{4, 2}));
  EXPECT_TRUE(s.shares_storage(t));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.to_vector(), (V{1, 3, 6, 8, 11, 13, 16, 18}));
  EXPECT_EQ(t.slice(0, -2, 100).to_vector(), (V{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_EQ(t.narrow(0, 1, 1).to_vector(), (V{5, 6, 7, 8, 9}));
  EXPECT_EQ(t.select(1, -1).to_vector(), (V{4, 9, 14, 19}));
  s.fill_(-1);  // writes through the view
  EXPECT_EQ(t.select(0, 0).to_vector(), (V{0, -1, 2, -1, 4}));
  EXPECT_EQ(kind_of([&] { t.select(0, 4); }), ErrorKind::kOutOfRange);
  EXPECT_EQ(kind_of([&] { t.narrow(1, 3, 3); }), ErrorKind::kOutOfRange);
  EXPECT_EQ(kind_of([&] { t.slice(2, 0, 1); }), ErrorKind::kOutOfRange);
}

TEST(Tensor, ViewReshapePermuteTransposeExpand) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.view({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_TRUE(t.view({24}).shares_storage(t));
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_EQ(p.select(0, 1).to_vector(), (V{1, 5, 9, 13, 17, 21}));
  EXPECT_EQ(kind_of([&] { p.view({24}); }), ErrorKind::kInvalidArgument);
  Tensor r = p.reshape({24});  // needs a copy
  EXPECT_FALSE(r.shares_storage(t));
  EXPECT_EQ(r.to_vector()[1], 4);
  Tensor m = iota({2, 3});
  EXPECT_EQ(m.t().contiguous().to_vector(), (V{0, 3, 1, 4, 2, 5}));
  Tensor e = iota({3, 1}).expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(e.select(0, 1).select(0, 2).to_vector(), (V{2, 2, 2, 2}));
  EXPECT_EQ(kind_of([&] { iota({3, 2}).expand({3, 4}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(m.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(m.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(m.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(kind_of([&] { t.view({5, 5}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { t.permute({0, 0, 1}); }), ErrorKind::kInvalidArgument);
}

TEST(Tensor, CopyConvertsAndBroadcasts) {
  Tensor dst = Tensor::zeros({2, 3}, DType::kBF16);
  dst.copy_(Tensor::from_vector({1.0, 2.0, 3.0}, {3}, DType::kF64));
  EXPECT_EQ(dst.to_vector(), (V{1, 2, 3, 1, 2, 3}));
  // bf16 keeps 8 significant bits: 257 rounds to 256 (ties to even).
  EXPECT_EQ(Tensor::full({1}, 257.0, DType::kF32).to(DType::kBF16).item(), 256.0);
  // a strided destination
  Tensor big = Tensor::zeros({3, 4}, DType::kI32);
  big.slice(1, 0, 4, 2).copy_(iota({3, 2}, DType::kF32));
  EXPECT_EQ(big.to_vector(), (V{0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0}));
  // overlapping source and destination in one storage
  Tensor o = iota({5});
  o.slice(0, 1, 5).copy_(o.slice(0, 0, 4));
  EXPECT_EQ(o.to_vector(), (V{0, 0, 1, 2, 3}));
  EXPECT_EQ(kind_of([&] { Tensor::zeros({2}).copy_(iota({3})); }), ErrorKind::kInvalidArgument);
}

TEST(Tensor, CloneAndToAreIndependent) {
  Tensor a = iota({3});
  Tensor b = a.clone();
  b.fill_(9);
  EXPECT_EQ(a.to_vector(), (V{0, 1, 2}));
  EXPECT_TRUE(a.to(DType::kF32).shares_storage(a));  // no-op conversion returns the same tensor
  Tensor h = a.to(DType::kF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_FALSE(h.shares_storage(a));
}

TEST(Tensor, FromBlobRunsDeleterOnceWhenLastViewDies) {
  int deleted = 0;
  std::vector<float> buffer = {1, 2, 3, 4, 5, 6};
  {
    Tensor t = Tensor::from_blob(buffer.data(), {2, 3}, DType::kF32, kCPU, [&](void* p) {
      EXPECT_EQ(p, buffer.data());
      ++deleted;
    });
    Tensor v = t.select(0, 1);
    t = Tensor();
    EXPECT_EQ(deleted, 0);
    EXPECT_EQ(v.to_vector(), (V{4, 5, 6}));
    v.fill_(0);
  }
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(buffer[3], 0.0f);  // the external memory was written, not copied
  Tensor strided = Tensor::from_blob(buffer.data(), {3}, DType::kF32, kCPU, {}, Strides{2});
  EXPECT_EQ(strided.to_vector(), (V{1, 3, 0}));
  EXPECT_EQ(kind_of([] { Tensor::from_blob(nullptr, {2}, DType::kF32); }),
            ErrorKind::kInvalidArgument);
}

TEST(Tensor, MetaHasShapeButNoData) {
  Tensor m = Tensor::empty({1000, 1000}, DType::kF32, kMeta);
  EXPECT_EQ(m.numel(), 1000000);
  EXPECT_EQ(m.data_ptr(), nullptr);
  EXPECT_EQ(m.view({-1}).shape(), (Shape{1000000}));
  EXPECT_EQ(kind_of([&] { m.to_vector(); }), ErrorKind::kNotSupported);
  EXPECT_EQ(m.to_string(), "tensor(..., shape=[1000, 1000], dtype=f32, device=meta)");
}

TEST(Tensor, PrintsLikeTorchWithTruncation) {
  EXPECT_EQ(iota({2, 2}, DType::kI64).to_string(), "tensor([[0, 1], [2, 3]], dtype=i64)");
  EXPECT_EQ(iota({10}).to_string(2), "tensor([0, 1, ..., 8, 9], dtype=f32)");
  EXPECT_EQ(Tensor::full({}, 0.5, DType::kF16).to_string(), "tensor(0.5, dtype=f16)");
  EXPECT_EQ(Tensor::ones({2}, DType::kBool).to_string(), "tensor([True, True], dtype=bool)");
}

}  // namespace
}  // namespace braid

#include "braid/core/rng.h"

namespace braid {
namespace {

TEST(Tensor, RandomFactoriesFollowTheGenerator) {
  Generator g1(42), g2(42);
  Tensor a = Tensor::randn({64}, DType::kF32, &g1);
  Tensor b = Tensor::randn({64}, DType::kBF16, &g2);
  // bf16 holds the same draws, rounded once
  EXPECT_TRUE(equal_values(a.to(DType::kBF16), b));
  Tensor u = Tensor::rand({1000}, DType::kF32, &g1);
  for (double v : u.to_vector()) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
  Generator g3(43);
  EXPECT_NE(Tensor::randn({8}, DType::kF32, &g3).to_vector(),
            Tensor::randn({8}, DType::kF32, &g1).to_vector());
  EXPECT_THROW(Tensor::rand({2}, DType::kI32, &g1), Error);
}

}  // namespace
}  // namespace braid
