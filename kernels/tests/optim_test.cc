// The fused optimizer kernels (braid/kernels/optim.h):
//   (a) every SIMD level gives the bits of the scalar reference, for every algorithm and
//       option, every param / master / grad dtype, the tail sizes and several tensors per
//       call, NaN and Inf gradients included;
//   (b) the scalar reference equals the formulas of optim.h transcribed once more below;
//   (c) stochastic rounding: the same bits on every level, always one of the two bf16
//       neighbours, unbiased on average, words taken at rng_offset + i;
//   (d) check_optim_step's errors name the field;
//   (e) unscale_and_check_finite;
//   (f) the prefetching SIMD loop against the scalar reference.
#pragma GCC optimize("fp-contract=off")  // the transcription rounds after every operation

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "../../core/tests/child_process.h"
#include "braid/core/cpu_features.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/core/rng.h"
#include "braid/kernels/optim.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using ::testing::HasSubstr;

// ---- buffers of f32, bf16 or f16 -------------------------------------------------------------

float get(const std::vector<uint8_t>& buf, DType dt, int64_t i) {
  if (dt == DType::kF32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, buf.data() + 2 * i, 2);
  return dt == DType::kBF16 ? fp::bf16_bits_to_f32(b) : fp::f16_bits_to_f32(b);
}

void put_bits16(std::vector<uint8_t>& buf, int64_t i, uint16_t b) {
  std::memcpy(buf.data() + 2 * i, &b, 2);
}

// Stores x rounded to nearest even.
void put(std::vector<uint8_t>& buf, DType dt, int64_t i, float x) {
  if (dt == DType::kF32) {
    std::memcpy(buf.data() + 4 * i, &x, 4);
  } else {
    put_bits16(buf, i, dt == DType::kBF16 ? fp::f32_to_bf16_bits(x) : fp::f32_to_f16_bits(x));
  }
}

std::vector<uint8_t> bytes_of(DType dt, int64_t n) {
  return std::vector<uint8_t>(static_cast<size_t>(n) * dtype_size(dt));
}

// ---- the configurations ----------------------------------------------------------------------

struct Algo {
  const char* name;
  OptimStep step;  // step 1's descriptor; first_step applies to step 1 only
};

std::vector<Algo> algos() {
  std::vector<Algo> out;
  auto add = [&](const char* name, const std::function<void(OptimStep&)>& edit) {
    OptimStep s;
    edit(s);
    out.push_back({name, s});
  };
  add("sgd", [](OptimStep& s) { s.algo = OptimAlgo::kSgd, s.lr = 0.1, s.momentum = 0; });
  add("sgd_wd_maximize", [](OptimStep& s) {
    s.algo = OptimAlgo::kSgd, s.lr = 0.05, s.weight_decay = 0.01, s.maximize = true;
    s.grad_scale = 1.0 / 3;
  });
  add("sgd_momentum_first", [](OptimStep& s) {
    s.algo = OptimAlgo::kSgd, s.lr = 0.1, s.momentum = 0.9, s.first_step = true;
  });
  add("sgd_momentum_dampening_wd", [](OptimStep& s) {
    s.algo = OptimAlgo::kSgd, s.lr = 0.1, s.momentum = 0.9, s.dampening = 0.25;
    s.weight_decay = 1e-2, s.grad_scale = 0.3;
  });
  add("sgd_nesterov_first_wd", [](OptimStep& s) {
    s.algo = OptimAlgo::kSgd, s.lr = 0.01, s.momentum = 0.9, s.nesterov = true;
    s.first_step = true, s.weight_decay = 0.01;
  });
  add("sgd_nesterov_maximize", [](OptimStep& s) {
    s.algo = OptimAlgo::kSgd, s.lr = 0.2, s.momentum = 0.5, s.nesterov = true, s.maximize = true;
    s.grad_scale = 1024;
  });
  add("adam", [](OptimStep& s) { s.algo = OptimAlgo::kAdam, s.lr = 1e-3; });
  add("adam_wd_amsgrad", [](OptimStep& s) {
    s.algo = OptimAlgo::kAdam, s.lr = 1e-2, s.weight_decay = 0.01, s.amsgrad = true;
    s.grad_scale = 0.3;
  });
  add("adam_nobc_maximize", [](OptimStep& s) {
    s.algo = OptimAlgo::kAdam, s.bias_correction = false, s.maximize = true, s.step = 5;
  });
  add("adamw", [](OptimStep& s) { s.algo = OptimAlgo::kAdamW, s.weight_decay = 0.01; });
  add("adamw_amsgrad_maximize", [](OptimStep& s) {
    s.algo = OptimAlgo::kAdamW, s.lr = 3e-3, s.weight_decay = 0.1, s.amsgrad = true;
    s.maximize = true, s.grad_scale = 1.0 / 3, s.beta1 = 0.8, s.beta2 = 0.95, s.eps = 1e-6;
  });
  add("adamw_nobc_nowd", [](OptimStep& s) {
    s.algo = OptimAlgo::kAdamW, s.bias_correction = false, s.weight_decay = 0, s.step = 7;
  });
  add("lion", [](OptimStep& s) {
    s.algo = OptimAlgo::kLion, s.lr = 1e-4, s.beta1 = 0.9, s.beta2 = 0.99, s.weight_decay = 0.1;
  });
  add("lion_maximize", [](OptimStep& s) {
    s.algo = OptimAlgo::kLion, s.lr = 1e-3, s.maximize = true, s.grad_scale = 0.3;
  });
  return out;
}

