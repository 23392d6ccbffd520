// The memory estimate's API without training: the GPT activation formula against its closed
// form, the generic estimate as an upper bound of the replay, units from a meta-built model,
// the options, the table, the errors, and the worked example of docs/memory.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/shard/memory.h"
#include "memory_test_util.h"

namespace braid::shard {
namespace {

using ::testing::HasSubstr;

const WrapPolicy kBlocks{.kind = WrapKind::kTransformerBased,
                         .transformer_cls_names_to_wrap = {"GPT2Block"}};

std::vector<UnitSize> gpt_units(const nn::GPTConfig& c, int world, WrapPolicy wrap = kBlocks) {
  nn::InitEmptyWeights empty;
  auto gpt = std::make_shared<nn::GPT>(c);
  return unit_sizes(make_units(*gpt, wrap, world));
}

// docs/memory.md, "Activations": the backward's peak holds every block's saved tensors, so one
// more block adds exactly them: in f32, its input, ln_1's output, q|k|v (3), the attention's
// output, the residual h, ln_2's output (8 N d in all), c_fc's and GELU's outputs (2 N inner)
// and the two LayerNorms' mean and rstd (4 N), N = batch x seq; with activation checkpointing,
// only the block's input (N d).
TEST(GptActivations, OneMoreBlockAddsItsSavedTensors) {
  const GptWorkload w{.batch = 2, .seq = 48};
  const int64_t n = w.batch * w.seq;
  nn::GPTConfig c = memory_test::small_gpt(3);
  const int64_t d = c.n_embd, inner = c.inner();
  nn::GPTConfig deeper = memory_test::small_gpt(4);
  EXPECT_EQ(gpt_activation_bytes(deeper, w) - gpt_activation_bytes(c, w),
            4 * (8 * n * d + 2 * n * inner + 4 * n));
  c.activation_checkpointing = deeper.activation_checkpointing = true;
  EXPECT_EQ(gpt_activation_bytes(deeper, w) - gpt_activation_bytes(c, w), 4 * n * d);
  // Checkpointing saves, autocast halves the matmul outputs, bf16 parameters halve the stream.
  nn::GPTConfig plain = memory_test::small_gpt(4);
  const int64_t f32 = gpt_activation_bytes(plain, w);
  EXPECT_LT(gpt_activation_bytes(deeper, w), f32);
  EXPECT_LT(gpt_activation_bytes(plain, {.batch = 2, .seq = 48, .autocast = DType::kBF16}), f32);
  EXPECT_LT(gpt_activation_bytes(plain, w, DType::kBF16), f32);
}

// docs/memory.md, "The GPT's peak": in f32 without dropout the activations peak in the loss's
// backward, holding every block's saved tensors, ln_f's (input, mean, rstd) and the head's
// input, wpe's position ids, the logits and log-sum-exps the loss saved, and the loss's scale
// and the logits' gradient.
TEST(GptActivations, F32PeakClosedForm) {
  for (int64_t layers : {1, 3}) {
    for (GptWorkload w : {GptWorkload{.batch = 2, .seq = 48}, GptWorkload{.batch = 3, .seq = 64}}) {
      const nn::GPTConfig c = memory_test::small_gpt(layers);
      const int64_t n = w.batch * w.seq, d = c.n_embd, inner = c.inner(), v = c.vocab_size;
      EXPECT_EQ(gpt_activation_bytes(c, w), 4 * layers * (8 * n * d + 2 * n * inner + 4 * n) +
                                                8 * n * d + 16 * n + 8 * n * v + 8 * w.seq)
          << layers << " layers, " << n << " tokens";
    }
  }
}

// estimate_memory holds the activation peak for the whole backward and every root gradient from
// its start: never below the layer-by-layer replay, at every stage.
TEST(EstimateMemory, GenericEstimateBoundsTheReplay) {
  const nn::GPTConfig c = memory_test::small_gpt();
  const GptWorkload w{.batch = 2, .seq = 48};
  for (ZeroStage s : {ZeroStage::k0, ZeroStage::k1, ZeroStage::k2, ZeroStage::k3}) {
    for (int world : {1, 4}) {
      MemoryOptions mo{.stage = s, .world_size = world};
      const auto units = gpt_units(c, world);
      const MemoryEstimate exact = estimate_gpt_memory(c, w, units, mo);
      const MemoryEstimate bound = estimate_memory(units, mo, gpt_activation_bytes(c, w));
      EXPECT_GE(bound.allocator_peak, exact.allocator_peak) << int(s) << " W " << world;
      EXPECT_LT(bound.allocator_peak, 2 * exact.allocator_peak) << int(s) << " W " << world;
      EXPECT_EQ(bound.between_steps.total(), exact.between_steps.total());
    }
  }
}

// Between steps a rank holds, per element of a unit's padded flat buffer: stage 3 its f32
// shard and two AdamW moments (12 bytes / W); stages 1-2 also the param_dtype flat buffer;
// stage 0 the parameters themselves and their moments (12 bytes per element, unpadded).
TEST(EstimateMemory, ResidentStateByStage) {
  const nn::GPTConfig c = memory_test::small_gpt();
  const int world = 8;
  const auto units = gpt_units(c, world);
  int64_t padded = 0, numel = 0;
  for (const auto& u : units) padded += u.padded, numel += u.numel;
  const GptWorkload w{.batch = 1, .seq = 16};
  const auto between = [&](ZeroStage s, DType pd) {
    MemoryOptions mo{.stage = s, .world_size = world, .param_dtype = pd};
    return estimate_gpt_memory(c, w, units, mo).between_steps;
  };
  EXPECT_EQ(between(ZeroStage::k3, DType::kF32).total(), 12 * padded / world);
  EXPECT_EQ(between(ZeroStage::k1, DType::kBF16).total(), 12 * padded / world + 2 * padded);
  EXPECT_EQ(between(ZeroStage::k2, DType::kF32).total(), 12 * padded / world + 4 * padded);
  EXPECT_EQ(between(ZeroStage::k0, DType::kF32).total(), 12 * numel);
  const MemoryBreakdown b0 = between(ZeroStage::k0, DType::kBF16);  // + f32 masters
  EXPECT_EQ(b0.parameters, 2 * numel);
  EXPECT_EQ(b0.master_shards, 4 * numel);
  EXPECT_EQ(b0.optimizer_state, 8 * numel);
}

TEST(EstimateMemory, UnitsOfAMetaBuiltModel) {
  const nn::GPTConfig c = memory_test::small_gpt();
  Allocator& meta = get_allocator(kMeta);
  const auto before = static_cast<int64_t>(meta.stats().current_bytes);
  nn::InitEmptyWeights empty;
  auto gpt = std::make_shared<nn::GPT>(c);
  // The meta allocator counts the bytes a CPU model would hold (the tied head once).
  EXPECT_EQ(static_cast<int64_t>(meta.stats().current_bytes) - before, 4 * gpt->num_parameters());
  const auto units = unit_sizes(make_units(*gpt, kBlocks, 4));
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units[0].name, "transformer.h.0");
  EXPECT_EQ(units[3].name, "");
  EXPECT_EQ(units[3].params.size(), 4u);  // wte, wpe, ln_f.weight, ln_f.bias
  EXPECT_EQ(units[3].numel, (c.vocab_size + c.n_positions + 2) * c.n_embd);
  EXPECT_EQ(units[3].padded, padded_numel(units[3].numel, 4));
}

TEST(EstimateMemory, OptionsFromShardingOptionsAndOptimizers) {
  ShardingOptions so;
  so.stage = ZeroStage::k0;
  so.overlap = false;
  so.ddp.comm_hook = DDPCommunicationHookType::kBf16;
  so.ddp.bucket_cap_mb = 5;
  so.ddp.gradient_as_bucket_view = true;
  const MemoryOptions m = MemoryOptions::from(so, 4);
  EXPECT_EQ(m.reduce_dtype, DType::kBF16);  // the hook's dtype is stage 0's reduce_dtype
  EXPECT_EQ(m.world_size, 4);
  EXPECT_FALSE(m.overlap);
  EXPECT_EQ(m.bucket_cap_mb, 5);
  EXPECT_TRUE(m.gradient_as_bucket_view);
  so.stage = ZeroStage::k3;
  so.shard_group_size = 2;
  so.reshard_after_forward = false;
  const MemoryOptions m3 = MemoryOptions::from(so, 4);
  EXPECT_EQ(m3.reduce_dtype, DType::kF32);
  EXPECT_EQ(m3.shard_group_size, 2);
  EXPECT_FALSE(m3.reshard_after_forward);

  using kernels::OptimAlgo;
  EXPECT_EQ(OptimizerMemory::of(OptimAlgo::kSgd, {}).states, 0);
  EXPECT_EQ(OptimizerMemory::of(OptimAlgo::kSgd, {.momentum = 0.9}).states, 1);
  EXPECT_EQ(OptimizerMemory::of(OptimAlgo::kAdam, {}).states, 2);
  EXPECT_EQ(OptimizerMemory::of(OptimAlgo::kAdamW, {.amsgrad = true}).states, 3);
  EXPECT_EQ(OptimizerMemory::of(OptimAlgo::kLion, {}).states, 1);
  // An f32 master per stepped element adds 4 bytes to the resident state.
  const auto units = gpt_units(memory_test::small_gpt(), 1);
  MemoryOptions plain{.stage = ZeroStage::k0};
  MemoryOptions master = plain;
  master.optimizer.master = true;
  const int64_t a = estimate_memory(units, plain, 0).between_steps.total();
  const int64_t b = estimate_memory(units, master, 0).between_steps.total();
  int64_t numel = 0;
  for (const auto& u : units) numel += u.numel;
  EXPECT_EQ(b - a, 4 * numel);
}

TEST(EstimateMemory, TableNamesEveryTerm) {
  const nn::GPTConfig c = memory_test::small_gpt();
  const MemoryEstimate e = estimate_gpt_memory(c, {.batch = 2, .seq = 48}, gpt_units(c, 2),
                                               {.stage = ZeroStage::k3, .world_size = 2});
  const std::string t = e.str();
  for (const char* row :
       {"peak per rank", "parameters", "master shards", "gathered units", "gradients",
        "reduction buffers", "accumulators", "reduced gradients", "optimizer state", "activations",
        "autocast cache", "host buffers", "total"}) {
    EXPECT_THAT(t, HasSubstr(row));
  }
  EXPECT_EQ(e.peak_bytes(), e.peak.total());
  EXPECT_GT(e.peak.gathered, 0);
  EXPECT_GE(e.peak_bytes(), e.allocator_peak);
}

TEST(EstimateMemory, BadInputIsAnError) {
  const nn::GPTConfig c = memory_test::small_gpt();
  const GptWorkload w{.batch = 2, .seq = 48};
  const auto expect_error = [](auto fn, ErrorKind kind, const char* text) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind);
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  // Units the GPT replay does not know.
  WrapPolicy size{.kind = WrapKind::kSizeBased, .min_num_params = 3000};
  expect_error([&] { estimate_gpt_memory(c, w, gpt_units(c, 1, size), {}); },
               ErrorKind::kNotSupported, "use estimate_memory()");
  // Units cut for another world size.
  expect_error([&] { estimate_gpt_memory(c, w, gpt_units(c, 1), {.world_size = 128}); },
               ErrorKind::kInvalidArgument, "another world size");
  expect_error(
      [&] {
        estimate_gpt_memory(c, w, gpt_units(c, 4),
                            {.stage = ZeroStage::k0, .world_size = 4, .shard_group_size = 2});
      },
      ErrorKind::kInvalidArgument, "HSDP");
  expect_error([&] { estimate_gpt_memory(c, w, gpt_units(c, 1), {.param_dtype = DType::kI32}); },
               ErrorKind::kInvalidArgument, "must be f32, bf16 or f16");
  expect_error([&] { estimate_gpt_memory(c, {.batch = 1, .seq = 65}, gpt_units(c, 1), {}); },
               ErrorKind::kInvalidArgument, "n_positions");
  expect_error([&] { estimate_memory(gpt_units(c, 1), {}, -1); }, ErrorKind::kInvalidArgument,
               "activation_bytes");
  expect_error([&] { estimate_memory({}, {}, 0); }, ErrorKind::kInvalidArgument, "no units");
}

