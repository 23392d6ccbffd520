// Tests of core/rng.h: Philox4x32-10 against Random123's known-answer vectors, the
// (seed, offset) -> numbers mapping of docs/rng.md, the offset rule, distributions, state
// bytes, the default generators and set_seed.
#include "braid/core/rng.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/error.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

// ---- known answers -----------------------------------------------------------------------
// Random123 1.14, tests/kat_vectors, lines "philox4x32 10 <ctr x4> <key x2> <out x4>".
struct Kat {
  PhiloxCounter ctr;
  PhiloxKey key;
  PhiloxCounter out;
};
constexpr Kat kKats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    // the digits of pi
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

static_assert(philox4x32_10(kKats[0].ctr, kKats[0].key) == kKats[0].out);
static_assert(philox4x32_10(kKats[2].ctr, kKats[2].key) == kKats[2].out);

TEST(Philox, KnownAnswerVectors) {
  for (const Kat& k : kKats) {
    EXPECT_EQ(philox4x32_10(k.ctr, k.key), k.out) << "counter 0x" << std::hex << k.ctr[0];
  }
}

// Word k of the stream, straight from docs/rng.md.
uint32_t word(uint64_t seed, uint64_t k) {
  return philox4x32_10(philox_counter(k / 4), philox_key(seed))[k % 4];
}

// ---- the documented mapping --------------------------------------------------------------

