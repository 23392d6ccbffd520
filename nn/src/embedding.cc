// Embedding: a row gather (the embedding_forward kernel of the ids' device) and, in backward, an
// ordered scatter-add into a dense gradient of the table (embedding_backward), as torch's dense
// embedding backward. Saves the ids. A padding_idx (torch's) zeroes the gradient rows of the
// positions holding it before the scatter-add.
#include <vector>

#include "braid/nn/layers.h"
#include "braid/tensor/ops.h"
#include "layer_util.h"

namespace braid::nn {
namespace {

namespace kc = braid::kernels;

struct EmbeddingCtx {
  Tensor ids;  // contiguous, i64 or i32
};

// dy [n, dim] (contiguous) with the rows of the positions whose id is `pad` zeroed.
Tensor without_pad_rows(const Tensor& dy, const Tensor& ids, int64_t pad, int64_t dim) {
  const std::vector<double> id = ids.to_vector();
  std::vector<double> keep(id.size());
  for (size_t i = 0; i < id.size(); ++i) keep[i] = id[i] == static_cast<double>(pad) ? 0.0 : 1.0;
  const auto n = static_cast<int64_t>(id.size());
  const Tensor mask = Tensor::from_vector(keep, {n, 1}, dy.dtype()).to(dy.device());
  return mul(dy.view({n, dim}), mask);
}

}  // namespace

Embedding::Embedding(int64_t num_embeddings, int64_t dim, DType dtype, Generator* gen)
    : Layer("Embedding"), num_(num_embeddings), dim_(dim) {
  BRAID_CHECK(num_embeddings > 0 && dim > 0, kInvalidArgument, "Embedding: num_embeddings (",
              num_embeddings, ") and dim (", dim, ") must be positive");
  BRAID_CHECK(detail::is_float_dtype(dtype), kInvalidArgument,
              "Embedding: parameter dtype must be floating, got ", dtype);
  register_parameter(
      "weight",
      Parameter(
          empty_weights_active()
              ? Tensor::empty({num_embeddings, dim}, dtype, kMeta)  // no draw
              : Tensor::randn({num_embeddings, dim}, detail::f32_or_f64(dtype), gen).to(dtype)));
}

void Embedding::set_padding_idx(int64_t id) {
  BRAID_CHECK(id >= -1 && id < num_, kOutOfRange, "Embedding: padding_idx ", id,
              " is outside [-1, num_embeddings ", num_, ")");
  padding_idx_ = id;
}

Tensor Embedding::forward_impl(const Tensor& ids) {
  BRAID_CHECK(ids.defined(), kInvalidArgument, "Embedding: ids are undefined");
  BRAID_CHECK(ids.dtype() == DType::kI64 || ids.dtype() == DType::kI32, kInvalidArgument,
              "Embedding: ids must be i64 or i32, got dtype ", ids.dtype());
  const Tensor idc = ids.contiguous();
  const int64_t n = idc.numel();
  // Checked here, on the host, for the layer's message (the cpu kernel checks again; a GPU
  // kernel could only trap). Meta ids have no values.
  const Tensor ih = idc.device().is_meta() ? Tensor() : idc.to(kCPU);
  for (int64_t i = 0; ih.defined() && i < n; ++i) {
    const int64_t id = ih.dtype() == DType::kI64 ? ih.data<int64_t>()[i] : ih.data<int32_t>()[i];
    BRAID_CHECK(id >= 0 && id < num_, kOutOfRange, "Embedding: id ", id, " at position ", i,
                " of ids ", shape_str(ids.shape()), " is outside [0, num_embeddings ", num_, ")");
  }
  const Tensor w = param("weight").data().contiguous();
  Shape out_shape = ids.shape();
  out_shape.push_back(dim_);
  BRAID_CHECK(w.device() == idc.device(), kInvalidArgument, "Embedding: ids are on ", idc.device(),
              " and the weight on ", w.device(), "; expected one device");
  const auto [k, s] = detail::kernels_of("Embedding", w, kc::Op::kEmbeddingForward, w.dtype());
  Tensor out = Tensor::empty(out_shape, w.dtype(), w.device());
  k.embedding_forward(s, w.dtype(), num_, dim_, w.data_ptr(), idc.dtype(), idc.data_ptr(), n,
                      out.data_ptr());
  save_for_backward(EmbeddingCtx{idc});
  return out;
}

Tensor Embedding::backward_impl(const Tensor& grad_output) {
  EmbeddingCtx ctx = pop_saved<EmbeddingCtx>();
  Shape out_shape = ctx.ids.shape();
  out_shape.push_back(dim_);
  detail::check_grad_shape("Embedding", grad_output, out_shape);
  const Parameter& weight = param("weight");
  if (!weight.requires_grad()) return {};
  const DType acc = detail::f32_or_f64(weight.data().dtype());
  Tensor dy = grad_output.to(acc).contiguous();
  if (padding_idx_ >= 0 && !dy.device().is_meta())
    dy = without_pad_rows(dy, ctx.ids, padding_idx_, dim_);
  const auto [k, s] = detail::kernels_of("Embedding", dy, kc::Op::kEmbeddingBackward, acc);
  Tensor dw = Tensor::zeros({num_, dim_}, acc, dy.device());
  k.embedding_backward(s, acc, num_, dim_, ctx.ids.dtype(), ctx.ids.data_ptr(), ctx.ids.numel(),
                       dy.data_ptr(), dw.data_ptr());
  accumulate_grad(weight, dw);
  return {};
}

}  // namespace braid::nn
