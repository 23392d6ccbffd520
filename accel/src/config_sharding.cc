// sharding_plan: distributed_type and its plugin -> shard::ShardingOptions and the settings
// around ShardedModel (docs/config.md, "Mapping to braid's sharding"); validate_config: the
// checks across keys. Both are pure: no files, no environment.
#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "braid/accel/config.h"
#include "braid/core/error.h"
#include "config_keys.h"

namespace braid::accel {
namespace {

using shard::ZeroStage;

std::string name_of(DistributedType t) {
  return std::string(distributed_type_name(t));
}

// The shard group of HSDP: fsdp_hsdp_shard_size, else parallelism_config's dp_shard_size when
// it replicates, else (hybrid strategies) the processes of one machine.
int64_t hsdp_shard_size(const AcceleratorConfig& c, const FullyShardedDataParallelPlugin& f,
                        bool hybrid) {
  int64_t size = 0;
  const char* from = "";
  if (f.hsdp_shard_size > 0) {
    BRAID_CHECK(hybrid, kInvalidArgument, "fsdp_config.fsdp_hsdp_shard_size ", f.hsdp_shard_size,
                " applies to HYBRID_SHARD and HYBRID_SHARD_ZERO2; fsdp_sharding_strategy is ",
                fsdp_sharding_strategy_name(f.sharding_strategy));
    size = f.hsdp_shard_size;
    from = "fsdp_config.fsdp_hsdp_shard_size";
  } else if (c.parallelism_config && c.parallelism_config->dp_replicate_size > 1) {
    size = c.parallelism_config->dp_shard_size;
    from = "parallelism_config.parallelism_config_dp_shard_size";
  } else if (hybrid && c.num_machines > 1 && c.num_processes > 0) {
    BRAID_CHECK(c.num_processes % c.num_machines == 0, kInvalidArgument, "num_processes ",
                c.num_processes, " is not a multiple of num_machines ", c.num_machines,
                ": HYBRID_SHARD shards over the processes of one machine");
    size = c.num_processes / c.num_machines;
    from = "num_processes / num_machines";
  }
  if (size > 0 && c.num_processes > 0) {
    BRAID_CHECK(c.num_processes % size == 0, kInvalidArgument, "the shard group size ", size, " (",
                from, ") does not divide num_processes ", c.num_processes);
  }
  return size;
}

void map_fsdp(const AcceleratorConfig& c, ShardingPlan& plan) {
  const FullyShardedDataParallelPlugin f = c.fsdp_plugin.value_or(FullyShardedDataParallelPlugin{});
  shard::ShardingOptions& o = plan.options;
  bool hybrid = false;
  switch (f.sharding_strategy) {
    case FsdpShardingStrategy::kFullShard:
      o.stage = ZeroStage::k3;
      o.reshard_after_forward = true;
      break;
    case FsdpShardingStrategy::kShardGradOp:  // gathered from forward to the end of backward
      o.stage = ZeroStage::k3;
      o.reshard_after_forward = false;
      break;
    case FsdpShardingStrategy::kNoShard:
      o.stage = ZeroStage::k0;
      break;
    case FsdpShardingStrategy::kHybridShard:
      o.stage = ZeroStage::k3;
      o.reshard_after_forward = true;
      hybrid = true;
      break;
    case FsdpShardingStrategy::kHybridShardZero2:
      o.stage = ZeroStage::k2;
      hybrid = true;
      break;
  }
  if (f.reshard_after_forward) {
    if (o.stage == ZeroStage::k3) {
      o.reshard_after_forward = *f.reshard_after_forward;
    } else {
      BRAID_FAIL(kInvalidArgument,
                 "fsdp_config.fsdp_reshard_after_forward applies to sharded parameters "
                 "(FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD); it has no effect with ",
                 fsdp_sharding_strategy_name(f.sharding_strategy), ": remove it");
    }
  }
  if (o.stage != ZeroStage::k0) o.shard_group_size = hsdp_shard_size(c, f, hybrid);

  o.wrap.kind = f.auto_wrap_policy;
  o.wrap.transformer_cls_names_to_wrap = f.transformer_cls_names_to_wrap;
  o.wrap.min_num_params = f.min_num_params;
  o.wrap.ignored_modules = f.ignored_modules;
  BRAID_CHECK(f.auto_wrap_policy != shard::WrapKind::kTransformerBased ||
                  !f.transformer_cls_names_to_wrap.empty(),
              kInvalidArgument,
              "fsdp_config.fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP without "
              "fsdp_config.fsdp_transformer_layer_cls_to_wrap: braid models have no "
              "_no_split_modules, so nothing would be wrapped; name the block types (e.g. "
              "GPT2Block)");
  if (f.backward_prefetch) {
    o.backward_prefetch = *f.backward_prefetch != FsdpBackwardPrefetch::kNoPrefetch;
    if (*f.backward_prefetch == FsdpBackwardPrefetch::kBackwardPost) {
      plan.warnings.push_back(
          "fsdp_config.fsdp_backward_prefetch BACKWARD_POST: braid starts the "
          "next unit's gather when a unit's backward starts (BACKWARD_PRE)");
    }
  }
  if (f.forward_prefetch) o.forward_prefetch = *f.forward_prefetch;
  BRAID_CHECK(f.limit_all_gathers, kNotSupported,
              "fsdp_config.fsdp_limit_all_gathers false: braid always gathers at most one unit "
              "ahead; expected true");
  if (f.sync_module_states) o.sync_module_states = *f.sync_module_states;
  if (f.cpu_ram_efficient_loading) {
    o.sync_module_states = true;
    plan.init_on_meta = true;
  }
  if (f.cpu_offload) {
    plan.offload_optimizer.device = nn::OffloadDevice::kCpu;
    if (o.stage == ZeroStage::k3) {
      o.offload_param.device = nn::OffloadDevice::kCpu;
    } else {
      plan.warnings.push_back(
          "fsdp_config.fsdp_offload_params: parameters are offloaded only "
          "when sharded at stage 3; here only the optimizer state is");
    }
  }
  FsdpStateDictType sd =
      f.state_dict_type.value_or(f.fsdp_version == 2 ? FsdpStateDictType::kShardedStateDict
                                                     : FsdpStateDictType::kFullStateDict);
  if (sd == FsdpStateDictType::kLocalStateDict) {
    plan.warnings.push_back(
        "fsdp_config.fsdp_state_dict_type LOCAL_STATE_DICT: saved as "
        "SHARDED_STATE_DICT (braid's sharded checkpoints load at any layout)");
    sd = FsdpStateDictType::kShardedStateDict;
  }
  plan.state_dict_type = sd;
  plan.options.activation_checkpointing = f.activation_checkpointing;
}

void check_nvme(nn::OffloadDevice device, const std::filesystem::path& path, const char* device_key,
                const char* path_key) {
  BRAID_CHECK(device != nn::OffloadDevice::kNvme || !path.empty(), kInvalidArgument,
              "deepspeed_config.", device_key, " is nvme but deepspeed_config.", path_key,
              " is empty; expected the folder to offload to");
}

void map_deepspeed(const AcceleratorConfig& c, ShardingPlan& plan) {
  const DeepSpeedPlugin d = c.deepspeed_plugin.value_or(DeepSpeedPlugin{});
  shard::ShardingOptions& o = plan.options;
  o.stage = shard::zero_stage_from_int(d.zero_stage);
  o.reshard_after_forward = true;  // ZeRO-3 releases a module's parameters after its forward
  // save_state: the engine's own (sharded) checkpoint, as DeepSpeed's save_checkpoint.
  plan.state_dict_type = FsdpStateDictType::kShardedStateDict;
  check_nvme(d.offload_optimizer_device, d.offload_optimizer_nvme_path, "offload_optimizer_device",
             "offload_optimizer_nvme_path");
  check_nvme(d.offload_param_device, d.offload_param_nvme_path, "offload_param_device",
             "offload_param_nvme_path");
  plan.offload_optimizer.device = d.offload_optimizer_device;
  plan.offload_optimizer.nvme_path = d.offload_optimizer_nvme_path;
  if (d.offload_param_device != nn::OffloadDevice::kNone) {
    if (o.stage == ZeroStage::k3) {
      o.offload_param.device = d.offload_param_device;
      o.offload_param.nvme_path = d.offload_param_nvme_path;
    } else {
      BRAID_FAIL(kInvalidArgument, "deepspeed_config.offload_param_device ",
                 nn::offload_device_name(d.offload_param_device),
                 " applies to ZeRO stage 3 (sharded parameters); zero_stage is ", d.zero_stage,
                 ": expected none");
    }
  }
  if (d.zero3_init_flag) {
    if (o.stage == ZeroStage::k3) {
      plan.init_on_meta = true;
    } else {
      BRAID_FAIL(kInvalidArgument,
                 "deepspeed_config.zero3_init_flag applies to ZeRO stage 3; zero_stage is ",
                 d.zero_stage, ": expected false");
    }
  }
  plan.save_16bit_model = d.zero3_save_16bit_model;
  // DeepSpeed's default 0 means no clipping.
  if (d.gradient_clipping.value_or(0) > 0) plan.gradient_clipping = d.gradient_clipping;
  BRAID_CHECK(d.transformer_moe_cls_names.empty(), kNotSupported,
              "deepspeed_config.deepspeed_moe_layer_cls_names: braid has no mixture-of-experts "
              "leaf modules; expected it empty");
  if (d.mics_shard_size > 0) {
    if (o.stage == ZeroStage::k0) {
      BRAID_FAIL(kInvalidArgument,
                 "deepspeed_config.mics_shard_size applies to ZeRO stages 1-3; zero_stage is 0");
    } else {
      BRAID_CHECK(c.num_processes <= 0 || c.num_processes % d.mics_shard_size == 0,
                  kInvalidArgument, "deepspeed_config.mics_shard_size ", d.mics_shard_size,
                  " does not divide num_processes ", c.num_processes);
      o.shard_group_size = d.mics_shard_size;
    }
  }
}

void map_megatron(const AcceleratorConfig& c, ShardingPlan& plan) {
  const MegatronLMPlugin m = c.megatron_lm_plugin.value_or(MegatronLMPlugin{});
  plan.options.stage = m.use_distributed_optimizer ? ZeroStage::k1 : ZeroStage::k0;
  plan.options.activation_checkpointing = m.recompute_activations;
  plan.state_dict_type = FsdpStateDictType::kShardedStateDict;  // Megatron's own checkpoints
  if (m.gradient_clipping > 0) plan.gradient_clipping = m.gradient_clipping;
}

// The model-parallel degrees: megatron_lm_config's under any distributed_type (its tp / pp
// dimensions; the data-parallel dimension is sharded as distributed_type's plugin says), or
// parallelism_config's tp_size.
void map_model_parallel(const AcceleratorConfig& c, ShardingPlan& plan) {
  if (c.parallelism_config) {
    const ParallelismConfig& p = *c.parallelism_config;
    BRAID_CHECK(p.cp_size == 1, kNotSupported, "parallelism_config: parallelism_config_cp_size ",
                p.cp_size, ": context parallelism is not built in braid (expected 1)");
    plan.tp_degree = p.tp_size;
  }
  if (c.megatron_lm_plugin) {
    const MegatronLMPlugin& m = *c.megatron_lm_plugin;
    BRAID_CHECK(plan.tp_degree == 1 || m.tp_degree == 1 || m.tp_degree == plan.tp_degree,
                kInvalidArgument, "megatron_lm_config.megatron_lm_tp_degree ", m.tp_degree,
                " disagrees with parallelism_config.parallelism_config_tp_size ", plan.tp_degree,
                "; give one tensor-parallel degree");
    plan.tp_degree = std::max(plan.tp_degree, m.tp_degree);
    plan.pp_degree = m.pp_degree;
    plan.sequence_parallel = m.sequence_parallelism;
    if (m.num_micro_batches > 1) plan.num_micro_batches = m.num_micro_batches;
    plan.num_layers_per_virtual_pipeline_stage = m.num_layers_per_virtual_pipeline_stage;
    BRAID_CHECK(m.num_layers_per_virtual_pipeline_stage == 0 || plan.pp_degree > 1,
                kInvalidArgument,
                "megatron_lm_config.megatron_lm_num_layers_per_virtual_pipeline_stage applies to "
                "pipeline parallelism; megatron_lm_pp_degree is 1: expected 0");
    BRAID_CHECK(!m.sequence_parallelism || plan.tp_degree > 1, kInvalidArgument,
                "megatron_lm_config.megatron_lm_sequence_parallelism applies to tensor "
                "parallelism; the tensor-parallel degree is 1: expected false");
    BRAID_CHECK(m.num_micro_batches <= 1 || plan.pp_degree > 1, kInvalidArgument,
                "megatron_lm_config.megatron_lm_num_micro_batches ", m.num_micro_batches,
                " applies to pipeline parallelism; megatron_lm_pp_degree is 1: use "
                "gradient_accumulation_steps");
  }
  const int64_t mp = plan.tp_degree * plan.pp_degree;
  if (mp > 1) {
    BRAID_CHECK(plan.options.shard_group_size <= 0, kNotSupported, "HSDP (a shard group of ",
                plan.options.shard_group_size,
                ") together with tensor or pipeline parallelism (tp ", plan.tp_degree, ", pp ",
                plan.pp_degree, ") is not built; expected one of them");
    // num_processes 1 is the default of a config built in code: the Accelerator checks the
    // launched processes.
    BRAID_CHECK(c.num_processes <= 1 || c.num_processes % mp == 0, kInvalidArgument,
                "num_processes ", c.num_processes,
                " is not a multiple of tp_degree x pp_degree = ", plan.tp_degree, " x ",
                plan.pp_degree);
  }
}

}  // namespace

amp::PrecisionPolicy precision_policy(const AcceleratorConfig& c) {
  amp::PrecisionPolicy p = amp::PrecisionPolicy::from(c.mixed_precision);
  switch (c.distributed_type) {
    case DistributedType::kFsdp:
      // The plugin's explicit MixedPrecision replaces the one Accelerate's set_mixed_precision
      // builds from mixed_precision (16-bit parameters, reductions and buffers).
      if (c.fsdp_plugin && c.fsdp_plugin->mixed_precision_policy) {
        const FsdpMixedPrecisionPolicy& e = *c.fsdp_plugin->mixed_precision_policy;
        BRAID_CHECK(e.buffer_dtype == DType::kF32, kNotSupported,
                    "fsdp_config.fsdp_mixed_precision_policy buffer_dtype ",
                    dtype_name(e.buffer_dtype),
                    ": braid keeps buffers in the dtype the model gives them (no buffer cast); "
                    "expected fp32");
        p.param_dtype = e.param_dtype;
        p.reduce_dtype = e.reduce_dtype;
        p.buffer_dtype = e.buffer_dtype;
      }
      break;
    case DistributedType::kDeepSpeed:
    case DistributedType::kMegatronLm:
      break;  // 16-bit parameters and reductions with f32 masters, as their engines
    default:
      // NO / MULTI_*: DDP. Mixed precision is autocast over f32 parameters, as Accelerate.
      p.param_dtype = p.reduce_dtype = p.buffer_dtype = DType::kF32;
      break;
  }
  p.keep_in_fp32_modules = c.keep_in_fp32_modules;
  return p;
}

ShardingPlan sharding_plan(const AcceleratorConfig& config) {
  ShardingPlan plan;
  plan.options.ddp = config.ddp_kwargs;
  plan.options.precision = precision_policy(config);
  const DistributedType t = config.distributed_type;
  auto ignored = [&](bool present, DistributedType owner, const char* section) {
    if (present && t != owner) {
      plan.warnings.push_back(std::string(section) + " is ignored: distributed_type is " +
                              name_of(t));
    }
  };
  ignored(config.fsdp_plugin.has_value(), DistributedType::kFsdp, "fsdp_config");
  ignored(config.deepspeed_plugin.has_value(), DistributedType::kDeepSpeed, "deepspeed_config");
  if (config.megatron_lm_plugin && t != DistributedType::kMegatronLm) {
    plan.warnings.push_back(
        "megatron_lm_config with distributed_type " + name_of(t) +
        ": its tp / pp degrees, micro-batches and sequence parallelism apply; its data-parallel "
        "fields (use_distributed_optimizer, gradient_clipping, recompute_activations) do not");
  }
  switch (t) {
    case DistributedType::kFsdp:
      map_fsdp(config, plan);
      break;
    case DistributedType::kDeepSpeed:
      map_deepspeed(config, plan);
      break;
    case DistributedType::kMegatronLm:
      map_megatron(config, plan);
      break;
    default:
      // NO / MULTI_*: DDP. Mixed precision is autocast over f32 parameters, as Accelerate.
      plan.options.stage = ZeroStage::k0;
      break;
  }
  map_model_parallel(config, plan);
  BRAID_CHECK(t == DistributedType::kFsdp || !config.parallelism_config ||
                  config.parallelism_config->dp_shard_size <= 1,
              kInvalidArgument,
              "parallelism_config.parallelism_config_dp_shard_size applies to FSDP; "
              "distributed_type is ",
              name_of(t), ": expected 1");
  return plan;
}

amp::Fp8TrainingOptions fp8_training_options(const AcceleratorConfig& config) {
  amp::Fp8TrainingOptions o;
  for (const auto& entry : config.fp8_config) {
    // Plain references: clang 15 (the fuzz build) cannot capture a structured binding.
    const std::string& key = entry.first;
    const std::string& v = entry.second;
    // The key table's value parsers (config_keys.h), with the key in the message.
    auto integer = [&](int64_t lo) {
      try {
        const int64_t n = detail::parse_int_value(v);
        if (n >= lo && n <= INT32_MAX) return static_cast<int>(n);
      } catch (const detail::ValueError&) {
      }
      BRAID_FAIL(kInvalidArgument, "fp8_config.", key, " = '", v, "': expected an integer >= ", lo);
    };
    auto boolean = [&](std::string_view text) {
      try {
        return detail::parse_bool_value(text);
      } catch (const detail::ValueError&) {
        BRAID_FAIL(kInvalidArgument, "fp8_config.", key, " = '", v, "': expected true or false");
      }
    };
    if (key == "backend") {
      BRAID_CHECK(detail::lower(detail::trim(v)) == "te", kNotSupported, "fp8_config.backend ", v,
                  ": braid trains fp8 with Transformer Engine's delayed-scaling recipe (TE); "
                  "MS-AMP and torchao are not built");
    } else if (key == "fp8_format") {
      o.recipe.fp8_format = amp::parse_fp8_format(v);
    } else if (key == "amax_history_len") {
      o.recipe.amax_history_len = integer(1);
    } else if (key == "amax_compute_algo") {
      o.recipe.amax_compute_algo = amp::parse_amax_compute_algo(v);
    } else if (key == "margin") {
      o.recipe.margin = integer(0);
    } else if (key == "interval") {
      o.recipe.interval = integer(1);
    } else if (key == "override_linear_precision") {
      // "(fprop, dgrad, wgrad)", as Accelerate writes the tuple.
      const std::string t = detail::trim(v);
      BRAID_CHECK(t.size() >= 2 && t.front() == '(' && t.back() == ')', kInvalidArgument,
                  "fp8_config.override_linear_precision = '", v,
                  "': expected (fprop, dgrad, wgrad), e.g. (false, false, false)");
      std::vector<bool> flags;
      for (const std::string& item : detail::split_list(t.substr(1, t.size() - 2))) {
        flags.push_back(boolean(item));
      }
      BRAID_CHECK(flags.size() == 3, kInvalidArgument, "fp8_config.override_linear_precision = '",
                  v, "': expected three booleans (fprop, dgrad, wgrad)");
      o.keep_fprop = flags[0];
      o.keep_dgrad = flags[1];
      o.keep_wgrad = flags[2];
    } else if (key == "use_autocast_during_eval") {
      o.in_eval = boolean(v);
    } else {
      BRAID_FAIL(kNotSupported, "fp8_config.", key,
                 ": not a setting of the TE recipe braid runs (backend, fp8_format, "
                 "amax_history_len, amax_compute_algo, margin, interval, "
                 "override_linear_precision, use_autocast_during_eval)");
    }
  }
  (void)amp::Fp8Training(o);  // the recipe's own checks
  return o;
}

void validate_config(const AcceleratorConfig& c) {
  BRAID_CHECK(c.compute_environment == ComputeEnvironment::kLocalMachine, kNotSupported,
              "compute_environment ", compute_environment_name(c.compute_environment),
              ": braid runs on LOCAL_MACHINE only");
  switch (c.distributed_type) {
    case DistributedType::kNo:
    case DistributedType::kMultiCpu:
    case DistributedType::kMultiGpu:
    case DistributedType::kFsdp:
    case DistributedType::kDeepSpeed:
    case DistributedType::kMegatronLm:
      break;
    default:
      BRAID_FAIL(kNotSupported, "distributed_type ", name_of(c.distributed_type),
                 ": braid has no runtime for it; expected NO, MULTI_CPU, MULTI_GPU, FSDP, "
                 "DEEPSPEED or MEGATRON_LM");
  }
  BRAID_CHECK(c.dynamo_backend == DynamoBackend::kNo, kNotSupported, "dynamo_backend ",
              dynamo_backend_name(c.dynamo_backend),
              ": braid has no graph compiler (torch.compile); expected NO");
  // fp8_config does something only with mixed_precision fp8; its values are checked here.
  if (c.mixed_precision == amp::PrecisionType::kFp8) {
    (void)fp8_training_options(c);
  } else {
    BRAID_CHECK(c.fp8_config.empty(), kInvalidArgument, "fp8_config.", c.fp8_config.begin()->first,
                ": fp8_config applies to mixed_precision fp8; mixed_precision is ",
                amp::precision_type_name(c.mixed_precision));
  }
  BRAID_CHECK(c.rdzv_backend == "static" || c.rdzv_backend == "c10d", kNotSupported,
              "rdzv_backend '", c.rdzv_backend,
              "': braid launch rendezvouses through its own store, which serves as torchrun's "
              "static and c10d backends; expected static or c10d");
  BRAID_CHECK(!c.downcast_bf16, kNotSupported,
              "downcast_bf16 yes: XLA's bf16 downcast; braid has no XLA runtime (bf16 training "
              "is mixed_precision: bf16); expected no");
  if (c.fsdp_plugin) {
    BRAID_CHECK(c.fsdp_plugin->use_orig_params, kNotSupported,
                "fsdp_config.fsdp_use_orig_params false: braid's optimizers always step the "
                "original parameters (as FSDP's use_orig_params true); expected true");
  }
  BRAID_CHECK(c.machine_rank < c.num_machines, kInvalidArgument, "machine_rank ", c.machine_rank,
              " is not below num_machines ", c.num_machines);
  BRAID_CHECK(c.num_processes <= 0 || c.num_processes % c.num_machines == 0, kInvalidArgument,
              "num_processes ", c.num_processes, " is not a multiple of num_machines ",
              c.num_machines, "; expected the same number of processes on every machine");
  BRAID_CHECK(!(c.use_cpu && c.distributed_type == DistributedType::kMultiGpu), kInvalidArgument,
              "use_cpu is true but distributed_type is MULTI_GPU; expected MULTI_CPU (or use_cpu "
              "false)");
  BRAID_CHECK(!(c.gradient_accumulation_steps && c.gradient_accumulation_plugin), kInvalidArgument,
              "gradient_accumulation_steps and gradient_accumulation_plugin are both set; give "
              "one (the plugin's num_steps holds the steps)");
  if (c.deepspeed_plugin && c.deepspeed_plugin->gradient_accumulation_steps &&
      (c.gradient_accumulation_steps || c.gradient_accumulation_plugin)) {
    int64_t ds = *c.deepspeed_plugin->gradient_accumulation_steps;
    int64_t own = gradient_accumulation_steps(c);
    BRAID_CHECK(ds == own, kInvalidArgument, "deepspeed_config.gradient_accumulation_steps ", ds,
                " disagrees with the gradient accumulation steps ", own, "; give one value");
  }
  if (c.fsdp_plugin && c.fsdp_plugin->cpu_ram_efficient_loading) {
    BRAID_CHECK(c.fsdp_plugin->sync_module_states.value_or(true), kInvalidArgument,
                "fsdp_config.fsdp_cpu_ram_efficient_loading is true but "
                "fsdp_config.fsdp_sync_module_states is false; expected true (only rank 0 "
                "loads the weights)");
  }
  if (c.parallelism_config) {
    const ParallelismConfig& p = *c.parallelism_config;
    int64_t total = p.dp_replicate_size * p.dp_shard_size * p.tp_size * p.cp_size;
    BRAID_CHECK(c.num_processes <= 0 || total == c.num_processes, kInvalidArgument,
                "parallelism_config: dp_replicate_size x dp_shard_size x tp_size x cp_size = ",
                total, " but num_processes is ", c.num_processes, "; expected them equal");
  }
  (void)sharding_plan(c);  // its own checks (shard sizes, Megatron degrees)
}

}  // namespace braid::accel
