// The pipeline runtime (pipeline.h): executes this rank's action list over its chunks, moves
// activations and gradients through PipelineChannels (Note [Pipeline channels]), keeps each
// micro-batch's saved activations aside between its forward and backward (take_saved /
// restore_saved), computes the loss on the last stage, keeps the tied embedding's replica in
// step with the first stage, and finishes the gradients (docs/parallelism.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "braid/core/error.h"
#include "braid/shard/pipeline.h"
#include "braid/tensor/ops.h"
#include "pipeline_comm.h"

namespace braid::shard {
namespace {

using Clock = std::chrono::steady_clock;
using Key = std::pair<int64_t, int64_t>;  // stage, micro-batch

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

template <typename T>
T take(std::map<Key, T>& m, const Key& k, const char* what) {
  auto it = m.find(k);
  BRAID_ASSERT(it != m.end(), "pipeline: no ", what, " for stage ", k.first, ", micro-batch ",
               k.second);
  T v = std::move(it->second);
  m.erase(it);
  return v;
}

std::string mb_str(const char* what, int64_t stage, int64_t m) {
  return std::string(what) + " of micro-batch " + std::to_string(m) + " (stage " +
         std::to_string(stage) + ")";
}

}  // namespace

struct Pipeline::Impl {
  std::vector<std::shared_ptr<nn::Layer>> chunks;
  std::vector<std::unique_ptr<ShardedModel>> sharded;  // per chunk with dp_group
  std::shared_ptr<ProcessGroup> pp;
  PipelineOptions opt;
  TiedWeight tied;
  int self = 0, p = 1;
  int64_t S = 1, M = 1;
  std::vector<PipelineAction> actions;
  std::map<std::tuple<int, int, TrafficKind>, std::unique_ptr<PipelineChannel>> channels;
  // The loss on the last stage: CrossEntropyLoss, or VocabParallelCrossEntropy with tp_group.
  std::unique_ptr<nn::CrossEntropyLoss> ce;
  std::unique_ptr<VocabParallelCrossEntropy> vce;

  // Tied weight (docs/parallelism.md, "Tied weights").
  bool tied_active = false;
  nn::Module* tied_owner = nullptr;  // on stage 0's rank: the module whose "weight" is owned
  nn::ModuleHooks owner_hooks;       // its hooks before ours, restored at destruction
  nn::Parameter replica;             // on stage S - 1's rank
  bool publish_weight = false;       // set by step(), cleared by stage 0's first forward
  std::vector<std::shared_ptr<const TensorParallelPlan>> plans;  // per chunk, with tp_group
  double loss_scale = 1.0;                                       // set_loss_scale
  Tensor pending_tied_grad;  // added by the owner's pre_backward hook

  // One step's state.
  std::map<Key, Tensor> inputs, outputs, out_grads, in_grads;
  std::map<Key, nn::SavedActivations> saved, saved_loss;
  double loss_sum = 0, busy = 0, step_loss = 0;
  PipelineStepStats stats;

  ~Impl() {
    if (tied_owner) tied_owner->set_hooks(owner_hooks);
  }

  int rank_of(int64_t stage) const { return static_cast<int>(stage % p); }
  int64_t chunk_of(int64_t stage) const { return stage / p; }

  PipelineChannel& chan(int from, int to, TrafficKind kind) {
    auto it = channels.find({from, to, kind});
    BRAID_ASSERT(it != channels.end(), "pipeline: no ", traffic_name(kind),
                 " channel from pp rank ", from, " to ", to);
    return *it->second;
  }