TEST(Generator, SeedZeroStartsWithTheZeroKnownAnswer) {
  // Seed 0, offset 0 is counter 0 / key 0: the first Random123 vector.
  Generator gen(0);
  float u[4];
  gen.fill_uniform(u, 4);
  const uint32_t words[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(u[i], std::ldexp(float(words[i] >> 8), -24)) << i;
}

TEST(Generator, UniformAndRandintFollowTheMapping) {
  const uint64_t seed = 0x0123456789abcdefull;
  Generator gen(seed);
  gen.set_offset(40);
  std::vector<float> f(7);
  gen.fill_uniform(f.data(), 7);  // words 40..46
  for (int i = 0; i < 7; ++i) EXPECT_EQ(f[i], std::ldexp(float(word(seed, 40 + i) >> 8), -24));
  EXPECT_EQ(gen.offset(), 48u);
  std::vector<double> d(3);
  gen.fill_uniform(d.data(), 3);  // words 48..53: low word first
  for (int i = 0; i < 3; ++i) {
    const uint64_t x = word(seed, 48 + 2 * i) | (uint64_t{word(seed, 49 + 2 * i)} << 32);
    EXPECT_EQ(d[i], std::ldexp(double(x >> 11), -53));
  }
  EXPECT_EQ(gen.offset(), 56u);
  std::vector<int64_t> r(2);
  gen.fill_randint(r.data(), 2, -10, 1000);  // words 56..59
  for (int i = 0; i < 2; ++i) {
    const uint64_t x = word(seed, 56 + 2 * i) | (uint64_t{word(seed, 57 + 2 * i)} << 32);
    EXPECT_EQ(r[i], -10 + static_cast<int64_t>(x % 1010));
  }
}

TEST(Generator, NormalFollowsTheMapping) {
  const uint64_t seed = 77;
  Generator gen(seed);
  float z[3];
  gen.fill_normal(z, 3, 1.0f, 2.0f);  // pairs (words 0,1) and (2,3)
  for (int j = 0; j < 2; ++j) {
    const double u1 = (double(word(seed, 2 * j) >> 8) + 1) / 16777216.0;
    const double u2 = double(word(seed, 2 * j + 1) >> 8) / 16777216.0;
    const double r = std::sqrt(-2 * std::log(u1));
    const double theta = 2 * std::numbers::pi * u2;
    EXPECT_NEAR(z[2 * j], 1 + 2 * r * std::cos(theta), 1e-5);
    if (j == 0) {
      EXPECT_NEAR(z[1], 1 + 2 * r * std::sin(theta), 1e-5);
    }
  }
  EXPECT_EQ(gen.offset(), 4u);
}

// ---- the offset rule ---------------------------------------------------------------------

TEST(Generator, OffsetAdvancesByWholeBlocks) {
  Generator gen(5);
  std::vector<float> f(9);
  std::vector<double> d(9);
  std::vector<int64_t> i(9);
  gen.fill_uniform(f.data(), 0);
  EXPECT_EQ(gen.offset(), 0u) << "a draw of nothing reads nothing";
  gen.fill_uniform(f.data(), 3);  // 3 words -> 4
  EXPECT_EQ(gen.offset(), 4u);
  gen.fill_uniform(f.data(), 4);  // 4 words
  EXPECT_EQ(gen.offset(), 8u);
  gen.fill_uniform(f.data(), 5);  // 5 words -> 8
  EXPECT_EQ(gen.offset(), 16u);
  gen.fill_uniform(d.data(), 3);  // 6 words -> 8
  EXPECT_EQ(gen.offset(), 24u);
  gen.fill_normal(f.data(), 3);  // 2 pairs x 2 words
  EXPECT_EQ(gen.offset(), 28u);
  gen.fill_normal(d.data(), 3);  // 2 pairs x 4 words
  EXPECT_EQ(gen.offset(), 36u);
  gen.fill_randint(i.data(), 1, 0, 2);  // 2 words -> 4
  EXPECT_EQ(gen.offset(), 40u);
  gen.fill_randperm(i.data(), 5);  // 10 words -> 12
  EXPECT_EQ(gen.offset(), 52u);
  gen.uniform();
  EXPECT_EQ(gen.offset(), 56u);
}

TEST(Generator, ADrawDependsOnlyOnWhereItStarts) {
  // Two draws of 2 and one draw of 4 end at different offsets; what comes next depends only
  // on that offset, never on the sizes of earlier draws.
  Generator split(9), whole(9);
  float a[2], b[4];
  split.fill_uniform(a, 2);
  split.fill_uniform(a, 2);
  whole.fill_uniform(b, 4);
  whole.set_offset(split.offset());
  float x[6], y[6];
  split.fill_uniform(x, 6);
  whole.fill_uniform(y, 6);
  EXPECT_TRUE(std::equal(x, x + 6, y));
  // And single draws are draws of one element: uniform() k reads word 4k.
  Generator single(9);
  for (uint64_t k = 0; k < 5; ++k) {
    EXPECT_EQ(single.uniform(), std::ldexp(float(word(9, 4 * k) >> 8), -24));
  }
}

TEST(Generator, SetOffsetRejectsPartialBlocks) {
  Generator gen;
  try {
    gen.set_offset(6);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("offset 6"));
  }
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Generator, StreamEndIsAnError) {
  Generator gen;
  gen.set_offset(std::numeric_limits<uint64_t>::max() - 7);  // two blocks before the end
  float f[4];
  gen.fill_uniform(f, 4);
  try {
    gen.fill_uniform(f, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_THAT(e.message(), HasSubstr("fill_uniform"));
  }
}

// ---- distributions -----------------------------------------------------------------------

template <typename T>
void expect_moments(const std::vector<T>& v, double mean, double var, double tol_mean,
                    double tol_var) {
  const double m = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double s = 0;
  for (T x : v) s += (x - m) * (x - m);
  EXPECT_NEAR(m, mean, tol_mean);
  EXPECT_NEAR(s / v.size(), var, tol_var);
}

TEST(Generator, UniformRangeAndMoments) {
  Generator gen(1234);
  std::vector<float> f(1'000'000);
  gen.fill_uniform(f.data(), f.size());
  EXPECT_GE(*std::min_element(f.begin(), f.end()), 0.0f);
  EXPECT_LT(*std::max_element(f.begin(), f.end()), 1.0f);
  expect_moments(f, 0.5, 1.0 / 12, 0.005, 0.002);  // sd of the mean is 0.0003
  std::vector<double> d(1'000'000);
  gen.fill_uniform(d.data(), d.size());
  EXPECT_GE(*std::min_element(d.begin(), d.end()), 0.0);
  EXPECT_LT(*std::max_element(d.begin(), d.end()), 1.0);
  expect_moments(d, 0.5, 1.0 / 12, 0.005, 0.002);
}

TEST(Generator, NormalMoments) {
  Generator gen(99);
  std::vector<float> f(1'000'001);  // odd: the last pair is half used
  gen.fill_normal(f.data(), f.size());
  expect_moments(f, 0.0, 1.0, 0.01, 0.01);  // sd of the mean 0.001, of the variance 0.0014
  EXPECT_TRUE(std::all_of(f.begin(), f.end(), [](float x) { return std::isfinite(x); }));
  std::vector<double> d(1'000'000);
  gen.fill_normal(d.data(), d.size(), 3.0, 2.0);
  expect_moments(d, 3.0, 4.0, 0.02, 0.04);
  EXPECT_NEAR(gen.normal_double(5.0, 0.0), 5.0, 0.0);  // std 0 gives the mean
}

TEST(Generator, NormalRejectsBadArguments) {
  Generator gen;
  float f[2];
  try {
    gen.fill_normal(f, 2, 0.0f, -1.0f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("std -1"));
  }
  EXPECT_THROW(gen.normal(std::numeric_limits<float>::quiet_NaN()), Error);
  EXPECT_EQ(gen.offset(), 0u) << "a rejected draw reads nothing";
}

TEST(Generator, FillRejectsBadCounts) {
  Generator gen;
  try {
    gen.fill_uniform(static_cast<float*>(nullptr), 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("null"));
  }
  float f[1];
  try {
    gen.fill_uniform(f, -1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("count -1"));
  }
  gen.fill_uniform(static_cast<double*>(nullptr), 0);  // nothing to write: fine
}

TEST(Generator, RandintBoundsAndCoverage) {
  Generator gen(3);
  std::vector<int64_t> v(10'000);
  gen.fill_randint(v.data(), v.size(), -3, 4);
  std::map<int64_t, int> seen;
  for (int64_t x : v) ++seen[x];
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen.begin()->first, -3);
  EXPECT_EQ(seen.rbegin()->first, 3);
  for (auto [value, count] : seen) EXPECT_GT(count, 1200) << value;  // expected 1429 each
  EXPECT_EQ(gen.randint(41, 42), 41);
  // The widest range: high - low = 2^64 - 1 must not overflow.
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  bool negative = false, positive = false;
  for (int i = 0; i < 64; ++i) {
    const int64_t x = gen.randint(lo, hi);
    EXPECT_LT(x, hi);
    (x < 0 ? negative : positive) = true;
  }
  EXPECT_TRUE(negative && positive);
}

TEST(Generator, RandintRejectsEmptyRange) {
  Generator gen;
  try {
    gen.randint(5, 5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("[5, 5)"));
  }
  EXPECT_THROW(gen.randint(2, -2), Error);
}

TEST(Generator, RandpermIsAPermutation) {
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    Generator gen(n);
    std::vector<int64_t> p = gen.randperm(n);
    ASSERT_EQ(p.size(), static_cast<size_t>(n));
    std::sort(p.begin(), p.end());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(p[i], i);
  }
  Generator a(1), b(2), a2(1);
  const auto pa = a.randperm(1000);
  EXPECT_NE(pa, b.randperm(1000));
  EXPECT_EQ(pa, a2.randperm(1000));
  EXPECT_NE(pa, a.randperm(1000)) << "the next draw continues the stream";
  EXPECT_THROW(a.randperm(-1), Error);
}

