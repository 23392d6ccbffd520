// ShardedModel: ZeRO stages 0-3 over units, with the deterministic reduction of
// Note [Deterministic reduction] (fsdp.h). The units' Layer hooks drive everything:
//   pre_forward / pre_backward   stage 3: all_gather the unit's shards into a flat buffer and
//                                point its parameters at views of it
//   post_forward                 stage 3 with reshard_after_forward: free that buffer
//   post_backward                pack the unit's micro-batch gradient flat, all_to_all it so
//                                each rank gets the W contributions to its shard, fold them in
//                                rank order into the shard's f32 accumulator; stage 3: free
// Collectives run on the calling thread in the same order on every rank (the model's order).
#include "braid/shard/fsdp.h"

#include <cmath>

#include "braid/core/error.h"
#include "braid/tensor/ops.h"
#include "fsdp_impl.h"

namespace braid::shard {

ZeroStage zero_stage_from_int(int64_t stage) {
  BRAID_CHECK(stage >= 0 && stage <= 3, kInvalidArgument, "zero_stage must be 0, 1, 2 or 3, got ",
              stage);
  return static_cast<ZeroStage>(stage);
}

namespace {

// The unit's parameters as views of `flat`.
void point_params_at(UnitState& s, const Tensor& flat) {
  for (auto& up : s.unit->params)
    up.param.data() = flat.narrow(0, up.offset, up.numel).view(up.shape);
}

void release_params(UnitState& s) {
  for (auto& up : s.unit->params) up.param.data() = Tensor();
  s.flat = Tensor();
}

}  // namespace

// Gathering is idempotent and release is final: a unit's forward can run twice before its
// backward (activation checkpointing recomputes it), and the backward's release must still
// free it, or the next step would see parameters from before the optimizer step.
void ShardedModel::Impl::gather(UnitState& s) {
  if (stage != ZeroStage::k3 || s.gathered) return;
  s.gathered = true;
  Tensor flat = Tensor::empty({s.unit->padded}, DType::kF32);
  pg->all_gather_into(flat, s.shard_param);
  s.flat = flat;
  point_params_at(s, flat);
}

void ShardedModel::Impl::release(UnitState& s) {
  if (stage != ZeroStage::k3 || !s.gathered) return;
  s.gathered = false;
  release_params(s);
}

// Note [Deterministic reduction]: this micro-batch's gradient of the unit, flat, through an
// all_to_all; block r of the result is rank r's contribution to this rank's shard, and the
// blocks are folded in rank order (acc = acc + g, the same operation accumulate_grad uses).
void ShardedModel::Impl::reduce(UnitState& s) {
  Tensor g = Tensor::zeros({s.unit->padded}, DType::kF32);
  for (auto& up : s.unit->params) {
    Tensor& grad = up.param.grad();
    if (grad.defined()) {
      g.narrow(0, up.offset, up.numel).copy_(grad.reshape({up.numel}));
      grad = Tensor();
    }
  }
  Tensor blocks = Tensor::empty({s.unit->padded}, DType::kF32);
  pg->all_to_all(blocks, g);
  const int64_t count = s.shard.count;
  for (int r = 0; r < world(); ++r) {
    const Tensor block = blocks.narrow(0, r * count, count);
    if (!s.acc.defined()) {
      s.acc = block.clone();
    } else {
      axpby_(1.0, block, 1.0, s.acc);
    }
  }
}

ShardedModel::ShardedModel(std::shared_ptr<nn::Layer> model, std::shared_ptr<ProcessGroup> pg,
                           ShardingOptions options)
    : model_(std::move(model)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  BRAID_CHECK(model_ != nullptr && pg != nullptr, kInvalidArgument,
              "ShardedModel: model and process group must be given");
  impl_->pg = std::move(pg);
  impl_->stage = options_.stage;
  impl_->reshard_after_forward = options_.reshard_after_forward;
  const int world = impl_->world(), rank = impl_->pg->rank();
  units_ = make_units(*model_, options_.wrap, world);

  for (auto& u : units_) {
    for (auto& up : u.params) {
      const Tensor& d = up.param.data();
      BRAID_CHECK(d.defined() && d.dtype() == DType::kF32 && d.device() == kCPU, kInvalidArgument,
                  "ShardedModel: parameter '", up.name,
                  "' must be a defined f32 CPU tensor (mixed precision computes in autocast's "
                  "dtype), got ",
                  d.defined() ? std::string(dtype_name(d.dtype())) : std::string("undefined"));
      BRAID_CHECK(up.param.requires_grad() || options_.stage == ZeroStage::k0, kInvalidArgument,
                  "ShardedModel: parameter '", up.name,
                  "' does not require grad; frozen parameters inside a sharded unit are not "
                  "supported (put their module in WrapPolicy::ignored_modules)");
      if (!d.is_contiguous()) up.param.data() = d.contiguous();
      if (options_.sync_module_states) impl_->pg->broadcast(up.param.data(), 0);
    }
  }

  impl_->states.resize(units_.size());
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitState& s = impl_->states[i];
    Unit& u = units_[i];
    s.unit = &u;
    s.shard = u.shard(rank, world);
    if (options_.stage == ZeroStage::k0) {
      for (auto& up : u.params) impl_->stage0_params.push_back(up.param);
    } else {
      Tensor flat = Tensor::zeros({u.padded}, DType::kF32);
      for (auto& up : u.params) {
        flat.narrow(0, up.offset, up.numel).copy_(up.param.data().reshape({up.numel}));
      }
      s.shard_param = flat.narrow(0, s.shard.offset, s.shard.count).clone();
      s.opt_param = nn::Parameter(s.shard_param);
      if (options_.stage == ZeroStage::k3) {
        release_params(s);
      } else {
        s.flat = flat;
        point_params_at(s, flat);
      }
    }
    Impl* impl = impl_.get();
    nn::ModuleHooks hooks;
    hooks.pre_forward = [impl, &s](nn::Module&) { impl->gather(s); };
    hooks.post_forward = [impl, &s](nn::Module&) {
      if (impl->reshard_after_forward) impl->release(s);
    };
    hooks.pre_backward = [impl, &s](nn::Module&) { impl->gather(s); };
    hooks.post_backward = [impl, &s](nn::Module&) {
      impl->reduce(s);
      impl->release(s);
    };
    u.layer->set_hooks(std::move(hooks));
  }
}

