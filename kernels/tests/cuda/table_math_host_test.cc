// Runs the element code of the cuda kernel table on the host (kernels/src/cuda/cast_math.h,
// elementwise_math.h: the very functions the kernels call) against kernels::cpu at
// CpuIsa::kScalar, bit for bit: every one of the 144 cast pairs in both modes, the six binary
// ops on every dtype binary takes, the twelve unary ops and the four activation derivatives,
// over the special values of kernel_test_util.h plus random bit patterns. Needs no GPU, so it
// runs in CI; what it cannot cover (the CUDA intrinsics, the launches, the reductions' trees) is
// table_cuda_test.cc's, on a GPU.
//
// Also: the cuda table's argument checks fire before any device work (so they run here), empty
// calls launch nothing, a call that must reach the device raises braid::Error without one, and
// supports() says what the cpu's says.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../../src/cuda/cast_math.h"
#include "../../src/cuda/elementwise_math.h"
#include "../kernel_test_util.h"
#include "braid/core/cpu_features.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "braid/kernels/table.h"

namespace braid::kernels::cuda {
namespace {

using math::Bits;

template <DType D>
using Tag = std::integral_constant<DType, D>;

template <typename Fn>
void visit_any(DType d, Fn&& fn) {
  switch (d) {
#define BRAID_VISIT_CASE(e, n, st, T, sz, fl) \
  case DType::e:                              \
    return fn(Tag<DType::e>{});
    BRAID_FOR_EACH_DTYPE(BRAID_VISIT_CASE)
#undef BRAID_VISIT_CASE
  }
}

constexpr DType kAll[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                          DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                          DType::kI16,    DType::kI8,     DType::kU8,  DType::kBool};

// Source values of `dtype` (raw bytes): the f32 specials and random f32 bit patterns converted
// by the cpu, f64 values just off the rounding boundaries, integer limits, and random bytes
// (bool: 0 / 1 only, the cpu reads a C++ bool).
std::vector<uint8_t> source_values(DType dtype, uint32_t seed) {
  const size_t es = dtype_size(dtype);
  std::vector<double> d;
  for (float f : cpu::testing::special_f32()) d.push_back(f);
  for (float f : cpu::testing::random_f32_bits(300, seed)) d.push_back(f);
  for (double v : {1.0 + 0x1p-11 + 0x1p-40,
                   1.0 + 0x1p-8 + 0x1p-50,
                   -(1.0 + 0x1p-11 + 0x1p-40),
                   65519.999,
                   65520.0,
                   448.0,
                   464.0,
                   57344.0,
                   61440.0,
                   3.0e38,
                   3.5e38,
                   1e300,
                   -1e300,
                   0x1p-1074,
                   9.2233720368547758e18,
                   -9.2233720368547758e18,
                   2147483647.5,
                   -2147483648.9,
                   255.9,
                   -0.9,
                   127.5,
                   -129.0,
                   40000.0}) {
    d.push_back(v);
  }
  std::vector<uint8_t> out(d.size() * es);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < d.size(); ++i) out[i] = (i * 7 + seed) % 3 == 0 ? 1 : 0;
    return out;
  }
  cpu::cast(d.data(), DType::kF64, out.data(), dtype, static_cast<int64_t>(d.size()));
  if (!is_floating(dtype)) {  // integers: also raw random patterns and the limits
    std::mt19937 rng(seed);
    for (size_t i = 0; i < out.size() / 2; ++i) out[i] = static_cast<uint8_t>(rng());
  }
  if (es == 1) {  // every byte pattern of the 1-byte formats
    for (int b = 0; b < 256 && static_cast<size_t>(b) < out.size(); ++b) {
      out[b] = static_cast<uint8_t>(b);
    }
  }
  if (es == 2 && is_floating(dtype)) {  // and every 16-bit pattern of f16 / bf16
    out.resize(65536 * 2);
    for (uint32_t b = 0; b < 65536; ++b) std::memcpy(&out[b * 2], &b, 2);
  }
  return out;
}

