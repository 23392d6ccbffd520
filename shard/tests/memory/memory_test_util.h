// Runs a training step on cpu and measures it with the CPU allocator's statistics, beside the
// estimate of the same step measured on the meta device (estimate_memory): shared by
// memory_test.cc (one rank, in process) and memory_worker.cc (several ranks, one process each
// under braid launch: the allocator is per process). Both families, GPT-2 and Llama.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/comm/process_group.h"
#include "braid/core/allocator.h"
#include "braid/core/rng.h"
#include "braid/nn/gpt.h"
#include "braid/nn/llama.h"
#include "braid/nn/loss.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/memory.h"

namespace braid::shard::memory_test {

enum class Family { kGpt, kLlama };

struct Case {
  std::string name;
  Family family = Family::kGpt;
  nn::GPTConfig gpt;
  nn::LlamaConfig llama;
  MemoryWorkload workload;
  ShardingOptions sharding;

  int64_t vocab() const { return family == Family::kGpt ? gpt.vocab_size : llama.vocab_size; }
  void set_checkpointing(bool on) {
    gpt.activation_checkpointing = on;
    llama.activation_checkpointing = on;
  }
  ModelFactory factory() const {
    if (family == Family::kGpt) {
      return [cfg = gpt] { return std::make_shared<nn::GPT>(cfg); };
    }
    return [cfg = llama] { return std::make_shared<nn::Llama>(cfg); };
  }
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

// The Llama counterpart: grouped-query attention (4 heads, 2 key/value heads), SwiGLU 176,
// an untied head.
inline nn::LlamaConfig small_llama(int64_t layers = 3) {
  nn::LlamaConfig c;
  c.vocab_size = 384;
  c.hidden_size = 64;
  c.intermediate_size = 176;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

inline Case make_case(std::string name, ZeroStage stage, Family family = Family::kGpt) {
  Case c;
  c.name = std::string(family == Family::kGpt ? "gpt2 " : "llama ") + std::move(name);
  c.family = family;
  c.gpt = small_gpt();
  c.llama = small_llama();
  c.workload = {.batch = 2, .seq = 48};
  c.sharding.stage = stage;
  c.sharding.wrap = {.kind = WrapKind::kTransformerBased,
                     .transformer_cls_names_to_wrap = {"GPT2Block", "LlamaDecoderLayer"}};
  c.sharding.overlap = false;
  return c;
}

inline MemoryOptimizer adamw() {
  return {kernels::OptimAlgo::kAdamW, {.lr = 1e-3, .weight_decay = 0.1}};
}

struct Measured {
  int64_t peak = 0;           // the allocator's peak over the second step, less the baseline
  int64_t between_steps = 0;  // allocated after it, less the baseline
};

// Builds the model (initialized: real values), its ShardedModel and AdamW, runs two steps
// (G = micro_batches x W micro-batches each, rank r running r, r + W, ...) and measures the
// second: the allocator's peak from a reset_peak() just before it, less what was allocated
// before the model existed (this process's other tensors) and less the step's input batch
// (ids and labels, the caller's tensors, not the model's). The same step estimate_memory runs.
inline Measured measure(const Case& c, const std::shared_ptr<ProcessGroup>& pg) {
  Allocator& alloc = get_allocator(kCPU);
  const auto base = static_cast<int64_t>(alloc.stats().current_bytes);
  const int world = pg->size(), rank = pg->rank();
  const MemoryWorkload& w = c.workload;
  Measured m;
  {
    ShardedModel sm(c.factory()(), pg, c.sharding);
    nn::AdamW opt(sm.optimizer_parameters(), adamw().options);
    nn::CrossEntropyLoss ce;
    const auto step = [&](int64_t s) {
      std::vector<std::pair<Tensor, Tensor>> batches;
      int64_t batch_bytes = 0;
      for (int64_t j = 0; j < w.micro_batches; ++j) {
        Generator gen(1000 * static_cast<uint64_t>(s) + static_cast<uint64_t>(j * world + rank));
        Tensor ids = Tensor::empty({w.batch, w.seq}, DType::kI64);
        Tensor labels = Tensor::empty({w.batch, w.seq}, DType::kI64);
        gen.fill_randint(ids.data<int64_t>(), ids.numel(), 0, c.vocab());
        gen.fill_randint(labels.data<int64_t>(), labels.numel(), 0, c.vocab());
        batch_bytes += static_cast<int64_t>(ids.nbytes() + labels.nbytes());
        batches.emplace_back(ids, labels);
      }
      alloc.reset_peak();
      for (auto& [ids, labels] : batches) {
        auto scope =
            w.autocast == DType::kF32 ? amp::AutocastScope::noop() : amp::AutocastScope(w.autocast);
        ce.forward(sm.forward(ids), labels);
        sm.backward(ce.backward());
      }
      sm.finish_gradients(1.0 / static_cast<double>(w.micro_batches * world));
      if (w.clip_grad_norm) sm.clip_grad_norm_(1.0);
      opt.step();
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

// The estimate for the same case: the same step on the meta device over a 'meta' group.
inline MemoryEstimate predict(const Case& c, int world) {
  return estimate_memory(c.factory(), c.sharding, world, c.workload, adamw());
}

// |measured - predicted| as a fraction of measured.
inline double relative_error(int64_t measured, int64_t predicted) {
  return std::fabs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
}

inline std::string report(const Case& c, int world, int rank, const Measured& m,
                          const MemoryEstimate& e) {
  char line[256];
  std::snprintf(line, sizeof line,
                "%-40s W %d rank %d: peak measured %9lld predicted %9lld (%+.2f%%), between "
                "steps %9lld / %9lld, at %s",
                c.name.c_str(), world, rank, static_cast<long long>(m.peak),
                static_cast<long long>(e.peak_bytes),
                100.0 * static_cast<double>(e.peak_bytes - m.peak) / static_cast<double>(m.peak),
                static_cast<long long>(m.between_steps), static_cast<long long>(e.between_steps),
                e.peak_at.c_str());
  return line;
}

}  // namespace braid::shard::memory_test