struct Storage {
  DType param;
  bool master;
  DType grad;
  Rounding rounding;
};

std::vector<Storage> storages() {
  std::vector<Storage> out;
  for (DType p : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool master : {false, true}) {
      for (DType g : {DType::kF32, DType::kBF16, DType::kF16}) {
        out.push_back({p, master, g, Rounding::kNearest});
        if (p == DType::kBF16) out.push_back({p, master, g, Rounding::kStochastic});
      }
    }
  }
  return out;
}

std::string describe(const Algo& a, const Storage& s) {
  std::ostringstream os;
  os << a.name << ", param " << s.param << (s.master ? " + f32 master" : "") << ", grad " << s.grad
     << (s.rounding == Rounding::kStochastic ? ", stochastic" : "");
  return os.str();
}

bool needs_state0(const OptimStep& s) {
  return s.algo != OptimAlgo::kSgd || s.momentum != 0;
}
bool needs_state1(const OptimStep& s) {
  return s.algo == OptimAlgo::kAdam || s.algo == OptimAlgo::kAdamW;
}
bool needs_state2(const OptimStep& s) {
  return needs_state1(s) && s.amsgrad;
}

// ---- problems: several tensors of one call ----------------------------------------------------

struct TensorData {
  int64_t n = 0;
  uint64_t rng_offset = 0;
  std::vector<uint8_t> param, grad;
  std::vector<float> master, s0, s1, s2;  // empty when absent
};

template <class T>
T* data_or_null(std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}

struct Problem {
  OptimStep step;
  uint32_t seed = 0;
  std::vector<TensorData> tensors;

  std::vector<OptimTensor> views() {
    std::vector<OptimTensor> out;
    for (auto& t : tensors) {
      OptimTensor v;
      v.n = t.n;
      v.param = data_or_null(t.param);
      v.master = data_or_null(t.master);
      v.grad = data_or_null(t.grad);
      v.state0 = data_or_null(t.s0);
      v.state1 = data_or_null(t.s1);
      v.state2 = data_or_null(t.s2);
      v.rng_offset = t.rng_offset;
      out.push_back(v);
    }
    return out;
  }
};

// Misaligned, crossing block 2^32 of the stream (a carry into the counter's high word), and
// ending on the last word of the 2^64-word stream (index 4 holds 16 elements).
constexpr uint64_t kRngOffsets[] = {
    0, 5, 4099, (uint64_t{1} << 34) - 9, ~uint64_t{0} - 15, 2, 7, uint64_t{1} << 20};

float from_bits(uint32_t b) {
  return std::bit_cast<float>(b);
}

// Special values in fixed positions. NaNs are the canonical quiet ones (+ and -): an element
// then has one NaN source over all steps, whatever the dtype round trips, so its NaN bits are
// defined (where two different NaNs meet in one operation, which survives is up to operand
// order, and the compiler may commute). NaN payloads are tested on one step below.
const std::vector<float> kSpecialGrads = {from_bits(0x7fc00000),
                                          from_bits(0xffc00000),
                                          INFINITY,
                                          -INFINITY,
                                          0.0f,
                                          -0.0f,
                                          1e-40f,
                                          3e38f,
                                          -1e-3f,
                                          6e4f};
const std::vector<float> kSpecialParams = {
    INFINITY, -INFINITY, from_bits(0x7fc00000), -0.0f, 0.0f, 1e-40f, 65504.0f, -3e38f};
bool grad_special_at(int64_t i) {
  return i % 13 == 5;
}

// nan_params: whether the special parameter values include a NaN (not where the gradients are
// random bits: a NaN parameter meeting a NaN gradient has two NaN sources).
Problem make_problem(const Algo& a, const Storage& s, uint32_t seed, bool nan_params = true) {
  Problem pr;
  pr.step = a.step;
  pr.step.param_dtype = s.param;
  pr.step.grad_dtype = s.grad;
  pr.step.rounding = s.rounding;
  pr.step.seed = 0x5eed0000u + seed;
  pr.seed = seed;
  const auto& sizes = testing::tail_sizes();
  for (size_t j = 0; j < sizes.size(); ++j) {
    TensorData t;
    const int64_t n = t.n = sizes[j];
    const uint32_t base = seed * 64 + static_cast<uint32_t>(j) * 8;
    t.rng_offset = kRngOffsets[j % std::size(kRngOffsets)];
    std::vector<float> values = testing::random_f32(n, base, -2.0f, 2.0f);
    for (int64_t i = 0; i < n; ++i) {
      if (i % 17 == 9 && !grad_special_at(i)) values[i] = kSpecialParams[(i / 17) % 8];
      if (!nan_params && std::isnan(values[i])) values[i] = 1.0f;
    }
    t.param = bytes_of(s.param, n);
    for (int64_t i = 0; i < n; ++i) put(t.param, s.param, i, values[i]);
    if (s.master) t.master = values;
    if (needs_state0(pr.step)) t.s0 = testing::random_f32(n, base + 1, -0.1f, 0.1f);
    if (needs_state1(pr.step)) t.s1 = testing::random_f32(n, base + 2, 0.0f, 0.01f);
    if (needs_state2(pr.step)) {
      t.s2 = testing::random_f32(n, base + 3, 0.0f, 0.01f);
      for (int64_t i = 0; i < n; ++i) t.s2[i] += t.s1[i];
    }
    t.grad = bytes_of(s.grad, n);
    pr.tensors.push_back(std::move(t));
  }
  return pr;
}

