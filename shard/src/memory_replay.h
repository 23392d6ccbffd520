// The machinery of the memory estimate (memory.h, docs/memory.md): a ledger of simulated
// buffers with the CPU allocator's accounting (requested bytes, current and peak), and the
// replay of what a ShardedModel and its optimizer allocate at each hook of a step. memory.cc
// holds the sharding side and the generic model; memory_gpt.cc replays braid's GPT layer by
// layer. Simulated buffers (Buf) are reference-counted like Tensor storages, so a replay that
// mirrors the code's scopes frees each buffer when the code does. Not installed.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/shard/memory.h"

namespace braid::shard::memory_detail {

// What holds a buffer: one field of MemoryBreakdown each.
enum class Term : uint8_t {
  kParameters,
  kMasterShards,
  kGathered,
  kGradients,
  kReduction,
  kAccumulators,
  kReducedGradients,
  kOptimizerState,
  kActivations,
  kAutocastCache,
  kHostBuffers,
  kCount
};
inline constexpr size_t kTerms = static_cast<size_t>(Term::kCount);
using Terms = std::array<int64_t, kTerms>;

struct LedgerState {
  Terms current{};
  int64_t total = 0;
  int64_t peak = 0;
  Terms at_peak{};
  int64_t allocator_peak = 0;   // of the terms the allocator sees (all but host buffers)
  int64_t activation_peak = 0;  // of activations + autocast cache + host buffers
  std::string where, peak_at;
};

// A simulated tensor storage: its bytes go back to the ledger when the last copy goes.
class Buf {
 public:
  Buf() = default;
  bool defined() const { return entry_ != nullptr; }
  int64_t numel() const { return entry_ ? entry_->numel : 0; }
  DType dtype() const { return entry_ ? entry_->dtype : DType::kF32; }
  const void* id() const { return entry_.get(); }
  // A reference that does not keep the buffer alive (autocast's cache holds its sources so).
  std::weak_ptr<const void> weak() const { return entry_; }
  void reset() { entry_.reset(); }

 private:
  friend class Ledger;
  struct Entry {
    std::shared_ptr<LedgerState> state;
    Term term;
    int64_t numel;
    DType dtype;
    int64_t bytes;
    ~Entry();
  };
  explicit Buf(std::shared_ptr<Entry> e) : entry_(std::move(e)) {}
  std::shared_ptr<Entry> entry_;
};

class Ledger {
 public:
  Ledger() : state_(std::make_shared<LedgerState>()) {}
  // `numel` elements of `dtype`; an undefined Buf for none (the allocator hands out nothing for
  // zero bytes).
  Buf alloc(Term term, int64_t numel, DType dtype);
  // A buffer that lives for an instant (allocated and dropped at once).
  void touch(Term term, int64_t numel, DType dtype) { alloc(term, numel, dtype); }
  // The same storage counted under another term from now on (a buffer that changes role, as
  // a packed bucket kept as the accumulator).
  Buf retag(Buf& buf, Term term);
  // The label a peak reached from now on is recorded under.
  void at(std::string where) { state_->where = std::move(where); }
  const std::string& where() const { return state_->where; }
  // The allocator's reset_peak(): the peaks restart from what is allocated now.
  void reset_peak();
  MemoryBreakdown peak() const;
  MemoryBreakdown current() const;
  const std::string& peak_at() const { return state_->peak_at; }
  int64_t allocator_peak() const { return state_->allocator_peak; }
  int64_t activation_peak() const { return state_->activation_peak; }

 private:
  std::shared_ptr<LedgerState> state_;
};

// Sets the ledger's label for a scope and puts the previous one back.
class Where {
 public:
  Where(Ledger& ledger, std::string where) : ledger_(ledger), prev_(ledger.where()) {
    ledger_.at(std::move(where));
  }
  ~Where() { ledger_.at(prev_); }
  Where(const Where&) = delete;
  Where& operator=(const Where&) = delete;

 private:
  Ledger& ledger_;
  std::string prev_;
};

// The sharding side of a replay: what ShardedModel (fsdp.cc, ddp.cc) and the optimizer
// allocate, driven by the model side through the hooks the real code uses (ModuleHooks,
// accumulate_grad).
class ShardReplay {
 public:
  // Validates units and options with the checks ShardedModel makes (kInvalidArgument).
  ShardReplay(Ledger& ledger, std::vector<UnitSize> units, const MemoryOptions& options);

  const std::vector<UnitSize>& units() const { return units_; }
  const MemoryOptions& options() const { return options_; }
  size_t root() const { return units_.size() - 1; }
  // The dtype the layers see parameters (and so their gradients) in.
  DType layer_param_dtype() const { return options_.param_dtype; }

