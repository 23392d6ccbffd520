// kernels::cpu::causal_attention_forward / _backward: every SIMD level against the scalar
// reference, the reference against a plain f64 transcription of the formulas, the backward
// (with dropout) against central finite differences in f64, bit-identical results for any
// thread count, the dropout mask's rule, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "braid/core/cpu_features.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/core/rng.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"

namespace braid::kernels::cpu {
namespace {

std::vector<CpuIsa> simd_levels() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

AttentionArgs make_args(int64_t b, int64_t t, int64_t nh, int64_t hd, DType dtype, double p = 0.0) {
  AttentionArgs a;
  a.batch = b;
  a.seq = t;
  a.n_head = nh;
  a.head_dim = hd;
  a.dtype = dtype;
  a.dropout_p = p;
  a.dropout_seed = 1234;
  a.dropout_offset = 8;
  return a;
}

int64_t qkv_count(const AttentionArgs& a) {
  return a.batch * a.seq * 3 * a.n_head * a.head_dim;
}
int64_t out_count(const AttentionArgs& a) {
  return a.batch * a.seq * a.n_head * a.head_dim;
}

std::vector<double> random_values(int64_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

// Values stored in `dtype` as raw bytes, and back to double.
std::vector<uint8_t> encode(const std::vector<double>& v, DType dtype) {
  std::vector<uint8_t> out(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::kF64:
        reinterpret_cast<double*>(out.data())[i] = v[i];
        break;
      case DType::kF32:
        reinterpret_cast<float*>(out.data())[i] = static_cast<float>(v[i]);
        break;
      case DType::kBF16:
        reinterpret_cast<bfloat16*>(out.data())[i] = bfloat16(static_cast<float>(v[i]));
        break;
      case DType::kF16:
        reinterpret_cast<half*>(out.data())[i] = half(static_cast<float>(v[i]));
        break;
      default:
        ADD_FAILURE() << "dtype";
    }
  }
  return out;
}
std::vector<double> decode(const std::vector<uint8_t>& bytes, DType dtype) {
  const size_t n = bytes.size() / dtype_size(dtype);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kF64:
        out[i] = reinterpret_cast<const double*>(bytes.data())[i];
        break;
      case DType::kF32:
        out[i] = reinterpret_cast<const float*>(bytes.data())[i];
        break;
      case DType::kBF16:
        out[i] = static_cast<float>(reinterpret_cast<const bfloat16*>(bytes.data())[i]);
        break;
      case DType::kF16:
        out[i] = static_cast<float>(reinterpret_cast<const half*>(bytes.data())[i]);
        break;
      default:
        ADD_FAILURE() << "dtype";
    }
  }
  return out;
}

struct Result {
  std::vector<uint8_t> out, dqkv;
};

Result run_both(const AttentionArgs& a, const std::vector<uint8_t>& qkv,
                const std::vector<uint8_t>& dout) {
  Result r;
  r.out.resize(static_cast<size_t>(out_count(a)) * dtype_size(a.dtype));
  r.dqkv.resize(qkv.size());
  causal_attention_forward(a, qkv.data(), r.out.data());
  causal_attention_backward(a, qkv.data(), dout.data(), r.dqkv.data());
  return r;
}

// The formulas, written out in f64 with whole softmax rows (no rounding points).
void naive_f64(const AttentionArgs& a, const std::vector<double>& qkv, const std::vector<double>& g,
               std::vector<double>& out, std::vector<double>& dqkv) {
  const int64_t t_len = a.seq, hd = a.head_dim, c = a.n_head * hd;
  out.assign(static_cast<size_t>(out_count(a)), 0.0);
  dqkv.assign(qkv.size(), 0.0);
  const auto q = [&](int64_t b, int64_t h, int64_t i, int64_t k, int part) -> size_t {
    return static_cast<size_t>((b * t_len + i) * 3 * c + part * c + h * hd + k);
  };
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < a.n_head; ++h) {
      for (int64_t i = 0; i < t_len; ++i) {
        std::vector<double> p(static_cast<size_t>(i + 1));
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t k = 0; k < hd; ++k) s += qkv[q(b, h, i, k, 0)] * qkv[q(b, h, j, k, 1)];
          p[j] = s / std::sqrt(double(hd));
          m = std::max(m, p[j]);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - m));
        for (double& x : p) x /= sum;
        const size_t orow = static_cast<size_t>((b * t_len + i) * c + h * hd);
        for (int64_t k = 0; k < hd; ++k) {
          for (int64_t j = 0; j <= i; ++j) out[orow + k] += p[j] * qkv[q(b, h, j, k, 2)];
        }
        std::vector<double> dp(p.size());
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t k = 0; k < hd; ++k) dp[j] += g[orow + k] * qkv[q(b, h, j, k, 2)];
          dot += dp[j] * p[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - dot) / std::sqrt(double(hd));
          for (int64_t k = 0; k < hd; ++k) {
            dqkv[q(b, h, i, k, 0)] += ds * qkv[q(b, h, j, k, 1)];
            dqkv[q(b, h, j, k, 1)] += ds * qkv[q(b, h, i, k, 0)];
            dqkv[q(b, h, j, k, 2)] += p[j] * g[orow + k];
          }
        }
      }
    }
  }
}