TEST(CudaTableMathHost, CastMatchesCpuScalarOnEveryPair) {
  ScopedCpuIsa level(CpuIsa::kScalar);
  for (DType s : kAll) {
    const std::vector<uint8_t> src = source_values(s, static_cast<uint32_t>(s));
    const int64_t n = static_cast<int64_t>(src.size() / dtype_size(s));
    for (DType d : kAll) {
      for (CastMode mode : {CastMode::kDefault, CastMode::kSaturate}) {
        std::vector<uint8_t> want(static_cast<size_t>(n) * dtype_size(d));
        std::vector<uint8_t> got(want.size());
        cpu::cast(src.data(), s, want.data(), d, n, mode);
        visit_any(s, [&](auto stag) {
          visit_any(d, [&](auto dtag) {
            constexpr DType S = decltype(stag)::value, D = decltype(dtag)::value;
            const auto* sp = reinterpret_cast<const Bits<S>*>(src.data());
            auto* dp = reinterpret_cast<Bits<D>*>(got.data());
            for (int64_t i = 0; i < n; ++i) {
              dp[i] = mode == CastMode::kSaturate ? math::convert<D, S, true>(sp[i])
                                                  : math::convert<D, S, false>(sp[i]);
            }
          });
        });
        const size_t es = dtype_size(d);
        int bad = 0;
        for (int64_t i = 0; i < n && bad < 5; ++i) {
          if (std::memcmp(&want[i * es], &got[i * es], es) != 0) {
            ++bad;
            ADD_FAILURE() << s << " -> " << d << (mode == CastMode::kSaturate ? " (saturate)" : "")
                          << " element " << i;
          }
        }
      }
    }
  }
}

// Whether element i of two D arrays agrees: the same bits, or both NaN. Which NaN an
// operation returns (payload, sign) depends on operand order, which compilers may swap.
template <DType D>
bool same_or_both_nan(const uint8_t* want, const uint8_t* got, size_t i) {
  Bits<D> w, g;
  std::memcpy(&w, want + i * sizeof(w), sizeof(w));
  std::memcpy(&g, got + i * sizeof(g), sizeof(g));
  if (std::memcmp(&w, &g, sizeof(w)) == 0) return true;
  if constexpr (math::Elem<D>::kind == math::Kind::kInt) {
    return false;
  } else {
    return std::isnan(static_cast<double>(math::load<D>(&w, 0))) &&
           std::isnan(static_cast<double>(math::load<D>(&g, 0)));
  }
}

// ---- binary ------------------------------------------------------------------------------------

template <DType D, BinaryOp kOp>
void check_binary(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t n) {
  std::vector<uint8_t> want(a.size()), got(a.size());
  const int64_t shape[] = {n}, unit[] = {1};
  cpu::binary(kOp, D, 1, shape, a.data(), unit, b.data(), unit, want.data());
  const auto* pa = reinterpret_cast<const Bits<D>*>(a.data());
  const auto* pb = reinterpret_cast<const Bits<D>*>(b.data());
  auto* po = reinterpret_cast<Bits<D>*>(got.data());
  for (int64_t i = 0; i < n; ++i) po[i] = math::binary_element<kOp, D>(pa[i], pb[i]);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(same_or_both_nan<D>(want.data(), got.data(), static_cast<size_t>(i)))
        << "binary op " << static_cast<int>(kOp) << " " << D << " element " << i;
  }
}