TEST(Generator, RandpermOfThreeHitsEveryOrder) {
  Generator gen(11);
  std::map<std::vector<int64_t>, int> seen;
  for (int i = 0; i < 6000; ++i) ++seen[gen.randperm(3)];
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& [perm, count] : seen) EXPECT_GT(count, 850);  // expected 1000 each
}

// ---- state -------------------------------------------------------------------------------

TEST(Generator, StateRoundTripReplaysTheContinuation) {
  Generator gen(2024);
  float warm[5];
  gen.fill_uniform(warm, 5);
  const std::vector<uint8_t> state = gen.get_state();
  ASSERT_EQ(state.size(), Generator::kStateBytes);
  EXPECT_EQ(std::string(state.begin(), state.begin() + 4), "BRNG");
  EXPECT_EQ(state[4], 1);     // version, little-endian
  EXPECT_EQ(state[8], 0xe8);  // seed 2024 = 0x7e8
  EXPECT_EQ(state[9], 0x07);
  EXPECT_EQ(state[16], 8);  // offset
  std::vector<float> first(100), again(100), other(100);
  gen.fill_normal(first.data(), 100);
  gen.set_state(state);
  gen.fill_normal(again.data(), 100);
  EXPECT_EQ(first, again);
  Generator fresh(7);
  fresh.set_state(state);
  EXPECT_EQ(fresh.seed(), 2024u);
  fresh.fill_normal(other.data(), 100);
  EXPECT_EQ(first, other);
}

void expect_corrupt(std::vector<uint8_t> bytes, const std::string& needle) {
  Generator gen(3);
  gen.uniform();
  try {
    gen.set_state(bytes);
    FAIL() << "expected kCorruptData for " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
    EXPECT_THAT(e.message(), HasSubstr(needle));
  }
  EXPECT_EQ(gen.seed(), 3u) << "a rejected state leaves the generator as it was";
  EXPECT_EQ(gen.offset(), 4u);
}

