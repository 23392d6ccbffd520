// braid/tensor/quant.h: the QuantState bookkeeping around the kernels (shapes and dtypes of the
// packed data and of the plain and nested absmax), absmax_f32 undoing double quantization
// within its 8-bit error, dequantization to each floating dtype, int8 round trips, and bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/quant.h"

namespace braid {
namespace {

TEST(TensorQuant, FourBitStateShapesAndDoubleQuant) {
  Generator gen(2);
  const Tensor w = Tensor::randn({96, 200}, DType::kBF16, &gen);  // 19200 = 300 blocks
  const QuantizedTensor4bit plain = quantize_4bit(w, Quant4Type::kFp4);
  EXPECT_EQ(plain.packed.shape(), (Shape{9600, 1}));
  EXPECT_EQ(plain.state.absmax.dtype(), DType::kF32);
  EXPECT_EQ(plain.state.absmax.numel(), 300);
  EXPECT_EQ(plain.state.dtype, DType::kBF16);
  EXPECT_EQ(plain.state.shape, (Shape{96, 200}));
  EXPECT_EQ(plain.nbytes(), 9600 + 300 * 4 + 16 * 4);
  const QuantizedTensor4bit dq = quantize_4bit(w, Quant4Type::kNf4, 64, true);
  EXPECT_TRUE(dq.state.nested);
  EXPECT_EQ(dq.state.absmax.dtype(), DType::kU8);
  EXPECT_EQ(dq.state.nested_absmax.numel(), 2);  // 300 blocks in 256s
  EXPECT_EQ(dq.state.nested_code.numel(), 256);
  // The nested absmax is within half an 8-bit step of the true one: the dynamic code's widest
  // gap near 1 is 1/64 of the nested block's absmax.
  const Tensor exact = quantize_4bit(w, Quant4Type::kNf4).state.absmax;
  const Tensor back = absmax_f32(dq.state);
  const auto e = exact.to_vector(), b = back.to_vector();
  const auto na = dq.state.nested_absmax.to_vector();
  for (size_t i = 0; i < e.size(); ++i) EXPECT_LE(std::fabs(e[i] - b[i]), na[i / 256] / 64) << i;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const Tensor y = dequantize_4bit(dq, t);
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(y.shape(), (Shape{96, 200}));
  }
  EXPECT_TRUE(allclose(dequantize_4bit(plain, DType::kF32), w.to(DType::kF32), 0, 0.5));
}

TEST(TensorQuant, Int8RoundTripAndErrors) {
  Generator gen(3);
  const Tensor w = Tensor::randn({16, 40}, DType::kF32, &gen);
  const QuantizedInt8 q = quantize_int8(w);
  EXPECT_EQ(q.cb.dtype(), DType::kI8);
  EXPECT_EQ(q.scb.shape(), (Shape{16}));
  EXPECT_EQ(q.nbytes(), 16 * 40 + 16 * 4);
  const Tensor back = dequantize_int8(q, DType::kF32);
  const auto wv = w.to_vector(), bv = back.to_vector(), s = q.scb.to_vector();
  for (size_t i = 0; i < wv.size(); ++i)
    EXPECT_LE(std::fabs(wv[i] - bv[i]), s[i / 40] / 254 * 1.0001);
  EXPECT_THROW(quantize_int8(Tensor::zeros({4})), Error);  // not 2-d
  EXPECT_THROW(quantize_4bit(Tensor::zeros({4}, DType::kI32), Quant4Type::kNf4), Error);
  EXPECT_THROW(int8_linear(Tensor::zeros({2, 39}), q, 6.0), Error);  // in mismatch
  EXPECT_THROW(parse_quant4_type("int4"), Error);
  EXPECT_EQ(parse_quant4_type("fp4"), Quant4Type::kFp4);
}

}  // namespace
}  // namespace braid
