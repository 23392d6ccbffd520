// cuda::gemm_fp8 and cuda::gemm against kernels::cpu::gemm on the dequantized operands
// (kernels::cpu::cast to f32). Needs a GPU (fp8: compute capability 8.9 or newer); every test
// skips with the reason otherwise.
//
// Tolerances. Exact cases use operands in {-2, -1.5, ..., 2} (exact in e4m3 and e5m2) and
// power-of-two scales: every product and partial sum is a small multiple of 2^-4, exact in any
// accumulator of 13 bits or more in any order, so f32 results must be equal and bf16 results
// must be the one rounding of the exact value. Random cases allow, per element,
//   |got - ref| <= atol + rtol * |ref|,  atol = 2^-12 * s * sum_k |a_ik| |b_kj|,
// with s = |alpha * scale_a * scale_b|: the accumulator may lose 2^-12 of the magnitudes it
// adds (Hopper's fp8 tensor cores keep about 14 bits between the f32 promotions cuBLASLt makes),
// and rtol is the output rounding: 2^-8 (one bf16 ulp) for bf16, 2^-20 for f32.
// Plain GEMMs: atol = k * 2^-23 * s * sum|a||b| for f32 accumulation (both sides round),
// 2^-9 * s * sum|a||b| with TF32 (inputs rounded to 10 mantissa bits), k * 2^-52 for f64.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "braid/kernels/cuda.h"
#include "cuda_test_util.h"

namespace braid::kernels::cuda {
namespace {

using cpu::Trans;
using testing::DeviceBuffer;

int compute_capability() {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major * 10 + minor;
}

// A row-major stored matrix of rows x cols with leading dimension ld, as f32 (padding NaN).
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> v;
};

Matrix random_matrix(int64_t rows, int64_t cols, int64_t pad, bool exact, uint32_t seed) {
  Matrix m{rows, cols, cols + pad, {}};
  m.v.assign(static_cast<size_t>(rows * m.ld), NAN);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> half_steps(-4, 4);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      m.v[static_cast<size_t>(r * m.ld + c)] = exact ? 0.5f * half_steps(rng) : uni(rng);
    }
  }
  return m;
}

// Stores an f32 matrix as `dt` (fp8 saturating) and reads it back as f32: the values the GPU
// sees. Padding stays NaN in both (fp8 0x7f is NaN in e4m3fn and e5m2).
std::vector<uint8_t> quantize(const Matrix& m, DType dt, std::vector<float>& dequantized) {
  const int64_t n = m.rows * m.ld;
  std::vector<uint8_t> out(static_cast<size_t>(n) * dtype_size(dt));
  cpu::cast(m.v.data(), DType::kF32, out.data(), dt, n, cpu::CastMode::kSaturate);
  dequantized.resize(static_cast<size_t>(n));
  cpu::cast(out.data(), dt, dequantized.data(), DType::kF32, n);
  return out;
}

struct Fp8Case {
  Trans ta, tb;
  int64_t m, n, k;
  DType at, bt, ct;
  bool exact;
  float alpha, beta, scale_a, scale_b;

  std::string name() const {
    return std::string(ta == Trans::kNo ? "N" : "T") + (tb == Trans::kNo ? "N" : "T") + " m" +
           std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k) + " " +
           std::string(dtype_name(at)) + "x" + std::string(dtype_name(bt)) + "->" +
           std::string(dtype_name(ct)) + (exact ? " exact" : "") + " beta " + std::to_string(beta);
  }
};

