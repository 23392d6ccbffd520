// The memory estimate's ledger, the sharding side of the replay (what ShardedModel and the
// optimizer allocate at each hook: docs/memory.md, "The sharding terms"), the generic model
// of estimate_memory(), and the table. braid's GPT is replayed in memory_gpt.cc.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/thread_pool.h"
#include "braid/shard/memory.h"
#include "memory_replay.h"

namespace braid::shard {

namespace memory_detail {

// ---- Ledger --------------------------------------------------------------------------------

namespace {

bool seen_by_allocator(Term t) {
  return t != Term::kHostBuffers;
}
bool activation_like(Term t) {
  return t == Term::kActivations || t == Term::kAutocastCache || t == Term::kHostBuffers;
}
int64_t activation_sum(const Terms& c) {
  return c[size_t(Term::kActivations)] + c[size_t(Term::kAutocastCache)] +
         c[size_t(Term::kHostBuffers)];
}

}  // namespace

Buf::Entry::~Entry() {
  state->current[size_t(term)] -= bytes;
  state->total -= bytes;
}

Buf Ledger::alloc(Term term, int64_t numel, DType dtype) {
  BRAID_CHECK(numel >= 0, kInvalidArgument, "memory estimate: negative element count ", numel);
  if (numel == 0) return Buf();
  const int64_t bytes = numel * static_cast<int64_t>(dtype_size(dtype));
  LedgerState& s = *state_;
  s.current[size_t(term)] += bytes;
  s.total += bytes;
  if (s.total > s.peak) {
    s.peak = s.total;
    s.at_peak = s.current;
    s.peak_at = s.where;
  }
  if (seen_by_allocator(term)) {
    s.allocator_peak = std::max(s.allocator_peak, s.total - s.current[size_t(Term::kHostBuffers)]);
  }
  if (activation_like(term))
    s.activation_peak = std::max(s.activation_peak, activation_sum(s.current));
  return Buf(std::shared_ptr<Buf::Entry>(new Buf::Entry{state_, term, numel, dtype, bytes}));
}

Buf Ledger::retag(Buf& buf, Term term) {
  if (buf.entry_) {
    state_->current[size_t(buf.entry_->term)] -= buf.entry_->bytes;
    state_->current[size_t(term)] += buf.entry_->bytes;
    buf.entry_->term = term;
  }
  return buf;
}

void Ledger::reset_peak() {
  LedgerState& s = *state_;
  s.peak = s.total;
  s.at_peak = s.current;
  s.peak_at = s.where;
  s.allocator_peak = s.total - s.current[size_t(Term::kHostBuffers)];
  s.activation_peak = activation_sum(s.current);
}

MemoryBreakdown breakdown(const Terms& t) {
  MemoryBreakdown b;
  b.parameters = t[size_t(Term::kParameters)];
  b.master_shards = t[size_t(Term::kMasterShards)];
  b.gathered = t[size_t(Term::kGathered)];
  b.gradients = t[size_t(Term::kGradients)];
  b.reduction = t[size_t(Term::kReduction)];
  b.accumulators = t[size_t(Term::kAccumulators)];
  b.reduced_gradients = t[size_t(Term::kReducedGradients)];
  b.optimizer_state = t[size_t(Term::kOptimizerState)];
  b.activations = t[size_t(Term::kActivations)];
  b.autocast_cache = t[size_t(Term::kAutocastCache)];
  b.host_buffers = t[size_t(Term::kHostBuffers)];
  return b;
}

MemoryBreakdown Ledger::peak() const {
  return breakdown(state_->at_peak);
}
MemoryBreakdown Ledger::current() const {
  return breakdown(state_->current);
}

// ---- ShardReplay -----------------------------------------------------------------------------

ShardReplay::ShardReplay(Ledger& ledger, std::vector<UnitSize> units, const MemoryOptions& options)
    : ledger_(ledger), units_(std::move(units)), options_(options) {
  const MemoryOptions& o = options_;
  BRAID_CHECK(!units_.empty(), kInvalidArgument, "memory estimate: no units");
  BRAID_CHECK(o.world_size >= 1, kInvalidArgument, "memory estimate: world_size must be >= 1, got ",
              o.world_size);
  BRAID_CHECK(o.micro_batches >= 1, kInvalidArgument,
              "memory estimate: micro_batches must be >= 1, got ", o.micro_batches);
  BRAID_CHECK(o.optimizer.states >= 0 && o.optimizer.states <= 3, kInvalidArgument,
              "memory estimate: optimizer states must be 0..3, got ", o.optimizer.states);
  BRAID_CHECK(o.bucket_cap_mb > 0, kInvalidArgument,
              "memory estimate: bucket_cap_mb must be > 0, got ", o.bucket_cap_mb);
  for (DType dt : {o.param_dtype, o.reduce_dtype}) {
    BRAID_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16, kInvalidArgument,
                "memory estimate: param_dtype and reduce_dtype must be f32, bf16 or f16, got ",
                dtype_name(dt));
  }
  // ShardedModel's rules for HSDP and the unordered reduction.
  const int64_t s = o.shard_group_size == 0 ? o.world_size : o.shard_group_size;
  BRAID_CHECK(s >= 1 && o.world_size % s == 0, kInvalidArgument,
              "memory estimate: shard_group_size must divide the world size ", o.world_size,
              ", got ", o.shard_group_size);
  BRAID_CHECK(s == o.world_size || o.stage != ZeroStage::k0, kInvalidArgument,
              "memory estimate: shard_group_size (HSDP) needs stage 1-3");
  BRAID_CHECK(o.deterministic || o.stage == ZeroStage::k0 || s < o.world_size, kInvalidArgument,
              "memory estimate: deterministic = false applies to stage 0 and to HSDP only");
  shard_world_ = static_cast<int>(s);
  for (const UnitSize& u : units_) {
    int64_t sum = 0;
    for (int64_t n : u.params) sum += n;
    BRAID_CHECK(sum == u.numel && u.padded == padded_numel(u.numel, shard_world_), kInvalidArgument,
                "memory estimate: unit '", u.name, "' has ", u.numel, " elements padded to ",
                u.padded, ", but its parameters sum to ", sum, " and a shard group of ",
                shard_world_, " pads them to ", padded_numel(sum, shard_world_),
                " (units from make_units with another world size?)");
  }
  states_.resize(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const size_t n = units_[u].params.size();
    states_[u].grads.resize(n);
    states_[u].owners.assign(n, 1);
    states_[u].remaining.assign(n, 0);
    states_[u].bucket.assign(n, 0);
  }
  if (stage0()) {
    build_buckets();
  } else {
    for (size_t u = 0; u < units_.size(); ++u) {
      Group g;
      g.name = units_[u].name.empty() ? "the root" : units_[u].name;
      for (size_t i = 0; i < units_[u].params.size(); ++i) g.params.emplace_back(u, i);
      g.padded = units_[u].padded;
      groups_.push_back(std::move(g));
    }
  }
}

// ddp.cc, build_buckets: parameters in reverse registration order, a new bucket when the next
// gradient would pass bucket_cap_mb in the reduction dtype (the first bucket: 1 MiB at most).
void ShardReplay::build_buckets() {
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i = 0; i < units_[u].params.size(); ++i) order.emplace_back(u, i);
  }
  std::reverse(order.begin(), order.end());
  const auto elem = static_cast<int64_t>(dtype_size(options_.reduce_dtype));
  const auto cap = static_cast<int64_t>(options_.bucket_cap_mb * 1024.0 * 1024.0);
  constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;
  int64_t numel = 0;
  for (auto [u, i] : order) {
    const int64_t n = units_[u].params[i];
    if (groups_.empty()) groups_.emplace_back();
    const int64_t limit = groups_.size() == 1 ? std::min(cap, kFirstBucketBytes) : cap;
    if (numel > 0 && (numel + n) * elem > limit) {
      groups_.back().padded = padded_numel(numel, world());
      groups_.emplace_back();
      numel = 0;
    }
    states_[u].bucket[i] = groups_.size() - 1;
    groups_.back().params.emplace_back(u, i);
    numel += n;
  }
  groups_.back().padded = padded_numel(numel, world());
  for (size_t b = 0; b < groups_.size(); ++b) groups_[b].name = "DDP bucket " + std::to_string(b);
}

