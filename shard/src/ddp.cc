// Stage 0 (DDP) of ShardedModel, the DistributedDataParallel class of ddp.h: gradients reduced per
// bucket as soon as the backward has produced them (docs/sharding.md, "Stage 0: DDP buckets").
// Every Layer that registers a unit parameter (its owner; a tied parameter has several) gets a
// post_backward hook; when the last owner of a parameter has run its backward, the parameter is
// ready, and when every parameter of a bucket is ready, the bucket is launched, buckets strictly in
// index order so every rank submits the same collective sequence. The root's post_backward launches
// whatever is left (parameters whose owner is not a Layer, or that got no gradient).
//
// A launched bucket is packed flat in precision.reduce_dtype on the calling thread, then on the
// communication thread either
//   deterministic: all_to_all, and the W contributions to this rank's part folded in rank
//                  order (Note [Deterministic reduction]); finish_gradients all_gathers the
//                  parts, so every rank holds the whole gradient;
//   all_reduce:    all_reduce (sum) of the whole bucket, added to the bucket's accumulator.
#include <algorithm>
#include <utility>

#include "braid/core/error.h"
#include "braid/tensor/ops.h"
#include "ddp.h"

namespace braid::shard {

namespace {

constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;  // torch's _DEFAULT_FIRST_BUCKET_BYTES

}  // namespace

DistributedDataParallel::DistributedDataParallel(ShardedModel::Impl& core, nn::Layer& root,
                                                 std::vector<Unit>& units)
    : core_(core) {
  for (auto& u : units) {
    for (auto& up : u.params) {
      const DType dt = core_.options.precision.param_dtype_for(up.name);
      if (dt == DType::kF32) {
        params_.push_back(up.param);
        continue;
      }
      // The optimizer steps an f32 master; the layers compute with the 16-bit copy.
      nn::Parameter master(up.param.data().clone());
      masters_[up.param.id()] = master;
      params_.push_back(master);
      up.param.data() = up.param.data().to(dt);
    }
  }
  build_buckets(root, units);
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& [layer, h] : hooks_) layer->set_hooks({});
}

nn::Parameter DistributedDataParallel::target(const UnitParam& up) const {
  auto it = masters_.find(up.param.id());
  return it != masters_.end() ? it->second : up.param;
}

void DistributedDataParallel::build_buckets(nn::Layer& root, std::vector<Unit>& units) {
  const ShardingOptions& o = core_.options;
  BRAID_CHECK(o.ddp.bucket_cap_mb > 0, kInvalidArgument,
              "DistributedDataParallelKwargs::bucket_cap_mb must be > 0, got ",
              o.ddp.bucket_cap_mb);
  const DType reduce_dtype = o.precision.reduce_dtype;
  reduce_dtype_ = reduce_dtype;
  if (o.ddp.comm_hook != DDPCommunicationHookType::kNo) {
    const DType hook =
        o.ddp.comm_hook == DDPCommunicationHookType::kFp16 ? DType::kF16 : DType::kBF16;
    BRAID_CHECK(reduce_dtype == DType::kF32 || reduce_dtype == hook, kInvalidArgument,
                "ShardedModel: DistributedDataParallelKwargs::comm_hook asks for ",
                dtype_name(hook), " but precision.reduce_dtype is ", dtype_name(reduce_dtype),
                "; give one of them");
    reduce_dtype_ = hook;
  }

  // Reverse registration order (units in order, parameters in order, then reversed).
  std::vector<const UnitParam*> order;
  for (auto& u : units) {
    for (auto& up : u.params) order.push_back(&up);
  }
  std::reverse(order.begin(), order.end());
  const int64_t elem = static_cast<int64_t>(dtype_size(reduce_dtype_));
  const int64_t cap = static_cast<int64_t>(o.ddp.bucket_cap_mb * 1024.0 * 1024.0);
  const int w = core_.world();
  for (const UnitParam* up : order) {
    if (buckets_.empty()) buckets_.emplace_back();
    const int64_t limit = buckets_.size() == 1 ? std::min(cap, kFirstBucketBytes) : cap;
    if (buckets_.back().numel > 0 && (buckets_.back().numel + up->numel) * elem > limit) {
      buckets_.emplace_back();
    }
    Bucket& b = buckets_.back();
    b.params.push_back({up, b.numel});
    b.numel += up->numel;
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    b.padded = padded_numel(b.numel, w);
    b.shard = shard_info(b.padded, w, core_.comm->rank());
    for (auto& e : b.params) uses_[e.param->param.id()].bucket = i;
  }

  // Owners: the modules that register each unit parameter directly (a tied parameter has
  // several). Only a Layer runs hooks; a parameter with a non-Layer owner waits for the root.
  std::map<std::string, nn::Module*> modules;
  for (auto& [path, m] : root.named_modules()) modules[path] = m;
  std::map<nn::Layer*, bool> hooked;
  for (auto& [name, p] : root.named_parameters(/*remove_duplicate=*/false)) {
    auto it = uses_.find(p.id());
    if (it == uses_.end()) continue;  // an ignored module's parameter
    const size_t dot = name.rfind('.');
    nn::Module* owner = modules.at(dot == std::string::npos ? std::string() : name.substr(0, dot));
    auto* layer = dynamic_cast<nn::Layer*>(owner);
    if (layer == nullptr) continue;
    ++it->second.owners;
    hooked[layer] = true;
  }
  DistributedDataParallel* self = this;
  bool root_hooked = false;
  for (auto& [layer, unused] : hooked) {
    nn::ModuleHooks h;
    h.post_backward = [self](nn::Module& m) { self->owner_done(m); };
    if (layer == &root) {
      root_hooked = true;
      h.pre_forward = [self](nn::Module& m) { self->broadcast_buffers(m); };
      h.pre_backward = [self](nn::Module&) { self->begin_backward(); };
      h.post_backward = [self](nn::Module& m) {
        self->owner_done(m);
        self->end_backward();
      };
    }
    hooks_.emplace_back(layer, std::move(h));
  }
  if (!root_hooked) {
    nn::ModuleHooks h;
    h.pre_forward = [self](nn::Module& m) { self->broadcast_buffers(m); };
    h.pre_backward = [self](nn::Module&) { self->begin_backward(); };
    h.post_backward = [self](nn::Module&) { self->end_backward(); };
    hooks_.emplace_back(&root, std::move(h));
  }
  for (auto& [layer, h] : hooks_) layer->set_hooks(h);
}

