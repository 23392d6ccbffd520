// Reading configuration files: real Accelerate files (FSDP 1 and 2, DeepSpeed with and without a
// JSON file, Megatron-LM, FP8, multi-CPU, an 0.12-era file), and the errors for unknown keys,
// bad values, duplicates, broken YAML and missing files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../src/config_keys.h"
#include "braid/accel/config.h"
#include "braid/core/file_util.h"
#include "braid/core/logging.h"
#include "config_test_util.h"

namespace braid::accel {
namespace {

using testing::data_dir;
using testing::error_of;
using testing::TempDir;

AcceleratorConfig from_yaml(std::string_view text, const ConfigOptions& options = {}) {
  AcceleratorConfig c;
  apply_config_yaml(c, text, "job.yaml", options);
  return c;
}

TEST(ConfigFile, AccelerateFsdpFileAsAccelerateConfigWritesIt) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_fsdp.yaml");
  EXPECT_EQ(c.compute_environment, ComputeEnvironment::kLocalMachine);
  EXPECT_EQ(c.distributed_type, DistributedType::kFsdp);
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kBf16);
  EXPECT_EQ(c.num_processes, 4);
  EXPECT_EQ(c.num_machines, 1);
  EXPECT_EQ(c.machine_rank, 0);
  EXPECT_EQ(c.rdzv_backend, "static");
  EXPECT_TRUE(c.same_network);
  EXPECT_FALSE(c.use_cpu);
  EXPECT_FALSE(c.downcast_bf16);
  ASSERT_TRUE(c.fsdp_plugin.has_value());
  const FullyShardedDataParallelPlugin& f = *c.fsdp_plugin;
  EXPECT_EQ(f.fsdp_version, 1);
  EXPECT_EQ(f.sharding_strategy, FsdpShardingStrategy::kFullShard);
  EXPECT_FALSE(f.reshard_after_forward.has_value());
  EXPECT_EQ(f.auto_wrap_policy, shard::WrapKind::kTransformerBased);
  EXPECT_EQ(f.transformer_cls_names_to_wrap, std::vector<std::string>{"GPT2Block"});
  EXPECT_EQ(f.backward_prefetch, FsdpBackwardPrefetch::kBackwardPre);
  EXPECT_EQ(f.state_dict_type, FsdpStateDictType::kShardedStateDict);
  EXPECT_EQ(f.forward_prefetch, false);
  EXPECT_EQ(f.sync_module_states, true);
  EXPECT_TRUE(f.cpu_ram_efficient_loading);
  EXPECT_FALSE(f.cpu_offload);
  EXPECT_FALSE(f.activation_checkpointing);
  EXPECT_TRUE(f.use_orig_params);
  EXPECT_FALSE(c.deepspeed_plugin.has_value());
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ConfigFile, AccelerateFsdp2FileWithParallelismConfig) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_fsdp2.yaml");
  ASSERT_TRUE(c.fsdp_plugin.has_value());
  EXPECT_EQ(c.fsdp_plugin->fsdp_version, 2);
  EXPECT_EQ(c.fsdp_plugin->reshard_after_forward, true);
  EXPECT_TRUE(c.fsdp_plugin->activation_checkpointing);
  EXPECT_EQ(c.fsdp_plugin->state_dict_type, FsdpStateDictType::kFullStateDict);
  ASSERT_TRUE(c.parallelism_config.has_value());
  EXPECT_EQ(c.parallelism_config->dp_replicate_size, 2);
  EXPECT_EQ(c.parallelism_config->dp_shard_size, 4);
  EXPECT_EQ(c.parallelism_config->tp_size, 1);
  EXPECT_EQ(c.parallelism_config->cp_size, 1);
  EXPECT_EQ(c.num_processes, 8);
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ConfigFile, AccelerateDeepSpeedFile) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_deepspeed.yaml");
  EXPECT_EQ(c.distributed_type, DistributedType::kDeepSpeed);
  ASSERT_TRUE(c.deepspeed_plugin.has_value());
  const DeepSpeedPlugin& d = *c.deepspeed_plugin;
  EXPECT_EQ(d.zero_stage, 3);
  EXPECT_EQ(d.gradient_accumulation_steps, 4);
  EXPECT_EQ(d.gradient_clipping, 1.0);
  EXPECT_EQ(d.offload_optimizer_device, nn::OffloadDevice::kCpu);
  EXPECT_EQ(d.offload_param_device, nn::OffloadDevice::kNvme);
  EXPECT_EQ(d.offload_param_nvme_path, "/local_nvme");
  EXPECT_TRUE(d.zero3_init_flag);
  EXPECT_TRUE(d.zero3_save_16bit_model);
  EXPECT_EQ(gradient_accumulation_steps(c), 4);
  EXPECT_NO_THROW(validate_config(c));
}

