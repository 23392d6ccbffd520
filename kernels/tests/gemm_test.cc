// gemm(): hand-checked products, every transpose combination, odd and empty sizes, padded
// leading dimensions (padding holds NaN, so reading it shows), batches with strides,
// alpha / beta (beta == 0 ignores a NaN C), f16 / bf16 inputs, every SIMD level against the
// scalar reference and against a long double product with a tolerance proportional to k.
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <random>
#include <vector>

#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;

// One batched problem with its buffers held as double, stored to the dtype on run().
struct Problem {
  Trans ta = Trans::kNo, tb = Trans::kNo;
  int64_t m = 0, n = 0, k = 0, pad = 0, batch = 1;
  double alpha = 1, beta = 0;
  std::vector<double> a, b, c;  // batch items back to back, each with its padded layout
  int64_t lda() const { return (ta == Trans::kYes ? m : k) + pad; }
  int64_t ldb() const { return (tb == Trans::kYes ? k : n) + pad; }
  int64_t ldc() const { return n + pad; }
  int64_t a_size() const { return (ta == Trans::kYes ? k : m) * lda(); }
  int64_t b_size() const { return (tb == Trans::kYes ? n : k) * ldb(); }
  int64_t c_size() const { return m * ldc(); }
  double A(int64_t bi, int64_t i, int64_t p) const {
    return ta == Trans::kYes ? a[bi * a_size() + p * lda() + i] : a[bi * a_size() + i * lda() + p];
  }
  double B(int64_t bi, int64_t p, int64_t j) const {
    return tb == Trans::kYes ? b[bi * b_size() + j * ldb() + p] : b[bi * b_size() + p * ldb() + j];
  }
};

// Random values in [-1, 1], NaN in every padding slot. C gets NaN when beta == 0.
Problem make_problem(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                     int64_t batch, double alpha, double beta, uint32_t seed) {
  Problem p;
  p.ta = ta, p.tb = tb, p.m = m, p.n = n, p.k = k, p.pad = pad, p.batch = batch;
  p.alpha = alpha, p.beta = beta;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  auto fill = [&](std::vector<double>& v, int64_t rows, int64_t cols, int64_t ld, bool nan_all) {
    v.assign(static_cast<size_t>(batch * rows * ld), NAN);
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols && !nan_all; ++c) v[(bi * rows + r) * ld + c] = d(rng);
      }
    }
  };
  fill(p.a, ta == Trans::kYes ? k : m, ta == Trans::kYes ? m : k, p.lda(), false);
  fill(p.b, tb == Trans::kYes ? n : k, tb == Trans::kYes ? k : n, p.ldb(), false);
  fill(p.c, m, n, p.ldc(), beta == 0);
  return p;
}

template <typename T>
std::vector<T> to(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = T(static_cast<float>(v[i]));
  return out;
}
template <>
std::vector<double> to<double>(const std::vector<double>& v) {
  return v;
}
template <typename T>
double as_double(T v) {
  return static_cast<float>(v);
}
template <>
double as_double<double>(double v) {
  return v;
}

// Runs the problem with inputs of type In and C of type C; returns C as double.
template <typename In, typename C>
std::vector<double> run(const Problem& p, CpuIsa isa) {
  const auto a = to<In>(p.a), b = to<In>(p.b);
  auto c = to<C>(p.c);
  GemmArgs g;
  g.trans_a = p.ta, g.trans_b = p.tb, g.m = p.m, g.n = p.n, g.k = p.k;
  g.alpha = p.alpha, g.beta = p.beta;
  g.a = a.data(), g.lda = p.lda(), g.b = b.data(), g.ldb = p.ldb(), g.c = c.data();
  g.ldc = p.ldc();
  g.ab_dtype = dtype_of<In>(), g.c_dtype = dtype_of<C>();
  g.batch = p.batch, g.stride_a = p.a_size(), g.stride_b = p.b_size(), g.stride_c = p.c_size();
  ScopedCpuIsa scope(isa);
  gemm(g);
  std::vector<double> out(c.size());
  for (size_t i = 0; i < c.size(); ++i) out[i] = as_double(c[i]);
  return out;
}