// Runs one case; false when gemm_fp8 answered kNotSupported (only allowed when `may_refuse`).
bool run_fp8_case(const Fp8Case& c, bool may_refuse) {
  const int64_t pad = 16;  // keeps lda / ldb multiples of 16
  const Matrix a = c.ta == Trans::kNo ? random_matrix(c.m, c.k, pad, c.exact, 1)
                                      : random_matrix(c.k, c.m, pad, c.exact, 1);
  const Matrix b = c.tb == Trans::kNo ? random_matrix(c.k, c.n, pad, c.exact, 2)
                                      : random_matrix(c.n, c.k, pad, c.exact, 2);
  Matrix c0 = random_matrix(c.m, c.n, 0, true, 3);  // C before, exact in bf16
  std::vector<float> a32, b32, c32;
  const std::vector<uint8_t> a8 = quantize(a, c.at, a32), b8 = quantize(b, c.bt, b32);
  const std::vector<uint8_t> cbytes = quantize(c0, c.ct, c32);

  // Reference: f32 GEMM of the dequantized operands, and of their magnitudes for atol.
  const float s = c.alpha * c.scale_a * c.scale_b;
  std::vector<float> ref = c32, mag(c32.size(), 0.0f);
  cpu::GemmArgs g;
  g.trans_a = c.ta, g.trans_b = c.tb, g.m = c.m, g.n = c.n, g.k = c.k;
  g.alpha = s, g.beta = c.beta;
  g.a = a32.data(), g.lda = a.ld, g.b = b32.data(), g.ldb = b.ld, g.c = ref.data(), g.ldc = c.n;
  cpu::gemm(g);
  std::vector<float> aabs(a32.size()), babs(b32.size());
  for (size_t i = 0; i < a32.size(); ++i) aabs[i] = std::isnan(a32[i]) ? NAN : std::fabs(a32[i]);
  for (size_t i = 0; i < b32.size(); ++i) babs[i] = std::isnan(b32[i]) ? NAN : std::fabs(b32[i]);
  g.alpha = std::fabs(s), g.beta = 0.0, g.a = aabs.data(), g.b = babs.data(), g.c = mag.data();
  cpu::gemm(g);

  DeviceBuffer da = testing::to_device(a8), db = testing::to_device(b8);
  DeviceBuffer dc = testing::to_device(cbytes);
  DeviceBuffer dsa = testing::to_device(&c.scale_a, 4), dsb = testing::to_device(&c.scale_b, 4);
  GemmFp8Args args;
  args.trans_a = c.ta, args.trans_b = c.tb, args.m = c.m, args.n = c.n, args.k = c.k;
  args.alpha = c.alpha, args.beta = c.beta;
  args.a = da.get(), args.lda = a.ld, args.a_dtype = c.at;
  args.scale_a = static_cast<const float*>(dsa.get());
  args.b = db.get(), args.ldb = b.ld, args.b_dtype = c.bt;
  args.scale_b = static_cast<const float*>(dsb.get());
  args.c = dc.get(), args.ldc = c.n, args.c_dtype = c.ct;
  try {
    gemm_fp8(args, nullptr);
  } catch (const Error& e) {
    if (may_refuse && e.kind() == ErrorKind::kNotSupported) return false;
    ADD_FAILURE() << c.name() << ": " << e.what();
    return true;
  }
  EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize()) << c.name();
  std::vector<uint8_t> out(cbytes.size());
  testing::to_host(dc, out.data());
  std::vector<float> got(ref.size());
  cpu::cast(out.data(), c.ct, got.data(), DType::kF32, static_cast<int64_t>(got.size()));

  const double rtol = c.ct == DType::kBF16 ? 0x1p-8 : 0x1p-20;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    bool ok;
    if (c.exact) {  // the one rounding of the exact value
      float want = ref[i];
      if (c.ct == DType::kBF16) {
        uint16_t bits;
        cpu::cast(&ref[i], DType::kF32, &bits, DType::kBF16, 1);
        cpu::cast(&bits, DType::kBF16, &want, DType::kF32, 1);
      }
      ok = got[i] == want;
    } else {
      ok = std::fabs(double{got[i]} - ref[i]) <= 0x1p-12 * mag[i] + rtol * std::fabs(ref[i]);
    }
    if (!ok && ++bad <= 3) {
      ADD_FAILURE() << c.name() << ": C[" << i / c.n << ", " << i % c.n << "] = " << got[i]
                    << ", expected " << ref[i] << " (sum |a||b| " << mag[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << c.name() << ": " << bad << " of " << ref.size() << " elements";
  return true;
}

TEST(CudaGemmFp8, ExactOnEveryLayoutAndTypePair) {
  BRAID_REQUIRE_GPU();
  if (compute_capability() < 89) GTEST_SKIP() << "fp8 GEMM needs compute capability 8.9+";
  const std::pair<DType, DType> types[] = {{DType::kF8E4M3, DType::kF8E4M3},
                                           {DType::kF8E4M3, DType::kF8E5M2},
                                           {DType::kF8E5M2, DType::kF8E4M3}};
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (const auto& [at, bt] : types) {
        for (DType ct : {DType::kBF16, DType::kF32}) {
          for (float beta : {0.0f, 0.5f}) {
            run_fp8_case({ta, tb, 64, 48, 64, at, bt, ct, true, 0.25f, beta, 0.5f, 4.0f}, false);
          }
        }
      }
    }
  }
}

