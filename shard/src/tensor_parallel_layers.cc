// ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding (tensor_parallel.h):
// nn::Linear / nn::Embedding over this rank's slice of the weight, with the collectives of
// Megatron's mappings around their forward and backward (docs/parallelism.md, "Layers").
// Each saves what its collectives need after the base layer's context, so backward pops its
// own first, then lets the base layer pop.
#include <cstring>

#include "braid/core/error.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/ops.h"
#include "tensor_parallel_comm.h"

namespace braid::shard {
namespace {

using namespace tp_detail;

// The base layers draw an initial weight of the local shape in their constructor; it is
// overwritten at once, so it comes from a private generator (the caller's is not advanced).
Generator& scratch_generator() {
  thread_local Generator gen(0);
  return gen;
}

const std::shared_ptr<ProcessGroup>& checked(const std::shared_ptr<ProcessGroup>& tp,
                                             const char* who) {
  BRAID_CHECK(tp != nullptr && tp->rank() >= 0, kInvalidArgument, who,
              ": the tensor-parallel group is null or does not hold this rank");
  return tp;
}

// The local size of a dimension of `size` split as split_segments does.
int64_t local_size(int64_t size, const std::shared_ptr<ProcessGroup>& tp, int64_t padded,
                   int64_t blocks, const char* who) {
  checked(tp, who);
  const int parts = tp->size();
  BRAID_CHECK(size > 0, kInvalidArgument, who, ": the split dimension must be positive, got ",
              size);
  if (blocks > 1) {
    BRAID_CHECK(size % (blocks * parts) == 0 && (padded == 0 || padded == size), kInvalidArgument,
                who, ": ", size, " features in ", blocks, " blocks must split evenly over ", parts,
                " ranks (", blocks * parts, " must divide it; no padding with blocks)");
    return size / parts;
  }
  BRAID_CHECK(padded != size || size % parts == 0, kInvalidArgument, who, ": ", size,
              " features must be a multiple of the tensor-parallel size ", parts);
  if (padded == 0) padded = (size + parts - 1) / parts * parts;
  BRAID_CHECK(padded >= size && padded % parts == 0, kInvalidArgument, who, ": padded size ",
              padded, " must be a multiple of the tensor-parallel size ", parts, " and at least ",
              size);
  return padded / parts;
}

// The layout's dimension of the weight that holds the output (kOutIn: 0) or input features.
int out_dim(nn::WeightLayout layout) {
  return layout == nn::WeightLayout::kOutIn ? 0 : 1;
}
int in_dim(nn::WeightLayout layout) {
  return 1 - out_dim(layout);
}
Shape weight_shape(nn::WeightLayout layout, int64_t in, int64_t out) {
  return layout == nn::WeightLayout::kOutIn ? Shape{out, in} : Shape{in, out};
}

void check_whole(nn::Linear& whole, int64_t in, int64_t out, const char* who) {
  BRAID_CHECK(whole.in_features() == in && whole.out_features() == out, kInvalidArgument, who,
              ": the whole Linear is ", whole.in_features(), " -> ", whole.out_features(),
              ", expected ", in, " -> ", out);
  BRAID_CHECK(!whole.weight().data().device().is_meta(), kInvalidArgument, who,
              ": the whole Linear's weight is on the meta device (no values to split)");
}

// Zeros the padding, then copies the segments (dim `dim`) of `whole` into `local`.
void take_slice(const Tensor& whole, Tensor& local, int dim,
                const std::vector<SliceSegment>& segments) {
  local.zero_();
  global_to_local(whole.to(local.dtype()), local, dim, segments);
}

// Rows of a contiguous [n, width] tensor whose flag is 0 are set to zeros.
void zero_rows(Tensor& t, const std::vector<uint8_t>& keep, int64_t width) {
  auto* p = static_cast<char*>(t.data_ptr());
  const auto row = static_cast<size_t>(width) * t.element_size();
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i] == 0) std::memset(p + i * row, 0, row);
  }
}

}  // namespace