// Checks got against a long double product of the inputs as rounded to In, with
// |err| <= (k + 2) * eps * (|alpha| sum_p |A B| + |beta C|) + out_rel * |ref|; padding of C
// must be left untouched (NaN).
template <typename In>
void check_against_exact(const Problem& p, const std::vector<double>& got, double eps,
                         double out_rel, const std::string& what) {
  const auto a = to<In>(p.a), b = to<In>(p.b);
  Problem q = p;
  for (size_t i = 0; i < a.size(); ++i) q.a[i] = as_double(a[i]);
  for (size_t i = 0; i < b.size(); ++i) q.b[i] = as_double(b[i]);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.ldc(); ++j) {
        const int64_t idx = bi * p.c_size() + i * p.ldc() + j;
        if (j >= p.n) {
          EXPECT_TRUE(std::isnan(got[idx])) << what << ": padding of C was written";
          continue;
        }
        long double s = 0, mag = 0;
        for (int64_t pp = 0; pp < p.k; ++pp) {
          const long double t = static_cast<long double>(q.A(bi, i, pp)) * q.B(bi, pp, j);
          s += t;
          mag += std::fabs(t);
        }
        const double c0 = p.beta == 0 ? 0.0 : p.c[idx];
        const double ref = static_cast<double>(p.alpha * s) + p.beta * c0;
        const double tol =
            (p.k + 2) * eps *
                (std::fabs(p.alpha) * static_cast<double>(mag) + std::fabs(p.beta * c0)) +
            out_rel * std::fabs(ref) + 1e-300;
        ASSERT_NEAR(got[idx], ref, tol) << what << " batch " << bi << " (" << i << ", " << j << ")";
      }
    }
  }
}

struct Size {
  int64_t m, n, k;
};
const Size kSizes[] = {{1, 1, 1},
                       {0, 3, 2},
                       {3, 0, 2},
                       {2, 3, 0},
                       {1, 7, 5},
                       {7, 1, 9},
                       {5, 6, 1},
                       {17, 33, 9},
                       {33, 17, 65},
                       {64, 48, 64},
                       {65, 31, 70},
                       {3, 129, 17},
                       {130, 7, 33},
                       // packed kernels (>= 64 everywhere): odd k, and k over two slices
                       {96, 80, 131},
                       {70, 100, 601}};
const Trans kTrans[] = {Trans::kNo, Trans::kYes};

std::string describe(const Problem& p, CpuIsa isa) {
  std::ostringstream os;
  os << cpu_isa_name(isa) << " m " << p.m << " n " << p.n << " k " << p.k << " ta "
     << (p.ta == Trans::kYes) << " tb " << (p.tb == Trans::kYes) << " pad " << p.pad << " alpha "
     << p.alpha << " beta " << p.beta << " batch " << p.batch;
  return os.str();
}

template <typename T>
void native_sweep(double eps) {
  uint32_t seed = 1;
  for (const Size& s : kSizes) {
    for (Trans ta : kTrans) {
      for (Trans tb : kTrans) {
        for (int64_t pad : {0, 3}) {
          const double beta = pad == 0 ? 0.0 : -0.5;
          const Problem p = make_problem(ta, tb, s.m, s.n, s.k, pad, 2, 1.5, beta, seed++);
          const auto ref = run<T, T>(p, CpuIsa::kScalar);
          check_against_exact<T>(p, ref, eps, 0, describe(p, CpuIsa::kScalar));
          for (CpuIsa isa : testing::simd_isas()) {
            const auto got = run<T, T>(p, isa);
            check_against_exact<T>(p, got, eps, 0, describe(p, isa));
          }
        }
      }
    }
  }
}

TEST(Gemm, F32EveryLevelEveryTransposeAgainstExact) {
  native_sweep<float>(0x1p-24);
}
TEST(Gemm, F64EveryLevelEveryTransposeAgainstExact) {
  native_sweep<double>(0x1p-53);
}

TEST(Gemm, SimdMatchesScalarReferenceOnALargeProblem) {
  const Problem p = make_problem(Trans::kNo, Trans::kYes, 300, 200, 517, 5, 1, 1.0, 0.25, 42);
  const auto ref = run<float, float>(p, CpuIsa::kScalar);
  for (CpuIsa isa : testing::simd_isas()) {
    const auto got = run<float, float>(p, isa);
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t idx = i * p.ldc() + j;
        // Both are within (k + 2) eps sum|AB| of the exact product; sum|AB| <= k here.
        ASSERT_NEAR(got[idx], ref[idx], 2 * (p.k + 2) * 0x1p-24 * p.k) << describe(p, isa);
      }
    }
    check_against_exact<float>(p, got, 0x1p-24, 0, describe(p, isa));
  }
}

