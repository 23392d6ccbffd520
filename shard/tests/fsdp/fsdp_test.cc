// ShardedModel on a one-rank group: parameter placement per stage, the full state dict, and
// the errors. The multi-rank equivalence runs under braid launch (run_fsdp_equivalence.sh).
#include "braid/shard/fsdp.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "../../src/checkpoint_internal.h"
#include "braid/nn/gpt.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/optim.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"

namespace braid::shard {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<ProcessGroup> one_rank_group() {
  ProcessGroupOptions o;
  o.backend = "shm";
  o.store = std::make_shared<InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  return ProcessGroup::create(o);
}

std::shared_ptr<nn::GPT> tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.n_positions = 8;
  c.n_embd = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
  auto gpt = std::make_shared<nn::GPT>(c);
  Generator gen(3);
  gpt->init_weights(gen);
  return gpt;
}

const WrapPolicy kBlocks{.kind = WrapKind::kTransformerBased,
                         .transformer_cls_names_to_wrap = {"GPT2Block"}};

TEST(ShardedModel, StageThreeHoldsOnlyShardsBetweenPassesAndGathersForAPass) {
  auto gpt = tiny_gpt();
  NamedTensors before;
  for (auto& [n, t] : gpt->state_dict()) before.emplace_back(n, t.clone());
  ShardedModel sm(gpt, one_rank_group(), {.stage = ZeroStage::k3, .wrap = kBlocks});
  EXPECT_EQ(sm.units().size(), 3u);
  EXPECT_FALSE(gpt->get_submodule("transformer.h.0.attn.c_attn").param("weight").data().defined());
  EXPECT_EQ(sm.optimizer_parameters().size(), 3u);

  Tensor ids = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 6}, DType::kI64);
  Tensor logits = sm.forward(ids);
  EXPECT_EQ(logits.shape(), (Shape{1, 6, 11}));
  EXPECT_FALSE(gpt->get_submodule("transformer.h.1.mlp.c_fc").param("weight").data().defined());
  sm.backward(Tensor::ones(logits.shape()));
  sm.finish_gradients(1.0);
  for (auto& p : sm.optimizer_parameters()) EXPECT_TRUE(p.grad().defined());

  NamedTensors after = sm.full_state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_TRUE(equal(after[i].second, before[i].second)) << after[i].first;
  }
}

// ShardingOptions::activation_checkpointing: every unit's layer but the root recomputes its
// forward; the gradients keep their bits.
TEST(ShardedModel, ActivationCheckpointingOptionRecomputesEveryWrappedBlock) {
  const Tensor ids = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 6}, DType::kI64);
  std::vector<std::vector<double>> grads[2];
  for (bool on : {false, true}) {
    auto gpt = tiny_gpt();
    ShardingOptions o{.stage = ZeroStage::k3, .wrap = kBlocks};
    o.activation_checkpointing = on;
    ShardedModel sm(gpt, one_rank_group(), o);
    for (const Unit& u : sm.units()) {
      EXPECT_EQ(u.layer->checkpointing(), on && u.layer != gpt.get()) << u.name;
    }
    Tensor logits = sm.forward(ids);
    sm.backward(Tensor::ones(logits.shape()));
    sm.finish_gradients(1.0);
    for (auto& p : sm.optimizer_parameters()) grads[on].push_back(p.grad().to_vector());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(ShardedModel, StagesZeroToTwoKeepFullParametersAndLoadFullStateDicts) {
  for (ZeroStage stage : {ZeroStage::k0, ZeroStage::k1, ZeroStage::k2}) {
    auto gpt = tiny_gpt();
    ShardedModel sm(gpt, one_rank_group(), {.stage = stage, .wrap = kBlocks});
    EXPECT_TRUE(gpt->get_submodule("transformer.h.0.attn.c_attn").param("weight").data().defined());
    NamedTensors sd = sm.full_state_dict();
    for (auto& [n, t] : sd) t.fill_(0.5);
    sm.load_full_state_dict(sd);
    EXPECT_EQ(gpt->get_submodule("transformer.ln_f").param("bias").data().to_vector()[3], 0.5);
    if (stage != ZeroStage::k0) {
      EXPECT_EQ(sm.optimizer_parameters()[0].data().to_vector()[0], 0.5);
    }
  }
}

TEST(ShardedModel, Bf16ParametersComputeButTheStateDictHoldsTheF32Masters) {
  for (ZeroStage stage : {ZeroStage::k1, ZeroStage::k3}) {
    auto gpt = tiny_gpt();
    NamedTensors before;
    for (auto& [n, t] : gpt->state_dict()) before.emplace_back(n, t.clone());
    ShardedModel sm(
        gpt, one_rank_group(),
        {.stage = stage, .wrap = kBlocks, .precision = amp::PrecisionPolicy::from("bf16")});
    Tensor logits = sm.forward(Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64));
    EXPECT_EQ(logits.dtype(), DType::kBF16);
    sm.backward(Tensor::ones(logits.shape(), DType::kBF16));
    sm.finish_gradients(1.0);
    EXPECT_EQ(sm.optimizer_parameters()[0].grad().dtype(), DType::kF32);
    NamedTensors after = sm.full_state_dict();
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].second.dtype(), DType::kF32);
      EXPECT_TRUE(equal(after[i].second, before[i].second)) << after[i].first;
    }
  }
}