// Step k's gradients: uniform in [-1, 1) with the special values in fixed positions, or (bits)
// random f32 bit patterns: every exponent, NaNs with payloads, signalling NaNs.
void set_grads(Problem& pr, int k, bool bits) {
  for (size_t j = 0; j < pr.tensors.size(); ++j) {
    TensorData& t = pr.tensors[j];
    const uint32_t seed = pr.seed * 977 + static_cast<uint32_t>(k * 31 + j);
    std::vector<float> g =
        bits ? testing::random_f32_bits(t.n, seed) : testing::random_f32(t.n, seed, -1.0f, 1.0f);
    for (int64_t i = 0; i < t.n; ++i) {
      if (!bits && grad_special_at(i)) g[i] = kSpecialGrads[(i / 13) % kSpecialGrads.size()];
      put(t.grad, pr.step.grad_dtype, i, g[i]);
    }
  }
}

// Runs `steps` steps (step counts from the problem's, first_step on the first only).
void run_steps(Problem& pr, int steps, bool bits, const std::function<void(Problem&)>& apply) {
  const OptimStep first = pr.step;
  for (int k = 0; k < steps; ++k) {
    pr.step.step = first.step + k;
    pr.step.first_step = first.first_step && k == 0;
    set_grads(pr, k, bits);
    apply(pr);
  }
  pr.step = first;
}

void kernel_step(Problem& pr) {
  std::vector<OptimTensor> v = pr.views();
  optimizer_step(pr.step, v.data(), static_cast<int64_t>(v.size()));
}

void kernel_step_at(CpuIsa isa, Problem& pr) {
  ScopedCpuIsa scope(isa);
  kernel_step(pr);
}

uint32_t bits_of(float x) {
  return std::bit_cast<uint32_t>(x);
}
uint32_t bits_of(uint8_t x) {
  return x;
}

// "" when both hold the same bytes, else the first difference.
template <class T>
std::string diff(const char* what, const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return std::string(what) + ": sizes differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (bits_of(a[i]) != bits_of(b[i])) {
      std::ostringstream os;
      os << what << "[" << i << "] of " << a.size() << ": 0x" << std::hex << bits_of(a[i])
         << " vs 0x" << bits_of(b[i]);
      return os.str();
    }
  }
  return "";
}

std::string first_difference(const Problem& a, const Problem& b) {
  for (size_t j = 0; j < a.tensors.size(); ++j) {
    const TensorData &x = a.tensors[j], &y = b.tensors[j];
    for (const std::string& d :
         {diff("param byte", x.param, y.param), diff("master", x.master, y.master),
          diff("state0", x.s0, y.s0), diff("state1", x.s1, y.s1), diff("state2", x.s2, y.s2)}) {
      if (!d.empty()) return d;
    }
  }
  return "";
}

// ---- (a) every SIMD level against the scalar reference ----------------------------------------

class OptimIsaTest : public ::testing::TestWithParam<CpuIsa> {};

// Three steps of every configuration: states carried from step to step, Inf and NaN kept in
// their positions.
TEST_P(OptimIsaTest, MatchesScalarOverSteps) {
  uint32_t seed = 1;
  for (const Algo& a : algos()) {
    for (const Storage& s : storages()) {
      Problem ref = make_problem(a, s, seed++), got = ref;
      run_steps(ref, 3, false, [](Problem& p) { kernel_step_at(CpuIsa::kScalar, p); });
      run_steps(got, 3, false, [&](Problem& p) { kernel_step_at(GetParam(), p); });
      ASSERT_EQ(first_difference(ref, got), "") << describe(a, s);
    }
  }
}

