// Golden test of core/float_types.h: every conversion case that gen_dtype_golden.py wrote
// from numpy / ml_dtypes (decode tables of every bit pattern, encode cases around every
// rounding boundary plus random f32 bit patterns) must match bit for bit. The only
// tolerance: a NaN matches a NaN of the same sign, since payloads are not preserved
// (docs/dtypes.md). A missing file is a failure that names the script, never a skip.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "braid/core/float_types.h"

#ifndef BRAID_GOLDEN_DIR
#error "BRAID_GOLDEN_DIR must name the directory gen_dtype_golden.py writes"
#endif

namespace braid {
namespace {

constexpr uint32_t kNoInf = 0xffffffffu;

// One format under test, described independently of float_types.h where it matters:
// is_nan, max_finite and inf come from the format specifications, not from braid's code.
struct Format {
  const char* name;
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
  bool (*is_nan)(uint32_t);
  uint32_t max_finite;  // largest finite bit pattern, positive sign
  uint32_t sign_bit;
  uint32_t inf;                 // +Inf bit pattern; kNoInf for e4m3fn
  uint32_t (*saturate)(float);  // fp8 only; null for f16 / bf16
};

const Format kFormats[] = {
    {"f16", [](float f) -> uint32_t { return half(f).bits; },
     [](uint32_t b) { return static_cast<float>(half::from_bits(static_cast<uint16_t>(b))); },
     [](uint32_t b) { return (b & 0x7fffu) > 0x7c00u; }, 0x7bffu, 0x8000u, 0x7c00u, nullptr},
    {"bf16", [](float f) -> uint32_t { return bfloat16(f).bits; },
     [](uint32_t b) { return static_cast<float>(bfloat16::from_bits(static_cast<uint16_t>(b))); },
     [](uint32_t b) { return (b & 0x7fffu) > 0x7f80u; }, 0x7f7fu, 0x8000u, 0x7f80u, nullptr},
    // e4m3fn: S.1111.111 is the only NaN; no Inf; max S.1111.110 = 448.
    {"e4m3fn", [](float f) -> uint32_t { return float8_e4m3fn(f).bits; },
     [](uint32_t b) {
       return static_cast<float>(float8_e4m3fn::from_bits(static_cast<uint8_t>(b)));
     },
     [](uint32_t b) { return (b & 0x7fu) == 0x7fu; }, 0x7eu, 0x80u, kNoInf,
     [](float f) -> uint32_t { return float8_e4m3fn::saturate(f).bits; }},
    // e5m2: IEEE-like, Inf S.11111.00, NaN S.11111.{01,10,11}; max S.11110.11 = 57344.
    {"e5m2", [](float f) -> uint32_t { return float8_e5m2(f).bits; },
     [](uint32_t b) { return static_cast<float>(float8_e5m2::from_bits(static_cast<uint8_t>(b))); },
     [](uint32_t b) { return (b & 0x7fu) > 0x7cu; }, 0x7bu, 0x80u, 0x7cu,
     [](float f) -> uint32_t { return float8_e5m2::saturate(f).bits; }},
};

void PrintTo(const Format& f, std::ostream* os) {
  *os << f.name;
}

uint32_t f32_bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
bool f32_is_nan(uint32_t b) {
  return (b & 0x7fffffffu) > 0x7f800000u;
}

// Cases as written by gen_dtype_golden.py: bit patterns widened to u32.
struct Cases {
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs;
};

std::string golden_path(const std::string& file) {
  return std::string(BRAID_GOLDEN_DIR) + "/" + file;
}

std::vector<uint32_t> widen(const std::string& bytes, size_t offset, size_t count, uint32_t size) {
  std::vector<uint32_t> out(count);
  for (size_t i = 0; i < count; ++i) {
    uint32_t v = 0;
    for (uint32_t b = 0; b < size; ++b) {
      v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[offset + i * size + b])) << (8 * b);
    }
    out[i] = v;
  }
  return out;
}

