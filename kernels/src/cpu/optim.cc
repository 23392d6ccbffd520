// optimizer_step() and unscale_and_check_finite() (braid/kernels/optim.h): the host-side
// scalars, the argument checks, the block driver every SIMD level shares, and the scalar
// reference loops (namespace scalar::) that the SIMD loops of optim_simd.h match bit for bit.
#pragma GCC optimize("fp-contract=off")  // first: Note [No FMA contraction] in optim_simd.h

#include "braid/kernels/optim.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "braid/core/cpu_features.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/core/rng.h"
#include "cast_kernels.h"
#include "elementwise_kernels.h"
#include "optim_kernels.h"

namespace braid::kernels {
namespace cpu {
namespace {

// ---- the scalar reference: the formulas of optim.h, one f32 operation per step -------------

float flip_sign(float x, uint32_t sign) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ sign);
}

// torch.maximum: a NaN a wins, then a NaN b; a when equal.
float max_nan(float a, float b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a < b ? b : a;
}

// +-1; the zero itself for +-0 and c itself for NaN.
float sign_of(float c) {
  if (c > 0.0f) return 1.0f;
  return c < 0.0f ? -1.0f : c;
}

template <OptimVariant kVar>
float sgd(const OptimScalars& s, float p, float g, float* buf) {
  if constexpr (kVar.weight_decay) g = g + s.weight_decay * p;
  if constexpr (kVar.momentum != SgdMomentum::kNone) {
    const float b = kVar.first_step ? g : *buf * s.momentum + s.one_minus_dampening * g;
    *buf = b;
    g = kVar.momentum == SgdMomentum::kNesterov ? g + s.momentum * b : b;
  }
  return p + s.neg_lr * g;
}

template <OptimVariant kVar>
float adam(const OptimScalars& s, float p, float g, float* m, float* v, float* vmax) {
  if constexpr (kVar.algo == OptimAlgo::kAdam && kVar.weight_decay) g = g + s.weight_decay * p;
  if constexpr (kVar.algo == OptimAlgo::kAdamW) p = p * s.decay;
  *m = *m * s.beta1 + s.one_minus_beta1 * g;
  *v = *v * s.beta2 + (s.one_minus_beta2 * g) * g;
  float v_used = *v;
  if constexpr (kVar.amsgrad) v_used = *vmax = max_nan(*vmax, *v);
  const float denom = std::sqrt(v_used) / s.bc2_sqrt + s.eps;
  return p + s.neg_step_size * (*m / denom);
}

float lion(const OptimScalars& s, float p, float g, float* m) {
  const float dir = *m * s.beta1 + s.one_minus_beta1 * g;
  p = p * s.decay + s.neg_lr * sign_of(dir);
  *m = *m * s.beta2 + s.one_minus_beta2 * g;
  return p;
}

template <OptimVariant kVar>
void math_loop(const OptimScalars& s, uint32_t grad_sign, const OptimBlock& b) {
  for (int64_t i = 0; i < b.n; ++i) {
    const float g = flip_sign(b.g[i] * s.grad_scale, grad_sign);
    float& p = b.p[i];
    if constexpr (kVar.algo == OptimAlgo::kSgd) {
      p = sgd<kVar>(s, p, g, uses_state0(kVar) ? b.s0 + i : nullptr);
    } else if constexpr (kVar.algo == OptimAlgo::kLion) {
      p = lion(s, p, g, b.s0 + i);
    } else {
      p = adam<kVar>(s, p, g, b.s0 + i, b.s1 + i, kVar.amsgrad ? b.s2 + i : nullptr);
    }
  }
}

// Rounding::kStochastic: add the word's low 16 bits, truncate; NaN and Inf round to nearest.
uint16_t stochastic_bf16(float x, uint32_t word) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) >= 0x7f800000u) return fp::f32_to_bf16_bits(x);
  return static_cast<uint16_t>((bits + (word & 0xffffu)) >> 16);
}