// One step with gradients of random bit patterns: NaN payloads, signalling NaNs, subnormals.
TEST_P(OptimIsaTest, MatchesScalarOnRandomBitGradients) {
  uint32_t seed = 1000;
  for (const Algo& a : algos()) {
    for (const Storage& s : storages()) {
      Problem ref = make_problem(a, s, seed++, false), got = ref;
      run_steps(ref, 1, true, [](Problem& p) { kernel_step_at(CpuIsa::kScalar, p); });
      run_steps(got, 1, true, [&](Problem& p) { kernel_step_at(GetParam(), p); });
      ASSERT_EQ(first_difference(ref, got), "") << describe(a, s);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OptimLevels, OptimIsaTest, ::testing::ValuesIn(testing::simd_isas()),
                         testing::isa_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OptimIsaTest);

// The SIMD loop with and without its prefetches (Note [Step prefetch] in optim.cc): the same
// bits as the scalar reference either way. BRAID_OPTIM_PREFETCH is read once per process, so
// each setting runs in a child; the sizes include tensors of several 512-element blocks.
TEST(OptimPrefetch, OnAndOffMatchScalar) {
  if (testing::simd_isas().empty()) GTEST_SKIP() << "no SIMD level on this CPU";
  for (const char* setting : {"0", "1"}) {
    PatchEnvironment env{{"BRAID_OPTIM_PREFETCH", setting}};
    EXPECT_EQ(braid::testing::run_child_test("OptimPrefetchChild.MatchesScalar"),
              braid::testing::kChildPassed)
        << "BRAID_OPTIM_PREFETCH=" << setting;
  }
}

TEST(OptimPrefetchChild, MatchesScalar) {
  if (!braid::testing::in_child())
    GTEST_SKIP() << "runs as a child of OptimPrefetch.OnAndOffMatchScalar";
  uint32_t seed = 500;
  for (const Algo& a : algos()) {
    for (const Storage& s : storages()) {
      Problem ref = make_problem(a, s, seed++), got = ref;
      run_steps(ref, 2, false, [](Problem& p) { kernel_step_at(CpuIsa::kScalar, p); });
      run_steps(got, 2, false, [](Problem& p) { kernel_step_at(cpu_max_isa(), p); });
      EXPECT_EQ(first_difference(ref, got), "") << describe(a, s);
    }
  }
  braid::testing::exit_child();
}

// ---- (b) the scalar reference against the formulas of optim.h ---------------------------------

uint32_t stream_word(uint64_t seed, uint64_t k) {
  return philox4x32_10(philox_counter(k / 4), philox_key(seed))[k % 4];
}

uint16_t bf16_stochastic(float x, uint32_t word) {
  if (!std::isfinite(x)) return fp::f32_to_bf16_bits(x);
  return static_cast<uint16_t>((std::bit_cast<uint32_t>(x) + (word & 0xffffu)) >> 16);
}

// optim.h's formulas, element by element in float: each line one rounded operation.
void transcribe_step(const OptimStep& st, TensorData& t) {
  const double bc1 = st.bias_correction ? 1.0 - std::pow(st.beta1, double(st.step)) : 1.0;
  const double bc2 = st.bias_correction ? 1.0 - std::pow(st.beta2, double(st.step)) : 1.0;
  const float gs = float(st.grad_scale), neg_lr = float(-st.lr), wd = float(st.weight_decay);
  const float decay = float(1.0 - st.lr * st.weight_decay);
  const float mom = float(st.momentum), omd = float(1.0 - st.dampening);
  const float b1 = float(st.beta1), omb1 = float(1.0 - st.beta1);
  const float b2 = float(st.beta2), omb2 = float(1.0 - st.beta2), eps = float(st.eps);
  const float neg_step_size = float(-(st.lr / bc1)), bc2_sqrt = float(std::sqrt(bc2));
  const bool adam = st.algo == OptimAlgo::kAdam, adamw = st.algo == OptimAlgo::kAdamW;
  for (int64_t i = 0; i < t.n; ++i) {
    float g = get(t.grad, st.grad_dtype, i) * gs;
    if (st.maximize) g = -g;
    float p = t.master.empty() ? get(t.param, st.param_dtype, i) : t.master[i];
    if (st.algo == OptimAlgo::kSgd) {
      if (st.weight_decay != 0) g = g + wd * p;
      if (st.momentum != 0) {
        const float buf = st.first_step ? g : t.s0[i] * mom + omd * g;
        t.s0[i] = buf;
        g = st.nesterov ? g + mom * buf : buf;
      }
      p = p + neg_lr * g;
    } else if (st.algo == OptimAlgo::kLion) {
      const float c = t.s0[i] * b1 + omb1 * g;
      const float sign = c > 0 ? 1.0f : c < 0 ? -1.0f : c;  // +-0 and NaN stay as they are
      p = p * decay;
      p = p + neg_lr * sign;
      t.s0[i] = t.s0[i] * b2 + omb2 * g;
    } else {
      if (adam && st.weight_decay != 0) g = g + wd * p;
      if (adamw) p = p * decay;
      t.s0[i] = t.s0[i] * b1 + omb1 * g;
      t.s1[i] = t.s1[i] * b2 + (omb2 * g) * g;
      float v = t.s1[i];
      if (st.amsgrad) {  // torch.maximum: NaN wins, the first operand first
        float& vmax = t.s2[i];
        if (!std::isnan(vmax) && (std::isnan(v) || vmax < v)) vmax = v;
        v = vmax;
      }
      const float denom = std::sqrt(v) / bc2_sqrt + eps;
      p = p + neg_step_size * (t.s0[i] / denom);
    }
    if (!t.master.empty()) t.master[i] = p;
    if (st.param_dtype == DType::kBF16 && st.rounding == Rounding::kStochastic) {
      put_bits16(t.param, i, bf16_stochastic(p, stream_word(st.seed, t.rng_offset + i)));
    } else {
      put(t.param, st.param_dtype, i, p);
    }
  }
}

TEST(OptimScalar, MatchesTranscriptionOverSteps) {
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  uint32_t seed = 2000;
  for (const Algo& a : algos()) {
    for (const Storage& s : storages()) {
      Problem ref = make_problem(a, s, seed++), got = ref;
      run_steps(ref, 3, false, [](Problem& p) {
        for (TensorData& t : p.tensors) transcribe_step(p.step, t);
      });
      run_steps(got, 3, false, kernel_step);
      ASSERT_EQ(first_difference(ref, got), "") << describe(a, s);
    }
  }
}

// The host scalars of one step, derived by hand for AdamW at step 10.
TEST(OptimScalar, HostScalars) {
  OptimStep st;
  st.lr = 1e-3, st.weight_decay = 0.01, st.step = 10, st.beta1 = 0.9, st.beta2 = 0.999;
  const OptimScalars s = optim_scalars(st);
  EXPECT_EQ(s.neg_lr, -1e-3f);
  EXPECT_EQ(s.decay, float(0.99999));
  EXPECT_EQ(s.one_minus_beta1, float(0.1));
  EXPECT_EQ(s.one_minus_beta2, float(0.001));
  EXPECT_EQ(s.neg_step_size, float(-(1e-3 / (1.0 - std::pow(0.9, 10.0)))));
  EXPECT_EQ(s.bc2_sqrt, float(std::sqrt(1 - std::pow(0.999, 10))));
  st.bias_correction = false;
  EXPECT_EQ(optim_scalars(st).neg_step_size, -1e-3f);
  EXPECT_EQ(optim_scalars(st).bc2_sqrt, 1.0f);
}

// ---- (c) stochastic rounding -----------------------------------------------------------------

// bf16 parameters with an f32 master and lr = 0: the master keeps its value (signalling NaNs
// become quiet) and the parameter gets it stochastically rounded.
std::vector<uint16_t> round_by_step(std::vector<float>& x, uint64_t seed, uint64_t offset) {
  OptimStep st;
  st.algo = OptimAlgo::kSgd, st.lr = 0, st.momentum = 0;
  st.param_dtype = DType::kBF16, st.rounding = Rounding::kStochastic, st.seed = seed;
  std::vector<float> grad(x.size(), 0.0f);
  std::vector<uint16_t> param(x.size());
  OptimTensor t;
  t.n = static_cast<int64_t>(x.size());
  t.param = param.data(), t.master = x.data(), t.grad = grad.data(), t.rng_offset = offset;
  optimizer_step(st, &t, 1);
  return param;
}

class OptimStochasticTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  ScopedCpuIsa isa_{GetParam()};
};

TEST_P(OptimStochasticTest, OneOfTheTwoNeighboursAndSameBitsAsScalar) {
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{20011}}) {
    std::vector<float> x = testing::random_f32_bits(n, 77), x_ref = x;
    const std::vector<uint16_t> got = round_by_step(x, 9, 3);
    std::vector<uint16_t> want;
    {
      ScopedCpuIsa scalar(CpuIsa::kScalar);
      want = round_by_step(x_ref, 9, 3);
    }
    ASSERT_EQ(got, want) << "n " << n;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = std::bit_cast<uint32_t>(x[i]);
      if (!std::isfinite(x[i])) {
        EXPECT_EQ(got[i], fp::f32_to_bf16_bits(x[i])) << i;  // nearest: Inf, quiet NaN
        continue;
      }
      const uint32_t down = bits >> 16;  // toward zero
      if ((bits & 0xffffu) == 0) {
        EXPECT_EQ(got[i], down) << "exact value " << x[i] << " changed";
      } else {
        EXPECT_TRUE(got[i] == down || got[i] == down + 1) << x[i] << " -> " << got[i];
      }
    }
  }
}

