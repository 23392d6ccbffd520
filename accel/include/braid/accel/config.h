// SPDX-License-Identifier: Apache-2.0
// The Accelerator's configuration (docs/config.md): one struct, filled from code defaults, a
// YAML file with Accelerate's default_config.yaml keys, Accelerate's environment variables and
// `--key value` command-line overrides, in that order of precedence; explicit assignments in
// code after resolving win over all of them.
//
//   std::vector<std::string> args(argv + 1, argv + argc);
//   braid::accel::ConfigOptions opts{.extra_keys = {"max_steps"}};
//   braid::accel::AcceleratorConfig cfg = braid::accel::resolve_config(
//       {}, {.command_line = braid::accel::take_config_arguments(args, opts), .options = opts});
//   cfg.seed = 1234;                                       // explicit code settings win
//   int64_t steps = braid::accel::extra_int(cfg, "max_steps", 1000);
//   braid::accel::ShardingPlan plan = braid::accel::sharding_plan(cfg);
//   braid::shard::ShardedModel sm(model, pg, plan.options);
//
// Errors: an unknown key is kInvalidArgument naming the key, where it came from (file:line,
// environment variable or command line) and the closest known key; a bad value names the key,
// the value and the accepted values. A file that is not YAML is kCorruptData; one that cannot
// be read is kIo.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "braid/accel/plugins.h"
#include "braid/amp/autocast.h"
#include "braid/amp/fp8.h"
#include "braid/amp/grad_scaler.h"
#include "braid/amp/precision.h"
#include "braid/nn/data.h"
#include "braid/nn/offload.h"
#include "braid/shard/fsdp.h"

namespace braid::accel {

// Everything an Accelerator is built from. The first group is Accelerate's ClusterConfig
// (the top-level keys of default_config.yaml); the rest are the Accelerator's arguments.
struct AcceleratorConfig {
  ComputeEnvironment compute_environment = ComputeEnvironment::kLocalMachine;
  DistributedType distributed_type = DistributedType::kNo;
  amp::PrecisionType mixed_precision = amp::PrecisionType::kNo;
  int64_t num_processes = 1;  // -1: whatever the launcher starts
  int64_t num_machines = 1;
  int64_t machine_rank = 0;
  std::string main_process_ip{};               // empty: unset (braid launch: 127.0.0.1)
  std::optional<int64_t> main_process_port{};  // unset: braid launch picks a free port
  std::string rdzv_backend = "static";         // static or c10d (braid launch's store)
  bool same_network = true;                    // both values rendezvous alike
  bool use_cpu = false;
  std::string gpu_ids{};                              // braid launch: CUDA_VISIBLE_DEVICES
  bool downcast_bf16 = false;                         // XLA only: true is refused
  bool debug = false;                                 // BRAID_DEBUG_MODE's cross-rank checks
  bool enable_cpu_affinity = false;                   // set_numa_affinity at construction
  DynamoBackend dynamo_backend = DynamoBackend::kNo;  // anything else: kNotSupported

  // Gradient accumulation: the steps, or the plugin; not both (validate_config).
  std::optional<int64_t> gradient_accumulation_steps{};
  std::optional<GradientAccumulationPlugin> gradient_accumulation_plugin{};

  // kwargs handlers.
  shard::DistributedDataParallelKwargs ddp_kwargs{};
  amp::GradScalerKwargs grad_scaler_kwargs{};
  amp::AutocastKwargs autocast_kwargs{};
  InitProcessGroupKwargs init_process_group_kwargs{};

  // Sharding plugins: the one distributed_type names is used (a default one when unset);
  // the others are kept but ignored (sharding_plan warns).
  std::optional<FullyShardedDataParallelPlugin> fsdp_plugin{};
  std::optional<DeepSpeedPlugin> deepspeed_plugin{};
  std::optional<MegatronLMPlugin> megatron_lm_plugin{};
  std::optional<ParallelismConfig> parallelism_config{};
  // fp8_config: Accelerate's FP8 recipe keys (Transformer Engine's), as text; read by
  // fp8_training_options() with mixed_precision fp8.
  std::map<std::string, std::string> fp8_config{};