// ---- ColumnParallelLinear --------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           std::shared_ptr<ProcessGroup> tp,
                                           const ColumnParallelOptions& options, Uninit)
    : nn::Linear(
          in_features,
          local_size(out_features, tp, options.padded_out, options.blocks, "ColumnParallelLinear"),
          options.bias, options.layout, options.dtype, &scratch_generator()),
      tp_(std::move(tp)),
      opt_(options),
      global_in_(in_features),
      global_out_(out_features) {}

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           std::shared_ptr<ProcessGroup> tp,
                                           ColumnParallelOptions options, Generator* gen)
    : ColumnParallelLinear(in_features, out_features, std::move(tp), options, Uninit{}) {
  nn::Linear whole(in_features, out_features, options.bias, options.layout, options.dtype, gen);
  load_from(whole);
}

std::shared_ptr<ColumnParallelLinear> ColumnParallelLinear::from_linear(
    nn::Linear& whole, std::shared_ptr<ProcessGroup> tp, ColumnParallelOptions options) {
  options.bias = whole.has_bias() ? nn::Bias::kYes : nn::Bias::kNo;
  options.layout = whole.layout();
  options.dtype = whole.weight().data().dtype();
  std::shared_ptr<ColumnParallelLinear> layer(new ColumnParallelLinear(
      whole.in_features(), whole.out_features(), std::move(tp), options, Uninit{}));
  layer->load_from(whole);
  return layer;
}

std::vector<SliceSegment> ColumnParallelLinear::segments(int rank) const {
  return split_segments(global_out_, tp_->size(), rank, opt_.padded_out, opt_.blocks);
}

void ColumnParallelLinear::load_from(nn::Linear& whole) {
  check_whole(whole, global_in_, global_out_, "ColumnParallelLinear");
  const auto segs = segments(tp_->rank());
  take_slice(whole.weight().data(), weight().data(), out_dim(layout()), segs);
  if (has_bias()) take_slice(whole.bias().data(), bias().data(), 0, segs);
}

std::vector<std::pair<std::string, TensorSlice>> ColumnParallelLinear::tp_slices() const {
  const auto segs = segments(tp_->rank());
  std::vector<std::pair<std::string, TensorSlice>> out{
      {"weight", {weight_shape(layout(), global_in_, global_out_), out_dim(layout()), segs}}};
  if (has_bias()) out.push_back({"bias", {{global_out_}, 0, segs}});
  return out;
}

Tensor ColumnParallelLinear::forward_impl(const Tensor& x) {
  BRAID_CHECK(!opt_.sequence_parallel || (x.defined() && x.dim() >= 2), kInvalidArgument,
              "ColumnParallelLinear: a sequence-parallel input must be [batch, seq / tp, ...]");
  const Tensor in = opt_.sequence_parallel ? all_gather_dim(x, 1, *tp_) : x;
  const Tensor y = nn::Linear::forward_impl(in);
  if (!opt_.gather_output) return y;
  // Every rank's features, each put at its global indices (padding dropped).
  const int last = y.dim() - 1;
  const Tensor all = all_gather_dim(y, last, *tp_);
  Shape shape = y.shape();
  shape.back() = global_out_;
  Tensor out = Tensor::empty(shape, y.dtype());
  for (int r = 0; r < tp_->size(); ++r) {
    local_to_global(all.narrow(last, r * out_features(), out_features()), out, last, segments(r));
  }
  return out;
}

Tensor ColumnParallelLinear::backward_impl(const Tensor& grad_output) {
  Tensor dy = grad_output;
  if (opt_.gather_output) {
    Shape shape = grad_output.shape();
    shape.back() = out_features();
    dy = Tensor::zeros(shape, grad_output.dtype());
    global_to_local(grad_output, dy, dy.dim() - 1, segments(tp_->rank()));
  }
  // Each rank's dx = dy_r W_r is its features' share of the whole input gradient.
  const Tensor dx = nn::Linear::backward_impl(dy);
  return opt_.sequence_parallel ? reduce_scatter_dim(dx, 1, *tp_, "ColumnParallelLinear")
                                : all_reduce_sum(dx, *tp_);
}

// ---- RowParallelLinear -----------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features,
                                     std::shared_ptr<ProcessGroup> tp,
                                     const RowParallelOptions& options, Uninit)
    : nn::Linear(local_size(in_features, tp, in_features, 1, "RowParallelLinear"), out_features,
                 nn::Bias::kNo, options.layout, options.dtype, &scratch_generator()),
      tp_(std::move(tp)),
      opt_(options),
      global_in_(in_features) {
  // Added after the reduction, once: the same on every rank (replicated).
  if (options.bias == nn::Bias::kYes) {
    register_parameter("bias", nn::Parameter(Tensor::zeros({out_features}, options.dtype)));
  }
}

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features,
                                     std::shared_ptr<ProcessGroup> tp, RowParallelOptions options,
                                     Generator* gen)
    : RowParallelLinear(in_features, out_features, std::move(tp), options, Uninit{}) {
  nn::Linear whole(in_features, out_features, options.bias, options.layout, options.dtype, gen);
  load_from(whole);
}