void ShardReplay::construct() {
  Where w(ledger_, "construction");
  const DType pd = options_.param_dtype;
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = states_[u];
    if (stage0()) {  // the model's parameters in param_dtype, and f32 masters when it is 16-bit
      for (int64_t n : units_[u].params) {
        if (pd != DType::kF32)
          s.masters.push_back(ledger_.alloc(Term::kMasterShards, n, DType::kF32));
        s.params.push_back(ledger_.alloc(Term::kParameters, n, pd));
      }
      continue;
    }
    s.shard = ledger_.alloc(Term::kMasterShards, units_[u].padded / world(), DType::kF32);
    if (!stage3()) s.flat = ledger_.alloc(Term::kParameters, units_[u].padded, pd);
  }
}

// Stage 3: the unit's flat buffer is allocated when its all_gather is submitted; the all_gather
// sends this rank's shard cast to param_dtype (a copy unless param_dtype is f32).
void ShardReplay::issue_gather(size_t u) {
  UnitState& s = states_[u];
  if (!stage3() || s.gathered || s.pending.defined()) return;
  s.pending = ledger_.alloc(Term::kGathered, units_[u].padded, options_.param_dtype);
  s.pending_seq = ++seq_;
  if (options_.param_dtype != DType::kF32) {
    ledger_.touch(Term::kGathered, units_[u].padded / world(), options_.param_dtype);
  }
}