void round_bf16_stochastic(const float* p, uint16_t* out, int64_t n, uint64_t seed,
                           uint64_t first_word) {
  const PhiloxKey key = philox_key(seed);
  PhiloxCounter words{};
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t k = first_word + static_cast<uint64_t>(i);  // < 2^64: check_tensor
    if (i == 0 || (k & 3) == 0) words = philox4x32_10(philox_counter(k >> 2), key);
    out[i] = stochastic_bf16(p[i], words[k & 3]);
  }
}

template <class T, bool kScale>
bool unscale_loop(void* data, int64_t n, float inv_scale) {
  T* x = static_cast<T*>(data);
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(x[i]);
    found |= !std::isfinite(v);
    if constexpr (kScale) x[i] = T(v * inv_scale);
  }
  return found;
}

template <size_t... kI>
void fill_math(OptimTable& t, std::index_sequence<kI...>) {
  ((t.math[kI] = math_loop<kOptimVariants[kI]>), ...);
}

// ---- dispatch -------------------------------------------------------------------------------

const EwTables<OptimTable>& optim_tables() {
  static const EwTables<OptimTable> tables(scalar::fill_optim_table, avx2::fill_optim_table,
                                           avx512::fill_optim_table);
  return tables;
}

// The variant of a (checked) step: the branches the formulas take, as torch decides them
// (`if weight_decay != 0`, `if momentum != 0`).
OptimVariant variant_of(const OptimStep& st) {
  OptimVariant v{st.algo, false, SgdMomentum::kNone, false, false};
  if (st.algo == OptimAlgo::kSgd || st.algo == OptimAlgo::kAdam) {
    v.weight_decay = st.weight_decay != 0.0;
  }
  if (st.algo == OptimAlgo::kSgd && st.momentum != 0.0) {
    v.momentum = st.nesterov ? SgdMomentum::kNesterov : SgdMomentum::kPlain;
    v.first_step = st.first_step;
  }
  if (st.algo == OptimAlgo::kAdam || st.algo == OptimAlgo::kAdamW) v.amsgrad = st.amsgrad;
  return v;
}

int variant_index(const OptimVariant& v) {
  for (int i = 0; i < kNumOptimVariants; ++i) {
    if (kOptimVariants[i] == v) return i;
  }
  BRAID_ASSERT(false, "every checked OptimStep maps to an entry of kOptimVariants");
  return -1;
}

// Elements per block. Small on purpose: the widening, math and narrowing passes over one
// block then follow each other quickly enough that every stream (grad, master, states, param)
// stays in flight, and a bf16 + master step runs at the speed of an f32 one (64 Mi elements
// on Zen 5: 4096-element blocks were 30% slower, 512 and 256 equal).
constexpr int64_t kBlock = 512;

// Note [Step prefetch]
// On the Intel Xeon development VM (2026-12-03) the 64 Mi-element step ran 10-20% faster when
// the SIMD loop prefetched every array it streams kPrefetchElems elements ahead, one line per
// array per 64 bytes of progress (f32 AdamW 24 -> 26.7 GB/s on one thread, 45 -> 50 on two;
// bf16 + master 21.6 -> 25.9 and 40.4 -> 48; docs/performance.md, "Prefetch in the step"): the
// hardware prefetchers stop at each 4 KiB page, and the software ones start the next page's
// lines early. 1024 elements ahead measured the same as 512 for f32 and less for bf16, 2048
// slower than none; issuing a whole block's prefetches at the block's start (a burst) gained
// nothing. On the AMD Zen 5 VM of earlier sessions such prefetches made the step slower (33-37
// -> 22-29 GB/s, "Huge pages for large cpu blocks"), so they are on by default only on Intel;
// BRAID_OPTIM_PREFETCH overrides. The bits never depend on it.
constexpr int64_t kPrefetchElems = 512;

int64_t prefetch_distance() {
  static const int64_t elems =
      get_env_bool("BRAID_OPTIM_PREFETCH", cpu_features().vendor == "GenuineIntel") ? kPrefetchElems
                                                                                    : 0;
  return elems;
}

