// The layer kernels of cpu.h ("layers (nn)"): every SIMD level against the scalar level
// (activation_backward, cross_entropy_*), the scalar level and the f32 paths against values
// computed here in double, determinism, embedding gather / ordered scatter-add, masked_scale,
// and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "braid/core/cpu_features.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

constexpr ActivationGrad kActs[] = {ActivationGrad::kRelu, ActivationGrad::kGelu,
                                    ActivationGrad::kGeluTanh, ActivationGrad::kSilu};

// f'(x) in long double, written independently of the kernel (gelu_tanh through its tanh form).
double derivative(ActivationGrad op, double xd) {
  const long double x = xd;
  switch (op) {
    case ActivationGrad::kRelu:
      return x > 0 ? 1.0 : 0.0;
    case ActivationGrad::kGelu:
      return static_cast<double>(0.5L * (1 + std::erf(x / std::sqrt(2.0L))) +
                                 x * std::exp(-x * x / 2) / std::sqrt(2 * 3.14159265358979323846L));
    case ActivationGrad::kGeluTanh: {
      const long double k = std::sqrt(2 / 3.14159265358979323846L);
      const long double t = std::tanh(k * (x + 0.044715L * x * x * x));
      return static_cast<double>(0.5L * (1 + t) +
                                 0.5L * x * (1 - t * t) * k * (1 + 3 * 0.044715L * x * x));
    }
    case ActivationGrad::kSilu: {
      const long double s = 1 / (1 + std::exp(-x));
      return static_cast<double>(s + x * s * (1 - s));
    }
  }
  return 0;
}

TEST(ActivationBackward, ScalarMatchesIndependentDerivatives) {
  ScopedCpuIsa scope(CpuIsa::kScalar);
  const std::vector<float> x = testing::random_f32(2000, 1, -12.0f, 12.0f);
  const std::vector<float> dy = testing::random_f32(2000, 2, -2.0f, 2.0f);
  for (ActivationGrad op : kActs) {
    std::vector<float> dx(x.size());
    activation_backward(op, DType::kF32, 2000, x.data(), dy.data(), dx.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = dy[i] * derivative(op, x[i]);
      // Both gelus' derivatives cancel for very negative x (Phi(x) + x phi(x), 1 + tanh u) in
      // the kernel's double formulas: relative accuracy is lost there, the absolute error
      // stays below 1e-14.
      ASSERT_NEAR(dx[i], want, 1e-6 * std::abs(want) + 1e-14) << int(op) << " x " << x[i];
    }
    std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), dxd(x.size());
    activation_backward(op, DType::kF64, 2000, xd.data(), dyd.data(), dxd.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(dxd[i], dyd[i] * derivative(op, xd[i]), 1e-13) << int(op) << " x " << x[i];
    }
  }
}

TEST(ActivationBackward, SimdLevelsMatchScalar) {
  const std::vector<float> x = testing::random_f32(4099, 3, -10.0f, 10.0f);
  const std::vector<float> dy = testing::random_f32(4099, 4, -3.0f, 3.0f);
  for (ActivationGrad op : kActs) {
    for (int64_t n : testing::tail_sizes()) {
      std::vector<float> ref(n), got(n);
      {
        ScopedCpuIsa scope(CpuIsa::kScalar);
        activation_backward(op, DType::kF32, n, x.data(), dy.data(), ref.data());
      }
      for (CpuIsa isa : testing::simd_isas()) {
        ScopedCpuIsa scope(isa);
        activation_backward(op, DType::kF32, n, x.data(), dy.data(), got.data());
        for (int64_t i = 0; i < n; ++i) {
          // The vector math's bounds (docs/kernels.md): a few ulp of the terms; tanh-based
          // derivatives lose relative accuracy where they cross zero, hence the absolute term.
          ASSERT_NEAR(got[i], ref[i], 2e-6 * std::abs(ref[i]) + 2e-6 * std::abs(dy[i]))
              << "op " << int(op) << " isa " << int(isa) << " x " << x[i];
        }
      }
    }
  }
}

