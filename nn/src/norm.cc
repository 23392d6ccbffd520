// LayerNorm and RMSNorm over the last dimension, through the fused kernels
// (the layer_norm_* / rms_norm_* kernels of the input's device). Computed in f32 (f64 for f64); the
// output is in autocast_dtype(kFp32, input dtype): f32 for 16-bit inputs under autocast, else the
// input's dtype. Saves the input in the compute dtype and the per-row statistics (mean and rstd, or
// rstd); parameters are read again in backward.
#include "braid/amp/autocast.h"
#include "braid/nn/layers.h"
#include "layer_util.h"

namespace braid::nn {
namespace {

using kernels::Op;

struct NormCtx {
  Tensor x;     // [rows, d], compute dtype, contiguous
  Tensor mean;  // [rows] (LayerNorm only)
  Tensor rstd;  // [rows]
  Shape in_shape;
  DType in_dtype;
};

Tensor in_compute(const Tensor& p, DType compute) {
  return p.to(compute).contiguous();
}

const void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

}  // namespace

// ---- LayerNorm ---------------------------------------------------------------------------

LayerNorm::LayerNorm(int64_t dim, double eps, Bias bias, DType dtype)
    : Layer("LayerNorm"), dim_(dim), eps_(eps), has_bias_(bias == Bias::kYes) {
  BRAID_CHECK(dim > 0, kInvalidArgument, "LayerNorm: dim must be positive, got ", dim);
  BRAID_CHECK(eps >= 0, kInvalidArgument, "LayerNorm: eps must be >= 0, got ", eps);
  BRAID_CHECK(detail::is_float_dtype(dtype), kInvalidArgument,
              "LayerNorm: parameter dtype must be floating, got ", dtype);
  register_parameter("weight", Parameter(Tensor::ones({dim}, dtype)));
  if (has_bias_) register_parameter("bias", Parameter(Tensor::zeros({dim}, dtype)));
}

Tensor LayerNorm::forward_impl(const Tensor& x) {
  detail::check_float_input("LayerNorm", "input", x);
  detail::check_last_dim("LayerNorm", x, dim_, "dim");
  const DType compute = detail::f32_or_f64(x.dtype());
  const int64_t rows = detail::leading_rows(x);
  const Tensor xc = x.to(compute).contiguous();
  const Tensor w = in_compute(param("weight").data(), compute);
  const Tensor b = has_bias_ ? in_compute(param("bias").data(), compute) : Tensor();
  const auto [k, s] = detail::kernels_of("LayerNorm", x, Op::kLayerNormForward, compute);
  Tensor y = Tensor::empty(x.shape(), compute, x.device());
  Tensor mean = Tensor::empty({rows}, compute, x.device());
  Tensor rstd = Tensor::empty({rows}, compute, x.device());
  k.layer_norm_forward(s, compute, rows, dim_, xc.data_ptr(), w.data_ptr(), ptr_or_null(b), eps_,
                       y.data_ptr(), mean.data_ptr(), rstd.data_ptr());
  save_for_backward(NormCtx{xc, mean, rstd, x.shape(), x.dtype()});
  return y.to(amp::autocast_dtype(amp::OpCategory::kFp32, x.dtype()));
}

Tensor LayerNorm::backward_impl(const Tensor& grad_output) {
  NormCtx ctx = pop_saved<NormCtx>();
  detail::check_grad_shape("LayerNorm", grad_output, ctx.in_shape);
  const DType compute = ctx.x.dtype();
  const int64_t rows = ctx.mean.numel();
  const Tensor dy = grad_output.to(compute).contiguous();
  const Tensor w = in_compute(param("weight").data(), compute);
  const bool want_dw = param("weight").requires_grad();
  const bool want_db = has_bias_ && param("bias").requires_grad();
  const auto [k, s] = detail::kernels_of("LayerNorm", dy, Op::kLayerNormBackward, compute);
  const Device dev = dy.device();
  Tensor dx = Tensor::empty(ctx.in_shape, compute, dev);
  Tensor dw = want_dw ? Tensor::zeros({dim_}, compute, dev) : Tensor();
  Tensor db = want_db ? Tensor::zeros({dim_}, compute, dev) : Tensor();
  k.layer_norm_backward(s, compute, rows, dim_, ctx.x.data_ptr(), w.data_ptr(), ctx.mean.data_ptr(),
                        ctx.rstd.data_ptr(), dy.data_ptr(), dx.data_ptr(),
                        want_dw ? dw.data_ptr() : nullptr, want_db ? db.data_ptr() : nullptr);
  if (want_dw) accumulate_grad(param("weight"), dw);
  if (want_db) accumulate_grad(param("bias"), db);
  return dx.to(ctx.in_dtype);
}

// ---- RMSNorm -----------------------------------------------------------------------------

RMSNorm::RMSNorm(int64_t dim, double eps, DType dtype, RmsNormWeight weight_mode)
    : Layer("RMSNorm"), dim_(dim), eps_(eps), weight_mode_(weight_mode) {
  BRAID_CHECK(dim > 0, kInvalidArgument, "RMSNorm: dim must be positive, got ", dim);
  BRAID_CHECK(eps >= 0, kInvalidArgument, "RMSNorm: eps must be >= 0, got ", eps);
  BRAID_CHECK(detail::is_float_dtype(dtype), kInvalidArgument,
              "RMSNorm: parameter dtype must be floating, got ", dtype);
  register_parameter("weight", Parameter(Tensor::ones({dim}, dtype)));
}

Tensor RMSNorm::forward_impl(const Tensor& x) {
  detail::check_float_input("RMSNorm", "input", x);
  detail::check_last_dim("RMSNorm", x, dim_, "dim");
  const DType compute = detail::f32_or_f64(x.dtype());
  const int64_t rows = detail::leading_rows(x);
  const Tensor xc = x.to(compute).contiguous();
  const Tensor& weight = param("weight").data();
  const DType out = amp::autocast_dtype(amp::OpCategory::kFp32, x.dtype());
  // kAfterCast with a 16-bit output in the weight's dtype: the kernel normalizes only (a null
  // weight), the result is rounded to that dtype and then multiplied by the weight in it.
  const bool after_cast =
      weight_mode_ == RmsNormWeight::kAfterCast && out != compute && weight.dtype() == out;
  const Tensor w = after_cast ? Tensor() : in_compute(weight, compute);
  const auto [k, s] = detail::kernels_of("RMSNorm", x, Op::kRmsNormForward, compute);
  Tensor y = Tensor::empty(x.shape(), compute, x.device());
  Tensor rstd = Tensor::empty({rows}, compute, x.device());
  k.rms_norm_forward(s, compute, rows, dim_, xc.data_ptr(), ptr_or_null(w), eps_, y.data_ptr(),
                     rstd.data_ptr());
  save_for_backward(NormCtx{xc, Tensor(), rstd, x.shape(), x.dtype()});
  return after_cast ? mul(y.to(out), weight) : y.to(out);
}

Tensor RMSNorm::backward_impl(const Tensor& grad_output) {
  NormCtx ctx = pop_saved<NormCtx>();
  detail::check_grad_shape("RMSNorm", grad_output, ctx.in_shape);
  const DType compute = ctx.x.dtype();
  const int64_t rows = ctx.rstd.numel();
  const Tensor dy = grad_output.to(compute).contiguous();
  const Tensor w = in_compute(param("weight").data(), compute);
  const bool want_dw = param("weight").requires_grad();
  const auto [k, s] = detail::kernels_of("RMSNorm", dy, Op::kRmsNormBackward, compute);
  Tensor dx = Tensor::empty(ctx.in_shape, compute, dy.device());
  Tensor dw = want_dw ? Tensor::zeros({dim_}, compute, dy.device()) : Tensor();
  k.rms_norm_backward(s, compute, rows, dim_, ctx.x.data_ptr(), w.data_ptr(), ctx.rstd.data_ptr(),
                      dy.data_ptr(), dx.data_ptr(), want_dw ? dw.data_ptr() : nullptr);
  if (want_dw) accumulate_grad(param("weight"), dw);
  return dx.to(ctx.in_dtype);
}

}  // namespace braid::nn
