// deepspeed_config_file: the fields of a DeepSpeed JSON configuration that have a braid
// meaning, read into DeepSpeedPlugin (and mixed_precision). "auto" values are left as they
// are, as Accelerate fills them from its own settings; every other DeepSpeed field (optimizer,
// scheduler, batch sizes, communication tuning) is ignored: braid takes those from code.
#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "config_keys.h"

namespace braid::accel::detail {
namespace {

using Json = nlohmann::json;

struct Reader {
  std::string_view file;

  [[noreturn]] void bad(std::string_view field, const Json& value, std::string_view expected) {
    BRAID_FAIL(kInvalidArgument, "DeepSpeed config ", file, ": ", field, " = ", value.dump(),
               ": expected ", expected);
  }
  static bool is_auto(const Json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

  std::optional<int64_t> integer(const Json& v, std::string_view field, int64_t lo, int64_t hi) {
    if (is_auto(v)) return std::nullopt;
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      bad(field, v,
          "an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + " or \"auto\"");
    }
    return v.get<int64_t>();
  }
  std::optional<double> number(const Json& v, std::string_view field) {
    if (is_auto(v)) return std::nullopt;
    if (!v.is_number() || v.get<double>() < 0) bad(field, v, "a non-negative number or \"auto\"");
    return v.get<double>();
  }
  std::optional<bool> boolean(const Json& v, std::string_view field) {
    if (is_auto(v)) return std::nullopt;
    if (!v.is_boolean()) bad(field, v, "true, false or \"auto\"");
    return v.get<bool>();
  }
  std::string text(const Json& v, std::string_view field) {
    if (!v.is_string()) bad(field, v, "a string");
    return v.get<std::string>();
  }
  void offload(const Json& section, std::string_view name, nn::OffloadDevice& device,
               std::filesystem::path& nvme_path) {
    if (!section.is_object()) return;
    std::string prefix = "zero_optimization." + std::string(name);
    if (auto it = section.find("device"); it != section.end() && !it->is_null()) {
      std::string d = text(*it, prefix + ".device");
      try {
        device = nn::parse_offload_device(d);
      } catch (const Error&) {
        bad(prefix + ".device", *it, "none, cpu or nvme");
      }
    }
    if (auto it = section.find("nvme_path"); it != section.end() && !it->is_null()) {
      nvme_path = text(*it, prefix + ".nvme_path");
    }
  }
};

}  // namespace

void apply_deepspeed_json(AcceleratorConfig& config, const std::filesystem::path& path) {
  apply_deepspeed_json_text(config, read_file(path), path.string());  // kIo naming the path
}

void apply_deepspeed_json_text(AcceleratorConfig& config, std::string_view text,
                               std::string_view what) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    BRAID_FAIL(kCorruptData, "DeepSpeed config ", what, " is not valid JSON: ", e.what());
  }
  BRAID_CHECK(j.is_object(), kCorruptData, "DeepSpeed config ", what,
              ": expected a JSON object at the top");
  Reader r{what};
  DeepSpeedPlugin& ds =
      config.deepspeed_plugin ? *config.deepspeed_plugin : config.deepspeed_plugin.emplace();
  if (auto it = j.find("zero_optimization"); it != j.end() && it->is_object()) {
    const Json& z = *it;
    if (auto s = z.find("stage"); s != z.end()) {
      if (auto v = r.integer(*s, "zero_optimization.stage", 0, 3)) ds.zero_stage = *v;
    }
    if (auto s = z.find("offload_optimizer"); s != z.end()) {
      r.offload(*s, "offload_optimizer", ds.offload_optimizer_device,
                ds.offload_optimizer_nvme_path);
    }
    if (auto s = z.find("offload_param"); s != z.end()) {
      r.offload(*s, "offload_param", ds.offload_param_device, ds.offload_param_nvme_path);
    }
    if (auto s = z.find("mics_shard_size"); s != z.end()) {
      // DeepSpeed's -1 means "off" (every rank).
      if (auto v = r.integer(*s, "zero_optimization.mics_shard_size", -1, 1 << 30)) {
        ds.mics_shard_size = std::max<int64_t>(*v, 0);
      }
    }
    for (const char* key : {"stage3_gather_16bit_weights_on_model_save",
                            "stage3_gather_fp16_weights_on_model_save"}) {
      if (auto s = z.find(key); s != z.end()) {
        if (auto v = r.boolean(*s, std::string("zero_optimization.") + key)) {
          ds.zero3_save_16bit_model = *v;
        }
      }
    }
  }
  if (auto it = j.find("gradient_accumulation_steps"); it != j.end()) {
    if (auto v = r.integer(*it, "gradient_accumulation_steps", 1, 1 << 30)) {
      ds.gradient_accumulation_steps = *v;
    }
  }
  if (auto it = j.find("gradient_clipping"); it != j.end()) {
    if (auto v = r.number(*it, "gradient_clipping")) ds.gradient_clipping = *v;
  }
  for (const auto& [key, precision] : {std::pair{"fp16", amp::PrecisionType::kFp16},
                                       std::pair{"bf16", amp::PrecisionType::kBf16}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_object()) continue;
    auto en = it->find("enabled");
    if (en == it->end()) continue;
    if (auto v = r.boolean(*en, std::string(key) + ".enabled"); v && *v) {
      config.mixed_precision = precision;
    }
  }
}

}  // namespace braid::accel::detail
