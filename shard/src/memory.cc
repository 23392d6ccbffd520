// estimate_memory (memory.h): the real ShardedModel and optimizer, two steps on the meta device
// over a 'meta' process group, measured with the meta allocator's statistics.
#include "braid/shard/memory.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "braid/amp/autocast.h"
#include "braid/comm/process_group.h"
#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/nn/loss.h"

namespace braid::shard {

namespace {

std::unique_ptr<nn::Optimizer> make_optimizer(const MemoryOptimizer& o,
                                              std::vector<nn::Parameter> params) {
  switch (o.algo) {
    case kernels::OptimAlgo::kSgd:
      return std::make_unique<nn::SGD>(std::move(params), o.options);
    case kernels::OptimAlgo::kAdam:
      return std::make_unique<nn::Adam>(std::move(params), o.options);
    case kernels::OptimAlgo::kAdamW:
      return std::make_unique<nn::AdamW>(std::move(params), o.options);
    case kernels::OptimAlgo::kLion:
      return std::make_unique<nn::Lion>(std::move(params), o.options);
  }
  BRAID_FAIL(kInvalidArgument, "estimate_memory: unknown optimizer algorithm ",
             static_cast<int>(o.algo));
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

}  // namespace

std::string MemoryEstimate::str() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "peak per rank: %.2f MiB, during %s\n", mib(peak_bytes),
                peak_at.c_str());
  out += line;
  std::snprintf(line, sizeof line, "%-22s %14s\n", "phase of the step", "peak (MiB)");
  out += line;
  for (const MemoryPhase& p : phases) {
    std::snprintf(line, sizeof line, "%-22s %14.2f\n", p.name.c_str(), mib(p.peak_bytes));
    out += line;
  }
  std::snprintf(line, sizeof line, "%-22s %14.2f\n", "between steps", mib(between_steps));
  out += line;
  std::snprintf(line, sizeof line, "%-22s %14.2f\n", "  sharded model", mib(model_bytes));
  out += line;
  std::snprintf(line, sizeof line, "%-22s %14.2f\n", "  optimizer state",
                mib(optimizer_state_bytes));
  out += line;
  return out;
}

MemoryEstimate estimate_memory(const ModelFactory& build, const ShardingOptions& options,
                               int world_size, const MemoryWorkload& workload,
                               const MemoryOptimizer& optimizer) {
  BRAID_CHECK(static_cast<bool>(build), kInvalidArgument,
              "estimate_memory: the model factory is empty");
  BRAID_CHECK(world_size >= 1, kInvalidArgument, "estimate_memory: world_size must be >= 1, got ",
              world_size);
  BRAID_CHECK(workload.batch >= 1 && workload.seq >= 1 && workload.micro_batches >= 1,
              kInvalidArgument,
              "estimate_memory: batch, seq and micro_batches must be >= 1, got batch ",
              workload.batch, ", seq ", workload.seq, ", micro_batches ", workload.micro_batches);
  BRAID_CHECK(options.tensor_parallel == nullptr, kInvalidArgument,
              "estimate_memory: a tensor-parallel plan cannot be measured here (its slices come "
              "from shard::parallelize over a real tp group); estimate the model its rank holds");
  const ShardingSpec spec = resolve(options, world_size);  // the options' own errors first
  BRAID_CHECK(!spec.offload_param, kInvalidArgument,
              "estimate_memory: offload_param_device = nvme keeps the master shards in files, "
              "which a meta run cannot write; estimate without it (the shards then count as "
              "resident: an upper bound)");
  ShardingOptions o = options;
  o.param_init = nullptr;  // every parameter stays on meta: a measurement run (fsdp.cc)
  o.checkpoint_group = nullptr;
  o.sync_module_states = false;

  Allocator& alloc = get_allocator(kMeta);
  const auto current = [&] { return static_cast<int64_t>(alloc.stats().current_bytes); };
  const int64_t base = current();
  MemoryEstimate e;
  {
    std::shared_ptr<nn::Layer> model;
    {
      nn::InitEmptyWeights empty(/*include_buffers=*/true);
      model = build();
    }
    BRAID_CHECK(model != nullptr, kInvalidArgument, "estimate_memory: the factory returned null");
    ProcessGroupOptions po;
    po.backend = "meta";
    po.rank = 0;
    po.size = world_size;
    ShardedModel sm(model, ProcessGroup::create(po), o);
    e.model_bytes = current() - base;
    std::unique_ptr<nn::Optimizer> opt = make_optimizer(optimizer, sm.optimizer_parameters());
    nn::CrossEntropyLoss ce;

    const auto step = [&](bool record) {
      // The caller's tensors: allocated before the peak is reset, and subtracted.
      std::vector<std::pair<Tensor, Tensor>> batches;
      int64_t batch_bytes = 0;
      for (int64_t j = 0; j < workload.micro_batches; ++j) {
        Tensor ids = Tensor::empty({workload.batch, workload.seq}, DType::kI64, kMeta);
        Tensor labels = Tensor::empty({workload.batch, workload.seq}, DType::kI64, kMeta);
        batch_bytes += static_cast<int64_t>(ids.nbytes() + labels.nbytes());
        batches.emplace_back(std::move(ids), std::move(labels));
      }
      std::vector<MemoryPhase> phases;
      const auto phase = [&](const char* name, const std::function<void()>& fn) {
        alloc.reset_peak();
        fn();
        const int64_t peak = static_cast<int64_t>(alloc.stats().peak_bytes) - base - batch_bytes;
        auto it = std::find_if(phases.begin(), phases.end(),
                               [&](const MemoryPhase& p) { return p.name == name; });
        if (it == phases.end()) {
          phases.push_back({name, peak});
        } else {
          it->peak_bytes = std::max(it->peak_bytes, peak);
        }
      };
      for (auto& batch : batches) {
        // Not a structured binding: clang 15 (the fuzz build) cannot capture one in a lambda.
        Tensor& ids = batch.first;
        Tensor& labels = batch.second;
        auto scope = workload.autocast == DType::kF32 ? amp::AutocastScope::noop()
                                                      : amp::AutocastScope(workload.autocast);
        phase("forward", [&] { ce.forward(sm.forward(ids), labels); });
        phase("backward", [&] { sm.backward(ce.backward()); });
      }
      const double scale = 1.0 / static_cast<double>(workload.micro_batches * world_size);
      phase("finish_gradients", [&] { sm.finish_gradients(scale); });
      if (workload.clip_grad_norm) phase("clip_grad_norm_", [&] { sm.clip_grad_norm_(1.0); });
      phase("optimizer step", [&] {
        opt->step();
        opt->zero_grad();
      });
      phase("after_step", [&] { sm.after_step(); });
      if (record) e.phases = std::move(phases);
    };
    const int64_t before_first = current();
    step(false);  // creates the optimizer state and records the units' order (prefetch)
    e.optimizer_state_bytes = current() - before_first;
    step(true);
    e.between_steps = current() - base;
  }
  for (const MemoryPhase& p : e.phases) {
    if (p.peak_bytes > e.peak_bytes) {
      e.peak_bytes = p.peak_bytes;
      e.peak_at = p.name;
    }
  }
  return e;
}

}  // namespace braid::shard
