// The Accelerator in one process: accumulation windows, the lazy finish, and bad use. The
// multi-process behaviour is run_accelerator.sh's (label "accel;launch").
#include "braid/accel/accelerator.h"

#include <sched.h>

#include <cmath>
#include <fstream>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../config/config_test_util.h"
#include "braid/accel/env_utils.h"
#include "braid/comm/store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/nn/data_text.h"
#include "braid/nn/gpt.h"
#include "braid/nn/layers.h"
#include "braid/nn/optim.h"
#include "braid/tensor/safetensors.h"

namespace braid::accel {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::shared_ptr<ProcessGroup> one_rank() {
  ProcessGroupOptions o;
  o.backend = "shm";
  o.store = std::make_shared<InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  return ProcessGroup::create(o);
}

std::shared_ptr<nn::Linear> tiny_model() {
  Generator gen(1);
  return std::make_shared<nn::Linear>(4, 2, nn::Bias::kYes, nn::WeightLayout::kOutIn, DType::kF32,
                                      &gen);
}

TEST(Accelerator, OneProcessIsNoAndMainEverywhere) {
  Accelerator acc({}, one_rank());
  EXPECT_EQ(acc.distributed_type(), DistributedType::kNo);
  EXPECT_EQ(acc.num_processes(), 1);
  EXPECT_TRUE(acc.is_main_process());
  EXPECT_TRUE(acc.is_local_main_process());
  EXPECT_TRUE(acc.is_last_process());
  EXPECT_EQ(acc.gradient_accumulation_steps(), 1);
}

// The plan's options resolved once over the data-parallel ranks (shard::resolve).
TEST(Accelerator, ShardingSpecResolvesThePlan) {
  EXPECT_EQ(Accelerator({}, one_rank()).sharding_spec().strategy_name(), "NO_SHARD");
  AcceleratorConfig fsdp;
  fsdp.distributed_type = DistributedType::kFsdp;
  Accelerator acc(fsdp, one_rank());
  const shard::ShardingSpec& s = acc.sharding_spec();
  EXPECT_TRUE(s.shard_parameters);
  EXPECT_EQ(s.strategy_name(), "FULL_SHARD");
  EXPECT_EQ(s.world(), 1);
  AcceleratorConfig zero2;
  zero2.distributed_type = DistributedType::kDeepSpeed;
  zero2.deepspeed_plugin = DeepSpeedPlugin{};
  zero2.deepspeed_plugin->zero_stage = 2;
  EXPECT_EQ(Accelerator(zero2, one_rank()).sharding_spec().stage, shard::ZeroStage::k2);
}

TEST(Accelerator, AccumulationWindowsEndEveryNStepsAndAtTheLoadersEnd) {
  AcceleratorConfig cfg;
  cfg.gradient_accumulation_steps = 3;
  Accelerator acc(cfg, one_rank());
  auto model = acc.prepare_model(tiny_model());
  // 8 samples in batches of 1: windows of 3, 3, then 2 closed by the loader's end.
  nn::DataLoader loader(std::make_shared<nn::SyntheticDataset>(nn::SyntheticOptions{.size = 8}),
                        {.batch_size = 1});
  nn::DataLoader data = acc.prepare_data_loader(loader);
  std::string pattern;
  for (const Tree& batch : data) {
    auto scope = acc.accumulate(data);
    pattern += acc.sync_gradients() ? 'S' : '.';
    // sync_each_batch (braid's default) keeps the model syncing every micro-batch.
    EXPECT_TRUE(model->sharded().gradient_sync());
    (void)batch;
  }
  EXPECT_EQ(pattern, "..S..S.S");
}

TEST(Accelerator, SyncEachBatchFalseRunsTheWindowWithoutSync) {
  AcceleratorConfig cfg;
  GradientAccumulationPlugin plugin;
  plugin.num_steps = 2;
  plugin.sync_each_batch = false;
  cfg.gradient_accumulation_plugin = plugin;
  Accelerator acc(cfg, one_rank());
  auto model = acc.prepare_model(tiny_model());
  std::string pattern;
  for (int i = 0; i < 4; ++i) {
    auto scope = acc.accumulate();
    pattern += model->sharded().gradient_sync() ? 'S' : '.';
  }
  EXPECT_EQ(pattern, ".S.S");
}

TEST(Accelerator, TheStepAveragesTheWindowAndSkipsInsideIt) {
  AcceleratorConfig cfg;
  cfg.gradient_accumulation_steps = 2;
  Accelerator acc(cfg, one_rank());
  auto model = acc.prepare_model(tiny_model());
  nn::SGD opt(model->optimizer_parameters(), {.lr = 1.0});
  acc.prepare_optimizer(opt);
  const Tensor before = model->sharded().full_state_dict()[0].second.clone();
  Tensor x = Tensor::ones({1, 4}, DType::kF32);
  for (int i = 0; i < 2; ++i) {
    auto scope = acc.accumulate();
    Tensor y = model->forward(x);
    acc.backward(*model, Tensor::ones(y.shape(), DType::kF32));
    if (i == 0) {
      EXPECT_FALSE(acc.step(opt));  // inside the window: nothing
      EXPECT_THAT([&] { acc.clip_grad_norm_(*model, 1.0); },
                  ::testing::ThrowsMessage<Error>(HasSubstr("end of an accumulation window")));
    } else {
      EXPECT_TRUE(acc.step(opt));
    }
  }
  // Two identical micro-batches averaged: d(sum y)/dW = x = 1 for every weight: W -= 1.
  const Tensor after = model->sharded().full_state_dict()[0].second;
  for (int64_t i = 0; i < after.numel(); ++i) {
    EXPECT_FLOAT_EQ(after.data<float>()[i], before.data<float>()[i] - 1.0f);
  }
}

TEST(Accelerator, BadUseIsAnError) {
  Accelerator acc({}, one_rank());
  EXPECT_THAT([&] { acc.save_state(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("prepare a model first")));
  acc.prepare_model(tiny_model());
  EXPECT_THAT([&] { acc.save_state(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("automatic_checkpoint_naming")));
  EXPECT_THAT([&] { acc.load_state(std::filesystem::temp_directory_path() / "braid_no_such"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("is not a saved state")));
  EXPECT_THAT([&] { acc.register_for_checkpointing({}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("needs state_json")));
  auto scope = acc.accumulate();
  EXPECT_THAT([&] { acc.accumulate(); }, ::testing::ThrowsMessage<Error>(HasSubstr("do not nest")));
}

// MULTI_GPU is never run silently on the CPU: it is refused with why (here, where no GPU is
// visible, CUDA's reason; on a GPU machine, that GPU training is not available yet).
TEST(Accelerator, MultiGpuIsRefusedNotRunOnTheCpu) {
  AcceleratorConfig c;
  c.distributed_type = DistributedType::kMultiGpu;
  EXPECT_THAT([&] { Accelerator acc(c, one_rank()); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("distributed_type MULTI_GPU"), HasSubstr("use MULTI_CPU"))));
  try {
    Accelerator acc(c, one_rank());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  }
}

// Model parallelism's errors that one process can reach; the layouts themselves are
// run_accelerator.sh's "parallel" variant.
TEST(Accelerator, ModelParallelBadUseIsAnError) {
  AcceleratorConfig mp;
  mp.megatron_lm_plugin = MegatronLMPlugin{.tp_degree = 2};
  EXPECT_THAT([&] { Accelerator bad(mp, one_rank()); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("1 processes are not a multiple of tp_degree x pp_degree = 2 x 1")));

  Accelerator acc({}, one_rank());
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.n_positions = 8;
  c.n_embd = 8;
  c.n_layer = 1;
  c.n_head = 2;
  nn::GPT gpt(c);
  Generator gen(3);
  gpt.init_weights(gen);
  auto model = acc.prepare_model(std::make_shared<nn::GPT>(c));
  model->sharded().load_full_state_dict(gpt.state_dict());
  EXPECT_THAT([&] { model->pipeline(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not cut into pipeline stages")));
  nn::AdamW opt(model->optimizer_parameters(), {});
  acc.prepare_optimizer(opt);
  Tensor ids = Tensor::zeros({1, 4}, DType::kI64);
  {
    auto scope = acc.accumulate();
    EXPECT_THAT([&] { acc.train_step(*model, {ids}, {ids}); },
                ::testing::ThrowsMessage<Error>(HasSubstr("call it outside accumulate()")));
  }
  EXPECT_THAT(
      [&] {
        acc.train_step(*model, {ids, ids}, {ids});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("expected the same count")));
  // The right use: one window of two micro-batches, a finite norm, a step.
  const double loss = acc.train_step(*model, {ids, ids}, {ids, ids});
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_TRUE(acc.sync_gradients());
  EXPECT_TRUE(std::isfinite(acc.clip_grad_norm_(*model, 1.0)));
  EXPECT_TRUE(acc.step(opt));
  // get_state_dict: the whole GPT under its names.
  const NamedTensors state = acc.get_state_dict(*model);
  std::set<std::string> names;
  for (auto& [name, t] : state) names.insert(name);
  for (auto& [name, p] : gpt.named_parameters()) {
    EXPECT_TRUE(names.count(name)) << name;
  }
}

// ---- every accepted setting acts (docs/config.md, "What each key does") --------------------

// One synced step of sum(model(x)) with SGD(lr 1); returns how far the weights moved (2-norm).
double step_distance(Accelerator& acc, PreparedModel& model, nn::Optimizer& opt) {
  const Tensor before = model.sharded().full_state_dict()[0].second.clone();
  Tensor x = Tensor::full({1, 4}, 100.0, DType::kF32);
  Tensor y = model.forward(x);
  acc.backward(model, Tensor::ones(y.shape(), DType::kF32));
  EXPECT_TRUE(acc.step(opt));
  acc.zero_grad(opt);
  const Tensor after = model.sharded().full_state_dict()[0].second;
  double d = 0;
  for (int64_t i = 0; i < after.numel(); ++i) {
    const double e = double(after.data<float>()[i]) - double(before.data<float>()[i]);
    d += e * e;
  }
  return std::sqrt(d);
}

// deepspeed_config.gradient_clipping: the engine clips every step at that norm, with no call
// in the program (Accelerate's DeepSpeed path).
TEST(AcceleratorSettings, GradientClippingFromTheConfigClipsEveryStep) {
  for (double clip : {0.0, 0.25}) {
    AcceleratorConfig cfg;
    cfg.distributed_type = DistributedType::kDeepSpeed;
    cfg.deepspeed_plugin = DeepSpeedPlugin{.zero_stage = 2};
    if (clip > 0) cfg.deepspeed_plugin->gradient_clipping = clip;
    Accelerator acc(cfg, one_rank());
    auto model = acc.prepare_model(tiny_model());
    nn::SGD opt(model->optimizer_parameters(), {.lr = 1.0});
    acc.prepare_optimizer(opt);
    const double moved = step_distance(acc, *model, opt);
    if (clip > 0) {
      EXPECT_NEAR(moved, clip, 1e-4);  // the weight's gradient norm is 200: clipped to 0.25
    } else {
      EXPECT_GT(moved, 100.0);  // DeepSpeed's default 0: no clipping
    }
  }
}

// zero3_save_16bit_model: save_model writes the 16-bit dtype the model computes in; without
// it, braid writes the f32 masters (Accelerate would refuse at stage 3; braid can gather them).
TEST(AcceleratorSettings, Zero3Save16BitModelWritesTheComputeDtype) {
  for (bool sixteen : {false, true}) {
    testing::TempDir dir;
    AcceleratorConfig cfg;
    cfg.distributed_type = DistributedType::kDeepSpeed;
    cfg.mixed_precision = amp::PrecisionType::kBf16;
    cfg.deepspeed_plugin = DeepSpeedPlugin{.zero_stage = 3, .zero3_save_16bit_model = sixteen};
    Accelerator acc(cfg, one_rank());
    auto model = acc.prepare_model(tiny_model());
    acc.save_model(*model, dir.path());
    const NamedTensors saved = load_safetensors(dir.path() / "model.safetensors");
    ASSERT_FALSE(saved.empty());
    for (auto& [name, t] : saved) {
      EXPECT_EQ(t.dtype(), sixteen ? DType::kBF16 : DType::kF32) << name;
    }
  }
}

// FSDP's state_dict_type: FULL_STATE_DICT puts the whole model in the state folder as well
// (model.safetensors, as Accelerate's DDP / FSDP-1 save_state); SHARDED_STATE_DICT only the
// sharded checkpoint. DeepSpeed saves its engine's (sharded) checkpoint.
TEST(AcceleratorSettings, StateDictTypeDecidesWhetherSaveStateWritesTheWholeModel) {
  struct Case {
    DistributedType type;
    std::optional<FsdpStateDictType> sd;
    bool whole;
  };
  for (const Case& c : {Case{DistributedType::kFsdp, FsdpStateDictType::kFullStateDict, true},
                        Case{DistributedType::kFsdp, FsdpStateDictType::kShardedStateDict, false},
                        Case{DistributedType::kNo, std::nullopt, true},
                        Case{DistributedType::kDeepSpeed, std::nullopt, false}}) {
    testing::TempDir dir;
    AcceleratorConfig cfg;
    cfg.distributed_type = c.type;
    if (c.type == DistributedType::kFsdp) {
      cfg.fsdp_plugin = FullyShardedDataParallelPlugin{};
      cfg.fsdp_plugin->state_dict_type = c.sd;
    }
    if (c.type == DistributedType::kDeepSpeed) cfg.deepspeed_plugin = DeepSpeedPlugin{};
    Accelerator acc(cfg, one_rank());
    auto model = acc.prepare_model(tiny_model());
    nn::AdamW opt(model->optimizer_parameters(), {});
    acc.prepare_optimizer(opt);
    acc.save_state(dir.path());
    EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "model"));
    EXPECT_EQ(std::filesystem::exists(dir.path() / "model.safetensors"), c.whole)
        << distributed_type_name(c.type);
    if (c.whole) {
      const NamedTensors whole = load_safetensors(dir.path() / "model.safetensors");
      const NamedTensors mine = acc.get_state_dict(*model);
      ASSERT_EQ(whole.size(), mine.size());
    }
    acc.load_state(dir.path());  // the sharded checkpoint resumes either way
  }
}

// A data loader's position (dataloader_<i>.json) that is not what save_state writes used to let
// nlohmann's exceptions escape load_state (found while writing tests/fuzz's JSON targets,
// docs/fuzzing.md); it is kCorruptData naming the file.
TEST(AcceleratorSettings, CorruptDataLoaderPositionIsCorruptData) {
  testing::TempDir dir;
  Accelerator acc(AcceleratorConfig{}, one_rank());
  acc.prepare_model(tiny_model());
  acc.save_state(dir.path());
  for (const char* bad :
       {"{", "[]", R"({"epoch": 1})", R"({"epoch": "1", "batches": 0, "samples": 0})"}) {
    std::ofstream(dir.path() / "dataloader_0.json") << bad;
    try {
      acc.load_state(dir.path());
      ADD_FAILURE() << "loaded a data loader position of " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorruptData) << bad << ": " << e.message();
      EXPECT_NE(e.message().find("dataloader_0.json"), std::string::npos) << e.message();
    }
  }
}

// total_limit: automatic naming keeps the newest checkpoints only.
TEST(AcceleratorSettings, TotalLimitKeepsTheNewestCheckpoints) {
  testing::TempDir dir;
  AcceleratorConfig cfg;
  cfg.project_config.project_dir = dir.path();
  cfg.project_config.automatic_checkpoint_naming = true;
  cfg.project_config.total_limit = 2;
  Accelerator acc(cfg, one_rank());
  acc.prepare_model(tiny_model());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(acc.save_state(), dir.path() / "checkpoints" / ("checkpoint_" + std::to_string(i)));
  }
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "checkpoints")) {
    left.insert(e.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"checkpoint_2", "checkpoint_3"}));
  acc.load_state();  // the latest
  EXPECT_EQ(acc.save_state(), dir.path() / "checkpoints" / "checkpoint_4");
}

