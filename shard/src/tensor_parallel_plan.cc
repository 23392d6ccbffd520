// TP slices and the plan that maps a model's split parameters to their global tensors
// (checkpoints), and the TP-aware gradient norm (tensor_parallel.h; docs/parallelism.md,
// "Checkpoints" and "Clipping").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "braid/core/error.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/ops.h"

namespace braid::shard {
namespace {

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= s[i];
  return n;
}

void check_slice(const TensorSlice& slice, const Shape& local) {
  const auto nd = static_cast<int64_t>(slice.global_shape.size());
  BRAID_CHECK(slice.dim >= 0 && slice.dim < nd && static_cast<int64_t>(local.size()) == nd,
              kInvalidArgument, "TensorSlice: dimension ", slice.dim, " of global shape ",
              shape_str(slice.global_shape), " does not fit a local tensor of shape ",
              shape_str(local));
  for (int64_t i = 0; i < nd; ++i) {
    BRAID_CHECK(i == slice.dim ||
                    local[static_cast<size_t>(i)] == slice.global_shape[static_cast<size_t>(i)],
                kInvalidArgument, "TensorSlice: local shape ", shape_str(local),
                " differs from global shape ", shape_str(slice.global_shape),
                " outside the split dimension ", slice.dim);
  }
  const int64_t local_len = local[static_cast<size_t>(slice.dim)];
  const int64_t global_len = slice.global_shape[static_cast<size_t>(slice.dim)];
  int64_t end = 0;
  for (const auto& s : slice.segments) {
    BRAID_CHECK(s.length > 0 && s.local_offset >= end && s.local_offset + s.length <= local_len &&
                    s.global_offset >= 0 && s.global_offset + s.length <= global_len,
                kInvalidArgument, "TensorSlice: segment (local ", s.local_offset, ", global ",
                s.global_offset, ", length ", s.length, ") does not fit ", local_len, " local and ",
                global_len, " global indices (after local index ", end, ")");
    end = s.local_offset + s.length;
  }
}

// Sum of squares of a gradient's elements [lo, hi) (flat), in f64.
double squares(const Tensor& grad, int64_t lo, int64_t hi) {
  if (hi <= lo) return 0;
  const Tensor g = grad.reshape({grad.numel()}).narrow(0, lo, hi - lo).to(DType::kF64).contiguous();
  const double* p = g.data<double>();
  double sum = 0;
  for (int64_t i = 0; i < hi - lo; ++i) sum += p[i] * p[i];
  return sum;
}

// Every rank's `values` ([k] f64) gathered over `g` and summed rank by rank (the same bits on
// every rank, whatever the backend's all_reduce order).
std::vector<double> sum_over(ProcessGroup& g, const std::vector<double>& values) {
  if (g.size() == 1) return values;
  const auto k = static_cast<int64_t>(values.size());
  Tensor mine = Tensor::empty({k}, DType::kF64);
  std::copy(values.begin(), values.end(), mine.data<double>());
  Tensor all = Tensor::empty({k * g.size()}, DType::kF64);
  g.all_gather_into(all, mine);
  std::vector<double> out(values.size(), 0.0);
  for (int r = 0; r < g.size(); ++r) {
    for (int64_t i = 0; i < k; ++i) out[static_cast<size_t>(i)] += all.data<double>()[r * k + i];
  }
  return out;
}

// split + replicated over the whole model: the split sum over tp, replicated ones once.
double norm_from(const TensorParallelPlan& plan, double split, double replicated) {
  return std::sqrt(sum_over(*plan.group(), {split})[0] + replicated);
}

double scale_grads(const std::vector<Tensor>& grads, double norm, double max_norm) {
  if (!std::isfinite(norm)) return norm;
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  if (coef < 1.0) {
    for (const Tensor& g : grads) {
      Tensor flat = g.view({g.numel()});
      axpby_(coef, flat, 0.0, flat);  // torch's mul_ by the clamped coefficient
    }
  }
  return norm;
}

}  // namespace

// ---- slices ----------------------------------------------------------------------------------