// What one call does to every block, decided once.
struct StepPlan {
  OptimMathFn math;
  OptimScalars s;
  uint32_t grad_sign;
  int64_t param_size, grad_size;  // bytes per element
  CastFn widen_grad;              // 16-bit gradients -> f32; null for f32 gradients
  CastFn widen_param;             // 16-bit param without a master -> f32; else null
  CastFn narrow_param;            // f32 -> param (nearest even, or a copy); null when in place
  RoundStochasticFn stochastic;   // instead of narrow_param for bf16 with kStochastic
  uint64_t seed;
  int64_t prefetch;  // elements ahead for the SIMD loop (Note [Step prefetch]); 0: none
};

void copy_f32(const void* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// The SIMD levels' casts (cast_kernels.h), picked once per call instead of through cast() per
// block. avx512bf16 uses the avx512 casts: the same bits.
const EwTables<CastTable>& cast_tables() {
  static const EwTables<CastTable> tables(scalar::fill_cast_table, avx2::fill_cast_table,
                                          avx512::fill_cast_table);
  return tables;
}

StepPlan make_plan(const OptimStep& st, bool master) {
  const OptimTable* table = optim_tables().pick.get();
  const CastTable* casts = cast_tables().pick.get();
  StepPlan plan{};
  plan.math = table->math[variant_index(variant_of(st))];
  plan.s = optim_scalars(st);
  plan.grad_sign = st.maximize ? 0x80000000u : 0u;
  plan.param_size = static_cast<int64_t>(dtype_size(st.param_dtype));
  plan.grad_size = static_cast<int64_t>(dtype_size(st.grad_dtype));
  plan.seed = st.seed;
  plan.prefetch = prefetch_distance();
  const bool bf16 = st.param_dtype == DType::kBF16, f16 = st.param_dtype == DType::kF16;
  if (st.grad_dtype != DType::kF32) {
    plan.widen_grad = casts->fn[st.grad_dtype == DType::kBF16 ? kCastBF16ToF32 : kCastF16ToF32];
  }
  if (!master && (bf16 || f16)) plan.widen_param = casts->fn[bf16 ? kCastBF16ToF32 : kCastF16ToF32];
  if (bf16 && st.rounding == Rounding::kStochastic) {
    plan.stochastic = table->round_bf16_stochastic;
  } else if (bf16 || f16) {
    plan.narrow_param = casts->fn[bf16 ? kCastF32ToBF16 : kCastF32ToF16];
  } else if (master) {
    plan.narrow_param = copy_f32;
  }
  return plan;
}

template <class T>
T* offset(T* p, int64_t elems) {
  return p == nullptr ? nullptr : p + elems;
}

// Elements [off, off + len) of one tensor: widen, update in f32, round back.
void step_block(const StepPlan& plan, const OptimTensor& t, int64_t off, int64_t len, float* gbuf,
                float* pbuf) {
  const void* grad = static_cast<const unsigned char*>(t.grad) + off * plan.grad_size;
  void* param = static_cast<unsigned char*>(t.param) + off * plan.param_size;
  const float* g = static_cast<const float*>(grad);
  if (plan.widen_grad != nullptr) {
    plan.widen_grad(grad, gbuf, len);
    g = gbuf;
  }
  float* p = t.master != nullptr ? t.master + off : static_cast<float*>(param);
  if (plan.widen_param != nullptr) {
    plan.widen_param(param, pbuf, len);
    p = pbuf;
  }
  plan.math(plan.s, plan.grad_sign,
            OptimBlock{len, p, g, offset(t.state0, off), offset(t.state1, off),
                       offset(t.state2, off), plan.prefetch});
  if (plan.stochastic != nullptr) {
    plan.stochastic(p, static_cast<uint16_t*>(param), len, plan.seed,
                    t.rng_offset + static_cast<uint64_t>(off));
  } else if (plan.narrow_param != nullptr) {
    plan.narrow_param(p, param, len);
  }
}

}  // namespace

namespace scalar {
void fill_optim_table(OptimTable& t) {
  fill_math(t, std::make_index_sequence<kNumOptimVariants>{});
  t.round_bf16_stochastic = round_bf16_stochastic;
  t.unscale[kEwF32] = unscale_loop<float, true>;
  t.unscale[kEwBF16] = unscale_loop<bfloat16, true>;
  t.unscale[kEwF16] = unscale_loop<half, true>;
  t.check_finite[kEwF32] = unscale_loop<float, false>;
  t.check_finite[kEwBF16] = unscale_loop<bfloat16, false>;
  t.check_finite[kEwF16] = unscale_loop<half, false>;
}
}  // namespace scalar