// A checkpoint_<i> folder whose <i> does not fit an int64 (not one braid wrote) is ignored by
// automatic naming; std::stoll used to throw std::out_of_range from save_state / load_state.
TEST(AcceleratorSettings, AutomaticNamingIgnoresCheckpointNumbersPastInt64) {
  testing::TempDir dir;
  AcceleratorConfig cfg;
  cfg.project_config.project_dir = dir.path();
  cfg.project_config.automatic_checkpoint_naming = true;
  cfg.project_config.total_limit = 2;
  Accelerator acc(cfg, one_rank());
  acc.prepare_model(tiny_model());
  std::filesystem::create_directories(dir.path() / "checkpoints" /
                                      "checkpoint_99999999999999999999");
  EXPECT_EQ(acc.save_state(), dir.path() / "checkpoints" / "checkpoint_0");
  acc.load_state();
  EXPECT_EQ(acc.save_state(), dir.path() / "checkpoints" / "checkpoint_1");
}

// zero3_init_flag (stage 3): the model is built on the meta device in model_init_context, and
// prepare_model fills each rank's shards from param_init; without the flag, no context.
TEST(AcceleratorSettings, Zero3InitFlagBuildsTheModelOnTheMetaDevice) {
  AcceleratorConfig plain;
  EXPECT_EQ(Accelerator(plain, one_rank()).model_init_context(), nullptr);
  AcceleratorConfig cfg;
  cfg.distributed_type = DistributedType::kDeepSpeed;
  cfg.deepspeed_plugin = DeepSpeedPlugin{.zero_stage = 3, .zero3_init_flag = true};
  Accelerator acc(cfg, one_rank());
  std::shared_ptr<nn::Linear> model;
  {
    auto scope = acc.model_init_context();
    ASSERT_NE(scope, nullptr);
    model = tiny_model();
  }
  for (auto& [name, p] : model->named_parameters()) {
    EXPECT_TRUE(p.data().device().is_meta()) << name;
  }
  // Without param_init the meta parameters have no values: ShardedModel says so.
  EXPECT_THAT([&] { acc.prepare_model(model); },
              ::testing::ThrowsMessage<Error>(HasSubstr("param_init")));
  auto sm =
      acc.prepare_model(model, [](const std::string&, int64_t offset, int64_t count, float* dst) {
        for (int64_t i = 0; i < count; ++i) dst[i] = 0.5f + float(offset + i);
      });
  const NamedTensors whole = sm->sharded().full_state_dict();
  for (auto& [name, t] : whole) {
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], 0.5f + float(i));
  }
}