void ShardReplay::gather(size_t u) {
  UnitState& s = states_[u];
  if (!stage3() || s.gathered) return;
  issue_gather(u);
  complete_until(s.pending_seq);  // the queue runs in order: what was queued before finishes first
  s.flat = std::move(s.pending);
  s.pending.reset();
  s.gathered = true;
}

void ShardReplay::release(size_t u) {
  UnitState& s = states_[u];
  if (!stage3() || !s.gathered) return;
  s.gathered = false;
  s.flat.reset();
}

void ShardReplay::prefetch_after(size_t u, const std::vector<size_t>& order) {
  if (!options_.overlap || !orders_done_) return;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    if (order[i] == u) return issue_gather(order[i + 1]);
  }
}

void ShardReplay::pre_forward(size_t u) {
  if (stage0()) return;
  if (!orders_done_ && !in_backward_) forward_order_.push_back(u);
  gather(u);
  if (options_.forward_prefetch && !in_backward_) prefetch_after(u, forward_order_);
}

void ShardReplay::post_forward(size_t u) {
  if (!stage0() && options_.reshard_after_forward) release(u);
}

void ShardReplay::pre_backward(size_t u) {
  if (stage0()) {  // ddp_begin_backward
    if (u != root()) return;
    for (UnitState& s : states_) s.remaining = s.owners;
    for (Group& g : groups_) g.pending = static_cast<int64_t>(g.params.size());
    next_bucket_ = 0;
    return;
  }
  in_backward_ = true;
  if (!orders_done_) backward_order_.push_back(u);
  gather(u);
  if (options_.backward_prefetch) prefetch_after(u, backward_order_);
}

void ShardReplay::post_backward(size_t u) {
  if (stage0()) {  // ddp_end_backward: what is left
    if (u == root()) launch_buckets(/*flush=*/true);
    return;
  }
  reduce(u);
  release(u);
  if (u == root()) {
    in_backward_ = false;
    orders_done_ = true;
  }
}

void ShardReplay::set_owners(size_t u, size_t param, int owners) {
  states_.at(u).owners.at(param) = owners;
}

void ShardReplay::owner_done(size_t u, size_t param) {
  if (!stage0()) return;
  int& remaining = states_.at(u).remaining.at(param);
  if (remaining <= 0) return;
  if (--remaining == 0) --groups_[states_[u].bucket[param]].pending;
  launch_buckets(/*flush=*/false);
}

void ShardReplay::launch_buckets(bool flush) {
  while (next_bucket_ < groups_.size() && (flush || groups_[next_bucket_].pending == 0)) {
    reduce(next_bucket_++);
  }
}

void ShardReplay::accumulate_grad(size_t u, size_t param, int64_t numel, DType dtype) {
  Buf& grad = states_.at(u).grads.at(param);
  if (!grad.defined()) {
    grad = ledger_.alloc(Term::kGradients, numel, layer_param_dtype());
    return;
  }
  if (dtype != grad.dtype()) ledger_.touch(Term::kActivations, numel, grad.dtype());
}

Buf ShardReplay::storage(size_t u) const {
  return stage3() ? states_[u].flat : Buf();
}

