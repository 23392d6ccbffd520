// `braid estimate-memory [MODEL]`: Accelerate's estimate-memory for braid's GPT, per rank and
// ZeRO stage (docs/memory.md). MODEL is a preset (gpt2, gpt2-medium, gpt2-large, gpt2-xl), a
// transformers config.json, or a folder holding one. The model is built on the meta device (no
// memory), cut into units as ShardedModel cuts it (transformer_based_wrap over GPT2Block), and
// shard::estimate_gpt_memory replays a training step of one micro-batch per rank.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/nn/module.h"
#include "braid/nn/optim.h"
#include "braid/shard/fsdp.h"
#include "braid/shard/memory.h"
#include "commands.h"

namespace braid::cli {

namespace {

struct EstimateOptions {
  std::string model = "gpt2";
  int64_t num_processes = 1;
  std::vector<int64_t> stages = {0, 1, 2, 3};
  std::vector<std::string> dtypes = {"float32", "bfloat16"};
  int64_t batch = 1;
  int64_t seq = 0;  // 0: n_positions
  std::string optimizer = "adamw";
  int64_t hsdp = 0;
  bool checkpointing = false;
  bool keep_after_forward = false;
  bool details = false;
};

nn::GPTConfig preset(const std::string& name) {
  nn::GPTConfig c;  // gpt2: 12 layers, 768, 12 heads
  if (name == "gpt2") return c;
  if (name == "gpt2-medium") {
    c.n_layer = 24, c.n_embd = 1024, c.n_head = 16;
  } else if (name == "gpt2-large") {
    c.n_layer = 36, c.n_embd = 1280, c.n_head = 20;
  } else if (name == "gpt2-xl") {
    c.n_layer = 48, c.n_embd = 1600, c.n_head = 25;
  } else {
    BRAID_FAIL(kInvalidArgument, "estimate-memory: '", name,
               "' is not a preset (gpt2, gpt2-medium, gpt2-large, gpt2-xl), a config.json or a "
               "folder holding one");
  }
  return c;
}

nn::GPTConfig model_config(const std::string& model) {
  std::filesystem::path p(model);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  if (!std::filesystem::is_regular_file(p)) return preset(model);
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  BRAID_CHECK(in.good() || in.eof(), kIo, "estimate-memory: cannot read ", p.string());
  return nn::GPTConfig::from_hf_json(text.str());
}

DType parse_dtype_name(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "no") return DType::kF32;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "float16" || name == "fp16") return DType::kF16;
  BRAID_FAIL(kInvalidArgument,
             "estimate-memory: --dtypes takes float32, bfloat16 or float16, got '", name, "'");
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

void run(const EstimateOptions& o) {
  nn::GPTConfig cfg = model_config(o.model);
  cfg.activation_checkpointing = o.checkpointing;
  const int64_t seq = o.seq > 0 ? o.seq : cfg.n_positions;
  BRAID_CHECK(o.num_processes >= 1 && o.batch >= 1 && seq >= 1, kInvalidArgument,
              "estimate-memory: --num_processes, --batch_size and --seq_len must be >= 1");
  std::shared_ptr<nn::GPT> gpt;
  {
    nn::InitEmptyWeights empty;  // meta device: sizes only
    gpt = std::make_shared<nn::GPT>(cfg);
  }
  kernels::OptimAlgo algo = kernels::OptimAlgo::kAdamW;
  nn::OptimizerOptions opt_options;
  if (o.optimizer == "adam") {
    algo = kernels::OptimAlgo::kAdam;
  } else if (o.optimizer == "sgd") {
    algo = kernels::OptimAlgo::kSgd;
    opt_options.momentum = 0.9;
  } else {
    BRAID_CHECK(o.optimizer == "adamw", kInvalidArgument,
                "estimate-memory: --optimizer takes adamw, adam or sgd, got '", o.optimizer, "'");
  }
  const shard::WrapPolicy wrap{.kind = shard::WrapKind::kTransformerBased,
                               .transformer_cls_names_to_wrap = {"GPT2Block"}};
  const int world = static_cast<int>(o.num_processes);
  std::printf(
      "# %s: %lld layers, n_embd %lld, vocab %lld, %.1fM parameters; %lld rank(s), "
      "micro-batch %lld x %lld tokens per rank, %s%s\n",
      o.model.c_str(), static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_embd),
      static_cast<long long>(cfg.vocab_size), static_cast<double>(gpt->num_parameters()) / 1e6,
      static_cast<long long>(world), static_cast<long long>(o.batch), static_cast<long long>(seq),
      o.optimizer.c_str(), o.checkpointing ? ", activation checkpointing" : "");
  std::printf("%-9s %-5s %12s %16s  %s\n", "dtype", "stage", "peak MiB", "between steps",
              "peak at");
  for (const std::string& dtype_name : o.dtypes) {
    const DType dt = parse_dtype_name(dtype_name);
    for (int64_t stage : o.stages) {
      shard::ShardingOptions so;
      so.stage = shard::zero_stage_from_int(stage);
      so.wrap = wrap;
      so.precision.param_dtype = dt;  // FSDP MixedPrecision: 16-bit parameters, f32 masters
      so.reshard_after_forward = !o.keep_after_forward;
      so.overlap = false;
      if (o.hsdp > 0 && stage > 0) so.shard_group_size = o.hsdp;
      const int shard_world =
          so.shard_group_size > 0 ? static_cast<int>(so.shard_group_size) : world;
      const auto units = shard::unit_sizes(shard::make_units(*gpt, wrap, shard_world));
      const auto mo =
          shard::MemoryOptions::from(so, world, shard::OptimizerMemory::of(algo, opt_options));
      const shard::MemoryEstimate e = shard::estimate_gpt_memory(
          cfg, {.batch = o.batch, .seq = seq, .autocast = dt}, units, mo);
      std::printf("%-9s %-5lld %12.1f %16.1f  %s\n", dtype_name.c_str(),
                  static_cast<long long>(stage), mib(e.peak_bytes()), mib(e.between_steps.total()),
                  e.peak_at.c_str());
      if (o.details) std::printf("%s\n", e.str().c_str());
    }
  }
}

}  // namespace