template <DType D>
void check_binary_dtype() {
  std::vector<uint8_t> a = source_values(D, 11), b = source_values(D, 23);
  const size_t n = std::min(a.size(), b.size()) / sizeof(Bits<D>);
  a.resize(n * sizeof(Bits<D>));
  b.resize(n * sizeof(Bits<D>));
  std::mt19937 rng(5);
  std::shuffle(reinterpret_cast<Bits<D>*>(b.data()), reinterpret_cast<Bits<D>*>(b.data()) + n, rng);
  if constexpr (math::Elem<D>::kind == math::Kind::kInt) {
    auto* pb = reinterpret_cast<Bits<D>*>(b.data());
    for (size_t i = 0; i < n; ++i) {
      if (pb[i] == 0) pb[i] = 1;  // the cpu throws on a zero divisor
    }
    pb[0] = -1;  // min / -1
    reinterpret_cast<Bits<D>*>(a.data())[0] = static_cast<Bits<D>>(math::Elem<D>::lo);
    // The GPU's choice for a zero divisor (the cpu throws): 0.
    EXPECT_EQ(Bits<D>(0), (math::binary_element<BinaryOp::kDiv, D>(Bits<D>(7), Bits<D>(0))));
  }
  const int64_t len = static_cast<int64_t>(n);
  check_binary<D, BinaryOp::kAdd>(a, b, len);
  check_binary<D, BinaryOp::kSub>(a, b, len);
  check_binary<D, BinaryOp::kMul>(a, b, len);
  check_binary<D, BinaryOp::kDiv>(a, b, len);
  check_binary<D, BinaryOp::kMax>(a, b, len);
  check_binary<D, BinaryOp::kMin>(a, b, len);
}

TEST(CudaTableMathHost, BinaryMatchesCpuScalar) {
  ScopedCpuIsa level(CpuIsa::kScalar);
  check_binary_dtype<DType::kF64>();
  check_binary_dtype<DType::kF32>();
  check_binary_dtype<DType::kF16>();
  check_binary_dtype<DType::kBF16>();
  check_binary_dtype<DType::kI64>();
  check_binary_dtype<DType::kI32>();
}

// ---- unary and activation derivatives
// ------------------------------------------------------------

template <DType D, UnaryOp kOp>
void check_unary(const std::vector<uint8_t>& x) {
  const int64_t n = static_cast<int64_t>(x.size() / sizeof(Bits<D>));
  std::vector<uint8_t> want(x.size()), got(x.size());
  cpu::unary(kOp, D, n, x.data(), want.data());
  const auto* px = reinterpret_cast<const Bits<D>*>(x.data());
  auto* po = reinterpret_cast<Bits<D>*>(got.data());
  for (int64_t i = 0; i < n; ++i) po[i] = math::unary_element<kOp, D>(px[i]);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(same_or_both_nan<D>(want.data(), got.data(), static_cast<size_t>(i)))
        << "unary op " << static_cast<int>(kOp) << " " << D << " element " << i;
  }
}

template <DType D>
void check_unary_dtype() {
  std::vector<uint8_t> x = source_values(D, 3);
  check_unary<D, UnaryOp::kExp>(x);
  check_unary<D, UnaryOp::kLog>(x);
  check_unary<D, UnaryOp::kTanh>(x);
  check_unary<D, UnaryOp::kSigmoid>(x);
  check_unary<D, UnaryOp::kRelu>(x);
  check_unary<D, UnaryOp::kGelu>(x);
  check_unary<D, UnaryOp::kGeluTanh>(x);
  check_unary<D, UnaryOp::kSilu>(x);
  check_unary<D, UnaryOp::kSqrt>(x);
  check_unary<D, UnaryOp::kRsqrt>(x);
  check_unary<D, UnaryOp::kNeg>(x);
  check_unary<D, UnaryOp::kAbs>(x);
}

TEST(CudaTableMathHost, UnaryMatchesCpuScalar) {
  ScopedCpuIsa level(CpuIsa::kScalar);
  check_unary_dtype<DType::kF64>();
  check_unary_dtype<DType::kF32>();
  check_unary_dtype<DType::kF16>();
  check_unary_dtype<DType::kBF16>();
}

