// Every op of the cuda kernel table against the cpu table at CpuIsa::kScalar, on random inputs
// with the special values of kernel_test_util.h, at sizes {0, 1, 7, 4099, 1 << 20} (elements;
// row ops split them into rows), device memory from cudaMalloc, copies with cudaMemcpy. Needs a
// GPU: every test skips with the reason without one.
//
// Tolerances (docs/gpu.md, "Kernel table on cuda", says why each holds):
//   bits (NaN matches any NaN):  cast, fill, copy_strided / copy_to_strided, binary, axpby,
//       scale, masked_scale, reduce (every op and dtype: the cpu's lane order), layer_norm and
//       rms_norm forward / backward, embedding forward / backward;
//   unary, activation_backward: one ulp of the output format (dtype_tolerance(d, 1); f64
//       rel 1e-14), activation_backward plus 1e-12 |dy| absolute (gelu's cancellation);
//   softmax, cross entropy: 64 f32 ulps relative plus 1e-6 absolute (f64: 1e-12), one ulp of
//       f16 / bf16 more (expf's 2 ulp, tree vs sequential sums);
//   attention: f32 1e-5 abs + 1e-4 rel, f64 1e-12, f16 2e-3, bf16 2e-2 (a P rounded to the
//       16-bit format can land one ulp apart, and that ulp propagates through P'v).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "../kernel_test_util.h"
#include "braid/core/cpu_features.h"
#include "braid/kernels/cpu.h"
#include "braid/kernels/table.h"
#include "cuda_test_util.h"

namespace braid::kernels::cuda {
namespace {

using cpu::testing::close_enough;
using cpu::testing::dtype_tolerance;
using cpu::testing::Tolerance;
using testing::DeviceBuffer;

const std::vector<int64_t> kSizes = {0, 1, 7, 4099, int64_t{1} << 20};
constexpr DType kAll[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                          DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                          DType::kI16,    DType::kI8,     DType::kU8,  DType::kBool};
constexpr DType kFloats[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16};

const KernelTable& gpu() {
  return kernels_for(DeviceType::kCUDA);
}
const KernelTable& cpu_table() {
  return kernels_for(DeviceType::kCPU);
}
const Stream kGpu{Device{DeviceType::kCUDA, 0}, nullptr};
const Stream kCpu{Device{DeviceType::kCPU, 0}, nullptr};

using Bytes = std::vector<uint8_t>;

// n values of `dtype`: special values and random bit patterns (special = true) or uniform in
// [lo, hi), converted by the cpu; bool 0 / 1.
Bytes values(DType dtype, int64_t n, uint32_t seed, bool special, float lo = -4, float hi = 4) {
  Bytes out(static_cast<size_t>(n) * dtype_size(dtype));
  if (dtype == DType::kBool) {
    for (int64_t i = 0; i < n; ++i) out[i] = (i * 7 + seed) % 3 == 0;
    return out;
  }
  const std::vector<float> f =
      special ? cpu::testing::random_f32_bits(n, seed) : cpu::testing::random_f32(n, seed, lo, hi);
  cpu::cast(f.data(), DType::kF32, out.data(), dtype, n);
  return out;
}

Bytes download(const DeviceBuffer& d) {
  Bytes h(d.bytes());
  testing::to_host(d, h.data());
  return h;
}

std::vector<double> as_f64(const Bytes& b, DType dtype) {
  const int64_t n = static_cast<int64_t>(b.size() / dtype_size(dtype));
  std::vector<double> out(static_cast<size_t>(n));
  cpu::cast(b.data(), dtype, out.data(), DType::kF64, n);
  return out;
}

// Byte equality per element, any NaN matching any NaN.
void expect_bits(const Bytes& want, const Bytes& got, DType dtype, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const size_t es = dtype_size(dtype);
  const std::vector<double> w = as_f64(want, dtype), g = as_f64(got, dtype);
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::memcmp(&want[i * es], &got[i * es], es) != 0) {
      ++bad;
      ADD_FAILURE() << what << ": element " << i << " want " << w[i] << " got " << g[i];
    }
  }
}

void expect_close(const Bytes& want, const Bytes& got, DType dtype, Tolerance tol,
                  const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const std::vector<double> w = as_f64(want, dtype), g = as_f64(got, dtype);
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    if (!close_enough(w[i], g[i], tol)) {
      ++bad;
      ADD_FAILURE() << what << ": element " << i << " want " << w[i] << " got " << g[i];
    }
  }
}