// Sizes of 64 and more in every dimension take the packed AVX-512 kernel: several k slices
// (256 deep), several row blocks (144), more than one column block (2048), partial tiles.
TEST(Gemm, LargeShapesEveryTransposeAgainstExact) {
  const Size sizes[] = {{64, 64, 64}, {150, 70, 300}, {77, 2100, 65}};
  uint32_t seed = 500;
  for (const Size& s : sizes) {
    for (Trans ta : kTrans) {
      for (Trans tb : kTrans) {
        for (double beta : {0.0, 0.5}) {
          const Problem p = make_problem(ta, tb, s.m, s.n, s.k, 1, 1, -1.25, beta, seed++);
          for (CpuIsa isa : testing::simd_isas()) {
            check_against_exact<float>(p, run<float, float>(p, isa), 0x1p-24, 0, describe(p, isa));
          }
        }
      }
    }
  }
}

// bf16 inputs at the sizes of the packed kernels (vdpbf16ps at avx512bf16, AMX tiles at amx):
// several 128-row blocks with a partial one, k over two slices and not a multiple of the
// 32-deep AMX tile, more than one column block, f32 and bf16 C.
TEST(Gemm, LargeBf16ShapesEveryTransposeAgainstExact) {
  const Size sizes[] = {{64, 64, 64}, {300, 70, 545}, {77, 2100, 65}, {130, 96, 1030}};
  uint32_t seed = 700;
  for (const Size& s : sizes) {
    for (Trans ta : kTrans) {
      for (Trans tb : kTrans) {
        for (double beta : {0.0, 0.5}) {
          const Problem p = make_problem(ta, tb, s.m, s.n, s.k, 1, 1, -1.25, beta, seed++);
          Problem pr = p;
          for (auto& v : pr.c) v = as_double(bfloat16(static_cast<float>(v)));
          for (CpuIsa isa : testing::simd_isas()) {
            check_against_exact<bfloat16>(p, run<bfloat16, float>(p, isa), 0x1p-24, 0,
                                          describe(p, isa));
            check_against_exact<bfloat16>(pr, run<bfloat16, bfloat16>(pr, isa), 0x1p-24, 0x1p-8,
                                          describe(pr, isa));
          }
        }
      }
    }
  }
}

// Few rows of A against a large B (gemm_bf16_avx512bf16.cc, "few rows": B read in place at the
// avx512bf16 and amx levels): m from 1 to 63, odd k and n, a partial last column block, both
// layouts of B, alpha and beta, f32 and bf16 C, a padded ldb.
TEST(Gemm, FewRowsBf16EveryLayoutAgainstExact) {
  const Size sizes[] = {{1, 64, 64}, {3, 100, 77}, {8, 300, 130}, {9, 65, 600}, {63, 97, 64}};
  uint32_t seed = 900;
  for (const Size& s : sizes) {
    for (Trans tb : kTrans) {
      for (double beta : {0.0, 0.5}) {
        const Problem p = make_problem(Trans::kNo, tb, s.m, s.n, s.k, 1, 3, -1.25, beta, seed++);
        Problem pr = p;
        for (auto& v : pr.c) v = as_double(bfloat16(static_cast<float>(v)));
        for (CpuIsa isa : testing::simd_isas()) {
          check_against_exact<bfloat16>(p, run<bfloat16, float>(p, isa), 0x1p-24, 0,
                                        describe(p, isa));
          check_against_exact<bfloat16>(pr, run<bfloat16, bfloat16>(pr, isa), 0x1p-24, 0x1p-8,
                                        describe(pr, isa));
        }
      }
    }
  }
}

