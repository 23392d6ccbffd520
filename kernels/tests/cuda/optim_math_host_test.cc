// Runs the GPU optimizer's element code (kernels/src/cuda/optim_math.h: the formulas, the
// loads and stores, Note [Optimizer units] and the Philox port) on the host and compares it
// bit for bit with kernels::cpu::optimizer_step at the scalar level. Needs no GPU, so it runs
// in CI; the device intrinsics themselves are covered by braid_kernels_cuda_test on a GPU.
// Also checks that the CUDA entry points reject bad arguments before touching the device and
// that, without a device, they raise braid::Error instead of crashing.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../src/cuda/optim_math.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/kernels/cuda.h"
#include "optim_cases.h"

namespace braid::kernels::cuda {
namespace {

using testing::OptimCase;
using testing::OptimData;

TEST(CudaOptimMathHost, PhiloxPortMatchesCoreGenerator) {
  const uint64_t seeds[] = {0, 1, 0xffffffffull, 0x123456789abcdef1ull, ~0ull};
  for (uint64_t seed : seeds) {
    for (uint64_t block : {0ull, 1ull, 77ull, 0xffffffffull, 0x100000000ull, ~0ull}) {
      const PhiloxCounter want = philox4x32_10(philox_counter(block), philox_key(seed));
      const math::PhiloxWords got = math::philox_block(seed, block);
      for (int j = 0; j < 4; ++j) {
        EXPECT_EQ(got.w[j], want[j]) << "seed " << seed << " block " << block << " word " << j;
      }
    }
  }
}

// The device code, run on the host over one call's buffers (kernel dispatch as in optim.cu).
template <OptimAlgo kAlgo, class P, class G>
void run_units(const math::OptimParams& c, const std::vector<OptimTensor>& ts) {
  for (const OptimTensor& x : ts) {
    const math::OptimTensorArg a{x.param,  x.master, x.grad,       x.state0, x.state1,
                                 x.state2, x.n,      x.rng_offset, 0};
    const int64_t units = math::units_of(x.n, math::unit_shift(c.stochastic, x.rng_offset));
    for (int64_t u = 0; u < units; ++u) math::optim_unit<kAlgo, P, G>(c, a, u);
  }
}

template <OptimAlgo kAlgo, class P>
void run_for_grad(const OptimStep& st, const math::OptimParams& c,
                  const std::vector<OptimTensor>& ts) {
  if (st.grad_dtype == DType::kF32) return run_units<kAlgo, P, math::F32>(c, ts);
  if (st.grad_dtype == DType::kBF16) return run_units<kAlgo, P, math::BF16>(c, ts);
  run_units<kAlgo, P, math::F16>(c, ts);
}

template <OptimAlgo kAlgo>
void run_for_param(const OptimStep& st, const math::OptimParams& c,
                   const std::vector<OptimTensor>& ts) {
  if (st.param_dtype == DType::kF32) return run_for_grad<kAlgo, math::F32>(st, c, ts);
  if (st.param_dtype == DType::kBF16) return run_for_grad<kAlgo, math::BF16>(st, c, ts);
  run_for_grad<kAlgo, math::F16>(st, c, ts);
}

void host_step(const OptimStep& st, std::vector<OptimTensor> ts) {
  check_optim_step(st, ts.data(), static_cast<int64_t>(ts.size()));
  const math::OptimParams c = math::optim_params(st);
  switch (st.algo) {
    case OptimAlgo::kSgd:
      return run_for_param<OptimAlgo::kSgd>(st, c, ts);
    case OptimAlgo::kAdam:
      return run_for_param<OptimAlgo::kAdam>(st, c, ts);
    case OptimAlgo::kAdamW:
      return run_for_param<OptimAlgo::kAdamW>(st, c, ts);
    case OptimAlgo::kLion:
      return run_for_param<OptimAlgo::kLion>(st, c, ts);
  }
}

class CudaOptimMathHostCases : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaOptimMathHostCases, MatchesCpuScalarReference) {
  for (const OptimCase& c : testing::optim_cases()) {
    if (c.algo != GetParam()) continue;
    SCOPED_TRACE(c.name);
    // 1 << 20 elements in every eighth case, to keep the run short on CI: each algorithm
    // configuration still meets it once or twice (optim_cuda_test.cc runs it for every case).
    std::vector<int64_t> counts = {1, 7, 4099, 8193};
    if (c.index % 8 == 0) counts.push_back(int64_t{1} << 20);
    const OptimData in = testing::make_optim_data(c, counts, static_cast<uint32_t>(c.index));
    const OptimData want = testing::cpu_reference(c, in);
    OptimData got = in;
    host_step(c.step, got.tensors());
    testing::expect_same_optim_data(want, got, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, CudaOptimMathHostCases,
                         ::testing::ValuesIn(testing::optim_algo_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// ---- the entry points without a device ---------------------------------------------------------

int device_count() {
  int n = 0;  // left unset when the call fails (error 35 without a driver)
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

TEST(CudaEntryPointsHost, BadArgumentsThrowBeforeAnyDeviceWork) {
  OptimStep st;
  st.lr = -1.0;
  OptimTensor t{};
  try {
    optimizer_step(st, &t, 1, nullptr);
    FAIL() << "negative lr accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(e.message().find("lr"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      {
        try {
          unscale_and_check_finite(DType::kI8, nullptr, nullptr, 0, 1.0f, nullptr);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
          throw;
        }
      },
      Error);
  const int64_t counts[] = {4};
  void* data[] = {nullptr};
  EXPECT_THROW(unscale_and_check_finite(DType::kF32, data, counts, 1, 0.5f, nullptr), Error);
  // Nothing to read: false without any device work (so it works without a GPU, too).
  const int64_t zero[] = {0};
  EXPECT_FALSE(unscale_and_check_finite(DType::kF32, data, zero, 1, 0.5f, nullptr));
  EXPECT_NO_THROW(optimizer_step(OptimStep{}, nullptr, 0, nullptr));

  GemmFp8Args g;
  g.m = g.n = 16;
  g.k = 8;  // not a multiple of 16
  g.lda = g.ldb = 16;
  g.ldc = 16;
  alignas(16) static uint8_t buf[256];
  g.a = g.b = buf;
  g.c = buf;
  try {
    gemm_fp8(g, nullptr);
    FAIL() << "k = 8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported) << e.what();
    EXPECT_NE(e.message().find("multiple of 16"), std::string::npos) << e.what();
  }
  g.k = 16;
  g.a_dtype = g.b_dtype = DType::kF8E5M2;
  EXPECT_THROW(gemm_fp8(g, nullptr), Error);
  g.a_dtype = DType::kBF16;
  EXPECT_THROW(gemm_fp8(g, nullptr), Error);
}

TEST(CudaEntryPointsHost, NoDeviceRaisesError) {
  if (device_count() > 0) GTEST_SKIP() << "a GPU is present: braid_kernels_cuda_test covers it";
  OptimStep st;  // AdamW f32
  std::vector<float> p(8), g(8), m(8), v(8);
  OptimTensor t{8, p.data(), nullptr, g.data(), m.data(), v.data(), nullptr, 0};
  try {
    optimizer_step(st, &t, 1, nullptr);
    FAIL() << "no error without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported) << e.what();
    EXPECT_NE(e.message().find("cudaLaunchKernel"), std::string::npos) << e.what();
  }
  void* data[] = {p.data()};
  const int64_t counts[] = {8};
  try {
    unscale_and_check_finite(DType::kF32, data, counts, 1, 0.5f, nullptr);
    FAIL() << "no error without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported) << e.what();
    EXPECT_NE(e.message().find("cudaMallocAsync"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::kernels::cuda