void sync() {
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
}

class CudaTable : public ::testing::Test {
 protected:
  void SetUp() override { BRAID_REQUIRE_GPU(); }
  ScopedCpuIsa scalar_{CpuIsa::kScalar};
};

std::string name(const char* op, DType d, int64_t n) {
  return std::string(op) + " " + std::string(dtype_name(d)) + " n=" + std::to_string(n);
}

// ---- data movement
// ----------------------------------------------------------------------------------

TEST_F(CudaTable, CastEveryPairBothModes) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4099}}) {
    for (DType s : kAll) {
      const Bytes src = values(s, n, 1 + static_cast<uint32_t>(s), true);
      const DeviceBuffer dsrc = testing::to_device(src);
      for (DType d : kAll) {
        for (CastMode m : {CastMode::kDefault, CastMode::kSaturate}) {
          Bytes want(static_cast<size_t>(n) * dtype_size(d));
          cpu_table().cast(kCpu, src.data(), s, want.data(), d, n, m);
          DeviceBuffer dd(want.size());
          gpu().cast(kGpu, dsrc.get(), s, dd.get(), d, n, m);
          sync();
          expect_bits(want, download(dd), d,
                      name("cast", s, n) + " -> " + std::string(dtype_name(d)));
        }
      }
    }
  }
  // 1 << 20 on the hot pairs, and in place (same dtype, overlapping).
  const int64_t n = int64_t{1} << 20;
  for (auto [s, d] : {std::pair{DType::kF32, DType::kBF16},
                      {DType::kF32, DType::kF8E4M3},
                      {DType::kF16, DType::kF32},
                      {DType::kF64, DType::kF16}}) {
    const Bytes src = values(s, n, 3, true);
    Bytes want(static_cast<size_t>(n) * dtype_size(d));
    cpu_table().cast(kCpu, src.data(), s, want.data(), d, n, CastMode::kSaturate);
    const DeviceBuffer dsrc = testing::to_device(src);
    DeviceBuffer dd(want.size());
    gpu().cast(kGpu, dsrc.get(), s, dd.get(), d, n, CastMode::kSaturate);
    sync();
    expect_bits(want, download(dd), d, name("cast", s, n));
  }
  Bytes buf = values(DType::kF32, 4099, 5, true);
  DeviceBuffer dbuf = testing::to_device(buf);
  gpu().cast(kGpu, dbuf.get(), DType::kF32, static_cast<float*>(dbuf.get()) + 1, DType::kF32, 4000,
             CastMode::kDefault);
  sync();
  std::memmove(buf.data() + 4, buf.data(), 4000 * 4);
  expect_bits(buf, download(dbuf), DType::kF32, "overlapping same-dtype cast");
}

TEST_F(CudaTable, Fill) {
  for (int64_t n : kSizes) {
    for (DType d : kAll) {
      for (double v : {0.0, 1.5, -3.25, 1e10, -1.0, std::nan("")}) {
        Bytes want(static_cast<size_t>(n) * dtype_size(d));
        cpu_table().fill(kCpu, want.data(), d, n, v);
        DeviceBuffer dd(want.size());
        gpu().fill(kGpu, dd.get(), d, n, v);
        sync();
        expect_bits(want, download(dd), d, name("fill", d, n));
      }
    }
  }
}

