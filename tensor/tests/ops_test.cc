// Tensor-level ops: shapes, broadcasting, dtype rules and hand-derived values. Numerics of
// the kernels themselves are checked in kernels/tests and against PyTorch in tests/golden.
#include "braid/tensor/ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/kernels/table.h"

namespace braid {
namespace {

using V = std::vector<double>;

Tensor T(V v, Shape s, DType dt = DType::kF32) {
  return Tensor::from_vector(v, s, dt);
}

TEST(Ops, BinaryBroadcasts) {
  Tensor a = T({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = T({10, 20, 30}, {3});
  Tensor col = T({100, 200}, {2, 1});
  EXPECT_EQ(add(a, row).to_vector(), (V{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ((a * col).to_vector(), (V{100, 200, 300, 800, 1000, 1200}));
  EXPECT_EQ(sub(row, a).to_vector(), (V{9, 18, 27, 6, 15, 24}));
  EXPECT_EQ(div(a, T({2}, {1})).to_vector(), (V{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_EQ(add(a, 1.0).to_vector(), (V{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(maximum(a, T({3}, {})).to_vector(), (V{3, 3, 3, 4, 5, 6}));
  // a transposed (strided) operand against a broadcast row
  EXPECT_EQ(minimum(a.t(), T({2, 5}, {1, 2})).to_vector(), (V{1, 4, 2, 5, 2, 5}));
  const V nan_max = maximum(T({NAN, 1}, {2}), T({0, NAN}, {2})).to_vector();
  EXPECT_TRUE(std::isnan(nan_max[0]) && std::isnan(nan_max[1]));
}

TEST(Ops, BinaryRejectsMixedDtypesAndBadShapes) {
  Tensor a = T({1, 2}, {2});
  try {
    add(a, a.to(DType::kF16));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("f32 and f16"), std::string::npos);
  }
  EXPECT_THROW(add(a, T({1, 2, 3}, {3})), Error);
}

TEST(Ops, AxpbyScaleUnary) {
  Tensor x = T({1, 2, 3}, {3});
  Tensor y = T({10, 20, 30}, {3});
  EXPECT_EQ(axpby(2, x, 0.5, y).to_vector(), (V{7, 14, 21}));
  EXPECT_EQ(scale(x, -2).to_vector(), (V{-2, -4, -6}));
  axpby_(1, x, 1, y);
  EXPECT_EQ(y.to_vector(), (V{11, 22, 33}));
  EXPECT_EQ(relu(T({-1, 0, 2}, {3})).to_vector(), (V{0, 0, 2}));
  EXPECT_NEAR(exp(T({1}, {1})).item(), 2.718281828, 1e-6);
  EXPECT_NEAR(sigmoid(T({0}, {1})).item(), 0.5, 1e-7);
  // gelu(1) = 1 * Phi(1) = 0.8413447...
  EXPECT_NEAR(gelu(T({1}, {1})).item(), 0.8413447, 1e-6);
  EXPECT_NEAR(gelu(T({1}, {1}), GeluApproximate::kTanh).item(), 0.8411920, 1e-6);
  EXPECT_NEAR(rsqrt(T({4}, {1})).item(), 0.5, 1e-7);
  EXPECT_EQ(abs(neg(x)).to_vector(), x.to_vector());
  EXPECT_THROW(axpby(1, x, 1, T({1}, {1})), Error);
}

TEST(Ops, Reductions) {
  Tensor a = T({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a).item(), 21);
  EXPECT_EQ(sum(a, 0).to_vector(), (V{5, 7, 9}));
  EXPECT_EQ(sum(a, -1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(mean(a, 1).to_vector(), (V{2, 5}));
  EXPECT_EQ(amax(a, 0).to_vector(), (V{4, 5, 6}));
  EXPECT_EQ(amin(a).item(), 1);
  EXPECT_NEAR(norm(T({3, 4}, {2})).item(), 5.0, 1e-6);
  // a strided input goes through contiguous()
  EXPECT_EQ(sum(a.t(), 1).to_vector(), (V{5, 7, 9}));
  // bf16 input, f32 output: the accumulation is not rounded to bf16 on the way
  Tensor many = Tensor::full({1000}, 1.0, DType::kBF16);
  EXPECT_EQ(sum(many, DType::kF32).item(), 1000);
  EXPECT_THROW(sum(a, 2), Error);
}

TEST(Ops, SoftmaxAlongAnyDim) {
  Tensor a = T({0, 0, std::log(3.0), 0}, {2, 2});
  EXPECT_NEAR(softmax(a, 0).to_vector()[0], 0.25, 1e-6);  // column 0: e^0 / (e^0 + 3)
  const V rows = softmax(a, 1).to_vector();
  EXPECT_NEAR(rows[0], 0.5, 1e-6);
  EXPECT_NEAR(rows[2], 0.75, 1e-6);
  EXPECT_NEAR(log_softmax(a, 1).to_vector()[3], std::log(0.25), 1e-6);
}

TEST(Ops, MatmulShapesTransposesAndBatches) {
  Tensor a = T({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = T({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(matmul(a, b).to_vector(), (V{4, 5, 10, 11}));
  // transposed views are passed without copying; results must match the copied operands
  EXPECT_EQ(matmul(b.t(), a.t()).to_vector(),
            matmul(b.t().contiguous(), a.t().contiguous()).to_vector());
  EXPECT_EQ(matmul(b.t(), a.t()).to_vector(), (V{4, 10, 5, 11}));
  Tensor batch_a = cat({a.unsqueeze(0), scale(a, 2).unsqueeze(0)}, 0);
  Tensor out = matmul(batch_a, b);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(out.to_vector(), (V{4, 5, 10, 11, 8, 10, 20, 22}));
  EXPECT_EQ(matmul(a.to(DType::kBF16), b.to(DType::kBF16)).to_vector(), (V{4, 5, 10, 11}));
  EXPECT_THROW(matmul(a, a), Error);
  EXPECT_THROW(matmul(a, b.to(DType::kF64)), Error);
}

TEST(Ops, CatEqualAllclose) {
  Tensor a = T({1, 2}, {1, 2});
  Tensor b = T({3, 4, 5, 6}, {2, 2});
  EXPECT_EQ(cat({a, b}).to_vector(), (V{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cat({b, b}, 1).shape(), (Shape{2, 4}));
  EXPECT_THROW(cat({a, b}, 1), Error);
  EXPECT_TRUE(equal(a, a.clone()));
  EXPECT_FALSE(equal(a, a.to(DType::kF64)));
  EXPECT_TRUE(allclose(T({1.0}, {1}), T({1.0 + 1e-7}, {1})));
  EXPECT_FALSE(allclose(T({1.0}, {1}), T({1.001}, {1})));
}

// The seam (docs/kernels.md, "Kernel tables"): ops dispatch on the operands' device. On meta
// they run the meta table (argument checks, no memory) and return meta results of the right
// shape and dtype; cpu and meta operands do not mix; meta refuses what cpu refuses.
namespace seam {

TEST(OpsOnMeta, ShapesAndDtypesWithoutMemory) {
  const Tensor a = Tensor::empty({4096, 1024}, DType::kBF16, kMeta);
  const Tensor b = Tensor::empty({1024}, DType::kBF16, kMeta);
  const Tensor w = Tensor::empty({1024, 512}, DType::kBF16, kMeta);
  const Tensor y = add(a, b);
  EXPECT_EQ(y.device(), kMeta);
  EXPECT_EQ(y.shape(), (Shape{4096, 1024}));
  EXPECT_EQ(y.data_ptr(), nullptr);
  EXPECT_EQ(matmul(a, w).shape(), (Shape{4096, 512}));
  EXPECT_EQ(matmul(a, w).device(), kMeta);
  EXPECT_EQ(sum(a, 1, false, DType::kF32).shape(), (Shape{4096}));
  EXPECT_EQ(sum(a, 1, false, DType::kF32).dtype(), DType::kF32);
  EXPECT_EQ(softmax(a.transpose(0, 1)).shape(), (Shape{1024, 4096}));
  EXPECT_EQ(gelu(a).device(), kMeta);
  EXPECT_EQ(a.to(DType::kF32).dtype(), DType::kF32);
  EXPECT_EQ(a.transpose(0, 1).contiguous().device(), kMeta);
  EXPECT_EQ(cat({a, a}, 0).shape(), (Shape{8192, 1024}));
}

TEST(OpsOnMeta, RefusesWhatCpuRefusesAndMixedDevices) {
  const Tensor m = Tensor::empty({8}, DType::kI8, kMeta);
  try {
    (void)exp(m);
    ADD_FAILURE() << "exp on i8 ran on meta";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("meta"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)exp(Tensor::zeros({8}, DType::kI8)), Error);  // cpu refuses it too
  const Tensor on_meta = Tensor::empty({3}, DType::kF32, kMeta);
  const Tensor on_cpu = Tensor::zeros({3}, DType::kF32);
  try {
    (void)add(on_meta, on_cpu);
    ADD_FAILURE() << "mixed devices ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("move one with .to(device)"), std::string::npos);
  }
}

TEST(OpsOnDevices, ADeviceWithoutKernelsIsNamed) {
  // xpu has a device slot and no kernel table in any build.
  try {
    (void)kernels::kernels_for(DeviceType::kXPU);
    ADD_FAILURE() << "xpu kernels";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  }
}

}  // namespace seam

}  // namespace
}  // namespace braid