TEST(Generator, BadStateBytesAreCorruptData) {
  const std::vector<uint8_t> good = Generator(1).get_state();
  expect_corrupt({}, "0 bytes");
  expect_corrupt(std::vector<uint8_t>(good.begin(), good.end() - 1), "23 bytes");
  auto longer = good;
  longer.push_back(0);
  expect_corrupt(longer, "25 bytes");
  auto magic = good;
  magic[0] = 'X';
  expect_corrupt(magic, "BRNG");
  auto version = good;
  version[4] = 2;
  expect_corrupt(version, "version 2");
  auto offset = good;
  offset[16] = 6;
  expect_corrupt(offset, "offset 6");
}

// ---- threads -----------------------------------------------------------------------------

TEST(Generator, ConcurrentDrawsTakeDisjointBlocks) {
  // However the threads interleave, every block is handed out exactly once.
  constexpr int kThreads = 4, kDraws = 500;
  Generator shared(21);
  std::vector<std::vector<float>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kDraws; ++i) {
        float f[4];
        shared.fill_uniform(f, 4);
        got[t].insert(got[t].end(), f, f + 4);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<float> all, expected(kThreads * kDraws * 4);
  for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
  Generator(21).fill_uniform(expected.data(), expected.size());
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  EXPECT_EQ(shared.offset(), uint64_t{kThreads * kDraws * 4});
}

// ---- process-wide ------------------------------------------------------------------------

TEST(DefaultGenerator, OnePerDevice) {
  Generator& cpu = default_generator();
  EXPECT_EQ(&cpu, &default_generator(kCPU));
  Generator& cuda0 = default_generator(Device(DeviceType::kCUDA, 0));
  Generator& cuda1 = default_generator(Device(DeviceType::kCUDA, 1));
  EXPECT_NE(&cpu, &cuda0);
  EXPECT_NE(&cuda0, &cuda1);
  EXPECT_EQ(&cuda1, &default_generator(Device(DeviceType::kCUDA, 1)));
  EXPECT_THROW(default_generator(Device(DeviceType::kCUDA, -1)), Error);
}

TEST(SetSeed, SeedsExistingAndFutureDefaultGenerators) {
  Generator& cpu = default_generator();
  cpu.uniform();
  set_seed(555);
  EXPECT_EQ(cpu.seed(), 555u);
  EXPECT_EQ(cpu.offset(), 0u);
  EXPECT_EQ(default_generator(Device(DeviceType::kHIP, 3)).seed(), 555u);  // created now
  Generator reference(555);
  EXPECT_EQ(cpu.uniform(), reference.uniform());
}

// Sets or clears RANK for one test and restores it after.
class ScopedRank {
 public:
  explicit ScopedRank(const char* value) {
    if (const char* old = std::getenv("RANK")) saved_ = old, had_ = true;
    value ? setenv("RANK", value, 1) : unsetenv("RANK");
  }
  ~ScopedRank() { had_ ? setenv("RANK", saved_.c_str(), 1) : unsetenv("RANK"); }

 private:
  std::string saved_;
  bool had_ = false;
};

TEST(SetSeed, DeviceSpecificAddsTheRank) {
  std::vector<float> unset(16), rank3(16);
  {
    ScopedRank rank(nullptr);
    set_seed(100, /*device_specific=*/true);
    EXPECT_EQ(default_generator().seed(), 100u);
    default_generator().fill_uniform(unset.data(), 16);
  }
  {
    ScopedRank rank("3");
    set_seed(100, /*device_specific=*/true);
    EXPECT_EQ(default_generator().seed(), 103u);
    default_generator().fill_uniform(rank3.data(), 16);
    set_seed(100);  // not device specific: the rank is ignored
    EXPECT_EQ(default_generator().seed(), 100u);
  }
  EXPECT_NE(unset, rank3);
}

TEST(SetSeed, BadRankIsAnError) {
  ScopedRank rank("two");
  EXPECT_NO_THROW(set_seed(1, /*device_specific=*/false)) << "RANK is read only when asked";
  try {
    set_seed(1, /*device_specific=*/true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("RANK"));
    EXPECT_THAT(e.message(), HasSubstr("two"));
  }
  ScopedRank negative("-1");
  try {
    set_seed(1, /*device_specific=*/true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("RANK=-1"));
  }
}

TEST(SetSeed, DeterministicFlag) {
  set_deterministic_algorithms(false);
  set_seed(1);
  EXPECT_FALSE(deterministic_algorithms());
  set_seed(1, false, /*deterministic=*/true);
  EXPECT_TRUE(deterministic_algorithms());
  set_seed(1, false, /*deterministic=*/false);
  EXPECT_TRUE(deterministic_algorithms()) << "false leaves the flag as it is, as Accelerate";
  set_deterministic_algorithms(false);
  EXPECT_FALSE(deterministic_algorithms());
}

}  // namespace
}  // namespace braid