TEST_F(CudaTable, CopyStridedBothWays) {
  // A [a, b, c] view of a larger [c_, b_, a_] buffer, transposed: every element size.
  for (int64_t es : {1, 2, 3, 4, 8, 16}) {
    for (auto shape :
         {std::vector<int64_t>{0, 3, 2}, {1, 1, 1}, {7, 1, 3}, {17, 13, 19}, {64, 128, 128}}) {
      const int64_t count = shape[0] * shape[1] * shape[2];
      const std::vector<int64_t> strides = {1, shape[0] + 1, (shape[0] + 1) * (shape[1] + 2)};
      const int64_t span = std::max<int64_t>(1, shape[2] * strides[2]);
      Bytes src(static_cast<size_t>(span * es));
      std::mt19937 rng(static_cast<uint32_t>(es));
      for (auto& b : src) b = static_cast<uint8_t>(rng());
      Bytes want(static_cast<size_t>(count * es));
      cpu_table().copy_strided(kCpu, src.data(), es, 3, shape.data(), strides.data(), want.data());
      const DeviceBuffer dsrc = testing::to_device(src);
      DeviceBuffer dd(want.size());
      gpu().copy_strided(kGpu, dsrc.get(), es, 3, shape.data(), strides.data(), dd.get());
      sync();
      EXPECT_EQ(want, download(dd)) << "copy_strided es " << es << " count " << count;
      // And back: scatter the dense copy into a fresh strided buffer.
      Bytes back = src;
      std::fill(back.begin(), back.end(), uint8_t{0});
      cpu_table().copy_to_strided(kCpu, want.data(), es, 3, shape.data(), back.data(),
                                  strides.data());
      DeviceBuffer dback = testing::to_device(Bytes(back.size(), 0));
      const DeviceBuffer ddense = testing::to_device(want);
      gpu().copy_to_strided(kGpu, ddense.get(), es, 3, shape.data(), dback.get(), strides.data());
      sync();
      EXPECT_EQ(back, download(dback)) << "copy_to_strided es " << es << " count " << count;
    }
  }
}

// ---- elementwise
// -----------------------------------------------------------------------------------

TEST_F(CudaTable, BinaryWithBroadcasts) {
  const BinaryOp ops[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,
                          BinaryOp::kDiv, BinaryOp::kMax, BinaryOp::kMin};
  for (DType d : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32}) {
    const bool integer = !is_floating(d);
    for (int64_t n : kSizes) {
      // [rows, cols] = n elements; b broadcasts along rows ([1, cols]), then a scalar, then a
      // transposed a.
      const int64_t cols = n >= 4099 ? 4099 : std::max<int64_t>(n, 1);
      const int64_t rows = n == 0 ? 0 : std::max<int64_t>(1, n / cols);
      const int64_t m = rows * cols;
      Bytes a = values(d, m, 7, !integer), b = values(d, m, 8, !integer, 1, 9);
      const int64_t shape[] = {rows, cols};
      const int64_t dense[] = {cols, 1}, bcast[] = {0, 1}, scalar[] = {0, 0}, trans[] = {1, rows};
      const DeviceBuffer da = testing::to_device(a), db = testing::to_device(b);
      for (const int64_t* bs : {dense, bcast, scalar}) {
        for (const int64_t* as : {dense, trans}) {
          for (BinaryOp op : ops) {
            Bytes want(static_cast<size_t>(m) * dtype_size(d));
            cpu_table().binary(kCpu, op, d, 2, shape, a.data(), as, b.data(), bs, want.data());
            DeviceBuffer dout(want.size());
            gpu().binary(kGpu, op, d, 2, shape, da.get(), as, db.get(), bs, dout.get());
            sync();
            expect_bits(want, download(dout), d,
                        name("binary", d, m) + " op " + std::to_string(static_cast<int>(op)));
          }
        }
      }
    }
  }
  // A zero integer divisor gives 0 on the GPU (the cpu throws).
  const std::vector<int32_t> a = {7, -7, 5}, b = {0, 0, 2};
  const DeviceBuffer da = testing::to_device(a), db = testing::to_device(b);
  DeviceBuffer dout(12);
  const int64_t shape[] = {3}, unit[] = {1};
  gpu().binary(kGpu, BinaryOp::kDiv, DType::kI32, 1, shape, da.get(), unit, db.get(), unit,
               dout.get());
  std::vector<int32_t> got(3);
  testing::to_host(dout, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 2}));
}