// Element i of a tensor at rng_offset r uses word r + i: shifting the offset shifts the words.
TEST_P(OptimStochasticTest, OffsetSelectsTheWords) {
  std::vector<float> x(1000, 1.0f + 0x1p-8f);  // halfway: each word decides up or down
  for (size_t i = 0; i < x.size(); ++i) x[i] += static_cast<float>(i) * 0x1p-7f;
  std::vector<float> x0 = x;
  const std::vector<uint16_t> at0 = round_by_step(x0, 5, 0);
  for (uint64_t r : {1, 3, 4, 17, 64}) {
    std::vector<float> shifted(x.begin() + static_cast<int64_t>(r), x.end());
    const std::vector<uint16_t> got = round_by_step(shifted, 5, r);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], at0[i + r]) << "r " << r << " i " << i;
  }
  std::vector<float> x1 = x;
  EXPECT_NE(round_by_step(x1, 6, 0), at0) << "another seed, the same roundings";
}

INSTANTIATE_TEST_SUITE_P(OptimLevels, OptimStochasticTest,
                         ::testing::ValuesIn(testing::supported_isas()), testing::isa_test_name);

// Rounded many times, a value averages to itself: the mean of n draws lies within 6 standard
// deviations (ulp * sqrt(q (1 - q) / n), q the chance of rounding away from zero). Fixed seed,
// so the test is deterministic; a biased rule (nearest, truncation) misses by > 100 sigma.
TEST(OptimStochastic, UnbiasedOnAverage) {
  const int64_t n = int64_t{1} << 20;
  for (float value : {1.0f + 0x1p-10f, -(1.0f + 3 * 0x1p-9f), 3.14159f, 1e-30f, -7.7e5f}) {
    std::vector<float> x(static_cast<size_t>(n), value);
    const std::vector<uint16_t> r = round_by_step(x, 2024, 0);
    const float lo =
        fp::bf16_bits_to_f32(static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16));
    const double ulp = std::fabs(double(fp::bf16_bits_to_f32(fp::f32_to_bf16_bits(lo) + 1)) - lo);
    const double q = std::fabs(double(value) - lo) / ulp;
    double sum = 0;
    for (uint16_t b : r) sum += double(fp::bf16_bits_to_f32(b)) - lo;
    const double mean = sum / double(n) + lo;
    const double sigma = ulp * std::sqrt(q * (1 - q) / double(n));
    EXPECT_NEAR(mean, value, 6 * sigma) << value << " rounds up with probability " << q;
  }
}