std::shared_ptr<RowParallelLinear> RowParallelLinear::from_linear(nn::Linear& whole,
                                                                  std::shared_ptr<ProcessGroup> tp,
                                                                  RowParallelOptions options) {
  options.bias = whole.has_bias() ? nn::Bias::kYes : nn::Bias::kNo;
  options.layout = whole.layout();
  options.dtype = whole.weight().data().dtype();
  std::shared_ptr<RowParallelLinear> layer(new RowParallelLinear(
      whole.in_features(), whole.out_features(), std::move(tp), options, Uninit{}));
  layer->load_from(whole);
  return layer;
}

void RowParallelLinear::load_from(nn::Linear& whole) {
  check_whole(whole, global_in_, out_features(), "RowParallelLinear");
  take_slice(whole.weight().data(), weight().data(), in_dim(layout()),
             split_segments(global_in_, tp_->size(), tp_->rank()));
  if (opt_.bias == nn::Bias::kYes) param("bias").data().copy_(whole.bias().data());
}

std::vector<std::pair<std::string, TensorSlice>> RowParallelLinear::tp_slices() const {
  return {{"weight",
           {weight_shape(layout(), global_in_, out_features()), in_dim(layout()),
            split_segments(global_in_, tp_->size(), tp_->rank())}}};
}

Tensor RowParallelLinear::forward_impl(const Tensor& x) {
  const Tensor in = opt_.input_is_parallel ? x : split_dim(x, -1, *tp_, "RowParallelLinear");
  Tensor y = nn::Linear::forward_impl(in);  // this rank's share of x W^T
  y = opt_.sequence_parallel ? reduce_scatter_dim(y, 1, *tp_, "RowParallelLinear")
                             : all_reduce_sum(y, *tp_);
  if (opt_.bias == nn::Bias::kYes) y = add(y, param("bias").data().to(y.dtype()));
  return y;
}

Tensor RowParallelLinear::backward_impl(const Tensor& grad_output) {
  if (opt_.bias == nn::Bias::kYes && param("bias").requires_grad()) {
    // Column sums of dy; under sequence parallelism each rank saw part of the sequence.
    const DType acc = grad_output.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
    const int64_t out = out_features();
    Tensor db = sum(grad_output.contiguous().view({grad_output.numel() / out, out}), 0, false, acc);
    if (opt_.sequence_parallel) db = all_reduce_sum(db, *tp_);
    nn::accumulate_grad(param("bias"), db);
  }
  const Tensor dy = opt_.sequence_parallel ? all_gather_dim(grad_output, 1, *tp_) : grad_output;
  const Tensor dx = nn::Linear::backward_impl(dy);
  return opt_.input_is_parallel ? dx : all_gather_dim(dx, -1, *tp_);
}

// ---- VocabParallelEmbedding ------------------------------------------------------------------

namespace {

struct VocabCtx {
  std::vector<uint8_t> mine;  // per id: in this rank's rows
};

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num_embeddings, int64_t dim,
                                               std::shared_ptr<ProcessGroup> tp,
                                               const VocabParallelOptions& options, Uninit)
    : nn::Embedding(local_size(num_embeddings, tp, options.padded_num_embeddings, 1,
                               "VocabParallelEmbedding"),
                    dim, options.dtype, &scratch_generator()),
      tp_(std::move(tp)),
      global_num_(num_embeddings),
      vocab_start_(static_cast<int64_t>(tp_->rank()) * this->num_embeddings()),
      padded_(this->num_embeddings() * tp_->size()),
      sequence_parallel_(options.sequence_parallel) {}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num_embeddings, int64_t dim,
                                               std::shared_ptr<ProcessGroup> tp,
                                               VocabParallelOptions options, Generator* gen)
    : VocabParallelEmbedding(num_embeddings, dim, std::move(tp), options, Uninit{}) {
  nn::Embedding whole(num_embeddings, dim, options.dtype, gen);
  load_from(whole);
}