// max |x - y| / (atol + rtol * max |y|)  <= 1 expected.
void expect_close(const std::vector<double>& x, const std::vector<double>& y, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(x.size(), y.size()) << what;
  double ymax = 0;
  for (double v : y) ymax = std::max(ymax, std::abs(v));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::abs(x[i] - y[i]);
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  EXPECT_LE(worst, atol + rtol * ymax)
      << what << ": element " << at << " got " << x[at] << " expected " << y[at];
}

struct Shape4 {
  int64_t b, t, nh, hd;
};
// head_dim 32 / 64 / 128 with T not a whole number of 32-row blocks also run the amx path.
const Shape4 kShapes[] = {{1, 1, 1, 4},    {2, 5, 2, 4},   {1, 64, 2, 16}, {2, 70, 3, 8},
                          {1, 130, 2, 64}, {2, 45, 2, 32}, {1, 33, 1, 128}};

double tol_for(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 1e-12;
    case DType::kF32:
      return 2e-5;
    default:
      return 3e-2;  // a few 16-bit ulps: rounding points see different f32 sums
  }
}

TEST(AttentionKernel, ReferenceMatchesTheFormulasInF64) {
  ScopedCpuIsa level(CpuIsa::kScalar);
  for (const Shape4& s : kShapes) {
    const AttentionArgs a = make_args(s.b, s.t, s.nh, s.hd, DType::kF64);
    const auto qkv = random_values(qkv_count(a), 1);
    const auto g = random_values(out_count(a), 2);
    std::vector<double> out, dqkv;
    naive_f64(a, qkv, g, out, dqkv);
    const Result r = run_both(a, encode(qkv, DType::kF64), encode(g, DType::kF64));
    expect_close(decode(r.out, DType::kF64), out, 1e-13, 1e-13, "out");
    expect_close(decode(r.dqkv, DType::kF64), dqkv, 1e-13, 1e-13, "dqkv");
  }
}

TEST(AttentionKernel, EverySimdLevelMatchesTheReference) {
  for (DType dtype : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16}) {
    for (double p : {0.0, 0.25}) {
      for (const Shape4& s : kShapes) {
        const AttentionArgs a = make_args(s.b, s.t, s.nh, s.hd, dtype, p);
        const auto qkv = encode(random_values(qkv_count(a), 3), dtype);
        const auto g = encode(random_values(out_count(a), 4), dtype);
        Result ref;
        {
          ScopedCpuIsa level(CpuIsa::kScalar);
          ref = run_both(a, qkv, g);
        }
        for (CpuIsa isa : simd_levels()) {
          ScopedCpuIsa level(isa);
          const Result r = run_both(a, qkv, g);
          const std::string what = std::string(dtype_name(dtype)) + " p " + std::to_string(p) +
                                   " T " + std::to_string(s.t) + " " +
                                   std::string(cpu_isa_name(isa));
          expect_close(decode(r.out, dtype), decode(ref.out, dtype), tol_for(dtype), tol_for(dtype),
                       what + " out");
          expect_close(decode(r.dqkv, dtype), decode(ref.dqkv, dtype), tol_for(dtype),
                       tol_for(dtype), what + " dqkv");
        }
      }
    }
  }
}

