// Linear and Embedding: backward against finite differences in f64 (both weight layouts,
// with and without bias, 2-d and 3-d inputs), f32 against f64, the bf16 autocast path,
// initialization bounds, and the errors on bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/amp/autocast.h"
#include "braid/core/error.h"
#include "braid/nn/layers.h"
#include "braid/tensor/ops.h"
#include "finite_diff.h"

namespace braid::nn {
namespace {

using testing::check_layer_gradients;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector(), vb = b.to_vector();
  EXPECT_EQ(va.size(), vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    for (Bias bias : {Bias::kYes, Bias::kNo}) {
      Generator gen(7);
      Linear lin(5, 3, bias, layout, DType::kF64, &gen);
      SCOPED_TRACE(::testing::Message() << "layout " << int(layout) << " bias " << int(bias));
      check_layer_gradients(lin, Tensor::randn({4, 5}, DType::kF64, &gen));
      check_layer_gradients(lin, Tensor::randn({2, 3, 5}, DType::kF64, &gen));
    }
  }
}

TEST(Linear, MatchesHandComputedProduct) {
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    Linear lin(2, 3, Bias::kYes, layout, DType::kF64);
    // W as [out, in] = [[1, 2], [3, 4], [5, 6]], b = [0.5, -1, 2].
    Tensor w = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, DType::kF64);
    lin.weight().data().copy_(layout == WeightLayout::kOutIn ? w : w.t());
    lin.bias().data().copy_(Tensor::from_vector({0.5, -1, 2}, {3}, DType::kF64));
    const Tensor y = lin.forward(Tensor::from_vector({1, -1, 2, 0.5}, {2, 2}, DType::kF64));
    EXPECT_EQ(y.to_vector(), (std::vector<double>{-0.5, -2, 1, 3.5, 7, 15}));
    lin.clear_saved();
  }
}

TEST(Linear, InitializationWithinTorchBounds) {
  Generator gen(3);
  Linear lin(16, 8, Bias::kYes, WeightLayout::kOutIn, DType::kF32, &gen);
  EXPECT_EQ(lin.weight().data().shape(), (Shape{8, 16}));
  const double bound = 0.25;
  double lo = 1, hi = -1;
  for (double v : lin.weight().data().to_vector()) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.15);  // spread over the range, not all zero
  EXPECT_GT(hi, 0.15);
  Linear conv1d(16, 8, Bias::kNo, WeightLayout::kInOut);
  EXPECT_EQ(conv1d.weight().data().shape(), (Shape{16, 8}));
  EXPECT_FALSE(conv1d.has_bias());
  EXPECT_THROW(conv1d.bias(), Error);
}

TEST(Linear, F32CloseToF64) {
  Generator gen(11);
  Linear l64(32, 24, Bias::kYes, WeightLayout::kOutIn, DType::kF64, &gen);
  Linear l32(32, 24, Bias::kYes, WeightLayout::kOutIn, DType::kF32);
  l32.weight().data().copy_(l64.weight().data());
  l32.bias().data().copy_(l64.bias().data());
  const Tensor x = Tensor::randn({6, 32}, DType::kF64, &gen);
  const Tensor y64 = l64.forward(x), y32 = l32.forward(x.to(DType::kF32));
  EXPECT_EQ(y32.dtype(), DType::kF32);
  EXPECT_LT(max_abs_diff(y32, y64), 1e-5);
  const Tensor dy = Tensor::randn({6, 24}, DType::kF64, &gen);
  const Tensor dx64 = l64.backward(dy), dx32 = l32.backward(dy.to(DType::kF32));
  EXPECT_EQ(dx32.dtype(), DType::kF32);
  EXPECT_LT(max_abs_diff(dx32, dx64), 1e-5);
  EXPECT_LT(max_abs_diff(l32.weight().grad(), l64.weight().grad()), 1e-5);
  EXPECT_LT(max_abs_diff(l32.bias().grad(), l64.bias().grad()), 1e-5);
}

TEST(Linear, Bf16AutocastComputesInBf16AndKeepsParameterDtypes) {
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    Generator gen(5);
    Linear lin(64, 48, Bias::kYes, layout, DType::kF32, &gen);
    const Tensor x = Tensor::randn({2, 8, 64}, DType::kF32, &gen);
    const Tensor dy = Tensor::randn({2, 8, 48}, DType::kF32, &gen);
    const Tensor y32 = lin.forward(x);
    const Tensor dx32 = lin.backward(dy);
    const Tensor gw32 = lin.weight().grad().clone();
    lin.zero_grad();
    Tensor y16, dx16;
    {
      amp::AutocastScope scope(DType::kBF16);
      y16 = lin.forward(x);
      dx16 = lin.backward(dy);
    }
    EXPECT_EQ(y16.dtype(), DType::kBF16);
    EXPECT_EQ(dx16.dtype(), DType::kF32);  // the input's dtype
    EXPECT_EQ(lin.weight().grad().dtype(), DType::kF32);
    EXPECT_EQ(lin.bias().grad().dtype(), DType::kF32);
    // bf16 has 8 significant bits: relative error ~ 2^-8 * sqrt(64) of values of order 1.
    EXPECT_LT(max_abs_diff(y16, y32), 0.1);
    EXPECT_LT(max_abs_diff(dx16, dx32), 0.1);
    EXPECT_LT(max_abs_diff(lin.weight().grad(), gw32), 0.2);
    EXPECT_GT(max_abs_diff(y16, y32), 0.0);  // really computed in bf16
  }
}