// Loads a golden file, or records a failure that says how to make it and returns nullopt.
std::optional<Cases> load(const std::string& file, uint32_t in_size, uint32_t out_size) {
  const std::string path = golden_path(file);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "golden file " << path << " is missing: generate it with "
                  << "`python3 tests/golden/gen_dtype_golden.py " << BRAID_GOLDEN_DIR
                  << "` (needs numpy and ml_dtypes; `ctest -L golden` runs it as the fixture)";
    return std::nullopt;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr size_t kHeader = 8 + 4 + 4 + 8;
  if (bytes.size() < kHeader || bytes.compare(0, 8, "BRDGOLD1") != 0) {
    ADD_FAILURE() << "golden file " << path << " has no BRDGOLD1 header: regenerate it with "
                  << "tests/golden/gen_dtype_golden.py";
    return std::nullopt;
  }
  uint32_t got_in = 0, got_out = 0;
  uint64_t count = 0;
  std::memcpy(&got_in, bytes.data() + 8, 4);  // little-endian host (x86-64, aarch64)
  std::memcpy(&got_out, bytes.data() + 12, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  const uint64_t expected_size = kHeader + count * (got_in + got_out);
  if (got_in != in_size || got_out != out_size || bytes.size() != expected_size) {
    ADD_FAILURE() << "golden file " << path << ": element sizes " << got_in << "/" << got_out
                  << " (expected " << in_size << "/" << out_size << "), " << bytes.size()
                  << " bytes (expected " << expected_size << "); regenerate it with "
                  << "tests/golden/gen_dtype_golden.py";
    return std::nullopt;
  }
  Cases cases;
  cases.inputs = widen(bytes, kHeader, count, in_size);
  cases.outputs = widen(bytes, kHeader + count * in_size, count, out_size);
  return cases;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

// Collects mismatches; prints the first few in full and the total.
class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  void add(uint32_t input, uint32_t want, uint32_t got) {
    if (count_++ < kShown) {
      detail_ << "\n  " << what_ << "(" << hex(input) << "): expected " << hex(want) << ", got "
              << hex(got);
    }
  }
  void check(size_t total) const {
    EXPECT_EQ(count_, 0u) << count_ << " of " << total << " cases differ" << detail_.str();
  }

 private:
  static constexpr size_t kShown = 20;
  std::string what_;
  size_t count_ = 0;
  std::ostringstream detail_;
};

uint32_t storage_bytes(const Format& f) {
  return f.max_finite > 0xffu ? 2 : 1;
}

class DtypeGolden : public ::testing::TestWithParam<Format> {};

TEST_P(DtypeGolden, DecodeEveryBitPattern) {
  const Format& f = GetParam();
  const auto cases = load(std::string("decode_") + f.name + ".bin", storage_bytes(f), 4);
  if (!cases) return;
  ASSERT_EQ(cases->inputs.size(), size_t{1} << (8 * storage_bytes(f)));
  Mismatches bad(std::string("decode_") + f.name);
  for (size_t i = 0; i < cases->inputs.size(); ++i) {
    const uint32_t want = cases->outputs[i];
    const uint32_t got = f32_bits(f.decode(cases->inputs[i]));
    const bool nan_match = f32_is_nan(want) && f32_is_nan(got) && (want >> 31) == (got >> 31);
    if (got != want && !nan_match) bad.add(cases->inputs[i], want, got);
  }
  bad.check(cases->inputs.size());
}

TEST_P(DtypeGolden, EncodeFromF32) {
  const Format& f = GetParam();
  const auto cases = load(std::string("encode_") + f.name + ".bin", 4, storage_bytes(f));
  if (!cases) return;
  ASSERT_GT(cases->inputs.size(), 1'000'000u);
  Mismatches bad(std::string("encode_") + f.name);
  for (size_t i = 0; i < cases->inputs.size(); ++i) {
    const uint32_t want = cases->outputs[i];
    const uint32_t got = f.encode(std::bit_cast<float>(cases->inputs[i]));
    const bool nan_match =
        f.is_nan(want) && f.is_nan(got) && (want & f.sign_bit) == (got & f.sign_bit);
    if (got != want && !nan_match) bad.add(cases->inputs[i], want, got);
  }
  bad.check(cases->inputs.size());
}

// Saturating fp8 conversion, derived from the reference's default conversion: a finite
// result is unchanged; overflow (Inf, or e4m3fn's NaN from a non-NaN input) and +-Inf
// inputs become the largest finite value of the input's sign; NaN stays NaN.
class Fp8SaturateGolden : public ::testing::TestWithParam<Format> {};

TEST_P(Fp8SaturateGolden, SaturatingEncodeFromF32) {
  const Format& f = GetParam();
  const auto cases = load(std::string("encode_") + f.name + ".bin", 4, storage_bytes(f));
  if (!cases) return;
  Mismatches bad(std::string("saturate_") + f.name);
  size_t saturated = 0;
  for (size_t i = 0; i < cases->inputs.size(); ++i) {
    const uint32_t in = cases->inputs[i];
    const uint32_t sign = (in >> 31) ? f.sign_bit : 0u;
    uint32_t want = cases->outputs[i];
    const bool overflowed = !f32_is_nan(in) && (f.is_nan(want) || (want & ~f.sign_bit) == f.inf);
    if (f32_is_nan(in)) {
      want = sign | 0x7fu;  // any NaN of the input's sign
    } else if (overflowed) {
      want = sign | f.max_finite;
      ++saturated;
    }
    const uint32_t got = f.saturate(std::bit_cast<float>(in));
    const bool nan_match =
        f.is_nan(want) && f.is_nan(got) && (want & f.sign_bit) == (got & f.sign_bit);
    if (got != want && !nan_match) bad.add(in, want, got);
  }
  bad.check(cases->inputs.size());
  EXPECT_GT(saturated, 1000u) << "the cases should include many overflows";
}

auto format_name = [](const auto& info) { return std::string(info.param.name); };
INSTANTIATE_TEST_SUITE_P(AllFormats, DtypeGolden, ::testing::ValuesIn(kFormats), format_name);
INSTANTIATE_TEST_SUITE_P(Fp8, Fp8SaturateGolden, ::testing::Values(kFormats[2], kFormats[3]),
                         format_name);

}  // namespace
}  // namespace braid
