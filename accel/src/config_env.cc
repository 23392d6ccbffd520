// The environment and the command line as configuration sources: Accelerate's variables
// (each key of the table names the ones that set it) and `--key value` overrides, both going
// through the same key setters as the YAML file.
#include <algorithm>

#include "braid/accel/config.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "config_keys.h"

namespace braid::accel {
namespace {

using detail::KeyInfo;
using detail::RawValue;

// Variables that choose the distributed type (Accelerate's launcher sets one of them).
constexpr std::pair<const char*, DistributedType> kUseVariables[] = {
    {"ACCELERATE_USE_DEEPSPEED", DistributedType::kDeepSpeed},
    {"ACCELERATE_USE_FSDP", DistributedType::kFsdp},
    {"ACCELERATE_USE_MEGATRON_LM", DistributedType::kMegatronLm},
};
constexpr const char* kStepsVariable = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS";

std::vector<std::string> known_variables() {
  std::vector<std::string> names;
  for (const auto& [name, type] : kUseVariables) names.emplace_back(name);
  names.emplace_back(kStepsVariable);
  for (const KeyInfo& k : detail::key_table()) {
    for (const std::string& e : k.env) names.push_back(e);
  }
  return names;
}

std::string normalize(std::string_view key) {
  std::string out(key);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

// What an override key names: a table key, an fp8_config entry or an extra key.
struct Target {
  const KeyInfo* key = nullptr;
  std::string fp8_entry;
  std::string extra;
};

std::optional<Target> find_target(std::string_view raw_key, const ConfigOptions& options,
                                  std::string* problem) {
  std::string key = normalize(raw_key);
  if (size_t dot = key.find('.'); dot != std::string::npos) {
    std::string section = key.substr(0, dot);
    std::string name = key.substr(dot + 1);
    if (detail::is_free_section(section) && !name.empty()) return Target{nullptr, name, ""};
    if (const KeyInfo* k = detail::find_key(section, name)) return Target{k, "", ""};
    return std::nullopt;
  }
  if (const KeyInfo* k = detail::find_key("", key)) return Target{k, "", ""};
  for (const std::string& e : options.extra_keys) {
    if (normalize(e) == key) return Target{nullptr, "", e};
  }
  std::vector<const KeyInfo*> matches;
  for (const KeyInfo& k : detail::key_table()) {
    if (!k.section.empty() && k.name == key) matches.push_back(&k);
  }
  if (matches.size() == 1) return Target{matches.front(), "", ""};
  if (matches.size() > 1 && problem != nullptr) {
    *problem = "configuration key '" + std::string(raw_key) + "' is in several sections (";
    for (size_t i = 0; i < matches.size(); ++i) {
      *problem += (i > 0 ? ", " : "") + matches[i]->path();
    }
    *problem += "); give the dotted path";
  }
  return std::nullopt;
}

Target resolve_target(std::string_view raw_key, const ConfigOptions& options,
                      std::string_view source) {
  std::string problem;
  if (auto t = find_target(raw_key, options, &problem)) return *t;
  BRAID_CHECK(problem.empty(), kInvalidArgument, problem, " (", source, ")");
  std::string key = normalize(raw_key);
  std::vector<std::string> candidates;
  for (const KeyInfo& k : detail::key_table()) {
    candidates.push_back(k.path());
    if (!k.section.empty()) candidates.push_back(k.name);
  }
  for (const std::string& e : options.extra_keys) candidates.push_back(e);
  std::string best = detail::closest(key, candidates);
  // A bare nested name is only accepted when unique; show the path then.
  if (best.find('.') == std::string::npos && detail::find_key("", best) == nullptr) {
    if (auto t = find_target(best, options, nullptr); t && t->key) best = t->key->path();
  }
  BRAID_FAIL(kInvalidArgument, "unknown configuration key '", raw_key, "' (", source,
             "); the closest known key is '", best, "'");
}

}  // namespace

Environment process_environment() {
  Environment env;
  for (const std::string& name : known_variables()) {
    if (auto v = get_env_string(name)) env[name] = *v;
  }
  return env;
}

void apply_environment(AcceleratorConfig& config, const Environment& env) {
  AcceleratorConfig work = config;
  auto value_of = [&env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end() || detail::trim(it->second).empty()) return std::nullopt;
    return it->second;
  };
  const DistributedType* chosen = nullptr;
  const char* chosen_by = nullptr;
  for (const auto& [name, type] : kUseVariables) {
    auto v = value_of(name);
    if (!v) continue;
    bool on = false;
    try {
      on = detail::parse_bool_value(*v);
    } catch (const detail::ValueError&) {
      BRAID_FAIL(kInvalidArgument, "environment variable ", name, "='", *v,
                 "': expected true or false");
    }
    if (!on) continue;
    BRAID_CHECK(chosen == nullptr, kInvalidArgument, "environment variables ", chosen_by, " and ",
                name, " are both true; set at most one");
    chosen = &type;
    chosen_by = name;
  }
  if (chosen != nullptr) work.distributed_type = *chosen;
  for (const KeyInfo& k : detail::key_table()) {
    for (const std::string& name : k.env) {
      if (auto v = value_of(name)) {
        detail::apply_key(work, k, RawValue::scalar(*v), "environment variable " + name);
      }
    }
  }
  if (auto v = value_of(kStepsVariable)) {
    std::string source = std::string("environment variable ") + kStepsVariable;
    const KeyInfo* key = work.gradient_accumulation_plugin
                             ? detail::find_key("gradient_accumulation_plugin", "num_steps")
                             : detail::find_key("", "gradient_accumulation_steps");
    detail::apply_key(work, *key, RawValue::scalar(*v), source);
    if (work.deepspeed_plugin && work.deepspeed_plugin->gradient_accumulation_steps) {
      detail::apply_key(work, *detail::find_key("deepspeed_config", "gradient_accumulation_steps"),
                        RawValue::scalar(*v), source);
    }
  }
  config = std::move(work);
}

void apply_environment(AcceleratorConfig& config) {
  apply_environment(config, process_environment());
}

void apply_overrides(AcceleratorConfig& config, const ConfigOverrides& overrides,
                     const ConfigOptions& options) {
  detail::check_extra_keys(options);
  AcceleratorConfig work = config;
  for (const auto& [key, value] : overrides) {
    std::string source = "command line --" + key;
    Target t = resolve_target(key, options, source);
    bool null = detail::lower(detail::trim(value)) == "null";
    if (t.key != nullptr) {
      RawValue v = null ? RawValue{RawValue::Kind::kNull} : RawValue::scalar(value);
      detail::apply_key(work, *t.key, v, source);
    } else if (!t.fp8_entry.empty()) {
      if (null) {
        work.fp8_config.erase(t.fp8_entry);
      } else {
        work.fp8_config[t.fp8_entry] = value;
      }
    } else if (null) {
      work.extra.erase(t.extra);
    } else {
      work.extra[t.extra] = value;
    }
  }
  config = std::move(work);
}

ConfigArguments take_config_arguments(std::vector<std::string>& args,
                                      const ConfigOptions& options) {
  detail::check_extra_keys(options);
  ConfigArguments found;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {  // the end of options: the rest is the program's
      rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (!a.starts_with("--") || a.size() == 2) {
      rest.push_back(a);
      continue;
    }
    std::string body = a.substr(2);
    std::optional<std::string> value;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      value = body.substr(eq + 1);
      body.resize(eq);
    }
    bool is_file = normalize(body) == "config_file";
    std::optional<Target> target;
    if (!is_file) target = find_target(body, options, nullptr);
    if (!is_file && !target) {
      rest.push_back(a);
      continue;
    }
    bool boolean = target && target->key && target->key->expected == "true or false";
    if (!value) {
      bool next_is_value = i + 1 < args.size() && !args[i + 1].starts_with("--");
      if (next_is_value) {
        value = args[++i];
      } else if (boolean) {
        value = "true";  // a flag, as accelerate launch's --use_cpu
      }
    }
    BRAID_CHECK(value.has_value(), kInvalidArgument, "command line option --", body,
                ": expected a value after it");
    if (is_file) {
      found.config_file = *value;
    } else {
      found.overrides.emplace_back(body, *value);
    }
  }
  args = std::move(rest);
  return found;
}

}  // namespace braid::accel
