// Compares braid's bitsandbytes-format quantization kernels (braid/kernels/cpu_quant.h) with
// bnb_quant.safetensors (gen_bnb_reference.py): code tables, 4-bit codes and absmax bit for
// bit, double quantization of the absmax, LLM.int8 row quantization with outliers, and two
// outputs of bitsandbytes 0.50.2's own CPU library (4-bit dequantization, which must match to
// the bit, and 8-bit block-wise codes, which may differ only next to a code midpoint).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "braid/kernels/cpu_quant.h"
#include "braid/tensor/safetensors.h"

namespace braid {
namespace {

namespace kc = kernels::cpu;

const char* kFile = BRAID_SOURCE_DIR "/tests/reference/bnb_quant.safetensors";

template <typename T>
std::vector<T> read(const SafetensorsFile& f, const std::string& name) {
  const Tensor t = f.get(name).contiguous();
  std::vector<T> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data_ptr(), out.size() * sizeof(T));
  return out;
}

template <typename T>
void expect_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  EXPECT_EQ(bad, 0u) << what;
}

TEST(BnbReference, CodeTables) {
  const SafetensorsFile f = SafetensorsFile::open(kFile);
  expect_bits(std::vector<float>(kc::quant4_code(kc::Quant4Type::kNf4),
                                 kc::quant4_code(kc::Quant4Type::kNf4) + 16),
              read<float>(f, "nf4_code"), "nf4_code");
  expect_bits(std::vector<float>(kc::quant4_code(kc::Quant4Type::kFp4),
                                 kc::quant4_code(kc::Quant4Type::kFp4) + 16),
              read<float>(f, "fp4_code"), "fp4_code");
  expect_bits(std::vector<float>(kc::dynamic_code_signed(), kc::dynamic_code_signed() + 256),
              read<float>(f, "dynamic_code"), "dynamic_code");
}

TEST(BnbReference, FourBitCodesAbsmaxAndDoubleQuant) {
  const SafetensorsFile f = SafetensorsFile::open(kFile);
  int checked_lib = 0, checked_dq = 0;
  for (const char* c : {"randn_4096", "mixed_odd_325", "tiny_and_ties"}) {
    const std::vector<float> x = read<float>(f, std::string(c) + ".x");
    const auto n = static_cast<int64_t>(x.size());
    for (auto [qt, type] :
         {std::pair{"nf4", kc::Quant4Type::kNf4}, {"fp4", kc::Quant4Type::kFp4}}) {
      const std::string p = std::string(c) + "." + qt;
      std::vector<uint8_t> packed((n + 1) / 2);
      std::vector<float> absmax((n + 63) / 64);
      kc::quantize_4bit(type, x.data(), n, 64, packed.data(), absmax.data());
      expect_bits(packed, read<uint8_t>(f, p + ".packed"), p + ".packed");
      expect_bits(absmax, read<float>(f, p + ".absmax"), p + ".absmax");
      std::vector<float> y(n);
      kc::dequantize_4bit(kc::quant4_code(type), packed.data(), absmax.data(), n, 64, y.data());
      const auto names = f.names();
      if (std::find(names.begin(), names.end(), p + ".dequant") != names.end()) {
        expect_bits(y, read<float>(f, p + ".dequant"), p + ".dequant (bitsandbytes' library)");
        ++checked_lib;
      }
      if (std::find(names.begin(), names.end(), p + ".dq_absmax") == names.end()) continue;
      // Double quantization: offset = mean(absmax), 8-bit blocks of 256 over absmax - offset.
      const float offset = read<float>(f, p + ".dq_offset")[0];
      std::vector<float> centred(absmax.size());
      for (size_t i = 0; i < absmax.size(); ++i) centred[i] = absmax[i] - offset;
      const auto nb = static_cast<int64_t>(absmax.size());
      std::vector<uint8_t> q2(nb);
      std::vector<float> a2((nb + 255) / 256);
      kc::quantize_blockwise_8bit(kc::dynamic_code_signed(), centred.data(), nb, 256, q2.data(),
                                  a2.data());
      expect_bits(q2, read<uint8_t>(f, p + ".dq_absmax"), p + ".dq_absmax");
      expect_bits(a2, read<float>(f, p + ".dq_nested_absmax"), p + ".dq_nested_absmax");
      ++checked_dq;
    }
  }
  EXPECT_EQ(checked_lib, 4);  // the even-length cases
  EXPECT_EQ(checked_dq, 4);   // mixed_odd_325 has an all-zero block: no double quantization
}

TEST(BnbReference, BlockwiseEightBitAgainstTheLibrary) {
  const SafetensorsFile f = SafetensorsFile::open(kFile);
  const std::vector<float> x = read<float>(f, "blockwise8.x");
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(n);
  std::vector<float> absmax((n + 255) / 256);
  const float* code = kc::dynamic_code_signed();
  kc::quantize_blockwise_8bit(code, x.data(), n, 256, q.data(), absmax.data());
  expect_bits(q, read<uint8_t>(f, "blockwise8.q"), "blockwise8.q");
  expect_bits(absmax, read<float>(f, "blockwise8.absmax"), "blockwise8.absmax");
  // bitsandbytes' CPU library: same absmax; a different code only next to a midpoint, and then
  // a neighbour of braid's.
  const std::vector<uint8_t> lib = read<uint8_t>(f, "blockwise8.lib_q");
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (lib[i] == q[i]) continue;
    ++differ;
    const float s = x[i] * (1.0f / absmax[i / 256]);
    const float mid = (code[lib[i]] + code[q[i]]) / 2;
    EXPECT_EQ(std::abs(int{lib[i]} - int{q[i]}), 1) << i;
    EXPECT_LT(std::fabs(s - mid), 2e-5f) << i;
  }
  EXPECT_LT(differ, n / 200);  // under 0.5%
}

TEST(BnbReference, Int8RowsAndOutliers) {
  const SafetensorsFile f = SafetensorsFile::open(kFile);
  for (auto [name, threshold] : {std::pair{"int8_w", 0.0f}, {"int8_act", 6.0f}}) {
    const std::string p = name;
    const Tensor xt = f.get(p + ".x");
    const int64_t rows = xt.shape()[0], cols = xt.shape()[1];
    const std::vector<float> x = read<float>(f, p + ".x");
    std::vector<int8_t> q(rows * cols);
    std::vector<float> absmax(rows);
    std::vector<int64_t> outl(cols);
    const int64_t n_out = kc::quantize_int8_rows(x.data(), rows, cols, threshold, q.data(),
                                                 absmax.data(), outl.data());
    expect_bits(q, read<int8_t>(f, p + ".q"), p + ".q");
    expect_bits(absmax, read<float>(f, p + ".absmax"), p + ".absmax");
    std::vector<int64_t> want = read<int64_t>(f, p + ".outlier_cols");
    if (want == std::vector<int64_t>{-1}) want.clear();
    outl.resize(n_out);
    EXPECT_EQ(outl, want) << p;
  }
}

}  // namespace
}  // namespace braid