// keep_in_fp32_modules under sharding (docs/sharding.md, "Precision"): a unit whose
// parameters are all kept is gathered, held and reduced in f32; the other units in the
// policy's dtype; stage 0 keeps each kept parameter f32 (param_dtype_for) without a master.
TEST(ShardedModel, KeepInFp32UnitsAreGatheredAndReducedInF32) {
  const WrapPolicy blocks_and_norms{.kind = WrapKind::kTransformerBased,
                                    .transformer_cls_names_to_wrap = {"GPT2Block", "LayerNorm"}};
  amp::PrecisionPolicy bf16 = amp::PrecisionPolicy::from("bf16");
  bf16.keep_in_fp32_modules = {"ln_f"};
  for (ZeroStage stage : {ZeroStage::k0, ZeroStage::k1, ZeroStage::k2, ZeroStage::k3}) {
    SCOPED_TRACE(static_cast<int>(stage));
    auto gpt = tiny_gpt();
    NamedTensors before;
    for (auto& [n, t] : gpt->state_dict()) before.emplace_back(n, t.clone());
    ShardedModel sm(gpt, one_rank_group(),
                    {.stage = stage,
                     .wrap = blocks_and_norms,
                     .reshard_after_forward = false,
                     .precision = bf16});
    nn::Parameter ln_f = gpt->get_submodule("transformer.ln_f").param("weight");
    nn::Parameter c_fc = gpt->get_submodule("transformer.h.0.mlp.c_fc").param("weight");
    Tensor logits = sm.forward(Tensor::from_vector({1, 2, 3}, {1, 3}, DType::kI64));
    // Stage 3 keeps the units gathered until their backward (reshard_after_forward false).
    EXPECT_EQ(ln_f.data().dtype(), DType::kF32);
    EXPECT_EQ(c_fc.data().dtype(), DType::kBF16);
    sm.backward(Tensor::ones(logits.shape(), logits.dtype()));
    sm.finish_gradients(1.0);
    if (stage == ZeroStage::k0) {
      // Masters only for the 16-bit parameters: ln_f steps itself.
      const auto opt = sm.optimizer_parameters();
      EXPECT_TRUE(std::any_of(opt.begin(), opt.end(),
                              [&](const nn::Parameter& p) { return p.id() == ln_f.id(); }));
      EXPECT_FALSE(std::any_of(opt.begin(), opt.end(),
                               [&](const nn::Parameter& p) { return p.id() == c_fc.id(); }));
    }
    for (auto& p : sm.optimizer_parameters()) {
      EXPECT_EQ(p.data().dtype(), DType::kF32);
      EXPECT_TRUE(p.grad().defined());
    }
    NamedTensors after = sm.full_state_dict();
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].second.dtype(), DType::kF32) << after[i].first;
      EXPECT_TRUE(equal(after[i].second, before[i].second)) << after[i].first;
    }
  }
}

