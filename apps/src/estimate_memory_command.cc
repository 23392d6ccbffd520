// `braid estimate-memory [MODEL]`: Accelerate's estimate-memory for braid's causal LMs, per
// rank and ZeRO stage (docs/memory.md). MODEL is a preset (nn::causal_lm_preset_names: GPT-2
// sizes, Llama-2 7B / 13B, TinyLlama), a transformers config.json of a family braid implements
// (model_type gpt2 or llama), or a folder holding one. Each row is shard::estimate_memory: the
// real ShardedModel and optimizer running two steps on the meta device over a 'meta' group of
// --num_processes ranks, measured with the meta allocator (no memory is used).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/nn/models.h"
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
  int64_t seq = 0;  // 0: the model's positions (n_positions, max_position_embeddings)
  std::string optimizer = "adamw";
  int64_t hsdp = 0;
  bool checkpointing = false;
  bool keep_after_forward = false;
  bool details = false;
};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The config.json text of MODEL: a file, a folder holding one, or a preset.
std::string model_config(const std::string& model) {
  std::filesystem::path p(model);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  if (!std::filesystem::is_regular_file(p)) {
    std::string preset = nn::causal_lm_preset_config(model);
    BRAID_CHECK(!preset.empty(), kInvalidArgument, "estimate-memory: '", model,
                "' is not a preset (", joined(nn::causal_lm_preset_names()),
                "), a config.json or a folder holding one");
    return preset;
  }
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  BRAID_CHECK(in.good() || in.eof(), kIo, "estimate-memory: cannot read ", p.string());
  return text.str();
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
  const std::string json = model_config(o.model);
  std::shared_ptr<nn::CausalLM> probe;
  {
    nn::InitEmptyWeights empty;  // meta device: sizes only
    probe = nn::causal_lm_from_hf_config(json);
  }
  const int64_t positions = probe->max_positions();
  const int64_t seq = o.seq > 0 ? o.seq : positions;
  BRAID_CHECK(o.num_processes >= 1 && o.batch >= 1 && seq >= 1, kInvalidArgument,
              "estimate-memory: --num_processes, --batch_size and --seq_len must be >= 1");
  shard::MemoryOptimizer opt;
  if (o.optimizer == "adam") {
    opt.algo = kernels::OptimAlgo::kAdam;
  } else if (o.optimizer == "sgd") {
    opt.algo = kernels::OptimAlgo::kSgd;
    opt.options.momentum = 0.9;
  } else {
    BRAID_CHECK(o.optimizer == "adamw", kInvalidArgument,
                "estimate-memory: --optimizer takes adamw, adam or sgd, got '", o.optimizer, "'");
  }
  const std::string block = nn::block_type_name(*probe);
  const shard::WrapPolicy wrap{.kind = shard::WrapKind::kTransformerBased,
                               .transformer_cls_names_to_wrap = {block}};
  const int world = static_cast<int>(o.num_processes);
  std::printf(
      "# %s: %s, %lld %s blocks, vocab %lld, %.1fM parameters; %lld rank(s), micro-batch %lld x "
      "%lld tokens per rank, %s%s\n",
      o.model.c_str(), probe->model_type().c_str(), static_cast<long long>(probe->num_blocks()),
      block.c_str(), static_cast<long long>(probe->vocab_size()),
      static_cast<double>(probe->num_parameters()) / 1e6, static_cast<long long>(world),
      static_cast<long long>(o.batch), static_cast<long long>(seq), o.optimizer.c_str(),
      o.checkpointing ? ", activation checkpointing" : "");
  probe.reset();
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
      so.activation_checkpointing = o.checkpointing;  // every block: the units' layers
      so.overlap = false;
      if (o.hsdp > 0 && stage > 0) so.shard_group_size = o.hsdp;
      const shard::MemoryEstimate e =
          shard::estimate_memory([&] { return nn::causal_lm_from_hf_config(json); }, so, world,
                                 {.batch = o.batch, .seq = seq, .autocast = dt}, opt);
      std::printf("%-9s %-5lld %12.1f %16.1f  %s\n", dtype_name.c_str(),
                  static_cast<long long>(stage), mib(e.peak_bytes), mib(e.between_steps),
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
      "Peak memory per rank of a training step at each ZeRO stage, measured on the meta device "
      "(docs/memory.md)");
  cmd->add_option("model", o->model,
                  "A preset (gpt2, gpt2-medium, gpt2-large, gpt2-xl, meta-llama/Llama-2-7b-hf, "
                  "meta-llama/Llama-2-13b-hf, tinyllama), a config.json (model_type gpt2 or "
                  "llama) or a folder with one")
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
  cmd->add_option("--seq_len,--seq-len", o->seq,
                  "Tokens per sequence (default: the model's positions)");
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
