// ShardedModel: ZeRO stages 0-3 over units, with the deterministic reduction of
// Note [Deterministic reduction] (fsdp.h). The units' Layer hooks drive everything:
//   pre_forward / pre_backward   stage 3: all_gather the unit's shards into a flat buffer and
//                                point its parameters at views of it; queue the next unit's
//                                gather (prefetch)
//   post_forward                 stage 3 with reshard_after_forward: free that buffer
//   post_backward                pack the unit's micro-batch gradient flat, all_to_all it so
//                                each rank gets the W contributions to its shard, fold them in
//                                rank order into the shard's f32 accumulator; stage 3: free
// Collectives run in the model's order, on the same sequence on every rank: on the
// communication thread (CommQueue) with overlap, else on the calling thread.
#include "braid/shard/fsdp.h"

#include "braid/shard/device_mesh.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/thread_pool.h"
#include "braid/shard/tensor_parallel.h"
#include "braid/tensor/ops.h"
#include "ddp.h"
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

std::shared_ptr<CommQueue::Op> ShardedModel::Impl::submit(std::string what,
                                                          std::function<void()> fn) {
  if (queue) return queue->submit(std::move(what), std::move(fn));
  fn();
  return nullptr;
}

void ShardedModel::Impl::wait(const std::shared_ptr<CommQueue::Op>& op) {
  if (queue && op) queue->wait(op);
}

void ShardedModel::Impl::drain() {
  if (queue) queue->drain();
}

// Submits the unit's all_gather into a new flat buffer unless one is pending or done.
void ShardedModel::Impl::issue_gather(UnitState& s) {
  if (!spec.shard_parameters || s.gathered || s.pending_flat.defined()) return;
  const DType dt = s.dtypes.param;
  Tensor flat = Tensor::empty({s.unit->padded}, dt, device);
  Tensor shard = master_shard(s);
  if (param_store && !s.shard_param.defined()) param_store->release(shard_key(s));  // ours now
  auto group = comm;
  s.pending_flat = flat;
  s.gather_op =
      submit("all_gather of unit '" + s.unit->name + "'", [group, flat, shard, dt]() mutable {
        Tensor low = shard.dtype() == dt ? shard : shard.to(dt);
        group->all_gather_into(flat, low);
      });
}

// Gathering is idempotent and release is final: a unit's forward can run twice before its
// backward (activation checkpointing recomputes it), and the backward's release must still
// free it, or the next step would see parameters from before the optimizer step.
void ShardedModel::Impl::gather(UnitState& s) {
  if (!spec.shard_parameters || s.gathered) return;
  issue_gather(s);
  wait(s.gather_op);
  s.gather_op = nullptr;
  s.flat = std::exchange(s.pending_flat, Tensor());
  s.gathered = true;
  point_params_at(s, s.flat);
}

void ShardedModel::Impl::release(UnitState& s) {
  if (!spec.shard_parameters || !s.gathered) return;
  s.gathered = false;
  release_params(s);
}

// limit_all_gathers: one unit ahead of the one computing.
void ShardedModel::Impl::prefetch_after(size_t unit, const std::vector<size_t>& order) {
  if (!queue || !orders_done) return;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    if (order[i] == unit) return issue_gather(states[order[i + 1]]);
  }
}

std::string ShardedModel::Impl::shard_key(const UnitState& s) const {
  return "unit-" + std::to_string(s.index);
}

Tensor ShardedModel::Impl::master_shard(UnitState& s) {
  if (!param_store || s.shard_param.defined()) return s.shard_param;
  return param_store->get(shard_key(s));
}

void ShardedModel::Impl::unpark(UnitState& s) {
  if (!param_store || s.shard_param.defined()) return;
  s.shard_param = param_store->get(shard_key(s));
  param_store->release(shard_key(s));
  s.opt_param.data() = s.shard_param;
}

void ShardedModel::Impl::park(UnitState& s, bool changed) {
  if (!param_store || !s.shard_param.defined()) return;
  if (changed) param_store->put(shard_key(s), s.shard_param);  // the store holds it until written
  s.shard_param = Tensor();
  s.opt_param.data() = Tensor::empty({0}, DType::kF32, device);  // placeholder (fsdp.h)
}

