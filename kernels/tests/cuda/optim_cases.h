// The optimizer cases the CUDA tests compare against kernels::cpu::optimizer_step at the scalar
// level: every algorithm with its switches, crossed with parameter / gradient dtypes, master
// weights and stochastic rounding, each call over several tensors (1, 7, 4099, 8193 and, where
// asked, 1 << 20 elements) whose Philox offsets are not multiples of 4. Shared by the GPU test
// (optim_cuda_test.cc) and the host run of the kernel's element code (optim_math_host_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "braid/core/cpu_features.h"
#include "braid/core/dtype.h"
#include "braid/core/float_types.h"
#include "braid/kernels/optim.h"

namespace braid::kernels::cuda::testing {

struct OptimCase {
  std::string algo;  // the algorithm configuration ("adamw_amsgrad"); name adds the storage
  std::string name;
  OptimStep step;
  bool master = false;
  int index = 0;  // position in optim_cases(): seeds the data
};

// Every algorithm configuration x every storage configuration.
inline std::vector<OptimCase> optim_cases() {
  using Mutate = std::function<void(OptimStep&)>;
  struct Algo {
    const char* name;
    Mutate set;
  };
  const Algo algos[] = {
      {"sgd", [](OptimStep& s) { s.algo = OptimAlgo::kSgd; }},
      {"sgd_wd", [](OptimStep& s) { s.algo = OptimAlgo::kSgd, s.weight_decay = 0.1; }},
      {"sgd_momentum", [](OptimStep& s) { s.algo = OptimAlgo::kSgd, s.momentum = 0.9; }},
      {"sgd_momentum_first",
       [](OptimStep& s) { s.algo = OptimAlgo::kSgd, s.momentum = 0.9, s.first_step = true; }},
      {"sgd_momentum_dampening_wd",
       [](OptimStep& s) {
         s.algo = OptimAlgo::kSgd, s.momentum = 0.8, s.dampening = 0.1, s.weight_decay = 0.05;
       }},
      {"sgd_nesterov_wd",
       [](OptimStep& s) {
         s.algo = OptimAlgo::kSgd, s.momentum = 0.9, s.nesterov = true, s.weight_decay = 0.01;
       }},
      {"sgd_momentum_maximize",
       [](OptimStep& s) { s.algo = OptimAlgo::kSgd, s.momentum = 0.5, s.maximize = true; }},
      {"adam", [](OptimStep& s) { s.algo = OptimAlgo::kAdam; }},
      {"adam_wd", [](OptimStep& s) { s.algo = OptimAlgo::kAdam, s.weight_decay = 0.01; }},
      {"adam_amsgrad_wd",
       [](OptimStep& s) { s.algo = OptimAlgo::kAdam, s.amsgrad = true, s.weight_decay = 0.01; }},
      {"adam_nobias_maximize",
       [](OptimStep& s) {
         s.algo = OptimAlgo::kAdam, s.bias_correction = false, s.maximize = true;
       }},
      {"adamw_wd", [](OptimStep& s) { s.algo = OptimAlgo::kAdamW, s.weight_decay = 0.1; }},
      {"adamw_amsgrad",
       [](OptimStep& s) { s.algo = OptimAlgo::kAdamW, s.amsgrad = true, s.weight_decay = 0.01; }},
      {"adamw_grad_scale",
       [](OptimStep& s) { s.algo = OptimAlgo::kAdamW, s.grad_scale = 0.25, s.step = 1000; }},
      {"lion", [](OptimStep& s) { s.algo = OptimAlgo::kLion, s.beta2 = 0.99; }},
      {"lion_wd", [](OptimStep& s) { s.algo = OptimAlgo::kLion, s.weight_decay = 0.1; }},
  };
  struct Storage {
    DType param, grad;
    bool master;
    Rounding rounding;
  };
  const Storage storages[] = {
      {DType::kF32, DType::kF32, false, Rounding::kNearest},
      {DType::kF32, DType::kBF16, false, Rounding::kNearest},
      {DType::kF32, DType::kF32, true, Rounding::kStochastic},  // ignored for f32
      {DType::kBF16, DType::kBF16, true, Rounding::kNearest},
      {DType::kBF16, DType::kBF16, true, Rounding::kStochastic},
      {DType::kBF16, DType::kF32, false, Rounding::kNearest},
      {DType::kBF16, DType::kBF16, false, Rounding::kStochastic},
      {DType::kBF16, DType::kF16, true, Rounding::kStochastic},
      {DType::kF16, DType::kF16, true, Rounding::kNearest},
      {DType::kF16, DType::kF32, false, Rounding::kNearest},
  };
  std::vector<OptimCase> out;
  for (const Algo& a : algos) {
    for (const Storage& st : storages) {
      OptimCase c;
      c.step.lr = 0.01;
      c.step.step = 3;
      c.step.seed = 0x123456789abcdef1ull;  // both key words non-zero
      a.set(c.step);
      c.step.param_dtype = st.param;
      c.step.grad_dtype = st.grad;
      c.step.rounding = st.rounding;
      c.master = st.master;
      c.index = static_cast<int>(out.size());
      c.algo = a.name;
      c.name = std::string(a.name) + "_" + std::string(dtype_name(st.param)) + "_grad_" +
               std::string(dtype_name(st.grad)) + (st.master ? "_master" : "") +
               (st.rounding == Rounding::kStochastic ? "_sr" : "");
      out.push_back(std::move(c));
    }
  }
  return out;
}

// The algorithm configurations of optim_cases(), in order (one test each; the test loops over
// the storages, so a process and its start-up serve ten cases).
inline std::vector<std::string> optim_algo_names() {
  std::vector<std::string> out;
  for (const OptimCase& c : optim_cases()) {
    if (out.empty() || out.back() != c.algo) out.push_back(c.algo);
  }
  return out;
}

// Host buffers of one call: tensor t has n[t] elements of every buffer (all three states are
// allocated whatever the algorithm reads; the unused ones must come back unchanged).
struct OptimData {
  DType param_dtype = DType::kF32, grad_dtype = DType::kF32;
  bool master = false;
  std::vector<int64_t> n;
  std::vector<uint64_t> rng_offset;
  std::vector<std::vector<uint8_t>> param, grad;
  std::vector<std::vector<float>> masters, s0, s1, s2;