void DistributedDataParallel::broadcast_buffers(nn::Module& root) {
  if (!core_.options.ddp.broadcast_buffers || core_.world() == 1) return;
  std::vector<Tensor> bufs;
  for (auto& [name, t] : root.named_buffers()) {
    if (t.defined() && t.numel() > 0 && t.device() == core_.device) bufs.push_back(t);
  }
  if (bufs.empty()) return;
  auto group = core_.comm;
  // On the queue: reductions of the previous micro-batch may still be running on this group.
  core_.wait(core_.submit("broadcast_buffers", [group, bufs]() mutable {
    for (auto& t : bufs) {
      if (t.is_contiguous()) {
        group->broadcast(t, 0);
      } else {
        Tensor c = t.contiguous();
        group->broadcast(c, 0);
        t.copy_(c);
      }
    }
  }));
}

void DistributedDataParallel::begin_backward() {
  for (auto& [id, u] : uses_) u.remaining = u.owners;
  for (auto& b : buckets_) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
  }
  next_bucket_ = 0;
}

void DistributedDataParallel::owner_done(nn::Module& owner) {
  if (!core_.sync) return;
  // The owner's direct parameters: those whose name has no further dot.
  for (auto& [name, p] : owner.named_parameters(/*remove_duplicate=*/false)) {
    if (name.find('.') != std::string::npos) continue;
    auto it = uses_.find(p.id());
    if (it == uses_.end() || it->second.remaining <= 0) continue;
    if (--it->second.remaining == 0) --buckets_[it->second.bucket].pending;
  }
  launch_buckets(/*flush=*/false);
}

void DistributedDataParallel::end_backward() {
  if (core_.sync) launch_buckets(/*flush=*/true);
}

void DistributedDataParallel::launch_buckets(bool flush) {
  while (next_bucket_ < buckets_.size() && (flush || buckets_[next_bucket_].pending == 0)) {
    reduce_bucket(buckets_[next_bucket_]);
    buckets_[next_bucket_].launched = true;
    ++next_bucket_;
  }
}

void DistributedDataParallel::reduce_bucket(Bucket& b) {
  Tensor g = Tensor::zeros({b.padded}, reduce_dtype_, core_.device);
  std::string unused;
  for (auto& e : b.params) {
    if (!e.param->param.grad().defined())
      unused += (unused.empty() ? "'" : ", '") + e.param->name + "'";
  }
  BRAID_CHECK(unused.empty() || core_.options.ddp.find_unused_parameters, kInvalidArgument,
              "ShardedModel (DDP): parameters got no gradient in this backward: ", unused,
              "; if the model leaves parameters unused, set "
              "DistributedDataParallelKwargs::find_unused_parameters = true");
  for (auto& e : b.params) {
    Tensor& grad = e.param->param.grad();
    if (grad.defined()) {
      g.narrow(0, e.offset, e.param->numel).copy_(grad.reshape({e.param->numel}));  // converts
      grad = Tensor();
    }
  }
  auto group = core_.comm;
  Bucket* bucket = &b;
  const bool ordered = core_.spec.ordered_reduction;
  core_.submit(std::string(ordered ? "all_to_all" : "all_reduce") + " of DDP bucket",
               [group, g, bucket, ordered]() mutable {
                 if (ordered) {
                   Tensor blocks = Tensor::empty({bucket->padded}, g.dtype(), g.device());
                   group->all_to_all(blocks, g);
                   fold_blocks(blocks, group->size(), bucket->shard.count, bucket->acc);
                 } else {
                   group->all_reduce(g);
                   if (!bucket->acc.defined()) {
                     bucket->acc = g;
                   } else {
                     axpby_(1.0, g, 1.0, bucket->acc);
                   }
                 }
               });
}

