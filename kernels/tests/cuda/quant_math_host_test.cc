// The element code of the cuda quantization kernels (kernels/src/cuda/quant_math.h: the 4-bit
// trees, the 8-bit dynamic-code search, LLM.int8's rounding) run on the host against
// cpu_quant.h at CpuIsa::kScalar, bit for bit, over random values, every code midpoint and its
// float neighbours, and the specials. Needs no GPU; the launches, block maxima and the fused
// GEMM's shuffles are the gpu-labelled conformance suite's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../../src/cuda/quant_math.h"
#include "../kernel_test_util.h"
#include "braid/core/cpu_features.h"
#include "braid/kernels/cpu_quant.h"
#include "braid/kernels/table.h"

namespace braid::kernels::cuda {
namespace {

// Values in [-1, 1]: random, each midpoint between sorted codes and its two float neighbours,
// the codes themselves, +-0, NaN.
std::vector<float> probe_values(const float* code, int entries) {
  std::vector<float> v;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int i = 0; i < 4000; ++i) v.push_back(d(gen));
  std::vector<float> sorted(code, code + entries);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < entries; ++i) {
    v.push_back(sorted[i]);
    if (i + 1 < entries) {
      const float mid = (sorted[i] + sorted[i + 1]) * 0.5f;
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 2.0f));
      v.push_back(std::nextafter(mid, -2.0f));
    }
  }
  v.push_back(0.0f);
  v.push_back(-0.0f);
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  return v;
}

// Quantizes v through the cpu kernel in blocks whose absmax is exactly 1 (a leading 1.0), so the
// kernel's scaled value is v itself; returns the codes of v (the 1.0 dropped).
std::vector<uint8_t> cpu_codes_4bit(cpu::Quant4Type type, const std::vector<float>& v) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < v.size(); i += 63) {
    std::vector<float> block = {1.0f};
    for (size_t j = i; j < std::min(v.size(), i + 63); ++j) block.push_back(v[j]);
    std::vector<uint8_t> packed((block.size() + 1) / 2);
    float absmax = 0;
    cpu::quantize_4bit(type, block.data(), static_cast<int64_t>(block.size()), 64, packed.data(),
                       &absmax);
    for (size_t e = 1; e < block.size(); ++e) out.push_back(math::nibble(packed.data(), e));
  }
  return out;
}

TEST(CudaQuantMathHost, FourBitTreesMatchTheCpu) {
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  for (cpu::Quant4Type type : {cpu::Quant4Type::kNf4, cpu::Quant4Type::kFp4}) {
    const std::vector<float> v = probe_values(cpu::quant4_code(type), 16);
    const std::vector<uint8_t> want = cpu_codes_4bit(type, v);
    ASSERT_EQ(want.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint8_t got = type == cpu::Quant4Type::kNf4 ? math::quantize_nf4(v[i] * 1.0f)
                                                        : math::quantize_fp4(v[i] * 1.0f);
      ASSERT_EQ(got, want[i]) << "value " << v[i] << " type " << int(type);
    }
  }
}

TEST(CudaQuantMathHost, DynamicSearchMatchesTheCpu) {
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  const float* code = cpu::dynamic_code_signed();
  const std::vector<float> v = probe_values(code, 256);
  for (size_t i = 0; i < v.size(); i += 255) {
    std::vector<float> block = {1.0f};
    for (size_t j = i; j < std::min(v.size(), i + 255); ++j) block.push_back(v[j]);
    std::vector<uint8_t> q(block.size());
    float absmax = 0;
    cpu::quantize_blockwise_8bit(code, block.data(), static_cast<int64_t>(block.size()), 256,
                                 q.data(), &absmax);
    for (size_t e = 1; e < block.size(); ++e) {
      ASSERT_EQ(math::quantize_dynamic(code, block[e] * (1.0f / absmax)), q[e]) << block[e];
    }
  }
}

TEST(CudaQuantMathHost, Int8RoundingMatchesTheCpu) {
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  std::mt19937 gen(9);
  std::normal_distribution<float> d(0.0f, 3.0f);
  const int64_t rows = 40, cols = 97;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = d(gen);
  for (int64_t c = 0; c < cols; ++c) x[c] = static_cast<float>(c) - 63.5f;  // ties at scale 1
  x[0] = 127.0f;
  x[cols + 3] = std::numeric_limits<float>::quiet_NaN();
  x[2 * cols + 5] = std::numeric_limits<float>::infinity();
  std::vector<int8_t> q(rows * cols);
  std::vector<float> absmax(rows);
  cpu::quantize_int8_rows(x.data(), rows, cols, 0.0f, q.data(), absmax.data(), nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = absmax[r] > 0 ? 127.0f / absmax[r] : 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(math::quantize_int8(x[r * cols + c], scale), q[r * cols + c]) << r << "," << c;
    }
  }
}

// The cuda table's quant members check their arguments with the cpu's messages before any device
// work, and empty calls launch nothing: both run here without a GPU.
TEST(CudaQuantMathHost, TableChecksArgumentsBeforeAnyDeviceWork) {
  using cpu::testing::expect_error;
  const KernelTable& k = kernels_for(DeviceType::kCUDA);
  const Stream s{Device{DeviceType::kCUDA, 0}, nullptr};
  expect_error([&] { k.quantize_4bit(s, Quant4Type::kNf4, nullptr, 4, 63, nullptr, nullptr); },
               ErrorKind::kInvalidArgument, {"quantize_4bit", "63"});
  expect_error([&] { k.dequantize_4bit(s, nullptr, nullptr, nullptr, -1, 64, nullptr); },
               ErrorKind::kInvalidArgument, {"dequantize_4bit", "negative"});
  expect_error([&] { k.gemm_i8_i32(s, nullptr, nullptr, 1, 1, 200000, nullptr); },
               ErrorKind::kNotSupported, {"gemm_i8_i32", "200000"});
  expect_error([&] { k.quantize_int8_rows(s, nullptr, 1, 1, -1.0f, nullptr, nullptr, nullptr); },
               ErrorKind::kInvalidArgument, {"threshold"});
  expect_error(
      [&] {
        k.gemm_4bit(s, nullptr, nullptr, nullptr, 64, 1, 1, 1, nullptr, DType::kI32, nullptr,
                    DType::kF32);
      },
      ErrorKind::kNotSupported, {"gemm_4bit", "i32"});
  expect_error(
      [&] {
        k.gemm_4bit_nn(s, nullptr, nullptr, nullptr, 6, 1, 1, 1, nullptr, DType::kF32, nullptr,
                       DType::kF32);
      },
      ErrorKind::kInvalidArgument, {"gemm_4bit_nn", "null"});
  // Empty work: nothing is launched, so no device is needed.
  k.quantize_4bit(s, Quant4Type::kFp4, nullptr, 0, 64, nullptr, nullptr);
  k.gemm_4bit(s, nullptr, nullptr, nullptr, 64, 0, 5, 5, nullptr, DType::kF32, nullptr,
              DType::kBF16);
  EXPECT_EQ(k.quantize_int8_rows(s, nullptr, 0, 7, 6.0f, nullptr, nullptr, nullptr), 0);
}

}  // namespace
}  // namespace braid::kernels::cuda
