// CrossEntropyLoss (fused log-softmax + NLL + label smoothing, the cross_entropy_* kernels)
// and MSELoss. Both compute in f32 (f64 for f64 inputs). CrossEntropyLoss saves the logits,
// the targets and one lse per row; backward recomputes the probabilities from them.
#include <limits>

#include "braid/nn/loss.h"
#include "braid/tensor/ops.h"
#include "layer_util.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels;

struct CrossEntropyCtx {
  Tensor logits;   // [rows, classes], contiguous, the input's dtype
  Tensor targets;  // [rows], contiguous
  Tensor lse;      // [rows], compute dtype
  Shape loss_shape;
  int64_t count;  // targets that are not ignore_index
};

struct MseCtx {
  Tensor diff;  // input - target, compute dtype
  DType in_dtype;
};

// A 0-d tensor of `dtype` holding v.
Tensor scalar_tensor(double v, DType dtype) {
  return Tensor::full({}, v, dtype);
}

// The scalar value of a reduced loss's gradient (1 when undefined).
double scalar_grad(const char* loss, const Tensor& grad_loss) {
  if (!grad_loss.defined()) return 1.0;
  BRAID_CHECK(grad_loss.numel() == 1, kInvalidArgument, loss,
              ": the gradient of a reduced loss must have one element, got shape ",
              shape_str(grad_loss.shape()));
  return grad_loss.item();
}

}  // namespace

// ---- CrossEntropyLoss --------------------------------------------------------------------

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& targets) {
  detail::check_float_input("CrossEntropyLoss", "logits", logits);
  BRAID_CHECK(logits.dim() >= 1, kInvalidArgument,
              "CrossEntropyLoss: logits must have a class dimension, got shape ",
              shape_str(logits.shape()));
  BRAID_CHECK(targets.defined(), kInvalidArgument, "CrossEntropyLoss: targets are undefined");
  BRAID_CHECK(targets.dtype() == DType::kI64 || targets.dtype() == DType::kI32, kInvalidArgument,
              "CrossEntropyLoss: targets must be class indices of dtype i64 or i32, got dtype ",
              targets.dtype());
  Shape expected(logits.shape().begin(), logits.shape().end() - 1);
  BRAID_CHECK(targets.shape() == expected, kInvalidArgument, "CrossEntropyLoss: targets of shape ",
              shape_str(targets.shape()), " do not match logits of shape ",
              shape_str(logits.shape()), "; expected targets of shape ", shape_str(expected));
  BRAID_CHECK(opt_.label_smoothing >= 0.0 && opt_.label_smoothing <= 1.0, kInvalidArgument,
              "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", opt_.label_smoothing);
  const int64_t classes = logits.size(-1);
  const int64_t rows = targets.numel();
  const Tensor lg = logits.contiguous();
  const Tensor tg = targets.contiguous();
  // The targets are checked (and the non-ignored ones counted) on the host: on a GPU this is
  // one small copy, and a bad target is an error here rather than a device assert. Meta
  // targets have no values: every row counts.
  int64_t count = tg.device().is_meta() ? rows : 0;
  const Tensor th = tg.device().is_meta() ? Tensor() : tg.to(kCPU);
  for (int64_t r = 0; th.defined() && r < rows; ++r) {
    const int64_t t = th.dtype() == DType::kI64 ? th.data<int64_t>()[r] : th.data<int32_t>()[r];
    if (t == opt_.ignore_index) continue;
    BRAID_CHECK(t >= 0 && t < classes, kOutOfRange, "CrossEntropyLoss: target ", t, " at position ",
                r, " is outside [0, classes ", classes, ") and is not ignore_index ",
                opt_.ignore_index);
    ++count;
  }
  const DType compute = detail::f32_or_f64(logits.dtype());
  const auto [k, s] =
      detail::kernels_of("CrossEntropyLoss", lg, kc::Op::kCrossEntropyForward, lg.dtype());
  BRAID_CHECK(tg.device() == lg.device(), kInvalidArgument, "CrossEntropyLoss: targets are on ",
              tg.device(), " and logits on ", lg.device(), "; expected one device");
  Tensor loss = Tensor::empty(expected, compute, lg.device());
  Tensor lse = Tensor::empty({rows}, compute, lg.device());
  k.cross_entropy_forward(s, lg.dtype(), rows, classes, lg.data_ptr(), tg.dtype(), tg.data_ptr(),
                          opt_.ignore_index, opt_.label_smoothing, loss.data_ptr(), lse.data_ptr());
  save_for_backward(CrossEntropyCtx{lg, tg, lse, expected, count});
  switch (opt_.reduction) {
    case Reduction::kNone:
      return loss;
    case Reduction::kSum:
      return sum(loss);
    case Reduction::kMean:
      break;
  }
  // Sum in the compute dtype (fixed order), then one division by the count: NaN when every
  // target is ignored (0 / 0), as torch. Meta: the same tensors, no values.
  const Tensor summed = sum(loss);
  if (summed.device().is_meta()) return Tensor::empty({}, compute, summed.device());
  const double total = summed.item();
  if (compute == DType::kF32) {
    return scalar_tensor(static_cast<float>(total) / static_cast<float>(count), compute);
  }
  return scalar_tensor(total / static_cast<double>(count), compute);
}