TEST(ConfigFile, DeepSpeedJsonFileIsReadRelativeToTheYaml) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_deepspeed_json.yaml");
  ASSERT_TRUE(c.deepspeed_plugin.has_value());
  const DeepSpeedPlugin& d = *c.deepspeed_plugin;
  EXPECT_EQ(d.hf_ds_config, (data_dir() / "ds_zero2.json").string());
  EXPECT_EQ(d.zero_stage, 2);
  EXPECT_EQ(d.offload_optimizer_device, nn::OffloadDevice::kCpu);
  EXPECT_EQ(d.offload_param_device, nn::OffloadDevice::kNone);
  EXPECT_EQ(d.gradient_accumulation_steps, 2);
  EXPECT_FALSE(d.gradient_clipping.has_value());            // "auto": left to the program
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kBf16);  // bf16.enabled true
  EXPECT_FALSE(d.zero3_init_flag);
}

TEST(ConfigFile, DeepSpeedJsonErrorsNameTheFileAndField) {
  TempDir dir;
  {
    std::ofstream(dir / "bad.json") << R"({"zero_optimization": {"stage": 7}})";
    std::ofstream(dir / "broken.json") << R"({"zero_optimization": )";
  }
  Error e = error_of([&] {
    AcceleratorConfig c;
    apply_config_yaml(c, "deepspeed_config:\n  deepspeed_config_file: bad.json\n", "job.yaml", {},
                      dir.path());
  });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("bad.json"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("zero_optimization.stage = 7"), std::string::npos) << e.message();
  e = error_of([&] {
    AcceleratorConfig c;
    apply_config_yaml(c, "deepspeed_config:\n  deepspeed_config_file: broken.json\n", "job.yaml",
                      {}, dir.path());
  });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("broken.json"), std::string::npos) << e.message();
  e = error_of([&] {
    AcceleratorConfig c;
    apply_config_yaml(c, "deepspeed_config:\n  deepspeed_config_file: missing.json\n", "job.yaml",
                      {}, dir.path());
  });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find("missing.json"), std::string::npos) << e.message();
  // A name the file system refuses (longer than NAME_MAX): the same kIo, not the
  // std::filesystem::filesystem_error a throwing exists() let escape (found by fuzzing).
  const std::string long_name(300, 'x');
  e = error_of([&] {
    AcceleratorConfig c;
    apply_config_yaml(c, "deepspeed_config:\n  deepspeed_config_file: " + long_name + "\n",
                      "job.yaml", {}, dir.path());
  });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find(long_name), std::string::npos) << e.message();
}

TEST(ConfigFile, AccelerateMegatronFile) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_megatron.yaml");
  EXPECT_EQ(c.distributed_type, DistributedType::kMegatronLm);
  ASSERT_TRUE(c.megatron_lm_plugin.has_value());
  EXPECT_EQ(c.megatron_lm_plugin->tp_degree, 1);
  EXPECT_EQ(c.megatron_lm_plugin->pp_degree, 1);
  EXPECT_TRUE(c.megatron_lm_plugin->recompute_activations);
  EXPECT_TRUE(c.megatron_lm_plugin->use_distributed_optimizer);
  EXPECT_EQ(c.megatron_lm_plugin->gradient_clipping, 1.0);
}