// ---- (d) argument checks ---------------------------------------------------------------------

// One valid AdamW tensor of 8 elements and what check_optim_step says about edits to it.
class OptimCheckTest : public ::testing::Test {
 protected:
  std::vector<float> param = std::vector<float>(8), grad = param, m = param, v = param,
                     vmax = param, master = param;
  OptimStep step;
  OptimTensor t;

  void SetUp() override {
    t.n = 8, t.param = param.data(), t.grad = grad.data();
    t.state0 = m.data(), t.state1 = v.data(), t.state2 = vmax.data();
  }

  void expect_error(const std::string& field, ErrorKind kind = ErrorKind::kInvalidArgument,
                    const OptimTensor* tensors = nullptr, int64_t count = 1) {
    if (tensors == nullptr) tensors = &t;
    for (int call = 0; call < 2; ++call) {
      try {
        if (call == 0) check_optim_step(step, tensors, count);
        if (call == 1) optimizer_step(step, tensors, count);
        ADD_FAILURE() << "no error for " << field;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << e.what();
        EXPECT_THAT(e.message(), HasSubstr(field));
      }
    }
  }

  // edit() breaks one field of step or t; the error must name it. step and t are restored.
  void bad(const std::string& field, const std::function<void()>& edit,
           ErrorKind kind = ErrorKind::kInvalidArgument) {
    const OptimStep step_before = step;
    const OptimTensor t_before = t;
    edit();
    expect_error(field, kind);
    step = step_before;
    t = t_before;
  }
};

TEST_F(OptimCheckTest, ValidStepPasses) {
  EXPECT_NO_THROW(optimizer_step(step, &t, 1));
  OptimTensor empty;  // n == 0: null pointers are fine
  EXPECT_NO_THROW(optimizer_step(step, &empty, 1));
  EXPECT_NO_THROW(optimizer_step(step, nullptr, 0));
  step.algo = OptimAlgo::kSgd, step.momentum = 0;  // needs no state
  t.state0 = t.state1 = t.state2 = nullptr;
  EXPECT_NO_THROW(optimizer_step(step, &t, 1));
}

TEST_F(OptimCheckTest, HyperParameters) {
  bad("lr = -0.1", [&] { step.lr = -0.1; });
  bad("lr = nan", [&] { step.lr = NAN; });
  bad("weight_decay = -1", [&] { step.weight_decay = -1; });
  bad("grad_scale = inf", [&] { step.grad_scale = INFINITY; });
  bad("beta1 = 1", [&] { step.beta1 = 1.0; });
  bad("beta2 = -0.5", [&] { step.beta2 = -0.5; });
  bad("eps = -1e-08", [&] { step.eps = -1e-8; });
  bad("step = 0", [&] { step.step = 0; });
  bad("beta2 = 1.5", [&] { step.algo = OptimAlgo::kLion, step.beta2 = 1.5; });
  bad("momentum = -0.9", [&] { step.algo = OptimAlgo::kSgd, step.momentum = -0.9; });
  bad("dampening = nan", [&] { step.algo = OptimAlgo::kSgd, step.dampening = NAN; });
  bad("nesterov", [&] { step.algo = OptimAlgo::kSgd, step.nesterov = true; });
  bad("dampening = 0.1", [&] {
    step.algo = OptimAlgo::kSgd, step.nesterov = true, step.momentum = 0.9, step.dampening = 0.1;
  });
  bad("algo = 9", [&] { step.algo = static_cast<OptimAlgo>(9); });
  bad(
      "param_dtype i8", [&] { step.param_dtype = DType::kI8; }, ErrorKind::kNotSupported);
  bad(
      "grad_dtype f64", [&] { step.grad_dtype = DType::kF64; }, ErrorKind::kNotSupported);
  bad("rounding = 4", [&] { step.rounding = static_cast<Rounding>(4); });
  bad(
      "rounding kStochastic with param_dtype f16",
      [&] { step.param_dtype = DType::kF16, step.rounding = Rounding::kStochastic; },
      ErrorKind::kNotSupported);
}