// enable_cpu_affinity: the process is bound to its NUMA node's CPUs at construction.
TEST(AcceleratorSettings, EnableCpuAffinityBindsTheProcess) {
  cpu_set_t original;
  CPU_ZERO(&original);
  ASSERT_EQ(::sched_getaffinity(0, sizeof original, &original), 0);
  if (CPU_COUNT(&original) < 2) GTEST_SKIP() << "needs 2 CPUs to see a binding change";
  const std::vector<NumaNode> nodes = numa_nodes();
  const std::vector<int>& node_cpus = numa_node_for(nodes, 0, 1).cpus;
  if (node_cpus.size() < 2) GTEST_SKIP() << "NUMA node 0 has one CPU";
  // Narrowed to one CPU first, so the Accelerator's binding is visible as a widening to the node.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(node_cpus[0], &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  {
    AcceleratorConfig off;
    Accelerator acc(off, one_rank());
    cpu_set_t now;
    ASSERT_EQ(::sched_getaffinity(0, sizeof now, &now), 0);
    EXPECT_EQ(CPU_COUNT(&now), 1);  // left alone without the setting
  }
  AcceleratorConfig on;
  on.enable_cpu_affinity = true;
  Accelerator acc(on, one_rank());
  cpu_set_t now;
  ASSERT_EQ(::sched_getaffinity(0, sizeof now, &now), 0);
  EXPECT_EQ(CPU_COUNT(&now), static_cast<int>(node_cpus.size()));
  for (int c : node_cpus) EXPECT_TRUE(CPU_ISSET(c, &now)) << c;
  ASSERT_EQ(::sched_setaffinity(0, sizeof original, &original), 0);
}