// Reads the master shard of the unit after `unit` in `order` ahead of its gather.
void ShardedModel::Impl::prefetch_shard_after(size_t unit, const std::vector<size_t>& order) {
  if (!param_store) return;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    if (order[i] != unit) continue;
    // With overlap the next unit's gather is issued now; read the one after it.
    const size_t ahead = queue ? i + 2 : i + 1;
    if (ahead < order.size()) param_store->prefetch(shard_key(states[order[ahead]]));
    return;
  }
}

// Stages 1-2: the unit's full parameters from every rank's f32 shard, in its param dtype.
void ShardedModel::Impl::gather_into_flat(UnitState& s) {
  const DType dt = s.dtypes.param;
  comm->all_gather_into(s.flat, s.shard_param.dtype() == dt ? s.shard_param : s.shard_param.to(dt));
}

// A prefetched gather holds parameters from before the optimizer step: wait for it and drop it.
void ShardedModel::Impl::drop_prefetches() {
  for (auto& s : states) {
    if (!s.pending_flat.defined()) continue;
    wait(s.gather_op);
    s.gather_op = nullptr;
    s.pending_flat = Tensor();
  }
}

// Note [Deterministic reduction]: this micro-batch's gradient of the unit, flat, through an
// all_to_all; block r of the result is rank r's contribution to this rank's shard, and the
// blocks are folded in rank order (acc = acc + g, the same operation accumulate_grad uses).
// Packing happens here; the collective and the fold run on the communication thread, which
// alone touches s.acc until drain().
void ShardedModel::Impl::reduce(UnitState& s) {
  if (s.unit->padded == 0) return;  // a root unit without parameters of its own
  Tensor g = Tensor::zeros({s.unit->padded}, s.dtypes.reduce, device);
  for (auto& up : s.unit->params) {
    Tensor& grad = up.param.grad();
    if (grad.defined()) {
      g.narrow(0, up.offset, up.numel).copy_(grad.reshape({up.numel}));  // converts
      grad = Tensor();
    }
  }
  auto group = comm;
  // HSDP, ordered: every replica's S blocks for this shard, gathered, are the W contributions
  // in world rank order (replica-major: rank = replica * S + shard index), folded in order.
  auto across = spec.ordered_reduction ? replicas : nullptr;
  UnitState* state = &s;
  submit("all_to_all of unit '" + s.unit->name + "'", [group, across, g, state]() mutable {
    Tensor blocks = Tensor::empty({state->unit->padded}, g.dtype(), g.device());
    group->all_to_all(blocks, g);
    if (across) {
      Tensor all_blocks =
          Tensor::empty({state->unit->padded * across->size()}, g.dtype(), g.device());
      across->all_gather_into(all_blocks, blocks);
      blocks = all_blocks;
    }
    fold_blocks(blocks, static_cast<int>(blocks.numel() / state->shard.count), state->shard.count,
                state->acc);
  });
}

void fold_blocks(const Tensor& blocks, int world, int64_t count, Tensor& acc) {
  for (int r = 0; r < world; ++r) {
    const Tensor block = blocks.narrow(0, r * count, count);
    if (!acc.defined()) {
      acc = block.clone();
    } else {
      axpby_(1.0, block, 1.0, acc);
    }
  }
}

// ShardingOptions::overlap's automatic choice: a communication thread pays off only when a
// core is free for it.
bool resolve_overlap(const ShardingOptions& o) {
  if (o.overlap.has_value()) return *o.overlap;
  const int64_t local_ranks = get_env_int("LOCAL_WORLD_SIZE", 1);
  const int64_t cpus = static_cast<int64_t>(std::thread::hardware_concurrency());
  return cpus > local_ranks * get_num_threads();
}