TEST(AttentionKernel, Bf16IsCloseToF64) {
  const AttentionArgs a64 = make_args(2, 70, 2, 16, DType::kF64);
  const auto qkv = random_values(qkv_count(a64), 5);
  const auto g = random_values(out_count(a64), 6);
  const Result ref = run_both(a64, encode(qkv, DType::kF64), encode(g, DType::kF64));
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    AttentionArgs a = a64;
    a.dtype = dtype;
    const Result r = run_both(a, encode(qkv, dtype), encode(g, dtype));
    const double tol = dtype == DType::kBF16 ? 4e-2 : dtype == DType::kF16 ? 5e-3 : 1e-5;
    expect_close(decode(r.out, dtype), decode(ref.out, DType::kF64), tol, tol, "out");
    expect_close(decode(r.dqkv, dtype), decode(ref.dqkv, DType::kF64), tol, tol, "dqkv");
  }
}

TEST(AttentionKernel, SameBitsForAnyThreadCount) {
  for (auto [dtype, hd] :
       {std::pair{DType::kF32, 8}, std::pair{DType::kBF16, 8}, std::pair{DType::kBF16, 64}}) {
    AttentionArgs a = make_args(3, 70, 3, hd, dtype, 0.1);
    const auto qkv = encode(random_values(qkv_count(a), 7), dtype);
    const auto g = encode(random_values(out_count(a), 8), dtype);
    const Result one = run_both(a, qkv, g);
    for (int threads : {2, 3, 4, 9, 64}) {
      set_num_threads(threads);
      const Result r = run_both(a, qkv, g);
      set_num_threads(1);
      EXPECT_EQ(r.out, one.out) << threads << " threads";
      EXPECT_EQ(r.dqkv, one.dqkv) << threads << " threads";
    }
  }
}

// A bf16 head at the avx512 level and at `level`, whose own products take head_dim 64 but not
// 8: some gradient bit differs at 64 (its path ran), every bit is the same at 8.
void expect_own_path_at_head_dim_64(CpuIsa level) {
  for (int64_t hd : {64, 8}) {
    const AttentionArgs a = make_args(2, 130, 2, hd, DType::kBF16, 0.1);
    const auto qkv = encode(random_values(qkv_count(a), 11), DType::kBF16);
    const auto g = encode(random_values(out_count(a), 12), DType::kBF16);
    Result fma, own;
    {
      ScopedCpuIsa scoped(CpuIsa::kAvx512);
      fma = run_both(a, qkv, g);
    }
    {
      ScopedCpuIsa scoped(level);
      own = run_both(a, qkv, g);
    }
    if (hd == 64) {
      EXPECT_NE(own.dqkv, fma.dqkv) << cpu_isa_name(level);
    } else {
      EXPECT_EQ(own.out, fma.out) << cpu_isa_name(level);
      EXPECT_EQ(own.dqkv, fma.dqkv) << cpu_isa_name(level);
    }
  }
}

// The amx level multiplies bf16 heads of head_dim % 32 == 0 on AMX tiles, which sum in
// another order than the f32 fma chains of the avx512 level: some bit of the gradient differs
// from that level's (so the amx path ran; the forward's bf16 outputs may well all round alike),
// the results stay within the level tolerance of the reference
// (EverySimdLevelMatchesTheReference), and a head_dim the tiles do not take gives the avx512
// level's bits exactly. (The avx512bf16 level, the reference here until it got its vdpbf16ps
// path, gave the avx512 level's bits for both head_dims: Avx512Bf16LevelRunsThePairPath failed
// its != at head_dim 64 and passed its == at 8 before that path.)
TEST(AttentionKernel, AmxLevelRunsTheTilePath) {
  if (!cpu_supports(CpuIsa::kAmx)) GTEST_SKIP() << "this CPU (or its OS) offers no AMX";
  expect_own_path_at_head_dim_64(CpuIsa::kAmx);
}