// A plain process (no launcher variables) is a one-process job, as Accelerate's Accelerator().
TEST(AcceleratorSettings, APlainProcessIsAOneProcessJob) {
  ClearEnvironment env;  // no launcher variables at all
  Accelerator acc;
  EXPECT_EQ(acc.num_processes(), 1);
  EXPECT_EQ(acc.distributed_type(), DistributedType::kNo);
  auto model = acc.prepare_model(tiny_model());
  nn::SGD opt(model->optimizer_parameters(), {.lr = 0.1});
  acc.prepare_optimizer(opt);
  EXPECT_GT(step_distance(acc, *model, opt), 0.0);
}

// Keys for things braid does not run are refused by name, not ignored.
TEST(AcceleratorSettings, SettingsBraidCannotHonourAreRefused) {
  auto refused = [](AcceleratorConfig c, const std::string& text) {
    EXPECT_THAT([&] { Accelerator acc(c, one_rank()); },
                ::testing::ThrowsMessage<Error>(HasSubstr(text)));
  };
  AcceleratorConfig c;
  c.mixed_precision = amp::PrecisionType::kBf16;
  c.fp8_config = {{"margin", "0"}};
  refused(c, "fp8_config applies to mixed_precision fp8");
  c = {};
  c.downcast_bf16 = true;
  refused(c, "downcast_bf16");
  c = {};
  c.rdzv_backend = "etcd";
  refused(c, "rdzv_backend 'etcd'");
  c = {};
  c.fsdp_plugin = FullyShardedDataParallelPlugin{.use_orig_params = false};
  refused(c, "fsdp_use_orig_params false");
  AcceleratorConfig y;
  EXPECT_THAT([&] { apply_config_yaml(y, "tpu_name: my-pod\n", "job.yaml"); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("tpu_name = 'my-pod'"), HasSubstr("braid does not act on it"))));
  EXPECT_NO_THROW(apply_config_yaml(y,
                                    "tpu_name: null\nmain_training_function: main\n"
                                    "dynamo_config:\n  dynamo_mode: default\n",
                                    "job.yaml"));
}