  // Descriptors over these host buffers.
  std::vector<OptimTensor> tensors() {
    std::vector<OptimTensor> out(n.size());
    for (size_t t = 0; t < n.size(); ++t) {
      out[t] = {n[t],           param[t].data(), master ? masters[t].data() : nullptr,
                grad[t].data(), s0[t].data(),    s1[t].data(),
                s2[t].data(),   rng_offset[t]};
    }
    return out;
  }
};

inline void store_as(DType dt, float x, uint8_t* p) {
  if (dt == DType::kF32) {
    std::memcpy(p, &x, 4);
  } else {
    const uint16_t b = dt == DType::kBF16 ? fp::f32_to_bf16_bits(x) : fp::f32_to_f16_bits(x);
    std::memcpy(p, &b, 2);
  }
}

// Random values with special ones at fixed strides: NaN, +-Inf, -0 and subnormal gradients,
// -0 and subnormal parameters, and elements where gradient, parameter and state0 are all -0. Philox
// offsets are consecutive in elements (as a generator would give them without block rounding),
// starting at an odd base, so most are not multiples of 4.
inline OptimData make_optim_data(const OptimCase& c, const std::vector<int64_t>& counts,
                                 uint32_t seed) {
  OptimData d;
  d.param_dtype = c.step.param_dtype;
  d.grad_dtype = c.step.grad_dtype;
  d.master = c.master;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> sym(-1.0f, 1.0f), pos(0.0f, 1e-2f);
  const size_t psz = dtype_size(d.param_dtype), gsz = dtype_size(d.grad_dtype);
  uint64_t offset = 1000003;
  for (int64_t n : counts) {
    const auto un = static_cast<size_t>(n);
    d.n.push_back(n);
    d.rng_offset.push_back(offset);
    offset += static_cast<uint64_t>(n);
    std::vector<uint8_t> param(un * psz), grad(un * gsz);
    std::vector<float> master(un), s0(un), s1(un), s2(un);
    for (size_t i = 0; i < un; ++i) {
      float p = sym(rng), g = sym(rng);
      if (i % 991 == 3) p = -0.0f;
      if (i % 991 == 8) p = 3e-39f;  // f32 subnormal
      if (i % 997 == 5) g = std::nanf("");
      if (i % 997 == 11) g = INFINITY;
      if (i % 997 == 12) g = -INFINITY;
      if (i % 997 == 13) g = -0.0f;
      if (i % 997 == 17) g = 1e-40f;
      s0[i] = sym(rng) * 0.1f;
      s1[i] = pos(rng);
      s2[i] = pos(rng);
      if (i % 997 == 13) p = s0[i] = -0.0f;  // with g = -0: the signs of zero results (Lion's sign)
      master[i] = p;
      store_as(d.param_dtype, p, &param[i * psz]);
      store_as(d.grad_dtype, g, &grad[i * gsz]);
    }
    d.param.push_back(std::move(param));
    d.grad.push_back(std::move(grad));
    d.masters.push_back(std::move(master));
    d.s0.push_back(std::move(s0));
    d.s1.push_back(std::move(s1));
    d.s2.push_back(std::move(s2));
  }
  return d;
}

// Bit equality where both NaN counts as equal (NaN payloads differ between devices: GPU
// arithmetic returns the canonical NaN, x86 propagates an operand's payload).
inline bool same_f32(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}
inline bool same_bits(DType dt, const uint8_t* a, const uint8_t* b) {
  if (dt == DType::kF32) {
    float x, y;
    std::memcpy(&x, a, 4);
    std::memcpy(&y, b, 4);
    return same_f32(x, y);
  }
  uint16_t x, y;
  std::memcpy(&x, a, 2);
  std::memcpy(&y, b, 2);
  const float fx = dt == DType::kBF16 ? fp::bf16_bits_to_f32(x) : fp::f16_bits_to_f32(x);
  const float fy = dt == DType::kBF16 ? fp::bf16_bits_to_f32(y) : fp::f16_bits_to_f32(y);
  return x == y || (std::isnan(fx) && std::isnan(fy));
}

// Every buffer of `got` against `want`, element by element; reports the first few mismatches
// of each buffer and how many there were.
inline void expect_same_optim_data(const OptimData& want, const OptimData& got,
                                   const std::string& what) {
  ASSERT_EQ(want.n, got.n);
  for (size_t t = 0; t < want.n.size(); ++t) {
    const auto n = static_cast<size_t>(want.n[t]);
    const auto check = [&](const char* buf, DType dt, const uint8_t* w, const uint8_t* g) {
      const size_t sz = dtype_size(dt);
      int64_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        if (same_bits(dt, w + i * sz, g + i * sz)) continue;
        if (++bad <= 3) {
          uint32_t wb = 0, gb = 0;
          std::memcpy(&wb, w + i * sz, sz);
          std::memcpy(&gb, g + i * sz, sz);
          ADD_FAILURE() << what << ": tensor " << t << " (n " << n << ") " << buf << "[" << i
                        << "]: expected bits 0x" << std::hex << wb << ", got 0x" << gb << std::dec;
        }
      }
      EXPECT_EQ(bad, 0) << what << ": tensor " << t << " " << buf << ": " << bad << " of " << n
                        << " elements differ";
    };
    const auto f32 = [](const std::vector<float>& v) {
      return reinterpret_cast<const uint8_t*>(v.data());
    };
    check("param", want.param_dtype, want.param[t].data(), got.param[t].data());
    check("master", DType::kF32, f32(want.masters[t]), f32(got.masters[t]));
    check("state0", DType::kF32, f32(want.s0[t]), f32(got.s0[t]));
    check("state1", DType::kF32, f32(want.s1[t]), f32(got.s1[t]));
    check("state2", DType::kF32, f32(want.s2[t]), f32(got.s2[t]));
  }
}

// The reference: kernels::cpu::optimizer_step at the scalar level, on a copy.
inline OptimData cpu_reference(const OptimCase& c, const OptimData& in) {
  OptimData out = in;
  std::vector<OptimTensor> ts = out.tensors();
  const ScopedCpuIsa scalar(CpuIsa::kScalar);
  cpu::optimizer_step(c.step, ts.data(), static_cast<int64_t>(ts.size()));
  return out;
}

}  // namespace braid::kernels::cuda::testing
