// The other sources: Accelerate's environment variables, `--key value` overrides, finding the
// file, and the precedence of resolve_config (defaults < file < environment < command line <
// code).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "braid/accel/config.h"
#include "braid/core/environment.h"
#include "config_test_util.h"

namespace braid::accel {
namespace {

using testing::data_dir;
using testing::error_of;
using testing::TempDir;

TEST(ConfigEnvironment, AccelerateVariablesForFsdp) {
  AcceleratorConfig c;
  apply_environment(c, {{"ACCELERATE_USE_FSDP", "true"},
                        {"ACCELERATE_MIXED_PRECISION", "bf16"},
                        {"FSDP_VERSION", "2"},
                        {"FSDP_SHARDING_STRATEGY", "HYBRID_SHARD"},
                        {"FSDP_RESHARD_AFTER_FORWARD", "false"},
                        {"FSDP_OFFLOAD_PARAMS", "true"},
                        {"FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP"},
                        {"FSDP_MIN_NUM_PARAMS", "1000"},
                        {"FSDP_TRANSFORMER_CLS_TO_WRAP", "GPT2Block,Linear"},
                        {"FSDP_BACKWARD_PREFETCH", "NO_PREFETCH"},
                        {"FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT"},
                        {"FSDP_FORWARD_PREFETCH", "true"},
                        {"FSDP_USE_ORIG_PARAMS", "false"},
                        {"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"},
                        {"FSDP_SYNC_MODULE_STATES", "true"},
                        {"FSDP_ACTIVATION_CHECKPOINTING", "true"},
                        {"FSDP_IGNORED_MODULES", "lm_head"},
                        {"UNRELATED", "x"}});
  EXPECT_EQ(c.distributed_type, DistributedType::kFsdp);
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kBf16);
  ASSERT_TRUE(c.fsdp_plugin.has_value());
  const FullyShardedDataParallelPlugin& f = *c.fsdp_plugin;
  EXPECT_EQ(f.fsdp_version, 2);
  EXPECT_EQ(f.sharding_strategy, FsdpShardingStrategy::kHybridShard);
  EXPECT_EQ(f.reshard_after_forward, false);
  EXPECT_TRUE(f.cpu_offload);
  EXPECT_EQ(f.auto_wrap_policy, shard::WrapKind::kSizeBased);
  EXPECT_EQ(f.min_num_params, 1000);
  EXPECT_EQ(f.transformer_cls_names_to_wrap, (std::vector<std::string>{"GPT2Block", "Linear"}));
  EXPECT_EQ(f.backward_prefetch, FsdpBackwardPrefetch::kNoPrefetch);
  EXPECT_EQ(f.state_dict_type, FsdpStateDictType::kShardedStateDict);
  EXPECT_EQ(f.forward_prefetch, true);
  EXPECT_FALSE(f.use_orig_params);
  EXPECT_TRUE(f.cpu_ram_efficient_loading);
  EXPECT_EQ(f.sync_module_states, true);
  EXPECT_TRUE(f.activation_checkpointing);
  EXPECT_EQ(f.ignored_modules, std::vector<std::string>{"lm_head"});
}

TEST(ConfigEnvironment, AccelerateVariablesForDeepSpeedAndTopLevel) {
  AcceleratorConfig c;
  apply_environment(c, {{"ACCELERATE_USE_DEEPSPEED", "True"},
                        {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"},
                        {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "8"},
                        {"ACCELERATE_GRADIENT_CLIPPING", "0.5"},
                        {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme"},
                        {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", "/nvme"},
                        {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu"},
                        {"ACCELERATE_DEEPSPEED_ZERO3_INIT", "true"},
                        {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "true"},
                        {"ACCELERATE_USE_CPU", "1"},
                        {"ACCELERATE_DEBUG_MODE", "yes"},
                        {"ACCELERATE_MIXED_PRECISION", "fp16"},
                        {"ACCELERATE_DYNAMO_BACKEND", "NO"}});
  EXPECT_EQ(c.distributed_type, DistributedType::kDeepSpeed);
  ASSERT_TRUE(c.deepspeed_plugin.has_value());
  EXPECT_EQ(c.deepspeed_plugin->zero_stage, 3);
  EXPECT_EQ(c.deepspeed_plugin->gradient_clipping, 0.5);
  EXPECT_EQ(c.deepspeed_plugin->offload_optimizer_device, nn::OffloadDevice::kNvme);
  EXPECT_EQ(c.deepspeed_plugin->offload_optimizer_nvme_path, "/nvme");
  EXPECT_EQ(c.deepspeed_plugin->offload_param_device, nn::OffloadDevice::kCpu);
  EXPECT_TRUE(c.deepspeed_plugin->zero3_init_flag);
  EXPECT_TRUE(c.deepspeed_plugin->zero3_save_16bit_model);
  EXPECT_EQ(c.gradient_accumulation_steps, 8);
  EXPECT_EQ(gradient_accumulation_steps(c), 8);
  EXPECT_TRUE(c.use_cpu);
  EXPECT_TRUE(c.debug);
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kFp16);
}

TEST(ConfigEnvironment, MegatronAndParallelismVariables) {
  AcceleratorConfig c;
  apply_environment(c, {{"ACCELERATE_USE_MEGATRON_LM", "true"},
                        {"MEGATRON_LM_TP_DEGREE", "1"},
                        {"MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER", "true"},
                        {"MEGATRON_LM_RECOMPUTE_ACTIVATIONS", "true"},
                        {"MEGATRON_LM_GRADIENT_CLIPPING", "0.25"},
                        {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2"}});
  EXPECT_EQ(c.distributed_type, DistributedType::kMegatronLm);
  ASSERT_TRUE(c.megatron_lm_plugin && c.parallelism_config);
  EXPECT_TRUE(c.megatron_lm_plugin->use_distributed_optimizer);
  EXPECT_EQ(c.megatron_lm_plugin->gradient_clipping, 0.25);
  EXPECT_EQ(c.parallelism_config->dp_replicate_size, 2);
}

TEST(ConfigEnvironment, StepsGoToThePluginWhenOneIsGiven) {
  AcceleratorConfig c;
  c.gradient_accumulation_plugin = GradientAccumulationPlugin{.num_steps = 2};
  apply_environment(c, {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "6"}});
  EXPECT_EQ(c.gradient_accumulation_plugin->num_steps, 6);
  EXPECT_FALSE(c.gradient_accumulation_steps.has_value());
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ConfigEnvironment, ErrorsNameTheVariable) {
  AcceleratorConfig c;
  Error e = error_of([&] { apply_environment(c, {{"FSDP_SHARDING_STRATEGY", "FULL"}}); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("environment variable FSDP_SHARDING_STRATEGY"), std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("'FULL'"), std::string::npos) << e.message();
  e = error_of([&] {
    apply_environment(c, {{"ACCELERATE_USE_FSDP", "true"}, {"ACCELERATE_USE_DEEPSPEED", "true"}});
  });
  EXPECT_NE(e.message().find("are both true"), std::string::npos) << e.message();
  e = error_of([&] { apply_environment(c, {{"ACCELERATE_USE_FSDP", "sure"}}); });
  EXPECT_NE(e.message().find("ACCELERATE_USE_FSDP='sure'"), std::string::npos) << e.message();
  EXPECT_EQ(c.distributed_type, DistributedType::kNo);  // unchanged after errors
}

TEST(ConfigEnvironment, EmptyValuesAndFalseUseVariablesChangeNothing) {
  AcceleratorConfig c;
  c.mixed_precision = amp::PrecisionType::kBf16;
  apply_environment(c, {{"ACCELERATE_MIXED_PRECISION", ""}, {"ACCELERATE_USE_FSDP", "false"}});
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kBf16);
  EXPECT_EQ(c.distributed_type, DistributedType::kNo);
}

TEST(ConfigEnvironment, ProcessEnvironmentReadsKnownVariablesOnly) {
  ClearEnvironment clear;
  PatchEnvironment env{{"FSDP_VERSION", "2"}, {"SOMETHING_ELSE", "1"}};
  Environment e = process_environment();
  EXPECT_EQ(e.size(), 1u);
  EXPECT_EQ(e.at("FSDP_VERSION"), "2");
}

TEST(ConfigOverrides, DottedBareAndDashedKeys) {
  AcceleratorConfig c;
  apply_overrides(c, {{"fsdp_config.fsdp_sharding_strategy", "SHARD_GRAD_OP"},
                      {"zero_stage", "1"},
                      {"mixed-precision", "fp16"},
                      {"num_processes", "4"},
                      {"fp8_config.backend", "TE"},
                      {"ddp_kwargs.bucket_cap_mb", "5"},
                      {"log_with", "tensorboard,csv"}});
  EXPECT_EQ(c.fsdp_plugin->sharding_strategy, FsdpShardingStrategy::kShardGradOp);
  EXPECT_EQ(c.deepspeed_plugin->zero_stage, 1);
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kFp16);
  EXPECT_EQ(c.num_processes, 4);
  EXPECT_EQ(c.fp8_config.at("backend"), "TE");
  EXPECT_EQ(c.ddp_kwargs.bucket_cap_mb, 5.0);
  EXPECT_EQ(c.log_with, (std::vector<std::string>{"tensorboard", "csv"}));
  apply_overrides(c, {{"num_processes", "null"}});
  EXPECT_EQ(c.num_processes, 1);
}

TEST(ConfigOverrides, ErrorsNameKeyValueAndClosestKey) {
  AcceleratorConfig c;
  Error e = error_of([&] { apply_overrides(c, {{"fsdp_sharding_stratgy", "FULL_SHARD"}}); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("'fsdp_sharding_stratgy'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("command line --fsdp_sharding_stratgy"), std::string::npos);
  EXPECT_NE(e.message().find("closest known key is 'fsdp_config.fsdp_sharding_strategy'"),
            std::string::npos)
      << e.message();
  e = error_of([&] { apply_overrides(c, {{"enabled", "false"}}); });
  EXPECT_NE(e.message().find("several sections"), std::string::npos) << e.message();
  e = error_of([&] { apply_overrides(c, {{"deepspeed_config.zero_stage", "5"}}); });
  EXPECT_NE(e.message().find("deepspeed_config.zero_stage = '5' (command line"), std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("0, 1, 2 or 3"), std::string::npos) << e.message();
}

TEST(ConfigOverrides, TakeConfigArgumentsLeavesTheProgramsOwn) {
  ConfigOptions opts{.extra_keys = {"max_steps"}};
  std::vector<std::string> args = {"--config_file",
                                   "job.yaml",
                                   "--lr",
                                   "0.1",
                                   "--mixed_precision=bf16",
                                   "--max-steps",
                                   "10",
                                   "--use_cpu",
                                   "--zero_stage",
                                   "2",
                                   "data.bin",
                                   "--",
                                   "--num_processes",
                                   "3"};
  ConfigArguments found = take_config_arguments(args, opts);
  EXPECT_EQ(found.config_file, std::filesystem::path("job.yaml"));
  ConfigOverrides want = {
      {"mixed_precision", "bf16"}, {"max-steps", "10"}, {"use_cpu", "true"}, {"zero_stage", "2"}};
  EXPECT_EQ(found.overrides, want);
  EXPECT_EQ(args,
            (std::vector<std::string>{"--lr", "0.1", "data.bin", "--", "--num_processes", "3"}));
  AcceleratorConfig c;
  apply_overrides(c, found.overrides, opts);
  EXPECT_EQ(extra_int(c, "max_steps", 0), 10);
  std::vector<std::string> bad = {"--num_processes"};
  Error e = error_of([&] { take_config_arguments(bad); });
  EXPECT_NE(e.message().find("--num_processes: expected a value"), std::string::npos);
}

class ResolveConfig : public ::testing::Test {
 protected:
  ClearEnvironment clear_;  // no ACCELERATE_* / BRAID_CONFIG_FILE / HOME from outside
  TempDir dir_;
};

TEST_F(ResolveConfig, PrecedenceDefaultsFileEnvironmentCommandLineCode) {
  std::ofstream(dir_ / "job.yaml") << "mixed_precision: fp16\nnum_processes: 2\nseed: 1\n"
                                      "debug: true\nfsdp_config:\n  fsdp_version: 2\n";
  AcceleratorConfig defaults;
  defaults.mixed_precision = amp::PrecisionType::kBf16;  // code default: the file overrides it
  defaults.rdzv_backend = "c10d";                        // not in the file: stays
  defaults.use_cpu = true;                               // environment overrides it
  PatchEnvironment env{
      {"ACCELERATE_USE_CPU", "false"}, {"ACCELERATE_DEBUG_MODE", "false"}, {"FSDP_VERSION", "1"}};
  ConfigSources sources;
  sources.config_file = dir_ / "job.yaml";
  sources.command_line.overrides = {{"debug", "true"}, {"seed", "7"}};
  AcceleratorConfig c = resolve_config(defaults, sources);
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kFp16);  // file > code defaults
  EXPECT_EQ(c.rdzv_backend, "c10d");                        // code default kept
  EXPECT_EQ(c.num_processes, 2);                            // file
  EXPECT_FALSE(c.use_cpu);                                  // environment > code default
  EXPECT_EQ(c.fsdp_plugin->fsdp_version, 1);                // environment > file
  EXPECT_TRUE(c.debug);                                     // command line > environment
  EXPECT_EQ(c.seed, 7u);                                    // command line > file
  c.seed = 99;                                              // explicit code settings: last
  EXPECT_EQ(c.seed, 99u);
}

TEST_F(ResolveConfig, FindsTheFileFromCommandLineEnvironmentThenDefaults) {
  std::ofstream(dir_ / "cli.yaml") << "num_processes: 3\n";
  std::ofstream(dir_ / "env.yaml") << "num_processes: 5\n";
  ConfigSources sources;
  sources.command_line.config_file = dir_ / "cli.yaml";
  PatchEnvironment env{{"BRAID_CONFIG_FILE", (dir_ / "env.yaml").string()}};
  EXPECT_EQ(resolve_config({}, sources).num_processes, 3);
  sources.command_line.config_file.reset();
  EXPECT_EQ(resolve_config({}, sources).num_processes, 5);
}

TEST_F(ResolveConfig, DefaultFilesBraidFirstThenAccelerates) {
  PatchEnvironment env{{"HOME", dir_.path().string()}};
  EXPECT_EQ(default_config_file(), dir_.path() / ".cache/braid/default_config.yaml");
  EXPECT_EQ(accelerate_default_config_file(),
            dir_.path() / ".cache/huggingface/accelerate/default_config.yaml");
  EXPECT_FALSE(find_config_file({}).has_value());
  std::filesystem::create_directories(dir_.path() / ".cache/huggingface/accelerate");
  std::filesystem::copy_file(data_dir() / "accelerate_fsdp.yaml",
                             dir_.path() / ".cache/huggingface/accelerate/default_config.yaml");
  EXPECT_EQ(resolve_config({}, {}).distributed_type, DistributedType::kFsdp);  // Accelerate's
  std::filesystem::create_directories(dir_.path() / ".cache/braid");
  std::ofstream(dir_.path() / ".cache/braid/default_config.yaml") << "distributed_type: NO\n";
  EXPECT_EQ(resolve_config({}, {}).distributed_type, DistributedType::kNo);  // braid's first
  ConfigSources no_defaults{.search_default_files = false};
  EXPECT_FALSE(find_config_file(no_defaults).has_value());
  PatchEnvironment xdg{{"XDG_CACHE_HOME", (dir_ / "xdg").string()}, {"HF_HOME", "/hf"}};
  EXPECT_EQ(default_config_file(), dir_ / "xdg" / "braid/default_config.yaml");
  EXPECT_EQ(accelerate_default_config_file(), "/hf/accelerate/default_config.yaml");
}

// The example at the top of config.h, as a program's main would run it.
TEST_F(ResolveConfig, HeaderExample) {
  std::ofstream(dir_ / "job.yaml") << "mixed_precision: bf16\nmax_steps: 50\n";
  std::vector<std::string> args = {
      "--config_file", (dir_ / "job.yaml").string(), "--lr", "0.1", "--max_steps", "70",
      "data.bin"};
  braid::accel::ConfigOptions opts{.extra_keys = {"max_steps"}};
  braid::accel::AcceleratorConfig cfg = braid::accel::resolve_config(
      {}, {.command_line = braid::accel::take_config_arguments(args, opts), .options = opts});
  cfg.seed = 1234;
  EXPECT_EQ(braid::accel::extra_int(cfg, "max_steps", 1000), 70);
  EXPECT_EQ(cfg.mixed_precision, amp::PrecisionType::kBf16);
  EXPECT_EQ(args, (std::vector<std::string>{"--lr", "0.1", "data.bin"}));
  braid::accel::ShardingPlan plan = braid::accel::sharding_plan(cfg);
  EXPECT_EQ(plan.options.stage, shard::ZeroStage::k0);
}

TEST_F(ResolveConfig, ValidatesTheResult) {
  ConfigSources sources;
  sources.command_line.overrides = {{"distributed_type", "XLA"}};
  Error e = error_of([&] { resolve_config({}, sources); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_NE(e.message().find("distributed_type XLA"), std::string::npos) << e.message();
  sources.config_file = dir_ / "missing.yaml";  // named explicitly: must exist
  EXPECT_EQ(error_of([&] { resolve_config({}, sources); }).kind(), ErrorKind::kIo);
}

}  // namespace
}  // namespace braid::accel