ShardedModel::ShardedModel(std::shared_ptr<nn::Layer> model, std::shared_ptr<ProcessGroup> pg,
                           ShardingOptions options)
    : model_(std::move(model)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  BRAID_CHECK(model_ != nullptr && pg != nullptr, kInvalidArgument,
              "ShardedModel: model and process group must be given");
  impl_->pg = std::move(pg);
  impl_->options = options_;
  const int world = impl_->pg->size(), rank = impl_->pg->rank();
  spec_ = resolve(options_, world);  // every check of the options, and what they mean
  impl_->spec = spec_;
  std::vector<int> all(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) all[static_cast<size_t>(r)] = r;
  impl_->all = impl_->pg->new_group(all);
  impl_->comm = impl_->all;
  if (spec_.hybrid()) {
    // HSDP: the (dp_replicate, dp_shard) mesh over the group, as torch's HSDP device mesh; rank
    // g S + i shards with the ranks of its row g and replicates with those of its column i.
    DeviceMesh mesh(impl_->pg, {spec_.dp_replicate, spec_.dp_shard}, {"dp_replicate", "dp_shard"});
    impl_->comm = mesh.group("dp_shard");
    impl_->replicas = mesh.group("dp_replicate");
  }
  const int shard_world = impl_->comm->size(), shard_rank = impl_->comm->rank();
  units_ = make_units(*model_, options_.wrap, shard_world);
  if (options_.activation_checkpointing) {
    for (auto& u : units_) {
      if (u.layer != model_.get()) u.layer->set_checkpointing(true);
    }
  }

  // A measurement run (estimate_memory, docs/memory.md): every parameter on meta, no param_init
  // to fill them, over a group of the meta backend. The whole step then runs on meta, each
  // buffer allocated as on cpu and counted by the meta allocator.
  bool all_meta = !options_.param_init;
  size_t num_params = 0;
  for (auto& u : units_) {
    for (auto& up : u.params) all_meta = all_meta && up.param.data().device().is_meta();
    num_params += u.params.size();
  }
  if (all_meta && num_params > 0) {
    BRAID_CHECK(impl_->pg->backend().name() == "meta", kInvalidArgument,
                "ShardedModel: every parameter is on the meta device and ShardingOptions::"
                "param_init is not set: that is a measurement run (shard::estimate_memory), "
                "whose process group must use the 'meta' backend, got '",
                impl_->pg->backend().name(),
                "'; to train a model built on meta, give param_init (or load a checkpoint into "
                "a model built with zeros)");
    impl_->device = kMeta;
  }
  const bool measuring = impl_->device.is_meta();
  for (auto& u : units_) {
    for (auto& up : u.params) {
      const Tensor& d = up.param.data();
      BRAID_CHECK(
          d.defined() && d.dtype() == DType::kF32 &&
              (d.device() == kCPU || (d.device().is_meta() && (options_.param_init || measuring))),
          kInvalidArgument, "ShardedModel: parameter '", up.name,
          "' must be a defined f32 CPU tensor, or on the meta device with "
          "ShardingOptions::param_init given; got ",
          d.defined() ? std::string(dtype_name(d.dtype())) + " on " + d.device().str()
                      : std::string("undefined"));
      BRAID_CHECK(up.param.requires_grad() || !spec_.shard_optimizer_state, kInvalidArgument,
                  "ShardedModel: parameter '", up.name,
                  "' does not require grad; frozen parameters inside a sharded unit are not "
                  "supported (put their module in WrapPolicy::ignored_modules)");
      if (d.device().is_meta()) {
        // Materialized below from param_init, the same values on every rank: no broadcast.
        // Stage 0 needs the whole parameter; stages 1-3 only this rank's shard (stage 3 never
        // holds the whole model). A measurement run keeps them on meta.
        if (!spec_.shard_optimizer_state && !measuring) {
          Tensor t = Tensor::empty(up.shape, DType::kF32);
          options_.param_init(up.name, 0, up.numel, t.data<float>());
          up.param.data() = t;
        }
        continue;
      }
      if (!d.is_contiguous()) up.param.data() = d.contiguous();
      if (options_.sync_module_states) impl_->all->broadcast(up.param.data(), 0);
    }
  }

  impl_->states.resize(units_.size());
  // Every shard first, then the parameters are repointed or released: param_init may look at
  // the whole model (shapes), which must still be intact.
  for (size_t i = 0; i < units_.size() && spec_.shard_optimizer_state; ++i) {
    UnitState& s = impl_->states[i];
    Unit& u = units_[i];
    s.unit = &u;
    s.index = i;
    s.shard = u.shard(shard_rank, shard_world);
    s.dtypes = unit_dtypes(u, options_.precision);
    // This rank's f32 shard: from the parameters, or from param_init for meta ones.
    s.shard_param = Tensor::zeros({s.shard.count}, DType::kF32, impl_->device);
    for (auto& up : u.params) {
      if (measuring) break;  // meta: no values to copy
      const int64_t lo = std::max(up.offset, s.shard.offset);
      const int64_t hi = std::min(up.offset + up.numel, s.shard.end());
      const bool meta = up.param.data().device().is_meta();
      if (hi <= lo) continue;
      float* dst = s.shard_param.data<float>() + (lo - s.shard.offset);
      if (meta) {
        options_.param_init(up.name, lo - up.offset, hi - lo, dst);
      } else {
        s.shard_param.narrow(0, lo - s.shard.offset, hi - lo)
            .copy_(up.param.data().reshape({up.numel}).narrow(0, lo - up.offset, hi - lo));
      }
    }
  }
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitState& s = impl_->states[i];
    Unit& u = units_[i];
    s.unit = &u;
    s.shard = u.shard(shard_rank, shard_world);
    if (!spec_.shard_optimizer_state) continue;  // stage 0: DistributedDataParallel, below
    s.opt_param = nn::Parameter(s.shard_param);
    if (spec_.shard_parameters) {
      release_params(s);
    } else {
      s.flat = Tensor::empty({u.padded}, s.dtypes.param, impl_->device);
      impl_->gather_into_flat(s);  // stages 1-2: the whole unit from every rank's shard
      point_params_at(s, s.flat);
    }
    Impl* impl = impl_.get();
    const size_t index = i, root = units_.size() - 1;
    nn::ModuleHooks hooks;
    hooks.pre_forward = [impl, &s, index](nn::Module&) {
      if (!impl->orders_done && !impl->in_backward) impl->forward_order.push_back(index);
      impl->gather(s);
      if (impl->spec.forward_prefetch && !impl->in_backward) {
        impl->prefetch_after(index, impl->forward_order);
      }
      if (!impl->in_backward && impl->orders_done) {
        impl->prefetch_shard_after(index, impl->forward_order);
      }
    };
    hooks.post_forward = [impl, &s](nn::Module&) {
      if (impl->spec.reshard_after_forward) impl->release(s);
    };
    hooks.pre_backward = [impl, &s, index](nn::Module&) {
      impl->in_backward = true;
      if (!impl->orders_done) impl->backward_order.push_back(index);
      impl->gather(s);
      if (impl->spec.backward_prefetch) impl->prefetch_after(index, impl->backward_order);
      if (impl->orders_done) impl->prefetch_shard_after(index, impl->backward_order);
    };
    hooks.post_backward = [impl, &s, index, root](nn::Module&) {
      if (impl->sync) impl->reduce(s);
      impl->release(s);
      if (index == root) {  // the root's backward ends the pass
        impl->in_backward = false;
        impl->orders_done = true;
      }
    };
    u.layer->set_hooks(std::move(hooks));
  }
  // Stage 0: masters, buckets and hooks on the parameters' owners (ddp.h).
  if (!spec_.shard_optimizer_state) {
    impl_->ddp = std::make_unique<DistributedDataParallel>(*impl_, *model_, units_);
  }
  if (spec_.offload_param) {
    SwapStoreOptions so;
    so.folder = options_.offload_param.nvme_path;
    so.tag = "params-rank" + std::to_string(impl_->pg->global_ranks()[static_cast<size_t>(rank)]);
    so.option = "offload_param_nvme_path";
    so.timeout = options_.offload_param.io_timeout;
    impl_->param_store = std::make_unique<SwapStore>(so);
    for (auto& s : impl_->states) impl_->park(s, /*changed=*/true);
  }
  if (spec_.overlap) impl_->queue = std::make_unique<CommQueue>(impl_->comm->timeout());
}