TEST(ActivationBackward, SpecialValuesAndLowPrecision) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.0f, -0.0f, inf, -inf, NAN, 1e-30f, -50.0f, 50.0f};
  const std::vector<float> dy(x.size(), 1.0f);
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    std::vector<float> dx(x.size());
    activation_backward(ActivationGrad::kRelu, DType::kF32, 8, x.data(), dy.data(), dx.data());
    EXPECT_EQ(dx, (std::vector<float>{0, 0, 1, 0, 0, 1, 0, 1}));
    activation_backward(ActivationGrad::kGelu, DType::kF32, 8, x.data(), dy.data(), dx.data());
    EXPECT_FLOAT_EQ(dx[0], 0.5f);
    EXPECT_EQ(dx[2], 1.0f);
    EXPECT_EQ(dx[3], 0.0f);
    EXPECT_TRUE(std::isnan(dx[4]));
    EXPECT_EQ(dx[6], 0.0f);
    EXPECT_EQ(dx[7], 1.0f);
    activation_backward(ActivationGrad::kGeluTanh, DType::kF32, 8, x.data(), dy.data(), dx.data());
    EXPECT_FLOAT_EQ(dx[0], 0.5f);
    EXPECT_EQ(dx[2], 1.0f);
    EXPECT_EQ(dx[3], 0.0f);
    EXPECT_EQ(dx[7], 1.0f);
    EXPECT_TRUE(std::isnan(dx[4]));
    activation_backward(ActivationGrad::kSilu, DType::kF32, 8, x.data(), dy.data(), dx.data());
    EXPECT_FLOAT_EQ(dx[0], 0.5f);
    EXPECT_FLOAT_EQ(dx[7], 1.0f);
    EXPECT_EQ(dx[2], 1.0f);
    EXPECT_EQ(dx[3], 0.0f);

    // bf16: the f32 result rounded once (within one bf16 ulp of the f32 path).
    std::vector<bfloat16> xb, db, outb(x.size());
    std::vector<float> xf, ref(x.size());
    for (float v : testing::random_f32(8, 5, -4.0f, 4.0f)) {
      xb.push_back(bfloat16(v));
      xf.push_back(static_cast<float>(xb.back()));
      db.push_back(bfloat16(1.0f));
    }
    activation_backward(ActivationGrad::kGelu, DType::kBF16, 8, xb.data(), db.data(), outb.data());
    activation_backward(ActivationGrad::kGelu, DType::kF32, 8, xf.data(), dy.data(), ref.data());
    for (int i = 0; i < 8; ++i) {
      EXPECT_NEAR(static_cast<float>(outb[i]), ref[i], std::abs(ref[i]) / 128 + 1e-6);
    }
  }
}

TEST(MaskedScale, KeepsAndScales) {
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<uint8_t> keep = {1, 0, 0, 1};
  std::vector<float> out(4);
  masked_scale(DType::kF32, 4, x.data(), keep.data(), 2.0, out.data());
  EXPECT_EQ(out, (std::vector<float>{2, 0, 0, 8}));
  std::vector<double> xd = {1, -3}, od(2);
  const std::vector<uint8_t> k2 = {0, 1};
  masked_scale(DType::kF64, 2, xd.data(), k2.data(), 1.25, od.data());
  EXPECT_EQ(od, (std::vector<double>{0, -3.75}));
  EXPECT_THROW(masked_scale(DType::kI32, 1, x.data(), keep.data(), 1.0, out.data()), Error);
}

// ---- normalization ------------------------------------------------------------------------

