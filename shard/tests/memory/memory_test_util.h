// Runs the steps the memory estimate describes and measures them with the CPU allocator's
// statistics: shared by memory_test.cc (one rank, in process) and memory_worker.cc (several
// ranks, one process each under braid launch: the allocator is per process).
#pragma once

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/comm/process_group.h"
#include "braid/core/allocator.h"
#include "braid/core/rng.h"
#include "braid/nn/gpt.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/memory.h"

namespace braid::shard::memory_test {

struct Case {
  std::string name;
  nn::GPTConfig config;
  GptWorkload workload;
  ShardingOptions sharding;
  int64_t micro_batches = 1;  // per rank per step
  bool clip = false;
};

// A GPT small enough for a test and large enough that every term shows: the head (vocab 384
// x 64) is as large as a block, the activations of 2 x 48 tokens are a few blocks' worth.
inline nn::GPTConfig small_gpt(int64_t layers = 3) {
  nn::GPTConfig c;
  c.vocab_size = 384;
  c.n_positions = 64;
  c.n_embd = 64;
  c.n_layer = layers;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  return c;
}

inline Case make_case(std::string name, ZeroStage stage) {
  Case c;
  c.name = std::move(name);
  c.config = small_gpt();
  c.workload = {.batch = 2, .seq = 48};
  c.sharding.stage = stage;
  c.sharding.wrap = {.kind = WrapKind::kTransformerBased,
                     .transformer_cls_names_to_wrap = {"GPT2Block"}};
  c.sharding.overlap = false;
  return c;
}

struct Measured {
  int64_t peak = 0;           // the allocator's peak over the second step, less the baseline
  int64_t between_steps = 0;  // allocated after it, less the baseline
};

// Builds the model, its ShardedModel and AdamW, runs two steps (G = micro_batches x W
// micro-batches each, rank r running r, r + W, ...) and measures the second: the allocator's
// peak from a reset_peak() just before it, less what was allocated before the model existed
// (this process's other tensors) and less the step's input batch (ids and labels, the caller's
// tensors, not the model's).
inline Measured measure(const Case& c, const std::shared_ptr<ProcessGroup>& pg) {
  Allocator& alloc = get_allocator(kCPU);
  const auto base = static_cast<int64_t>(alloc.stats().current_bytes);
  const int world = pg->size(), rank = pg->rank();
  Measured m;
  {
    auto gpt = std::make_shared<nn::GPT>(c.config);
    Generator init(7);
    gpt->init_weights(init);
    ShardedModel sm(gpt, pg, c.sharding);
    nn::AdamW opt(sm.optimizer_parameters(), {.lr = 1e-3, .weight_decay = 0.1});
    nn::CrossEntropyLoss ce;
    const auto step = [&](int64_t s) {
      std::vector<std::pair<Tensor, Tensor>> batches;
      int64_t batch_bytes = 0;
      for (int64_t j = 0; j < c.micro_batches; ++j) {
        Generator gen(1000 * static_cast<uint64_t>(s) + static_cast<uint64_t>(j * world + rank));
        Tensor ids = Tensor::empty({c.workload.batch, c.workload.seq}, DType::kI64);
        Tensor labels = Tensor::empty({c.workload.batch, c.workload.seq}, DType::kI64);
        gen.fill_randint(ids.data<int64_t>(), ids.numel(), 0, c.config.vocab_size);
        gen.fill_randint(labels.data<int64_t>(), labels.numel(), 0, c.config.vocab_size);
        batch_bytes += static_cast<int64_t>(ids.nbytes() + labels.nbytes());
        batches.emplace_back(ids, labels);
      }
      alloc.reset_peak();
      for (auto& [ids, labels] : batches) {
        auto scope = c.workload.autocast == DType::kF32 ? amp::AutocastScope::noop()
                                                        : amp::AutocastScope(c.workload.autocast);
        ce.forward(sm.forward(ids), labels).item();
        sm.backward(ce.backward());
      }
      const auto phase = [&](const char* what) {
        if (std::getenv("MEMDEBUG"))
          std::printf("  %s peak %lld\n", what,
                      (long long)alloc.stats().peak_bytes - base - batch_bytes);
      };
      phase("fwd/bwd");
      sm.finish_gradients(1.0 / static_cast<double>(c.micro_batches * world));
      phase("finish");
      if (c.clip) sm.clip_grad_norm_(1.0);
      opt.step();
      phase("opt");
      opt.zero_grad();
      sm.after_step();
      return static_cast<int64_t>(alloc.stats().peak_bytes) - base - batch_bytes;
    };
    step(0);
    m.peak = step(1);
    m.between_steps = static_cast<int64_t>(alloc.stats().current_bytes) - base;
  }
  return m;
}

// The estimate for the same case, from the units the ShardedModel makes (over the shard
// group: the world, or shard_group_size ranks with HSDP), taken from a meta-built model.
inline MemoryEstimate predict(const Case& c, int world) {
  nn::InitEmptyWeights empty;
  auto gpt = std::make_shared<nn::GPT>(c.config);
  const int shard_world =
      c.sharding.shard_group_size == 0 ? world : static_cast<int>(c.sharding.shard_group_size);
  MemoryOptions mo = MemoryOptions::from(
      c.sharding, world, OptimizerMemory::of(kernels::OptimAlgo::kAdamW, {.weight_decay = 0.1}));
  mo.micro_batches = c.micro_batches;
  mo.clip_grad_norm = c.clip;
  return estimate_gpt_memory(c.config, c.workload,
                             unit_sizes(make_units(*gpt, c.sharding.wrap, shard_world)), mo);
}

// |measured - predicted| as a fraction of measured.
inline double relative_error(int64_t measured, int64_t predicted) {
  return std::fabs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
}

inline std::string report(const Case& c, int world, int rank, const Measured& m,
                          const MemoryEstimate& e) {
  char line[256];
  std::snprintf(
      line, sizeof line,
      "%-34s W %d rank %d: peak measured %9lld predicted %9lld (%+.2f%%), between "
      "steps %9lld / %9lld, at %s",
      c.name.c_str(), world, rank, static_cast<long long>(m.peak),
      static_cast<long long>(e.allocator_peak),
      100.0 * static_cast<double>(e.allocator_peak - m.peak) / static_cast<double>(m.peak),
      static_cast<long long>(m.between_steps),
      static_cast<long long>(e.between_steps.allocator_bytes()), e.peak_at.c_str());
  return line;
}

}  // namespace braid::shard::memory_test