TEST_F(CudaTable, AxpbyScaleMaskedScale) {
  for (DType d : kFloats) {
    for (int64_t n : kSizes) {
      const Bytes x = values(d, n, 1, true), y = values(d, n, 2, true);
      Bytes keep(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) keep[i] = (i * 2654435761u) % 10 < 7;
      const DeviceBuffer dx = testing::to_device(x), dy = testing::to_device(y);
      const DeviceBuffer dkeep = testing::to_device(keep);
      const size_t bytes = x.size();
      Bytes want(bytes);
      DeviceBuffer dout(bytes);
      cpu_table().axpby(kCpu, d, n, 0.3, x.data(), -1.7, y.data(), want.data());
      gpu().axpby(kGpu, d, n, 0.3, dx.get(), -1.7, dy.get(), dout.get());
      sync();
      expect_bits(want, download(dout), d, name("axpby", d, n));
      cpu_table().axpby(kCpu, d, n, 2.5, x.data(), 0.0, nullptr, want.data());
      gpu().axpby(kGpu, d, n, 2.5, dx.get(), 0.0, nullptr, dout.get());
      sync();
      expect_bits(want, download(dout), d, name("axpby beta 0", d, n));
      cpu_table().scale(kCpu, d, n, -0.1, x.data(), want.data());
      gpu().scale(kGpu, d, n, -0.1, dx.get(), dout.get());
      sync();
      expect_bits(want, download(dout), d, name("scale", d, n));
      cpu_table().masked_scale(kCpu, d, n, x.data(), keep.data(), 1.0 / 0.7, want.data());
      gpu().masked_scale(kGpu, d, n, dx.get(), static_cast<const uint8_t*>(dkeep.get()), 1.0 / 0.7,
                         dout.get());
      sync();
      expect_bits(want, download(dout), d, name("masked_scale", d, n));
    }
  }
}

TEST_F(CudaTable, UnaryAndActivationBackward) {
  for (DType d : kFloats) {
    Tolerance tol = d == DType::kF64 ? Tolerance{1e-300, 1e-14} : dtype_tolerance(d, 1);
    for (int64_t n : kSizes) {
      const Bytes x = values(d, n, 4, n < 4099), dy = values(d, n, 5, false, -1, 1);
      const Bytes xr = values(d, n, 6, false, -10, 10);
      const DeviceBuffer dx = testing::to_device(x), ddy = testing::to_device(dy);
      const DeviceBuffer dxr = testing::to_device(xr);
      Bytes want(x.size());
      DeviceBuffer dout(x.size());
      for (int op = 0; op <= static_cast<int>(UnaryOp::kAbs); ++op) {
        cpu_table().unary(kCpu, static_cast<UnaryOp>(op), d, n, x.data(), want.data());
        gpu().unary(kGpu, static_cast<UnaryOp>(op), d, n, dx.get(), dout.get());
        sync();
        expect_close(want, download(dout), d, tol,
                     name("unary", d, n) + " op " + std::to_string(op));
      }
      Tolerance atol = tol;
      atol.abs += 1e-12;
      for (int op = 0; op <= static_cast<int>(ActivationGrad::kSilu); ++op) {
        cpu_table().activation_backward(kCpu, static_cast<ActivationGrad>(op), d, n, xr.data(),
                                        dy.data(), want.data());
        gpu().activation_backward(kGpu, static_cast<ActivationGrad>(op), d, n, dxr.get(), ddy.get(),
                                  dout.get());
        sync();
        expect_close(want, download(dout), d, atol,
                     name("activation_backward", d, n) + " op " + std::to_string(op));
      }
    }
  }
}

// ---- reductions, softmax
// -----------------------------------------------------------------------------

TEST_F(CudaTable, ReduceHasTheCpuBits) {
  struct Shape {
    int64_t outer, len, inner;
  };
  const Shape shapes[] = {{0, 3, 1},       {1, 0, 1},     {1, 1, 1},     {1, 7, 1},
                          {3, 4099, 1},    {2, 7, 3},     {5, 33, 4099}, {1, 1 << 20, 1},
                          {1024, 1024, 1}, {16, 64, 1024}};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                          ReduceOp::kNormL2};
  for (DType d : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32}) {
    const bool integer = !is_floating(d);
    std::vector<DType> outs = {d};
    if (integer && d != DType::kI64) outs.push_back(DType::kI64);
    if (!integer) outs.push_back(DType::kF64);
    if (d == DType::kF16 || d == DType::kBF16) outs.push_back(DType::kF32);
    for (const Shape& sh : shapes) {
      const int64_t n = sh.outer * sh.len * sh.inner;
      const Bytes x = values(d, n, 9, false, -3, 5);
      const DeviceBuffer dx = testing::to_device(x);
      for (ReduceOp op : ops) {
        if (integer && (op == ReduceOp::kMean || op == ReduceOp::kNormL2)) continue;
        if (sh.len == 0 && (op == ReduceOp::kMax || op == ReduceOp::kMin)) continue;
        for (DType od : outs) {
          Bytes want(static_cast<size_t>(sh.outer * sh.inner) * dtype_size(od));
          cpu_table().reduce(kCpu, op, d, sh.outer, sh.len, sh.inner, x.data(), od, want.data());
          DeviceBuffer dout(want.size());
          gpu().reduce(kGpu, op, d, sh.outer, sh.len, sh.inner, dx.get(), od, dout.get());
          sync();
          expect_bits(want, download(dout), od,
                      name("reduce", d, n) + " op " + std::to_string(static_cast<int>(op)) +
                          " inner " + std::to_string(sh.inner));
        }
      }
    }
  }
}

