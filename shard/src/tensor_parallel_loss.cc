// Vocab-parallel cross-entropy (tensor_parallel.h; Megatron's cross_entropy.py): the logits
// stay split along the vocabulary; two all-reduces of a few numbers per row replace gathering
// [rows, V] logits (docs/parallelism.md, "Loss").
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "braid/core/error.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/ops.h"

namespace braid::shard {
namespace {

struct CeCtx {
  Tensor z;                 // [rows, V'] logits in f32 (f64 for f64), contiguous
  std::vector<double> lse;  // log-sum-exp over the whole vocabulary, per row
  std::vector<int64_t> target;
  int64_t count = 0;  // rows whose target is not ignored
  Shape logits_shape;
  DType logits_dtype = DType::kF32;
};

int64_t target_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

}  // namespace

VocabParallelCrossEntropy::VocabParallelCrossEntropy(std::shared_ptr<ProcessGroup> tp,
                                                     VocabParallelCrossEntropyOptions options)
    : nn::Module("VocabParallelCrossEntropy"), tp_(std::move(tp)), opt_(options) {
  BRAID_CHECK(tp_ != nullptr && tp_->rank() >= 0, kInvalidArgument,
              "VocabParallelCrossEntropy: the tensor-parallel group is null or does not hold "
              "this rank");
  BRAID_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, kInvalidArgument,
              "VocabParallelCrossEntropy: label_smoothing must be in [0, 1], got ",
              options.label_smoothing);
  BRAID_CHECK(options.vocab_size >= 0, kInvalidArgument,
              "VocabParallelCrossEntropy: vocab_size must be >= 0, got ", options.vocab_size);
}

Tensor VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  BRAID_CHECK(logits.defined() && logits.dim() >= 1 && is_floating(logits.dtype()),
              kInvalidArgument, "VocabParallelCrossEntropy: logits must be a floating tensor");
  BRAID_CHECK(
      targets.defined() && (targets.dtype() == DType::kI64 || targets.dtype() == DType::kI32),
      kInvalidArgument,
      "VocabParallelCrossEntropy: targets must be class indices of dtype i64 or i32");
  const Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  BRAID_CHECK(targets.shape() == lead, kInvalidArgument,
              "VocabParallelCrossEntropy: targets of shape ", shape_str(targets.shape()),
              " for logits of shape ", shape_str(logits.shape()), " (expected ", shape_str(lead),
              ")");
  const int64_t cols = logits.shape().back(), rows = cols == 0 ? 0 : logits.numel() / cols;
  const int64_t vocab = opt_.vocab_size > 0 ? opt_.vocab_size : cols * tp_->size();
  BRAID_CHECK(vocab <= cols * tp_->size(), kInvalidArgument,
              "VocabParallelCrossEntropy: vocab_size ", vocab, " exceeds the ", cols * tp_->size(),
              " columns of ", tp_->size(), " ranks");
  const int64_t start = cols * tp_->rank();
  const int64_t valid = std::clamp<int64_t>(vocab - start, 0, cols);  // the rest is padding

  const DType compute = logits.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const Tensor z = logits.to(compute).contiguous().view({rows, cols});
  const auto value = [&](int64_t r, int64_t c) -> double {
    return compute == DType::kF64 ? z.data<double>()[r * cols + c] : z.data<float>()[r * cols + c];
  };
  const Tensor tc = targets.contiguous();

  // 1. The row maxima over every rank's columns.
  Tensor max = Tensor::empty({rows}, DType::kF64);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < valid; ++c) m = std::max(m, value(r, c));
    max.data<double>()[r] = m;
  }
  if (tp_->size() > 1 && rows > 0) {
    CallOptions op;
    op.op = ReduceOp::kMax;
    tp_->all_reduce(max, op);
  }

  // 2. Per row: sum exp(z - max), the target's logit (0 on the ranks without it), sum z.
  CeCtx ctx;
  ctx.target.resize(static_cast<size_t>(rows));
  Tensor sums = Tensor::zeros({rows, 3}, DType::kF64);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = target_at(tc, r);
    ctx.target[static_cast<size_t>(r)] = t;
    if (t == opt_.ignore_index) continue;
    BRAID_CHECK(t >= 0 && t < vocab, kOutOfRange, "VocabParallelCrossEntropy: target ", t,
                " at position ", r, " is outside [0, vocab ", vocab, ")");
    ++ctx.count;
    double* s = sums.data<double>() + 3 * r;
    const double m = max.data<double>()[r];
    for (int64_t c = 0; c < valid; ++c) {
      s[0] += std::exp(value(r, c) - m);
      s[2] += value(r, c);
    }
    if (t >= start && t < start + valid) s[1] = value(r, t - start);
  }
  if (tp_->size() > 1 && rows > 0) tp_->all_reduce(sums);

  const double ls = opt_.label_smoothing;
  Tensor per_row = Tensor::zeros(lead, compute);
  ctx.lse.assign(static_cast<size_t>(rows), 0.0);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (ctx.target[static_cast<size_t>(r)] == opt_.ignore_index) continue;
    const double* s = sums.data<double>() + 3 * r;
    const double lse = max.data<double>()[r] + std::log(s[0]);
    ctx.lse[static_cast<size_t>(r)] = lse;
    // torch: (1 - ls)(lse - z_t) + ls / C * sum_c (lse - z_c)
    const double loss = (1.0 - ls) * (lse - s[1]) +
                        ls / static_cast<double>(vocab) * (static_cast<double>(vocab) * lse - s[2]);
    total += loss;
    if (compute == DType::kF64) {
      per_row.data<double>()[r] = loss;
    } else {
      per_row.data<float>()[r] = static_cast<float>(loss);
    }
  }
  ctx.z = z;
  ctx.logits_shape = logits.shape();
  ctx.logits_dtype = logits.dtype();
  const int64_t count = ctx.count;
  save_for_backward(std::move(ctx));
  switch (opt_.reduction) {
    case nn::Reduction::kNone:
      return per_row;
    case nn::Reduction::kSum:
      return Tensor::full({}, total, compute);
    case nn::Reduction::kMean:
      break;
  }
  return Tensor::full(
      {}, count == 0 ? std::numeric_limits<double>::quiet_NaN() : total / double(count), compute);
}

