// Writing: to_yaml's layout (Accelerate's: sorted keys, nested sections, 'no' quoted), round
// trips of real Accelerate files and of a config that sets every section, and the seed's
// write_basic_config.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "braid/accel/config.h"
#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
#include "braid/core/file_util.h"
#include "config_test_util.h"

namespace braid::accel {
namespace {

using testing::data_dir;
using testing::error_of;
using testing::TempDir;

AcceleratorConfig reload(const std::string& yaml, const ConfigOptions& options = {}) {
  AcceleratorConfig c;
  apply_config_yaml(c, yaml, "written.yaml", options);
  return c;
}

TEST(ConfigYaml, DefaultConfigWritesAcceleratesTopLevelKeysSorted) {
  std::string y = to_yaml(AcceleratorConfig{});
  EXPECT_EQ(y,
            "compute_environment: LOCAL_MACHINE\n"
            "debug: false\n"
            "distributed_type: 'NO'\n"
            "downcast_bf16: 'no'\n"
            "enable_cpu_affinity: false\n"
            "machine_rank: 0\n"
            "mixed_precision: 'no'\n"
            "num_machines: 1\n"
            "num_processes: 1\n"
            "rdzv_backend: static\n"
            "same_network: true\n"
            "use_cpu: false\n");
}

TEST(ConfigYaml, SectionsAreNestedAndSorted) {
  AcceleratorConfig c;
  c.distributed_type = DistributedType::kFsdp;
  c.mixed_precision = amp::PrecisionType::kBf16;
  FullyShardedDataParallelPlugin f;
  f.auto_wrap_policy = shard::WrapKind::kTransformerBased;
  f.transformer_cls_names_to_wrap = {"GPT2Block", "Embedding"};
  f.backward_prefetch = FsdpBackwardPrefetch::kBackwardPre;
  c.fsdp_plugin = f;
  c.log_with = {"tensorboard"};
  std::string y = to_yaml(c);
  EXPECT_NE(y.find("distributed_type: FSDP\n"
                   "downcast_bf16: 'no'\n"
                   "enable_cpu_affinity: false\n"
                   "fsdp_config:\n"
                   "  fsdp_activation_checkpointing: false\n"
                   "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                   "  fsdp_backward_prefetch: BACKWARD_PRE\n"
                   "  fsdp_cpu_ram_efficient_loading: false\n"
                   "  fsdp_offload_params: false\n"
                   "  fsdp_sharding_strategy: FULL_SHARD\n"
                   "  fsdp_transformer_layer_cls_to_wrap: GPT2Block,Embedding\n"
                   "  fsdp_use_orig_params: true\n"
                   "  fsdp_version: 1\n"
                   "log_with:\n"
                   "- tensorboard\n"
                   "machine_rank: 0\n"
                   "mixed_precision: bf16\n"),
            std::string::npos)
      << y;
  // FSDP2 files carry fsdp_reshard_after_forward, not the default strategy; the minimum
  // parameter count belongs to SIZE_BASED_WRAP.
  c.fsdp_plugin->fsdp_version = 2;
  c.fsdp_plugin->reshard_after_forward = true;
  std::string y2 = to_yaml(c);
  EXPECT_EQ(y2.find("fsdp_sharding_strategy"), std::string::npos) << y2;
  EXPECT_NE(y2.find("  fsdp_reshard_after_forward: true\n"), std::string::npos) << y2;
  c.fsdp_plugin->auto_wrap_policy = shard::WrapKind::kSizeBased;
  EXPECT_NE(to_yaml(c).find("  fsdp_min_num_params: 100000000\n"), std::string::npos);
  // braid's own sections appear only when they differ from the defaults.
  EXPECT_EQ(y.find("ddp_kwargs"), std::string::npos);
  c.ddp_kwargs.bucket_cap_mb = 4;
  EXPECT_NE(to_yaml(c).find("ddp_kwargs:\n  bucket_cap_mb: 4.0\n"), std::string::npos);
}

TEST(ConfigYaml, StringsYamlWouldMisreadAreQuoted) {
  ConfigOptions opts{.extra_keys = {"note", "count"}};
  AcceleratorConfig c;
  c.main_process_ip = "10.0.0.1";  // looks numeric to YAML 1.1 readers
  c.gpu_ids = "0,1";
  c.rdzv_backend = "yes";
  c.project_config.project_dir = "runs: a # b";
  c.extra["note"] = "it's";
  c.extra["count"] = "12";
  std::string y = to_yaml(c);
  EXPECT_NE(y.find("main_process_ip: '10.0.0.1'\n"), std::string::npos) << y;
  EXPECT_NE(y.find("gpu_ids: 0,1\n"), std::string::npos) << y;
  EXPECT_NE(y.find("rdzv_backend: 'yes'\n"), std::string::npos) << y;
  EXPECT_NE(y.find("project_dir: 'runs: a # b'\n"), std::string::npos) << y;
  EXPECT_NE(y.find("note: it's\n"), std::string::npos) << y;
  EXPECT_NE(y.find("count: 12\n"), std::string::npos) << y;
  AcceleratorConfig back = reload(y, opts);
  EXPECT_EQ(back.main_process_ip, "10.0.0.1");
  EXPECT_EQ(back.gpu_ids, "0,1");
  EXPECT_EQ(back.rdzv_backend, "yes");
  EXPECT_EQ(back.project_config.project_dir, "runs: a # b");
  EXPECT_EQ(back.extra, c.extra);
}

// fp8_config's keys come from the file as they are: a key YAML would misread written raw (a
// control character, a quote, ": ", a leading '-') must be quoted like a value, or the written
// file does not load (found by the config_yaml fuzz target: docs/fuzzing.md).
TEST(ConfigYaml, KeysYamlWouldMisreadAreQuoted) {
  AcceleratorConfig c;
  c.fp8_config["a\tb"] = "1";
  c.fp8_config[std::string("nul\0key", 7)] = "2";
  c.fp8_config["-dash"] = "3";
  c.fp8_config["x: y"] = "4";
  c.fp8_config["it's \"q\""] = "5";
  c.fp8_config["margin"] = "0";
  const std::string y = to_yaml(c);
  EXPECT_NE(y.find("  margin: 0\n"), std::string::npos) << y;  // a plain key stays plain
  EXPECT_NE(y.find("  '-dash': 3\n"), std::string::npos) << y;
  AcceleratorConfig back = reload(y, {});
  EXPECT_EQ(back.fp8_config, c.fp8_config);
  EXPECT_EQ(to_yaml(back), y);
}

// YAML limits an implicit key to 1024 characters (yaml-cpp: "illegal map value"); longer keys
// from the input are written as explicit keys ("? key" and ":" on the next line) and read back.
// The fuzzer found a 1,092-character fp8_config key that did not (docs/fuzzing.md, "Fourth long
// run"; corpus crash-long-key.yaml).
TEST(ConfigYaml, KeysLongerThanAnImplicitKeyRoundTrip) {
  AcceleratorConfig c;
  for (size_t n : {1020, 1021, 1022, 1023, 1024, 1025, 1026, 2000}) {
    c.fp8_config["f" + std::string(n - 1, ')')] = std::to_string(n);
    c.extra["x" + std::string(n - 1, 'y')] = std::to_string(n);
  }
  c.fp8_config[":" + std::string(1500, 'q')] = "needs quotes";
  const std::string y = to_yaml(c);
  EXPECT_NE(y.find("\n  ? f)))"), std::string::npos);
  ConfigOptions opts;
  opts.any_extra_key = true;
  AcceleratorConfig back = reload(y, opts);
  EXPECT_EQ(back.fp8_config, c.fp8_config);
  EXPECT_EQ(back.extra, c.extra);
  EXPECT_EQ(to_yaml(back), y);
}

// Every real file: load, write, load again; the two configs write the same text, and the
// fields the file sets survive.
TEST(ConfigYaml, RealAccelerateFilesRoundTrip) {
  for (const char* name :
       {"accelerate_fsdp.yaml", "accelerate_fsdp2.yaml", "accelerate_deepspeed.yaml",
        "accelerate_deepspeed_json.yaml", "accelerate_0_12_fsdp.yaml", "accelerate_fp8.yaml",
        "accelerate_megatron.yaml"}) {
    SCOPED_TRACE(name);
    AcceleratorConfig first = load_config_file(data_dir() / name);
    std::string y = to_yaml(first);
    AcceleratorConfig second = reload(y);
    EXPECT_EQ(to_yaml(second), y);
    EXPECT_EQ(second.distributed_type, first.distributed_type);
    EXPECT_EQ(second.mixed_precision, first.mixed_precision);
    EXPECT_EQ(second.num_processes, first.num_processes);
    EXPECT_EQ(second.fsdp_plugin.has_value(), first.fsdp_plugin.has_value());
    EXPECT_EQ(second.deepspeed_plugin.has_value(), first.deepspeed_plugin.has_value());
    EXPECT_EQ(second.fp8_config, first.fp8_config);
  }
  // The FSDP file's own lines come back as Accelerate wrote them.
  std::string y = to_yaml(load_config_file(data_dir() / "accelerate_fsdp.yaml"));
  for (const char* line :
       {"compute_environment: LOCAL_MACHINE\n", "distributed_type: FSDP\n",
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n",
        "  fsdp_backward_prefetch: BACKWARD_PRE\n", "  fsdp_cpu_ram_efficient_loading: true\n",
        "  fsdp_forward_prefetch: false\n", "  fsdp_sharding_strategy: FULL_SHARD\n",
        "  fsdp_state_dict_type: SHARDED_STATE_DICT\n", "  fsdp_sync_module_states: true\n",
        "  fsdp_transformer_layer_cls_to_wrap: GPT2Block\n", "mixed_precision: bf16\n",
        "num_processes: 4\n"}) {
    EXPECT_NE(y.find(line), std::string::npos) << line << " not in\n" << y;
  }
}

TEST(ConfigYaml, EverySectionRoundTrips) {
  ConfigOptions opts{.extra_keys = {"max_steps", "lr"}};
  AcceleratorConfig c;
  c.distributed_type = DistributedType::kFsdp;
  c.mixed_precision = amp::PrecisionType::kFp16;
  c.num_processes = 8;
  c.num_machines = 2;
  c.machine_rank = 1;
  c.main_process_ip = "node0";
  c.main_process_port = 29500;
  c.gpu_ids = "all";
  c.use_cpu = false;
  c.debug = true;
  c.downcast_bf16 = true;
  c.gradient_accumulation_plugin = GradientAccumulationPlugin{
      .num_steps = 3, .adjust_scheduler = false, .sync_each_batch = false};
  c.ddp_kwargs.broadcast_buffers = false;
  c.ddp_kwargs.gradient_as_bucket_view = true;
  c.ddp_kwargs.static_graph = true;
  c.ddp_kwargs.comm_hook = shard::DDPCommunicationHookType::kFp16;
  c.grad_scaler_kwargs.backoff_factor = 0.25;
  c.grad_scaler_kwargs.enabled = false;
  c.autocast_kwargs.enabled = false;
  c.init_process_group_kwargs.timeout = std::chrono::milliseconds(1500);
  FullyShardedDataParallelPlugin f;
  f.fsdp_version = 2;
  f.sharding_strategy = FsdpShardingStrategy::kHybridShardZero2;
  f.reshard_after_forward = false;
  f.backward_prefetch = FsdpBackwardPrefetch::kNoPrefetch;
  f.mixed_precision_policy = FsdpMixedPrecisionPolicy{DType::kBF16, DType::kF32, DType::kF32};
  f.auto_wrap_policy = shard::WrapKind::kSizeBased;
  f.min_num_params = 12345;
  f.cpu_offload = true;
  f.ignored_modules = {"lm_head", "transformer.wte"};
  f.state_dict_type = FsdpStateDictType::kFullStateDict;
  f.limit_all_gathers = false;
  f.forward_prefetch = true;
  f.sync_module_states = false;
  f.use_orig_params = false;
  f.activation_checkpointing = true;
  f.hsdp_shard_size = 4;
  c.fsdp_plugin = f;
  DeepSpeedPlugin d;
  d.zero_stage = 1;
  d.gradient_accumulation_steps = 3;
  d.gradient_clipping = 0.5;
  d.offload_optimizer_device = nn::OffloadDevice::kNvme;
  d.offload_optimizer_nvme_path = "/nvme/opt";
  d.transformer_moe_cls_names = {"MixtralSparseMoeBlock"};
  d.mics_shard_size = 2;
  c.deepspeed_plugin = d;
  c.megatron_lm_plugin = MegatronLMPlugin{.tp_degree = 2, .num_micro_batches = 4};
  c.parallelism_config = ParallelismConfig{.dp_replicate_size = 2, .dp_shard_size = 4};
  c.fp8_config = {{"backend", "TE"}, {"margin", "0"}};
  c.dataloader_config.even_batches = false;
  c.dataloader_config.use_seedable_sampler = true;
  c.dataloader_config.non_blocking = true;
  c.project_config.logging_dir = "logs";
  c.project_config.iteration = 5;
  c.project_config.save_on_each_node = true;
  c.log_with = {"tensorboard", "csv"};
  c.seed = 1234;
  c.extra = {{"max_steps", "100"}, {"lr", "3e-4"}};

  std::string y = to_yaml(c);
  AcceleratorConfig back = reload(y, opts);
  EXPECT_EQ(to_yaml(back), y);
  EXPECT_EQ(back.gradient_accumulation_plugin->num_steps, 3);
  EXPECT_FALSE(back.gradient_accumulation_plugin->adjust_scheduler);
  EXPECT_EQ(back.ddp_kwargs.comm_hook, shard::DDPCommunicationHookType::kFp16);
  EXPECT_EQ(back.grad_scaler_kwargs.backoff_factor, 0.25);
  EXPECT_EQ(back.init_process_group_kwargs.timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(back.fsdp_plugin->mixed_precision_policy, f.mixed_precision_policy);
  EXPECT_EQ(back.fsdp_plugin->ignored_modules, f.ignored_modules);
  EXPECT_EQ(back.fsdp_plugin->reshard_after_forward, false);
  EXPECT_EQ(back.fsdp_plugin->hsdp_shard_size, 4);
  EXPECT_EQ(back.fsdp_plugin->limit_all_gathers, false);
  EXPECT_EQ(back.deepspeed_plugin->offload_optimizer_nvme_path, "/nvme/opt");
  EXPECT_EQ(back.deepspeed_plugin->mics_shard_size, 2);
  EXPECT_EQ(back.megatron_lm_plugin->tp_degree, 2);
  EXPECT_EQ(back.parallelism_config->dp_shard_size, 4);
  EXPECT_EQ(back.project_config.logging_dir, "logs");
  EXPECT_EQ(back.seed, 1234u);
  EXPECT_EQ(back.extra, c.extra);
  EXPECT_TRUE(back.downcast_bf16);
  EXPECT_EQ(back.main_process_port, 29500);
}

class WriteBasicConfig : public ::testing::Test {
 protected:
  ClearEnvironment clear_;
  TempDir dir_;
};

TEST_F(WriteBasicConfig, WritesACpuConfigAndNeverOverwrites) {
  std::filesystem::path path = dir_ / "sub" / "default_config.yaml";
  auto written = write_basic_config("bf16", path);
  ASSERT_TRUE(written.has_value());
  EXPECT_EQ(*written, path);
  AcceleratorConfig c = load_config_file(path);
  EXPECT_EQ(c.mixed_precision, amp::PrecisionType::kBf16);
  EXPECT_EQ(c.compute_environment, ComputeEnvironment::kLocalMachine);
  EXPECT_FALSE(c.debug);
  // This machine has no GPU runtime built in the test build: one CPU process.
  if (!is_runtime_built(DeviceType::kCUDA) && !is_runtime_built(DeviceType::kHIP)) {
    EXPECT_EQ(c.distributed_type, DistributedType::kNo);
    EXPECT_EQ(c.num_processes, 1);
    EXPECT_TRUE(c.use_cpu);
  }
  std::string before = read_file(path);
  EXPECT_FALSE(write_basic_config(amp::PrecisionType::kFp16, path).has_value());
  EXPECT_EQ(read_file(path), before);
}

TEST_F(WriteBasicConfig, DefaultLocationAndBadPrecision) {
  PatchEnvironment env{{"BRAID_CONFIG_FILE", (dir_ / "job.yaml").string()}};
  auto written = write_basic_config();
  ASSERT_TRUE(written.has_value());
  EXPECT_EQ(*written, dir_ / "job.yaml");
  EXPECT_EQ(load_config_file(*written).mixed_precision, amp::PrecisionType::kNo);
  Error e = error_of([&] { write_basic_config("fp64", dir_ / "other.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("'fp64'"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "other.yaml"));
}

TEST(ConfigKeys, PathsAreUniqueAndDotted) {
  std::vector<std::string> paths = config_key_paths();
  std::set<std::string> unique(paths.begin(), paths.end());
  EXPECT_EQ(unique.size(), paths.size());
  EXPECT_TRUE(unique.count("fsdp_config.fsdp_sharding_strategy"));
  EXPECT_TRUE(unique.count("deepspeed_config.zero_stage"));
  EXPECT_TRUE(unique.count("megatron_lm_config.megatron_lm_tp_degree"));
  EXPECT_TRUE(unique.count("mixed_precision"));
}

}  // namespace
}  // namespace braid::accel
