// `braid config`'s questionnaire: the machine, multi-node rendezvous, DeepSpeed-style ZeRO or
// FSDP settings, process count and mixed precision, as `accelerate config` asks them
// (docs/config.md, "braid config"), and Megatron-LM's tensor / pipeline parallelism.
// Questions about things braid does not have (TPUs, IPEX, torch dynamo) are not asked.
#include "config_questions.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "braid/core/error.h"

namespace braid::cli {
namespace {

using accel::AcceleratorConfig;
using accel::DistributedType;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Asker {
 public:
  Asker(std::istream& in, std::ostream& out) : in_(in), out_(out) {}

  // One of `options`: by its number or its text. Returns the index.
  size_t choice(const std::string& question, const std::vector<std::string>& options,
                size_t default_index = 0) {
    out_ << question << '\n';
    for (size_t i = 0; i < options.size(); ++i) out_ << " [" << i << "] " << options[i] << '\n';
    std::string prompt = "Enter a number [" + std::to_string(default_index) + "]: ";
    for (;;) {
      std::optional<std::string> a = answer(prompt, question);
      if (!a) return default_index;
      int64_t n = 0;
      auto [end, ec] = std::from_chars(a->data(), a->data() + a->size(), n);
      if (ec == std::errc() && end == a->data() + a->size() && n >= 0 &&
          static_cast<size_t>(n) < options.size()) {
        return static_cast<size_t>(n);
      }
      for (size_t i = 0; i < options.size(); ++i) {
        if (lower(*a) == lower(options[i])) return i;
      }
      refuse(*a, "a number from 0 to " + std::to_string(options.size() - 1));
    }
  }

  bool yes_no(const std::string& question, bool default_value) {
    std::string prompt = question + (default_value ? " [YES/no]: " : " [yes/NO]: ");
    for (;;) {
      std::optional<std::string> a = answer(prompt, question);
      if (!a) return default_value;
      std::string l = lower(*a);
      if (l == "yes" || l == "y" || l == "true") return true;
      if (l == "no" || l == "n" || l == "false") return false;
      refuse(*a, "yes or no");
    }
  }

  int64_t integer(const std::string& question, std::optional<int64_t> default_value,
                  int64_t min_value, int64_t max_value = INT64_MAX) {
    std::string prompt =
        question + (default_value ? " [" + std::to_string(*default_value) + "]: " : ": ");
    for (;;) {
      std::optional<std::string> a = answer(prompt, question, !default_value);
      if (!a) return *default_value;
      // 1e8, as the minimum-parameters question shows its default.
      char* end = nullptr;
      double v = std::strtod(a->c_str(), &end);
      if (end == a->c_str() + a->size() && v == static_cast<double>(static_cast<int64_t>(v)) &&
          v >= static_cast<double>(min_value) && v <= static_cast<double>(max_value)) {
        return static_cast<int64_t>(v);
      }
      refuse(*a, "an integer from " + std::to_string(min_value) +
                     (max_value == INT64_MAX ? " up" : " to " + std::to_string(max_value)));
    }
  }

  double real(const std::string& question, double default_value) {
    std::string prompt = question + " [" + std::to_string(default_value).substr(0, 3) + "]: ";
    for (;;) {
      std::optional<std::string> a = answer(prompt, question);
      if (!a) return default_value;
      char* end = nullptr;
      double v = std::strtod(a->c_str(), &end);
      if (end == a->c_str() + a->size() && v >= 0) return v;
      refuse(*a, "a non-negative number");
    }
  }

  std::string text(const std::string& question, std::optional<std::string> default_value) {
    std::string prompt = question + (default_value ? " [" + *default_value + "]: " : ": ");
    std::optional<std::string> a = answer(prompt, question, !default_value);
    return a ? *a : *default_value;
  }

 private:
  // The trimmed answer, or nullopt for "take the default" (empty line, end of input). With
  // `required`, an empty answer asks again and the end of input is an error.
  std::optional<std::string> answer(const std::string& prompt, const std::string& question,
                                    bool required = false) {
    for (;;) {
      out_ << prompt << std::flush;
      std::string line;
      if (!std::getline(in_, line)) {
        out_ << '\n';
        BRAID_CHECK(!required, kInvalidArgument, "braid config: no answer to '", question,
                    "' before the end of input; it has no default");
        return std::nullopt;
      }
      line = trim(line);
      if (!line.empty()) return line;
      if (!required) return std::nullopt;
      out_ << "This question has no default; please answer it.\n";
    }
  }

  void refuse(const std::string& given, const std::string& expected) {
    out_ << "'" << given << "' is not valid here; expected " << expected << ".\n";
  }

  std::istream& in_;
  std::ostream& out_;
};

const std::vector<std::string> kOffloadDevices = {"none", "cpu", "nvme"};

void ask_deepspeed(Asker& ask, AcceleratorConfig& c, bool& has_json) {
  accel::DeepSpeedPlugin& ds = c.deepspeed_plugin.emplace();
  has_json = ask.yes_no("Do you want to specify a json file to a DeepSpeed config?", false);
  if (has_json) {
    ds.hf_ds_config = ask.text("Please enter the path to the json DeepSpeed config file", {});
  } else {
    ds.zero_stage = static_cast<int64_t>(ask.choice(
        "What should be your DeepSpeed's ZeRO optimization stage?", {"0", "1", "2", "3"}, 2));
    if (ds.zero_stage >= 2) {
      ds.offload_optimizer_device = nn::parse_offload_device(
          kOffloadDevices[ask.choice("Where to offload optimizer states?", kOffloadDevices)]);
      ds.offload_param_device = nn::parse_offload_device(
          kOffloadDevices[ask.choice("Where to offload parameters?", kOffloadDevices)]);
      if (ds.offload_param_device == nn::OffloadDevice::kNvme) {
        ds.offload_param_nvme_path = ask.text("Nvme Path to offload parameters?", "/nvme");
      }
      if (ds.offload_optimizer_device == nn::OffloadDevice::kNvme) {
        ds.offload_optimizer_nvme_path =
            ask.text("Nvme Path to offload optimizer states?", "/nvme");
      }
    }
    ds.gradient_accumulation_steps =
        ask.integer("How many gradient accumulation steps you're passing in your script?", 1, 1);
    if (ask.yes_no("Do you want to use gradient clipping?", false)) {
      ds.gradient_clipping = ask.real("What is the gradient clipping value?", 1.0);
    }
    if (ds.zero_stage == 3) {
      ds.zero3_save_16bit_model =
          ask.yes_no("Do you want to save 16-bit model weights when using ZeRO Stage-3?", false);
    }
  }
  ds.zero3_init_flag = ask.yes_no(
      "Do you want to build the model on the meta device (deepspeed.zero.Init) when using ZeRO "
      "Stage-3, so no rank holds it whole?",
      false);
}

void ask_fsdp(Asker& ask, AcceleratorConfig& c) {
  accel::FullyShardedDataParallelPlugin& f = c.fsdp_plugin.emplace();
  f.fsdp_version =
      static_cast<int64_t>(ask.choice("What should be your FSDP version?", {"FSDP1", "FSDP2"}, 1)) +
      1;
  if (f.fsdp_version == 1) {
    std::vector<std::string> strategies;
    for (int s = 1; s <= 5; ++s) {
      strategies.emplace_back(
          accel::fsdp_sharding_strategy_name(static_cast<accel::FsdpShardingStrategy>(s)));
    }
    f.sharding_strategy = accel::parse_fsdp_sharding_strategy(
        strategies[ask.choice("What should be your sharding strategy?", strategies)]);
  } else {
    f.reshard_after_forward = ask.yes_no(
        "Do you want to enable resharding after forward (FULL_SHARD; no: SHARD_GRAD_OP)?", true);
  }
  f.cpu_offload = ask.yes_no("Do you want to offload parameters and gradients to CPU?", false);
  std::vector<std::string> wraps = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
  f.auto_wrap_policy = accel::parse_fsdp_auto_wrap_policy(
      wraps[ask.choice("What should be your auto wrap policy?", wraps)]);
  if (f.auto_wrap_policy == shard::WrapKind::kTransformerBased) {
    std::string names = ask.text(
        "Specify the comma-separated list of transformer layer class names (case-sensitive) to "
        "wrap, e.g. GPT2Block",
        "GPT2Block");
    f.transformer_cls_names_to_wrap.clear();
    size_t start = 0;
    while (start <= names.size()) {
      size_t comma = names.find(',', start);
      if (comma == std::string::npos) comma = names.size();
      std::string item = trim(names.substr(start, comma - start));
      if (!item.empty()) f.transformer_cls_names_to_wrap.push_back(item);
      start = comma + 1;
    }
  } else if (f.auto_wrap_policy == shard::WrapKind::kSizeBased) {
    f.min_num_params = ask.integer(
        "What should be your FSDP's minimum number of parameters for Default Auto Wrapping "
        "Policy?",
        100'000'000, 0);
  }
  if (f.fsdp_version == 1) {
    std::vector<std::string> prefetch = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
    f.backward_prefetch = accel::parse_fsdp_backward_prefetch(
        prefetch[ask.choice("What should be your FSDP's backward prefetch policy?", prefetch)]);
  }
  std::vector<std::string> sd = {"FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"};
  f.state_dict_type = accel::parse_fsdp_state_dict_type(
      sd[ask.choice("What should be your FSDP's state dict type?", sd, 2)]);
  if (f.fsdp_version == 1) {
    f.forward_prefetch = ask.yes_no("Do you want to enable FSDP's forward prefetch policy?", false);
  }
  f.cpu_ram_efficient_loading = ask.yes_no(
      "Do you want to enable CPU RAM efficient model loading (the model is built on the meta "
      "device and each rank initializes its own shards)?",
      true);
  if (f.cpu_ram_efficient_loading) {
    f.sync_module_states = true;
  } else {
    f.sync_module_states = ask.yes_no(
        "Do you want each individually wrapped FSDP unit to broadcast module parameters from "
        "rank 0 at the start?",
        true);
  }
  f.activation_checkpointing = ask.yes_no(
      "Do you want to enable activation checkpointing (recompute each unit's forward in its "
      "backward)?",
      false);
}

// accelerate config's Megatron-LM questions, in its order.
void ask_megatron(Asker& ask, AcceleratorConfig& c) {
  accel::MegatronLMPlugin& m = c.megatron_lm_plugin.emplace();
  m.tp_degree = ask.integer("What is the Tensor Parallelism degree/size?", 1, 1);
  if (m.tp_degree > 1) {
    m.sequence_parallelism = ask.yes_no("Do you want to enable Sequence Parallelism?", true);
  }
  m.pp_degree = ask.integer("What is the Pipeline Parallelism degree/size?", 1, 1);
  if (m.pp_degree > 1) {
    m.num_micro_batches = ask.integer("What is the number of micro-batches?", 1, 1);
  }
  m.recompute_activations =
      ask.yes_no("Do you want to enable selective activation recomputation?", true);
  m.use_distributed_optimizer = ask.yes_no(
      "Do you want to use distributed optimizer which shards optimizer state and gradients "
      "across data parallel ranks?",
      true);
  m.gradient_clipping =
      ask.real("What is the gradient clipping value based on global L2 Norm (0 to disable)?", 1.0);
}

}  // namespace

accel::AcceleratorConfig ask_config_questions(std::istream& in, std::ostream& out) {
  Asker ask(in, out);
  AcceleratorConfig c;
  c.compute_environment = accel::ComputeEnvironment::kLocalMachine;
  const DistributedType machines[] = {DistributedType::kNo, DistributedType::kMultiCpu,
                                      DistributedType::kMultiGpu};
  c.distributed_type = machines[ask.choice("Which type of machine are you using?",
                                           {"No distributed training", "multi-CPU", "multi-GPU"})];
  const bool multi = c.distributed_type != DistributedType::kNo;
  if (multi) {
    c.num_machines = ask.integer(
        "How many different machines will you use (use more than 1 for multi-node training)?", 1,
        1);
    if (c.num_machines > 1) {
      c.machine_rank = ask.integer("What is the rank of this machine?", 0, 0, c.num_machines - 1);
      c.main_process_ip =
          ask.text("What is the IP address of the machine that will host the main process?", {});
      c.main_process_port = ask.integer(
          "What is the port you will use to communicate with the main process?", 29500, 0, 65535);
      c.same_network = ask.yes_no(
          "Are all the machines on the same local network? Answer `no` if nodes are on the cloud "
          "and/or on different network hosts",
          true);
      if (!c.same_network) {
        c.rdzv_backend =
            ask.text("What rendezvous backend will you use? ('static', 'c10d', ...)", "static");
      }
    }
    c.debug = ask.yes_no(
        "Should distributed operations be checked while running for errors? This can avoid "
        "timeout issues but will be slower.",
        false);
  }
  if (c.distributed_type == DistributedType::kNo) {
    c.use_cpu = ask.yes_no(
        "Do you want to run your training on CPU only (even if a GPU is available)?", false);
  } else {
    c.use_cpu = c.distributed_type == DistributedType::kMultiCpu;
  }

  bool ds_json = false;
  if (ask.yes_no("Do you want to use DeepSpeed (braid runs the ZeRO stages itself)?", false)) {
    c.distributed_type = DistributedType::kDeepSpeed;
    ask_deepspeed(ask, c, ds_json);
  } else if (multi && ask.yes_no("Do you want to use FullyShardedDataParallel?", false)) {
    c.distributed_type = DistributedType::kFsdp;
    ask_fsdp(ask, c);
  } else if (multi && ask.yes_no("Do you want to use Megatron-LM (tensor and pipeline "
                                 "parallelism, braid's own layers and schedules)?",
                                 false)) {
    c.distributed_type = DistributedType::kMegatronLm;
    ask_megatron(ask, c);
  }

  if (c.distributed_type != DistributedType::kNo || multi) {
    std::string unit = c.use_cpu ? "processes" : "GPU(s)";
    c.num_processes =
        ask.integer("How many " + unit + " should be used for distributed training?", 1, 1);
  } else {
    c.num_processes = 1;
  }
  BRAID_CHECK(!(c.distributed_type == DistributedType::kMultiGpu && c.num_machines == 1 &&
                c.num_processes == 1),
              kInvalidArgument,
              "braid config: MULTI_GPU with only 1 GPU on a single machine; choose `No "
              "distributed training` for the type of machine");
  if (!c.use_cpu) {
    c.gpu_ids = ask.text(
        "What GPU(s) (by id) should be used for training on this machine as a comma-separated "
        "list?",
        "all");
  }
  if (!ds_json) {
    const amp::PrecisionType precisions[] = {amp::PrecisionType::kNo, amp::PrecisionType::kFp16,
                                             amp::PrecisionType::kBf16, amp::PrecisionType::kFp8};
    c.mixed_precision = precisions[ask.choice("Do you wish to use FP16 or BF16 (mixed precision)?",
                                              {"no", "fp16", "bf16", "fp8"})];
  }
  accel::validate_config(c);
  return c;
}

}  // namespace braid::cli