TEST_F(OptimCheckTest, Tensors) {
  bad("tensors[0].n = -3", [&] { t.n = -3; });
  bad("tensors[0].param is null", [&] { t.param = nullptr; });
  bad("tensors[0].grad is null", [&] { t.grad = nullptr; });
  bad("tensors[0].state0 (exp_avg) is null", [&] { t.state0 = nullptr; });
  bad("tensors[0].state1 (exp_avg_sq) is null", [&] { t.state1 = nullptr; });
  bad("tensors[0].state2 (max_exp_avg_sq) is null",
      [&] { step.amsgrad = true, t.state2 = nullptr; });
  bad("tensors[0].state0 (exp_avg) and tensors[0].state1 (exp_avg_sq) overlap",
      [&] { t.state1 = m.data() + 7; });
  bad("tensors[0].param and tensors[0].master overlap", [&] { t.master = param.data() + 4; });
  bad("tensors[0].state0 (momentum_buffer) is null",
      [&] { step.algo = OptimAlgo::kSgd, step.momentum = 0.9, t.state0 = nullptr; });
  bad("tensors[0].rng_offset = 18446744073709551609 with n = 8 passes the end", [&] {
    step.param_dtype = DType::kBF16, step.rounding = Rounding::kStochastic;
    t.rng_offset = ~uint64_t{0} - 6;
  });
  std::vector<OptimTensor> two = {t, t};
  two[1].grad = nullptr;
  expect_error("tensors[1].grad is null", ErrorKind::kInvalidArgument, two.data(), 2);
  expect_error("count = -1", ErrorKind::kInvalidArgument, &t, -1);
  try {
    optimizer_step(step, nullptr, 2);
    ADD_FAILURE() << "null tensors accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("tensors is null for count = 2"));
  }
}

// ---- (e) unscale_and_check_finite -------------------------------------------------------------

class OptimUnscaleTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  ScopedCpuIsa isa_{GetParam()};
};

// Tensors of every tail size in one call, scaled: each element is the cast of its f32 product.
TEST_P(OptimUnscaleTest, ScalesLikeACastOfTheProduct) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (float inv : {0x1p-10f, 0.3f, 3.0f}) {
      std::vector<std::vector<uint8_t>> bufs, want;
      for (int64_t n : testing::tail_sizes()) {
        const auto x = testing::random_f32(n, static_cast<uint32_t>(n), -2e4f, 2e4f);
        bufs.push_back(bytes_of(dt, n));
        want.push_back(bytes_of(dt, n));
        for (int64_t i = 0; i < n; ++i) {
          put(bufs.back(), dt, i, x[i]);
          put(want.back(), dt, i, get(bufs.back(), dt, i) * inv);
        }
      }
      std::vector<void*> data;
      std::vector<int64_t> counts;
      for (size_t k = 0; k < bufs.size(); ++k) {
        data.push_back(bufs[k].data());
        counts.push_back(testing::tail_sizes()[k]);
      }
      EXPECT_FALSE(unscale_and_check_finite(dt, data.data(), counts.data(),
                                            static_cast<int64_t>(data.size()), inv));
      EXPECT_EQ(bufs, want) << dt << " inv_scale " << inv;
    }
  }
}

// NaN, +Inf and -Inf at every position of tensors around the vector widths, found whether
// the data are scaled or only checked, in the first or the second tensor of the call.
TEST_P(OptimUnscaleTest, FindsNonFiniteAtEveryPosition) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 100}) {
      for (int64_t pos = 0; pos < n; ++pos) {
        for (float bad : {NAN, INFINITY, -INFINITY}) {
          for (float inv : {0.5f, 1.0f}) {
            std::vector<uint8_t> clean = bytes_of(dt, 40), dirty = bytes_of(dt, n);
            for (int64_t i = 0; i < 40; ++i) put(clean, dt, i, 1.5f);
            for (int64_t i = 0; i < n; ++i) put(dirty, dt, i, i == pos ? bad : 2.0f);
            void* data[2] = {clean.data(), dirty.data()};
            const int64_t counts[2] = {40, n};
            ASSERT_TRUE(unscale_and_check_finite(dt, data, counts, 2, inv))
                << dt << " n " << n << " pos " << pos << " " << bad;
            const float other = get(dirty, dt, pos == 0 ? n - 1 : 0);
            if (n > 1) {
              EXPECT_EQ(other, inv == 1.0f ? 2.0f : 1.0f);
            }
            EXPECT_EQ(get(clean, dt, 39), inv == 1.0f ? 1.5f : 0.75f);
          }
        }
      }
    }
  }
}