void optimizer_step(const OptimStep& step, const OptimTensor* tensors, int64_t count) {
  check_optim_step(step, tensors, count);
  const StepPlan with_master = make_plan(step, true), without = make_plan(step, false);
  alignas(64) float gbuf[kBlock], pbuf[kBlock];
  for (int64_t i = 0; i < count; ++i) {
    const OptimTensor& t = tensors[i];
    const StepPlan& plan = t.master != nullptr ? with_master : without;
    for (int64_t off = 0; off < t.n; off += kBlock) {
      step_block(plan, t, off, t.n - off < kBlock ? t.n - off : kBlock, gbuf, pbuf);
    }
  }
}

void optimizer_step_threaded(const OptimStep& step, const OptimTensor* tensors, int64_t count,
                             int threads) {
  check_optim_step(step, tensors, count);
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += tensors[i].n;
  if (threads <= 1 || total < (int64_t{1} << 18)) return optimizer_step(step, tensors, count);
  // Piece k of every tensor goes to thread k: each thread streams its own part of memory.
  std::vector<std::vector<OptimTensor>> parts(static_cast<size_t>(threads));
  const int64_t psize = dtype_size(step.param_dtype), gsize = dtype_size(step.grad_dtype);
  for (int64_t i = 0; i < count; ++i) {
    const OptimTensor& t = tensors[i];
    const int64_t chunk = ((t.n + threads - 1) / threads + 63) / 64 * 64;
    for (int k = 0; k < threads && int64_t{k} * chunk < t.n; ++k) {
      const int64_t off = int64_t{k} * chunk;
      OptimTensor piece = t;
      piece.n = std::min(chunk, t.n - off);
      piece.param = static_cast<char*>(t.param) + off * psize;
      piece.grad = static_cast<const char*>(t.grad) + off * gsize;
      if (t.master) piece.master = t.master + off;
      if (t.state0) piece.state0 = t.state0 + off;
      if (t.state1) piece.state1 = t.state1 + off;
      if (t.state2) piece.state2 = t.state2 + off;
      piece.rng_offset = t.rng_offset + static_cast<uint64_t>(off);
      parts[static_cast<size_t>(k)].push_back(piece);
    }
  }
  const CpuIsa isa = cpu_dispatch_isa();
  std::vector<std::exception_ptr> errors(parts.size());
  std::vector<std::thread> pool;
  for (size_t k = 1; k < parts.size(); ++k) {
    if (parts[k].empty()) continue;
    pool.emplace_back([&, k] {
      try {
        ScopedCpuIsa level(isa);
        optimizer_step(step, parts[k].data(), static_cast<int64_t>(parts[k].size()));
      } catch (...) {
        errors[k] = std::current_exception();
      }
    });
  }
  try {
    optimizer_step(step, parts[0].data(), static_cast<int64_t>(parts[0].size()));
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

bool unscale_and_check_finite(DType dtype, void* const* data, const int64_t* counts, int64_t count,
                              float inv_scale) {
  const int row = ew_dtype_index(dtype);
  BRAID_CHECK(row == kEwF32 || row == kEwF16 || row == kEwBF16, kNotSupported,
              "unscale_and_check_finite: dtype ", dtype,
              " is not supported (expected f32, bf16 or f16)");
  BRAID_CHECK(count >= 0, kInvalidArgument, "unscale_and_check_finite: count = ", count,
              " (expected >= 0)");
  BRAID_CHECK(count == 0 || (data != nullptr && counts != nullptr), kInvalidArgument,
              "unscale_and_check_finite: ", data == nullptr ? "data" : "counts",
              " is null for count = ", count);
  for (int64_t t = 0; t < count; ++t) {
    BRAID_CHECK(counts[t] >= 0, kInvalidArgument, "unscale_and_check_finite: counts[", t,
                "] = ", counts[t], " (expected >= 0)");
    BRAID_CHECK(counts[t] == 0 || data[t] != nullptr, kInvalidArgument,
                "unscale_and_check_finite: data[", t, "] is null for counts[", t,
                "] = ", counts[t]);
  }
  const OptimTable* table = optim_tables().pick.get();
  const bool scale = inv_scale != 1.0f;
  const UnscaleFn fn = scale ? table->unscale[row] : table->check_finite[row];
  bool found = false;
  for (int64_t t = 0; t < count && (scale || !found); ++t) {
    if (counts[t] > 0) found |= fn(data[t], counts[t], inv_scale);
  }
  return found;
}

}  // namespace cpu

// ---- host scalars and checks ----------------------------------------------------------------

OptimScalars optim_scalars(const OptimStep& st) {
  const double t = static_cast<double>(st.step);
  const double bc1 = st.bias_correction ? 1.0 - std::pow(st.beta1, t) : 1.0;
  const double bc2 = st.bias_correction ? 1.0 - std::pow(st.beta2, t) : 1.0;
  OptimScalars s{};
  s.lr = static_cast<float>(st.lr);
  s.neg_lr = static_cast<float>(-st.lr);
  s.weight_decay = static_cast<float>(st.weight_decay);
  s.decay = static_cast<float>(1.0 - st.lr * st.weight_decay);
  s.grad_scale = static_cast<float>(st.grad_scale);
  s.momentum = static_cast<float>(st.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - st.dampening);
  s.beta1 = static_cast<float>(st.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - st.beta1);
  s.beta2 = static_cast<float>(st.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - st.beta2);
  s.eps = static_cast<float>(st.eps);
  s.neg_step_size = static_cast<float>(-(st.lr / bc1));
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  return s;
}

namespace {

void check_at_least_zero(const char* field, double v) {
  BRAID_CHECK(std::isfinite(v) && v >= 0.0, kInvalidArgument, "optimizer_step: ", field, " = ", v,
              " (expected a finite value >= 0)");
}

void check_beta(const char* field, double v) {
  BRAID_CHECK(v >= 0.0 && v < 1.0, kInvalidArgument, "optimizer_step: ", field, " = ", v,
              " (expected 0 <= ", field, " < 1)");
}

void check_dtype(const char* field, DType dt) {
  BRAID_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16, kNotSupported,
              "optimizer_step: ", field, " ", dt, " is not supported (expected f32, bf16 or f16)");
}

// The fields the algorithm reads; the others are ignored.
void check_hyper_parameters(const OptimStep& st) {
  check_at_least_zero("lr", st.lr);
  check_at_least_zero("weight_decay", st.weight_decay);
  BRAID_CHECK(std::isfinite(st.grad_scale), kInvalidArgument,
              "optimizer_step: grad_scale = ", st.grad_scale, " (expected a finite value)");
  if (st.algo == OptimAlgo::kSgd) {
    check_at_least_zero("momentum", st.momentum);
    BRAID_CHECK(std::isfinite(st.dampening), kInvalidArgument,
                "optimizer_step: dampening = ", st.dampening, " (expected a finite value)");
    BRAID_CHECK(!st.nesterov || (st.momentum > 0.0 && st.dampening == 0.0), kInvalidArgument,
                "optimizer_step: nesterov with momentum = ", st.momentum,
                " and dampening = ", st.dampening,
                " (nesterov needs momentum > 0 and dampening == 0)");
    return;
  }
  check_beta("beta1", st.beta1);
  check_beta("beta2", st.beta2);
  if (st.algo == OptimAlgo::kLion) return;
  check_at_least_zero("eps", st.eps);
  BRAID_CHECK(st.step >= 1, kInvalidArgument, "optimizer_step: step = ", st.step,
              " (expected the 1-based step count, >= 1)");
}

void check_enums(const OptimStep& st) {
  BRAID_CHECK(static_cast<int>(st.algo) <= static_cast<int>(OptimAlgo::kLion), kInvalidArgument,
              "optimizer_step: algo = ", static_cast<int>(st.algo),
              " is not an OptimAlgo (expected kSgd, kAdam, kAdamW or kLion)");
  check_dtype("param_dtype", st.param_dtype);
  check_dtype("grad_dtype", st.grad_dtype);
  BRAID_CHECK(st.rounding == Rounding::kNearest || st.rounding == Rounding::kStochastic,
              kInvalidArgument, "optimizer_step: rounding = ", static_cast<int>(st.rounding),
              " is not a Rounding (expected kNearest or kStochastic)");
  BRAID_CHECK(st.rounding != Rounding::kStochastic || st.param_dtype != DType::kF16, kNotSupported,
              "optimizer_step: rounding kStochastic with param_dtype f16 (stochastic rounding "
              "serves bf16 parameters only)");
}

// One buffer of a tensor as a byte range, for the null and overlap checks.
struct Buffer {
  const char* name;
  const void* ptr;
  int64_t bytes;
};

void check_tensor(const OptimStep& st, const cpu::OptimVariant& v, const OptimTensor& t,
                  int64_t i) {
  BRAID_CHECK(t.n >= 0, kInvalidArgument, "optimizer_step: tensors[", i, "].n = ", t.n,
              " (expected >= 0)");
  if (t.n == 0) return;
  const int64_t f32_bytes = t.n * 4;
  Buffer bufs[6];
  int k = 0;
  bufs[k++] = {"param", t.param, t.n * static_cast<int64_t>(dtype_size(st.param_dtype))};
  bufs[k++] = {"grad", t.grad, t.n * static_cast<int64_t>(dtype_size(st.grad_dtype))};
  const char* s0 = st.algo == OptimAlgo::kSgd ? "state0 (momentum_buffer)" : "state0 (exp_avg)";
  if (cpu::uses_state0(v)) bufs[k++] = {s0, t.state0, f32_bytes};
  if (cpu::uses_state1(v)) bufs[k++] = {"state1 (exp_avg_sq)", t.state1, f32_bytes};
  if (cpu::uses_state2(v)) bufs[k++] = {"state2 (max_exp_avg_sq)", t.state2, f32_bytes};
  const int required = k;
  if (t.master != nullptr) bufs[k++] = {"master", t.master, f32_bytes};
  const bool stochastic = st.param_dtype == DType::kBF16 && st.rounding == Rounding::kStochastic;
  BRAID_CHECK(!stochastic || t.rng_offset <= UINT64_MAX - static_cast<uint64_t>(t.n - 1),
              kInvalidArgument, "optimizer_step: tensors[", i, "].rng_offset = ", t.rng_offset,
              " with n = ", t.n, " passes the end of the 2^64-word Philox stream");
  for (int a = 0; a < required; ++a) {
    BRAID_CHECK(bufs[a].ptr != nullptr, kInvalidArgument, "optimizer_step: tensors[", i, "].",
                bufs[a].name, " is null for n = ", t.n, " (this step reads and writes it)");
  }
  for (int a = 0; a < k; ++a) {
    const auto a_lo = reinterpret_cast<uintptr_t>(bufs[a].ptr);
    for (int b = a + 1; b < k; ++b) {
      const auto b_lo = reinterpret_cast<uintptr_t>(bufs[b].ptr);
      const bool apart = a_lo + static_cast<uintptr_t>(bufs[a].bytes) <= b_lo ||
                         b_lo + static_cast<uintptr_t>(bufs[b].bytes) <= a_lo;
      BRAID_CHECK(apart, kInvalidArgument, "optimizer_step: tensors[", i, "].", bufs[a].name,
                  " and tensors[", i, "].", bufs[b].name,
                  " overlap (the buffers of a tensor must be distinct)");
    }
  }
}

}  // namespace

void check_optim_step(const OptimStep& step, const OptimTensor* tensors, int64_t count) {
  check_enums(step);
  check_hyper_parameters(step);
  BRAID_CHECK(count >= 0, kInvalidArgument, "optimizer_step: count = ", count, " (expected >= 0)");
  BRAID_CHECK(count == 0 || tensors != nullptr, kInvalidArgument,
              "optimizer_step: tensors is null for count = ", count);
  const cpu::OptimVariant v = cpu::variant_of(step);
  for (int64_t i = 0; i < count; ++i) check_tensor(step, v, tensors[i], i);
}

}  // namespace braid::kernels