void DistributedDataParallel::finish(double scale) {
  const bool view = core_.options.ddp.gradient_as_bucket_view;
  for (auto& b : buckets_) {
    BRAID_CHECK(b.acc.defined(), kInvalidArgument,
                "ShardedModel::finish_gradients: no gradient was reduced (parameter '",
                b.params.front().param->name,
                "'): run at least one forward / backward with gradient sync on first");
    Tensor g = braid::scale(b.acc.dtype() == DType::kF32 ? b.acc : b.acc.to(DType::kF32), scale);
    b.acc = Tensor();
    Tensor full = g;
    if (core_.spec.ordered_reduction) {
      full = Tensor::empty({b.padded}, DType::kF32, core_.device);
      core_.comm->all_gather_into(full, g);
    }
    for (auto& e : b.params) {
      const UnitParam& up = *e.param;
      Tensor v = full.narrow(0, e.offset, up.numel).view(up.shape);
      target(up).grad() = view ? v : v.clone();
    }
  }
}

void DistributedDataParallel::after_step() {
  for (auto& b : buckets_) {
    for (auto& e : b.params) {
      auto it = masters_.find(e.param->param.id());
      if (it != masters_.end()) e.param->param.data().copy_(it->second.data());  // rounds
    }
  }
}

Tensor DistributedDataParallel::flat_gradient(const Unit& unit, std::vector<Tensor>& grads) const {
  // Every rank holds the whole gradient: the same partials, computed locally.
  Tensor flat = Tensor::zeros({unit.padded}, DType::kF32, core_.device);
  for (auto& up : unit.params) {
    const nn::Parameter t = target(up);
    BRAID_CHECK(t.grad().defined(), kInvalidArgument,
                "clip_grad_norm_: call finish_gradients first");
    flat.narrow(0, up.offset, up.numel).copy_(t.grad().reshape({up.numel}));
    grads.push_back(t.grad());
  }
  return flat;
}

// Parameters with a master: the master's f32 value (the 16-bit copy lost bits). Names as
// state_dict(): every name of a tied parameter, then buffers.
NamedTensors DistributedDataParallel::full_state_dict(nn::Layer& model) const {
  std::map<std::string, Tensor> master_values;
  for (auto& [name, p] : model.named_parameters(/*remove_duplicate=*/false)) {
    auto it = masters_.find(p.id());
    if (it != masters_.end()) master_values[name] = it->second.data();
  }
  NamedTensors out;
  for (auto& [name, t] : model.state_dict()) {
    auto it = master_values.find(name);
    out.emplace_back(name, (it != master_values.end() ? it->second : t).clone());
  }
  return out;
}

void DistributedDataParallel::load_full_state_dict(nn::Layer& model, const NamedTensors& state) {
  model.load_state_dict(state);
  if (masters_.empty()) return;
  std::map<std::string, const Tensor*> given;
  for (auto& [name, t] : state) given[name] = &t;
  for (auto& [name, p] : model.named_parameters(/*remove_duplicate=*/false)) {
    auto m = masters_.find(p.id());
    auto g = given.find(name);
    if (m == masters_.end() || g == given.end()) continue;
    m->second.data().copy_(*g->second);  // the f32 value, whole
    p.data().copy_(m->second.data());    // and its 16-bit copy
  }
}

int64_t DistributedDataParallel::held_bytes() const {
  int64_t n = 0;
  for (auto& b : buckets_) {
    if (b.acc.defined()) n += static_cast<int64_t>(b.acc.nbytes());
  }
  for (auto& [id, m] : masters_) n += static_cast<int64_t>(m.data().nbytes());
  return n;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (const auto& e : b.params) out.back().push_back(e.param->name);
  }
  return out;
}

std::vector<std::vector<std::string>> ShardedModel::bucket_parameter_names() const {
  return impl_->ddp ? impl_->ddp->bucket_parameter_names()
                    : std::vector<std::vector<std::string>>{};
}

}  // namespace braid::shard