Tolerance row_tolerance(DType d) {
  if (d == DType::kF64) return {1e-12, 1e-12};
  Tolerance t = dtype_tolerance(d, 64);
  t.abs += 1e-6;
  return t;
}

TEST_F(CudaTable, Softmax) {
  for (DType d : kFloats) {
    for (int64_t n : kSizes) {
      for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{4099}}) {
        const int64_t rows = n / len;
        if (n > 0 && rows == 0) continue;
        const Bytes x = values(d, rows * len, 10, false, -20, 20);
        const DeviceBuffer dx = testing::to_device(x);
        for (bool log : {false, true}) {
          Bytes want(x.size());
          cpu_table().softmax(kCpu, d, rows, len, x.data(), want.data(), log);
          DeviceBuffer dout(x.size());
          gpu().softmax(kGpu, d, rows, len, dx.get(), dout.get(), log);
          sync();
          expect_close(want, download(dout), d, row_tolerance(d),
                       name(log ? "log_softmax" : "softmax", d, rows * len));
        }
      }
    }
  }
}

// ---- layers
// ---------------------------------------------------------------------------------------------

TEST_F(CudaTable, NormsHaveTheCpuBits) {
  for (DType d : {DType::kF32, DType::kF64}) {
    for (int64_t n : kSizes) {
      for (int64_t dim : {int64_t{7}, int64_t{768}, int64_t{4099}}) {
        const int64_t rows = n / dim;
        const Bytes x = values(d, rows * dim, 11, false, -3, 3);
        const Bytes dy = values(d, rows * dim, 12, false, -1, 1);
        const Bytes w = values(d, dim, 13, false, 0.5, 1.5), b = values(d, dim, 14, false, -1, 1);
        const size_t es = dtype_size(d);
        const DeviceBuffer dx = testing::to_device(x), ddy = testing::to_device(dy);
        const DeviceBuffer dw = testing::to_device(w), dbias = testing::to_device(b);
        for (bool affine : {false, true}) {
          const void* hw = affine ? w.data() : nullptr;
          const void* gw = affine ? dw.get() : nullptr;
          Bytes y(x.size()), mean(rows * es), rstd(rows * es);
          cpu_table().layer_norm_forward(kCpu, d, rows, dim, x.data(), hw,
                                         affine ? b.data() : nullptr, 1e-5, y.data(), mean.data(),
                                         rstd.data());
          DeviceBuffer gy(y.size()), gmean(mean.size()), grstd(rstd.size());
          gpu().layer_norm_forward(kGpu, d, rows, dim, dx.get(), gw, affine ? dbias.get() : nullptr,
                                   1e-5, gy.get(), gmean.get(), grstd.get());
          sync();
          expect_bits(y, download(gy), d, name("layer_norm_forward y", d, rows * dim));
          expect_bits(mean, download(gmean), d, name("layer_norm_forward mean", d, rows));
          expect_bits(rstd, download(grstd), d, name("layer_norm_forward rstd", d, rows));
          Bytes gx(x.size()), gwt(dim * es), gb(dim * es);
          cpu_table().layer_norm_backward(kCpu, d, rows, dim, x.data(), hw, mean.data(),
                                          rstd.data(), dy.data(), gx.data(), gwt.data(), gb.data());
          DeviceBuffer ggx(gx.size()), ggw(gwt.size()), ggb(gb.size());
          gpu().layer_norm_backward(kGpu, d, rows, dim, dx.get(), gw, gmean.get(), grstd.get(),
                                    ddy.get(), ggx.get(), ggw.get(), ggb.get());
          sync();
          expect_bits(gx, download(ggx), d, name("layer_norm_backward dx", d, rows * dim));
          expect_bits(gwt, download(ggw), d, name("layer_norm_backward dw", d, dim));
          expect_bits(gb, download(ggb), d, name("layer_norm_backward db", d, dim));

          cpu_table().rms_norm_forward(kCpu, d, rows, dim, x.data(), hw, 1e-6, y.data(),
                                       rstd.data());
          gpu().rms_norm_forward(kGpu, d, rows, dim, dx.get(), gw, 1e-6, gy.get(), grstd.get());
          sync();
          expect_bits(y, download(gy), d, name("rms_norm_forward y", d, rows * dim));
          expect_bits(rstd, download(grstd), d, name("rms_norm_forward rstd", d, rows));
          cpu_table().rms_norm_backward(kCpu, d, rows, dim, x.data(), hw, rstd.data(), dy.data(),
                                        gx.data(), gwt.data());
          gpu().rms_norm_backward(kGpu, d, rows, dim, dx.get(), gw, grstd.get(), ddy.get(),
                                  ggx.get(), ggw.get());
          sync();
          expect_bits(gx, download(ggx), d, name("rms_norm_backward dx", d, rows * dim));
          expect_bits(gwt, download(ggw), d, name("rms_norm_backward dw", d, dim));
        }
      }
    }
  }
}