TEST(CudaGemmFp8, RandomWithinTolerance) {
  BRAID_REQUIRE_GPU();
  if (compute_capability() < 89) GTEST_SKIP() << "fp8 GEMM needs compute capability 8.9+";
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (DType ct : {DType::kBF16, DType::kF32}) {
        run_fp8_case({ta, tb, 96, 256, 1024, DType::kF8E4M3, DType::kF8E4M3, ct, false, 1.0f, 0.0f,
                      0.37f, 1.9f},
                     false);
      }
    }
  }
  run_fp8_case({Trans::kNo, Trans::kYes, 512, 512, 4096, DType::kF8E4M3, DType::kF8E5M2,
                DType::kBF16, false, 1.0f, 0.0f, 0.01f, 3.0f},
               false);
}

// m and n that are not multiples of 16: cuBLASLt may refuse them (kNotSupported, with the
// shape in the message); when it runs them the result must be right.
TEST(CudaGemmFp8, OddMAndNAreRightOrRefused) {
  BRAID_REQUIRE_GPU();
  if (compute_capability() < 89) GTEST_SKIP() << "fp8 GEMM needs compute capability 8.9+";
  run_fp8_case({Trans::kNo, Trans::kYes, 33, 20, 32, DType::kF8E4M3, DType::kF8E4M3, DType::kF32,
                true, 1.0f, 0.0f, 1.0f, 1.0f},
               true);
}

TEST(CudaGemmFp8, OlderDevicesAreRefused) {
  BRAID_REQUIRE_GPU();
  if (compute_capability() >= 89) GTEST_SKIP() << "this device runs fp8 GEMM";
  DeviceBuffer buf(4096);
  GemmFp8Args args;
  args.m = args.n = args.k = 16;
  args.lda = args.ldb = args.ldc = 16;
  args.a = args.b = args.c = buf.get();
  try {
    gemm_fp8(args, nullptr);
    FAIL() << "fp8 GEMM accepted on compute capability " << compute_capability();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_NE(e.message().find("compute capability"), std::string::npos) << e.what();
  }
}

// ---- plain GEMM -------------------------------------------------------------------------------

struct PlainCase {
  Trans ta, tb;
  int64_t m, n, k, batch;
  DType ab, c;
  F32Math math;
};