TEST(ConfigFile, AccelerateFp8AndMultiCpuFiles) {
  AcceleratorConfig fp8 = load_config_file(data_dir() / "accelerate_fp8.yaml");
  EXPECT_EQ(fp8.mixed_precision, amp::PrecisionType::kFp8);
  EXPECT_EQ(fp8.distributed_type, DistributedType::kMultiGpu);
  EXPECT_EQ(fp8.gpu_ids, "all");
  EXPECT_EQ(fp8.fp8_config.at("backend"), "TE");
  EXPECT_EQ(fp8.fp8_config.at("amax_history_len"), "1024");
  EXPECT_EQ(fp8.fp8_config.at("override_linear_precision"), "(false, false, false)");
  // fp8_config becomes the TE recipe braid trains with.
  EXPECT_NO_THROW(validate_config(fp8));
  amp::Fp8TrainingOptions o = fp8_training_options(fp8);
  EXPECT_EQ(o.recipe.fp8_format, amp::Fp8Format::kE4M3);
  EXPECT_EQ(o.recipe.amax_history_len, 1024);
  EXPECT_EQ(o.recipe.amax_compute_algo, amp::AmaxComputeAlgo::kMax);
  EXPECT_EQ(o.recipe.margin, 0);
  EXPECT_EQ(o.recipe.interval, 1);
  EXPECT_FALSE(o.keep_fprop || o.keep_dgrad || o.keep_wgrad || o.in_eval);
  fp8.fp8_config["override_linear_precision"] = "(False, true, false)";
  fp8.fp8_config["fp8_format"] = "HYBRID";
  fp8.fp8_config["margin"] = "2";
  o = fp8_training_options(fp8);
  EXPECT_TRUE(!o.keep_fprop && o.keep_dgrad && !o.keep_wgrad);
  EXPECT_EQ(o.recipe.fp8_format, amp::Fp8Format::kHybrid);
  EXPECT_EQ(o.recipe.margin, 2);
  // Bad values and other backends name the key.
  for (auto [key, value, text] :
       {std::tuple<std::string, std::string, std::string>{"margin", "-1", "fp8_config.margin"},
        {"override_linear_precision", "(true, false)", "three booleans"},
        {"backend", "MSAMP", "MS-AMP and torchao are not built"},
        {"opt_level", "O2", "fp8_config.opt_level: not a setting"}}) {
    AcceleratorConfig bad = fp8;
    bad.fp8_config[key] = value;
    try {
      validate_config(bad);
      ADD_FAILURE() << key << " " << value;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(text), std::string::npos) << e.message();
    }
  }
  // Without mixed_precision fp8 the section would do nothing: refused.
  fp8.mixed_precision = amp::PrecisionType::kBf16;
  fp8.distributed_type = DistributedType::kMultiCpu;
  try {
    validate_config(fp8);
    ADD_FAILURE() << "fp8_config without fp8 should be refused";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("applies to mixed_precision fp8"), std::string::npos) << e.message();
  }

  // accelerate launch's mpirun with a hostfile: braid launch does not read hostfiles, so the
  // key is refused by name rather than ignored.
  try {
    (void)load_config_file(data_dir() / "accelerate_multi_cpu.yaml");
    ADD_FAILURE() << "mpirun_hostfile should be refused";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("mpirun_config.mpirun_hostfile = '/home/user/hostfile'"),
              std::string::npos)
        << e.message();
  }
  std::string text = read_file(data_dir() / "accelerate_multi_cpu.yaml");
  text.replace(text.find("/home/user/hostfile"), std::strlen("/home/user/hostfile"), "null");
  AcceleratorConfig cpu = from_yaml(text);
  EXPECT_EQ(cpu.distributed_type, DistributedType::kMultiCpu);
  EXPECT_TRUE(cpu.use_cpu);
  EXPECT_EQ(cpu.num_machines, 4);
  EXPECT_EQ(cpu.machine_rank, 1);
  EXPECT_EQ(cpu.main_process_ip, "10.200.0.1");
  EXPECT_EQ(cpu.main_process_port, 29500);
  EXPECT_NO_THROW(validate_config(cpu));
}