template <DType D>
void check_act_dtype() {
  std::vector<uint8_t> x = source_values(D, 17), dy = source_values(D, 29);
  const size_t n = std::min(x.size(), dy.size()) / sizeof(Bits<D>);
  const size_t es = sizeof(Bits<D>);
  std::mt19937 rng(9);
  std::shuffle(reinterpret_cast<Bits<D>*>(dy.data()),
               reinterpret_cast<Bits<D>*>(dy.data()) + dy.size() / es, rng);
  for (ActivationGrad op : {ActivationGrad::kRelu, ActivationGrad::kGelu, ActivationGrad::kGeluTanh,
                            ActivationGrad::kSilu}) {
    std::vector<uint8_t> want(n * es), got(n * es);
    cpu::activation_backward(op, D, static_cast<int64_t>(n), x.data(), dy.data(), want.data());
    const auto* px = reinterpret_cast<const Bits<D>*>(x.data());
    const auto* pdy = reinterpret_cast<const Bits<D>*>(dy.data());
    auto* po = reinterpret_cast<Bits<D>*>(got.data());
    for (size_t i = 0; i < n; ++i) po[i] = math::act_grad_element<D>(op, px[i], pdy[i]);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same_or_both_nan<D>(want.data(), got.data(), i))
          << "activation_backward op " << static_cast<int>(op) << " " << D << " element " << i;
    }
  }
}

TEST(CudaTableMathHost, ActivationBackwardMatchesCpuScalar) {
  ScopedCpuIsa level(CpuIsa::kScalar);
  check_act_dtype<DType::kF64>();
  check_act_dtype<DType::kF32>();
  check_act_dtype<DType::kF16>();
  check_act_dtype<DType::kBF16>();
}

// ---- the table without a device
// ---------------------------------------------------------------------

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

TEST(CudaTableHost, SupportsWhatTheCpuSupports) {
  const KernelTable& gpu = kernels_for(DeviceType::kCUDA);
  const KernelTable& cpu = kernels_for(DeviceType::kCPU);
  for (int op = 0; op < kNumOps; ++op) {
    for (DType d : kAll) {
      EXPECT_EQ(cpu.supports(static_cast<Op>(op), d), gpu.supports(static_cast<Op>(op), d))
          << op_name(static_cast<Op>(op)) << " " << d;
    }
  }
}

TEST(CudaTableHost, BadArgumentsThrowBeforeAnyDeviceWork) {
  using cpu::testing::expect_error;
  const KernelTable& k = kernels_for(DeviceType::kCUDA);
  const Stream s{Device{DeviceType::kCUDA, 0}, nullptr};
  expect_error(
      [&] { k.cast(s, nullptr, DType::kF32, nullptr, DType::kF16, -1, CastMode::kDefault); },
      ErrorKind::kInvalidArgument, {"cast", "-1"});
  expect_error([&] { k.fill(s, nullptr, DType::kF32, 4, 1.0); }, ErrorKind::kInvalidArgument,
               {"fill", "null"});
  const int64_t shape[] = {4}, strides[] = {1};
  expect_error(
      [&] {
        k.binary(s, BinaryOp::kAdd, DType::kI8, 1, shape, nullptr, strides, nullptr, strides,
                 nullptr);
      },
      ErrorKind::kNotSupported, {"binary", "i8"});
  expect_error([&] { k.unary(s, UnaryOp::kExp, DType::kI32, 4, nullptr, nullptr); },
               ErrorKind::kNotSupported, {"unary", "i32"});
  expect_error(
      [&] { k.reduce(s, ReduceOp::kMax, DType::kF32, 1, 0, 1, nullptr, DType::kF32, nullptr); },
      ErrorKind::kInvalidArgument, {"len is 0"});
  expect_error(
      [&] { k.reduce(s, ReduceOp::kMean, DType::kI32, 1, 2, 1, nullptr, DType::kI32, nullptr); },
      ErrorKind::kNotSupported, {"reduce(mean)", "i32"});
  expect_error([&] { k.softmax(s, DType::kI64, 1, 1, nullptr, nullptr, false); },
               ErrorKind::kNotSupported, {"softmax", "i64"});
  expect_error(
      [&] {
        k.layer_norm_forward(s, DType::kF16, 1, 4, nullptr, nullptr, nullptr, 1e-5, nullptr,
                             nullptr, nullptr);
      },
      ErrorKind::kNotSupported, {"layer_norm_forward", "f16"});
  expect_error(
      [&] { k.embedding_backward(s, DType::kF32, 4, 4, DType::kI8, nullptr, 1, nullptr, nullptr); },
      ErrorKind::kNotSupported, {"embedding_backward", "i8"});
  expect_error(
      [&] {
        k.cross_entropy_forward(s, DType::kF32, 2, 0, nullptr, DType::kI64, nullptr, -100, 0.0,
                                nullptr, nullptr);
      },
      ErrorKind::kInvalidArgument, {"0 classes"});
  AttentionArgs a;
  a.batch = a.seq = a.n_head = a.head_dim = 1;
  a.dropout_p = 0.1;
  a.dropout_offset = 2;
  expect_error([&] { k.causal_attention_forward(s, a, nullptr, nullptr); },
               ErrorKind::kInvalidArgument, {"dropout_offset", "multiple of 4"});
  int64_t big[13], sparse[13];  // 13 dimensions no two of which merge
  for (int i = 0; i < 13; ++i) {
    big[i] = 2;
    sparse[i] = 1000 * (i + 1);
  }
  expect_error([&] { k.copy_strided(s, nullptr, 4, 13, big, sparse, nullptr); },
               ErrorKind::kNotSupported, {"copy_strided", "dimensions"});
}