void run_plain_case(const PlainCase& pc) {
  const std::string name = std::string(dtype_name(pc.ab)) + "->" + std::string(dtype_name(pc.c)) +
                           (pc.ta == Trans::kNo ? " N" : " T") + (pc.tb == Trans::kNo ? "N" : "T") +
                           " batch " + std::to_string(pc.batch) +
                           (pc.math == F32Math::kTf32 ? " tf32" : "");
  const int64_t arows = pc.ta == Trans::kNo ? pc.m : pc.k,
                acols = pc.ta == Trans::kNo ? pc.k : pc.m;
  const int64_t brows = pc.tb == Trans::kNo ? pc.k : pc.n,
                bcols = pc.tb == Trans::kNo ? pc.n : pc.k;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  const auto fill = [&](int64_t count) {
    std::vector<double> v(static_cast<size_t>(count));
    for (double& x : v) x = uni(rng);
    return v;
  };
  // Operands in their dtype, and the f64 values they hold (the reference reads those).
  const auto store = [](const std::vector<double>& v, DType dt, std::vector<double>& held) {
    std::vector<uint8_t> out(v.size() * dtype_size(dt));
    cpu::cast(v.data(), DType::kF64, out.data(), dt, static_cast<int64_t>(v.size()));
    held.resize(v.size());
    cpu::cast(out.data(), dt, held.data(), DType::kF64, static_cast<int64_t>(v.size()));
    return out;
  };
  std::vector<double> a64, b64, dummy;
  const std::vector<uint8_t> a = store(fill(pc.batch * arows * acols), pc.ab, a64);
  const std::vector<uint8_t> b = store(fill(pc.batch * brows * bcols), pc.ab, b64);
  const int64_t csize = pc.batch * pc.m * pc.n;
  std::vector<double> ref(static_cast<size_t>(csize)), mag(static_cast<size_t>(csize));
  std::vector<double> aabs(a64.size()), babs(b64.size());
  for (size_t i = 0; i < a64.size(); ++i) aabs[i] = std::fabs(a64[i]);
  for (size_t i = 0; i < b64.size(); ++i) babs[i] = std::fabs(b64[i]);
  cpu::GemmArgs g;
  g.trans_a = pc.ta, g.trans_b = pc.tb, g.m = pc.m, g.n = pc.n, g.k = pc.k;
  g.lda = acols, g.ldb = bcols, g.ldc = pc.n, g.batch = pc.batch;
  g.stride_a = arows * acols, g.stride_b = brows * bcols, g.stride_c = pc.m * pc.n;
  g.ab_dtype = DType::kF64, g.c_dtype = DType::kF64;
  g.a = a64.data(), g.b = b64.data(), g.c = ref.data();
  cpu::gemm(g);
  g.a = aabs.data(), g.b = babs.data(), g.c = mag.data();
  cpu::gemm(g);

  DeviceBuffer da = testing::to_device(a), db = testing::to_device(b);
  DeviceBuffer dc(static_cast<size_t>(csize) * dtype_size(pc.c));
  g.ab_dtype = pc.ab, g.c_dtype = pc.c;
  g.a = da.get(), g.b = db.get(), g.c = dc.get();
  try {
    gemm(g, nullptr, pc.math);
  } catch (const Error& e) {
    ADD_FAILURE() << name << ": " << e.what();
    return;
  }
  EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize()) << name;
  std::vector<uint8_t> out(dc.bytes());
  testing::to_host(dc, out.data());
  std::vector<double> got(static_cast<size_t>(csize));
  cpu::cast(out.data(), pc.c, got.data(), DType::kF64, csize);
  const double k = static_cast<double>(pc.k);
  const double atol_rel = pc.ab == DType::kF64                                ? k * 0x1p-52
                          : pc.math == F32Math::kTf32 && pc.ab == DType::kF32 ? 0x1p-9
                                                                              : k * 0x1p-23;
  const double rtol = pc.c == DType::kBF16 ? 0x1p-8 : pc.c == DType::kF16 ? 0x1p-11 : 0.0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::fabs(got[i] - ref[i]) > atol_rel * mag[i] + rtol * std::fabs(ref[i]) && ++bad <= 3) {
      ADD_FAILURE() << name << ": C[" << i << "] = " << got[i] << ", expected " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << name;
}

TEST(CudaGemm, MatchesCpuGemm) {
  BRAID_REQUIRE_GPU();
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      run_plain_case({ta, tb, 70, 50, 300, 1, DType::kF32, DType::kF32, F32Math::kIeee});
      run_plain_case({ta, tb, 64, 48, 256, 3, DType::kBF16, DType::kBF16, F32Math::kIeee});
    }
  }
  run_plain_case(
      {Trans::kNo, Trans::kNo, 128, 96, 512, 1, DType::kF32, DType::kF32, F32Math::kTf32});
  run_plain_case(
      {Trans::kNo, Trans::kYes, 64, 64, 128, 2, DType::kF16, DType::kF32, F32Math::kIeee});
  run_plain_case(
      {Trans::kNo, Trans::kYes, 64, 64, 128, 1, DType::kF16, DType::kF16, F32Math::kIeee});
  run_plain_case(
      {Trans::kYes, Trans::kNo, 32, 40, 100, 2, DType::kF64, DType::kF64, F32Math::kIeee});
  run_plain_case(
      {Trans::kNo, Trans::kNo, 64, 64, 64, 1, DType::kBF16, DType::kF32, F32Math::kIeee});
}

}  // namespace
}  // namespace braid::kernels::cuda
