// Accelerate's data-operation utilities over Trees (tree_ops.h). Each walks the tree depth
// first with recursively_apply (non-tensor leaves throw) and runs the collectives for one
// tensor at a time, so every rank issues them in the same order.
#include "braid/comm/tree_ops.h"

#include <algorithm>
#include <sstream>

#include "braid/core/error.h"
#include "braid/tensor/ops.h"

namespace braid {
namespace {

using TensorFn = std::function<Tensor(const Tensor&)>;

Tree apply_to_tensors(const Tree& data, const TensorFn& fn) {
  return recursively_apply([&](const Tree& leaf) { return Tree(fn(leaf.tensor())); }, data, {},
                           /*error_on_other_type=*/true);
}

// A contiguous copy (always new storage, so the caller's tensor is never written).
Tensor fresh_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  c.copy_(t);
  return c;
}

std::string shapes_report(const std::vector<Shape>& shapes) {
  std::ostringstream out;
  for (size_t r = 0; r < shapes.size(); ++r) {
    out << (r ? ", " : "") << "rank " << r << ": " << shape_str(shapes[r]);
  }
  return out.str();
}

// Every rank's shape of `t`, in rank order; ranks whose tensors differ in their number of
// dimensions throw (all of them, since all see the same numbers).
std::vector<Shape> all_gather_shapes(ProcessGroup& pg, const Tensor& t, std::string_view op) {
  Tensor ndim = Tensor::full({1}, static_cast<int64_t>(t.dim()), DType::kI64);
  Tensor ndims = Tensor::empty({pg.size()}, DType::kI64);
  pg.all_gather_into(ndims, ndim);
  const int64_t* nd = ndims.data<int64_t>();
  for (int r = 0; r < pg.size(); ++r) {
    if (nd[r] == t.dim()) continue;
    std::ostringstream each;
    for (int q = 0; q < pg.size(); ++q) each << (q ? ", " : "") << "rank " << q << ": " << nd[q];
    BRAID_FAIL(kInvalidArgument, op, ": ranks hold tensors with different numbers of dimensions (",
               each.str(), ")");
  }
  std::vector<Shape> shapes(pg.size());
  if (t.dim() == 0) return shapes;
  Tensor mine = Tensor::empty({t.dim()}, DType::kI64);
  std::copy(t.shape().begin(), t.shape().end(), mine.data<int64_t>());
  Tensor all = Tensor::empty({pg.size(), t.dim()}, DType::kI64);
  pg.all_gather_into(all, mine);
  const int64_t* p = all.data<int64_t>();
  for (int r = 0; r < pg.size(); ++r) shapes[r].assign(p + r * t.dim(), p + (r + 1) * t.dim());
  return shapes;
}

Tensor gather_one(ProcessGroup& pg, const Tensor& t) {
  Tensor in = t.dim() == 0 ? t.reshape({1}) : t.contiguous();
  Shape out_shape = in.shape();
  out_shape[0] *= pg.size();
  Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
  pg.all_gather_into(out, in);
  return out;
}

Tensor pad_one(ProcessGroup& pg, const Tensor& t, int dim, double pad_index, bool pad_first) {
  const auto shapes = all_gather_shapes(pg, t, "pad_across_processes");
  if (dim >= t.dim()) return t;
  const int d = dim < 0 ? dim + t.dim() : dim;
  BRAID_CHECK(d >= 0, kOutOfRange, "pad_across_processes: dim ", dim, " is out of range for a ",
              t.dim(), "-d tensor");
  int64_t longest = 0;
  for (const Shape& s : shapes) longest = std::max(longest, s[d]);
  const int64_t mine = t.size(d);
  if (mine == longest) return t;
  Shape padded = t.shape();
  padded[d] = longest;
  Tensor out = Tensor::full(padded, pad_index, t.dtype(), t.device());
  out.narrow(d, pad_first ? longest - mine : 0, mine).copy_(t);
  return out;
}

Tensor concatenate_one(ProcessGroup& pg, const Tensor& t, int dim) {
  const Tensor x = t.dim() == 0 ? t.reshape({1}) : t;
  const auto shapes = all_gather_shapes(pg, x, "concatenate");
  const int d = dim < 0 ? dim + x.dim() : dim;
  BRAID_CHECK(d >= 0 && d < x.dim(), kOutOfRange, "concatenate: dim ", dim,
              " is out of range for a ", x.dim(), "-d tensor");
  int64_t longest = 0;
  for (const Shape& s : shapes) {
    for (int i = 0; i < x.dim(); ++i) {
      BRAID_CHECK(i == d || s[i] == shapes[0][i], kInvalidArgument,
                  "concatenate: tensors must match in every dimension but ", d, " (",
                  shapes_report(shapes), ")");
    }
    longest = std::max(longest, s[d]);
  }
  Shape padded_shape = x.shape();
  padded_shape[d] = longest;
  Tensor padded = Tensor::zeros(padded_shape, x.dtype(), x.device());
  padded.narrow(d, 0, x.size(d)).copy_(x);
  Shape out_shape = {pg.size()};
  out_shape.insert(out_shape.end(), padded_shape.begin(), padded_shape.end());
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  pg.all_gather_into(out, padded);
  std::vector<Tensor> parts;
  for (int r = 0; r < pg.size(); ++r) parts.push_back(out.select(0, r).narrow(d, 0, shapes[r][d]));
  return cat(parts, d);
}

enum class Reduction { kSum, kMean, kMax, kNone };

Reduction parse_reduction(std::string_view name) {
  if (name == "sum") return Reduction::kSum;
  if (name == "mean") return Reduction::kMean;
  if (name == "max") return Reduction::kMax;
  if (name == "none") return Reduction::kNone;
  BRAID_FAIL(kInvalidArgument, "reduce: reduction '", name,
             "' is not one of \"mean\", \"sum\", \"max\", \"none\"");
}

}  // namespace