  // ShardedModel's constructor: the resident parameters, masters, shards and flat buffers;
  // stage 0 also cuts the DDP buckets.
  void construct();
  // The unit hooks (fsdp.cc, "hooks.pre_forward" ...). At stage 0 only the root's matter: its
  // pre_backward starts a pass, its post_backward launches the buckets left.
  void pre_forward(size_t u);
  void post_forward(size_t u);
  void pre_backward(size_t u);
  void post_backward(size_t u);
  // Stage 0: how many Layers register parameter `param` of unit u (a tied weight: several;
  // default 1), and one of them finishing its backward (ddp.cc, ddp_owner_done): the last makes
  // the parameter ready, a bucket whose parameters are all ready is reduced, in bucket order.
  void set_owners(size_t u, size_t param, int owners);
  void owner_done(size_t u, size_t param);
  // nn::accumulate_grad(p, g) for parameter `param` of unit u, g of `numel` elements of
  // `dtype`: the micro-batch's first call keeps a new buffer in the parameter's dtype (a
  // conversion, or the clone of a same-dtype g); later calls convert g when the dtypes differ
  // and add in place.
  void accumulate_grad(size_t u, size_t param, int64_t numel, DType dtype);
  // The buffer unit u's parameters are views of now: stage 3 the gathered flat buffer;
  // undefined at stages 0-2, whose parameters stay for the whole step. Autocast's cast cache
  // keeps what it returns alive.
  Buf storage(size_t u) const;

  // The rest of the step: ShardedModel::finish_gradients / clip_grad_norm_, the optimizer's
  // step() and zero_grad(), ShardedModel::after_step.
  void finish_gradients();
  void clip_grad_norm();
  void optimizer_step();
  void zero_grad();
  void after_step();

 private:
  struct UnitState {
    Buf flat;                 // stages 1-2: resident; stage 3: while gathered
    Buf pending;              // stage 3: issued ahead of use (prefetch)
    int64_t pending_seq = 0;  // its place in the communication queue
    bool gathered = false;
    Buf shard;                           // stages 1-3: the f32 master shard
    std::vector<Buf> params;             // stage 0: the model's parameters (param_dtype)
    std::vector<Buf> masters;            // stage 0 with a 16-bit param_dtype: their f32 masters
    std::vector<Buf> grads;              // per parameter, this micro-batch
    std::vector<int> owners, remaining;  // stage 0
    std::vector<size_t> bucket;          // stage 0: each parameter's bucket
    std::vector<Buf> optimizer;          // state tensors and masters
    bool optimizer_ready = false;
  };
  // What one reduction covers: a unit (stages 1-3), or a DDP bucket (stage 0).
  struct Group {
    std::string name;
    std::vector<std::pair<size_t, size_t>> params;  // (unit, parameter)
    int64_t padded = 0;
    int64_t pending = 0;       // stage 0: parameters not ready yet in this pass
    Buf acc;                   // reduce_dtype: a shard (ordered fold), or the whole bucket
    std::vector<Buf> reduced;  // after finish_gradients
  };
  // A reduction handed to the communication thread: its packed gradient and receive buffer.
  struct InFlight {
    size_t group;
    int64_t seq;
    Buf packed, blocks;
  };
  bool stage0() const { return options_.stage == ZeroStage::k0; }
  bool stage3() const { return options_.stage == ZeroStage::k3; }
  // The shard group's size (the world, or shard_group_size with HSDP) and the replicas.
  int world() const { return shard_world_; }
  int replicas() const { return options_.world_size / shard_world_; }
  void build_buckets();
  void issue_gather(size_t u);
  void gather(size_t u);
  void release(size_t u);
  void prefetch_after(size_t u, const std::vector<size_t>& order);
  void reduce(size_t group);
  void launch_buckets(bool flush);
  void complete(InFlight& f);
  void complete_until(int64_t seq);  // every reduction queued before seq
  void drain() { complete_until(seq_ + 1); }

  Ledger& ledger_;
  std::vector<UnitSize> units_;
  MemoryOptions options_;
  int shard_world_ = 1;
  std::vector<UnitState> states_;
  std::vector<Group> groups_;
  std::vector<size_t> forward_order_, backward_order_;
  bool orders_done_ = false;
  bool in_backward_ = false;
  int64_t seq_ = 0;  // operations submitted to the communication queue so far
  std::vector<InFlight> in_flight_;
  size_t next_bucket_ = 0;  // stage 0: the next bucket to launch in this pass
};

// Runs ShardedModel's construction and two steps of `micro_batch` x micro_batches, each followed
// by finish_gradients (clip_grad_norm_), the optimizer step, zero_grad and after_step; the
// estimate is the second step (the first creates the optimizer state and records the units'
// order, which prefetching needs), measured from a reset peak as the tests measure it.
MemoryEstimate replay_steps(Ledger& ledger, ShardReplay& s,
                            const std::function<void()>& micro_batch);

}  // namespace braid::shard::memory_detail
