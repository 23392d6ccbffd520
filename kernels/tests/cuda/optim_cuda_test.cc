// cuda::optimizer_step and cuda::unscale_and_check_finite against the CPU scalar reference,
// bit for bit (NaN payloads aside): every case of optim_cases.h with 1, 7, 4099, 8193 and
// 1 << 20 elements in one call, calls over more tensors than one launch takes, several steps
// in a row, and the unscale grid. Needs a GPU: every test skips with the reason without one.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "braid/core/cpu_features.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/kernels/cuda.h"
#include "braid/kernels/optim.h"
#include "cuda_test_util.h"
#include "optim_cases.h"

namespace braid::kernels::cuda {
namespace {

using testing::DeviceBuffer;
using testing::OptimCase;
using testing::OptimData;

// OptimData's buffers on the device.
struct DeviceOptimData {
  std::vector<DeviceBuffer> param, grad, master, s0, s1, s2;
  std::vector<OptimTensor> tensors;

  explicit DeviceOptimData(const OptimData& h) {
    for (size_t t = 0; t < h.n.size(); ++t) {
      param.push_back(testing::to_device(h.param[t]));
      grad.push_back(testing::to_device(h.grad[t]));
      master.push_back(testing::to_device(h.masters[t]));
      s0.push_back(testing::to_device(h.s0[t]));
      s1.push_back(testing::to_device(h.s1[t]));
      s2.push_back(testing::to_device(h.s2[t]));
      tensors.push_back({h.n[t], param[t].get(),
                         h.master ? static_cast<float*>(master[t].get()) : nullptr, grad[t].get(),
                         static_cast<float*>(s0[t].get()), static_cast<float*>(s1[t].get()),
                         static_cast<float*>(s2[t].get()), h.rng_offset[t]});
    }
  }