ShardedModel::~ShardedModel() {
  for (auto& u : units_) u.layer->set_hooks({});
}

int ShardedModel::rank() const {
  return impl_->pg->rank();
}
int ShardedModel::world_size() const {
  return impl_->world();
}

Tensor ShardedModel::forward(const Tensor& x) {
  return model_->forward(x);
}

Tensor ShardedModel::backward(const Tensor& grad_output) {
  return model_->backward(grad_output);
}

void ShardedModel::finish_gradients(double scale) {
  for (auto& s : impl_->states) {
    BRAID_CHECK(s.acc.defined(), kInvalidArgument, "ShardedModel::finish_gradients: unit '",
                s.unit->name, "' has no gradient: run at least one forward / backward first");
    Tensor g = braid::scale(s.acc, scale);
    s.acc = Tensor();
    if (impl_->stage == ZeroStage::k0) {
      Tensor full = Tensor::empty({s.unit->padded}, DType::kF32);
      impl_->pg->all_gather_into(full, g);
      for (auto& up : s.unit->params) {
        up.param.grad() = full.narrow(0, up.offset, up.numel).view(up.shape);
      }
    } else {
      s.opt_param.grad() = g;
    }
  }
}

std::vector<nn::Parameter> ShardedModel::optimizer_parameters() const {
  if (impl_->stage == ZeroStage::k0) return impl_->stage0_params;
  std::vector<nn::Parameter> out;
  for (auto& s : impl_->states) out.push_back(s.opt_param);
  return out;
}

