// Linear: y = x W^T + b through the gemm kernel of the input's device with transpose flags (no
// transposed copies), in autocast's matmul dtype. Saves the input (in the compute dtype) for
// backward; the weight is read again in backward, so a sharded parameter can be freed in between
// (docs/nn.md, "Layers and losses").
#include <cmath>

#include "braid/amp/autocast.h"
#include "braid/amp/fp8.h"
#include "braid/nn/layers.h"
#include "layer_util.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels;

struct LinearCtx {
  Tensor x;        // [rows, in], compute dtype, contiguous
  Shape in_shape;  // the input's shape
  DType in_dtype;  // the input's dtype (dx is returned in it)
  DType compute;   // the matmul dtype chosen in forward
  // fp8 training (amp::Fp8Training): the layer's scalings and which GEMMs keep full precision;
  // null otherwise. Kept here, not read from the thread, as backward may run outside the scope.
  amp::Fp8Training::LinearScaling* fp8 = nullptr;
  amp::Fp8TrainingOptions fp8_options{};
};

// An fp8 operand as the GEMM sees it: quantized with the scaling's current (delayed) scale,
// recording its amax, and widened to f32. The f32 GEMM of these values is the fp8 GEMM's
// result up to the order of accumulation (docs/mixed-precision.md, "fp8 training").
Tensor fp8_operand(amp::DelayedScaling& scaling, const Tensor& t) {
  return amp::dequantize_fp8(scaling.quantize(t), DType::kF32).contiguous();
}

// The weight (or bias) in the compute dtype, contiguous; cached by autocast when it applies.
Tensor param_in(const Tensor& p, DType compute) {
  Tensor t = amp::autocast_cast(p, amp::OpCategory::kMatmul);
  if (t.dtype() != compute) t = t.to(compute);
  return t.contiguous();
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, Bias bias, WeightLayout layout,
               DType dtype, Generator* gen)
    : Layer("Linear"),
      in_(in_features),
      out_(out_features),
      has_bias_(bias == Bias::kYes),
      layout_(layout) {
  BRAID_CHECK(in_features > 0 && out_features > 0, kInvalidArgument, "Linear: in_features (",
              in_features, ") and out_features (", out_features, ") must be positive");
  BRAID_CHECK(detail::is_float_dtype(dtype), kInvalidArgument,
              "Linear: parameter dtype must be floating, got ", dtype);
  // torch.nn.Linear: kaiming_uniform_(a = sqrt(5)) gives U(-1/sqrt(in), 1/sqrt(in)), the bias
  // the same bound. Drawn in f64 for f64, else f32, then converted.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  const DType draw = detail::f32_or_f64(dtype);
  const Shape wshape = layout == WeightLayout::kOutIn ? Shape{out_features, in_features}
                                                      : Shape{in_features, out_features};
  auto uniform = [&](const Shape& shape) {
    if (empty_weights_active()) return Tensor::empty(shape, dtype, kMeta);  // no draw
    return add(scale(Tensor::rand(shape, draw, gen), 2.0 * bound), Scalar(-bound)).to(dtype);
  };
  register_parameter("weight", Parameter(uniform(wshape)));
  if (has_bias_) register_parameter("bias", Parameter(uniform({out_features})));
}

Tensor Linear::forward_impl(const Tensor& x) {
  detail::check_float_input("Linear", "input", x);
  detail::check_last_dim("Linear", x, in_, "in_features");
  const DType out_dtype = amp::autocast_dtype(amp::OpCategory::kMatmul, x.dtype());
  // fp8 training: the layer's scalings (null for a layer whose sizes fp8 GEMMs cannot take).
  amp::Fp8Training* fp8 = amp::fp8_training();
  amp::Fp8Training::LinearScaling* sc = fp8 != nullptr && detail::is_float_dtype(x.dtype()) &&
                                                (is_training() || fp8->options().in_eval)
                                            ? fp8->linear(this, in_, out_)
                                            : nullptr;
  const bool fp8_fprop = sc != nullptr && !fp8->options().keep_fprop;
  // fp8: f32 products of the dequantized operands (kept GEMMs in f32 too), the output in the
  // autocast dtype.
  const DType compute = sc != nullptr ? DType::kF32 : out_dtype;
  const Tensor xc = fp8_fprop ? fp8_operand(sc->input, x) : x.to(compute).contiguous();
  const Tensor w = fp8_fprop ? fp8_operand(sc->weight, param("weight").data())
                             : param_in(param("weight").data(), compute);
  const int64_t rows = detail::leading_rows(x);
  Shape out_shape = x.shape();
  out_shape.back() = out_;
  const auto [k, s] = detail::kernels_of("Linear", x, kc::Op::kGemm, compute);
  Tensor y = Tensor::empty(out_shape, compute, x.device());

  kc::GemmArgs g;
  g.m = rows;
  g.n = out_;
  g.k = in_;
  g.a = xc.data_ptr();
  g.lda = in_;
  g.b = w.data_ptr();
  if (layout_ == WeightLayout::kOutIn) {
    g.trans_b = kc::Trans::kYes;  // W [out, in]
    g.ldb = in_;
  } else {
    g.ldb = out_;  // W [in, out]
  }
  g.c = y.data_ptr();
  g.ldc = out_;
  g.ab_dtype = g.c_dtype = compute;
  if (has_bias_ && rows > 0) {
    // C starts as the bias in every row and the product is added to it (beta = 1).
    y.view({rows, out_}).copy_(param_in(param("bias").data(), compute).expand({rows, out_}));
    g.beta = 1.0;
  }
  if (rows > 0) k.gemm(s, g);
  LinearCtx ctx{xc.view({rows, in_}), x.shape(), x.dtype(), compute};
  if (sc != nullptr) {
    ctx.fp8 = sc;
    ctx.fp8_options = fp8->options();
  }
  save_for_backward(std::move(ctx));
  return y.dtype() == out_dtype ? y : y.to(out_dtype);
}