TEST(ShardedModel, AUnitMixingKeptAndOtherParametersIsRefused) {
  amp::PrecisionPolicy bf16 = amp::PrecisionPolicy::from("bf16");
  bf16.keep_in_fp32_modules = {"ln_f"};
  auto gpt = tiny_gpt();
  // kBlocks leaves ln_f in the root unit with the embeddings.
  EXPECT_THAT(
      [&] {
        ShardedModel sm(gpt, one_rank_group(),
                        {.stage = ZeroStage::k3, .wrap = kBlocks, .precision = bf16});
      },
      ::testing::ThrowsMessage<Error>(
          ::testing::AllOf(HasSubstr("unit '<root>'"), HasSubstr("'transformer.ln_f.weight'"),
                           HasSubstr("'transformer.wte.weight'"),
                           HasSubstr("Wrap the kept module as its own unit"))));
  // Stage 0 keeps per parameter, and an all-f32 policy has nothing to keep: both are fine.
  EXPECT_NO_THROW(ShardedModel(tiny_gpt(), one_rank_group(),
                               {.stage = ZeroStage::k0, .wrap = kBlocks, .precision = bf16}));
  amp::PrecisionPolicy f32;
  f32.keep_in_fp32_modules = {"ln_f"};
  EXPECT_NO_THROW(ShardedModel(tiny_gpt(), one_rank_group(),
                               {.stage = ZeroStage::k3, .wrap = kBlocks, .precision = f32}));
}

TEST(ShardedModel, PrecisionPolicyIsCheckedFieldByField) {
  auto pg = one_rank_group();
  const auto refused = [&](amp::PrecisionPolicy p, const std::string& what) {
    EXPECT_THAT([&] { ShardedModel sm(tiny_gpt(), pg, {.precision = p}); },
                ::testing::ThrowsMessage<Error>(HasSubstr(what)));
  };
  refused({.param_dtype = DType::kF64}, "precision.param_dtype is f64; expected f32, bf16 or f16");
  refused({.reduce_dtype = DType::kF8E4M3}, "precision.reduce_dtype is f8e4m3; expected f32");
  refused({.master_dtype = DType::kBF16}, "precision.master_dtype is bf16; expected f32");
  refused({.state_dtype = DType::kF16}, "precision.state_dtype is f16; expected f32");
}

TEST(ShardedModel, HeldBytesCountFlatBuffersShardsAndAccumulators) {
  const auto padded_sum = [](const ShardedModel& sm) {
    int64_t n = 0;
    for (auto& u : sm.units()) n += u.padded;
    return n;
  };
  auto g3 = tiny_gpt();
  ShardedModel s3(g3, one_rank_group(), {.stage = ZeroStage::k3, .wrap = kBlocks});
  EXPECT_EQ(s3.held_bytes(), 4 * padded_sum(s3));  // the f32 shards only (one rank: whole)
  auto g1 = tiny_gpt();
  ShardedModel s1(
      g1, one_rank_group(),
      {.stage = ZeroStage::k1, .wrap = kBlocks, .precision = {.param_dtype = DType::kBF16}});
  EXPECT_EQ(s1.held_bytes(), (2 + 4) * padded_sum(s1));  // bf16 flat + f32 shard
  Tensor logits = s1.forward(Tensor::from_vector({1, 2}, {1, 2}, DType::kI64));
  s1.backward(Tensor::ones(logits.shape(), logits.dtype()));
  s1.finish_gradients(1.0);  // hands the accumulator over: not held any more
  EXPECT_EQ(s1.held_bytes(), (2 + 4) * padded_sum(s1));
}

TEST(ShardedModel, BadUseIsAnError) {
  auto pg = one_rank_group();
  {
    auto gpt = tiny_gpt();
    ShardedModel sm(gpt, pg, {.stage = ZeroStage::k2, .wrap = kBlocks});
    EXPECT_THAT([&] { sm.finish_gradients(1.0); },
                ::testing::ThrowsMessage<Error>(HasSubstr("has no gradient")));
  }
  {
    auto gpt = tiny_gpt();
    gpt->to(DType::kBF16);
    EXPECT_THAT([&] { ShardedModel sm(gpt, pg, {}); },
                ::testing::ThrowsMessage<Error>(HasSubstr("must be a defined f32 CPU tensor")));
  }
  {
    auto gpt = tiny_gpt();
    gpt->get_submodule("transformer.ln_f").param("weight").set_requires_grad(false);
    EXPECT_THAT([&] { ShardedModel sm(gpt, pg, {.stage = ZeroStage::k1}); },
                ::testing::ThrowsMessage<Error>(HasSubstr("does not require grad")));
  }
  {
    auto gpt = tiny_gpt();
    EXPECT_THAT([&] { ShardedModel sm(gpt, pg, {.precision = {.reduce_dtype = DType::kI32}}); },
                ::testing::ThrowsMessage<Error>(
                    HasSubstr("precision.reduce_dtype is i32; expected f32, bf16 or f16")));
  }
  EXPECT_THROW(zero_stage_from_int(4), Error);
}