// fsdp.cc reduce / ddp.cc reduce_bucket: the packed gradient (zeros of the padded group, in
// reduce_dtype) is allocated while the parameters' gradients still exist; each is dropped
// once copied in. The collective and the fold run on the communication thread with overlap.
void ShardReplay::reduce(size_t group) {
  Where w(ledger_, "reduction of " + groups_[group].name);
  InFlight f{group, ++seq_,
             ledger_.alloc(Term::kReduction, groups_[group].padded, options_.reduce_dtype), Buf()};
  for (auto [u, i] : groups_[group].params) states_[u].grads[i].reset();
  if (!options_.overlap) {
    complete(f);
    return;
  }
  // Assumption (docs/memory.md, "Overlap"): the communication thread finishes a reduction
  // before the next one is packed, so at most the previous one is in flight with this one.
  complete_until(f.seq);
  if (!stage0() || options_.deterministic) {
    f.blocks = ledger_.alloc(Term::kReduction, groups_[group].padded, options_.reduce_dtype);
  }
  in_flight_.push_back(std::move(f));
}

// The collective and the fold. Ordered (deterministic): the all_to_all's receive buffer (with
// HSDP, every replica's blocks gathered into one more), the first fold of the step cloning a
// block into the shard's accumulator. Stage 0 unordered: all_reduce in place, the first
// micro-batch's packed bucket kept as the accumulator.
void ShardReplay::complete(InFlight& f) {
  Group& g = groups_[f.group];
  const DType rdt = options_.reduce_dtype;
  if (stage0() && !options_.deterministic) {
    if (!g.acc.defined()) {
      g.acc = ledger_.retag(f.packed, Term::kAccumulators);
    }
    f.packed.reset();
    return;
  }
  if (!f.blocks.defined()) f.blocks = ledger_.alloc(Term::kReduction, g.padded, rdt);
  if (!stage0() && options_.deterministic && replicas() > 1) {
    Buf all_blocks = ledger_.alloc(Term::kReduction, g.padded * replicas(), rdt);
    f.blocks = std::move(all_blocks);
  }
  if (!g.acc.defined()) g.acc = ledger_.alloc(Term::kAccumulators, g.padded / world(), rdt);
  f.blocks.reset();
  f.packed.reset();
}

void ShardReplay::complete_until(int64_t seq) {
  while (!in_flight_.empty() && in_flight_.front().seq < seq) {
    complete(in_flight_.front());
    in_flight_.erase(in_flight_.begin());
  }
}

// Per group: the accumulator as f32 (a copy when reduce_dtype is 16-bit) times the scale, then
// the accumulator goes. Stages 1-3: that shard is the optimizer parameter's gradient. Stage 0:
// the ordered fold all_gathers the whole bucket in f32, and every parameter's gradient is a
// copy of its part (or a view, gradient_as_bucket_view, which keeps the bucket).
void ShardReplay::finish_gradients() {
  Where w(ledger_, "finish_gradients");
  drain();
  for (Group& g : groups_) {
    const int64_t n = g.acc.numel();
    Buf scaled;
    {
      const Buf as_f32 = options_.reduce_dtype == DType::kF32
                             ? Buf()
                             : ledger_.alloc(Term::kReducedGradients, n, DType::kF32);
      scaled = ledger_.alloc(Term::kReducedGradients, n, DType::kF32);
    }
    g.acc.reset();
    if (!stage0()) {
      g.reduced.push_back(std::move(scaled));
      continue;
    }
    Buf full = scaled;
    if (options_.deterministic)
      full = ledger_.alloc(Term::kReducedGradients, g.padded, DType::kF32);
    if (options_.gradient_as_bucket_view) {
      g.reduced.push_back(full);
      continue;
    }
    for (auto [u, i] : g.params) {
      g.reduced.push_back(ledger_.alloc(Term::kReducedGradients, units_[u].params[i], DType::kF32));
    }
  }
}

// Per unit: every chunk's sum of squares (f64, padded / kChunk of them) gathered on every rank;
// stage 0 packs the unit's whole gradient flat first, stages 1-3 sum their own shard's chunks.
void ShardReplay::clip_grad_norm() {
  Where w(ledger_, "clip_grad_norm_");
  drain();
  for (const UnitSize& u : units_) {
    const Buf partials = ledger_.alloc(Term::kReducedGradients, u.padded / kChunk, DType::kF64);
    if (stage0()) {
      ledger_.touch(Term::kReducedGradients, u.padded, DType::kF32);
    } else {
      ledger_.touch(Term::kReducedGradients, u.padded / world() / kChunk, DType::kF64);
    }
  }
}