void add_estimate_memory_command(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "estimate-memory",
      "Peak memory per rank of a GPT training step at each ZeRO stage (docs/memory.md)");
  cmd->add_option("model", o->model,
                  "gpt2, gpt2-medium, gpt2-large, gpt2-xl, a config.json or a folder with one")
      ->capture_default_str();
  cmd->add_option("--num_processes,--num-processes,-n", o->num_processes, "Ranks (world size)")
      ->capture_default_str();
  cmd->add_option("--zero_stages,--zero-stages", o->stages, "ZeRO stages to show")
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
  cmd->add_option("--dtypes", o->dtypes,
                  "Parameter / compute dtypes: float32, bfloat16 (FSDP MixedPrecision), float16")
      ->capture_default_str();
  cmd->add_option("--batch_size,--batch-size", o->batch, "Sequences per rank per micro-batch")
      ->capture_default_str();
  cmd->add_option("--seq_len,--seq-len", o->seq, "Tokens per sequence (default: n_positions)");
  cmd->add_option("--optimizer", o->optimizer, "adamw, adam or sgd (with momentum)")
      ->capture_default_str();
  cmd->add_option("--hsdp", o->hsdp, "HSDP shard group size (stages 1-3; 0: none)");
  cmd->add_flag("--activation_checkpointing,--activation-checkpointing", o->checkpointing,
                "Every block recomputes its forward in backward");
  cmd->add_flag("--keep_after_forward,--keep-after-forward", o->keep_after_forward,
                "Stage 3: keep units gathered from forward to backward (SHARD_GRAD_OP)");
  cmd->add_flag("--details", o->details, "Print every term of each estimate");
  cmd->callback([o] { run(*o); });
}

}  // namespace braid::cli