TEST(Linear, GradientsAccumulateAcrossCalls) {
  Generator gen(9);
  Linear lin(4, 3, Bias::kYes, WeightLayout::kOutIn, DType::kF64, &gen);
  const Tensor x1 = Tensor::randn({2, 4}, DType::kF64, &gen);
  const Tensor x2 = Tensor::randn({5, 4}, DType::kF64, &gen);
  // Two calls before their backwards: contexts pop in reverse order.
  lin.forward(x1);
  lin.forward(x2);
  lin.backward(Tensor::ones({5, 3}, DType::kF64));
  lin.backward(Tensor::ones({2, 3}, DType::kF64));
  const std::vector<double> gb = lin.bias().grad().to_vector();
  EXPECT_EQ(gb, (std::vector<double>{7, 7, 7}));
  const Tensor expected_gw = add(sum(x1, 0, true), sum(x2, 0, true)).expand({3, 4});
  EXPECT_LT(max_abs_diff(lin.weight().grad(), expected_gw), 1e-12);
}

TEST(Linear, BadInputThrows) {
  Linear lin(4, 3);
  try {
    lin.forward(Tensor::zeros({2, 5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("Linear"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("in_features 4"), std::string::npos) << e.message();
  }
  EXPECT_THROW(lin.forward(Tensor::zeros({2, 4}, DType::kI64)), Error);
  EXPECT_THROW(lin.backward(Tensor::zeros({2, 3})), Error);  // no saved forward
  lin.forward(Tensor::zeros({2, 4}));
  EXPECT_THROW(lin.backward(Tensor::zeros({2, 4})), Error);  // wrong gradient shape
}

// ---- Embedding ---------------------------------------------------------------------------

TEST(Embedding, ForwardGathersRows) {
  Embedding emb(5, 3, DType::kF64);
  const Tensor ids = Tensor::from_vector({4, 0, 4, 2}, {2, 2}, DType::kI64);
  const Tensor y = emb.forward(ids);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  const auto w = emb.weight().data().to_vector(), v = y.to_vector();
  const int rows[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(v[i * 3 + k], w[rows[i] * 3 + k]);
  }
  emb.clear_saved();
}

TEST(Embedding, GradientsMatchFiniteDifferences) {
  for (DType id_dtype : {DType::kI64, DType::kI32}) {
    Embedding emb(6, 4, DType::kF64);
    // Repeated ids: their rows' gradients add up.
    check_layer_gradients(emb, Tensor::from_vector({1, 5, 1, 0, 5, 5}, {2, 3}, id_dtype));
  }
}

TEST(Embedding, BackwardAddsRowsAndReturnsUndefined) {
  Embedding emb(4, 2, DType::kF32);
  emb.forward(Tensor::from_vector({3, 1, 3}, {3}, DType::kI32));
  const Tensor dx = emb.backward(Tensor::from_vector({1, 2, 10, 20, 100, 200}, {3, 2}));
  EXPECT_FALSE(dx.defined());
  EXPECT_EQ(emb.weight().grad().to_vector(), (std::vector<double>{0, 0, 10, 20, 0, 0, 101, 202}));
}

// torch's padding_idx: the positions holding it add nothing to the gradient; the row is still
// looked up.
TEST(Embedding, PaddingIdxPositionsAddNothing) {
  Embedding emb(4, 2, DType::kF32);
  emb.set_padding_idx(3);
  EXPECT_EQ(emb.padding_idx(), 3);
  const Tensor y = emb.forward(Tensor::from_vector({3, 1, 3}, {3}, DType::kI64));
  EXPECT_EQ(y.select(0, 0).to_vector(), emb.weight().data().select(0, 3).to_vector());
  emb.backward(Tensor::from_vector({1, 2, 10, 20, 100, 200}, {3, 2}));
  EXPECT_EQ(emb.weight().grad().to_vector(), (std::vector<double>{0, 0, 10, 20, 0, 0, 0, 0}));
  emb.set_padding_idx(-1);
  EXPECT_THROW(emb.set_padding_idx(4), Error);
}

TEST(Embedding, BadIdsThrow) {
  Embedding emb(5, 3);
  try {
    emb.forward(Tensor::from_vector({1, 5}, {2}, DType::kI64));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(e.message().find("Embedding: id 5"), std::string::npos) << e.message();
  }
  EXPECT_THROW(emb.forward(Tensor::from_vector({-1}, {1}, DType::kI32)), Error);
  try {
    emb.forward(Tensor::zeros({2}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("i64 or i32"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace braid::nn