// Optimizer::state_for on the first step: a master (to(f32), then clone) when the stepped
// tensor is 16-bit and masters are on, then the f32 state tensors; kept from then on. The
// optimizer steps the shards (stages 1-3), or every parameter or its f32 master (stage 0).
void ShardReplay::optimizer_step() {
  Where w(ledger_, "optimizer step");
  const auto make = [&](UnitState& s, int64_t n) {
    if (options_.optimizer.master) {
      const Buf converted = ledger_.alloc(Term::kOptimizerState, n, DType::kF32);
      s.optimizer.push_back(ledger_.alloc(Term::kOptimizerState, n, DType::kF32));
    }
    for (int k = 0; k < options_.optimizer.states; ++k) {
      s.optimizer.push_back(ledger_.alloc(Term::kOptimizerState, n, DType::kF32));
    }
  };
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = states_[u];
    if (s.optimizer_ready) continue;
    s.optimizer_ready = true;
    if (stage0()) {
      for (int64_t n : units_[u].params) make(s, n);
    } else {
      make(s, units_[u].padded / world());
    }
  }
}

void ShardReplay::zero_grad() {
  for (Group& g : groups_) g.reduced.clear();
}

// Drops a prefetched gather and releases every unit (stage 3). Stage 0 rounds the masters into
// the parameters in place; stages 1-2 all_gather each unit's updated shard (cast to param_dtype
// first, a copy unless it is f32) into its flat buffer.
void ShardReplay::after_step() {
  Where w(ledger_, "after_step");
  drain();
  for (size_t u = 0; u < units_.size(); ++u) {
    states_[u].pending.reset();
    release(u);
  }
  if (options_.stage != ZeroStage::k1 && options_.stage != ZeroStage::k2) return;
  if (options_.param_dtype == DType::kF32) return;
  for (const UnitSize& u : units_) {
    ledger_.touch(Term::kGathered, u.padded / world(), options_.param_dtype);
  }
}

// ---- the generic model ---------------------------------------------------------------------

namespace {

// A model known by its units alone: the forward runs every unit's hooks (the inner units in
// index order inside the root, as a sequential model does), then `activation_bytes` are held
// through the whole backward; the backward creates the root's gradients first, then each inner
// unit's in reverse order, a unit's parameters being ready (stage 0) when its backward ends
// and the root's at the end.
void generic_micro_batch(Ledger& ledger, ShardReplay& s, int64_t activation_bytes) {
  const size_t root = s.root();
  const DType pd = s.layer_param_dtype();
  ledger.at("forward");
  s.pre_forward(root);
  for (size_t u = 0; u < root; ++u) {
    s.pre_forward(u);
    s.post_forward(u);
  }
  s.post_forward(root);
  Buf activations = ledger.alloc(Term::kActivations, activation_bytes, DType::kU8);
  ledger.at("backward");
  s.pre_backward(root);
  const auto grads = [&](size_t u) {
    const auto& params = s.units()[u].params;
    for (size_t i = 0; i < params.size(); ++i) s.accumulate_grad(u, i, params[i], pd);
  };
  const auto ready = [&](size_t u) {
    for (size_t i = 0; i < s.units()[u].params.size(); ++i) s.owner_done(u, i);
  };
  grads(root);
  for (size_t u = root; u-- > 0;) {
    ledger.at("backward: " + s.units()[u].name);
    s.pre_backward(u);
    grads(u);
    ready(u);
    s.post_backward(u);
  }
  ledger.at("backward");
  ready(root);
  s.post_backward(root);
}

}  // namespace

MemoryEstimate replay_steps(Ledger& ledger, ShardReplay& s,
                            const std::function<void()>& micro_batch) {
  s.construct();
  const auto step = [&] {
    for (int64_t j = 0; j < s.options().micro_batches; ++j) micro_batch();
    s.finish_gradients();
    if (s.options().clip_grad_norm) s.clip_grad_norm();
    s.optimizer_step();
    s.zero_grad();
    s.after_step();
  };
  // The first step creates the optimizer state and records the units' order (prefetch starts
  // with the second); the estimate is the second, the steady state.
  step();
  ledger.reset_peak();
  step();
  MemoryEstimate e;
  e.peak = ledger.peak();
  e.peak_at = ledger.peak_at();
  e.allocator_peak = ledger.allocator_peak();
  e.between_steps = ledger.current();
  return e;
}

}  // namespace memory_detail

// ---- public ----------------------------------------------------------------------------------