// docs/memory.md, "Worked example": GPT-2 124M (transformers' defaults, dropout 0.1), one
// micro-batch of 4 x 1024 tokens per rank, AdamW, f32 reduction, 8 ranks, no communication
// thread; bf16 parameters (FSDP MixedPrecision; stage 0 with f32 masters), then variants.
// Prints the tables the page shows.
TEST(EstimateMemory, Gpt2On8Ranks) {
  nn::GPTConfig c;  // vocab 50257, 1024 positions, 768 wide, 12 layers
  const auto units = gpt_units(c, 8);
  const auto run = [&](DType pd, DType autocast, bool checkpointing) {
    c.activation_checkpointing = checkpointing;
    std::vector<MemoryEstimate> e;
    for (int s = 0; s < 4; ++s) {
      MemoryOptions mo{.stage = ZeroStage(s), .world_size = 8, .param_dtype = pd};
      e.push_back(
          estimate_gpt_memory(c, {.batch = 4, .seq = 1024, .autocast = autocast}, units, mo));
    }
    return e;
  };
  const auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  const std::vector<MemoryEstimate> bf16 = run(DType::kBF16, DType::kF32, false);
  for (int s = 0; s < 4; ++s) std::printf("stage %d\n%s\n", s, bf16[s].str().c_str());
  const struct {
    const char* name;
    DType pd, autocast;
    bool checkpointing;
  } variants[] = {{"bf16 parameters", DType::kBF16, DType::kF32, false},
                  {"bf16 parameters, checkpointing", DType::kBF16, DType::kF32, true},
                  {"f32", DType::kF32, DType::kF32, false},
                  {"f32 parameters, bf16 autocast", DType::kF32, DType::kBF16, false}};
  for (const auto& v : variants) {
    const std::vector<MemoryEstimate> e = run(v.pd, v.autocast, v.checkpointing);
    std::printf("%-32s", v.name);
    for (const auto& x : e)
      std::printf(" | %8.1f / %7.1f", mib(x.peak_bytes()), mib(x.between_steps.total()));
    std::printf("\n");
  }
  EXPECT_LT(bf16[3].peak_bytes(), bf16[2].peak_bytes());
  EXPECT_EQ(bf16[2].peak_bytes(), bf16[1].peak_bytes());  // braid frees full gradients in both
  EXPECT_LT(bf16[1].peak_bytes(), bf16[0].peak_bytes());
  EXPECT_LT(bf16[3].between_steps.total(), bf16[1].between_steps.total());
  EXPECT_LT(bf16[1].between_steps.total(), bf16[0].between_steps.total());
}

}  // namespace
}  // namespace braid::shard