Tensor CrossEntropyLoss::backward(const Tensor& grad_loss) {
  CrossEntropyCtx ctx = pop_saved<CrossEntropyCtx>();
  const DType compute = ctx.lse.dtype();
  const int64_t rows = ctx.lse.numel();
  const int64_t classes = ctx.logits.size(-1);
  Tensor scale;
  if (opt_.reduction == Reduction::kNone) {
    if (grad_loss.defined()) {
      BRAID_CHECK(grad_loss.shape() == ctx.loss_shape, kInvalidArgument,
                  "CrossEntropyLoss: gradient of shape ", shape_str(grad_loss.shape()),
                  " does not match the per-element losses of shape ", shape_str(ctx.loss_shape));
      scale = grad_loss.to(compute).contiguous();
    } else {
      scale = Tensor::ones({rows}, compute, ctx.logits.device());
    }
  } else {
    double g = scalar_grad("CrossEntropyLoss", grad_loss);
    if (opt_.reduction == Reduction::kMean) {
      g = compute == DType::kF32
              ? static_cast<double>(static_cast<float>(g) / static_cast<float>(ctx.count))
              : g / static_cast<double>(ctx.count);
    }
    scale = Tensor::full({rows}, g, compute, ctx.logits.device());
  }
  const auto [k, s] = detail::kernels_of("CrossEntropyLoss", ctx.logits,
                                         kc::Op::kCrossEntropyBackward, ctx.logits.dtype());
  Tensor dlogits = Tensor::empty(ctx.logits.shape(), ctx.logits.dtype(), ctx.logits.device());
  k.cross_entropy_backward(s, ctx.logits.dtype(), rows, classes, ctx.logits.data_ptr(),
                           ctx.targets.dtype(), ctx.targets.data_ptr(), opt_.ignore_index,
                           opt_.label_smoothing, ctx.lse.data_ptr(), scale.data_ptr(),
                           dlogits.data_ptr());
  return dlogits;
}

// ---- MSELoss -----------------------------------------------------------------------------

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  detail::check_float_input("MSELoss", "input", input);
  detail::check_float_input("MSELoss", "target", target);
  BRAID_CHECK(input.shape() == target.shape(), kInvalidArgument, "MSELoss: input of shape ",
              shape_str(input.shape()), " and target of shape ", shape_str(target.shape()),
              " must have the same shape");
  BRAID_CHECK(input.dtype() == target.dtype(), kInvalidArgument, "MSELoss: input dtype ",
              input.dtype(), " and target dtype ", target.dtype(), " must be the same");
  const DType compute = detail::f32_or_f64(input.dtype());
  const Tensor diff = sub(input.to(compute), target.to(compute));
  const Tensor sq = mul(diff, diff);
  save_for_backward(MseCtx{diff, input.dtype()});
  switch (reduction_) {
    case Reduction::kNone:
      return sq;
    case Reduction::kSum:
      return sum(sq);
    case Reduction::kMean:
      break;
  }
  return mean(sq);
}

Tensor MSELoss::backward(const Tensor& grad_loss) {
  MseCtx ctx = pop_saved<MseCtx>();
  const DType compute = ctx.diff.dtype();
  Tensor dx;
  if (reduction_ == Reduction::kNone) {
    if (grad_loss.defined()) {
      BRAID_CHECK(grad_loss.shape() == ctx.diff.shape(), kInvalidArgument,
                  "MSELoss: gradient of shape ", shape_str(grad_loss.shape()),
                  " does not match the per-element losses of shape ", shape_str(ctx.diff.shape()));
      dx = mul(scale(ctx.diff, 2.0), grad_loss.to(compute));
    } else {
      dx = scale(ctx.diff, 2.0);
    }
  } else {
    double g = 2.0 * scalar_grad("MSELoss", grad_loss);
    if (reduction_ == Reduction::kMean) g /= static_cast<double>(ctx.diff.numel());
    dx = scale(ctx.diff, g);
  }
  return dx.to(ctx.in_dtype);
}

}  // namespace braid::nn