  void make_channels() {
    // Every rank lists the same channels in the same order and calls new_group for each
    // (collective over pp); only the two ends keep one.
    std::vector<std::tuple<int, int, TrafficKind>> list;
    auto add = [&](int from, int to, TrafficKind kind) {
      const auto key = std::make_tuple(from, to, kind);
      if (std::find(list.begin(), list.end(), key) == list.end()) list.push_back(key);
    };
    for (int64_t s = 0; s + 1 < S; ++s) {
      add(rank_of(s), rank_of(s + 1), TrafficKind::kActivation);
      add(rank_of(s + 1), rank_of(s), TrafficKind::kGradient);
    }
    if (tied_active) {
      add(rank_of(0), rank_of(S - 1), TrafficKind::kTiedWeight);
      add(rank_of(S - 1), rank_of(0), TrafficKind::kTiedGrad);
    }
    for (auto& [from, to, kind] : list) {
      std::shared_ptr<ProcessGroup> group;
      if (from != to) group = pp->new_group({std::min(from, to), std::max(from, to)});
      if (self != from && self != to) continue;
      channels[{from, to, kind}] =
          std::make_unique<PipelineChannel>(from, to, kind, group, self, pp->timeout());
    }
  }

  void install_tied_hooks() {
    tied_owner = &chunks[0]->get_submodule(tied.first_module);
    owner_hooks = tied_owner->hooks();
    nn::ModuleHooks h = owner_hooks;
    const nn::ModuleHooks old = owner_hooks;
    // After the first forward of a step the owned weight is whole (also at ZeRO-3, inside
    // the unit's gather): send it to the last stage.
    h.post_forward = [this, old](nn::Module& m) {
      if (publish_weight) {
        publish_weight = false;
        chan(self, rank_of(S - 1), TrafficKind::kTiedWeight)
            .send(m.param("weight").data().clone(),
                  pipeline_tag(TrafficKind::kTiedWeight, S - 1, 0), "the tied weight");
      }
      if (old.post_forward) old.post_forward(m);
    };
    // Inside the backward of the unit that holds the weight, before its own contribution: the
    // head's part joins the gradient where single-process accumulation adds it.
    h.pre_backward = [this, old](nn::Module& m) {
      if (old.pre_backward) old.pre_backward(m);
      if (pending_tied_grad.defined()) {
        nn::accumulate_grad(m.param("weight"), pending_tied_grad);
        pending_tied_grad = Tensor();
      }
    };
    tied_owner->set_hooks(h);
  }

  Tensor run_forward(int64_t c, const Tensor& x) {
    return sharded.empty() ? chunks[static_cast<size_t>(c)]->forward(x)
                           : sharded[static_cast<size_t>(c)]->forward(x);
  }
  Tensor run_backward(int64_t c, const Tensor& g) {
    return sharded.empty() ? chunks[static_cast<size_t>(c)]->backward(g)
                           : sharded[static_cast<size_t>(c)]->backward(g);
  }

  void forward(const PipelineAction& a, const std::vector<Tensor>& ids,
               const std::vector<Tensor>& labels, bool& replica_fresh) {
    const Key key{a.stage, a.micro_batch};
    const int64_t c = chunk_of(a.stage);
    const Tensor x = a.stage == 0 ? ids[static_cast<size_t>(a.micro_batch)]
                                  : take(inputs, key, "received activation");
    if (a.stage == S - 1 && tied_active && !replica_fresh) {
      const Tensor w =
          chan(rank_of(0), self, TrafficKind::kTiedWeight)
              .recv(pipeline_tag(TrafficKind::kTiedWeight, S - 1, 0), "the tied weight");
      replica.data().copy_(w);
      replica_fresh = true;
    }
    const auto t0 = Clock::now();
    const Tensor y = run_forward(c, x);
    saved[key] = chunks[static_cast<size_t>(c)]->take_saved();
    if (a.stage == S - 1) {
      const Tensor& target = labels[static_cast<size_t>(a.micro_batch)];
      if (vce) {
        loss_sum += vce->forward(y, target).item();
        saved_loss[key] = vce->take_saved();
      } else {
        loss_sum += ce->forward(y, target).item();
        saved_loss[key] = ce->take_saved();
      }
    } else {
      outputs[key] = y;
    }
    busy += seconds(t0, Clock::now());
  }