TEST(LayerNormKernel, F32MatchesDoubleReferenceAndIsDeterministic) {
  const int64_t rows = 5, d = 37;
  const std::vector<float> x = testing::random_f32(rows * d, 6, -3.0f, 5.0f);
  const std::vector<float> w = testing::random_f32(d, 7, 0.5f, 1.5f);
  const std::vector<float> b = testing::random_f32(d, 8, -1.0f, 1.0f);
  const std::vector<float> dy = testing::random_f32(rows * d, 9, -1.0f, 1.0f);
  std::vector<float> y(rows * d), mean(rows), rstd(rows), dx(rows * d), dw(d), db(d);
  layer_norm_forward(DType::kF32, rows, d, x.data(), w.data(), b.data(), 1e-5, y.data(),
                     mean.data(), rstd.data());
  layer_norm_backward(DType::kF32, rows, d, x.data(), w.data(), mean.data(), rstd.data(), dy.data(),
                      dx.data(), dw.data(), db.data());
  std::vector<double> dw_ref(d, 0.0), db_ref(d, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t k = 0; k < d; ++k) mu += x[r * d + k];
    mu /= d;
    for (int64_t k = 0; k < d; ++k) var += (x[r * d + k] - mu) * (x[r * d + k] - mu);
    const double rs = 1 / std::sqrt(var / d + 1e-5);
    EXPECT_NEAR(mean[r], mu, 1e-6);
    EXPECT_NEAR(rstd[r], rs, 1e-6 * rs);
    double mg = 0, mgx = 0;
    for (int64_t k = 0; k < d; ++k) {
      const double xh = (x[r * d + k] - mu) * rs, g = dy[r * d + k] * w[k];
      EXPECT_NEAR(y[r * d + k], xh * w[k] + b[k], 1e-5);
      mg += g / d;
      mgx += g * xh / d;
      dw_ref[k] += dy[r * d + k] * xh;
      db_ref[k] += dy[r * d + k];
    }
    for (int64_t k = 0; k < d; ++k) {
      const double xh = (x[r * d + k] - mu) * rs, g = dy[r * d + k] * w[k];
      EXPECT_NEAR(dx[r * d + k], rs * (g - mg - xh * mgx), 1e-5);
    }
  }
  for (int64_t k = 0; k < d; ++k) {
    EXPECT_NEAR(dw[k], dw_ref[k], 1e-5);
    EXPECT_NEAR(db[k], db_ref[k], 1e-5);
  }
  std::vector<float> y2(rows * d), m2(rows), r2(rows);
  layer_norm_forward(DType::kF32, rows, d, x.data(), w.data(), b.data(), 1e-5, y2.data(), m2.data(),
                     r2.data());
  EXPECT_EQ(y, y2);
}

TEST(RmsNormKernel, MatchesDoubleReference) {
  const int64_t rows = 3, d = 19;
  const std::vector<float> x = testing::random_f32(rows * d, 10, -2.0f, 2.0f);
  const std::vector<float> dy = testing::random_f32(rows * d, 11, -1.0f, 1.0f);
  std::vector<float> y(rows * d), rstd(rows), dx(rows * d), dw(d);
  rms_norm_forward(DType::kF32, rows, d, x.data(), nullptr, 1e-6, y.data(), rstd.data());
  rms_norm_backward(DType::kF32, rows, d, x.data(), nullptr, rstd.data(), dy.data(), dx.data(),
                    dw.data());
  std::vector<double> dw_ref(d, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t k = 0; k < d; ++k) ms += double(x[r * d + k]) * x[r * d + k] / d;
    const double rs = 1 / std::sqrt(ms + 1e-6);
    double mgx = 0;
    for (int64_t k = 0; k < d; ++k) mgx += dy[r * d + k] * x[r * d + k] * rs / d;
    for (int64_t k = 0; k < d; ++k) {
      EXPECT_NEAR(y[r * d + k], x[r * d + k] * rs, 1e-5);
      EXPECT_NEAR(dx[r * d + k], rs * (dy[r * d + k] - x[r * d + k] * rs * mgx), 1e-5);
      dw_ref[k] += dy[r * d + k] * x[r * d + k] * rs;
    }
  }
  for (int64_t k = 0; k < d; ++k) EXPECT_NEAR(dw[k], dw_ref[k], 1e-5);
}

TEST(NormKernels, ArgumentChecks) {
  float v = 0;
  EXPECT_THROW(layer_norm_forward(DType::kBF16, 1, 1, &v, nullptr, nullptr, 1e-5, &v, &v, &v),
               Error);
  EXPECT_THROW(rms_norm_forward(DType::kF32, -1, 1, &v, nullptr, 1e-5, &v, &v), Error);
  EXPECT_NO_THROW(layer_norm_forward(DType::kF32, 0, 4, nullptr, nullptr, nullptr, 1e-5, nullptr,
                                     nullptr, nullptr));
}

// ---- cross-entropy ------------------------------------------------------------------------

