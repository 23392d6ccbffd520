// sharding_plan: each FSDP / DeepSpeed / Megatron-LM / DDP setting and the ShardingOptions it
// becomes (docs/config.md, "Mapping to braid's sharding"), the warnings for settings braid
// cannot honour exactly, and validate_config's checks across keys.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "braid/accel/config.h"
#include "braid/core/file_util.h"
#include "config_test_util.h"

namespace braid::accel {
namespace {

using shard::ZeroStage;
using testing::data_dir;
using testing::error_of;

AcceleratorConfig fsdp(FsdpShardingStrategy s, int64_t processes = 4, int64_t machines = 1) {
  AcceleratorConfig c;
  c.distributed_type = DistributedType::kFsdp;
  c.num_processes = processes;
  c.num_machines = machines;
  FullyShardedDataParallelPlugin f;
  f.sharding_strategy = s;
  c.fsdp_plugin = f;
  return c;
}

bool has_warning(const ShardingPlan& plan, std::string_view text) {
  for (const std::string& w : plan.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(ShardingPlan, FsdpStrategies) {
  ShardingPlan p = sharding_plan(fsdp(FsdpShardingStrategy::kFullShard));
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_TRUE(p.options.reshard_after_forward);
  EXPECT_EQ(p.options.shard_group_size, 0);

  p = sharding_plan(fsdp(FsdpShardingStrategy::kShardGradOp));
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_FALSE(p.options.reshard_after_forward);

  p = sharding_plan(fsdp(FsdpShardingStrategy::kNoShard));
  EXPECT_EQ(p.options.stage, ZeroStage::k0);

  // HYBRID_SHARD on 2 machines of 4: shard within a machine, replicate across.
  p = sharding_plan(fsdp(FsdpShardingStrategy::kHybridShard, 8, 2));
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_EQ(p.options.shard_group_size, 4);
  p = sharding_plan(fsdp(FsdpShardingStrategy::kHybridShardZero2, 8, 2));
  EXPECT_EQ(p.options.stage, ZeroStage::k2);
  EXPECT_EQ(p.options.shard_group_size, 4);
  // On one machine HYBRID_SHARD shards over every rank.
  EXPECT_EQ(sharding_plan(fsdp(FsdpShardingStrategy::kHybridShard, 4, 1)).options.shard_group_size,
            0);
  // braid's explicit shard size.
  AcceleratorConfig c = fsdp(FsdpShardingStrategy::kHybridShard, 8, 1);
  c.fsdp_plugin->hsdp_shard_size = 2;
  EXPECT_EQ(sharding_plan(c).options.shard_group_size, 2);
  c.fsdp_plugin->hsdp_shard_size = 3;
  Error e = error_of([&] { sharding_plan(c); });
  EXPECT_NE(e.message().find("does not divide num_processes 8"), std::string::npos) << e.message();
  c = fsdp(FsdpShardingStrategy::kFullShard, 8);
  c.fsdp_plugin->hsdp_shard_size = 2;
  e = error_of([&] { sharding_plan(c); });
  EXPECT_NE(e.message().find("applies to HYBRID_SHARD"), std::string::npos) << e.message();
}

TEST(ShardingPlan, FsdpReshardAfterForwardOverridesTheStrategy) {
  AcceleratorConfig c = fsdp(FsdpShardingStrategy::kFullShard);
  c.fsdp_plugin->fsdp_version = 2;
  c.fsdp_plugin->reshard_after_forward = false;
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_FALSE(p.options.reshard_after_forward);
  // Without sharded parameters it would do nothing: refused by name.
  c = fsdp(FsdpShardingStrategy::kNoShard);
  c.fsdp_plugin->reshard_after_forward = true;
  Error e = error_of([&] { sharding_plan(c); });
  EXPECT_NE(e.message().find("fsdp_config.fsdp_reshard_after_forward applies to sharded"),
            std::string::npos)
      << e.message();
}

TEST(ShardingPlan, Fsdp2ParallelismConfigIsHsdp) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_fsdp2.yaml");
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_TRUE(p.options.reshard_after_forward);
  EXPECT_EQ(p.options.shard_group_size, 4);  // dp_shard 4 x dp_replicate 2
  EXPECT_TRUE(p.options.activation_checkpointing);
  EXPECT_TRUE(p.init_on_meta);
  EXPECT_EQ(p.state_dict_type, FsdpStateDictType::kFullStateDict);
  EXPECT_EQ(p.options.precision.param_dtype, DType::kBF16);
  EXPECT_EQ(p.options.precision.reduce_dtype, DType::kBF16);
  EXPECT_EQ(p.options.wrap.kind, shard::WrapKind::kTransformerBased);
  EXPECT_EQ(p.options.wrap.transformer_cls_names_to_wrap, std::vector<std::string>{"GPT2Block"});
}

TEST(ShardingPlan, FsdpFileFromAccelerateConfig) {
  ShardingPlan p = sharding_plan(load_config_file(data_dir() / "accelerate_fsdp.yaml"));
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_TRUE(p.options.backward_prefetch);  // BACKWARD_PRE
  EXPECT_FALSE(p.options.forward_prefetch);  // fsdp_forward_prefetch: false
  EXPECT_TRUE(p.options.sync_module_states);
  EXPECT_TRUE(p.init_on_meta);  // cpu_ram_efficient_loading
  EXPECT_EQ(p.state_dict_type, FsdpStateDictType::kShardedStateDict);
  EXPECT_EQ(p.offload_optimizer.device, nn::OffloadDevice::kNone);
  EXPECT_TRUE(p.warnings.empty()) << p.warnings.front();
}

TEST(ShardingPlan, FsdpMixedPrecisionFromTopLevelOrPolicy) {
  AcceleratorConfig c = fsdp(FsdpShardingStrategy::kFullShard);
  for (auto [precision, dtype] : {std::pair{amp::PrecisionType::kNo, DType::kF32},
                                  std::pair{amp::PrecisionType::kFp16, DType::kF16},
                                  std::pair{amp::PrecisionType::kBf16, DType::kBF16},
                                  std::pair{amp::PrecisionType::kFp8, DType::kBF16}}) {
    c.mixed_precision = precision;
    ShardingPlan p = sharding_plan(c);
    EXPECT_EQ(p.options.precision.param_dtype, dtype);
    EXPECT_EQ(p.options.precision.reduce_dtype, dtype);
  }
  c.fsdp_plugin->mixed_precision_policy =
      FsdpMixedPrecisionPolicy{DType::kBF16, DType::kF32, DType::kBF16};
  // Buffers are not cast: a buffer_dtype other than f32 is refused, not ignored.
  Error e = error_of([&] { sharding_plan(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_NE(e.message().find("buffer_dtype bf16"), std::string::npos) << e.message();
  c.fsdp_plugin->mixed_precision_policy->buffer_dtype = DType::kF32;
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.options.precision.param_dtype, DType::kBF16);
  EXPECT_EQ(p.options.precision.reduce_dtype, DType::kF32);
  // DDP keeps f32 parameters: mixed precision is autocast there.
  AcceleratorConfig ddp;
  ddp.distributed_type = DistributedType::kMultiCpu;
  ddp.mixed_precision = amp::PrecisionType::kBf16;
  EXPECT_EQ(sharding_plan(ddp).options.precision.param_dtype, DType::kF32);
}

TEST(ShardingPlan, FsdpWrapPrefetchOffloadAndWarnings) {
  AcceleratorConfig c = fsdp(FsdpShardingStrategy::kFullShard);
  FullyShardedDataParallelPlugin& f = *c.fsdp_plugin;
  f.auto_wrap_policy = shard::WrapKind::kSizeBased;
  f.min_num_params = 1000;
  f.ignored_modules = {"lm_head"};
  f.backward_prefetch = FsdpBackwardPrefetch::kNoPrefetch;
  f.forward_prefetch = true;
  f.sync_module_states = false;
  f.cpu_offload = true;
  f.activation_checkpointing = true;
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.options.wrap.kind, shard::WrapKind::kSizeBased);
  EXPECT_EQ(p.options.wrap.min_num_params, 1000);
  EXPECT_EQ(p.options.wrap.ignored_modules, std::vector<std::string>{"lm_head"});
  EXPECT_FALSE(p.options.backward_prefetch);
  EXPECT_TRUE(p.options.forward_prefetch);
  EXPECT_FALSE(p.options.sync_module_states);
  EXPECT_EQ(p.options.offload_param.device, nn::OffloadDevice::kCpu);
  EXPECT_EQ(p.offload_optimizer.device, nn::OffloadDevice::kCpu);
  EXPECT_TRUE(p.options.activation_checkpointing);
  EXPECT_EQ(p.state_dict_type, FsdpStateDictType::kFullStateDict);  // fsdp_version 1's default
  EXPECT_TRUE(p.warnings.empty());

  // Settings honoured approximately are warned about; settings that would do nothing are
  // refused.
  f.backward_prefetch = FsdpBackwardPrefetch::kBackwardPost;
  f.state_dict_type = FsdpStateDictType::kLocalStateDict;
  p = sharding_plan(c);
  EXPECT_TRUE(p.options.backward_prefetch);
  EXPECT_TRUE(has_warning(p, "BACKWARD_POST"));
  EXPECT_TRUE(has_warning(p, "LOCAL_STATE_DICT"));
  EXPECT_EQ(p.state_dict_type, FsdpStateDictType::kShardedStateDict);
  f.limit_all_gathers = false;
  EXPECT_NE(error_of([&] { sharding_plan(c); }).message().find("fsdp_limit_all_gathers false"),
            std::string::npos);
  f.limit_all_gathers = true;
  f.auto_wrap_policy = shard::WrapKind::kTransformerBased;
  EXPECT_NE(error_of([&] { sharding_plan(c); })
                .message()
                .find("without fsdp_config.fsdp_transformer_layer_cls_to_wrap"),
            std::string::npos);
  // Unset: braid's defaults stay (prefetch on, sync on).
  p = sharding_plan(fsdp(FsdpShardingStrategy::kFullShard));
  shard::ShardingOptions defaults;
  EXPECT_EQ(p.options.backward_prefetch, defaults.backward_prefetch);
  EXPECT_EQ(p.options.forward_prefetch, defaults.forward_prefetch);
  EXPECT_EQ(p.options.sync_module_states, defaults.sync_module_states);
}

TEST(ShardingPlan, DeepSpeed) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_deepspeed.yaml");
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_EQ(p.options.precision.param_dtype, DType::kBF16);
  EXPECT_EQ(p.options.offload_param.device, nn::OffloadDevice::kNvme);
  EXPECT_EQ(p.options.offload_param.nvme_path, "/local_nvme");
  EXPECT_EQ(p.offload_optimizer.device, nn::OffloadDevice::kCpu);
  EXPECT_TRUE(p.init_on_meta);
  EXPECT_TRUE(p.save_16bit_model);
  EXPECT_EQ(p.gradient_clipping, 1.0);
  EXPECT_TRUE(p.warnings.empty());

  EXPECT_EQ(p.state_dict_type, FsdpStateDictType::kShardedStateDict);  // the engine's own
  // Stage-3 settings at stages 0-2 would do nothing: refused by name.
  for (int stage = 0; stage <= 2; ++stage) {
    c.deepspeed_plugin->zero_stage = stage;
    EXPECT_NE(error_of([&] { sharding_plan(c); })
                  .message()
                  .find("offload_param_device nvme applies to ZeRO stage 3"),
              std::string::npos);
    c.deepspeed_plugin->offload_param_device = nn::OffloadDevice::kNone;
    EXPECT_NE(error_of([&] { sharding_plan(c); })
                  .message()
                  .find("zero3_init_flag applies to ZeRO stage 3"),
              std::string::npos);
    c.deepspeed_plugin->zero3_init_flag = false;
    p = sharding_plan(c);
    EXPECT_EQ(p.options.stage, static_cast<ZeroStage>(stage));
    EXPECT_FALSE(p.init_on_meta);
    c.deepspeed_plugin->offload_param_device = nn::OffloadDevice::kNvme;
    c.deepspeed_plugin->zero3_init_flag = true;
  }
  c.deepspeed_plugin->offload_param_device = nn::OffloadDevice::kNone;
  c.deepspeed_plugin->zero3_init_flag = false;
  c.deepspeed_plugin->zero_stage = 2;
  c.deepspeed_plugin->mics_shard_size = 4;
  EXPECT_EQ(sharding_plan(c).options.shard_group_size, 4);
  c.deepspeed_plugin->offload_optimizer_device = nn::OffloadDevice::kNvme;
  Error e = error_of([&] { sharding_plan(c); });
  EXPECT_NE(e.message().find("offload_optimizer_nvme_path is empty"), std::string::npos)
      << e.message();
}

TEST(ShardingPlan, MegatronDataParallelPart) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_megatron.yaml");
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.options.stage, ZeroStage::k1);        // distributed optimizer
  EXPECT_TRUE(p.options.activation_checkpointing);  // recompute_activations
  EXPECT_EQ(p.gradient_clipping, 1.0);
  c.megatron_lm_plugin->use_distributed_optimizer = false;
  c.megatron_lm_plugin->gradient_clipping = 0;
  p = sharding_plan(c);
  EXPECT_EQ(p.options.stage, ZeroStage::k0);
  EXPECT_FALSE(p.gradient_clipping.has_value());
  EXPECT_EQ(p.tp_degree, 1);
  EXPECT_EQ(p.pp_degree, 1);
}

TEST(ShardingPlan, ModelParallelDegrees) {
  AcceleratorConfig c = load_config_file(data_dir() / "accelerate_megatron.yaml");
  c.megatron_lm_plugin->tp_degree = 2;
  c.megatron_lm_plugin->pp_degree = 2;
  c.megatron_lm_plugin->num_micro_batches = 4;
  c.megatron_lm_plugin->sequence_parallelism = true;
  c.num_processes = 8;
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.tp_degree, 2);
  EXPECT_EQ(p.pp_degree, 2);
  EXPECT_EQ(p.num_micro_batches, 4);
  EXPECT_TRUE(p.sequence_parallel);
  EXPECT_TRUE(p.warnings.empty());
  // The degrees apply under any distributed_type; the dp dimension follows its plugin.
  c.distributed_type = DistributedType::kDeepSpeed;
  c.deepspeed_plugin = DeepSpeedPlugin{.zero_stage = 3};
  p = sharding_plan(c);
  EXPECT_EQ(p.options.stage, ZeroStage::k3);
  EXPECT_EQ(p.tp_degree, 2);
  EXPECT_TRUE(has_warning(p, "megatron_lm_config with distributed_type DEEPSPEED"));
  // Degrees whose product does not divide the processes.
  c.num_processes = 6;
  Error e = error_of([&] { sharding_plan(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("num_processes 6 is not a multiple of tp_degree x pp_degree = 2 x 2"),
            std::string::npos)
      << e.message();
  // Settings that only make sense with model parallelism are refused without it.
  c.num_processes = 2;
  c.megatron_lm_plugin->tp_degree = 1;
  c.megatron_lm_plugin->pp_degree = 1;
  EXPECT_NE(error_of([&] { sharding_plan(c); })
                .message()
                .find("megatron_lm_sequence_parallelism applies to tensor parallelism"),
            std::string::npos);
  c.megatron_lm_plugin->sequence_parallelism = false;
  EXPECT_NE(error_of([&] { sharding_plan(c); })
                .message()
                .find("megatron_lm_num_micro_batches 4 applies to pipeline parallelism"),
            std::string::npos);
  c.megatron_lm_plugin->num_micro_batches = 1;
  p = sharding_plan(c);
  EXPECT_FALSE(p.sequence_parallel);
  EXPECT_EQ(p.num_micro_batches, 0);
  // parallelism_config's tp_size; a different Megatron degree is a contradiction.
  c.parallelism_config = ParallelismConfig{.tp_size = 2};
  c.megatron_lm_plugin->tp_degree = 4;
  c.num_processes = 0;
  e = error_of([&] { sharding_plan(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("disagrees with parallelism_config.parallelism_config_tp_size 2"),
            std::string::npos)
      << e.message();
  // HSDP and model parallelism together are not built.
  c = {};
  c.distributed_type = DistributedType::kFsdp;
  c.fsdp_plugin = FullyShardedDataParallelPlugin{};
  c.fsdp_plugin->sharding_strategy = FsdpShardingStrategy::kHybridShard;
  c.fsdp_plugin->hsdp_shard_size = 2;
  c.megatron_lm_plugin = MegatronLMPlugin{.tp_degree = 2};
  c.num_processes = 4;
  e = error_of([&] { sharding_plan(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_NE(e.message().find("HSDP"), std::string::npos) << e.message();
}

TEST(ShardingPlan, DdpKwargsAndIgnoredPlugins) {
  AcceleratorConfig c;
  c.distributed_type = DistributedType::kMultiCpu;
  c.ddp_kwargs.bucket_cap_mb = 1.5;
  c.ddp_kwargs.find_unused_parameters = true;
  c.ddp_kwargs.comm_hook = shard::DDPCommunicationHookType::kBf16;
  c.fsdp_plugin = FullyShardedDataParallelPlugin{};
  ShardingPlan p = sharding_plan(c);
  EXPECT_EQ(p.options.stage, ZeroStage::k0);
  EXPECT_EQ(p.options.ddp.bucket_cap_mb, 1.5);
  EXPECT_TRUE(p.options.ddp.find_unused_parameters);
  EXPECT_EQ(p.options.ddp.comm_hook, shard::DDPCommunicationHookType::kBf16);
  EXPECT_TRUE(has_warning(p, "fsdp_config is ignored: distributed_type is MULTI_CPU"));
  c.parallelism_config = ParallelismConfig{.tp_size = 2};
  EXPECT_EQ(sharding_plan(c).tp_degree, 2);
  c.parallelism_config = ParallelismConfig{.cp_size = 2};
  Error e = error_of([&] { sharding_plan(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_NE(e.message().find("parallelism_config_cp_size 2"), std::string::npos) << e.message();
}

TEST(ValidateConfig, WhatBraidCannotRun) {
  AcceleratorConfig c;
  c.compute_environment = ComputeEnvironment::kAmazonSagemaker;
  EXPECT_EQ(error_of([&] { validate_config(c); }).kind(), ErrorKind::kNotSupported);
  c = {};
  for (DistributedType t : {DistributedType::kXla, DistributedType::kMultiNpu,
                            DistributedType::kMultiXpu, DistributedType::kMultiHpu}) {
    c.distributed_type = t;
    Error e = error_of([&] { validate_config(c); });
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_NE(e.message().find(distributed_type_name(t)), std::string::npos);
  }
  c = {};
  c.dynamo_backend = DynamoBackend::kInductor;
  Error e = error_of([&] { validate_config(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_NE(e.message().find("dynamo_backend INDUCTOR"), std::string::npos) << e.message();
  // Through a file: dynamo_config parses, validation refuses.
  AcceleratorConfig d;
  apply_config_yaml(d, "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: default\n",
                    "job.yaml");
  EXPECT_EQ(d.dynamo_backend, DynamoBackend::kInductor);
  EXPECT_EQ(error_of([&] { validate_config(d); }).kind(), ErrorKind::kNotSupported);
}

TEST(ValidateConfig, Contradictions) {
  AcceleratorConfig c;
  c.gradient_accumulation_steps = 2;
  c.gradient_accumulation_plugin = GradientAccumulationPlugin{.num_steps = 2};
  Error e = error_of([&] { validate_config(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("both set"), std::string::npos) << e.message();

  c = {};
  c.gradient_accumulation_steps = 2;
  c.deepspeed_plugin = DeepSpeedPlugin{};
  c.deepspeed_plugin->gradient_accumulation_steps = 4;
  e = error_of([&] { validate_config(c); });
  EXPECT_NE(e.message().find("disagrees"), std::string::npos) << e.message();

  c = fsdp(FsdpShardingStrategy::kFullShard);
  c.fsdp_plugin->cpu_ram_efficient_loading = true;
  c.fsdp_plugin->sync_module_states = false;
  e = error_of([&] { validate_config(c); });
  EXPECT_NE(e.message().find("fsdp_sync_module_states is false"), std::string::npos);

  c = {};
  c.num_machines = 2;
  c.machine_rank = 2;
  c.num_processes = 4;
  EXPECT_NE(error_of([&] { validate_config(c); }).message().find("machine_rank 2"),
            std::string::npos);
  c.machine_rank = 0;
  c.num_processes = 3;
  EXPECT_NE(error_of([&] { validate_config(c); }).message().find("not a multiple"),
            std::string::npos);

  c = {};
  c.use_cpu = true;
  c.distributed_type = DistributedType::kMultiGpu;
  EXPECT_EQ(error_of([&] { validate_config(c); }).kind(), ErrorKind::kInvalidArgument);

  c = load_config_file(data_dir() / "accelerate_fsdp2.yaml");
  c.num_processes = 4;  // 2 x 4 mesh
  EXPECT_NE(error_of([&] { validate_config(c); }).message().find("parallelism_config"),
            std::string::npos);
}

TEST(GradientAccumulation, EffectiveStepsAndPlugin) {
  AcceleratorConfig c;
  EXPECT_EQ(gradient_accumulation_steps(c), 1);
  EXPECT_TRUE(gradient_accumulation_plugin(c).sync_each_batch);  // braid's default
  c.deepspeed_plugin = DeepSpeedPlugin{};
  c.deepspeed_plugin->gradient_accumulation_steps = 5;
  EXPECT_EQ(gradient_accumulation_steps(c), 5);
  c.gradient_accumulation_steps = 5;
  EXPECT_NO_THROW(validate_config(c));
  EXPECT_EQ(gradient_accumulation_plugin(c).num_steps, 5);
}

// docs/config.md's "What each key does" names every configuration key (as `section.key`), so
// a key added to the table without saying whether it acts or is refused fails here.
TEST(ConfigDocs, EveryKeyHasItsStatusInDocsConfigMd) {
  const std::string doc = read_file(std::filesystem::path(BRAID_SOURCE_DIR) / "docs" / "config.md");
  const size_t begin = doc.find("## What each key does");
  ASSERT_NE(begin, std::string::npos) << "docs/config.md has no \"What each key does\" section";
  const size_t end = doc.find("\n## ", begin + 1);
  const std::string section = doc.substr(begin, end - begin);
  std::string missing;
  for (const std::string& path : config_key_paths()) {
    if (section.find("`" + path + "`") == std::string::npos) missing += " " + path;
  }
  EXPECT_TRUE(missing.empty()) << "keys without a status in docs/config.md:" << missing;
}

}  // namespace
}  // namespace braid::accel