Tree gather(ProcessGroup& pg, const Tree& data) {
  return apply_to_tensors(data, [&](const Tensor& t) { return gather_one(pg, t); });
}

Tree gather_object(ProcessGroup& pg, const Tree& object) {
  Tree::List flat;
  for (Tree& per_rank : all_gather_object(pg, object)) {
    if (!per_rank.is_list()) {
      flat.push_back(std::move(per_rank));
      continue;
    }
    for (Tree& item : per_rank.list()) flat.push_back(std::move(item));
  }
  return Tree(std::move(flat));
}

Tree broadcast(ProcessGroup& pg, const Tree& data, int from_process) {
  return apply_to_tensors(data, [&](const Tensor& t) {
    Tensor target = t;
    if (t.is_contiguous()) {
      pg.broadcast(target, from_process);
      return t;
    }
    Tensor staged = t.contiguous();
    pg.broadcast(staged, from_process);
    target.copy_(staged);
    return t;
  });
}

Tree reduce(ProcessGroup& pg, const Tree& data, std::string_view reduction, double scale) {
  const Reduction r = parse_reduction(reduction);
  return apply_to_tensors(data, [&](const Tensor& t) {
    Tensor result = fresh_copy(t);
    if (r != Reduction::kNone) {
      CallOptions o;
      o.op = r == Reduction::kSum ? ReduceOp::kSum
                                  : (r == Reduction::kMean ? ReduceOp::kAvg : ReduceOp::kMax);
      pg.all_reduce(result, o);
    }
    return scale == 1.0 ? result : braid::scale(result, scale);
  });
}

Tree pad_across_processes(ProcessGroup& pg, const Tree& data, int dim, double pad_index,
                          bool pad_first) {
  return apply_to_tensors(
      data, [&](const Tensor& t) { return pad_one(pg, t, dim, pad_index, pad_first); });
}

void wait_for_everyone(ProcessGroup& pg) {
  pg.barrier();
}

Tree concatenate(ProcessGroup& pg, const Tree& data, int dim) {
  return apply_to_tensors(data, [&](const Tensor& t) { return concatenate_one(pg, t, dim); });
}

}  // namespace braid