TEST_F(CudaTable, Embedding) {
  for (int64_t n : kSizes) {
    const int64_t dim = n >= 4099 ? 64 : 3, ids_n = n / dim, num = 50;
    std::vector<int64_t> ids64(static_cast<size_t>(ids_n));
    std::mt19937 rng(15);
    for (auto& id : ids64) id = static_cast<int64_t>(rng() % 10);  // many repeats
    std::vector<int32_t> ids32(ids64.begin(), ids64.end());
    for (DType id_dtype : {DType::kI64, DType::kI32}) {
      const void* hid = id_dtype == DType::kI64 ? static_cast<const void*>(ids64.data())
                                                : static_cast<const void*>(ids32.data());
      const DeviceBuffer did =
          id_dtype == DType::kI64 ? testing::to_device(ids64) : testing::to_device(ids32);
      for (DType d : {DType::kF64, DType::kF32, DType::kBF16, DType::kI8}) {
        const Bytes w = values(d, num * dim, 16, false);
        const DeviceBuffer dw = testing::to_device(w);
        Bytes want(static_cast<size_t>(ids_n * dim) * dtype_size(d));
        cpu_table().embedding_forward(kCpu, d, num, dim, w.data(), id_dtype, hid, ids_n,
                                      want.data());
        DeviceBuffer dout(want.size());
        gpu().embedding_forward(kGpu, d, num, dim, dw.get(), id_dtype, did.get(), ids_n,
                                dout.get());
        sync();
        EXPECT_EQ(want, download(dout)) << name("embedding_forward", d, ids_n);
      }
      for (DType d : {DType::kF64, DType::kF32}) {
        const Bytes dy = values(d, ids_n * dim, 17, false, -1, 1);
        Bytes dw = values(d, num * dim, 18, false, -1, 1);
        const DeviceBuffer ddy = testing::to_device(dy);
        DeviceBuffer gdw = testing::to_device(dw);
        cpu_table().embedding_backward(kCpu, d, num, dim, id_dtype, hid, ids_n, dy.data(),
                                       dw.data());
        gpu().embedding_backward(kGpu, d, num, dim, id_dtype, did.get(), ids_n, ddy.get(),
                                 gdw.get());
        sync();
        expect_bits(dw, download(gdw), d, name("embedding_backward", d, ids_n));
      }
    }
  }
}