TEST(CrossEntropyKernel, ScalarMatchesDoubleReference) {
  ScopedCpuIsa scope(CpuIsa::kScalar);
  const int64_t rows = 4, classes = 23;
  const std::vector<float> z = testing::random_f32(rows * classes, 12, -6.0f, 6.0f);
  const std::vector<int64_t> t = {3, -100, 22, 0};
  std::vector<float> loss(rows), lse(rows);
  const double ls = 0.2;
  cross_entropy_forward(DType::kF32, rows, classes, z.data(), DType::kI64, t.data(), -100, ls,
                        loss.data(), lse.data());
  const std::vector<float> scale = {0.5f, 1.0f, 2.0f, -1.0f};
  std::vector<float> dz(rows * classes);
  cross_entropy_backward(DType::kF32, rows, classes, z.data(), DType::kI64, t.data(), -100, ls,
                         lse.data(), scale.data(), dz.data());
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == -100) {
      EXPECT_EQ(loss[r], 0.0f);
      for (int64_t c = 0; c < classes; ++c) EXPECT_EQ(dz[r * classes + c], 0.0f);
      continue;
    }
    double s = 0, sl = 0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(double(z[r * classes + c]));
    const double l = std::log(s);
    for (int64_t c = 0; c < classes; ++c) sl += l - z[r * classes + c];
    const double want = (1 - ls) * (l - z[r * classes + t[r]]) + ls / classes * sl;
    EXPECT_NEAR(loss[r], want, 1e-5 * std::abs(want));
    for (int64_t c = 0; c < classes; ++c) {
      const double p = std::exp(z[r * classes + c] - l);
      const double g = scale[r] * (p - (c == t[r] ? 1 - ls : 0) - ls / classes);
      EXPECT_NEAR(dz[r * classes + c], g, 1e-6);
    }
  }
}

TEST(CrossEntropyKernel, SimdLevelsMatchScalar) {
  for (int64_t classes : {1, 7, 8, 15, 16, 17, 100, 1001}) {
    const int64_t rows = 6;
    std::vector<float> z = testing::random_f32(rows * classes, 13, -20.0f, 20.0f);
    z[classes - 1] = -std::numeric_limits<float>::infinity();  // a masked logit (row 0)
    if (classes > 1) z[classes] = 30.0f;
    std::vector<int32_t> t(rows);
    for (int64_t r = 0; r < rows; ++r) t[r] = static_cast<int32_t>((r * 5) % classes);
    if (classes == 1) t[0] = 0;
    const std::vector<float> scale(rows, 0.25f);
    auto run = [&](CpuIsa isa, std::vector<float>& loss, std::vector<float>& dz) {
      ScopedCpuIsa scope(isa);
      std::vector<float> lse(rows);
      loss.assign(rows, 0);
      dz.assign(rows * classes, 0);
      cross_entropy_forward(DType::kF32, rows, classes, z.data(), DType::kI32, t.data(), -1, 0.1,
                            loss.data(), lse.data());
      cross_entropy_backward(DType::kF32, rows, classes, z.data(), DType::kI32, t.data(), -1, 0.1,
                             lse.data(), scale.data(), dz.data());
    };
    std::vector<float> ref_loss, ref_dz;
    run(CpuIsa::kScalar, ref_loss, ref_dz);
    for (CpuIsa isa : testing::simd_isas()) {
      std::vector<float> loss, dz;
      run(isa, loss, dz);
      for (int64_t r = 0; r < rows; ++r) {
        // Label smoothing with a -Inf logit gives +Inf at every level; a row of only -Inf
        // (classes == 1) gives NaN.
        if (std::isnan(ref_loss[r])) {
          EXPECT_TRUE(std::isnan(loss[r]));
          continue;
        }
        if (std::isinf(ref_loss[r])) {
          EXPECT_EQ(loss[r], ref_loss[r]);
          continue;
        }
        EXPECT_NEAR(loss[r], ref_loss[r], 2e-6 * (std::abs(ref_loss[r]) + 20));
      }
      for (size_t i = 0; i < dz.size(); ++i) {
        if (std::isnan(ref_dz[i])) {
          EXPECT_TRUE(std::isnan(dz[i]));
          continue;
        }
        ASSERT_NEAR(dz[i], ref_dz[i], 1e-6)
            << "classes " << classes << " isa " << int(isa) << " i " << i;
      }
      std::vector<float> again_loss, again_dz;
      run(isa, again_loss, again_dz);
      EXPECT_EQ(std::memcmp(again_dz.data(), dz.data(), dz.size() * sizeof(float)), 0)
          << "not the same bits on a second run";
    }
  }
}

