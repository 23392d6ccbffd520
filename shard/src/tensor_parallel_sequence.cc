// Sequence parallelism's layers (tensor_parallel.h): the LayerNorm and RMSNorm whose replicated
// weights get partial gradients, and the dropout that draws, for this rank's part of the
// sequence, the mask the whole tensor's nn::Dropout would (docs/parallelism.md, "Sequence
// parallelism").
#include <utility>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/shard/tensor_parallel.h"
#include "tensor_parallel_comm.h"

namespace braid::shard {
namespace {

using namespace tp_detail;

struct MaskCtx {
  bool identity = true;
  Shape shape;
  Tensor keep;  // u8, one per element, on the input's device
  double scale = 1.0;
};

// A norm's backward on this rank's positions (`base`: the nn layer's own backward) with the
// layer's parameter gradients of this pass summed over tp: the accumulated gradients are set
// aside, `base` writes this pass's partial ones, their all_reduce is added to what was
// accumulated, as accumulate_grad would have. Returns base's input gradient.
template <typename Backward>
Tensor backward_with_grads_summed(nn::Module& layer, ProcessGroup& tp, Backward&& base) {
  std::vector<std::pair<nn::Parameter, Tensor>> held;
  for (auto& [name, p] : layer.named_parameters())
    held.emplace_back(p, std::exchange(p.grad(), Tensor()));
  const Tensor dx = base();
  for (auto& [p, before] : held) {
    if (!p.grad().defined()) {
      p.grad() = before;
      continue;
    }
    const Tensor mine = all_reduce_sum(p.grad(), tp);
    p.grad() = before;
    nn::accumulate_grad(p, mine);
  }
  return dx;
}

}  // namespace

// ---- SequenceParallelLayerNorm ---------------------------------------------------------------

SequenceParallelLayerNorm::SequenceParallelLayerNorm(int64_t dim, double eps, nn::Bias bias,
                                                     DType dtype, std::shared_ptr<ProcessGroup> tp)
    : nn::LayerNorm(dim, eps, bias, dtype), tp_(std::move(tp)) {
  BRAID_CHECK(tp_ != nullptr && tp_->rank() >= 0, kInvalidArgument,
              "SequenceParallelLayerNorm: the tensor-parallel group is null or does not hold "
              "this rank");
}

Tensor SequenceParallelLayerNorm::backward_impl(const Tensor& grad_output) {
  return backward_with_grads_summed(*this, *tp_,
                                    [&] { return nn::LayerNorm::backward_impl(grad_output); });
}

// ---- SequenceParallelRMSNorm -----------------------------------------------------------------

SequenceParallelRMSNorm::SequenceParallelRMSNorm(int64_t dim, double eps, DType dtype,
                                                 nn::RmsNormWeight weight_mode,
                                                 std::shared_ptr<ProcessGroup> tp)
    : nn::RMSNorm(dim, eps, dtype, weight_mode), tp_(std::move(tp)) {
  BRAID_CHECK(tp_ != nullptr && tp_->rank() >= 0, kInvalidArgument,
              "SequenceParallelRMSNorm: the tensor-parallel group is null or does not hold "
              "this rank");
}

Tensor SequenceParallelRMSNorm::backward_impl(const Tensor& grad_output) {
  return backward_with_grads_summed(*this, *tp_,
                                    [&] { return nn::RMSNorm::backward_impl(grad_output); });
}

// ---- SequenceParallelDropout -----------------------------------------------------------------

SequenceParallelDropout::SequenceParallelDropout(double p, std::shared_ptr<ProcessGroup> tp,
                                                 bool scatter_input, Generator* gen)
    : nn::Dropout(p, gen), tp_(std::move(tp)), scatter_input_(scatter_input), gen_(gen) {
  BRAID_CHECK(tp_ != nullptr && tp_->rank() >= 0, kInvalidArgument,
              "SequenceParallelDropout: the tensor-parallel group is null or does not hold this "
              "rank");
}

// The whole tensor [B, T, inner...] would draw one uniform word per element, in row-major
// order, from the generator's offset; this rank's elements (b, t0 .. t0 + T/tp, :) are B runs
// of that draw. Each run is computed on its own (the stream is positional: a generator set to
// the run's first block gives its words), and the generator advances by the whole draw.
Tensor SequenceParallelDropout::forward_impl(const Tensor& x) {
  BRAID_CHECK(x.defined() && x.dim() >= 2 && is_floating(x.dtype()), kInvalidArgument,
              "SequenceParallelDropout: input must be a floating [batch, seq, ...] tensor");
  const Tensor in = scatter_input_ ? split_dim(x, 1, *tp_, "SequenceParallelDropout") : x;
  if (!is_training() || p() == 0.0) {
    save_for_backward(MaskCtx{true, in.shape(), {}, 1.0});
    return in;
  }
  const int64_t batch = in.size(0), local_seq = in.size(1);
  const int64_t inner = local_seq == 0 ? 0 : in.numel() / (batch * local_seq);
  const int64_t seq = local_seq * tp_->size(), first = local_seq * tp_->rank();
  const int64_t run = local_seq * inner;
  Generator& gen = gen_ != nullptr ? *gen_ : default_generator(kCPU);
  const uint64_t base = gen.offset();
  Tensor keep_host = Tensor::empty({in.numel()}, DType::kU8);
  uint8_t* keep = keep_host.data<uint8_t>();
  std::vector<float> u;
  for (int64_t b = 0; b < batch && run > 0; ++b) {
    const auto start = static_cast<uint64_t>((b * seq + first) * inner);
    const uint64_t block = start / 4 * 4;  // a generator starts on a whole Philox block
    Generator window(gen.seed());
    window.set_offset(base + block);
    u.resize(static_cast<size_t>(run) + (start - block));
    window.fill_uniform(u.data(), static_cast<int64_t>(u.size()));
    for (int64_t i = 0; i < run; ++i) {
      keep[b * run + i] =
          static_cast<double>(u[static_cast<size_t>(start - block + i)]) >= p() ? 1 : 0;
    }
  }
  const auto whole = static_cast<uint64_t>(batch * seq * inner);
  if (whole > 0) gen.set_offset(base + (whole + 3) / 4 * 4);  // as fill_uniform of the whole
  const double scale = p() == 1.0 ? 0.0 : 1.0 / (1.0 - p());
  const Tensor xc = in.contiguous();
  const kernels::KernelTable& k = kernels::kernels_for(in.device());
  kernels::require_support(k, kernels::Op::kMaskedScale, in.dtype());
  const Tensor keep_dev = keep_host.to(in.device());
  Tensor y = Tensor::empty(in.shape(), in.dtype(), in.device());
  k.masked_scale(kernels::stream_for(in.device()), in.dtype(), in.numel(), xc.data_ptr(),
                 keep_dev.data<uint8_t>(), scale, y.data_ptr());
  save_for_backward(MaskCtx{false, in.shape(), keep_dev, scale});
  return y;
}

Tensor SequenceParallelDropout::backward_impl(const Tensor& grad_output) {
  MaskCtx ctx = pop_saved<MaskCtx>();
  BRAID_CHECK(grad_output.defined() && grad_output.shape() == ctx.shape, kInvalidArgument,
              "SequenceParallelDropout: gradient of shape ",
              grad_output.defined() ? shape_str(grad_output.shape()) : std::string("undefined"),
              ", expected ", shape_str(ctx.shape));
  Tensor dx = grad_output;
  if (!ctx.identity) {
    const Tensor dy = grad_output.contiguous();
    const kernels::KernelTable& k = kernels::kernels_for(dy.device());
    kernels::require_support(k, kernels::Op::kMaskedScale, dy.dtype());
    dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
    k.masked_scale(kernels::stream_for(dy.device()), dy.dtype(), dy.numel(), dy.data_ptr(),
                   ctx.keep.data<uint8_t>(), ctx.scale, dx.data_ptr());
  }
  return scatter_input_ ? all_gather_dim(dx, 1, *tp_) : dx;
}

}  // namespace braid::shard