std::shared_ptr<VocabParallelEmbedding> VocabParallelEmbedding::from_embedding(
    nn::Embedding& whole, std::shared_ptr<ProcessGroup> tp, VocabParallelOptions options) {
  options.dtype = whole.weight().data().dtype();
  std::shared_ptr<VocabParallelEmbedding> layer(new VocabParallelEmbedding(
      whole.num_embeddings(), whole.dim(), std::move(tp), options, Uninit{}));
  layer->load_from(whole);
  // The padding row, where this rank holds it (other ranks' ids add nothing here anyway).
  const int64_t pad = whole.padding_idx() - layer->vocab_start_;
  if (whole.padding_idx() >= 0 && pad >= 0 && pad < layer->num_embeddings())
    layer->set_padding_idx(pad);
  return layer;
}

void VocabParallelEmbedding::load_from(nn::Embedding& whole) {
  BRAID_CHECK(whole.num_embeddings() == global_num_ && whole.dim() == dim(), kInvalidArgument,
              "VocabParallelEmbedding: the whole Embedding is [", whole.num_embeddings(), ", ",
              whole.dim(), "], expected [", global_num_, ", ", dim(), "]");
  BRAID_CHECK(!whole.weight().data().device().is_meta(), kInvalidArgument,
              "VocabParallelEmbedding: the whole Embedding's weight is on the meta device");
  take_slice(whole.weight().data(), weight().data(), 0,
             split_segments(global_num_, tp_->size(), tp_->rank(), padded_));
}

std::vector<std::pair<std::string, TensorSlice>> VocabParallelEmbedding::tp_slices() const {
  return {
      {"weight",
       {{global_num_, dim()}, 0, split_segments(global_num_, tp_->size(), tp_->rank(), padded_)}}};
}

Tensor VocabParallelEmbedding::forward_impl(const Tensor& ids) {
  BRAID_CHECK(ids.defined() && (ids.dtype() == DType::kI64 || ids.dtype() == DType::kI32),
              kInvalidArgument, "VocabParallelEmbedding: ids must be i64 or i32");
  BRAID_CHECK(!sequence_parallel_ || ids.dim() >= 2, kInvalidArgument,
              "VocabParallelEmbedding: sequence-parallel ids must be [batch, seq], got ",
              shape_str(ids.shape()));
  const Tensor idc = ids.contiguous();
  const int64_t n = idc.numel(), local = num_embeddings();
  Tensor shifted = Tensor::empty(idc.shape(), DType::kI64);
  VocabCtx ctx{std::vector<uint8_t>(static_cast<size_t>(n))};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = idc.dtype() == DType::kI64 ? idc.data<int64_t>()[i] : idc.data<int32_t>()[i];
    BRAID_CHECK(id >= 0 && id < global_num_, kOutOfRange, "VocabParallelEmbedding: id ", id,
                " at position ", i, " of ids ", shape_str(ids.shape()),
                " is outside [0, num_embeddings ", global_num_, ")");
    const bool mine = id >= vocab_start_ && id < vocab_start_ + local;
    ctx.mine[static_cast<size_t>(i)] = mine ? 1 : 0;
    shifted.data<int64_t>()[i] = mine ? id - vocab_start_ : 0;
  }
  Tensor out = nn::Embedding::forward_impl(shifted);
  zero_rows(out, ctx.mine, dim());
  save_for_backward(std::move(ctx));
  // Each id's row comes from the one rank holding it (the others add zeros: exact).
  return sequence_parallel_ ? reduce_scatter_dim(out, 1, *tp_, "VocabParallelEmbedding")
                            : all_reduce_sum(out, *tp_);
}

Tensor VocabParallelEmbedding::backward_impl(const Tensor& grad_output) {
  const VocabCtx ctx = pop_saved<VocabCtx>();
  // The ids of other ranks were looked up as row 0: their gradient rows must not land there.
  const Tensor whole = sequence_parallel_ ? all_gather_dim(grad_output, 1, *tp_) : grad_output;
  Tensor dy = whole.contiguous().clone();  // a gather over one rank is the caller's tensor
  BRAID_CHECK(dy.numel() == static_cast<int64_t>(ctx.mine.size()) * dim(), kInvalidArgument,
              "VocabParallelEmbedding: gradient of shape ", shape_str(dy.shape()),
              " does not match the forward's ", ctx.mine.size(), " ids");
  zero_rows(dy, ctx.mine, dim());
  return nn::Embedding::backward_impl(dy);
}

}  // namespace braid::shard