  void backward(const PipelineAction& a) {
    const Key key{a.stage, a.micro_batch};
    const int64_t c = chunk_of(a.stage), m = a.micro_batch;
    const bool per_mb = opt.tied_grad_sync == TiedGradSync::kPerMicroBatch;
    if (a.stage == 0 && tied_active && (per_mb || m == M - 1)) {
      pending_tied_grad = chan(rank_of(S - 1), self, TrafficKind::kTiedGrad)
                              .recv(pipeline_tag(TrafficKind::kTiedGrad, 0, m),
                                    mb_str("the head's gradient", 0, m));
    }
    const auto t0 = Clock::now();
    chunks[static_cast<size_t>(c)]->restore_saved(take(saved, key, "saved activations"));
    Tensor g;
    if (a.stage == S - 1) {
      if (vce) {
        vce->restore_saved(take(saved_loss, key, "saved loss"));
        g = vce->backward();
      } else {
        ce->restore_saved(take(saved_loss, key, "saved loss"));
        g = ce->backward();
      }
      // fp16: the scaled loss's gradient (GradScaler::scale's f32 product).
      if (loss_scale != 1.0) g = mul(g.to(DType::kF32), Scalar(loss_scale));
    } else {
      g = take(out_grads, key, "received gradient");
    }
    Tensor gin = run_backward(c, g);
    BRAID_ASSERT(!pending_tied_grad.defined(), "pipeline: the backward of stage 0 did not run '",
                 tied.first_module, "' (its hook adds the head's gradient)");
    busy += seconds(t0, Clock::now());
    if (a.stage == S - 1 && tied_active && (per_mb || m == M - 1)) {
      // The replica's gradient: this micro-batch's (per_mb), else the step's sum, which
      // accumulate_grad has built in micro-batch order.
      Tensor h = std::move(replica.grad());
      replica.grad() = Tensor();
      BRAID_ASSERT(h.defined(), "pipeline: the head's replica got no gradient");
      chan(self, rank_of(0), TrafficKind::kTiedGrad)
          .send(std::move(h), pipeline_tag(TrafficKind::kTiedGrad, 0, m),
                mb_str("the head's gradient", S - 1, m));
    }
    if (a.stage > 0) in_grads[key] = std::move(gin);
  }

  void run(const std::vector<Tensor>& ids, const std::vector<Tensor>& labels) {
    const auto t0 = Clock::now();
    stats = PipelineStepStats{};
    loss_sum = 0, busy = 0;
    // Whatever a failed step left behind (its groups are broken anyway after a comm error).
    inputs.clear(), outputs.clear(), out_grads.clear(), in_grads.clear();
    saved.clear(), saved_loss.clear();
    pending_tied_grad = Tensor();
    publish_weight = tied_active && self == rank_of(0);
    bool replica_fresh = false;
    for (const PipelineAction& a : actions) {
      const auto begin = Clock::now();
      const Key key{a.stage, a.micro_batch};
      const int64_t s = a.stage, m = a.micro_batch;
      switch (a.kind) {
        case ActionKind::kRecvActivation:
          inputs[key] = chan(rank_of(s - 1), self, TrafficKind::kActivation)
                            .recv(pipeline_tag(TrafficKind::kActivation, s, m),
                                  mb_str("the activation", s, m));
          break;
        case ActionKind::kForward:
          forward(a, ids, labels, replica_fresh);
          break;
        case ActionKind::kSendActivation:
          chan(self, rank_of(s + 1), TrafficKind::kActivation)
              .send(take(outputs, key, "output"), pipeline_tag(TrafficKind::kActivation, s + 1, m),
                    mb_str("the activation", s + 1, m));
          break;
        case ActionKind::kRecvGradient:
          out_grads[key] = chan(rank_of(s + 1), self, TrafficKind::kGradient)
                               .recv(pipeline_tag(TrafficKind::kGradient, s, m),
                                     mb_str("the output gradient", s, m));
          break;
        case ActionKind::kBackward:
          backward(a);
          break;
        case ActionKind::kSendGradient:
          chan(self, rank_of(s - 1), TrafficKind::kGradient)
              .send(take(in_grads, key, "input gradient"),
                    pipeline_tag(TrafficKind::kGradient, s - 1, m),
                    mb_str("the output gradient", s - 1, m));
          break;
      }
      stats.actions.push_back({a, seconds(t0, begin), seconds(t0, Clock::now())});
    }
    for (auto& [key, ch] : channels) {
      if (ch->from() == self) ch->flush();
    }
    finish_gradients();
    // The mean loss, from the last stage to every pp rank; it also closes the step on every
    // rank at about the same moment, which is where the step's time ends.
    Tensor loss = Tensor::full({1}, loss_sum / static_cast<double>(M), DType::kF64);
    pp->broadcast(loss, rank_of(S - 1));
    stats.total_s = seconds(t0, Clock::now());
    stats.busy_s = busy;
    step_loss = loss.item();
  }