// A bf16 C whose k spans more than one slice is summed in f32 and rounded by the epilogue; the
// packed path stages a block of columns at a time (gemm.cc, staged_width: here 1024 of m = 4096
// rows, so n = 1100 is a whole block and a partial one). The f32 sums must be those of the same
// product into an f32 C, whatever the block: C = bf16(f32 C) bit for bit at alpha 1, beta 0, and
// alpha A B + beta C within bf16 rounding otherwise; ldc padded, both layouts of B.
TEST(Gemm, Bf16CStagedByColumnBlocksMatchesTheF32Sums) {
  constexpr int64_t m = 4096, n = 1100, k = 520;
  uint32_t seed = 1200;
  for (Trans tb : kTrans) {
    for (CpuIsa isa : testing::simd_isas()) {
      const Problem p = make_problem(Trans::kNo, tb, m, n, k, 3, 1, 1.0, 0.0, seed++);
      const std::vector<double> sums = run<bfloat16, float>(p, isa);
      const std::vector<double> got = run<bfloat16, bfloat16>(p, isa);
      int64_t wrong = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double want =
            std::isnan(sums[i]) ? sums[i] : as_double(bfloat16(static_cast<float>(sums[i])));
        wrong += !(got[i] == want || (std::isnan(got[i]) && std::isnan(want)));
      }
      EXPECT_EQ(wrong, 0) << describe(p, isa);

      Problem q = p;
      q.alpha = -1.25, q.beta = 0.5;
      for (auto& v : q.c) v = as_double(bfloat16(static_cast<float>(v)));
      const std::vector<double> scaled = run<bfloat16, bfloat16>(q, isa);
      double worst = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const size_t at = static_cast<size_t>(i * q.ldc() + j);
          const double want = -1.25 * sums[at] + 0.5 * q.c[at];
          worst = std::max(worst, std::abs(scaled[at] - want) / (std::abs(want) + 1e-3));
        }
      }
      EXPECT_LE(worst, 0x1p-7) << describe(q, isa);  // bf16 rounding of the result
    }
  }
}

TEST(Gemm, HandChecked) {
  // A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]]: AB = [[58, 64], [139, 154]].
  const float a[6] = {1, 2, 3, 4, 5, 6}, at[6] = {1, 4, 2, 5, 3, 6};
  const float b[6] = {7, 8, 9, 10, 11, 12}, bt[6] = {7, 9, 11, 8, 10, 12};
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    for (Trans ta : kTrans) {
      for (Trans tb : kTrans) {
        float c[4] = {1, 1, 1, 1};
        GemmArgs g;
        g.trans_a = ta, g.trans_b = tb, g.m = 2, g.n = 2, g.k = 3, g.alpha = 2, g.beta = 1;
        g.a = ta == Trans::kYes ? at : a, g.lda = ta == Trans::kYes ? 2 : 3;
        g.b = tb == Trans::kYes ? bt : b, g.ldb = tb == Trans::kYes ? 3 : 2;
        g.c = c, g.ldc = 2;
        gemm(g);
        EXPECT_EQ(c[0], 117.0f) << cpu_isa_name(isa);
        EXPECT_EQ(c[1], 129.0f);
        EXPECT_EQ(c[2], 279.0f);
        EXPECT_EQ(c[3], 309.0f);
      }
    }
  }
}

TEST(Gemm, BetaZeroIgnoresNaNAndKZeroScales) {
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    const float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1};
    float c[4] = {NAN, NAN, INFINITY, NAN};
    GemmArgs g;
    g.m = 2, g.n = 2, g.k = 2, g.a = a, g.lda = 2, g.b = b, g.ldb = 2, g.c = c, g.ldc = 2;
    gemm(g);
    EXPECT_EQ(c[0], 1.0f) << cpu_isa_name(isa);
    EXPECT_EQ(c[3], 4.0f);
    g.k = 0, g.beta = 0.5;
    gemm(g);
    EXPECT_EQ(c[0], 0.5f);
    EXPECT_EQ(c[3], 2.0f);
    g.beta = 0;
    c[1] = NAN;
    gemm(g);
    for (float v : c) EXPECT_EQ(v, 0.0f);
    bfloat16 cb[4] = {bfloat16(NAN), bfloat16(NAN), bfloat16(NAN), bfloat16(NAN)};
    const bfloat16 ab[4] = {bfloat16(1.0f), bfloat16(2.0f), bfloat16(3.0f), bfloat16(4.0f)};
    g.k = 2, g.a = ab, g.b = ab, g.c = cb, g.ab_dtype = DType::kBF16, g.c_dtype = DType::kBF16;
    gemm(g);  // [[1, 2], [3, 4]]^2 = [[7, 10], [15, 22]]
    EXPECT_EQ(static_cast<float>(cb[0]), 7.0f);
    EXPECT_EQ(static_cast<float>(cb[3]), 22.0f);
  }
}