std::vector<UnitSize> unit_sizes(const std::vector<Unit>& units) {
  std::vector<UnitSize> out;
  for (const Unit& u : units) {
    UnitSize s{u.name, {}, u.numel, u.padded};
    for (const UnitParam& p : u.params) s.params.push_back(p.numel);
    out.push_back(std::move(s));
  }
  return out;
}

OptimizerMemory OptimizerMemory::of(kernels::OptimAlgo algo, const nn::OptimizerOptions& o) {
  switch (algo) {
    case kernels::OptimAlgo::kSgd:
      return {o.momentum != 0.0 ? 1 : 0, false};
    case kernels::OptimAlgo::kLion:
      return {1, false};
    case kernels::OptimAlgo::kAdam:
    case kernels::OptimAlgo::kAdamW:
      return {o.amsgrad ? 3 : 2, false};
  }
  return {};
}

MemoryOptions MemoryOptions::from(const ShardingOptions& so, int world_size,
                                  OptimizerMemory optimizer) {
  MemoryOptions m;
  m.stage = so.stage;
  m.world_size = world_size;
  m.param_dtype = so.precision.param_dtype;
  m.reduce_dtype = so.precision.reduce_dtype;
  if (so.stage == ZeroStage::k0 && so.ddp.comm_hook != DDPCommunicationHookType::kNo) {
    m.reduce_dtype =
        so.ddp.comm_hook == DDPCommunicationHookType::kFp16 ? DType::kF16 : DType::kBF16;
  }
  m.shard_group_size = so.shard_group_size;
  m.deterministic = so.deterministic;
  m.bucket_cap_mb = so.ddp.bucket_cap_mb;
  m.gradient_as_bucket_view = so.ddp.gradient_as_bucket_view;
  m.optimizer = optimizer;
  m.reshard_after_forward = so.reshard_after_forward;
  m.overlap = resolve_overlap(so);
  m.forward_prefetch = so.forward_prefetch;
  m.backward_prefetch = so.backward_prefetch;
  return m;
}

int64_t MemoryBreakdown::total() const {
  return parameters + master_shards + gathered + gradients + reduction + accumulators +
         reduced_gradients + optimizer_state + activations + autocast_cache + host_buffers;
}

std::string MemoryEstimate::str() const {
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "peak per rank: %.2f MiB (allocator %.2f MiB), during %s\n",
                mib(peak_bytes()), mib(allocator_peak), peak_at.c_str());
  out += line;
  std::snprintf(line, sizeof line, "%-20s %14s %18s\n", "term", "at peak (MiB)",
                "between steps (MiB)");
  out += line;
  const std::pair<const char*, int64_t MemoryBreakdown::*> rows[] = {
      {"parameters", &MemoryBreakdown::parameters},
      {"master shards", &MemoryBreakdown::master_shards},
      {"gathered units", &MemoryBreakdown::gathered},
      {"gradients", &MemoryBreakdown::gradients},
      {"reduction buffers", &MemoryBreakdown::reduction},
      {"accumulators", &MemoryBreakdown::accumulators},
      {"reduced gradients", &MemoryBreakdown::reduced_gradients},
      {"optimizer state", &MemoryBreakdown::optimizer_state},
      {"activations", &MemoryBreakdown::activations},
      {"autocast cache", &MemoryBreakdown::autocast_cache},
      {"host buffers", &MemoryBreakdown::host_buffers},
  };
  for (const auto& [name, field] : rows) {
    std::snprintf(line, sizeof line, "%-20s %14.2f %18.2f\n", name, mib(peak.*field),
                  mib(between_steps.*field));
    out += line;
  }
  std::snprintf(line, sizeof line, "%-20s %14.2f %18.2f\n", "total", mib(peak.total()),
                mib(between_steps.total()));
  out += line;
  return out;
}

MemoryEstimate estimate_memory(const std::vector<UnitSize>& units, const MemoryOptions& options,
                               int64_t activation_bytes) {
  BRAID_CHECK(activation_bytes >= 0, kInvalidArgument,
              "estimate_memory: activation_bytes must be >= 0, got ", activation_bytes);
  memory_detail::Ledger ledger;
  memory_detail::ShardReplay s(ledger, units, options);
  return memory_detail::replay_steps(
      ledger, s, [&] { memory_detail::generic_micro_batch(ledger, s, activation_bytes); });
}

}  // namespace braid::shard