ShardedModel::~ShardedModel() {
  for (auto& u : units_) u.layer->set_hooks({});
  impl_->queue.reset();  // finishes what was submitted, then stops the thread
  impl_->ddp.reset();    // its hooks, after the reductions that write its buckets
}

int ShardedModel::rank() const {
  return impl_->pg->rank();
}
int ShardedModel::world_size() const {
  return impl_->pg->size();
}
std::shared_ptr<ProcessGroup> ShardedModel::shard_group() const {
  return impl_->comm;
}
std::shared_ptr<ProcessGroup> ShardedModel::replicate_group() const {
  return impl_->replicas;
}

Tensor ShardedModel::forward(const Tensor& x) {
  return model_->forward(x);
}

Tensor ShardedModel::backward(const Tensor& grad_output) {
  return model_->backward(grad_output);
}

void ShardedModel::set_gradient_sync(bool sync) {
  impl_->sync = sync;
}

bool ShardedModel::gradient_sync() const {
  return impl_->sync;
}

void ShardedModel::finish_gradients(double scale) {
  impl_->drain();
  if (impl_->ddp) {
    impl_->ddp->finish(scale);
    return;
  }
  for (auto& s : impl_->states) {
    if (s.unit->padded == 0) {  // nothing to reduce: an empty gradient
      s.opt_param.grad() = Tensor::zeros({0}, DType::kF32, impl_->device);
      continue;
    }
    BRAID_CHECK(s.acc.defined(), kInvalidArgument, "ShardedModel::finish_gradients: unit '",
                s.unit->name, "' has no gradient: run at least one forward / backward first");
    // HSDP without the ordered reduction: each replica folded its own ranks; add the replicas.
    if (!spec_.ordered_reduction && impl_->replicas) impl_->replicas->all_reduce(s.acc);
    Tensor g = braid::scale(s.acc.dtype() == DType::kF32 ? s.acc : s.acc.to(DType::kF32), scale);
    s.acc = Tensor();
    s.opt_param.grad() = g;
  }
  // offload_param: the master shards resident for the optimizer step, read in parallel.
  if (impl_->param_store) {
    for (auto& s : impl_->states) impl_->param_store->prefetch(impl_->shard_key(s));
    for (auto& s : impl_->states) impl_->unpark(s);
  }
}