void ShardedModel::after_step() {
  // Stage 3: a unit still gathered (a forward without backward, e.g. evaluation with
  // reshard_after_forward off) holds parameters from before the step.
  for (auto& s : impl_->states) impl_->release(s);
  if (impl_->stage != ZeroStage::k1 && impl_->stage != ZeroStage::k2) return;
  for (auto& s : impl_->states) impl_->pg->all_gather_into(s.flat, s.shard_param);
}

double ShardedModel::clip_grad_norm_(double max_norm) {
  BRAID_CHECK(max_norm >= 0, kInvalidArgument, "clip_grad_norm_: max_norm must be >= 0, got ",
              max_norm);
  // Sum of squares per kChunk elements of each unit's flat gradient, in f64, then the chunks
  // in order: unit by unit, chunk by chunk. Every rank ends with every chunk's partial.
  double total = 0;
  std::vector<Tensor> grads;  // the gradient tensors to scale
  for (auto& s : impl_->states) {
    const int64_t padded = s.unit->padded;
    Tensor all_partials = Tensor::empty({padded / kChunk}, DType::kF64);
    const auto chunk_sums = [](const float* x, int64_t chunks, double* out) {
      for (int64_t c = 0; c < chunks; ++c) {
        double sum = 0;
        for (int64_t i = 0; i < kChunk; ++i) {
          const double v = x[c * kChunk + i];
          sum += v * v;
        }
        out[c] = sum;
      }
    };
    if (impl_->stage == ZeroStage::k0) {
      // Every rank holds the whole gradient: the same partials, computed locally.
      Tensor flat = Tensor::zeros({padded}, DType::kF32);
      for (auto& up : s.unit->params) {
        BRAID_CHECK(up.param.grad().defined(), kInvalidArgument,
                    "clip_grad_norm_: call finish_gradients first");
        flat.narrow(0, up.offset, up.numel).copy_(up.param.grad().reshape({up.numel}));
        grads.push_back(up.param.grad());
      }
      chunk_sums(flat.data<float>(), padded / kChunk, all_partials.data<double>());
    } else {
      Tensor g = s.opt_param.grad();
      BRAID_CHECK(g.defined(), kInvalidArgument, "clip_grad_norm_: call finish_gradients first");
      Tensor mine = Tensor::empty({s.shard.count / kChunk}, DType::kF64);
      chunk_sums(g.data<float>(), s.shard.count / kChunk, mine.data<double>());
      impl_->pg->all_gather_into(all_partials, mine);
      grads.push_back(g);
    }
    const double* p = all_partials.data<double>();
    for (int64_t c = 0; c < padded / kChunk; ++c) total += p[c];
  }
  const double norm = std::sqrt(total);
  if (!std::isfinite(norm)) return norm;
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  if (coef < 1.0) {
    for (auto& g : grads) {
      Tensor flat = g.view({g.numel()});
      axpby_(coef, flat, 0.0, flat);  // g = coef * g (torch's mul_ by the clamped coefficient)
    }
  }
  return norm;
}

NamedTensors ShardedModel::full_state_dict() {
  for (auto& s : impl_->states) impl_->gather(s);
  NamedTensors out;
  for (auto& [name, t] : model_->state_dict()) out.emplace_back(name, t.clone());
  for (auto& s : impl_->states) impl_->release(s);
  return out;
}

void ShardedModel::load_full_state_dict(const NamedTensors& state) {
  for (auto& s : impl_->states) impl_->gather(s);
  try {
    model_->load_state_dict(state);
  } catch (...) {
    for (auto& s : impl_->states) impl_->release(s);
    throw;
  }
  for (auto& s : impl_->states) {
    if (impl_->stage != ZeroStage::k0) {
      s.shard_param.copy_(s.flat.narrow(0, s.shard.offset, s.shard.count));
    }
    impl_->release(s);
  }
}

int64_t ShardedModel::held_bytes() const {
  int64_t n = 0;
  for (auto& s : impl_->states) {
    if (s.flat.defined()) n += s.flat.numel() * 4;
    if (s.shard_param.defined()) n += s.shard_param.numel() * 4;
    if (s.acc.defined()) n += s.acc.numel() * 4;
  }
  return n;
}

}  // namespace braid::shard