Tensor VocabParallelCrossEntropy::backward(const Tensor& grad_loss) {
  const CeCtx ctx = pop_saved<CeCtx>();
  const int64_t rows = static_cast<int64_t>(ctx.target.size());
  const int64_t cols = ctx.logits_shape.back();
  const int64_t vocab = opt_.vocab_size > 0 ? opt_.vocab_size : cols * tp_->size();
  const int64_t start = cols * tp_->rank();
  const int64_t valid = std::clamp<int64_t>(vocab - start, 0, cols);
  const bool none = opt_.reduction == nn::Reduction::kNone;
  Tensor g;
  if (grad_loss.defined()) {
    g = grad_loss.to(DType::kF64).contiguous();
    BRAID_CHECK(g.numel() == (none ? rows : 1), kInvalidArgument,
                "VocabParallelCrossEntropy: grad_loss of shape ", shape_str(grad_loss.shape()),
                " for ", none ? "per-row losses" : "a reduced loss");
  }
  const auto grad_of = [&](int64_t r) {
    const double upstream = g.defined() ? g.data<double>()[none ? r : 0] : 1.0;
    return opt_.reduction == nn::Reduction::kMean ? upstream / static_cast<double>(ctx.count)
                                                  : upstream;
  };
  const double ls = opt_.label_smoothing, smooth = ls / static_cast<double>(vocab);
  const DType compute = ctx.z.dtype();
  Tensor dz = Tensor::zeros({rows, cols}, compute);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = ctx.target[static_cast<size_t>(r)];
    if (t == opt_.ignore_index) continue;
    const double scale = grad_of(r), lse = ctx.lse[static_cast<size_t>(r)];
    for (int64_t c = 0; c < valid; ++c) {
      const double zc = compute == DType::kF64 ? ctx.z.data<double>()[r * cols + c]
                                               : ctx.z.data<float>()[r * cols + c];
      double d = std::exp(zc - lse) - smooth;
      if (start + c == t) d -= 1.0 - ls;
      if (compute == DType::kF64) {
        dz.data<double>()[r * cols + c] = scale * d;
      } else {
        dz.data<float>()[r * cols + c] = static_cast<float>(scale * d);
      }
    }
  }
  return dz.view(ctx.logits_shape).to(ctx.logits_dtype);
}

}  // namespace braid::shard
