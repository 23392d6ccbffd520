// Tensor parallelism's collectives on whole tensors (tensor_parallel_comm.h). Batch-first
// activations make the sequence dimension 1, not the outermost one as in Megatron's [s, b, h]
// layout, so gathers along it reorder the received blocks (one copy) and reduce-scatters
// reorder before sending.
#include "tensor_parallel_comm.h"

#include "braid/core/error.h"
#include "braid/tensor/ops.h"

namespace braid::shard::tp_detail {

int wrap(int dim, const Tensor& x) {
  const int d = dim < 0 ? dim + x.dim() : dim;
  BRAID_CHECK(d >= 0 && d < x.dim(), kInvalidArgument, "tensor parallel: dimension ", dim,
              " of a tensor of shape ", shape_str(x.shape()));
  return d;
}

Tensor all_reduce_sum(const Tensor& x, ProcessGroup& g) {
  if (g.size() == 1) return x;
  Tensor out = x.contiguous().clone();
  g.all_reduce(out);
  return out;
}

Tensor all_gather_dim(const Tensor& x, int dim, ProcessGroup& g) {
  if (g.size() == 1) return x;
  const int d = wrap(dim, x);
  const int64_t n = g.size();
  Shape blocks = x.shape();
  blocks.insert(blocks.begin(), n);  // [n, ...x]
  Tensor out = Tensor::empty(blocks, x.dtype());
  g.all_gather_into(out, x.contiguous());
  Shape joined = x.shape();
  joined[static_cast<size_t>(d)] *= n;
  if (d == 0) return out.view(joined);
  // [n, d0 .. d_{d-1}, d_d, ...] -> [d0 .. d_{d-1}, n, d_d, ...] -> merge n with d_d.
  std::vector<int> order;
  for (int i = 1; i <= d; ++i) order.push_back(i);
  order.push_back(0);
  for (int i = d + 1; i <= x.dim(); ++i) order.push_back(i);
  return out.permute(order).contiguous().view(joined);
}

Tensor reduce_scatter_dim(const Tensor& x, int dim, ProcessGroup& g, const char* what) {
  if (g.size() == 1) return x;
  const int d = wrap(dim, x);
  const int64_t n = g.size();
  BRAID_CHECK(x.size(d) % n == 0, kInvalidArgument, what, ": dimension ", d, " of ",
              shape_str(x.shape()), " must be a multiple of the tensor-parallel size ", n);
  // [.., n * k, ..] -> [.., n, k, ..] -> [n, .., k, ..]
  Shape split = x.shape();
  split[static_cast<size_t>(d)] = x.size(d) / n;
  Shape parts = split;
  parts.insert(parts.begin() + d, n);
  std::vector<int> order{d};
  for (int i = 0; i <= x.dim(); ++i) {
    if (i != d) order.push_back(i);
  }
  const Tensor in = x.contiguous().view(parts).permute(order).contiguous();
  Tensor out = Tensor::empty(split, x.dtype());
  g.reduce_scatter_from(out, in);
  return out;
}

Tensor split_dim(const Tensor& x, int dim, ProcessGroup& g, const char* what) {
  const int d = wrap(dim, x);
  const int64_t n = g.size();
  BRAID_CHECK(x.size(d) % n == 0, kInvalidArgument, what, ": dimension ", d, " of ",
              shape_str(x.shape()), " must be a multiple of the tensor-parallel size ", n);
  if (n == 1) return x;
  const int64_t k = x.size(d) / n;
  return x.narrow(d, g.rank() * k, k).contiguous();
}

void global_to_local(const Tensor& global, Tensor& local, int dim,
                     const std::vector<SliceSegment>& segments) {
  for (const auto& s : segments) {
    local.narrow(dim, s.local_offset, s.length)
        .copy_(global.narrow(dim, s.global_offset, s.length));
  }
}

void local_to_global(const Tensor& local, Tensor& global, int dim,
                     const std::vector<SliceSegment>& segments) {
  for (const auto& s : segments) {
    global.narrow(dim, s.global_offset, s.length)
        .copy_(local.narrow(dim, s.local_offset, s.length));
  }
}

}  // namespace braid::shard::tp_detail