TEST(ConfigFile, OldAccelerateFileWithNumericStrategyAndDeprecatedKey) {
  std::vector<std::string> lines;
  LogSink previous = set_log_sink([&](std::string_view line) { lines.emplace_back(line); });
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_0_12_fsdp.yaml");
  set_log_sink(previous);
  ASSERT_TRUE(c.fsdp_plugin.has_value());
  EXPECT_EQ(c.fsdp_plugin->sharding_strategy, FsdpShardingStrategy::kShardGradOp);  // "2"
  EXPECT_EQ(c.fsdp_plugin->backward_prefetch, FsdpBackwardPrefetch::kBackwardPre);
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kNo);
  EXPECT_TRUE(c.main_process_ip.empty());         // null
  EXPECT_FALSE(c.main_process_port.has_value());  // null
  EXPECT_FALSE(c.deepspeed_plugin.has_value());   // deepspeed_config: {}
  bool warned = false;
  for (const std::string& l : lines) {
    warned |= l.find("fsdp_backward_prefetch_policy is deprecated") != std::string::npos;
  }
  EXPECT_TRUE(warned);
}

TEST(ConfigFile, UnknownTopLevelKeyNamesFileLineAndClosestKey) {
  Error e = error_of([] { from_yaml("distributed_type: FSDP\nmixed_precison: bf16\n"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("'mixed_precison'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("job.yaml:2:1"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("closest known key is 'mixed_precision'"), std::string::npos)
      << e.message();
}

// The suggestion compares the first 64 characters of an unknown key (no known key is longer):
// a 1 KiB key still gets its closest key and its full name in the message.
TEST(ConfigFile, VeryLongUnknownKeyGetsASuggestionFromItsStart) {
  const std::string key = "mixed_precison" + std::string(1000, 'x');  // YAML: <= 1024
  Error e = error_of([&] { from_yaml("distributed_type: FSDP\n" + key + ": bf16\n"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("'" + key + "'"), std::string::npos);
  EXPECT_NE(e.message().find("closest known key is 'mixed_precision'"), std::string::npos)
      << e.message();
}

// The suggestion's edit distance gives up on a candidate once it cannot be within `limit`
// (docs/fuzzing.md, "config_yaml"): below the limit it must be the full distance, above it any
// value above the limit. Against a plain dynamic-programming table on random words.
TEST(ConfigFile, EditDistanceWithALimitAgreesWithTheFullDistance) {
  auto full = [](std::string_view a, std::string_view b) {
    std::vector<std::vector<size_t>> t(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) t[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) t[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        t[i][j] = std::min(
            {t[i - 1][j] + 1, t[i][j - 1] + 1, t[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      }
    }
    return t[a.size()][b.size()];
  };
  std::mt19937 rng(7);
  auto word = [&] {
    std::string w(rng() % 12, ' ');
    for (char& c : w) c = static_cast<char>('a' + rng() % 4);  // few letters: near words
    return w;
  };
  int within = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const std::string a = word(), b = word();
    const size_t want = full(a, b), limit = rng() % 8;
    const size_t got = detail::edit_distance(a, b, limit);
    if (want <= limit) {
      ++within;
      EXPECT_EQ(got, want) << a << " / " << b << " limit " << limit;
    } else {
      EXPECT_GT(got, limit) << a << " / " << b << " limit " << limit << " distance " << want;
    }
    EXPECT_EQ(detail::edit_distance(a, b), want) << a << " / " << b;
  }
  EXPECT_GT(within, 1000);  // both branches were exercised
}

TEST(ConfigFile, UnknownNestedKeyNamesSectionAndClosestKey) {
  Error e = error_of([] {
    from_yaml(
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
        "  fsdp_shardng_strategy: FULL_SHARD\n");
  });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("'fsdp_shardng_strategy' in fsdp_config"), std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("job.yaml:4:3"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("'fsdp_sharding_strategy'"), std::string::npos) << e.message();
}

TEST(ConfigFile, NestedKeyAtTheTopIsPointedToItsSection) {
  Error e = error_of([] { from_yaml("zero_stage: 3\n"); });
  EXPECT_NE(e.message().find("closest known key is 'deepspeed_config.zero_stage'"),
            std::string::npos)
      << e.message();
}

TEST(ConfigFile, BadValueNamesKeyValueAndAcceptedValues) {
  Error e = error_of([] { from_yaml("fsdp_config:\n  fsdp_sharding_strategy: FULL\n"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("fsdp_config.fsdp_sharding_strategy = 'FULL'"), std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("job.yaml:2:3"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or "
                             "HYBRID_SHARD_ZERO2"),
            std::string::npos)
      << e.message();

  e = error_of([] { from_yaml("mixed_precision: fp64\n"); });
  EXPECT_NE(e.message().find("mixed_precision = 'fp64'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("no, fp16, bf16 or fp8"), std::string::npos) << e.message();

  e = error_of([] { from_yaml("num_processes: two\n"); });
  EXPECT_NE(e.message().find("num_processes = 'two'"), std::string::npos) << e.message();
  e = error_of([] { from_yaml("deepspeed_config:\n  zero_stage: 4\n"); });
  EXPECT_NE(e.message().find("0, 1, 2 or 3"), std::string::npos) << e.message();
  e = error_of([] { from_yaml("use_cpu: maybe\n"); });
  EXPECT_NE(e.message().find("true or false"), std::string::npos) << e.message();
  e = error_of([] { from_yaml("main_process_port: 70000\n"); });
  EXPECT_NE(e.message().find("0 to 65535"), std::string::npos) << e.message();
  e = error_of([] { from_yaml("fsdp_config: 3\n"); });
  EXPECT_NE(e.message().find("expected a mapping of fsdp_config keys"), std::string::npos)
      << e.message();
  e = error_of([] { from_yaml("use_cpu: [true]\n"); });
  EXPECT_NE(e.message().find("use_cpu = [true]"), std::string::npos) << e.message();
}

TEST(ConfigFile, DuplicateKeysAreErrors) {
  Error e = error_of([] { from_yaml("use_cpu: true\nnum_processes: 2\nuse_cpu: false\n"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("'use_cpu' appears twice (job.yaml:1:1 and job.yaml:3:1)"),
            std::string::npos)
      << e.message();
}

TEST(ConfigFile, BrokenYamlIsCorruptDataWithLine) {
  Error e = error_of([] { from_yaml("distributed_type: FSDP\nfsdp_config: [a, b\n"); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("job.yaml:"), std::string::npos) << e.message();
  e = error_of([] { from_yaml("- a\n- b\n"); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("expected a mapping"), std::string::npos) << e.message();
}

TEST(ConfigFile, MissingFileIsIo) {
  Error e = error_of([] { load_config_file("/nonexistent/braid/config.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find("/nonexistent/braid/config.yaml"), std::string::npos);
}

TEST(ConfigFile, EmptyFileChangesNothing) {
  AcceleratorConfig c;
  c.num_processes = 3;
  apply_config_yaml(c, "", "empty.yaml");
  apply_config_yaml(c, "# only a comment\n", "empty.yaml");
  EXPECT_EQ(c.num_processes, 3);
}

TEST(ConfigFile, ErrorLeavesTheConfigUnchanged) {
  AcceleratorConfig c;
  EXPECT_THROW(apply_config_yaml(c, "num_processes: 4\nuse_cpu: maybe\n", "job.yaml"), Error);
  EXPECT_EQ(c.num_processes, 1);
}

TEST(ConfigFile, NullResetsAKeyToItsDefault) {
  AcceleratorConfig c;
  c.main_process_port = 1234;
  c.rdzv_backend = "c10d";
  apply_config_yaml(c, "main_process_port: null\nrdzv_backend: ~\n", "job.yaml");
  EXPECT_FALSE(c.main_process_port.has_value());
  EXPECT_EQ(c.rdzv_backend, "static");
}

TEST(ConfigFile, JsonFileAsWriteBasicConfigOfAccelerateWritesIt) {
  // Accelerate's write_basic_config writes JSON text, also into .yaml paths.
  AcceleratorConfig c = from_yaml(R"({
  "compute_environment": "LOCAL_MACHINE",
  "debug": false,
  "distributed_type": "NO",
  "downcast_bf16": false,
  "enable_cpu_affinity": false,
  "machine_rank": 0,
  "main_training_function": "main",
  "mixed_precision": "fp16",
  "num_machines": 1,
  "num_processes": 1,
  "rdzv_backend": "static",
  "same_network": false,
  "tpu_use_cluster": false,
  "tpu_use_sudo": false,
  "use_cpu": true
})");
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kFp16);
  EXPECT_TRUE(c.use_cpu);
  EXPECT_FALSE(c.same_network);
}

TEST(ConfigFile, BraidSectionsAndExtraKeys) {
  ConfigOptions opts{.extra_keys = {"max_steps", "run_name"}};
  AcceleratorConfig c = from_yaml(R"(
distributed_type: MULTI_CPU
gradient_accumulation_plugin:
  num_steps: 4
  sync_each_batch: false
ddp_kwargs:
  bucket_cap_mb: 2.5
  find_unused_parameters: true
  comm_hook: bf16
grad_scaler_kwargs:
  init_scale: 1024
  growth_interval: 100
autocast_kwargs:
  cache_enabled: false
init_process_group_kwargs:
  backend: shm
  timeout: 12.5
dataloader_config:
  split_batches: true
  dispatch_batches: false
  data_seed: 7
project_config:
  project_dir: runs/a
  automatic_checkpoint_naming: true
  total_limit: 3
log_with: [tensorboard, csv]
seed: 42
max_steps: 100
run_name: first
)",
                                  opts);
  ASSERT_TRUE(c.gradient_accumulation_plugin.has_value());
  EXPECT_EQ(c.gradient_accumulation_plugin->num_steps, 4);
  EXPECT_FALSE(c.gradient_accumulation_plugin->sync_each_batch);
  EXPECT_EQ(gradient_accumulation_steps(c), 4);
  EXPECT_EQ(c.ddp_kwargs.bucket_cap_mb, 2.5);
  EXPECT_TRUE(c.ddp_kwargs.find_unused_parameters);
  EXPECT_EQ(c.ddp_kwargs.comm_hook, shard::DDPCommunicationHookType::kBf16);
  EXPECT_EQ(c.grad_scaler_kwargs.init_scale, 1024.0);
  EXPECT_EQ(c.grad_scaler_kwargs.growth_interval, 100);
  EXPECT_EQ(c.autocast_kwargs.cache_enabled, false);
  EXPECT_EQ(c.init_process_group_kwargs.backend, "shm");
  EXPECT_EQ(c.init_process_group_kwargs.timeout, std::chrono::milliseconds(12500));
  EXPECT_TRUE(c.dataloader_config.split_batches);
  EXPECT_EQ(c.dataloader_config.dispatch_batches, false);
  EXPECT_EQ(c.dataloader_config.data_seed, 7u);
  EXPECT_EQ(c.project_config.project_dir, "runs/a");
  EXPECT_TRUE(c.project_config.automatic_checkpoint_naming);
  EXPECT_EQ(c.project_config.total_limit, 3);
  EXPECT_EQ(c.log_with, (std::vector<std::string>{"tensorboard", "csv"}));
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(extra_int(c, "max_steps", 0), 100);
  EXPECT_EQ(extra_string(c, "run_name", ""), "first");
  EXPECT_EQ(extra_int(c, "absent", 5), 5);
  Error e = error_of([&] { extra_bool(c, "run_name", false); });
  EXPECT_NE(e.message().find("run_name = 'first': expected true or false"), std::string::npos)
      << e.message();
  // Without the declaration the program's key is unknown.
  e = error_of([] { from_yaml("max_steps: 100\n"); });
  EXPECT_NE(e.message().find("unknown configuration key 'max_steps'"), std::string::npos);
  // A declared key may not shadow a configuration key.
  e = error_of([] { from_yaml("seed: 1\n", ConfigOptions{.extra_keys = {"seed"}}); });
  EXPECT_NE(e.message().find("extra key 'seed' is already a configuration key"), std::string::npos);
}

TEST(ConfigFile, AnyExtraKeyTakesUnknownTopLevelKeysForTools) {
  ConfigOptions tool{.any_extra_key = true};
  AcceleratorConfig c = from_yaml("mixed_precision: bf16\nmax_steps: 200\nlr: 0.003\n", tool);
  EXPECT_EQ(c.extra, (std::map<std::string, std::string>{{"lr", "0.003"}, {"max_steps", "200"}}));
  Error e = error_of([&] { from_yaml("fsdp_config:\n  fsdp_verison: 2\n", tool); });
  EXPECT_NE(e.message().find("'fsdp_verison' in fsdp_config"), std::string::npos);
  e = error_of([&] { from_yaml("layers: [1, 2]\n", tool); });
  EXPECT_NE(e.message().find("layers (job.yaml:1:1): expected a plain value"), std::string::npos)
      << e.message();
}

TEST(ConfigFile, FsdpMixedPrecisionPolicyScalarOrMapping) {
  AcceleratorConfig c = from_yaml("fsdp_config:\n  fsdp_mixed_precision_policy: bf16\n");
  ASSERT_TRUE(c.fsdp_plugin && c.fsdp_plugin->mixed_precision_policy);
  EXPECT_EQ(c.fsdp_plugin->mixed_precision_policy->param_dtype, DType::kBF16);
  EXPECT_EQ(c.fsdp_plugin->mixed_precision_policy->buffer_dtype, DType::kBF16);
  c = from_yaml(
      "fsdp_config:\n  fsdp_mixed_precision_policy:\n    param_dtype: bf16\n"
      "    reduce_dtype: fp32\n");
  EXPECT_EQ(c.fsdp_plugin->mixed_precision_policy->param_dtype, DType::kBF16);
  EXPECT_EQ(c.fsdp_plugin->mixed_precision_policy->reduce_dtype, DType::kF32);
  EXPECT_EQ(c.fsdp_plugin->mixed_precision_policy->buffer_dtype, DType::kF32);
  Error e = error_of(
      [] { from_yaml("fsdp_config:\n  fsdp_mixed_precision_policy:\n    param_dtyp: bf16\n"); });
  EXPECT_NE(e.message().find("unknown field 'param_dtyp'"), std::string::npos) << e.message();
}

TEST(ConfigFile, ReshardAfterForwardTakesABoolOrAStrategy) {
  AcceleratorConfig c = from_yaml("fsdp_config:\n  fsdp_reshard_after_forward: false\n");
  EXPECT_EQ(c.fsdp_plugin->reshard_after_forward, false);
  c = from_yaml("fsdp_config:\n  fsdp_reshard_after_forward: SHARD_GRAD_OP\n");
  EXPECT_EQ(c.fsdp_plugin->sharding_strategy, FsdpShardingStrategy::kShardGradOp);
  EXPECT_FALSE(c.fsdp_plugin->reshard_after_forward.has_value());
}

TEST(ConfigFile, EnumNamesParseInAnyCaseAndTpuIsXla) {
  EXPECT_EQ(parse_distributed_type("multi_cpu"), DistributedType::kMultiCpu);
  EXPECT_EQ(parse_distributed_type("TPU"), DistributedType::kXla);
  EXPECT_EQ(distributed_type_name(DistributedType::kMegatronLm), "MEGATRON_LM");
  EXPECT_EQ(parse_dynamo_backend("inductor"), DynamoBackend::kInductor);
  EXPECT_EQ(dynamo_backend_name(DynamoBackend::kHpuBackend), "HPU_BACKEND");
  EXPECT_EQ(parse_rng_type("GENERATOR"), RNGType::kGenerator);
  EXPECT_EQ(rng_type_name(RNGType::kCuda), "cuda");
  EXPECT_EQ(parse_compute_environment("amazon_sagemaker"), ComputeEnvironment::kAmazonSagemaker);
  EXPECT_EQ(parse_fsdp_sharding_strategy("5"), FsdpShardingStrategy::kHybridShardZero2);
  EXPECT_EQ(parse_fsdp_state_dict_type("3"), FsdpStateDictType::kShardedStateDict);
  EXPECT_EQ(parse_fsdp_auto_wrap_policy("size_based_wrap"), shard::WrapKind::kSizeBased);
  Error e = error_of([] { parse_distributed_type("MULTI_TPU"); });
  EXPECT_NE(e.message().find("'MULTI_TPU'"), std::string::npos);
  EXPECT_NE(e.message().find("FSDP, XLA or MEGATRON_LM"), std::string::npos) << e.message();
  e = error_of([] { parse_fsdp_sharding_strategy("9"); });
  EXPECT_NE(e.message().find("1-5"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace braid::accel
