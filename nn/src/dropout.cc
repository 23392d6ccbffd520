// Dropout: the keep mask is drawn from a Philox Generator as one f32 uniform per element
// (fill_uniform), element i kept when its uniform is >= p (layers.h); kept elements are scaled
// by 1 / (1 - p) (the masked_scale kernel). The mask is saved, one byte per element on the
// input's device, and
// backward applies the same mask and scale to the gradient.
#include <memory>
#include <vector>

#include "braid/nn/layers.h"
#include "layer_util.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels;

struct DropoutCtx {
  bool identity = true;
  Shape shape;
  Tensor keep;  // u8, one per element, on the input's device
  double scale = 1.0;
};

}  // namespace

Dropout::Dropout(double p, Generator* gen) : Layer("Dropout"), p_(p), gen_(gen) {
  BRAID_CHECK(p >= 0.0 && p <= 1.0, kInvalidArgument, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward_impl(const Tensor& x) {
  detail::check_float_input("Dropout", "input", x);
  if (!is_training() || p_ == 0.0) {
    save_for_backward(DropoutCtx{true, x.shape(), {}, 1.0});
    return x;
  }
  const int64_t n = x.numel();
  std::vector<float> u(static_cast<size_t>(n));
  Generator& gen = gen_ != nullptr ? *gen_ : default_generator(kCPU);
  gen.fill_uniform(u.data(), n);
  Tensor keep_host = Tensor::empty({n}, DType::kU8);
  auto* kp = keep_host.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) kp[i] = static_cast<double>(u[i]) >= p_ ? 1 : 0;
  const Tensor keep = keep_host.to(x.device());
  const double scale = p_ == 1.0 ? 0.0 : 1.0 / (1.0 - p_);  // p = 1 drops everything
  const Tensor xc = x.contiguous();
  const auto [k, s] = detail::kernels_of("Dropout", x, kc::Op::kMaskedScale, x.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  k.masked_scale(s, x.dtype(), n, xc.data_ptr(), keep.data<uint8_t>(), scale, y.data_ptr());
  save_for_backward(DropoutCtx{false, x.shape(), keep, scale});
  return y;
}

Tensor Dropout::backward_impl(const Tensor& grad_output) {
  DropoutCtx ctx = pop_saved<DropoutCtx>();
  detail::check_grad_shape("Dropout", grad_output, ctx.shape);
  if (ctx.identity) return grad_output;
  const Tensor dy = grad_output.contiguous();
  BRAID_CHECK(detail::is_float_dtype(dy.dtype()), kInvalidArgument,
              "Dropout: gradient must be floating, got dtype ", dy.dtype());
  const auto [k, s] = detail::kernels_of("Dropout", dy, kc::Op::kMaskedScale, dy.dtype());
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  k.masked_scale(s, dy.dtype(), dy.numel(), dy.data_ptr(), ctx.keep.data<uint8_t>(), ctx.scale,
                 dx.data_ptr());
  return dx;
}

}  // namespace braid::nn