// f16 / bf16 inputs with an f64 C: beta C is computed in f64 (1 + 2^-40 is not an f32).
TEST(Gemm, F64OutputOfReducedInputsKeepsBetaCInF64) {
  const half a[2] = {half(1.0f), half(2.0f)}, b[2] = {half(3.0f), half(0.5f)};
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    double c = 1.0 + 0x1p-40;
    GemmArgs g;
    g.m = 1, g.n = 1, g.k = 2, g.a = a, g.lda = 2, g.b = b, g.ldb = 1, g.c = &c, g.ldc = 1;
    g.ab_dtype = DType::kF16, g.c_dtype = DType::kF64, g.alpha = 0.5, g.beta = 1.0;
    gemm(g);  // 0.5 * (1 * 3 + 2 * 0.5) + (1 + 2^-40)
    EXPECT_EQ(c, 3.0 + 0x1p-40) << cpu_isa_name(isa);
  }
}

TEST(Gemm, BatchWithBroadcastA) {
  // stride_a = 0: every batch item multiplies the same A.
  Problem p = make_problem(Trans::kNo, Trans::kNo, 5, 4, 3, 1, 3, 1.0, 0.0, 9);
  for (int64_t bi = 1; bi < 3; ++bi) {
    for (int64_t i = 0; i < p.a_size(); ++i) p.a[bi * p.a_size() + i] = p.a[i];
  }
  for (CpuIsa isa : testing::supported_isas()) {
    const auto a = to<float>(p.a), b = to<float>(p.b);
    auto c = to<float>(p.c);
    GemmArgs g;
    g.m = p.m, g.n = p.n, g.k = p.k, g.a = a.data(), g.lda = p.lda(), g.b = b.data();
    g.ldb = p.ldb(), g.c = c.data(), g.ldc = p.ldc(), g.batch = 3, g.stride_a = 0;
    g.stride_b = p.b_size(), g.stride_c = p.c_size();
    ScopedCpuIsa scope(isa);
    gemm(g);
    std::vector<double> got(c.begin(), c.end());
    check_against_exact<float>(p, got, 0x1p-24, 0, describe(p, isa));
  }
}

template <typename In>
void reduced_sweep() {
  const double in_rel = std::is_same_v<In, half> ? 0x1p-11 : 0x1p-8;
  uint32_t seed = 100;
  for (const Size& s : kSizes) {
    for (Trans ta : kTrans) {
      for (Trans tb : kTrans) {
        const Problem p = make_problem(ta, tb, s.m, s.n, s.k, 2, 2, 0.75, 0.5, seed++);
        for (CpuIsa isa : testing::supported_isas()) {
          // Accumulated in f32: the f32 bound applies to the widened inputs.
          check_against_exact<In>(p, run<In, float>(p, isa), 0x1p-24, 0, describe(p, isa));
          check_against_exact<In>(p, run<In, double>(p, isa), 0x1p-24, 0, describe(p, isa));
          // Rounded once to the input type on store; beta C read from the reduced C.
          Problem pr = p;
          for (auto& v : pr.c) v = as_double(In(static_cast<float>(v)));
          check_against_exact<In>(pr, run<In, In>(pr, isa), 0x1p-24, in_rel, describe(p, isa));
        }
      }
    }
  }
}

TEST(Gemm, F16InputsAccumulateInF32) {
  reduced_sweep<half>();
}
TEST(Gemm, BF16InputsAccumulateInF32) {
  reduced_sweep<bfloat16>();
}

