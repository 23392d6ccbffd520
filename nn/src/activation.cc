// Gelu (exact and tanh), Relu, Silu: forward through the SIMD unary kernels (braid::gelu /
// relu / silu), backward through the activation_backward kernel of the input's device. Pass-through
// dtype (the input's); the input is saved for backward.
#include "braid/nn/layers.h"
#include "layer_util.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels;

struct ActivationCtx {
  Tensor x;  // contiguous
};

Tensor activation_grad(const char* layer, kc::ActivationGrad op, const Tensor& x,
                       const Tensor& grad_output) {
  detail::check_grad_shape(layer, grad_output, x.shape());
  const Tensor dy = grad_output.to(x.dtype()).contiguous();
  const auto [k, s] = detail::kernels_of(layer, x, kc::Op::kActivationBackward, x.dtype());
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  k.activation_backward(s, op, x.dtype(), x.numel(), x.data_ptr(), dy.data_ptr(), dx.data_ptr());
  return dx;
}

}  // namespace

Tensor Gelu::forward_impl(const Tensor& x) {
  detail::check_float_input("GELU", "input", x);
  const Tensor xc = x.contiguous();
  save_for_backward(ActivationCtx{xc});
  return gelu(xc, approximate_);
}

Tensor Gelu::backward_impl(const Tensor& grad_output) {
  const ActivationCtx ctx = pop_saved<ActivationCtx>();
  return activation_grad("GELU",
                         approximate_ == GeluApproximate::kTanh ? kc::ActivationGrad::kGeluTanh
                                                                : kc::ActivationGrad::kGelu,
                         ctx.x, grad_output);
}

Tensor Relu::forward_impl(const Tensor& x) {
  detail::check_float_input("ReLU", "input", x);
  const Tensor xc = x.contiguous();
  save_for_backward(ActivationCtx{xc});
  return relu(xc);
}

Tensor Relu::backward_impl(const Tensor& grad_output) {
  const ActivationCtx ctx = pop_saved<ActivationCtx>();
  return activation_grad("ReLU", kc::ActivationGrad::kRelu, ctx.x, grad_output);
}

Tensor Silu::forward_impl(const Tensor& x) {
  detail::check_float_input("SiLU", "input", x);
  const Tensor xc = x.contiguous();
  save_for_backward(ActivationCtx{xc});
  return silu(xc);
}

Tensor Silu::backward_impl(const Tensor& grad_output) {
  const ActivationCtx ctx = pop_saved<ActivationCtx>();
  return activation_grad("SiLU", kc::ActivationGrad::kSilu, ctx.x, grad_output);
}

}  // namespace braid::nn