std::vector<ElementRun> global_runs(const TensorSlice& slice, const Shape& local_shape, int64_t lo,
                                    int64_t hi) {
  check_slice(slice, local_shape);
  const auto d = static_cast<size_t>(slice.dim);
  const int64_t inner = product(local_shape, d + 1, local_shape.size());
  const int64_t local_len = local_shape[d], global_len = slice.global_shape[d];
  const int64_t numel = product(local_shape, 0, local_shape.size());
  BRAID_CHECK(lo >= 0 && lo <= hi && hi <= numel, kOutOfRange, "global_runs: elements [", lo, ", ",
              hi, ") of a tensor of shape ", shape_str(local_shape));
  std::vector<ElementRun> runs;
  if (hi == lo || inner == 0 || local_len == 0) return runs;
  const int64_t row = local_len * inner;  // elements per index of the leading dimensions
  for (int64_t o = lo / row; o <= (hi - 1) / row; ++o) {
    for (const auto& s : slice.segments) {
      const int64_t a0 = (o * local_len + s.local_offset) * inner;
      const int64_t a = std::max(lo, a0), b = std::min(hi, a0 + s.length * inner);
      if (a >= b) continue;
      const int64_t g = (o * global_len + s.global_offset) * inner + (a - a0);
      if (!runs.empty() && runs.back().local_offset + runs.back().count == a &&
          runs.back().global_offset + runs.back().count == g) {
        runs.back().count += b - a;  // contiguous in both: one run
      } else {
        runs.push_back({a, g, b - a});
      }
    }
  }
  return runs;
}

std::vector<SliceSegment> split_segments(int64_t size, int parts, int rank, int64_t padded,
                                         int64_t blocks) {
  BRAID_CHECK(size >= 0 && parts >= 1 && rank >= 0 && rank < parts && blocks >= 1, kInvalidArgument,
              "split_segments: part ", rank, " of ", parts, " of ", size, " elements in ", blocks,
              " blocks");
  if (blocks > 1) {
    BRAID_CHECK(size % (blocks * parts) == 0 && (padded == 0 || padded == size), kInvalidArgument,
                "split_segments: ", size, " features in ", blocks,
                " blocks do not split evenly over ", parts, " ranks (no padding with blocks)");
    const int64_t block = size / blocks, local = block / parts;
    std::vector<SliceSegment> out;
    for (int64_t b = 0; b < blocks; ++b)
      out.push_back({b * local, b * block + rank * local, local});
    return out;
  }
  if (padded == 0) padded = (size + parts - 1) / parts * parts;
  BRAID_CHECK(padded >= size && padded % parts == 0, kInvalidArgument,
              "split_segments: padded size ", padded, " must be a multiple of ", parts,
              " and at least ", size);
  const int64_t local = padded / parts, start = rank * local;
  const int64_t len = std::clamp<int64_t>(size - start, 0, local);
  if (len == 0) return {};
  return {{0, start, len}};
}

int64_t pad_vocab_size(int64_t vocab_size, int64_t tp_size, int64_t divisible_by) {
  BRAID_CHECK(vocab_size > 0 && tp_size > 0 && divisible_by > 0, kInvalidArgument,
              "pad_vocab_size: vocab_size ", vocab_size, ", tp size ", tp_size,
              " and divisible_by ", divisible_by, " must be positive");
  const int64_t m = divisible_by * tp_size;
  return (vocab_size + m - 1) / m * m;
}

// ---- the plan ----------------------------------------------------------------------------------

TensorParallelPlan::TensorParallelPlan(nn::Module& root, std::shared_ptr<ProcessGroup> tp,
                                       bool sequence_parallel)
    : tp_(std::move(tp)), sequence_parallel_(sequence_parallel) {
  BRAID_CHECK(tp_ != nullptr && tp_->rank() >= 0, kInvalidArgument,
              "TensorParallelPlan: the tp group is null or does not hold this rank");
  for (auto& [path, module] : root.named_modules()) {
    auto* layer = dynamic_cast<TensorParallelLayer*>(module);
    if (layer == nullptr) continue;
    BRAID_CHECK(layer->tp_group()->global_ranks() == tp_->global_ranks(), kInvalidArgument,
                "TensorParallelPlan: '", path, "' is split over another group than the plan's");
    for (auto& [name, slice] : layer->tp_slices()) {
      const nn::Parameter& p = module->param(name);
      const std::string full = path.empty() ? name : path + "." + name;
      check_slice(slice, p.data().shape());
      auto [it, inserted] = entries_.emplace(p.id(), Entry{p, slice});
      BRAID_CHECK(inserted || it->second.slice == slice, kInvalidArgument, "TensorParallelPlan: '",
                  full, "' is shared with another layer that splits it differently");
    }
  }
}

const TensorSlice* TensorParallelPlan::slice(const nn::Parameter& p) const {
  auto it = entries_.find(p.id());
  return it == entries_.end() ? nullptr : &it->second.slice;
}

bool TensorParallelPlan::writes(const nn::Parameter& p) const {
  return slice(p) != nullptr || tp_->rank() == 0;
}

Shape TensorParallelPlan::global_shape(const nn::Parameter& p, const Shape& local_shape) const {
  const TensorSlice* s = slice(p);
  return s != nullptr ? s->global_shape : local_shape;
}

