// activation_backward() and masked_scale(): argument checks, the scalar reference (double
// <cmath>, rounded once), the f64 path (scalar at every level) and the f16 / bf16 path
// (widened to f32 in blocks, run through the dispatched f32 loop, rounded back once).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"
#include "cast_kernels.h"
#include "isa_dispatch.h"
#include "nn_kernels.h"

namespace braid::kernels::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kKappa = 0.044715;

// Beyond |x| = 1e4 every derivative below is 0 or 1 to double precision; clamping there keeps
// +-Inf from producing Inf * 0 = NaN (the limits are 0 and 1). NaN stays NaN.
constexpr double kClamp = 1e4;

// f'(x) in double (torch's formulas).
double act_derivative(ActivationGrad op, double x) {
  if (x > kClamp) x = kClamp;
  if (x < -kClamp) x = -kClamp;
  switch (op) {
    case ActivationGrad::kRelu:
      return x > 0 ? 1.0 : 0.0;
    case ActivationGrad::kGelu:
      return 0.5 * std::erfc(-x * kInvSqrt2) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
    case ActivationGrad::kGeluTanh: {
      const double t = std::tanh(kSqrt2OverPi * (x + kKappa * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kKappa * x * x);
    }
    case ActivationGrad::kSilu: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1 + x * (1 - s));
    }
  }
  return 0;
}

const char* act_name(ActivationGrad op) {
  switch (op) {
    case ActivationGrad::kRelu:
      return "relu";
    case ActivationGrad::kGelu:
      return "gelu";
    case ActivationGrad::kGeluTanh:
      return "gelu_tanh";
    case ActivationGrad::kSilu:
      return "silu";
  }
  return "?";
}

// relu passes dy through where x > 0 and gives 0 elsewhere (NaN x included), as torch's
// threshold_backward; the product form would turn dy = Inf into NaN.
double act_grad(ActivationGrad op, double x, double dy) {
  if (op == ActivationGrad::kRelu) return x > 0 ? dy : 0.0;
  return dy * act_derivative(op, x);
}

constexpr IsaTable<ActGradFn> kActGrad{scalar::act_grad_f32, avx2::act_grad_f32,
                                       avx512::act_grad_f32, nullptr};

template <typename T>
void act_grad_reduced(ActivationGrad op, int64_t n, const T* x, const T* dy, T* dx) {
  const ActGradFn fn = kActGrad.get();
  // Widened and rounded by the level's cast kernels (bit-identical to the scalar conversions).
  constexpr bool kBf16 = std::is_same_v<T, bfloat16>;
  const CastFn widen = hot_cast_fn(kBf16 ? kCastBF16ToF32 : kCastF16ToF32);
  const CastFn narrow = hot_cast_fn(kBf16 ? kCastF32ToBF16 : kCastF32ToF16);
  constexpr int64_t kBlock = 512;
  float xb[kBlock], db[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    widen(x + i, xb, m);
    widen(dy + i, db, m);
    fn(op, m, xb, db, db);
    narrow(db, dx + i, m);
  }
}

template <typename T>
void masked_scale_typed(int64_t n, const T* x, const uint8_t* keep, float scale, T* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = keep[i] != 0 ? T(static_cast<float>(x[i]) * scale) : T(0.0f);
  }
}

}  // namespace

namespace scalar {
void act_grad_f32(ActivationGrad op, int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = static_cast<float>(act_grad(op, static_cast<double>(x[i]), static_cast<double>(dy[i])));
  }
}
}  // namespace scalar

void activation_backward(ActivationGrad op, DType dtype, int64_t n, const void* x, const void* dy,
                         void* dx) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "activation_backward(", act_name(op), "): count ", n,
              " must not be negative");
  BRAID_CHECK(
      dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
      kNotSupported, "activation_backward(", act_name(op), "): dtype ", dtype,
      " is not supported; expected f64, f32, f16 or bf16");
  if (n == 0) return;
  BRAID_CHECK(x != nullptr && dy != nullptr && dx != nullptr, kInvalidArgument,
              "activation_backward(", act_name(op), "): null pointer for ", n, " elements");
  // Elementwise: pieces of kPiece elements (a multiple of every vector width) over the intra-op
  // threads give the same bits as one thread.
  constexpr int64_t kPiece = 1 << 14;
  const size_t esize = dtype_size(dtype);
  auto run = [&](int64_t begin, int64_t end) {
    const int64_t m = end - begin;
    const void* xp = static_cast<const char*>(x) + begin * esize;
    const void* dyp = static_cast<const char*>(dy) + begin * esize;
    void* dxp = static_cast<char*>(dx) + begin * esize;
    switch (dtype) {
      case DType::kF64: {
        const auto* xd = static_cast<const double*>(xp);
        const auto* dyd = static_cast<const double*>(dyp);
        auto* dxd = static_cast<double*>(dxp);
        for (int64_t i = 0; i < m; ++i) dxd[i] = act_grad(op, xd[i], dyd[i]);
        return;
      }
      case DType::kF32:
        return kActGrad.get()(op, m, static_cast<const float*>(xp), static_cast<const float*>(dyp),
                              static_cast<float*>(dxp));
      case DType::kF16:
        return act_grad_reduced(op, m, static_cast<const half*>(xp), static_cast<const half*>(dyp),
                                static_cast<half*>(dxp));
      case DType::kBF16:
        return act_grad_reduced(op, m, static_cast<const bfloat16*>(xp),
                                static_cast<const bfloat16*>(dyp), static_cast<bfloat16*>(dxp));
      default:
        return;
    }
  };
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  if (pieces <= 1 || get_num_threads() == 1) return run(0, n);
  parallel_for(pieces, [&](int64_t p) { run(p * kPiece, std::min(n, (p + 1) * kPiece)); });
}

void masked_scale(DType dtype, int64_t n, const void* x, const uint8_t* keep, double scale,
                  void* out) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "masked_scale: count ", n, " must not be negative");
  BRAID_CHECK(
      dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
      kNotSupported, "masked_scale: dtype ", dtype,
      " is not supported; expected f64, f32, f16 or bf16");
  if (n == 0) return;
  BRAID_CHECK(x != nullptr && keep != nullptr && out != nullptr, kInvalidArgument,
              "masked_scale: null pointer for ", n, " elements");
  switch (dtype) {
    case DType::kF64: {
      const auto* xd = static_cast<const double*>(x);
      auto* od = static_cast<double*>(out);
      for (int64_t i = 0; i < n; ++i) od[i] = keep[i] != 0 ? xd[i] * scale : 0.0;
      return;
    }
    case DType::kF32: {
      const auto* xf = static_cast<const float*>(x);
      auto* of = static_cast<float*>(out);
      const float s = static_cast<float>(scale);
      for (int64_t i = 0; i < n; ++i) of[i] = keep[i] != 0 ? xf[i] * s : 0.0f;
      return;
    }
    case DType::kF16:
      return masked_scale_typed(n, static_cast<const half*>(x), keep, static_cast<float>(scale),
                                static_cast<half*>(out));
    case DType::kBF16:
      return masked_scale_typed(n, static_cast<const bfloat16*>(x), keep, static_cast<float>(scale),
                                static_cast<bfloat16*>(out));
    default:
      return;
  }
}

}  // namespace braid::kernels::cpu