// ---- progress reporting ---------------------------------------------------------------------

TEST(Progress, ReportsEveryNAndAtTheEndWithTheBarAndPostfix) {
  std::vector<std::string> lines;
  ProgressBar bar(
      {.desc = "train", .total = 10, .every = 3, .initial = 2, .sink = [&](const std::string& l) {
         lines.push_back(l);
       }});
  for (int i = 0; i < 8; ++i) bar.update(1, {{"loss", 1.5}});
  // From 2: reports crossing 3, 6, 9 and at 10.
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], ::testing::StartsWith("train [######..............] 3/10  loss 1.5000"));
  EXPECT_THAT(lines[3], ::testing::StartsWith("train [####################] 10/10  loss 1.5000"));
  EXPECT_THAT(lines[3], HasSubstr(" it/s  "));
  EXPECT_THAT(lines[3], ::testing::EndsWith("<0:00"));  // nothing left
  EXPECT_EQ(bar.count(), 10);
  bar.update(5);  // past the end: no second final line
  EXPECT_EQ(lines.size(), 4u);

  // An unknown total: a count, no bar; disabled: nothing.
  ProgressBar open({.desc = "read", .sink = [&](const std::string& l) { lines.push_back(l); }});
  open.update(1);
  EXPECT_THAT(lines.back(), ::testing::StartsWith("read 1"));
  const size_t n = lines.size();
  ProgressBar off(
      {.total = 3, .enabled = false, .sink = [&](const std::string& l) { lines.push_back(l); }});
  off.update(3);
  EXPECT_EQ(lines.size(), n);
  EXPECT_THAT([] { ProgressBar bad({.total = 2, .initial = 3}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("initial 3 is outside [0, 2]")));
  EXPECT_EQ(format_duration(3725), "1:02:05");
  EXPECT_EQ(format_duration(65), "1:05");
}

TEST(Progress, TheAcceleratorsBarReportsOnTheMainProcessOnly) {
  std::vector<std::string> lines;
  Accelerator acc({}, one_rank());  // rank 0 of 1: the main process
  ProgressBar bar =
      acc.progress_bar({.total = 2, .sink = [&](const std::string& l) { lines.push_back(l); }});
  bar.update(2);
  EXPECT_EQ(lines.size(), 1u);
}

}  // namespace
}  // namespace braid::accel
