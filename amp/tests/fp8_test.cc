#include "braid/amp/fp8.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"

namespace braid::amp {
namespace {

TEST(Fp8, FormatsAndLimits) {
  EXPECT_EQ(fp8_dtype(Fp8Format::kHybrid, Fp8Role::kForward), DType::kF8E4M3);
  EXPECT_EQ(fp8_dtype(Fp8Format::kHybrid, Fp8Role::kGradient), DType::kF8E5M2);
  EXPECT_EQ(fp8_dtype(Fp8Format::kE4M3, Fp8Role::kGradient), DType::kF8E4M3);
  EXPECT_EQ(fp8_max(DType::kF8E4M3), 448.0);
  EXPECT_EQ(fp8_max(DType::kF8E5M2), 57344.0);
  EXPECT_THROW(fp8_max(DType::kBF16), Error);
  EXPECT_EQ(parse_fp8_format("HYBRID"), Fp8Format::kHybrid);
  EXPECT_EQ(parse_amax_compute_algo("most_recent"), AmaxComputeAlgo::kMostRecent);
  EXPECT_THROW(parse_fp8_format("E5M2"), Error);
}

TEST(Fp8, QuantizeScalesSaturatesAndKeepsNaN) {
  Tensor x = Tensor::from_vector({1.0, -2.0, 0.1, 1000.0, -1e6, NAN, 0.0}, {7});
  Fp8Tensor q = quantize_fp8(x, DType::kF8E4M3, 2.0f);
  EXPECT_EQ(q.data.dtype(), DType::kF8E4M3);
  EXPECT_EQ(q.scale_inv, 0.5f);
  const auto v = q.data.to_vector();
  EXPECT_EQ(v[0], 2.0);
  EXPECT_EQ(v[1], -4.0);
  EXPECT_EQ(v[2], 0.203125);  // 0.2 rounded to e4m3 (3 mantissa bits)
  EXPECT_EQ(v[3], 448.0);     // saturated, not NaN
  EXPECT_EQ(v[4], -448.0);
  EXPECT_TRUE(std::isnan(v[5]));
  EXPECT_EQ(v[6], 0.0);
  const auto back = dequantize_fp8(q).to_vector();
  EXPECT_EQ(back[0], 1.0);
  EXPECT_EQ(back[3], 224.0);
  EXPECT_THROW(quantize_fp8(x, DType::kF8E4M3, 0.0f), Error);
  EXPECT_THROW(quantize_fp8(x, DType::kF16, 1.0f), Error);
  EXPECT_THROW(quantize_fp8(Tensor::arange(3), DType::kF8E4M3, 1.0f), Error);
}

TEST(Fp8, E5M2KeepsRangeE4M3KeepsPrecision) {
  Tensor x = Tensor::from_vector({3.3, 20000.0}, {2});
  const auto e5 = dequantize_fp8(quantize_fp8(x, DType::kF8E5M2, 1.0f)).to_vector();
  const auto e4 = dequantize_fp8(quantize_fp8(x, DType::kF8E4M3, 1.0f)).to_vector();
  EXPECT_EQ(e5[0], 3.5);   // 2 mantissa bits
  EXPECT_EQ(e4[0], 3.25);  // 3 mantissa bits
  EXPECT_EQ(e5[1], 20480.0);
  EXPECT_EQ(e4[1], 448.0);
}

TEST(Fp8, MatmulEqualsTheF32ProductOfTheDequantizedOperands) {
  Generator gen(7);
  Tensor a = Tensor::randn({5, 16}, DType::kF32, &gen);
  Tensor b = Tensor::randn({3, 16}, DType::kF32, &gen);
  const Fp8Tensor qa = quantize_fp8(a, DType::kF8E4M3, 64.0f);
  const Fp8Tensor qb = quantize_fp8(b, DType::kF8E4M3, 32.0f);
  const Tensor y = fp8_matmul(qa, qb, Fp8Trans::kYes);
  EXPECT_EQ(y.shape(), (Shape{5, 3}));
  EXPECT_TRUE(equal(y, matmul(dequantize_fp8(qa), dequantize_fp8(qb).t())));
  // And close to the unquantized product: e4m3 keeps about 2 significant digits.
  EXPECT_TRUE(allclose(y, matmul(a, b.t()), 0.1, 0.5));
  EXPECT_EQ(fp8_matmul(qa, qb, Fp8Trans::kYes, DType::kBF16).dtype(), DType::kBF16);
  EXPECT_THROW(fp8_matmul(qa, qb), Error);  // inner dimensions 16 and 3
}

TEST(DelayedScaling, ScaleFollowsTheAmaxHistory) {
  DelayedScaling ds({.margin = 1, .amax_history_len = 3}, DType::kF8E4M3);
  EXPECT_EQ(ds.scale(), 1.0f);
  ds.quantize(Tensor::from_vector({2.0, -7.0}, {2}));
  ds.quantize(Tensor::from_vector({3.0}, {1}));
  EXPECT_EQ(ds.amax_history()[0], 7.0f);  // the max over the step's calls
  EXPECT_EQ(ds.update(), 448.0f / 7.0f / 2.0f);
  EXPECT_EQ(ds.amax_history(), (std::vector<float>{0.0f, 0.0f, 7.0f}));
  ds.quantize(Tensor::from_vector({1.0}, {1}));
  EXPECT_EQ(ds.update(), 448.0f / 7.0f / 2.0f);  // 7 is still in the history
  ds.quantize(Tensor::from_vector({1.0}, {1}));
  ds.update();
  ds.quantize(Tensor::from_vector({1.0}, {1}));
  EXPECT_EQ(ds.update(), 448.0f / 1.0f / 2.0f);  // 7 has rolled out
}

TEST(DelayedScaling, MostRecentZeroNaNAndInterval) {
  DelayedScaling recent({.amax_history_len = 4, .amax_compute_algo = AmaxComputeAlgo::kMostRecent},
                        DType::kF8E5M2);
  recent.quantize(Tensor::from_vector({100.0}, {1}));
  recent.update();
  recent.quantize(Tensor::from_vector({4.0}, {1}));
  EXPECT_EQ(recent.update(), 57344.0f / 4.0f);
  // An all-zero step keeps the scale; so does a NaN amax.
  recent.quantize(Tensor::zeros({3}));
  EXPECT_EQ(recent.update(), 57344.0f / 4.0f);
  recent.quantize(Tensor::from_vector({NAN, 1.0}, {2}));
  EXPECT_EQ(recent.update(), 57344.0f / 4.0f);

  DelayedScaling every2({.interval = 2, .amax_history_len = 1}, DType::kF8E4M3);
  every2.quantize(Tensor::from_vector({8.0}, {1}));
  EXPECT_EQ(every2.update(), 1.0f);  // not recomputed on the first update
  every2.quantize(Tensor::from_vector({8.0}, {1}));
  EXPECT_EQ(every2.update(), 56.0f);
  EXPECT_THROW(DelayedScaling({.amax_history_len = 0}, DType::kF8E4M3), Error);
  EXPECT_THROW(DelayedScaling({}, DType::kBF16), Error);
}

TEST(DelayedScaling, RanksAgreeOnTheScale) {
  auto result = testing::run_threads(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto group = testing::make_group(rank, size, store, "shm");
    DelayedScaling ds({.amax_history_len = 2}, DType::kF8E4M3);
    ds.quantize(Tensor::from_vector({rank == 0 ? 2.0 : 14.0}, {1}));
    EXPECT_EQ(ds.update(group.get()), 32.0f);  // 448 / 14 on both ranks
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid::amp
