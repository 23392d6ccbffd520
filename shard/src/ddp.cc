// Stage 0 (DDP) of ShardedModel: gradients reduced per bucket as soon as the backward has
// produced them (docs/sharding.md, "Stage 0: DDP buckets"). Every Layer that registers a unit
// parameter (its owner; a tied parameter has several) gets a post_backward hook; when the last
// owner of a parameter has run its backward, the parameter is ready, and when every parameter
// of a bucket is ready, the bucket is launched, buckets strictly in index order so every rank
// submits the same collective sequence. The root's post_backward launches whatever is left
// (parameters whose owner is not a Layer, or that got no gradient).
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
#include "fsdp_impl.h"

namespace braid::shard {

namespace {

constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;  // torch's _DEFAULT_FIRST_BUCKET_BYTES

}  // namespace

nn::Parameter ShardedModel::Impl::stage0_target(const UnitParam& up) const {
  auto it = masters.find(up.param.id());
  return it != masters.end() ? it->second : up.param;
}

void ShardedModel::Impl::build_buckets(nn::Layer& root, std::vector<Unit>& units) {
  const ShardingOptions& o = options;
  BRAID_CHECK(o.ddp.bucket_cap_mb > 0, kInvalidArgument,
              "DistributedDataParallelKwargs::bucket_cap_mb must be > 0, got ",
              o.ddp.bucket_cap_mb);
  const DType reduce_dtype = o.precision.reduce_dtype;
  stage0_reduce_dtype = reduce_dtype;
  if (o.ddp.comm_hook != DDPCommunicationHookType::kNo) {
    const DType hook =
        o.ddp.comm_hook == DDPCommunicationHookType::kFp16 ? DType::kF16 : DType::kBF16;
    BRAID_CHECK(reduce_dtype == DType::kF32 || reduce_dtype == hook, kInvalidArgument,
                "ShardedModel: DistributedDataParallelKwargs::comm_hook asks for ",
                dtype_name(hook), " but precision.reduce_dtype is ", dtype_name(reduce_dtype),
                "; give one of them");
    stage0_reduce_dtype = hook;
  }

  // Reverse registration order (units in order, parameters in order, then reversed).
  std::vector<const UnitParam*> order;
  for (auto& u : units) {
    for (auto& up : u.params) order.push_back(&up);
  }
  std::reverse(order.begin(), order.end());
  const int64_t elem = static_cast<int64_t>(dtype_size(stage0_reduce_dtype));
  const int64_t cap = static_cast<int64_t>(o.ddp.bucket_cap_mb * 1024.0 * 1024.0);
  const int w = world();
  for (const UnitParam* up : order) {
    if (buckets.empty()) buckets.emplace_back();
    const int64_t limit = buckets.size() == 1 ? std::min(cap, kFirstBucketBytes) : cap;
    if (buckets.back().numel > 0 && (buckets.back().numel + up->numel) * elem > limit) {
      buckets.emplace_back();
    }
    Bucket& b = buckets.back();
    b.params.push_back({up, b.numel});
    b.numel += up->numel;
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    Bucket& b = buckets[i];
    b.padded = padded_numel(b.numel, w);
    b.shard = shard_info(b.padded, w, comm->rank());
    for (auto& e : b.params) uses[e.param->param.id()].bucket = i;
  }

  // Owners: the modules that register each unit parameter directly (a tied parameter has
  // several). Only a Layer runs hooks; a parameter with a non-Layer owner waits for the root.
  std::map<std::string, nn::Module*> modules;
  for (auto& [path, m] : root.named_modules()) modules[path] = m;
  std::map<nn::Layer*, bool> hooked;
  for (auto& [name, p] : root.named_parameters(/*remove_duplicate=*/false)) {
    auto it = uses.find(p.id());
    if (it == uses.end()) continue;  // an ignored module's parameter
    const size_t dot = name.rfind('.');
    nn::Module* owner = modules.at(dot == std::string::npos ? std::string() : name.substr(0, dot));
    auto* layer = dynamic_cast<nn::Layer*>(owner);
    if (layer == nullptr) continue;
    ++it->second.owners;
    hooked[layer] = true;
  }
  Impl* impl = this;
  bool root_hooked = false;
  for (auto& [layer, unused] : hooked) {
    nn::ModuleHooks h;
    h.post_backward = [impl](nn::Module& m) { impl->ddp_owner_done(m); };
    if (layer == &root) {
      root_hooked = true;
      h.pre_forward = [impl](nn::Module& m) { impl->ddp_broadcast_buffers(m); };
      h.pre_backward = [impl](nn::Module&) { impl->ddp_begin_backward(); };
      h.post_backward = [impl](nn::Module& m) {
        impl->ddp_owner_done(m);
        impl->ddp_end_backward();
      };
    }
    stage0_hooks.emplace_back(layer, std::move(h));
  }
  if (!root_hooked) {
    nn::ModuleHooks h;
    h.pre_forward = [impl](nn::Module& m) { impl->ddp_broadcast_buffers(m); };
    h.pre_backward = [impl](nn::Module&) { impl->ddp_begin_backward(); };
    h.post_backward = [impl](nn::Module&) { impl->ddp_end_backward(); };
    stage0_hooks.emplace_back(&root, std::move(h));
  }
  for (auto& [layer, h] : stage0_hooks) layer->set_hooks(h);
}

void ShardedModel::Impl::ddp_broadcast_buffers(nn::Module& root) {
  if (!options.ddp.broadcast_buffers || world() == 1) return;
  std::vector<Tensor> bufs;
  for (auto& [name, t] : root.named_buffers()) {
    if (t.defined() && t.numel() > 0 && t.device() == device) bufs.push_back(t);
  }
  if (bufs.empty()) return;
  auto group = comm;
  // On the queue: reductions of the previous micro-batch may still be running on this group.
  wait(submit("broadcast_buffers", [group, bufs]() mutable {
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

void ShardedModel::Impl::ddp_begin_backward() {
  for (auto& [id, u] : uses) u.remaining = u.owners;
  for (auto& b : buckets) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
  }
  next_bucket = 0;
}

void ShardedModel::Impl::ddp_owner_done(nn::Module& owner) {
  if (!sync) return;
  // The owner's direct parameters: those whose name has no further dot.
  for (auto& [name, p] : owner.named_parameters(/*remove_duplicate=*/false)) {
    if (name.find('.') != std::string::npos) continue;
    auto it = uses.find(p.id());
    if (it == uses.end() || it->second.remaining <= 0) continue;
    if (--it->second.remaining == 0) --buckets[it->second.bucket].pending;
  }
  launch_buckets(/*flush=*/false);
}

void ShardedModel::Impl::ddp_end_backward() {
  if (sync) launch_buckets(/*flush=*/true);
}

void ShardedModel::Impl::launch_buckets(bool flush) {
  while (next_bucket < buckets.size() && (flush || buckets[next_bucket].pending == 0)) {
    reduce_bucket(buckets[next_bucket]);
    buckets[next_bucket].launched = true;
    ++next_bucket;
  }
}

void ShardedModel::Impl::reduce_bucket(Bucket& b) {
  Tensor g = Tensor::zeros({b.padded}, stage0_reduce_dtype, device);
  std::string unused;
  for (auto& e : b.params) {
    if (!e.param->param.grad().defined())
      unused += (unused.empty() ? "'" : ", '") + e.param->name + "'";
  }
  BRAID_CHECK(unused.empty() || options.ddp.find_unused_parameters, kInvalidArgument,
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
  auto group = comm;
  Bucket* bucket = &b;
  const bool ordered = spec.ordered_reduction;
  submit(std::string(ordered ? "all_to_all" : "all_reduce") + " of DDP bucket",
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

void ShardedModel::Impl::ddp_finish(double scale) {
  const bool view = options.ddp.gradient_as_bucket_view;
  for (auto& b : buckets) {
    BRAID_CHECK(b.acc.defined(), kInvalidArgument,
                "ShardedModel::finish_gradients: no gradient was reduced (parameter '",
                b.params.front().param->name,
                "'): run at least one forward / backward with gradient sync on first");
    Tensor g = braid::scale(b.acc.dtype() == DType::kF32 ? b.acc : b.acc.to(DType::kF32), scale);
    b.acc = Tensor();
    Tensor full = g;
    if (spec.ordered_reduction) {
      full = Tensor::empty({b.padded}, DType::kF32, device);
      comm->all_gather_into(full, g);
    }
    for (auto& e : b.params) {
      const UnitParam& up = *e.param;
      Tensor v = full.narrow(0, e.offset, up.numel).view(up.shape);
      stage0_target(up).grad() = view ? v : v.clone();
    }
  }
}

std::vector<std::vector<std::string>> ShardedModel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : impl_->buckets) {
    out.emplace_back();
    for (const auto& e : b.params) out.back().push_back(e.param->name);
  }
  return out;
}

}  // namespace braid::shard
