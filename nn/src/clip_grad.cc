// clip_grad_norm_ / clip_grad_value_ with torch.nn.utils' semantics (docs/mixed-precision.md,
// "Clipping"): per-gradient norms in f32, then the norm of the norms.
#include "braid/nn/clip_grad.h"

#include <cmath>

#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/tensor/ops.h"

namespace braid::nn {
namespace {

void check_grad(const Tensor& g, const char* what) {
  BRAID_CHECK(g.device().type == DeviceType::kCPU, kNotSupported, what, ": gradient on ",
              g.device().str(), ": this build clips cpu gradients only");
  const DType d = g.dtype();
  BRAID_CHECK(d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16,
              kInvalidArgument, what, ": gradient dtype ", dtype_name(d),
              ": expected a float dtype");
}

// One gradient's p-norm in f32 (f64 for f64 gradients, rounded to f32 like the rest).
float one_norm(const Tensor& g, double p) {
  if (g.numel() == 0) return 0.0f;
  if (p == 2.0) return static_cast<float>(norm(g, DType::kF32).item());
  if (std::isinf(p)) return static_cast<float>(amax(abs(g.to(DType::kF32))).item());
  if (p == 1.0) return static_cast<float>(sum(abs(g), DType::kF32).item());
  // Other p: rare; accumulate |g|^p in double in element order.
  double acc = 0.0;
  for (double v : g.to_vector()) acc += std::pow(std::fabs(v), p);
  return static_cast<float>(std::pow(acc, 1.0 / p));
}

}  // namespace

double grad_norm(const std::vector<Tensor>& grads, double norm_type) {
  BRAID_CHECK(norm_type > 0, kInvalidArgument, "grad_norm: norm_type ", norm_type,
              ": expected > 0 or inf");
  std::vector<double> norms;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    check_grad(g, "clip_grad_norm_");
    norms.push_back(one_norm(g, norm_type));
  }
  if (norms.empty()) return 0.0;
  if (norms.size() == 1) return norms[0];
  return one_norm(Tensor::from_vector(norms, {static_cast<int64_t>(norms.size())}, DType::kF32),
                  norm_type);
}

double clip_grad_norm_(const std::vector<Tensor>& grads, double max_norm, double norm_type,
                       NonFinite non_finite) {
  const float total = static_cast<float>(grad_norm(grads, norm_type));
  if (non_finite == NonFinite::kError) {
    BRAID_CHECK(std::isfinite(total), kInvalidArgument, "clip_grad_norm_: the total norm of order ",
                norm_type, " of the gradients is ", total,
                ": expected a finite value (NonFinite::kPropagate clips anyway)");
  }
  // torch: clip_coef = max_norm / (total + 1e-6), clamped to 1, in the norm's f32.
  const float coef = static_cast<float>(max_norm) / (total + 1e-6f);
  const float clamped = std::isnan(coef) ? coef : std::min(coef, 1.0f);
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    const kernels::KernelTable& k = kernels::kernels_for(g.device());
    kernels::require_support(k, kernels::Op::kScale, g.dtype());
    const Stream s = kernels::stream_for(g.device());
    if (g.is_contiguous()) {
      k.scale(s, g.dtype(), g.numel(), clamped, g.data_ptr(), g.data_ptr());
    } else {
      Tensor dense = g.contiguous();
      k.scale(s, g.dtype(), dense.numel(), clamped, dense.data_ptr(), dense.data_ptr());
      Tensor(g).copy_(dense);
    }
  }
  return total;
}

double clip_grad_norm_(const std::vector<Parameter>& params, double max_norm, double norm_type,
                       NonFinite non_finite) {
  return clip_grad_norm_(gradients_of(params), max_norm, norm_type, non_finite);
}

void clip_grad_value_(const std::vector<Tensor>& grads, double clip_value) {
  BRAID_CHECK(clip_value >= 0, kInvalidArgument, "clip_grad_value_: clip_value ", clip_value,
              ": expected >= 0");
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    check_grad(g, "clip_grad_value_");
    const Tensor lo = Tensor::full({}, -clip_value, g.dtype());
    const Tensor hi = Tensor::full({}, clip_value, g.dtype());
    // minimum / maximum propagate NaN, as torch.clamp.
    Tensor(g).copy_(minimum(maximum(g, lo), hi));
  }
}

void clip_grad_value_(const std::vector<Parameter>& params, double clip_value) {
  clip_grad_value_(gradients_of(params), clip_value);
}

std::vector<Tensor> gradients_of(const std::vector<Parameter>& params) {
  std::vector<Tensor> out;
  for (const Parameter& p : params) {
    if (p.defined() && p.grad().defined()) out.push_back(p.grad());
  }
  return out;
}

}  // namespace braid::nn