TEST(CrossEntropyKernel, NanRowAndLowPrecision) {
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    std::vector<float> z = {1, NAN, 2, 0.5f};
    const std::vector<int64_t> t = {0, 1};
    std::vector<float> loss(2), lse(2);
    cross_entropy_forward(DType::kF32, 2, 2, z.data(), DType::kI64, t.data(), -100, 0.0,
                          loss.data(), lse.data());
    EXPECT_TRUE(std::isnan(loss[0]));
    EXPECT_NEAR(loss[1], std::log(std::exp(2.0) + std::exp(0.5)) - 0.5, 1e-6);
    std::vector<half> zh = {half(1.0f), half(3.0f)};
    const std::vector<int64_t> t1 = {1};
    cross_entropy_forward(DType::kF16, 1, 2, zh.data(), DType::kI64, t1.data(), -100, 0.0,
                          loss.data(), lse.data());
    EXPECT_NEAR(loss[0], std::log(1 + std::exp(-2.0)), 1e-6);
  }
}

TEST(CrossEntropyKernel, ArgumentChecks) {
  const std::vector<float> z(6, 0.0f);
  std::vector<float> loss(2), lse(2);
  const std::vector<int64_t> bad = {0, 3};
  try {
    cross_entropy_forward(DType::kF32, 2, 3, z.data(), DType::kI64, bad.data(), -100, 0.0,
                          loss.data(), lse.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(e.message().find("target 3 of row 1"), std::string::npos) << e.message();
  }
  const std::vector<float> tf = {0, 1};
  EXPECT_THROW(cross_entropy_forward(DType::kF32, 2, 3, z.data(), DType::kF32, tf.data(), -100, 0.0,
                                     loss.data(), lse.data()),
               Error);
}

// ---- embedding ----------------------------------------------------------------------------

TEST(EmbeddingKernel, GatherAndOrderedScatterAdd) {
  const std::vector<float> w = {0, 1, 10, 11, 20, 21};  // [3, 2]
  const std::vector<int32_t> ids = {2, 0, 2};
  std::vector<float> out(6);
  embedding_forward(DType::kF32, 3, 2, w.data(), DType::kI32, ids.data(), 3, out.data());
  EXPECT_EQ(out, (std::vector<float>{20, 21, 0, 1, 20, 21}));
  // Rows of id 2 are added in id order onto what dweight held: (-1e8 + 1) + 1e8 = 0 in f32,
  // where another order, -1e8 + (1 + 1e8), would give 8.
  const std::vector<float> dy = {1, 0, 5, 5, 1e8f, 0};
  std::vector<float> dw(6, 0.0f);
  dw[4] = -1e8f;
  embedding_backward(DType::kF32, 3, 2, DType::kI32, ids.data(), 3, dy.data(), dw.data());
  EXPECT_EQ(dw, (std::vector<float>{5, 5, 0, 0, 0, 0}));
  const std::vector<int64_t> bad = {0, 3};
  try {
    embedding_forward(DType::kF32, 3, 2, w.data(), DType::kI64, bad.data(), 2, out.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(e.message().find("id 3 at position 1"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace braid::kernels::cpu

namespace braid::kernels::cpu {
namespace {

// Rows (cross-entropy) and element pieces (activations) are split over threads only where
// each output is computed as on one thread.
TEST(NnKernelThreads, ThreadCountNeverChangesTheBits) {
  const int64_t rows = 64, classes = 1500, n = 100000;
  const std::vector<float> z = testing::random_f32(rows * classes, 20, -8.0f, 8.0f);
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = (r * 37) % classes;
  const std::vector<float> scale(rows, 1.0f / rows);
  const std::vector<float> x = testing::random_f32(n, 21, -5.0f, 5.0f);
  auto run = [&](int threads, std::vector<float>& loss, std::vector<float>& dz,
                 std::vector<float>& dx) {
    set_num_threads(threads);
    std::vector<float> lse(rows);
    loss.assign(rows, 0);
    dz.assign(rows * classes, 0);
    dx.assign(n, 0);
    cross_entropy_forward(DType::kF32, rows, classes, z.data(), DType::kI64, t.data(), -100, 0.1,
                          loss.data(), lse.data());
    cross_entropy_backward(DType::kF32, rows, classes, z.data(), DType::kI64, t.data(), -100, 0.1,
                           lse.data(), scale.data(), dz.data());
    activation_backward(ActivationGrad::kGeluTanh, DType::kF32, n, x.data(), x.data(), dx.data());
    set_num_threads(1);
  };
  std::vector<float> l1, d1, a1, l3, d3, a3;
  run(1, l1, d1, a1);
  run(3, l3, d3, a3);
  EXPECT_EQ(l1, l3);
  EXPECT_EQ(d1, d3);
  EXPECT_EQ(a1, a3);
}

}  // namespace
}  // namespace braid::kernels::cpu