// Note [GEMM threads]: the thread count never changes a bit of C, for every level, transpose,
// dtype and batch shape (batches split by item, single items by column blocks where allowed).
TEST(Gemm, ThreadCountNeverChangesTheBits) {
  const int saved = get_num_threads();
  struct Case {
    int64_t m, n, k, batch;
  };
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    for (Case cs : {Case{200, 333, 100, 1}, Case{64, 64, 64, 1}, Case{130, 127, 65, 1},
                    Case{70, 300, 90, 3}, Case{16, 40, 8, 5}}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        for (int tr = 0; tr < 4; ++tr) {
          const Trans ta = tr & 1 ? Trans::kYes : Trans::kNo,
                      tb = tr & 2 ? Trans::kYes : Trans::kNo;
          const auto a32 = testing::random_f32(cs.batch * cs.m * cs.k, 11, -1, 1);
          const auto b32 = testing::random_f32(cs.batch * cs.k * cs.n, 12, -1, 1);
          std::vector<uint16_t> a16(a32.size()), b16(b32.size());
          cast(a32.data(), DType::kF32, a16.data(), DType::kBF16, int64_t(a32.size()));
          cast(b32.data(), DType::kF32, b16.data(), DType::kBF16, int64_t(b32.size()));
          std::vector<float> ref;
          for (int threads : {1, 2, 3, 4}) {
            set_num_threads(threads);
            std::vector<float> c(size_t(cs.batch * cs.m * cs.n), -7.0f);
            GemmArgs g;
            g.trans_a = ta;
            g.trans_b = tb;
            g.m = cs.m, g.n = cs.n, g.k = cs.k;
            g.a = dt == DType::kF32 ? static_cast<const void*>(a32.data()) : a16.data();
            g.b = dt == DType::kF32 ? static_cast<const void*>(b32.data()) : b16.data();
            g.lda = ta == Trans::kYes ? cs.m : cs.k;
            g.ldb = tb == Trans::kYes ? cs.k : cs.n;
            g.c = c.data();
            g.ldc = cs.n;
            g.ab_dtype = dt;
            g.c_dtype = DType::kF32;
            g.alpha = 0.5;
            g.beta = 0.25;
            g.batch = cs.batch;
            g.stride_a = cs.m * cs.k, g.stride_b = cs.k * cs.n, g.stride_c = cs.m * cs.n;
            gemm(g);
            if (threads == 1) {
              ref = c;
            } else {
              ASSERT_EQ(0, std::memcmp(ref.data(), c.data(), c.size() * sizeof(float)))
                  << cpu_isa_name(isa) << " " << dtype_name(dt) << " m=" << cs.m << " n=" << cs.n
                  << " k=" << cs.k << " batch=" << cs.batch << " trans=" << tr
                  << " threads=" << threads;
            }
          }
        }
      }
    }
  }
  set_num_threads(saved);
}

TEST(Gemm, BadInput) {
  float a[16] = {}, b[16] = {}, c[16] = {};
  GemmArgs g;
  g.m = 2, g.n = 2, g.k = 3, g.a = a, g.lda = 3, g.b = b, g.ldb = 2, g.c = c, g.ldc = 2;
  gemm(g);  // valid as given
  auto with = [&](auto change) {
    GemmArgs h = g;
    change(h);
    return [h] { gemm(h); };
  };
  expect_error(with([](GemmArgs& h) { h.lda = 2; }), ErrorKind::kInvalidArgument, {"lda 2", "3"});
  expect_error(with([](GemmArgs& h) { h.trans_b = Trans::kYes; }), ErrorKind::kInvalidArgument,
               {"ldb 2", "3"});
  expect_error(with([](GemmArgs& h) { h.ldc = 1; }), ErrorKind::kInvalidArgument, {"ldc 1"});
  expect_error(with([](GemmArgs& h) { h.m = -1; }), ErrorKind::kInvalidArgument, {"m -1"});
  expect_error(with([](GemmArgs& h) { h.c_dtype = DType::kF64; }), ErrorKind::kNotSupported,
               {"c_dtype f64", "f32"});
  expect_error(with([](GemmArgs& h) { h.ab_dtype = DType::kI32; }), ErrorKind::kNotSupported,
               {"ab_dtype i32"});
  expect_error(with([](GemmArgs& h) { h.batch = 2, h.stride_c = 3; }), ErrorKind::kInvalidArgument,
               {"stride_c 3", "overlap"});
  expect_error(with([](GemmArgs& h) { h.b = nullptr; }), ErrorKind::kInvalidArgument, {"null"});
  expect_error(with([](GemmArgs& h) { h.stride_a = -1; }), ErrorKind::kInvalidArgument, {"a -1"});
}

}  // namespace
}  // namespace braid::kernels::cpu
