// SPDX-License-Identifier: Apache-2.0
// The seed's enums, plugins and kwargs handlers (Accelerate's utils.dataclasses) as plain C++
// structs: the parts of an AcceleratorConfig (config.h) that say how a job runs. Names and
// defaults are the seed's where they apply; where braid reuses a lower layer's struct
// (DistributedDataParallelKwargs, GradScalerKwargs, AutocastKwargs, DataLoaderConfiguration,
// PrecisionType) it is that struct. docs/config.md lists every field, its YAML key and what
// it maps to in braid.
//
//   braid::accel::FullyShardedDataParallelPlugin fsdp;
//   fsdp.sharding_strategy = braid::accel::FsdpShardingStrategy::kHybridShard;
//   fsdp.auto_wrap_policy = braid::shard::WrapKind::kTransformerBased;
//   fsdp.transformer_cls_names_to_wrap = {"GPT2Block"};
//   config.fsdp_plugin = fsdp;
//   config.distributed_type = braid::accel::DistributedType::kFsdp;
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/amp/autocast.h"
#include "braid/amp/grad_scaler.h"
#include "braid/amp/precision.h"
#include "braid/core/dtype.h"
#include "braid/nn/data.h"
#include "braid/nn/offload.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/units.h"

namespace braid::accel {

// ---- enums -------------------------------------------------------------------------------
// Each has parse_* (case-insensitive; kInvalidArgument naming the text and every accepted
// name) and *_name (the seed's spelling, as Accelerate writes it in default_config.yaml).

// The seed's DistributedType. braid runs NO, MULTI_CPU, MULTI_GPU (cuda / hip), FSDP, DEEPSPEED
// and MEGATRON_LM (its data-parallel part); the others parse, and validate_config() rejects
// them with kNotSupported (no such runtime in braid). "TPU" is read as XLA, as Accelerate does.
enum class DistributedType : uint8_t {
  kNo,
  kMultiCpu,
  kMultiGpu,
  kMultiMlu,
  kMultiSdaa,
  kMultiMusa,
  kMultiNpu,
  kMultiXpu,
  kMultiHpu,
  kMultiNeuron,
  kDeepSpeed,
  kFsdp,
  kXla,
  kMegatronLm,
};
DistributedType parse_distributed_type(std::string_view name);
std::string_view distributed_type_name(DistributedType type);  // "NO", "MULTI_CPU", ...

// The seed's ComputeEnvironment. braid runs on LOCAL_MACHINE only (validate_config() rejects
// AMAZON_SAGEMAKER with kNotSupported).
enum class ComputeEnvironment : uint8_t { kLocalMachine, kAmazonSagemaker };
ComputeEnvironment parse_compute_environment(std::string_view name);
std::string_view compute_environment_name(ComputeEnvironment env);

// The seed's RNGType: which generators synchronize_rng_states and the data loaders keep in
// step across ranks. braid's generators are Philox streams per device (core/rng.h); "torch"
// is the default CPU generator, "cuda" the current GPU's, "generator" a sampler's own.
enum class RNGType : uint8_t {
  kTorch,
  kCuda,
  kMlu,
  kSdaa,
  kMusa,
  kNpu,
  kXla,
  kXpu,
  kHpu,
  kNeuron,
  kGenerator
};
RNGType parse_rng_type(std::string_view name);
std::string_view rng_type_name(RNGType type);  // "torch", "cuda", ..., "generator"

// The seed's DynamoBackend (torch.compile backends). Parsed so Accelerate's files load, but
// braid has no graph compiler: validate_config() rejects anything but NO with kNotSupported.
enum class DynamoBackend : uint8_t {
  kNo,
  kEager,
  kAotEager,
  kInductor,
  kAotTsNvfuser,
  kNvprimsNvfuser,
  kCudagraphs,
  kOfi,
  kFx2trt,
  kOnnxrt,
  kTensorrt,
  kAotTorchxlaTraceOnce,
  kTorchxlaTraceOnce,
  kIpex,
  kTvm,
  kHpuBackend,
  kNeuron,
};
DynamoBackend parse_dynamo_backend(std::string_view name);
std::string_view dynamo_backend_name(DynamoBackend backend);  // "NO", "INDUCTOR", ...

// FSDP's ShardingStrategy (torch's values 1-5 are accepted too, as old Accelerate files hold
// `fsdp_sharding_strategy: 1`).
enum class FsdpShardingStrategy : uint8_t {
  kFullShard = 1,
  kShardGradOp = 2,
  kNoShard = 3,
  kHybridShard = 4,
  kHybridShardZero2 = 5,
};
FsdpShardingStrategy parse_fsdp_sharding_strategy(std::string_view name);
std::string_view fsdp_sharding_strategy_name(FsdpShardingStrategy strategy);

// FSDP's BackwardPrefetch.
enum class FsdpBackwardPrefetch : uint8_t { kBackwardPre, kBackwardPost, kNoPrefetch };
FsdpBackwardPrefetch parse_fsdp_backward_prefetch(std::string_view name);
std::string_view fsdp_backward_prefetch_name(FsdpBackwardPrefetch prefetch);

// FSDP's StateDictType: what save_state writes for the model. FULL_STATE_DICT: whole tensors
// (gathered); SHARDED_STATE_DICT (and LOCAL_STATE_DICT): braid's sharded checkpoint
// (shard/checkpoint.h), which any world size reads back.
enum class FsdpStateDictType : uint8_t {
  kFullStateDict = 1,
  kLocalStateDict = 2,
  kShardedStateDict = 3
};
FsdpStateDictType parse_fsdp_state_dict_type(std::string_view name);
std::string_view fsdp_state_dict_type_name(FsdpStateDictType type);

// "TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP" (any case) <-> shard::WrapKind.
shard::WrapKind parse_fsdp_auto_wrap_policy(std::string_view name);
std::string_view fsdp_auto_wrap_policy_name(shard::WrapKind kind);

// ---- kwargs handlers ---------------------------------------------------------------------
// DistributedDataParallelKwargs, GradScalerKwargs and AutocastKwargs are shard's and amp's
// (shard/fsdp.h, amp/grad_scaler.h, amp/autocast.h); this one is accel's own.

// The seed's InitProcessGroupKwargs, for the world ProcessGroup (comm/process_group.h).
struct InitProcessGroupKwargs {
  // "auto" (ProcessGroupOptions' default: BRAID_BACKEND, else chosen from the layout) or a
  // backend name ("shm", "ucx", "hier", "mpi", "nccl", "rccl"). The seed's default "nccl" is
  // torch's; braid chooses by layout unless told.
  std::string backend = "auto";
  // Collective deadline; unset: BRAID_TIMEOUT, else 300 s (the seed's 1800 / 600 s are torch's).
  std::optional<std::chrono::milliseconds> timeout{};
};

// ---- plugins -----------------------------------------------------------------------------

// The seed's GradientAccumulationPlugin. Give it or AcceleratorConfig::gradient_accumulation_steps,
// not both (validate_config: kInvalidArgument, as the seed).
struct GradientAccumulationPlugin {
  int64_t num_steps = 1;
  bool adjust_scheduler = true;
  bool sync_with_dataloader = true;
  // true (braid's default; the seed's is false): every micro-batch's gradient is reduced, in
  // the ordered fold that gives the same bits for every world size (docs/sharding.md,
  // "Reproducibility"). false: no_sync between syncs, faster, world-size-dependent bits.
  bool sync_each_batch = true;
};

// FSDP's MixedPrecision: the dtypes parameters are gathered and computed in, gradients are
// reduced in, and buffers are kept in (f32, bf16 or f16).
struct FsdpMixedPrecisionPolicy {
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  DType buffer_dtype = DType::kF32;
  bool operator==(const FsdpMixedPrecisionPolicy&) const = default;
};

// The seed's FullyShardedDataParallelPlugin (YAML: fsdp_config.fsdp_*). Unset optionals take
// the value sharding_plan() derives (docs/config.md, "FSDP").
struct FullyShardedDataParallelPlugin {
  int64_t fsdp_version = 1;  // 1 or 2; braid runs both the same way
  FsdpShardingStrategy sharding_strategy = FsdpShardingStrategy::kFullShard;
  // Overrides the strategy's reshard-after-forward (FSDP2's bool form); unset: from the strategy.
  std::optional<bool> reshard_after_forward{};
  // Unset: braid's default (prefetch the next unit's gather at unit start, BACKWARD_PRE).
  std::optional<FsdpBackwardPrefetch> backward_prefetch{};
  // Unset: from AcceleratorConfig::mixed_precision (fp16 / bf16 / fp8: parameters and
  // reductions in the 16-bit dtype, as Accelerate's set_mixed_precision builds it).
  std::optional<FsdpMixedPrecisionPolicy> mixed_precision_policy{};
  shard::WrapKind auto_wrap_policy = shard::WrapKind::kNoWrap;
  std::vector<std::string> transformer_cls_names_to_wrap{};  // Module::type_name() values
  int64_t min_num_params = 100'000'000;
  bool cpu_offload = false;                    // fsdp_offload_params
  std::vector<std::string> ignored_modules{};  // dotted module paths (not regular expressions)
  // Unset: FULL_STATE_DICT for fsdp_version 1, SHARDED_STATE_DICT for 2 (Accelerate's defaults).
  std::optional<FsdpStateDictType> state_dict_type{};
  bool limit_all_gathers = true;
  std::optional<bool> forward_prefetch{};    // unset: braid's default (on)
  std::optional<bool> sync_module_states{};  // unset: braid's default (on)
  bool use_orig_params = true;               // false is refused (docs/config.md)
  bool activation_checkpointing = false;
  bool cpu_ram_efficient_loading = false;
  // braid: the shard group size of HYBRID_SHARD / HYBRID_SHARD_ZERO2 (0: the processes of one
  // machine, num_processes / num_machines, as FSDP shards within a node).
  int64_t hsdp_shard_size = 0;
};

// The seed's DeepSpeedPlugin (YAML: deepspeed_config.*). braid runs the ZeRO stages itself
// (shard/fsdp.h); there is no DeepSpeed library behind it.
struct DeepSpeedPlugin {
  // deepspeed_config_file: a DeepSpeed JSON file whose zero_optimization, gradient and fp16 /
  // bf16 settings are read into these fields when the key is applied (docs/config.md).
  std::string hf_ds_config{};
  std::optional<int64_t> gradient_accumulation_steps{};
  std::optional<double> gradient_clipping{};
  int64_t zero_stage = 2;  // 0-3; Accelerate's default
  nn::OffloadDevice offload_optimizer_device = nn::OffloadDevice::kNone;
  nn::OffloadDevice offload_param_device = nn::OffloadDevice::kNone;  // ZeRO-3 only
  std::filesystem::path offload_optimizer_nvme_path{};
  std::filesystem::path offload_param_nvme_path{};
  bool zero3_init_flag = false;
  bool zero3_save_16bit_model = false;
  std::vector<std::string> transformer_moe_cls_names{};  // must be empty: no MoE support
  int64_t mics_shard_size = 0;  // DeepSpeed MiCS: shard group size (0: every rank)
};

// The seed's MegatronLMPlugin (YAML: megatron_lm_config.megatron_lm_*): the fields
// `accelerate config` writes: the data-parallel part (distributed optimizer, recomputation,
// clipping) under MEGATRON_LM, the tensor and pipeline degrees under any distributed_type.
struct MegatronLMPlugin {
  int64_t tp_degree = 1;
  int64_t pp_degree = 1;
  int64_t num_micro_batches = 1;
  // Interleaved 1F1B: blocks per virtual pipeline stage (v = n_layer / (pp_degree x this)
  // chunks per rank); 0: one stage per rank (1F1B).
  int64_t num_layers_per_virtual_pipeline_stage = 0;
  double gradient_clipping = 1.0;  // 0: off
  bool sequence_parallelism = false;
  bool recompute_activations = false;
  bool use_distributed_optimizer = false;
};

// Accelerate's ParallelismConfig (YAML: parallelism_config.parallelism_config_*): the sizes
// of the device mesh's dimensions; their product is the number of processes.
struct ParallelismConfig {
  int64_t dp_replicate_size = 1;
  int64_t dp_shard_size = 1;
  int64_t tp_size = 1;
  int64_t cp_size = 1;
};

// The seed's ProjectConfiguration.
struct ProjectConfiguration {
  std::filesystem::path project_dir{};
  std::filesystem::path logging_dir{};  // empty: project_dir
  bool automatic_checkpoint_naming = false;
  std::optional<int64_t> total_limit{};
  int64_t iteration = 0;
  bool save_on_each_node = false;
};

}  // namespace braid::accel