std::vector<nn::Parameter> ShardedModel::optimizer_parameters() const {
  if (impl_->ddp) return impl_->ddp->parameters();
  std::vector<nn::Parameter> out;
  for (auto& s : impl_->states) out.push_back(s.opt_param);
  return out;
}

void ShardedModel::after_step() {
  // Stage 3: a unit still gathered (a forward without backward, e.g. evaluation with
  // reshard_after_forward off) holds parameters from before the step.
  impl_->drain();
  impl_->drop_prefetches();
  for (auto& s : impl_->states) impl_->release(s);
  for (auto& s : impl_->states) impl_->park(s, /*changed=*/true);  // offload_param: written back
  if (impl_->ddp) return impl_->ddp->after_step();  // stage 0: masters into 16-bit parameters
  if (spec_.shard_parameters) return;
  for (auto& s : impl_->states) impl_->gather_into_flat(s);  // stages 1-2
}

double ShardedModel::clip_grad_norm_(double max_norm) {
  impl_->drain();
  BRAID_CHECK(max_norm >= 0, kInvalidArgument, "clip_grad_norm_: max_norm must be >= 0, got ",
              max_norm);
  // Tensor parallelism: split gradients are summed over tp as well (tensor_parallel_plan.cc).
  if (options_.tensor_parallel)
    return shard::clip_grad_norm_(*this, *options_.tensor_parallel, max_norm);
  // Sum of squares per kChunk elements of each unit's flat gradient, in f64, then the chunks
  // in order: unit by unit, chunk by chunk. Every rank ends with every chunk's partial.
  double total = 0;
  std::vector<Tensor> grads;  // the gradient tensors to scale
  for (auto& s : impl_->states) {
    const int64_t padded = s.unit->padded;
    Tensor all_partials = Tensor::empty({padded / kChunk}, DType::kF64, impl_->device);
    // A measurement run (meta) allocates what clipping allocates and computes nothing.
    const bool meta = impl_->device.is_meta();
    const auto chunk_sums = [meta](const float* x, int64_t chunks, double* out) {
      if (meta) return;
      for (int64_t c = 0; c < chunks; ++c) {
        double sum = 0;
        for (int64_t i = 0; i < kChunk; ++i) {
          const double v = x[c * kChunk + i];
          sum += v * v;
        }
        out[c] = sum;
      }
    };
    if (impl_->ddp) {
      // Every rank holds the whole gradient: the same partials, computed locally.
      const Tensor flat = impl_->ddp->flat_gradient(*s.unit, grads);
      chunk_sums(flat.data<float>(), padded / kChunk, all_partials.data<double>());
    } else {
      Tensor g = s.opt_param.grad();
      BRAID_CHECK(g.defined(), kInvalidArgument, "clip_grad_norm_: call finish_gradients first");
      Tensor mine = Tensor::empty({s.shard.count / kChunk}, DType::kF64, impl_->device);
      chunk_sums(g.data<float>(), s.shard.count / kChunk, mine.data<double>());
      impl_->comm->all_gather_into(all_partials, mine);
      grads.push_back(g);
    }
    const double* p = all_partials.data<double>();
    for (int64_t c = 0; c < padded / kChunk && !meta; ++c) total += p[c];
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

// Stages 1-3 read the f32 master shards (param_dtype copies would lose bits); stage 0 the
// model's own parameters. Names as state_dict(): every name of a tied parameter, then buffers.
NamedTensors ShardedModel::full_state_dict() {
  impl_->drain();
  if (impl_->ddp) return impl_->ddp->full_state_dict(*model_);
  std::map<const void*, Tensor> whole;  // parameter handle -> full f32 value
  for (auto& s : impl_->states) {
    Tensor full = Tensor::empty({s.unit->padded}, DType::kF32);
    impl_->comm->all_gather_into(full, impl_->master_shard(s));
    if (impl_->param_store && !s.shard_param.defined()) {
      impl_->param_store->release(impl_->shard_key(s));
    }
    for (auto& up : s.unit->params) {
      whole[up.param.id()] = full.narrow(0, up.offset, up.numel).view(up.shape).clone();
    }
  }
  NamedTensors out;
  std::set<std::string> param_names;
  for (auto& [name, p] : model_->named_parameters(/*remove_duplicate=*/false)) {
    param_names.insert(name);
    auto it = whole.find(p.id());
    out.emplace_back(name, it != whole.end() ? it->second : p.data().clone());  // ignored modules
  }
  for (auto& [name, t] : model_->state_dict()) {
    if (!param_names.count(name)) out.emplace_back(name, t.clone());
  }
  return out;
}

void ShardedModel::load_full_state_dict(const NamedTensors& state) {
  impl_->drain();
  impl_->drop_prefetches();
  if (impl_->ddp) return impl_->ddp->load_full_state_dict(*model_, state);
  std::map<std::string, const Tensor*> given;
  for (auto& [name, t] : state) given[name] = &t;
  // Every name of each unit parameter (tied ones have several); one of them must be given.
  std::map<const void*, std::vector<std::string>> names_of;
  for (auto& [name, p] : model_->named_parameters(/*remove_duplicate=*/false)) {
    names_of[p.id()].push_back(name);
  }
  std::set<std::string> used;
  std::vector<std::pair<UnitState*, std::pair<const UnitParam*, const Tensor*>>> plan;
  for (auto& s : impl_->states) {
    for (auto& up : s.unit->params) {
      const Tensor* src = nullptr;
      for (auto& n : names_of[up.param.id()]) {
        auto it = given.find(n);
        if (it != given.end()) {
          src = it->second;
          used.insert(n);
        }
      }
      BRAID_CHECK(src != nullptr, kInvalidArgument, "ShardedModel::load_full_state_dict: missing '",
                  up.name, "'");
      BRAID_CHECK(src->shape() == up.shape, kInvalidArgument,
                  "ShardedModel::load_full_state_dict: '", up.name, "' has shape ",
                  shape_str(src->shape()), ", the model expects ", shape_str(up.shape));
      plan.push_back({&s, {&up, src}});
    }
  }
  // The rest (parameters of ignored modules, buffers) goes through the model; it must know
  // every remaining name.
  NamedTensors rest;
  for (auto& [name, t] : state) {
    if (!used.count(name)) rest.emplace_back(name, t);
  }
  const nn::LoadResult r = model_->load_state_dict(rest, /*strict=*/false);
  BRAID_CHECK(r.unexpected_keys.empty(), kInvalidArgument,
              "ShardedModel::load_full_state_dict: unexpected key '",
              r.unexpected_keys.empty() ? std::string() : r.unexpected_keys.front(), "'");
  for (auto& s : impl_->states) impl_->unpark(s);
  for (auto& [sp, item] : plan) {
    const UnitState& s = *sp;
    const UnitParam& up = *item.first;
    const int64_t lo = std::max(up.offset, s.shard.offset);
    const int64_t hi = std::min(up.offset + up.numel, s.shard.end());
    if (hi <= lo) continue;
    s.shard_param.narrow(0, lo - s.shard.offset, hi - lo)
        .copy_(item.second->reshape({up.numel}).narrow(0, lo - up.offset, hi - lo));
  }
  if (!spec_.shard_parameters) {
    for (auto& s : impl_->states) impl_->gather_into_flat(s);
  }
  for (auto& s : impl_->states) impl_->park(s, /*changed=*/true);
}

int64_t ShardedModel::held_bytes() const {
  int64_t n = 0;
  for (auto& s : impl_->states) {
    if (s.flat.defined()) n += static_cast<int64_t>(s.flat.nbytes());
    if (s.shard_param.defined()) n += static_cast<int64_t>(s.shard_param.nbytes());
    if (s.acc.defined()) n += static_cast<int64_t>(s.acc.nbytes());
  }
  if (impl_->ddp) n += impl_->ddp->held_bytes();
  return n;
}

}  // namespace braid::shard