  nn::DataLoaderConfiguration dataloader_config{};
  ProjectConfiguration project_config{};
  std::vector<std::string> log_with{};  // tracker names (docs/trackers.md)
  std::optional<uint64_t> seed{};
  // transformers' _keep_in_fp32_modules (a model attribute there, so set in code, not a file
  // key): modules whose parameters stay f32 under a 16-bit param dtype (precision_policy;
  // docs/mixed-precision.md, docs/sharding.md "Precision").
  std::vector<std::string> keep_in_fp32_modules{};

  // The program's own top-level keys (ConfigOptions::extra_keys), as text: file values and
  // --key value overrides. Read them with extra_int / extra_double / extra_bool / extra_string.
  std::map<std::string, std::string> extra{};
};

// The effective number of gradient accumulation steps: the plugin's num_steps, else
// gradient_accumulation_steps, else deepspeed_config.gradient_accumulation_steps, else 1.
int64_t gradient_accumulation_steps(const AcceleratorConfig& config);
// The plugin the job uses for gradient accumulation (the steps above in the seed's defaults,
// sync_each_batch braid's default) when none was given.
GradientAccumulationPlugin gradient_accumulation_plugin(const AcceleratorConfig& config);

// What parsing needs besides the text.
struct ConfigOptions {
  // The program's own top-level keys (e.g. "max_steps", "lr"): accepted in the file and as
  // overrides, kept in AcceleratorConfig::extra. A name that is already a configuration key
  // is kInvalidArgument.
  std::vector<std::string> extra_keys{};
  // Files only: take every unknown top-level key with a plain value as an extra key (for
  // tools that show any program's file, as `braid config show`). Unknown keys inside sections
  // stay errors; command-line overrides still need extra_keys.
  bool any_extra_key = false;
};

// ---- the sources, each applied on top of a config ----------------------------------------

// Reads a YAML (or JSON) file with Accelerate's layout into `config`: only the keys present
// change. Throws kIo (cannot read), kCorruptData (not YAML, or not a mapping) or
// kInvalidArgument (unknown key, bad value, key given twice), naming file:line:column.
// An empty file changes nothing.
void apply_config_file(AcceleratorConfig& config, const std::filesystem::path& path,
                       const ConfigOptions& options = {});
// The same for YAML text; `source_name` stands for the file name in messages; relative paths
// in it (deepspeed_config_file) are resolved against `base_dir`.
void apply_config_yaml(AcceleratorConfig& config, std::string_view yaml,
                       std::string_view source_name, const ConfigOptions& options = {},
                       const std::filesystem::path& base_dir = {});
// A fresh AcceleratorConfig with the file applied.
AcceleratorConfig load_config_file(const std::filesystem::path& path,
                                   const ConfigOptions& options = {});

// Environment variables by name.
using Environment = std::map<std::string, std::string>;
// The variables of this process that apply_environment reads.
Environment process_environment();
// Applies Accelerate's environment variables (ACCELERATE_MIXED_PRECISION,
// ACCELERATE_USE_FSDP, FSDP_SHARDING_STRATEGY, ACCELERATE_DEEPSPEED_ZERO_STAGE, ...; the full
// table is in docs/config.md). Empty values count as unset. Errors name the variable.
void apply_environment(AcceleratorConfig& config, const Environment& env);
void apply_environment(AcceleratorConfig& config);  // process_environment()

// `--key value` overrides: `key` is a dotted path ("fsdp_config.fsdp_sharding_strategy"), a
// top-level key, an extra key, or a nested key's own name when only one section has it
// ("fsdp_sharding_strategy", "zero_stage"); '-' and '_' are interchangeable. "null" resets a
// key to its default. Applied in order.
using ConfigOverrides = std::vector<std::pair<std::string, std::string>>;
void apply_overrides(AcceleratorConfig& config, const ConfigOverrides& overrides,
                     const ConfigOptions& options = {});

// What take_config_arguments finds on a command line.
struct ConfigArguments {
  std::optional<std::filesystem::path> config_file{};  // --config_file / --config-file
  ConfigOverrides overrides{};
};
// Removes from `args` every `--config_file PATH` and every `--key value` / `--key=value`
// whose key apply_overrides knows (configuration keys and options.extra_keys), and returns
// them in order; everything else stays in `args`, in order. A known key without a value is
// kInvalidArgument.
ConfigArguments take_config_arguments(std::vector<std::string>& args,
                                      const ConfigOptions& options = {});

// ---- resolving ---------------------------------------------------------------------------

struct ConfigSources {
  // The file: this path; else --config_file from command_line; else $BRAID_CONFIG_FILE; else
  // default_config_file() when it exists; else Accelerate's default file when it exists
  // (accelerate_default_config_file()); else none. An explicitly named file must exist.
  std::optional<std::filesystem::path> config_file{};
  bool search_default_files = true;
  bool use_environment = true;  // apply_environment(process_environment())
  ConfigArguments command_line{};
  ConfigOptions options{};
  // false: leave validate_config to the Accelerator (which runs it at construction), for a
  // program that completes the config from its own keys first (e.g. a --tp_degree of its own
  // that sets megatron_lm_config's degree).
  bool validate = true;
};
// code defaults (`defaults`) < file < environment < command line, then validate_config
// (unless sources.validate is false).
// Assignments the program makes to the result come last and win.
AcceleratorConfig resolve_config(AcceleratorConfig defaults, const ConfigSources& sources);
// The file resolve_config would read (nullopt: none).
std::optional<std::filesystem::path> find_config_file(const ConfigSources& sources);

// Cross-key checks: kNotSupported for what braid cannot run (AMAZON_SAGEMAKER, distributed
// types without a braid runtime, dynamo backends, tensor / context parallel sizes above 1),
// kInvalidArgument for contradictions (gradient_accumulation_steps and the plugin both set,
// cpu_ram_efficient_loading without sync_module_states, machine_rank >= num_machines, ...).
void validate_config(const AcceleratorConfig& config);

// ---- writing -----------------------------------------------------------------------------

// Accelerate's layout: top-level keys sorted, sections (fsdp_config, deepspeed_config, ...)
// as nested mappings, strings quoted where YAML would read them as something else ('no').
// load(to_yaml(c)) == c for every config.
std::string to_yaml(const AcceleratorConfig& config);

// $BRAID_CONFIG_FILE when set, else ${XDG_CACHE_HOME:-$HOME/.cache}/braid/default_config.yaml
// (nullopt when neither HOME nor XDG_CACHE_HOME is set).
std::optional<std::filesystem::path> default_config_file();
// Accelerate's own: ${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}/accelerate/
// default_config.yaml. Read as a fallback, never written.
std::optional<std::filesystem::path> accelerate_default_config_file();

// The seed's write_basic_config: a config for this machine (several GPUs: MULTI_GPU with one
// process per GPU; one GPU: NO; no GPU: NO on the CPU with one process) with the given mixed
// precision, written atomically to save_location (default: default_config_file()), creating
// its folder. A file already there is left as it is and nullopt is returned (as Accelerate
// does); otherwise the path written.
std::optional<std::filesystem::path> write_basic_config(
    amp::PrecisionType mixed_precision = amp::PrecisionType::kNo,
    std::optional<std::filesystem::path> save_location = std::nullopt);
// The same, with the precision by name ("no", "fp16", "bf16", "fp8").
std::optional<std::filesystem::path> write_basic_config(
    std::string_view mixed_precision, std::optional<std::filesystem::path> save_location = {});

// ---- mapping to braid's sharding ---------------------------------------------------------

// What a config asks of ShardedModel and its surroundings (docs/config.md, "Mapping").
struct ShardingPlan {
  // options.precision is the job's one precision policy (precision_policy(config)); the
  // Accelerator's autocast, GradScaler, optimizer checks and 16-bit saves read it there.
  // Activation checkpointing (FSDP activation_checkpointing, Megatron recompute_activations)
  // is options.activation_checkpointing.
  shard::ShardingOptions options{};
  // Build the model on the meta device (nn::InitEmptyWeights) and give options.param_init
  // (zero3_init_flag, cpu_ram_efficient_loading).
  bool init_on_meta = false;
  // What save_state writes for the model: whole tensors or a sharded checkpoint.
  FsdpStateDictType state_dict_type = FsdpStateDictType::kFullStateDict;
  // nn::Optimizer::set_offload (offload_optimizer_device, FSDP's cpu_offload).
  nn::OffloadConfig offload_optimizer{};
  std::optional<double> gradient_clipping{};  // DeepSpeed / Megatron clipping value
  bool save_16bit_model = false;              // zero3_save_16bit_model
  // Model parallelism (docs/accelerator.md, "Tensor and pipeline parallelism"): the mesh
  // (dp, pp, tp) of the processes, dp = processes / (pp x tp). `options` shard over dp.
  // tp_degree: megatron_lm_config.megatron_lm_tp_degree, or parallelism_config's tp_size;
  // pp_degree: megatron_lm_config.megatron_lm_pp_degree. Both apply under any distributed_type.
  int64_t tp_degree = 1;
  int64_t pp_degree = 1;
  bool sequence_parallel = false;  // megatron_lm_sequence_parallelism (tp_degree > 1)
  // Pipeline micro-batches per optimizer step (megatron_lm_num_micro_batches; 0: the
  // gradient accumulation steps, as Megatron's num_micro_batches is its accumulation).
  int64_t num_micro_batches = 0;
  // Interleaved 1F1B (megatron_lm_num_layers_per_virtual_pipeline_stage; 0: 1F1B).
  int64_t num_layers_per_virtual_pipeline_stage = 0;
  // Settings braid accepts but cannot honour exactly, one line each (the caller logs them).
  std::vector<std::string> warnings{};
};
// Pure mapping of distributed_type and its plugin (FSDP, DeepSpeed, Megatron-LM; NO /
// MULTI_*: DDP with ddp_kwargs) to ShardingOptions, and of the tensor / pipeline degrees.
// kNotSupported for a context-parallel size above 1 and for HSDP together with tensor or
// pipeline parallelism; kInvalidArgument for contradictions (a shard size that does not divide
// the processes, degrees whose product does not divide them, two different tp degrees, ...).
ShardingPlan sharding_plan(const AcceleratorConfig& config);

// The job's precision policy, resolved once (docs/config.md, "Precision"): the policy
// amp::PrecisionPolicy::from(mixed_precision) gives; then, by distributed_type, NO / MULTI_*
// (DDP) hold parameters, reductions and buffers in f32 under autocast (as Accelerate), FSDP
// takes fsdp_config.fsdp_mixed_precision_policy's param / reduce / buffer dtypes when given
// (kNotSupported for a buffer_dtype other than fp32), DeepSpeed and Megatron-LM keep the 16-bit
// parameters; then keep_in_fp32_modules. type and compute_dtype (autocast) always follow
// mixed_precision. sharding_plan puts it into options.precision.
amp::PrecisionPolicy precision_policy(const AcceleratorConfig& config);

// mixed_precision fp8's settings from fp8_config (Accelerate's FP8RecipeKwargs with backend TE;
// docs/config.md, "fp8_config"): backend (TE), fp8_format (E4M3, HYBRID), amax_history_len,
// amax_compute_algo (max, most_recent), margin, interval, override_linear_precision
// ("(fprop, dgrad, wgrad)" booleans), use_autocast_during_eval. kInvalidArgument naming the
// key for a bad value; kNotSupported for the MS-AMP and torchao backends (opt_level, ...).
amp::Fp8TrainingOptions fp8_training_options(const AcceleratorConfig& config);

// ---- the program's own keys --------------------------------------------------------------

// The value of an extra key, typed. The default when the key is absent; kInvalidArgument
// naming the key, the value and the expected form when it does not parse.
std::optional<std::string> extra_value(const AcceleratorConfig& config, std::string_view key);
std::string extra_string(const AcceleratorConfig& config, std::string_view key,
                         std::string_view default_value);
int64_t extra_int(const AcceleratorConfig& config, std::string_view key, int64_t default_value);
double extra_double(const AcceleratorConfig& config, std::string_view key, double default_value);
bool extra_bool(const AcceleratorConfig& config, std::string_view key, bool default_value);

// Every configuration key as a dotted path ("mixed_precision", "fsdp_config.fsdp_version",
// ...), in table order; for help texts and docs.
std::vector<std::string> config_key_paths();

}  // namespace braid::accel