// Without AMX (AMD Zen 4), the avx512bf16 level runs the same blocked loop with its products
// as vdpbf16ps chains (attn_matmul_dpbf16): another summation order than the avx512 level's f32
// fma chains, so some bit of the gradient differs from that level's (the pair path ran); the
// results stay within the level tolerance of the reference (EverySimdLevelMatchesTheReference,
// whose shapes include head_dim 32, 64 and 128); a head_dim the path does not take gives the
// avx512 level's bits exactly.
TEST(AttentionKernel, Avx512Bf16LevelRunsThePairPath) {
  if (!cpu_supports(CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "this CPU offers no AVX512_BF16";
  expect_own_path_at_head_dim_64(CpuIsa::kAvx512Bf16);
}

// loss = sum(out * g); its gradient with respect to qkv is backward(g). Central differences
// in f64 with dropout on (the mask is a function of the seed, so the loss is smooth).
TEST(AttentionKernel, BackwardMatchesFiniteDifferencesWithDropout) {
  for (CpuIsa isa : {CpuIsa::kScalar, cpu_active_isa()}) {
    ScopedCpuIsa level(isa);
    const AttentionArgs a = make_args(2, 9, 2, 4, DType::kF64, 0.3);
    auto qkv = random_values(qkv_count(a), 9);
    const auto g = random_values(out_count(a), 10);
    std::vector<double> out(static_cast<size_t>(out_count(a))), dqkv(qkv.size());
    causal_attention_backward(a, qkv.data(), g.data(), dqkv.data());
    const auto loss = [&] {
      causal_attention_forward(a, qkv.data(), out.data());
      double l = 0;
      for (size_t i = 0; i < out.size(); ++i) l += out[i] * g[i];
      return l;
    };
    const double eps = 1e-6;
    for (size_t i = 0; i < qkv.size(); i += 3) {
      const double keep = qkv[i];
      qkv[i] = keep + eps;
      const double lp = loss();
      qkv[i] = keep - eps;
      const double lm = loss();
      qkv[i] = keep;
      EXPECT_NEAR(dqkv[i], (lp - lm) / (2 * eps), 1e-7 * (1 + std::abs(dqkv[i])))
          << "element " << i;
    }
  }
}

// With v = identity rows, out[i] = P'[i, :] restricted to the head's columns: count the zeros
// and check a kept value is P / (1 - p).
TEST(AttentionKernel, DropoutFollowsThePhiloxRule) {
  const int64_t t = 64, hd = 64;
  AttentionArgs a = make_args(1, t, 1, hd, DType::kF64, 0.5);
  std::vector<double> qkv(static_cast<size_t>(qkv_count(a)), 0.0);  // q = k = 0: uniform rows
  for (int64_t j = 0; j < t; ++j) qkv[static_cast<size_t>(j * 3 * hd + 2 * hd + j)] = 1.0;
  std::vector<double> out(static_cast<size_t>(out_count(a)));
  causal_attention_forward(a, qkv.data(), out.data());
  const PhiloxKey key = philox_key(a.dropout_seed);
  int64_t kept = 0, total = 0;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const uint64_t word = a.dropout_offset + static_cast<uint64_t>(i * t + j);
      const uint32_t w = philox4x32_10(philox_counter(word / 4), key)[word % 4];
      const bool keep = static_cast<float>(w >> 8) * 0x1.0p-24f >= 0.5f;
      const double expect = keep ? (1.0 / double(i + 1)) / 0.5 : 0.0;
      EXPECT_DOUBLE_EQ(out[static_cast<size_t>(i * hd + j)], expect) << i << ", " << j;
      kept += keep;
      ++total;
    }
    for (int64_t j = i + 1; j < t; ++j) EXPECT_EQ(out[static_cast<size_t>(i * hd + j)], 0.0);
  }
  EXPECT_NEAR(double(kept) / double(total), 0.5, 0.05);
}

TEST(AttentionKernel, ArgumentErrors) {
  std::vector<float> buf(3 * 4 * 2 * 4);
  AttentionArgs a = make_args(1, 4, 2, 4, DType::kI32);
  EXPECT_THROW(causal_attention_forward(a, buf.data(), buf.data()), Error);
  a.dtype = DType::kF32;
  a.dropout_p = 1.0;
  EXPECT_THROW(causal_attention_forward(a, buf.data(), buf.data()), Error);
  a.dropout_p = 0.1;
  a.dropout_offset = 6;
  EXPECT_THROW(causal_attention_forward(a, buf.data(), buf.data()), Error);
  a.dropout_offset = 0;
  EXPECT_THROW(causal_attention_backward(a, buf.data(), nullptr, buf.data()), Error);
  a.seq = -1;
  EXPECT_THROW(causal_attention_forward(a, buf.data(), buf.data()), Error);
  a = make_args(0, 4, 2, 4, DType::kF32);  // empty: no pointers needed
  EXPECT_NO_THROW(causal_attention_forward(a, nullptr, nullptr));
}

}  // namespace
}  // namespace braid::kernels::cpu