Tensor Linear::backward_impl(const Tensor& grad_output) {
  LinearCtx ctx = pop_saved<LinearCtx>();
  Shape out_shape = ctx.in_shape;
  out_shape.back() = out_;
  detail::check_grad_shape("Linear", grad_output, out_shape);
  const DType compute = ctx.compute;
  const int64_t rows = ctx.x.size(0);
  const Tensor dy_full = grad_output.to(compute).contiguous();
  // The operands of the two GEMMs: dgrad (dy, W) and wgrad (dy, x), each quantized to fp8
  // unless override_linear_precision keeps it (fp8 training), else as they are.
  Tensor dy = dy_full, dy_w = dy_full, x_w = ctx.x;
  const bool dgrad8 = ctx.fp8 != nullptr && !ctx.fp8_options.keep_dgrad;
  const bool wgrad8 = ctx.fp8 != nullptr && !ctx.fp8_options.keep_wgrad;
  if (dgrad8 || wgrad8) {
    const Tensor dy8 = fp8_operand(ctx.fp8->grad_output, grad_output);
    if (dgrad8) dy = dy8;
    if (wgrad8) dy_w = dy8;
  }
  // The saved input is quantized already when the forward GEMM ran in fp8.
  if (wgrad8 && ctx.fp8_options.keep_fprop) x_w = fp8_operand(ctx.fp8->input, ctx.x);
  const Tensor w = dgrad8 ? fp8_operand(ctx.fp8->weight, param("weight").data())
                          : param("weight").data().to(compute).contiguous();
  const DType acc = detail::grad_accum_dtype(compute);

  // dx = dy W (kOutIn) or dy W^T (kInOut).
  const auto [k, s] = detail::kernels_of("Linear", dy, kc::Op::kGemm, compute);
  const Device dev = dy.device();
  Tensor dx = Tensor::empty(ctx.in_shape, compute, dev);
  if (rows > 0) {
    kc::GemmArgs g;
    g.m = rows;
    g.n = in_;
    g.k = out_;
    g.a = dy.data_ptr();
    g.lda = out_;
    g.b = w.data_ptr();
    if (layout_ == WeightLayout::kOutIn) {
      g.ldb = in_;
    } else {
      g.trans_b = kc::Trans::kYes;
      g.ldb = out_;
    }
    g.c = dx.data_ptr();
    g.ldc = in_;
    g.ab_dtype = g.c_dtype = compute;
    k.gemm(s, g);
  }

  const Parameter& weight = param("weight");
  if (weight.requires_grad()) {
    // dW = dy^T x ([out, in]) or x^T dy ([in, out]), accumulated in f32 for 16-bit data.
    // gemm() with beta 0 writes every element; zeros only when there are no rows.
    Tensor dw = rows > 0 ? Tensor::empty(weight.data().shape(), acc, dev)
                         : Tensor::zeros(weight.data().shape(), acc, dev);
    if (rows > 0) {
      kc::GemmArgs g;
      g.trans_a = kc::Trans::kYes;
      g.k = rows;
      if (layout_ == WeightLayout::kOutIn) {
        g.m = out_;
        g.n = in_;
        g.a = dy_w.data_ptr();
        g.lda = out_;
        g.b = x_w.data_ptr();
        g.ldb = in_;
      } else {
        g.m = in_;
        g.n = out_;
        g.a = x_w.data_ptr();
        g.lda = in_;
        g.b = dy_w.data_ptr();
        g.ldb = out_;
      }
      g.c = dw.data_ptr();
      g.ldc = g.n;
      g.ab_dtype = compute;
      g.c_dtype = acc;
      k.gemm(s, g);
    }
    accumulate_grad(weight, dw);
  }
  if (has_bias_ && param("bias").requires_grad()) {
    // db = column sums of dy, rows in order (reduce's fixed order).
    Tensor db = Tensor::zeros({out_}, acc, dev);
    if (rows > 0) {
      detail::require_kernel("Linear", k, dev, kc::Op::kReduce, compute);
      // The bias gradient is a sum, not a GEMM: from the unquantized dy (as Transformer Engine).
      k.reduce(s, kc::ReduceOp::kSum, compute, 1, rows, out_, dy_full.data_ptr(), acc,
               db.data_ptr());
    }
    accumulate_grad(param("bias"), db);
  }
  return dx.to(ctx.in_dtype);
}

}  // namespace braid::nn
