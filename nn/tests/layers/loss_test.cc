// CrossEntropyLoss and MSELoss: values against hand-computed formulas (ignore_index, label
// smoothing, every reduction), backward against finite differences in f64, low precision
// against f64, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/nn/loss.h"
#include "braid/tensor/ops.h"
#include "finite_diff.h"

namespace braid::nn {
namespace {

using testing::expect_grad_close;
using testing::numeric_grad;

// Logits [[1, 2, 3], [1, 1, 1], [0.5, -2, 4]]: lse and the per-row pieces, computed directly.
const std::vector<double> kLogits = {1, 2, 3, 1, 1, 1, 0.5, -2, 4};

double lse_row(int r) {
  double s = 0;
  for (int c = 0; c < 3; ++c) s += std::exp(kLogits[r * 3 + c]);
  return std::log(s);
}
double nll(int r, int t) {
  return lse_row(r) - kLogits[r * 3 + t];
}
double smooth(int r) {  // -sum_c log p_c
  double s = 0;
  for (int c = 0; c < 3; ++c) s += lse_row(r) - kLogits[r * 3 + c];
  return s;
}

Tensor logits(DType dt = DType::kF64) {
  return Tensor::from_vector(kLogits, {3, 3}, dt);
}

TEST(CrossEntropyLoss, ValuesForEveryReduction) {
  const Tensor t = Tensor::from_vector({2, 0, 1}, {3}, DType::kI64);
  const double l0 = nll(0, 2), l1 = nll(1, 0), l2 = nll(2, 1);
  CrossEntropyLoss mean_ce, sum_ce({.reduction = Reduction::kSum}),
      none_ce({.reduction = Reduction::kNone});
  EXPECT_NEAR(mean_ce.forward(logits(), t).item(), (l0 + l1 + l2) / 3, 1e-14);
  EXPECT_NEAR(sum_ce.forward(logits(), t).item(), l0 + l1 + l2, 1e-14);
  const auto none = none_ce.forward(logits(), t).to_vector();
  ASSERT_EQ(none.size(), 3u);
  EXPECT_NEAR(none[0], l0, 1e-14);
  EXPECT_NEAR(none[1], l1, 1e-14);
  EXPECT_NEAR(none[2], l2, 1e-14);
  // f32 logits give an f32 loss close to these.
  CrossEntropyLoss f32_ce;
  const Tensor l32 = f32_ce.forward(logits(DType::kF32), t);
  EXPECT_EQ(l32.dtype(), DType::kF32);
  EXPECT_EQ(l32.dim(), 0);
  EXPECT_NEAR(l32.item(), (l0 + l1 + l2) / 3, 1e-6);
}

TEST(CrossEntropyLoss, IgnoreIndex) {
  const Tensor t = Tensor::from_vector({2, -100, 1}, {3}, DType::kI32);
  const double l0 = nll(0, 2), l2 = nll(2, 1);
  CrossEntropyLoss mean_ce, none_ce({.reduction = Reduction::kNone});
  EXPECT_NEAR(mean_ce.forward(logits(), t).item(), (l0 + l2) / 2, 1e-14);  // divides by 2
  const auto none = none_ce.forward(logits(), t).to_vector();
  EXPECT_EQ(none[1], 0.0);
  const Tensor d = mean_ce.backward();
  const auto dv = d.to_vector();
  for (int c = 0; c < 3; ++c) EXPECT_EQ(dv[3 + c], 0.0);  // ignored row: zero gradient
  // A custom ignore_index, and every target ignored: NaN, as torch.
  CrossEntropyLoss custom({.ignore_index = 1});
  EXPECT_NEAR(custom.forward(logits(), Tensor::from_vector({2, 0, 1}, {3}, DType::kI64)).item(),
              (nll(0, 2) + nll(1, 0)) / 2, 1e-14);
  CrossEntropyLoss all_ignored;
  EXPECT_TRUE(
      std::isnan(all_ignored.forward(logits(), Tensor::full({3}, -100, DType::kI64)).item()));
  none_ce.clear_saved();
  custom.clear_saved();
  all_ignored.clear_saved();
}

TEST(CrossEntropyLoss, LabelSmoothingUsesTorchsFormula) {
  const double eps = 0.1;
  const Tensor t = Tensor::from_vector({2, -100, 1}, {3}, DType::kI64);
  // (1 - eps) * nll + eps / C * (-sum_c log p_c), ignored rows left out of both terms.
  const double r0 = (1 - eps) * nll(0, 2) + eps / 3 * smooth(0);
  const double r2 = (1 - eps) * nll(2, 1) + eps / 3 * smooth(2);
  CrossEntropyLoss mean_ce({.label_smoothing = eps}),
      sum_ce({.reduction = Reduction::kSum, .label_smoothing = eps});
  EXPECT_NEAR(mean_ce.forward(logits(), t).item(), (r0 + r2) / 2, 1e-14);
  EXPECT_NEAR(sum_ce.forward(logits(), t).item(), r0 + r2, 1e-14);
  mean_ce.clear_saved();
  sum_ce.clear_saved();
}

TEST(CrossEntropyLoss, GradientsMatchFiniteDifferences) {
  Generator gen(3);
  const Tensor x = Tensor::randn({2, 3, 5}, DType::kF64, &gen);
  const Tensor t = Tensor::from_vector({4, 0, -100, 2, 2, 1}, {2, 3}, DType::kI64);
  for (Reduction red : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    for (double ls : {0.0, 0.2}) {
      SCOPED_TRACE(::testing::Message() << "reduction " << int(red) << " smoothing " << ls);
      CrossEntropyLoss ce({.reduction = red, .label_smoothing = ls});
      // A non-trivial upstream gradient: 0.7 for reduced losses, random for kNone.
      const Tensor g = red == Reduction::kNone ? Tensor::randn({2, 3}, DType::kF64, &gen)
                                               : Tensor::full({}, 0.7, DType::kF64);
      const Tensor xc = x.clone();
      ce.forward(xc, t);
      const Tensor d = ce.backward(g);
      auto loss = [&] {
        NoGradGuard no_grad;
        return testing::project(ce.forward(xc, t), g);
      };
      expect_grad_close(d, numeric_grad(loss, xc), "dlogits", 1e-7, 1e-6);
    }
  }
}

TEST(CrossEntropyLoss, Bf16LogitsCloseToF32) {
  Generator gen(4);
  const Tensor x = scale(Tensor::randn({16, 50}, DType::kF32, &gen), 3.0);
  Tensor t = Tensor::empty({16}, DType::kI64);
  for (int i = 0; i < 16; ++i) t.data<int64_t>()[i] = (i * 7) % 50;
  CrossEntropyLoss a({.label_smoothing = 0.05}), b({.label_smoothing = 0.05});
  const Tensor xb = x.to(DType::kBF16);
  const double l32 = a.forward(xb.to(DType::kF32), t).item();
  const Tensor lb = b.forward(xb, t);
  EXPECT_EQ(lb.dtype(), DType::kF32);  // computed in f32
  EXPECT_NEAR(lb.item(), l32, 1e-5);
  const Tensor d32 = a.backward(), db = b.backward();
  EXPECT_EQ(db.dtype(), DType::kBF16);
  const auto v32 = d32.to_vector(), vb = db.to_vector();
  for (size_t i = 0; i < v32.size(); ++i)
    EXPECT_NEAR(vb[i], v32[i], 4e-3 * std::abs(v32[i]) + 1e-6);
}

TEST(CrossEntropyLoss, BadInputThrows) {
  CrossEntropyLoss ce;
  try {
    ce.forward(logits(), Tensor::from_vector({0, 3, 1}, {3}, DType::kI64));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(e.message().find("CrossEntropyLoss: target 3"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ce.forward(logits(), Tensor::from_vector({0, -1, 1}, {3}, DType::kI64)), Error);
  try {
    ce.forward(logits(), Tensor::from_vector({0, 1, 1}, {3}, DType::kF32));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("i64 or i32"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ce.forward(logits(), Tensor::zeros({2}, DType::kI64)), Error);  // shape
  EXPECT_THROW(
      CrossEntropyLoss({.label_smoothing = 1.5}).forward(logits(), Tensor::zeros({3}, DType::kI64)),
      Error);
  EXPECT_EQ(ce.saved_count(), 0u);
}

// ---- MSELoss -----------------------------------------------------------------------------

TEST(MSELoss, ValuesAndGradients) {
  const Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::kF64);
  const Tensor b = Tensor::from_vector({0, 2, 5, 1}, {2, 2}, DType::kF64);
  MSELoss mean_l, sum_l(Reduction::kSum), none_l(Reduction::kNone);
  EXPECT_EQ(mean_l.forward(a, b).item(), (1 + 0 + 4 + 9) / 4.0);
  EXPECT_EQ(sum_l.forward(a, b).item(), 14.0);
  EXPECT_EQ(none_l.forward(a, b).to_vector(), (std::vector<double>{1, 0, 4, 9}));
  EXPECT_EQ(mean_l.backward().to_vector(), (std::vector<double>{0.5, 0, -1, 1.5}));
  EXPECT_EQ(sum_l.backward(Tensor::full({}, 2.0, DType::kF64)).to_vector(),
            (std::vector<double>{4, 0, -8, 12}));
  EXPECT_EQ(none_l.backward(Tensor::from_vector({1, 1, 2, 0}, {2, 2}, DType::kF64)).to_vector(),
            (std::vector<double>{2, 0, -8, 0}));

  Generator gen(2);
  const Tensor x = Tensor::randn({3, 4}, DType::kF64, &gen),
               y = Tensor::randn({3, 4}, DType::kF64, &gen);
  for (Reduction red : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    MSELoss l(red);
    const Tensor g = red == Reduction::kNone ? Tensor::randn({3, 4}, DType::kF64, &gen)
                                             : Tensor::full({}, 1.3, DType::kF64);
    const Tensor xc = x.clone();
    l.forward(xc, y);
    const Tensor d = l.backward(g);
    auto loss = [&] {
      NoGradGuard no_grad;
      return testing::project(l.forward(xc, y), g);
    };
    expect_grad_close(d, numeric_grad(loss, xc), "mse input");
  }
}

TEST(MSELoss, DtypesAndErrors) {
  MSELoss l;
  const Tensor a = Tensor::from_vector({1, 2}, {2}, DType::kBF16);
  const Tensor loss = l.forward(a, Tensor::zeros({2}, DType::kBF16));
  EXPECT_EQ(loss.dtype(), DType::kF32);
  EXPECT_EQ(loss.item(), 2.5);
  EXPECT_EQ(l.backward().dtype(), DType::kBF16);
  EXPECT_THROW(l.forward(a, Tensor::zeros({3}, DType::kBF16)), Error);
  EXPECT_THROW(l.forward(a, Tensor::zeros({2}, DType::kF32)), Error);
}

}  // namespace
}  // namespace braid::nn