// TrainingState beside a sharded checkpoint: scheduler, GradScaler and RNG states round-trip;
// asking for a state that was not saved is an error naming it.
TEST(ShardedModel, CheckpointsCarryTheSchedulerScalerAndRngStates) {
  const auto folder =
      std::filesystem::temp_directory_path() / ("braid_fsdp_state_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  auto pg = one_rank_group();
  ShardedModel sm(tiny_gpt(), pg, {.stage = ZeroStage::k3, .wrap = kBlocks});
  nn::AdamW opt(sm.optimizer_parameters(), {.lr = 1e-3});
  nn::LRScheduler sched(opt, nn::SchedulerType::kLinear, {.num_training_steps = 10});
  for (int i = 0; i < 3; ++i) sched.step();
  amp::GradScaler scaler({.init_scale = 1024.0});
  scaler.update(256.0);
  default_generator(kCPU).manual_seed(99);
  std::vector<float> draw(4);
  default_generator(kCPU).fill_uniform(draw.data(), 4);
  const auto rng = default_generator(kCPU).get_state();
  sm.save_checkpoint(folder, &opt, {}, {.scheduler = &sched, .scaler = &scaler});

  nn::AdamW opt2(sm.optimizer_parameters(), {.lr = 1e-3});
  nn::LRScheduler sched2(opt2, nn::SchedulerType::kLinear, {.num_training_steps = 10});
  amp::GradScaler scaler2({.init_scale = 1024.0});
  default_generator(kCPU).manual_seed(1);
  sm.load_checkpoint(folder, &opt2, {.scheduler = &sched2, .scaler = &scaler2});
  EXPECT_EQ(sched2.last_step(), 3);
  EXPECT_EQ(sched2.get_last_lr(), sched.get_last_lr());
  EXPECT_EQ(scaler2.get_scale(), 256.0);
  EXPECT_EQ(default_generator(kCPU).get_state(), rng);

  // Saved without them: loading a scheduler or a scaler is an error; RNG off loads nothing.
  sm.save_checkpoint(folder, &opt, {}, {.rng_states = false});
  EXPECT_THAT([&] { sm.load_checkpoint(folder, &opt2, {.scheduler = &sched2}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("holds no scheduler state")));
  EXPECT_THAT([&] { sm.load_checkpoint(folder, nullptr, {.scaler = &scaler2}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("holds no GradScaler state")));
  default_generator(kCPU).manual_seed(5);
  const auto before = default_generator(kCPU).get_state();
  sm.load_checkpoint(folder, &opt2);
  EXPECT_EQ(default_generator(kCPU).get_state(), before);
  std::filesystem::remove_all(folder);
}

// The optimizer state travels as JSON in index.json's metadata ("braid.optimizer"); a file
// whose text there is not that JSON used to let nlohmann's exceptions escape load_checkpoint
// (found while writing tests/fuzz's JSON targets, docs/fuzzing.md). Each is now kCorruptData.
TEST(ShardedModel, CorruptOptimizerStateInTheIndexIsCorruptData) {
  const auto folder =
      std::filesystem::temp_directory_path() / ("braid_fsdp_badopt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  auto pg = one_rank_group();
  ShardedModel sm(tiny_gpt(), pg, {.stage = ZeroStage::k3, .wrap = kBlocks});
  nn::AdamW opt(sm.optimizer_parameters(), {.lr = 1e-3});
  sm.save_checkpoint(folder, &opt);
  const auto index_path = folder / "index.json";
  const std::string good = read_file(index_path);
  for (const char* bad : {"{", "[]", R"({"step": "x"})", R"({"step": [1, "a"]})",
                          R"({"step": [], "param_groups": []})"}) {
    auto index = detail::parse_checkpoint_index(good, "index.json");
    index.metadata["braid.optimizer"] = bad;
    std::ofstream(index_path) << detail::format_checkpoint_index(index);
    nn::AdamW opt2(sm.optimizer_parameters(), {.lr = 1e-3});
    try {
      sm.load_checkpoint(folder, &opt2);
      ADD_FAILURE() << "loaded an optimizer state of " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorruptData) << bad << ": " << e.message();
      EXPECT_THAT(e.message(), HasSubstr("braid.optimizer")) << bad;
    }
  }
  std::filesystem::remove_all(folder);
}

// offload_param = nvme: the master shards are in files between uses, resident from
// finish_gradients to after_step, and the training result does not change.
TEST(ShardedModel, OffloadedMasterShardsLiveInFilesBetweenSteps) {
  const auto nvme =
      std::filesystem::temp_directory_path() / ("braid_fsdp_offload_" + std::to_string(::getpid()));
  std::filesystem::create_directories(nvme);
  auto pg = one_rank_group();
  auto train = [&](bool offload) {
    ShardingOptions o{.stage = ZeroStage::k3, .wrap = kBlocks};
    if (offload) o.offload_param = {.device = nn::OffloadDevice::kNvme, .nvme_path = nvme};
    ShardedModel sm(tiny_gpt(), pg, o);
    nn::AdamW opt(sm.optimizer_parameters(), {.lr = 1e-2});
    for (int step = 0; step < 2; ++step) {
      EXPECT_EQ(sm.held_bytes() == 0, offload);
      EXPECT_EQ(sm.optimizer_parameters()[0].data().numel() == 0, offload);
      Tensor logits = sm.forward(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 6}, DType::kI64));
      sm.backward(Tensor::ones(logits.shape()));
      sm.finish_gradients(1.0);
      EXPECT_GT(sm.optimizer_parameters()[0].data().numel(), 0);
      opt.step();
      opt.zero_grad();
      sm.after_step();
    }
    if (offload) {
      EXPECT_FALSE(std::filesystem::is_empty(nvme));
    }
    return sm.full_state_dict();
  };
  const NamedTensors plain = train(false), offloaded = train(true);
  ASSERT_EQ(plain.size(), offloaded.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(equal(plain[i].second, offloaded[i].second)) << plain[i].first;
  }
  EXPECT_TRUE(std::filesystem::is_empty(nvme));  // the store removed its files
  EXPECT_THAT(
      [&] {
        ShardedModel sm(tiny_gpt(), pg,
                        {.stage = ZeroStage::k1,
                         .offload_param = {.device = nn::OffloadDevice::kNvme, .nvme_path = nvme}});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("applies to ZeRO stage 3 only")));
  EXPECT_THAT(
      [&] {
        ShardedModel sm(
            tiny_gpt(), pg,
            {.offload_param = {.device = nn::OffloadDevice::kNvme, .nvme_path = nvme / "missing"}});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("offload_param_nvme_path")));
  std::filesystem::remove_all(nvme);
}

// HSDP: shard groups of consecutive ranks, replicate groups across them (DeviceMesh's row-major
// (dp_replicate, dp_shard) layout), and the options it refuses.
TEST(ShardedModel, HybridShardingBuildsShardAndReplicateGroups) {
  auto result = braid::testing::run_threads(4, [](int rank, int size, auto store) {
    auto pg = braid::testing::make_group(rank, size, store);
    auto gpt = tiny_gpt();
    ShardedModel sm(gpt, pg, {.stage = ZeroStage::k3, .wrap = kBlocks, .shard_group_size = 2});
    const std::vector<int> shard = {rank / 2 * 2, rank / 2 * 2 + 1};
    const std::vector<int> replicas = {rank % 2, rank % 2 + 2};
    EXPECT_EQ(sm.shard_group()->global_ranks(), shard);
    ASSERT_NE(sm.replicate_group(), nullptr);
    EXPECT_EQ(sm.replicate_group()->global_ranks(), replicas);
    EXPECT_EQ(sm.world_size(), 4);
    // Each unit is cut in 2 shards, not 4.
    for (const auto& u : sm.units()) EXPECT_EQ(u.padded % (2 * kChunk), 0);
    EXPECT_EQ(sm.optimizer_parameters()[0].data().numel(), sm.units()[0].padded / 2);
    EXPECT_THAT([&] { ShardedModel bad(tiny_gpt(), pg, {.shard_group_size = 3}); },
                ::testing::ThrowsMessage<Error>(
                    HasSubstr("shard_group_size 3 must divide the world size 4")));
    EXPECT_THAT(
        [&] { ShardedModel bad(tiny_gpt(), pg, {.stage = ZeroStage::k0, .shard_group_size = 2}); },
        ::testing::ThrowsMessage<Error>(HasSubstr("(HSDP) needs stage 1-3")));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
  auto pg = one_rank_group();
  EXPECT_THAT(
      [&] { ShardedModel sm(tiny_gpt(), pg, {.stage = ZeroStage::k3, .deterministic = false}); },
      ::testing::ThrowsMessage<Error>(HasSubstr("applies to stage 0 and to HSDP")));
}

}  // namespace
}  // namespace braid::shard