  void download(OptimData& h) const {
    for (size_t t = 0; t < h.n.size(); ++t) {
      testing::to_host(param[t], h.param[t].data());
      testing::to_host(master[t], h.masters[t].data());
      testing::to_host(s0[t], h.s0[t].data());
      testing::to_host(s1[t], h.s1[t].data());
      testing::to_host(s2[t], h.s2[t].data());
    }
  }
};

// One call on `stream`, then the results back on the host.
OptimData gpu_step(const OptimStep& step, const OptimData& in, cudaStream_t stream) {
  DeviceOptimData d(in);
  optimizer_step(step, d.tensors.data(), static_cast<int64_t>(d.tensors.size()), stream);
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
  OptimData out = in;
  d.download(out);
  return out;
}

class CudaOptimCases : public ::testing::TestWithParam<std::string> {};

// Each algorithm configuration over every storage (10 cases per test process).
TEST_P(CudaOptimCases, MatchesCpuScalarReference) {
  BRAID_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&stream));
  for (const OptimCase& c : testing::optim_cases()) {
    if (c.algo != GetParam()) continue;
    SCOPED_TRACE(c.name);
    const OptimData in = testing::make_optim_data(c, {1, 7, 4099, 8193, int64_t{1} << 20},
                                                  static_cast<uint32_t>(c.index));
    const OptimData want = testing::cpu_reference(c, in);
    const OptimData got = gpu_step(c.step, in, stream);
    testing::expect_same_optim_data(want, got, c.name);
  }
  (void)cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Grid, CudaOptimCases, ::testing::ValuesIn(testing::optim_algo_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// 100 tensors (empty ones among them) need three launches; sizes sit around the 8192-element
// chunk and the 4-element unit; three steps in a row on the default stream.
TEST(CudaOptim, ManyTensorsSeveralSteps) {
  BRAID_REQUIRE_GPU();
  std::vector<int64_t> counts;
  const int64_t pattern[] = {0, 1, 2, 3, 4, 5, 8191, 8192, 8193, 16385, 333, 70000};
  for (int i = 0; i < 100; ++i) counts.push_back(pattern[i % 12] + (i / 12));
  for (const OptimCase& base : testing::optim_cases()) {
    // One storage per algorithm: bf16 + master + stochastic, the mixed-precision default.
    if (base.step.param_dtype != DType::kBF16 || base.step.grad_dtype != DType::kBF16 ||
        !base.master || base.step.rounding != Rounding::kStochastic)
      continue;
    OptimCase c = base;
    OptimData want = testing::make_optim_data(c, counts, 7);
    OptimData got = want;
    for (int s = 0; s < 3; ++s) {
      want = testing::cpu_reference(c, want);
      got = gpu_step(c.step, got, nullptr);
      c.step.step += 1;
      c.step.first_step = false;
    }
    testing::expect_same_optim_data(want, got, c.name + " x3");
  }
}

TEST(CudaOptim, DescriptorErrorsMatchTheCpu) {
  BRAID_REQUIRE_GPU();
  OptimStep st;  // AdamW reads state0 and state1
  DeviceBuffer p(64), g(64), m(64);
  OptimTensor t{16, p.get(), nullptr, g.get(), static_cast<float*>(m.get()), nullptr, nullptr, 0};
  try {
    optimizer_step(st, &t, 1, nullptr);
    FAIL() << "a null state1 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("state1"), std::string::npos) << e.what();
  }
}

// ---- unscale_and_check_finite -----------------------------------------------------------------

struct UnscaleCase {
  DType dtype;
  float inv_scale;
  bool nonfinite;  // plant NaN / Inf in one tensor
};

std::vector<uint8_t> random_values(DType dt, int64_t n, uint32_t seed, bool plant) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  const size_t sz = dtype_size(dt);
  std::vector<uint8_t> out(static_cast<size_t>(n) * sz);
  for (int64_t i = 0; i < n; ++i) {
    float x = dist(rng);
    if (i % 101 == 7) x = 1e-41f;  // f32 subnormal
    if (plant && i == n / 2) x = (seed % 2) ? std::nanf("") : -INFINITY;
    testing::store_as(dt, x, &out[static_cast<size_t>(i) * sz]);
  }
  return out;
}

TEST(CudaUnscale, MatchesCpuScalarReference) {
  BRAID_REQUIRE_GPU();
  std::vector<int64_t> sizes = {1, 7, 4099, 1 << 20};
  std::vector<UnscaleCase> cases;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (float inv : {1.0f, 0.5f, 1.0f / 3.0f, 1.0f / 65536.0f}) {
      for (bool bad : {false, true}) cases.push_back({dt, inv, bad});
    }
  }
  // 200 tensors exceed one launch's 96.
  std::vector<int64_t> many;
  for (int i = 0; i < 200; ++i) many.push_back((i * 37) % 9000);
  for (const UnscaleCase& c : cases) {
    for (const std::vector<int64_t>* counts : {&sizes, &many}) {
      std::vector<std::vector<uint8_t>> host;
      for (size_t t = 0; t < counts->size(); ++t) {
        const bool plant = c.nonfinite && t == counts->size() - 1 && (*counts)[t] > 0;
        host.push_back(random_values(c.dtype, (*counts)[t], static_cast<uint32_t>(t), plant));
      }
      std::vector<std::vector<uint8_t>> want = host;
      std::vector<void*> hptr;
      for (auto& v : want) hptr.push_back(v.data());
      bool want_found;
      {
        const ScopedCpuIsa scalar(CpuIsa::kScalar);
        want_found =
            cpu::unscale_and_check_finite(c.dtype, hptr.data(), counts->data(),
                                          static_cast<int64_t>(counts->size()), c.inv_scale);
      }
      std::vector<DeviceBuffer> dev;
      std::vector<void*> dptr;
      for (auto& v : host) {
        dev.push_back(testing::to_device(v));
        dptr.push_back(dev.back().get());
      }
      const bool got_found =
          unscale_and_check_finite(c.dtype, dptr.data(), counts->data(),
                                   static_cast<int64_t>(counts->size()), c.inv_scale, nullptr);
      const std::string what = std::string(dtype_name(c.dtype)) + " inv_scale " +
                               std::to_string(c.inv_scale) + " tensors " +
                               std::to_string(counts->size());
      EXPECT_EQ(got_found, want_found) << what;
      EXPECT_EQ(got_found, c.nonfinite) << what;
      const size_t sz = dtype_size(c.dtype);
      for (size_t t = 0; t < host.size(); ++t) {
        testing::to_host(dev[t], host[t].data());
        int64_t bad = 0;
        for (int64_t i = 0; i < (*counts)[t]; ++i) {
          bad += !testing::same_bits(c.dtype, &want[t][static_cast<size_t>(i) * sz],
                                     &host[t][static_cast<size_t>(i) * sz]);
        }
        EXPECT_EQ(bad, 0) << what << ": tensor " << t << " of " << (*counts)[t] << " elements";
      }
    }
  }
}

}  // namespace
}  // namespace braid::kernels::cuda
