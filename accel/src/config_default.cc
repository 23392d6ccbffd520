// Resolving a configuration from its sources, the default file locations, the seed's
// write_basic_config, and the small helpers (gradient accumulation, the program's own keys).
#include <filesystem>

#include "braid/accel/config.h"
#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "config_keys.h"

namespace braid::accel {
namespace {

std::optional<std::filesystem::path> env_path(const char* name) {
  auto v = get_env_string(name);
  if (!v || v->empty()) return std::nullopt;
  return std::filesystem::path(*v);
}

// $XDG_CACHE_HOME, else $HOME/.cache.
std::optional<std::filesystem::path> cache_home() {
  if (auto x = env_path("XDG_CACHE_HOME")) return x;
  if (auto h = env_path("HOME")) return *h / ".cache";
  return std::nullopt;
}

// GPUs this build can use: cuda first, then hip (0 when neither is built or present).
int gpu_count() {
  for (DeviceType t : {DeviceType::kCUDA, DeviceType::kHIP}) {
    if (!is_runtime_built(t)) continue;
    try {
      int n = device_runtime(t).device_count();
      if (n > 0) return n;
    } catch (const Error&) {
      // A runtime built without a usable device: none of this type.
    }
  }
  return 0;
}

}  // namespace

int64_t gradient_accumulation_steps(const AcceleratorConfig& config) {
  if (config.gradient_accumulation_plugin) return config.gradient_accumulation_plugin->num_steps;
  if (config.gradient_accumulation_steps) return *config.gradient_accumulation_steps;
  if (config.deepspeed_plugin && config.deepspeed_plugin->gradient_accumulation_steps) {
    return *config.deepspeed_plugin->gradient_accumulation_steps;
  }
  return 1;
}

GradientAccumulationPlugin gradient_accumulation_plugin(const AcceleratorConfig& config) {
  if (config.gradient_accumulation_plugin) return *config.gradient_accumulation_plugin;
  GradientAccumulationPlugin p;
  p.num_steps = gradient_accumulation_steps(config);
  return p;
}

std::optional<std::filesystem::path> default_config_file() {
  if (auto p = env_path("BRAID_CONFIG_FILE")) return p;
  if (auto c = cache_home()) return *c / "braid" / "default_config.yaml";
  return std::nullopt;
}

std::optional<std::filesystem::path> accelerate_default_config_file() {
  if (auto hf = env_path("HF_HOME")) return *hf / "accelerate" / "default_config.yaml";
  if (auto c = cache_home()) return *c / "huggingface" / "accelerate" / "default_config.yaml";
  return std::nullopt;
}

std::optional<std::filesystem::path> find_config_file(const ConfigSources& sources) {
  if (sources.config_file) return sources.config_file;
  if (sources.command_line.config_file) return sources.command_line.config_file;
  if (auto p = env_path("BRAID_CONFIG_FILE")) return p;
  if (!sources.search_default_files) return std::nullopt;
  for (const auto& candidate : {default_config_file(), accelerate_default_config_file()}) {
    std::error_code ec;
    if (candidate && std::filesystem::is_regular_file(*candidate, ec)) return candidate;
  }
  return std::nullopt;
}

AcceleratorConfig resolve_config(AcceleratorConfig defaults, const ConfigSources& sources) {
  AcceleratorConfig config = std::move(defaults);
  if (auto file = find_config_file(sources)) apply_config_file(config, *file, sources.options);
  if (sources.use_environment) apply_environment(config);
  apply_overrides(config, sources.command_line.overrides, sources.options);
  if (sources.validate) validate_config(config);
  return config;
}

std::optional<std::filesystem::path> write_basic_config(
    amp::PrecisionType mixed_precision, std::optional<std::filesystem::path> save_location) {
  if (!save_location) save_location = default_config_file();
  BRAID_CHECK(save_location.has_value(), kInvalidArgument,
              "write_basic_config: no save_location, and neither BRAID_CONFIG_FILE nor HOME is "
              "set; expected a path");
  const std::filesystem::path& path = *save_location;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return std::nullopt;  // Accelerate never overwrites
  AcceleratorConfig c;
  c.compute_environment = ComputeEnvironment::kLocalMachine;
  c.mixed_precision = mixed_precision;
  int gpus = gpu_count();
  if (gpus > 0) {
    c.num_processes = gpus;
    c.use_cpu = false;
    c.distributed_type = gpus > 1 ? DistributedType::kMultiGpu : DistributedType::kNo;
  } else {
    c.num_processes = 1;
    c.use_cpu = true;
    c.distributed_type = DistributedType::kNo;
  }
  c.debug = false;
  validate_config(c);  // a file braid would refuse is not written (fp8)
  if (path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    BRAID_CHECK(!ec, kIo, "write_basic_config: cannot create folder ", path.parent_path().string(),
                ": ", ec.message());
  }
  write_file_atomic(path, to_yaml(c));
  return path;
}

std::optional<std::filesystem::path> write_basic_config(
    std::string_view mixed_precision, std::optional<std::filesystem::path> save_location) {
  amp::PrecisionType p;
  try {
    p = amp::parse_precision_type(detail::lower(detail::trim(mixed_precision)));
  } catch (const Error&) {
    BRAID_FAIL(kInvalidArgument, "write_basic_config: mixed_precision '", mixed_precision,
               "': expected no, fp16, bf16 or fp8");
  }
  return write_basic_config(p, std::move(save_location));
}

std::optional<std::string> extra_value(const AcceleratorConfig& config, std::string_view key) {
  auto it = config.extra.find(std::string(key));
  if (it == config.extra.end()) return std::nullopt;
  return it->second;
}

std::string extra_string(const AcceleratorConfig& config, std::string_view key,
                         std::string_view default_value) {
  return extra_value(config, key).value_or(std::string(default_value));
}

namespace {

template <typename T, typename Parse>
T extra_typed(const AcceleratorConfig& config, std::string_view key, T default_value,
              std::string_view expected, Parse parse) {
  auto v = extra_value(config, key);
  if (!v) return default_value;
  try {
    return parse(*v);
  } catch (const detail::ValueError&) {
    BRAID_FAIL(kInvalidArgument, "configuration key ", key, " = '", *v, "': expected ", expected);
  }
}

}  // namespace

int64_t extra_int(const AcceleratorConfig& config, std::string_view key, int64_t default_value) {
  return extra_typed<int64_t>(config, key, default_value, "an integer",
                              [](const std::string& s) { return detail::parse_int_value(s); });
}
double extra_double(const AcceleratorConfig& config, std::string_view key, double default_value) {
  return extra_typed<double>(config, key, default_value, "a finite number",
                             [](const std::string& s) { return detail::parse_real_value(s); });
}
bool extra_bool(const AcceleratorConfig& config, std::string_view key, bool default_value) {
  return extra_typed<bool>(config, key, default_value, "true or false",
                           [](const std::string& s) { return detail::parse_bool_value(s); });
}

std::vector<std::string> config_key_paths() {
  std::vector<std::string> out;
  for (const detail::KeyInfo& k : detail::key_table()) out.push_back(k.path());
  return out;
}

}  // namespace braid::accel
