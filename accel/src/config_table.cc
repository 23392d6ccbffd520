// The key table: every configuration key once (config_keys.h), one Builder line per struct
// field. Sections follow Accelerate's default_config.yaml (fsdp_config, deepspeed_config,
// megatron_lm_config, parallelism_config, dynamo_config, ...) plus braid's sections for the
// Accelerator's own arguments (ddp_kwargs, dataloader_config, project_config, ...).
#include <algorithm>
#include <limits>
#include <system_error>

#include "config_builder.h"

namespace braid::accel::detail {
namespace {

std::string precision_choices() {
  return "no, fp16, bf16 or fp8";
}

void add_top_level(std::vector<KeyInfo>& t) {
  using C = AcceleratorConfig;
  Builder<C> b(t, top_section("", Write::kAlways));
  b.choice("compute_environment", &C::compute_environment, parse_compute_environment,
           compute_environment_name, enum_choices(compute_environment_name, 0, 1));
  b.choice("distributed_type", &C::distributed_type, parse_distributed_type, distributed_type_name,
           enum_choices(distributed_type_name, 0, 13));
  b.field<amp::PrecisionType>("mixed_precision", precision_choices(), &C::mixed_precision,
                              p_precision,
                              [](const amp::PrecisionType& p) -> Out {
                                return out_string(std::string(amp::precision_type_name(p)));
                              },
                              {"ACCELERATE_MIXED_PRECISION"});
  b.boolean("use_cpu", &C::use_cpu, {"ACCELERATE_USE_CPU"});
  b.boolean("debug", &C::debug, {"ACCELERATE_DEBUG_MODE"});
  b.field<int64_t>(
      "num_processes", "a positive integer (or -1: as many as the launcher starts)",
      &C::num_processes,
      [](const RawValue& v) {
        int64_t n = p_int(v, -1);
        if (n == 0) throw ValueError{};
        return n;
      },
      out_int);
  b.integer("num_machines", &C::num_machines, 1, std::numeric_limits<int64_t>::max(),
            "a positive integer");
  b.integer("machine_rank", &C::machine_rank, 0, std::numeric_limits<int64_t>::max(),
            "a non-negative integer");
  b.text("main_process_ip", &C::main_process_ip, "a host name or address");
  b.opt_integer("main_process_port", &C::main_process_port, 0, 65535, "a port, 0 to 65535");
  b.field<std::string>("rdzv_backend", "a rendezvous backend name (static, c10d, ...)",
                       &C::rdzv_backend, p_string,
                       [](const std::string& x) -> Out { return out_string(x); });
  b.boolean("same_network", &C::same_network);
  b.text("gpu_ids", &C::gpu_ids, "all or a comma-separated list of device indices");
  b.field<bool>("downcast_bf16", "no, yes, true or false", &C::downcast_bf16, p_bool,
                [](const bool& x) -> Out { return out_string(x ? "yes" : "no"); });
  b.boolean("enable_cpu_affinity", &C::enable_cpu_affinity, {"ACCELERATE_CPU_AFFINITY"});
  // Accelerate before 0.20 wrote the dynamo backend at the top level.
  b.choice("dynamo_backend", &C::dynamo_backend, parse_dynamo_backend, dynamo_backend_name,
           enum_choices(dynamo_backend_name, 0, 16), {}, Write::kNever);
  b.opt_integer("gradient_accumulation_steps", &C::gradient_accumulation_steps, 1,
                std::numeric_limits<int64_t>::max(), "a positive integer");
  b.list("log_with", &C::log_with, /*comma_string=*/false);
  b.field<std::optional<uint64_t>>(
      "seed", "a non-negative integer", &C::seed,
      [](const RawValue& v) { return static_cast<uint64_t>(p_int(v, 0)); },
      [](const std::optional<uint64_t>& x) -> Out {
        if (!x) return std::nullopt;
        return OutValue{Kind::kInt, std::to_string(*x)};
      });
  // accelerate config writes `main_training_function: main` into every file.
  b.inert("main_training_function", "braid runs programs, not Python functions", {"main"});
  for (const char* tpu : {"tpu_name", "tpu_zone", "tpu_vm", "tpu_env", "commands", "command_file",
                          "tpu_use_cluster", "tpu_use_sudo"}) {
    b.inert(tpu, "TPU pods only; braid has no TPU runtime");
  }

  Builder<C> d(t, top_section("dynamo_config", Write::kAlways));
  d.field<DynamoBackend>(
      "dynamo_backend", enum_choices(dynamo_backend_name, 0, 16), &C::dynamo_backend,
      [](const RawValue& v) { return p_enum(parse_dynamo_backend, v); },
      [](const DynamoBackend& x) -> Out {
        if (x == DynamoBackend::kNo) return std::nullopt;
        return out_string(std::string(dynamo_backend_name(x)));
      },
      {"ACCELERATE_DYNAMO_BACKEND"});
  for (const char* k : {"dynamo_mode", "dynamo_use_fullgraph", "dynamo_use_dynamic",
                        "dynamo_use_regional_compilation"}) {
    d.inert(k, "torch.compile options; braid has no graph compiler", {"default"});
  }

  Builder<C> ipex(t, top_section("ipex_config", Write::kNever));
  ipex.inert("ipex", "Intel Extension for PyTorch; braid has its own CPU kernels");
  ipex.inert("use_xpu", "braid has no XPU runtime yet");
  Builder<C> mpi(t, top_section("mpirun_config", Write::kNever));
  mpi.inert("mpirun_hostfile", "accelerate launch's mpirun; run braid under mpirun directly");
  // accelerate config's default is 1 worker: nothing beyond the process itself.
  mpi.inert("mpirun_ccl", "oneCCL worker threads; braid has no oneCCL backend", {"1"});
}

void add_gradient_accumulation(std::vector<KeyInfo>& t) {
  using P = GradientAccumulationPlugin;
  Builder<P> b(t, optional_section<P, &AcceleratorConfig::gradient_accumulation_plugin>(
                      "gradient_accumulation_plugin", Write::kAlways));
  b.integer("num_steps", &P::num_steps, 1, std::numeric_limits<int64_t>::max(),
            "a positive integer");
  b.boolean("adjust_scheduler", &P::adjust_scheduler);
  b.boolean("sync_with_dataloader", &P::sync_with_dataloader);
  b.boolean("sync_each_batch", &P::sync_each_batch);
}

void add_kwargs(std::vector<KeyInfo>& t) {
  {
    using D = shard::DistributedDataParallelKwargs;
    Builder<D> b(
        t, member_section<D, &AcceleratorConfig::ddp_kwargs>("ddp_kwargs", Write::kIfChanged));
    b.boolean("broadcast_buffers", &D::broadcast_buffers);
    b.real("bucket_cap_mb", &D::bucket_cap_mb, 0, false, "a positive number of MiB");
    b.boolean("find_unused_parameters", &D::find_unused_parameters);
    b.boolean("gradient_as_bucket_view", &D::gradient_as_bucket_view);
    b.boolean("static_graph", &D::static_graph);
    b.field<shard::DDPCommunicationHookType>(
        "comm_hook", "no, fp16 or bf16", &D::comm_hook,
        [](const RawValue& v) {
          std::string x = lower(p_string(v));
          if (x == "no" || x == "false") return shard::DDPCommunicationHookType::kNo;
          if (x == "fp16") return shard::DDPCommunicationHookType::kFp16;
          if (x == "bf16") return shard::DDPCommunicationHookType::kBf16;
          throw ValueError{};
        },
        [](const shard::DDPCommunicationHookType& h) -> Out {
          return out_string(h == shard::DDPCommunicationHookType::kFp16   ? "fp16"
                            : h == shard::DDPCommunicationHookType::kBf16 ? "bf16"
                                                                          : "no");
        });
  }
  {
    using G = amp::GradScalerKwargs;
    Builder<G> b(t, member_section<G, &AcceleratorConfig::grad_scaler_kwargs>("grad_scaler_kwargs",
                                                                              Write::kIfChanged));
    b.real("init_scale", &G::init_scale, 0, false, "a positive number");
    b.real("growth_factor", &G::growth_factor, 1, false, "a number > 1");
    b.field<double>(
        "backoff_factor", "a number in (0, 1)", &G::backoff_factor,
        [](const RawValue& v) {
          double x = p_real(v, 0, false);
          if (x >= 1) throw ValueError{};
          return x;
        },
        out_float);
    b.integer("growth_interval", &G::growth_interval, 1, std::numeric_limits<int64_t>::max(),
              "a positive integer");
    b.boolean("enabled", &G::enabled);
  }
  {
    using A = amp::AutocastKwargs;
    Builder<A> b(t, member_section<A, &AcceleratorConfig::autocast_kwargs>("autocast_kwargs",
                                                                           Write::kIfChanged));
    b.boolean("enabled", &A::enabled);
    b.opt_boolean("cache_enabled", &A::cache_enabled);
  }
  {
    using I = InitProcessGroupKwargs;
    Builder<I> b(t, member_section<I, &AcceleratorConfig::init_process_group_kwargs>(
                        "init_process_group_kwargs", Write::kIfChanged));
    b.field<std::string>(
        "backend", "auto, shm, ucx, hier, mpi, nccl or rccl", &I::backend,
        [](const RawValue& v) {
          std::string x = lower(p_string(v));
          for (const char* ok : {"auto", "shm", "ucx", "hier", "mpi", "nccl", "rccl"}) {
            if (x == ok) return x;
          }
          throw ValueError{x == "gloo" ? "gloo is torch's; braid's CPU backends are shm (one node) "
                                         "and ucx / hier / mpi (several), or auto"
                                       : ""};
        },
        [](const std::string& x) -> Out { return out_string(x); });
    b.field<std::optional<std::chrono::milliseconds>>(
        "timeout", "a positive number of seconds", &I::timeout,
        [](const RawValue& v) {
          double s = p_real(v, 0, false);
          return std::chrono::milliseconds(std::llround(s * 1000.0));
        },
        [](const std::optional<std::chrono::milliseconds>& x) -> Out {
          if (!x) return std::nullopt;
          return out_float(static_cast<double>(x->count()) / 1000.0);
        });
  }
}

void add_data_and_project(std::vector<KeyInfo>& t) {
  {
    using D = nn::DataLoaderConfiguration;
    Builder<D> b(t, member_section<D, &AcceleratorConfig::dataloader_config>("dataloader_config",
                                                                             Write::kIfChanged));
    b.boolean("split_batches", &D::split_batches);
    b.opt_boolean("dispatch_batches", &D::dispatch_batches);
    b.boolean("even_batches", &D::even_batches);
    b.boolean("use_seedable_sampler", &D::use_seedable_sampler);
    b.field<std::optional<uint64_t>>(
        "data_seed", "a non-negative integer", &D::data_seed,
        [](const RawValue& v) { return static_cast<uint64_t>(p_int(v, 0)); },
        [](const std::optional<uint64_t>& x) -> Out {
          if (!x) return std::nullopt;
          return OutValue{Kind::kInt, std::to_string(*x)};
        });
    b.boolean("non_blocking", &D::non_blocking);
  }
  {
    using P = ProjectConfiguration;
    Builder<P> b(t, member_section<P, &AcceleratorConfig::project_config>("project_config",
                                                                          Write::kIfChanged));
    b.path("project_dir", &P::project_dir);
    b.path("logging_dir", &P::logging_dir);
    b.boolean("automatic_checkpoint_naming", &P::automatic_checkpoint_naming);
    b.opt_integer("total_limit", &P::total_limit, 1, std::numeric_limits<int64_t>::max(),
                  "a positive integer");
    b.integer("iteration", &P::iteration, 0, std::numeric_limits<int64_t>::max(),
              "a non-negative integer");
    b.boolean("save_on_each_node", &P::save_on_each_node);
  }
}

FsdpMixedPrecisionPolicy p_mixed_precision_policy(const RawValue& v) {
  FsdpMixedPrecisionPolicy p;
  if (v.kind == RawValue::Kind::kMap) {
    for (const auto& [k, x] : v.entries) {
      if (k == "param_dtype") {
        p.param_dtype = p_dtype(x);
      } else if (k == "reduce_dtype") {
        p.reduce_dtype = p_dtype(x);
      } else if (k == "buffer_dtype") {
        p.buffer_dtype = p_dtype(x);
      } else {
        throw ValueError{"unknown field '" + k + "'"};
      }
    }
    return p;
  }
  std::string x = lower(trim(scalar(v)));
  DType d = x == "fp8" ? DType::kBF16 : p_dtype(x);  // fp8's base dtype, as amp's policy
  return {d, d, d};
}

Out out_mixed_precision_policy(const std::optional<FsdpMixedPrecisionPolicy>& p) {
  if (!p) return std::nullopt;
  if (p->param_dtype == p->reduce_dtype && p->param_dtype == p->buffer_dtype) {
    return out_string(dtype_short(p->param_dtype));
  }
  OutValue o{Kind::kMap};
  o.entries = {{"buffer_dtype", dtype_short(p->buffer_dtype)},
               {"param_dtype", dtype_short(p->param_dtype)},
               {"reduce_dtype", dtype_short(p->reduce_dtype)}};
  return o;
}

void add_fsdp(std::vector<KeyInfo>& t) {
  using F = FullyShardedDataParallelPlugin;
  Builder<F> b(t,
               optional_section<F, &AcceleratorConfig::fsdp_plugin>("fsdp_config", Write::kAlways));
  const std::string strategies = enum_choices(fsdp_sharding_strategy_name, 1, 5, " (or 1-5)");
  b.integer("fsdp_version", &F::fsdp_version, 1, 2, "1 or 2", {"FSDP_VERSION"});
  b.choice("fsdp_sharding_strategy", &F::sharding_strategy, parse_fsdp_sharding_strategy,
           fsdp_sharding_strategy_name, strategies, {"FSDP_SHARDING_STRATEGY"});
  // FSDP2's bool, or (FSDP1, newer Accelerate) a strategy name, which sets the strategy.
  KeyInfo rf{"fsdp_config", "fsdp_reshard_after_forward", "true, false or " + strategies};
  rf.env = {"FSDP_RESHARD_AFTER_FORWARD"};
  rf.set = [](AcceleratorConfig& c, const RawValue& v) {
    F& f = c.fsdp_plugin ? *c.fsdp_plugin : c.fsdp_plugin.emplace();
    if (v.kind == RawValue::Kind::kNull) {
      f.reshard_after_forward.reset();
      return;
    }
    try {
      f.reshard_after_forward = p_bool(v);
    } catch (const ValueError&) {
      f.sharding_strategy = p_enum(parse_fsdp_sharding_strategy, v);
      f.reshard_after_forward.reset();
    }
  };
  rf.get = [](const AcceleratorConfig& c) -> Out {
    if (!c.fsdp_plugin || !c.fsdp_plugin->reshard_after_forward) return std::nullopt;
    return out_bool(*c.fsdp_plugin->reshard_after_forward);
  };
  t.push_back(std::move(rf));
  const std::string prefetch = enum_choices(fsdp_backward_prefetch_name, 0, 2);
  b.opt_choice("fsdp_backward_prefetch", &F::backward_prefetch, parse_fsdp_backward_prefetch,
               fsdp_backward_prefetch_name, prefetch, {"FSDP_BACKWARD_PREFETCH"});
  // Accelerate before 0.27 wrote fsdp_backward_prefetch_policy.
  KeyInfo& old = b.opt_choice("fsdp_backward_prefetch_policy", &F::backward_prefetch,
                              parse_fsdp_backward_prefetch, fsdp_backward_prefetch_name, prefetch,
                              {}, Write::kNever);
  old.set = [set = old.set](AcceleratorConfig& c, const RawValue& v) {
    set(c, v);
    BRAID_LOG(kWarning) << "fsdp_config.fsdp_backward_prefetch_policy is deprecated (Accelerate "
                           "renamed it): read as fsdp_backward_prefetch";
  };
  b.field<std::optional<FsdpMixedPrecisionPolicy>>(
      "fsdp_mixed_precision_policy",
      "fp32, fp16, bf16 or fp8, or a mapping of param_dtype, reduce_dtype and buffer_dtype",
      &F::mixed_precision_policy, p_mixed_precision_policy, out_mixed_precision_policy);
  b.choice("fsdp_auto_wrap_policy", &F::auto_wrap_policy, parse_fsdp_auto_wrap_policy,
           fsdp_auto_wrap_policy_name, "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP",
           {"FSDP_AUTO_WRAP_POLICY"});
  b.list("fsdp_transformer_layer_cls_to_wrap", &F::transformer_cls_names_to_wrap, true,
         {"FSDP_TRANSFORMER_CLS_TO_WRAP"});
  b.field<int64_t>("fsdp_min_num_params", "a non-negative integer", &F::min_num_params,
                   [](const RawValue& v) {
                     double x = parse_real_value(scalar(v));  // 1e8 as the question shows it
                     if (x < 0 || x != std::floor(x) || x > 9e18) throw ValueError{};
                     return static_cast<int64_t>(x);
                   },
                   out_int, {"FSDP_MIN_NUM_PARAMS"});
  b.boolean("fsdp_offload_params", &F::cpu_offload, {"FSDP_OFFLOAD_PARAMS"});
  b.list("fsdp_ignored_modules", &F::ignored_modules, true, {"FSDP_IGNORED_MODULES"},
         Write::kIfChanged);
  b.opt_choice("fsdp_state_dict_type", &F::state_dict_type, parse_fsdp_state_dict_type,
               fsdp_state_dict_type_name, enum_choices(fsdp_state_dict_type_name, 1, 3),
               {"FSDP_STATE_DICT_TYPE"});
  b.boolean("fsdp_limit_all_gathers", &F::limit_all_gathers, {}, Write::kIfChanged);
  b.opt_boolean("fsdp_forward_prefetch", &F::forward_prefetch, {"FSDP_FORWARD_PREFETCH"});
  b.opt_boolean("fsdp_sync_module_states", &F::sync_module_states, {"FSDP_SYNC_MODULE_STATES"});
  b.boolean("fsdp_use_orig_params", &F::use_orig_params, {"FSDP_USE_ORIG_PARAMS"});
  b.boolean("fsdp_activation_checkpointing", &F::activation_checkpointing,
            {"FSDP_ACTIVATION_CHECKPOINTING"});
  b.boolean("fsdp_cpu_ram_efficient_loading", &F::cpu_ram_efficient_loading,
            {"FSDP_CPU_RAM_EFFICIENT_LOADING"});
  b.integer("fsdp_hsdp_shard_size", &F::hsdp_shard_size, 0, std::numeric_limits<int64_t>::max(),
            "a non-negative integer (0: the processes of one machine)", {}, Write::kIfChanged);
  // As `accelerate config` writes them: FSDP2 files carry fsdp_reshard_after_forward instead of
  // the (default) strategy, and fsdp_min_num_params belongs to SIZE_BASED_WRAP.
  for (KeyInfo& k : t) {
    if (k.section != "fsdp_config") continue;
    if (k.name == "fsdp_sharding_strategy") {
      k.get = [get = k.get](const AcceleratorConfig& c) -> Out {
        if (!c.fsdp_plugin) return std::nullopt;
        const F& f = *c.fsdp_plugin;
        if (f.fsdp_version == 2 && f.sharding_strategy == FsdpShardingStrategy::kFullShard) {
          return std::nullopt;
        }
        return get(c);
      };
    } else if (k.name == "fsdp_min_num_params") {
      k.get = [get = k.get](const AcceleratorConfig& c) -> Out {
        if (!c.fsdp_plugin) return std::nullopt;
        const F& f = *c.fsdp_plugin;
        if (f.auto_wrap_policy != shard::WrapKind::kSizeBased &&
            f.min_num_params == default_of<F>().min_num_params) {
          return std::nullopt;
        }
        return get(c);
      };
    }
  }
}

void add_deepspeed(std::vector<KeyInfo>& t) {
  using D = DeepSpeedPlugin;
  Builder<D> b(t, optional_section<D, &AcceleratorConfig::deepspeed_plugin>("deepspeed_config",
                                                                            Write::kAlways));
  // Reads the JSON file when applied, so later sources override what it says.
  KeyInfo file{"deepspeed_config", "deepspeed_config_file", "a path to a DeepSpeed JSON file"};
  file.env = {"ACCELERATE_DEEPSPEED_CONFIG_FILE"};
  file.set = [](AcceleratorConfig& c, const RawValue& v) {
    D& d = c.deepspeed_plugin ? *c.deepspeed_plugin : c.deepspeed_plugin.emplace();
    if (v.kind == RawValue::Kind::kNull || lower(trim(scalar(v))) == "none") {
      d.hf_ds_config.clear();
      return;
    }
    std::filesystem::path p = p_string(v);
    // The error_code form: a name the file system refuses (too long, say) is a file that is not
    // there, which read_file below reports as kIo naming it (the throwing form escaped as
    // std::filesystem::filesystem_error; found by the config_yaml fuzz target).
    std::error_code ec;
    if (p.is_relative() && !v.base_dir.empty() && std::filesystem::exists(v.base_dir / p, ec)) {
      p = v.base_dir / p;
    }
    d.hf_ds_config = p.string();
    apply_deepspeed_json(c, p);
  };
  file.get = [](const AcceleratorConfig& c) -> Out {
    if (!c.deepspeed_plugin || c.deepspeed_plugin->hf_ds_config.empty()) return std::nullopt;
    return out_string(c.deepspeed_plugin->hf_ds_config);
  };
  t.push_back(std::move(file));
  b.integer("zero_stage", &D::zero_stage, 0, 3, "0, 1, 2 or 3",
            {"ACCELERATE_DEEPSPEED_ZERO_STAGE"});
  b.opt_integer("gradient_accumulation_steps", &D::gradient_accumulation_steps, 1,
                std::numeric_limits<int64_t>::max(), "a positive integer");
  b.opt_real("gradient_clipping", &D::gradient_clipping, 0, true, "a non-negative number",
             {"ACCELERATE_GRADIENT_CLIPPING"});
  auto device = [&b](std::string name, nn::OffloadDevice D::*m, std::string env) {
    b.field<nn::OffloadDevice>(
        std::move(name), "none, cpu or nvme", m,
        [](const RawValue& v) {
          try {
            return nn::parse_offload_device(trim(scalar(v)));
          } catch (const Error&) {
            throw ValueError{};
          }
        },
        [](const nn::OffloadDevice& x) -> Out { return out_string(nn::offload_device_name(x)); },
        {std::move(env)});
  };
  device("offload_optimizer_device", &D::offload_optimizer_device,
         "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE");
  device("offload_param_device", &D::offload_param_device,
         "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE");
  b.path("offload_optimizer_nvme_path", &D::offload_optimizer_nvme_path,
         {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"});
  b.path("offload_param_nvme_path", &D::offload_param_nvme_path,
         {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH"});
  b.boolean("zero3_init_flag", &D::zero3_init_flag, {"ACCELERATE_DEEPSPEED_ZERO3_INIT"});
  b.boolean("zero3_save_16bit_model", &D::zero3_save_16bit_model,
            {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"});
  b.list("deepspeed_moe_layer_cls_names", &D::transformer_moe_cls_names, true,
         {"ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"});
  b.integer("mics_shard_size", &D::mics_shard_size, 0, std::numeric_limits<int64_t>::max(),
            "a non-negative integer (0: every rank)", {}, Write::kIfChanged);
  // `standard` (torchrun on every node) is what braid launch is.
  b.inert("deepspeed_multinode_launcher",
          "the deepspeed launcher's multi-node settings; braid launch starts the ranks",
          {"standard"});
  for (const char* k :
       {"deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter"}) {
    b.inert(k, "the deepspeed launcher's multi-node settings; braid launch starts the ranks");
  }
  // With a JSON file, the fields it holds are not written beside it: Accelerate refuses both,
  // and on reading the file back the JSON (read first) would be overridden.
  for (KeyInfo& k : t) {
    if (k.section != "deepspeed_config" || k.name == "deepspeed_config_file" ||
        k.name == "zero3_init_flag" || k.name == "deepspeed_moe_layer_cls_names") {
      continue;
    }
    k.get = [get = k.get](const AcceleratorConfig& c) -> Out {
      if (c.deepspeed_plugin && !c.deepspeed_plugin->hf_ds_config.empty()) return std::nullopt;
      return get(c);
    };
  }
}

void add_megatron_and_parallelism(std::vector<KeyInfo>& t) {
  {
    using M = MegatronLMPlugin;
    Builder<M> b(t, optional_section<M, &AcceleratorConfig::megatron_lm_plugin>(
                        "megatron_lm_config", Write::kAlways));
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    b.integer("megatron_lm_tp_degree", &M::tp_degree, 1, kMax, "a positive integer",
              {"MEGATRON_LM_TP_DEGREE"});
    b.integer("megatron_lm_pp_degree", &M::pp_degree, 1, kMax, "a positive integer",
              {"MEGATRON_LM_PP_DEGREE"});
    b.integer("megatron_lm_num_micro_batches", &M::num_micro_batches, 1, kMax, "a positive integer",
              {"MEGATRON_LM_NUM_MICRO_BATCHES"});
    b.integer("megatron_lm_num_layers_per_virtual_pipeline_stage",
              &M::num_layers_per_virtual_pipeline_stage, 0, kMax,
              "a non-negative integer (0: no virtual stages)",
              {"MEGATRON_LM_NUM_LAYERS_PER_VIRTUAL_PIPELINE_STAGE"});
    b.real("megatron_lm_gradient_clipping", &M::gradient_clipping, 0, true,
           "a non-negative number (0: off)", {"MEGATRON_LM_GRADIENT_CLIPPING"});
    b.boolean("megatron_lm_sequence_parallelism", &M::sequence_parallelism,
              {"MEGATRON_LM_SEQUENCE_PARALLELISM"});
    b.boolean("megatron_lm_recompute_activations", &M::recompute_activations,
              {"MEGATRON_LM_RECOMPUTE_ACTIVATIONS"});
    b.boolean("megatron_lm_use_distributed_optimizer", &M::use_distributed_optimizer,
              {"MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER"});
  }
  {
    using P = ParallelismConfig;
    Builder<P> b(t, optional_section<P, &AcceleratorConfig::parallelism_config>(
                        "parallelism_config", Write::kAlways));
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    b.integer("parallelism_config_dp_replicate_size", &P::dp_replicate_size, 1, kMax,
              "a positive integer", {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE"});
    b.integer("parallelism_config_dp_shard_size", &P::dp_shard_size, 1, kMax, "a positive integer",
              {"PARALLELISM_CONFIG_DP_SHARD_SIZE"});
    b.integer("parallelism_config_tp_size", &P::tp_size, 1, kMax, "a positive integer",
              {"PARALLELISM_CONFIG_TP_SIZE"});
    b.integer("parallelism_config_cp_size", &P::cp_size, 1, kMax, "a positive integer",
              {"PARALLELISM_CONFIG_CP_SIZE"});
    // Accelerate 1.x's tp_config.tp_size: the same as parallelism_config_tp_size.
    Builder<P> tp(
        t, optional_section<P, &AcceleratorConfig::parallelism_config>("tp_config", Write::kNever));
    tp.integer("tp_size", &P::tp_size, 1, kMax, "a positive integer");
  }
}

std::vector<KeyInfo> build_table() {
  std::vector<KeyInfo> t;
  add_top_level(t);
  add_gradient_accumulation(t);
  add_kwargs(t);
  add_data_and_project(t);
  add_fsdp(t);
  add_deepspeed(t);
  add_megatron_and_parallelism(t);
  return t;
}

}  // namespace

const std::vector<KeyInfo>& key_table() {
  static const std::vector<KeyInfo> table = build_table();
  return table;
}

bool is_free_section(std::string_view section) {
  return section == "fp8_config";
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const KeyInfo& k : key_table()) {
      if (!k.section.empty() && std::find(out.begin(), out.end(), k.section) == out.end()) {
        out.push_back(k.section);
      }
    }
    out.push_back("fp8_config");
    return out;
  }();
  return names;
}

const KeyInfo* find_key(std::string_view section, std::string_view name) {
  for (const KeyInfo& k : key_table()) {
    if (k.section == section && k.name == name) return &k;
  }
  return nullptr;
}

}  // namespace braid::accel::detail