TEST_F(CudaTable, CrossEntropy) {
  for (DType d : kFloats) {
    const DType acc = d == DType::kF64 ? DType::kF64 : DType::kF32;
    for (int64_t n : kSizes) {
      for (int64_t classes : {int64_t{7}, int64_t{4099}}) {
        const int64_t rows = n / classes;
        const Bytes z = values(d, rows * classes, 19, false, -20, 30);
        std::vector<int64_t> t(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) t[r] = r % 5 == 4 ? -100 : (r * 31) % classes;
        const Bytes scale = values(acc, rows, 20, false, 0.1, 1);
        const DeviceBuffer dz = testing::to_device(z), dt = testing::to_device(t);
        const DeviceBuffer dscale = testing::to_device(scale);
        for (double ls : {0.0, 0.1}) {
          const size_t rb = static_cast<size_t>(rows) * dtype_size(acc);
          Bytes loss(rb), lse(rb);
          cpu_table().cross_entropy_forward(kCpu, d, rows, classes, z.data(), DType::kI64, t.data(),
                                            -100, ls, loss.data(), lse.data());
          DeviceBuffer gloss(rb), glse(rb);
          gpu().cross_entropy_forward(kGpu, d, rows, classes, dz.get(), DType::kI64, dt.get(), -100,
                                      ls, gloss.get(), glse.get());
          sync();
          Tolerance tol = row_tolerance(acc);
          tol.abs += acc == DType::kF32 ? 2e-5 : 0;  // loss = lse - z[t]: cancellation
          expect_close(lse, download(glse), acc, tol, name("cross_entropy_forward lse", d, rows));
          expect_close(loss, download(gloss), acc, tol,
                       name("cross_entropy_forward loss", d, rows));
          Bytes dl(z.size());
          cpu_table().cross_entropy_backward(kCpu, d, rows, classes, z.data(), DType::kI64,
                                             t.data(), -100, ls, lse.data(), scale.data(),
                                             dl.data());
          DeviceBuffer gdl(z.size());
          // The cpu's lse, so only the backward's own arithmetic is compared.
          const DeviceBuffer dlse = testing::to_device(lse);
          gpu().cross_entropy_backward(kGpu, d, rows, classes, dz.get(), DType::kI64, dt.get(),
                                       -100, ls, dlse.get(), dscale.get(), gdl.get());
          sync();
          expect_close(dl, download(gdl), d, row_tolerance(d),
                       name("cross_entropy_backward", d, rows * classes));
        }
      }
    }
  }
}

// ---- attention
// ------------------------------------------------------------------------------------

Tolerance attention_tolerance(DType d) {
  switch (d) {
    case DType::kF64:
      return {1e-12, 1e-12};
    case DType::kF32:
      return {1e-5, 1e-4};
    case DType::kF16:
      return {2e-3, 2e-3};
    default:
      return {2e-2, 2e-2};
  }
}

TEST_F(CudaTable, CausalAttentionForwardBackward) {
  struct Shape {
    int64_t batch, seq, n_head, head_dim;
  };
  const Shape shapes[] = {{1, 1, 1, 4}, {2, 7, 3, 16}, {1, 33, 2, 8}, {2, 130, 2, 64}};
  for (DType d : kFloats) {
    for (const Shape& sh : shapes) {
      for (double p : {0.0, 0.2}) {
        AttentionArgs a;
        a.batch = sh.batch;
        a.seq = sh.seq;
        a.n_head = sh.n_head;
        a.head_dim = sh.head_dim;
        a.dtype = d;
        a.dropout_p = p;
        a.dropout_seed = 1234;
        a.dropout_offset = 8;
        const int64_t c = sh.n_head * sh.head_dim, tokens = sh.batch * sh.seq;
        const Bytes qkv = values(d, tokens * 3 * c, 21, false, -2, 2);
        const Bytes dout = values(d, tokens * c, 22, false, -1, 1);
        const DeviceBuffer dqkv_in = testing::to_device(qkv), ddout = testing::to_device(dout);
        Bytes out(dout.size());
        cpu_table().causal_attention_forward(kCpu, a, qkv.data(), out.data());
        DeviceBuffer gout(out.size());
        gpu().causal_attention_forward(kGpu, a, dqkv_in.get(), gout.get());
        sync();
        const std::string what = name("attention", d, tokens) + " p " + std::to_string(p);
        expect_close(out, download(gout), d, attention_tolerance(d), what + " forward");
        Bytes dqkv(qkv.size());
        cpu_table().causal_attention_backward(kCpu, a, qkv.data(), dout.data(), dqkv.data());
        DeviceBuffer gdqkv(qkv.size());
        gpu().causal_attention_backward(kGpu, a, dqkv_in.get(), ddout.get(), gdqkv.get());
        sync();
        expect_close(dqkv, download(gdqkv), d, attention_tolerance(d), what + " backward");
      }
    }
  }
}

}  // namespace
}  // namespace braid::kernels::cuda