TEST(CudaTableHost, EmptyCallsLaunchNothing) {
  const KernelTable& k = kernels_for(DeviceType::kCUDA);
  const Stream s{Device{DeviceType::kCUDA, 0}, nullptr};
  EXPECT_NO_THROW(k.cast(s, nullptr, DType::kF32, nullptr, DType::kF8E4M3, 0, CastMode::kSaturate));
  EXPECT_NO_THROW(k.fill(s, nullptr, DType::kBF16, 0, 2.0));
  const int64_t shape[] = {3, 0}, strides[] = {1, 1};
  EXPECT_NO_THROW(k.copy_strided(s, nullptr, 8, 2, shape, strides, nullptr));
  EXPECT_NO_THROW(k.binary(s, BinaryOp::kDiv, DType::kI32, 2, shape, nullptr, strides, nullptr,
                           strides, nullptr));
  EXPECT_NO_THROW(k.unary(s, UnaryOp::kGelu, DType::kF16, 0, nullptr, nullptr));
  EXPECT_NO_THROW(k.reduce(s, ReduceOp::kSum, DType::kF32, 0, 5, 3, nullptr, DType::kF32, nullptr));
  EXPECT_NO_THROW(k.softmax(s, DType::kF32, 0, 5, nullptr, nullptr, true));
  EXPECT_NO_THROW(k.layer_norm_forward(s, DType::kF32, 0, 8, nullptr, nullptr, nullptr, 1e-5,
                                       nullptr, nullptr, nullptr));
  EXPECT_NO_THROW(
      k.embedding_forward(s, DType::kBF16, 4, 8, nullptr, DType::kI64, nullptr, 0, nullptr));
  EXPECT_NO_THROW(k.cross_entropy_backward(s, DType::kF32, 0, 5, nullptr, DType::kI32, nullptr, -1,
                                           0.0, nullptr, nullptr, nullptr));
  AttentionArgs a;
  a.batch = 2;
  a.seq = 0;
  a.n_head = 2;
  a.head_dim = 8;
  EXPECT_NO_THROW(k.causal_attention_backward(s, a, nullptr, nullptr, nullptr));
}

TEST(CudaTableHost, NoDeviceRaisesError) {
  if (device_count() > 0) GTEST_SKIP() << "a GPU is present: braid_kernels_cuda_test covers it";
  const KernelTable& k = kernels_for(DeviceType::kCUDA);
  const Stream s{Device{DeviceType::kCUDA, 0}, nullptr};
  std::vector<float> x(8), y(8);
  EXPECT_THROW(k.unary(s, UnaryOp::kExp, DType::kF32, 8, x.data(), y.data()), Error);
  EXPECT_THROW(k.fill(s, x.data(), DType::kF32, 8, 0.0), Error);
  EXPECT_THROW(k.reduce(s, ReduceOp::kSum, DType::kF32, 1, 8, 1, x.data(), DType::kF32, y.data()),
               Error);
}

}  // namespace
}  // namespace braid::kernels::cuda