  void finish_gradients() {
    if (!sharded.empty()) {
      const double W = static_cast<double>(opt.dp_group->size());
      for (auto& sm : sharded) {
        sm->finish_gradients(opt.scale_grads ? 1.0 / (static_cast<double>(M) * W) : 1.0);
      }
      return;
    }
    if (!opt.scale_grads) return;
    // The same operation as a single process scaling its accumulated gradients.
    for (nn::Parameter& prm : own_parameters()) {
      if (prm.grad().defined()) prm.grad() = scale(prm.grad(), 1.0 / static_cast<double>(M));
    }
  }

  // The chunks' parameters without the replica (each handle once).
  std::vector<nn::Parameter> own_parameters() const {
    std::vector<nn::Parameter> out;
    for (auto& ch : chunks) {
      for (auto& [name, prm] : ch->named_parameters()) {
        if (!(replica.defined() && prm.id() == replica.id())) out.push_back(prm);
      }
    }
    return out;
  }
};

Pipeline::Pipeline(std::vector<std::shared_ptr<nn::Layer>> chunks, std::shared_ptr<ProcessGroup> pp,
                   PipelineOptions options, TiedWeight tied,
                   std::vector<std::shared_ptr<const TensorParallelPlan>> tp_plans)
    : impl_(std::make_unique<Impl>()) {
  BRAID_CHECK(pp != nullptr && pp->rank() >= 0, kInvalidArgument,
              "Pipeline: this rank is not a member of the pp group");
  BRAID_CHECK(!chunks.empty(), kInvalidArgument, "Pipeline: no chunks on pp rank ", pp->rank());
  for (auto& c : chunks) {
    BRAID_CHECK(c != nullptr, kInvalidArgument, "Pipeline: a null chunk on pp rank ", pp->rank());
  }
  const auto v = static_cast<int64_t>(chunks.size());
  BRAID_CHECK(options.virtual_stages == v, kInvalidArgument, "Pipeline: ", v, " chunks on pp rank ",
              pp->rank(), " but virtual_stages = ", options.virtual_stages);
  shape_ = ScheduleShape{options.schedule, pp->size(), v, options.num_micro_batches};
  order_ = pipeline_order(shape_);  // checks the shape
  validate_pipeline_order(shape_, order_);
  Impl& I = *impl_;
  I.chunks = std::move(chunks);
  I.pp = std::move(pp);
  I.opt = std::move(options);
  I.tied = std::move(tied);
  I.self = I.pp->rank();
  I.p = I.pp->size();
  I.S = shape_.num_stages();
  I.M = shape_.micro_batches;
  I.actions = order_[static_cast<size_t>(I.self)];
  I.ce = std::make_unique<nn::CrossEntropyLoss>(I.opt.loss);
  if (I.opt.tp_group) {
    BRAID_CHECK(I.opt.tp_group->rank() >= 0, kInvalidArgument,
                "Pipeline: this rank is not a member of tp_group");
    BRAID_CHECK(tp_plans.empty() || static_cast<int64_t>(tp_plans.size()) == v, kInvalidArgument,
                "Pipeline: ", tp_plans.size(), " tensor-parallel plans for ", v, " chunks");
    I.vce = std::make_unique<VocabParallelCrossEntropy>(
        I.opt.tp_group,
        VocabParallelCrossEntropyOptions{.ignore_index = I.opt.loss.ignore_index,
                                         .reduction = I.opt.loss.reduction,
                                         .label_smoothing = I.opt.loss.label_smoothing,
                                         .vocab_size = I.opt.vocab_size});
  } else {
    BRAID_CHECK(tp_plans.empty(), kInvalidArgument,
                "Pipeline: tensor-parallel plans without PipelineOptions::tp_group");
  }
  I.plans = tp_plans;
  I.tied_active = I.S > 1 && !I.tied.first_module.empty() && !I.tied.last_module.empty();
  if (I.tied_active && I.self == I.rank_of(I.S - 1)) {
    I.replica = I.chunks[static_cast<size_t>(I.chunk_of(I.S - 1))]
                    ->get_submodule(I.tied.last_module)
                    .param("weight");
  }
  if (I.opt.dp_group) {
    for (int64_t c = 0; c < v; ++c) {
      ShardingOptions so = I.opt.sharding;
      // The replica is the pipeline's, not the optimizer's: whole, never reduced.
      if (I.tied_active && I.self + c * I.p == I.S - 1) {
        so.wrap.ignored_modules.push_back(I.tied.last_module);
      }
      if (!tp_plans.empty()) so.tensor_parallel = tp_plans[static_cast<size_t>(c)];
      // A middle stage whose blocks are all wrapped leaves the root unit without parameters,
      // which ShardedModel does not take: say so instead of failing inside it.
      for (const Unit& u : make_units(*I.chunks[static_cast<size_t>(c)], so.wrap, 1)) {
        BRAID_CHECK(u.numel > 0, kNotSupported, "Pipeline: stage ", I.self + c * I.p,
                    ": ShardedModel unit '", u.name.empty() ? std::string("<root>") : u.name,
                    "' would hold no parameter (every block of a middle stage is wrapped); use a "
                    "wrap policy that leaves a parameter in the root unit, e.g. no_wrap");
      }
      I.sharded.push_back(
          std::make_unique<ShardedModel>(I.chunks[static_cast<size_t>(c)], I.opt.dp_group, so));
    }
  }
  if (I.tied_active && I.self == I.rank_of(0)) I.install_tied_hooks();
  I.make_channels();
}

Pipeline::~Pipeline() = default;

double Pipeline::step(const std::vector<Tensor>& ids, const std::vector<Tensor>& labels) {
  const int64_t M = shape_.micro_batches;
  BRAID_CHECK(static_cast<int64_t>(ids.size()) == M && static_cast<int64_t>(labels.size()) == M,
              kInvalidArgument, "Pipeline::step: ", ids.size(), " id and ", labels.size(),
              " label micro-batches; expected num_micro_batches = ", M, " of each");
  impl_->run(ids, labels);
  return impl_->step_loss;
}

double Pipeline::step(const Tensor& ids, const Tensor& labels) {
  const int64_t M = shape_.micro_batches;
  BRAID_CHECK(ids.defined() && labels.defined() && ids.dim() >= 1 && labels.dim() >= 1 &&
                  ids.size(0) == labels.size(0) && ids.size(0) % M == 0,
              kInvalidArgument, "Pipeline::step: a batch of ",
              ids.defined() && ids.dim() >= 1 ? ids.size(0) : 0,
              " rows (ids) must match the labels and split into num_micro_batches = ", M);
  const int64_t b = ids.size(0) / M;
  std::vector<Tensor> x, y;
  for (int64_t m = 0; m < M; ++m) {
    x.push_back(ids.narrow(0, m * b, b).contiguous());
    y.push_back(labels.narrow(0, m * b, b).contiguous());
  }
  return step(x, y);
}

std::vector<nn::Parameter> Pipeline::parameters() const {
  if (impl_->sharded.empty()) return impl_->own_parameters();
  std::vector<nn::Parameter> out;
  for (auto& sm : impl_->sharded) {
    for (auto& prm : sm->optimizer_parameters()) out.push_back(prm);
  }
  return out;
}

void Pipeline::after_step() {
  for (auto& sm : impl_->sharded) sm->after_step();
}

void Pipeline::set_loss_scale(double scale) {
  BRAID_CHECK(std::isfinite(scale) && scale > 0, kInvalidArgument,
              "Pipeline::set_loss_scale: expected a finite scale > 0, got ", scale);
  impl_->loss_scale = scale;
}

double Pipeline::clip_grad_norm_(double max_norm) {
  BRAID_CHECK(max_norm >= 0, kInvalidArgument,
              "Pipeline::clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  Impl& I = *impl_;
  const double inf = std::numeric_limits<double>::infinity();
  double local = 0;  // this rank's chunks' sums of squares, in chunk order
  for (size_t c = 0; c < I.chunks.size(); ++c) {
    double norm = 0;
    if (!I.sharded.empty()) {
      norm = I.sharded[c]->clip_grad_norm_(inf);  // the norm only: a coefficient of 1
    } else {
      std::vector<nn::Parameter> params;
      for (auto& [name, prm] : I.chunks[c]->named_parameters()) {
        if (!(I.replica.defined() && prm.id() == I.replica.id()) && prm.grad().defined()) {
          params.push_back(prm);
        }
      }
      if (c < I.plans.size() && I.plans[c]) {
        norm = grad_norm(params, *I.plans[c]);
      } else {
        double sum = 0;
        for (auto& prm : params) {
          const Tensor g = prm.grad().to(DType::kF64).contiguous();
          const double* x = g.data<double>();
          for (int64_t i = 0; i < g.numel(); ++i) sum += x[i] * x[i];
        }
        norm = std::sqrt(sum);
      }
    }
    local += norm * norm;
  }
  Tensor mine = Tensor::full({1}, local, DType::kF64);
  Tensor all = Tensor::empty({I.p}, DType::kF64);
  I.pp->all_gather_into(all, mine);
  double total = 0;
  for (int64_t r = 0; r < I.p; ++r) total += all.data<double>()[r];
  const double norm = std::sqrt(total);
  if (!std::isfinite(norm)) return norm;
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  if (coef < 1.0) {
    for (nn::Parameter& prm : parameters()) {
      if (!prm.grad().defined()) continue;
      Tensor flat = prm.grad().view({prm.grad().numel()});
      axpby_(coef, flat, 0.0, flat);  // g = coef * g, as ShardedModel::clip_grad_norm_
    }
  }
  return norm;
}

NamedTensors Pipeline::state_dict() {
  const std::string replica_name = impl_->tied.last_module + ".weight";
  NamedTensors out;
  for (size_t c = 0; c < impl_->chunks.size(); ++c) {
    const bool has_replica =
        impl_->tied_active && impl_->self + static_cast<int64_t>(c) * impl_->p == impl_->S - 1;
    if (!impl_->sharded.empty()) {
      for (auto& [name, t] : impl_->sharded[c]->full_state_dict()) {
        if (!(has_replica && name == replica_name)) out.emplace_back(name, t);
      }
      continue;
    }
    for (auto& [name, prm] : impl_->chunks[c]->named_parameters()) {
      if (!(has_replica && name == replica_name)) out.emplace_back(name, prm.data().clone());
    }
  }
  return out;
}

int Pipeline::rank() const {
  return impl_->self;
}
int Pipeline::size() const {
  return impl_->p;
}
const std::vector<PipelineAction>& Pipeline::actions() const {
  return impl_->actions;
}
const PipelineStepStats& Pipeline::last_stats() const {
  return impl_->stats;
}
nn::Layer& Pipeline::chunk(int64_t c) {
  BRAID_CHECK(c >= 0 && c < static_cast<int64_t>(impl_->chunks.size()), kOutOfRange,
              "Pipeline::chunk: ", c, " is outside [0, ", impl_->chunks.size(), ")");
  return *impl_->chunks[static_cast<size_t>(c)];
}
ShardedModel* Pipeline::sharded(int64_t c) {
  chunk(c);  // range check
  return impl_->sharded.empty() ? nullptr : impl_->sharded[static_cast<size_t>(c)].get();
}

}  // namespace braid::shard
