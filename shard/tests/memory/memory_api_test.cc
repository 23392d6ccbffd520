// The memory estimate's API (memory.h) without training on cpu: the resident state per stage
// against its closed form, the optimizer state per algorithm, the phases and the table, a
// ShardedModel of meta parameters refused outside a 'meta' group, the errors, and the worked
// examples of docs/memory.md (GPT-2 124M and a Llama-2-7B on 8 ranks).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "braid/comm/store.h"
#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/shard/memory.h"
#include "braid/shard/tensor_parallel.h"
#include "memory_test_util.h"

namespace braid::shard {
namespace {

using memory_test::Family;
using ::testing::HasSubstr;

const WrapPolicy kBlocks{.kind = WrapKind::kTransformerBased,
                         .transformer_cls_names_to_wrap = {"GPT2Block", "LlamaDecoderLayer"}};

ModelFactory small(Family f) {
  memory_test::Case c = memory_test::make_case("", ZeroStage::k3, f);
  return c.factory();
}

// The units' element counts, unpadded and padded for `world`, from a meta-built model.
std::pair<int64_t, int64_t> unit_numels(Family f, int world) {
  nn::InitEmptyWeights empty;
  auto model = small(f)();
  int64_t numel = 0, padded = 0;
  for (const Unit& u : make_units(*model, kBlocks, world)) numel += u.numel, padded += u.padded;
  return {numel, padded};
}

// Between steps a rank holds, per element of a unit's padded flat buffer: stage 3 its f32
// shard and two AdamW moments (12 bytes / W); stages 1-2 also the param_dtype flat buffer;
// stage 0 the parameters themselves and their moments (12 bytes per element, unpadded), and
// with 16-bit parameters their f32 masters.
TEST(EstimateMemory, ResidentStateByStage) {
  const int world = 8;
  for (Family f : {Family::kGpt, Family::kLlama}) {
    const auto [numel, padded] = unit_numels(f, world);
    const auto between = [&, f = f](ZeroStage s, DType pd) {
      ShardingOptions so{.stage = s, .wrap = kBlocks};
      so.precision.param_dtype = pd;
      so.overlap = false;
      return estimate_memory(small(f), so, world, {.batch = 1, .seq = 16}, memory_test::adamw());
    };
    EXPECT_EQ(between(ZeroStage::k3, DType::kF32).between_steps, 12 * padded / world);
    EXPECT_EQ(between(ZeroStage::k1, DType::kBF16).between_steps, 12 * padded / world + 2 * padded);
    EXPECT_EQ(between(ZeroStage::k2, DType::kF32).between_steps, 12 * padded / world + 4 * padded);
    const MemoryEstimate s0 = between(ZeroStage::k0, DType::kF32);
    EXPECT_EQ(s0.between_steps, 12 * numel);
    EXPECT_EQ(s0.model_bytes, 4 * numel);
    EXPECT_EQ(s0.optimizer_state_bytes, 8 * numel);
    const MemoryEstimate b0 = between(ZeroStage::k0, DType::kBF16);  // + f32 masters
    EXPECT_EQ(b0.model_bytes, 2 * numel + 4 * numel);
    EXPECT_EQ(b0.between_steps, 14 * numel);
  }
}

// What the optimizer's first step allocates, per element it steps (a stage-3 shard): SGD
// without momentum nothing, with momentum one f32 tensor, Adam / AdamW two, amsgrad three,
// Lion one.
TEST(EstimateMemory, OptimizerStateByAlgorithm) {
  const int world = 4;
  const auto [numel, padded] = unit_numels(Family::kGpt, world);
  (void)numel;
  using kernels::OptimAlgo;
  const struct {
    MemoryOptimizer opt;
    int states;
  } cases[] = {{{OptimAlgo::kSgd, {}}, 0},
               {{OptimAlgo::kSgd, {.momentum = 0.9}}, 1},
               {{OptimAlgo::kAdam, {}}, 2},
               {{OptimAlgo::kAdamW, {.amsgrad = true}}, 3},
               {{OptimAlgo::kLion, {}}, 1}};
  for (const auto& c : cases) {
    ShardingOptions so{.stage = ZeroStage::k3, .wrap = kBlocks};
    so.overlap = false;
    const MemoryEstimate e =
        estimate_memory(small(Family::kGpt), so, world, {.batch = 1, .seq = 8}, c.opt);
    EXPECT_EQ(e.optimizer_state_bytes, 4 * c.states * padded / world)
        << static_cast<int>(c.opt.algo) << " with " << c.states << " states";
  }
}

TEST(EstimateMemory, PhasesAndTable) {
  ShardingOptions so{.stage = ZeroStage::k3, .wrap = kBlocks};
  so.overlap = false;
  const MemoryEstimate e = estimate_memory(small(Family::kLlama), so, 2,
                                           {.batch = 2, .seq = 32, .clip_grad_norm = true});
  std::vector<std::string> names;
  int64_t most = 0;
  for (const MemoryPhase& p : e.phases) {
    names.push_back(p.name);
    most = std::max(most, p.peak_bytes);
    EXPECT_GE(p.peak_bytes, e.between_steps) << p.name;  // what stays is alive in every phase
  }
  EXPECT_EQ(names, (std::vector<std::string>{"forward", "backward", "finish_gradients",
                                             "clip_grad_norm_", "optimizer step", "after_step"}));
  EXPECT_EQ(e.peak_bytes, most);
  EXPECT_EQ(e.peak_at, "backward");  // activations and the gradients of a unit
  const std::string t = e.str();
  for (const char* row : {"peak per rank", "forward", "backward", "optimizer step", "between steps",
                          "sharded model", "optimizer state"}) {
    EXPECT_THAT(t, HasSubstr(row));
  }
}

// The estimate follows the code: more tokens, more activations; a larger world, smaller
// shards; stage 3 below stage 0.
TEST(EstimateMemory, FollowsTheWorkloadAndTheWorld) {
  ShardingOptions so{.stage = ZeroStage::k3, .wrap = kBlocks};
  so.overlap = false;
  const auto peak = [&](ZeroStage s, int world, int64_t seq) {
    ShardingOptions o = so;
    o.stage = s;
    return estimate_memory(small(Family::kGpt), o, world, {.batch = 2, .seq = seq}).peak_bytes;
  };
  EXPECT_LT(peak(ZeroStage::k3, 2, 16), peak(ZeroStage::k3, 2, 48));
  EXPECT_LT(peak(ZeroStage::k3, 8, 16), peak(ZeroStage::k3, 2, 16));
  EXPECT_LT(peak(ZeroStage::k3, 4, 32), peak(ZeroStage::k0, 4, 32));
}

// Activation checkpointing as a sharding option (every wrapped block) measures what the
// families' own config flag does, and less than without it.
TEST(EstimateMemory, ActivationCheckpointingIsAShardingOption) {
  for (Family f : {Family::kGpt, Family::kLlama}) {
    memory_test::Case c = memory_test::make_case("", ZeroStage::k3, f);
    c.sharding.overlap = false;
    const MemoryWorkload w{.batch = 2, .seq = 48};
    const int64_t plain = estimate_memory(c.factory(), c.sharding, 2, w).peak_bytes;
    ShardingOptions ac = c.sharding;
    ac.activation_checkpointing = true;
    const int64_t by_option = estimate_memory(c.factory(), ac, 2, w).peak_bytes;
    c.set_checkpointing(true);
    const int64_t by_config = estimate_memory(c.factory(), c.sharding, 2, w).peak_bytes;
    EXPECT_EQ(by_option, by_config);
    EXPECT_LT(by_option, plain);
  }
}

// A model built on meta without param_init is a measurement: refused on a real group, with the
// way out named.
TEST(EstimateMemory, MetaParametersNeedAMetaGroup) {
  std::shared_ptr<nn::Layer> model;
  {
    nn::InitEmptyWeights empty;
    model = small(Family::kGpt)();
  }
  ProcessGroupOptions po;
  po.backend = "shm";
  po.store = std::make_shared<InMemoryStore>();
  po.rank = 0;
  po.size = 1;
  try {
    ShardedModel sm(model, ProcessGroup::create(po), {.stage = ZeroStage::k3, .wrap = kBlocks});
    ADD_FAILURE() << "meta parameters on a shm group must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("'meta' backend"));
    EXPECT_THAT(e.what(), HasSubstr("param_init"));
  }
}

TEST(EstimateMemory, BadInputIsAnError) {
  const auto expect_error = [](auto fn, const char* text) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  const MemoryWorkload w{.batch = 1, .seq = 8};
  const ShardingOptions so{.stage = ZeroStage::k3, .wrap = kBlocks};
  expect_error([&] { estimate_memory({}, so, 1, w); }, "factory is empty");
  expect_error([&] { estimate_memory(small(Family::kGpt), so, 0, w); }, "world_size");
  expect_error([&] { estimate_memory(small(Family::kGpt), so, 1, {.batch = 0}); }, "batch");
  expect_error([&] { estimate_memory([] { return std::shared_ptr<nn::Layer>(); }, so, 1, w); },
               "returned null");
  ShardingOptions nvme = so;
  nvme.offload_param = {.device = nn::OffloadDevice::kNvme, .nvme_path = "/tmp"};
  expect_error([&] { estimate_memory(small(Family::kGpt), nvme, 1, w); }, "nvme");
  ShardingOptions hsdp = so;
  hsdp.shard_group_size = 3;
  expect_error([&] { estimate_memory(small(Family::kGpt), hsdp, 4, w); }, "shard_group_size");
  // The model's own checks still run on meta: a sequence past n_positions.
  try {
    estimate_memory(small(Family::kGpt), so, 1, {.batch = 1, .seq = 65});
    ADD_FAILURE() << "seq 65 > n_positions 64 must fail";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("n_positions"));
  }
}

// docs/memory.md, "Worked example": one micro-batch of 4 x 1024 tokens per rank, AdamW, 8
// ranks, no communication thread, bf16 parameters and reduction (FSDP MixedPrecision; stage 0
// with f32 masters); GPT-2 124M (transformers' defaults, dropout 0.1) and a Llama-2-7B. Prints
// the figures the page shows; the model is never allocated, so this runs in seconds.
TEST(EstimateMemory, WorkedExamplesOn8Ranks) {
  const auto run = [&](const char* name, const ModelFactory& build, int64_t seq) {
    std::vector<MemoryEstimate> e;
    for (int s = 0; s < 4; ++s) {
      ShardingOptions so{.stage = ZeroStage(s), .wrap = kBlocks};
      so.precision.param_dtype = so.precision.reduce_dtype = DType::kBF16;
      so.overlap = false;
      const auto t0 = std::chrono::steady_clock::now();
      e.push_back(estimate_memory(build, so, 8, {.batch = 4, .seq = seq}, memory_test::adamw()));
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s stage %d (%.1f s to measure)\n%s\n", name, s, secs, e.back().str().c_str());
    }
    EXPECT_LT(e[3].peak_bytes, e[2].peak_bytes) << name;
    EXPECT_LE(e[2].peak_bytes, e[1].peak_bytes) << name;
    EXPECT_LT(e[1].peak_bytes, e[0].peak_bytes) << name;
    EXPECT_LT(e[3].between_steps, e[1].between_steps) << name;
    EXPECT_LT(e[1].between_steps, e[0].between_steps) << name;
    return e;
  };
  run(
      "gpt2", [] { return std::make_shared<nn::GPT>(nn::GPTConfig{}); }, 1024);
  nn::LlamaConfig llama;  // transformers' defaults are Llama-2-7B's shapes
  llama.max_position_embeddings = 4096;
  const auto e = run(
      "llama-2-7b", [llama] { return std::make_shared<nn::Llama>(llama); }, 1024);
  // Stage 3 on 8 ranks: the 6.7e9 parameters' f32 shards and AdamW moments, 12 bytes / 8 each.
  EXPECT_GT(e[3].between_steps, static_cast<int64_t>(12.0 * 6.7e9 / 8));
  EXPECT_LT(e[3].between_steps, static_cast<int64_t>(12.0 * 6.8e9 / 8));
}

}  // namespace
}  // namespace braid::shard