std::vector<ElementRun> TensorParallelPlan::runs(const nn::Parameter& p, const Shape& local_shape,
                                                 int64_t lo, int64_t hi) const {
  if (const TensorSlice* s = slice(p)) return global_runs(*s, local_shape, lo, hi);
  if (hi <= lo) return {};
  return {{lo, lo, hi - lo}};
}

// ---- clipping ----------------------------------------------------------------------------------

double grad_norm(const std::vector<nn::Parameter>& params, const TensorParallelPlan& plan) {
  double split = 0, replicated = 0;
  std::set<const void*> seen;
  for (const auto& p : params) {
    if (!p.grad().defined() || !seen.insert(p.id()).second) continue;
    (plan.slice(p) ? split : replicated) += squares(p.grad(), 0, p.grad().numel());
  }
  return norm_from(plan, split, replicated);
}

double clip_grad_norm_(const std::vector<nn::Parameter>& params, const TensorParallelPlan& plan,
                       double max_norm) {
  BRAID_CHECK(max_norm >= 0, kInvalidArgument, "clip_grad_norm_: max_norm must be >= 0, got ",
              max_norm);
  const double norm = grad_norm(params, plan);
  std::vector<Tensor> grads;
  std::set<const void*> seen;
  for (const auto& p : params) {
    if (p.grad().defined() && seen.insert(p.id()).second) grads.push_back(p.grad());
  }
  return scale_grads(grads, norm, max_norm);
}

double clip_grad_norm_(ShardedModel& sm, const TensorParallelPlan& plan, double max_norm) {
  BRAID_CHECK(max_norm >= 0, kInvalidArgument, "clip_grad_norm_: max_norm must be >= 0, got ",
              max_norm);
  const std::vector<nn::Parameter> opt = sm.optimizer_parameters();
  const std::vector<Unit>& units = sm.units();
  double split = 0, replicated = 0;
  std::vector<Tensor> grads;
  if (!sm.spec().shard_optimizer_state) {
    // Every rank of the group holds the whole gradient: the optimizer's parameters (or their
    // f32 masters) in unit order.
    size_t i = 0;
    for (const auto& u : units) {
      for (const auto& up : u.params) {
        const nn::Parameter& target = opt.at(i++);
        BRAID_CHECK(target.grad().defined(), kInvalidArgument,
                    "clip_grad_norm_: call finish_gradients first");
        (plan.slice(up.param) ? split : replicated) +=
            squares(target.grad(), 0, target.grad().numel());
        grads.push_back(target.grad());
      }
    }
  } else {
    // Each rank holds its shard of every unit's flat gradient: each parameter's part of it.
    const auto group = sm.shard_group();
    for (size_t u = 0; u < units.size(); ++u) {
      const Tensor& g = opt.at(u).grad();
      BRAID_CHECK(g.defined(), kInvalidArgument, "clip_grad_norm_: call finish_gradients first");
      const ShardInfo shard = units[u].shard(group->rank(), group->size());
      for (const auto& up : units[u].params) {
        const int64_t lo = std::max(up.offset, shard.offset);
        const int64_t hi = std::min(up.offset + up.numel, shard.end());
        (plan.slice(up.param) ? split : replicated) +=
            squares(g, lo - shard.offset, hi - shard.offset);
      }
      grads.push_back(g);
    }
    const std::vector<double> sums = sum_over(*group, {split, replicated});
    split = sums[0];
    replicated = sums[1];
  }
  return scale_grads(grads, norm_from(plan, split, replicated), max_norm);
}

Tensor gather_global(const Tensor& local, const TensorSlice& slice, ProcessGroup& tp) {
  const Tensor src = local.contiguous();
  Tensor whole = Tensor::zeros(slice.global_shape, src.dtype());
  const auto elem = static_cast<int64_t>(src.element_size());
  const auto* from = static_cast<const char*>(src.data_ptr());
  auto* to = static_cast<char*>(whole.data_ptr());
  for (const ElementRun& run : global_runs(slice, src.shape(), 0, src.numel())) {
    std::memcpy(to + run.global_offset * elem, from + run.local_offset * elem,
                static_cast<size_t>(run.count * elem));
  }
  tp.all_reduce(whole);
  return whole;
}

NamedTensors tensor_parallel_full_state_dict(ShardedModel& sm, const TensorParallelPlan& plan) {
  std::map<std::string, const TensorSlice*> slices;
  for (auto& [name, p] : sm.module().named_parameters(/*remove_duplicate=*/false)) {
    if (const TensorSlice* s = plan.slice(p)) slices.emplace(name, s);
  }
  NamedTensors out;
  for (auto& [name, t] : sm.full_state_dict()) {
    auto it = slices.find(name);
    out.emplace_back(name, it == slices.end() ? t : gather_global(t, *it->second, *plan.group()));
  }
  return out;
}

}  // namespace braid::shard