// Random bit patterns: inv_scale == 1 leaves every byte as it was; any other scale gives the
// scalar reference's bits, NaN payloads included.
TEST_P(OptimUnscaleTest, RandomBitsUntouchedAtOneAndAsScalarOtherwise) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t n : testing::tail_sizes()) {
      const auto x = testing::random_f32_bits(n, static_cast<uint32_t>(n) + 7);
      std::vector<uint8_t> buf = bytes_of(dt, n);
      bool any = false;
      for (int64_t i = 0; i < n; ++i) {
        put(buf, dt, i, x[i]);
        any |= !std::isfinite(get(buf, dt, i));
      }
      std::vector<uint8_t> before = buf, ref = buf;
      void* data = buf.data();
      EXPECT_EQ(unscale_and_check_finite(dt, &data, &n, 1, 1.0f), any);
      EXPECT_EQ(buf, before) << dt << " n " << n;
      EXPECT_EQ(unscale_and_check_finite(dt, &data, &n, 1, 0.3f), any);
      void* ref_data = ref.data();
      ScopedCpuIsa scalar(CpuIsa::kScalar);
      EXPECT_EQ(unscale_and_check_finite(dt, &ref_data, &n, 1, 0.3f), any);
      EXPECT_EQ(buf, ref) << dt << " n " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OptimLevels, OptimUnscaleTest,
                         ::testing::ValuesIn(testing::supported_isas()), testing::isa_test_name);

TEST(OptimUnscale, BadArguments) {
  float x[4] = {};
  void* data[1] = {x};
  int64_t counts[1] = {4};
  testing::expect_error([&] { unscale_and_check_finite(DType::kI32, data, counts, 1, 0.5f); },
                        ErrorKind::kNotSupported, {"dtype i32"});
  counts[0] = -4;
  testing::expect_error([&] { unscale_and_check_finite(DType::kF32, data, counts, 1, 0.5f); },
                        ErrorKind::kInvalidArgument, {"counts[0] = -4"});
  counts[0] = 4;
  data[0] = nullptr;
  testing::expect_error([&] { unscale_and_check_finite(DType::kF32, data, counts, 1, 0.5f); },
                        ErrorKind::kInvalidArgument, {"data[0] is null"});
  testing::expect_error([&] { unscale_and_check_finite(DType::kF32, data, counts, -1, 0.5f); },
                        ErrorKind::kInvalidArgument, {"count = -1"});
  EXPECT_FALSE(unscale_and_check_finite(DType::kF32, nullptr, nullptr, 0, 0.5f));
}

}  // namespace
}  // namespace braid::kernels::cpu

namespace braid::kernels::cpu {
namespace {

// The threaded step cuts tensors into pieces: the bits must not change, stochastic rounding
// included (each element keeps its Philox word).
TEST(OptimThreaded, SameBitsAsOneThread) {
  for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic}) {
    OptimStep step;
    step.algo = OptimAlgo::kAdamW;
    step.weight_decay = 0.1;
    step.amsgrad = true;
    step.param_dtype = DType::kBF16;
    step.grad_dtype = DType::kBF16;
    step.rounding = rounding;
    step.seed = 99;
    const std::vector<int64_t> sizes = {(int64_t{1} << 18) + 37, 1000, 7};
    auto run = [&](int threads) {
      std::vector<std::vector<uint16_t>> params, grads;
      std::vector<std::vector<float>> master, m, v, vmax;
      std::vector<OptimTensor> ts;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const int64_t n = sizes[i];
        params.emplace_back(n);
        grads.emplace_back(n);
        master.emplace_back(n);
        m.emplace_back(n, 0.0f);
        v.emplace_back(n, 0.0f);
        vmax.emplace_back(n, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          master[i][j] = 1.0f + 1e-3f * static_cast<float>((j * 7919 + i) % 1000);
          params[i][j] = bfloat16(master[i][j]).bits;
          grads[i][j] = bfloat16(0.01f * static_cast<float>((j * 104729) % 201 - 100)).bits;
        }
        OptimTensor t;
        t.n = n;
        t.param = params[i].data();
        t.master = master[i].data();
        t.grad = grads[i].data();
        t.state0 = m[i].data();
        t.state1 = v[i].data();
        t.state2 = vmax[i].data();
        t.rng_offset = 1000003 * i;
        ts.push_back(t);
      }
      for (int s = 1; s <= 2; ++s) {
        step.step = s;
        optimizer_step_threaded(step, ts.data(), static_cast<int64_t>(ts.size()), threads);
      }
      return std::make_pair(params, master);
    };
    const auto one = run(1);
    for (int threads : {2, 3}) {
      const auto many = run(threads);
      EXPECT_EQ(many.first, one.first) << "threads " << threads;
      EXPECT_EQ(many.second, one.second) << "threads " << threads;
    }
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
