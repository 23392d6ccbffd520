// `braid config`: writes the configuration file the Accelerator reads (docs/config.md), as
// `accelerate config` does.
//   braid config                 asks questions on stdin, writes the file
//   braid config default         write_basic_config: a file for this machine, never overwriting
//   braid config show            prints the resolved configuration (file < environment <
//                                `--key value` overrides) as YAML
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "braid/accel/config.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "commands.h"
#include "config_questions.h"

namespace braid::cli {
namespace {

const char* kFileHelp =
    "The configuration file (default: $BRAID_CONFIG_FILE, else "
    "~/.cache/braid/default_config.yaml)";

std::filesystem::path file_or_default(const std::string& given) {
  if (!given.empty()) return given;
  std::optional<std::filesystem::path> p = accel::default_config_file();
  BRAID_CHECK(p.has_value(), kInvalidArgument,
              "braid config: no --config_file, and neither BRAID_CONFIG_FILE nor HOME is set");
  return *p;
}

void run_questions(const std::string& file) {
  std::filesystem::path path = file_or_default(file);
  accel::AcceleratorConfig c = ask_config_questions(std::cin, std::cout);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  write_file_atomic(path, accel::to_yaml(c));
  std::cout << "braid configuration saved at " << path.string() << '\n';
}

void run_default(const std::string& file, const std::string& mixed_precision) {
  std::filesystem::path path = file_or_default(file);
  if (auto written = accel::write_basic_config(mixed_precision, path)) {
    std::cout << "braid configuration saved at " << written->string() << '\n';
  } else {
    std::cout << "Configuration already exists at " << path.string()
              << ", will not override. Run `braid config` or pass a different --config_file.\n";
  }
}

void run_show(const std::string& file, std::vector<std::string> args) {
  accel::ConfigSources sources;
  sources.command_line = accel::take_config_arguments(args);
  if (!file.empty()) sources.config_file = file;
  // The file may hold its program's own keys (ConfigOptions::extra_keys): take every unknown
  // top-level key as one, say which, and accept them as overrides too.
  std::optional<std::filesystem::path> found = accel::find_config_file(sources);
  if (found) {
    accel::AcceleratorConfig scratch;
    accel::apply_config_file(scratch, *found, {.any_extra_key = true});
    std::string own;
    for (const auto& [key, value] : scratch.extra) {
      sources.options.extra_keys.push_back(key);
      own += (own.empty() ? "" : ", ") + key;
    }
    if (!own.empty()) {
      std::cerr << "braid config: keys of the program, not of the configuration: " << own << '\n';
    }
    accel::ConfigArguments more = accel::take_config_arguments(args, sources.options);
    sources.command_line.overrides.insert(sources.command_line.overrides.end(),
                                          more.overrides.begin(), more.overrides.end());
  }
  // What is left is not a configuration key: let apply_overrides name the closest one.
  for (const std::string& a : args) {
    if (a.starts_with("--")) {
      accel::AcceleratorConfig scratch;
      accel::apply_overrides(scratch, {{a.substr(2, a.find('=') - 2), ""}}, sources.options);
    }
    BRAID_FAIL(kInvalidArgument, "braid config show: unexpected argument '", a,
               "'; expected --config_file PATH and --key value overrides");
  }
  accel::AcceleratorConfig c = accel::resolve_config({}, sources);
  for (const std::string& w : accel::sharding_plan(c).warnings) {
    std::cerr << "braid config: warning: " << w << '\n';
  }
  std::cout << "# resolved from " << (found ? found->string() : std::string("no file"))
            << ", the environment and the command line\n"
            << accel::to_yaml(c);
}

}  // namespace

void add_config_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "config", "Write or show the configuration file (questions on stdin, as accelerate config)");
  cmd->add_option("--config_file,--config-file", *file, kFileHelp);
  cmd->footer(
      "Without a subcommand, asks the questions of `accelerate config` on stdin (an empty "
      "answer takes the default in brackets) and writes the file. See docs/config.md.");

  auto precision = std::make_shared<std::string>("no");
  CLI::App* def = cmd->add_subcommand(
      "default", "Write a basic configuration for this machine (never overwrites a file)");
  def->add_option("--config_file,--config-file", *file, kFileHelp);
  def->add_option("--mixed_precision,--mixed-precision", *precision, "Mixed precision")
      ->check(CLI::IsMember({"no", "fp16", "bf16", "fp8"}))
      ->capture_default_str();
  def->callback([file, precision] { run_default(*file, *precision); });

  CLI::App* show = cmd->add_subcommand(
      "show", "Print the resolved configuration: file < environment < --key value overrides");
  show->add_option("--config_file,--config-file", *file, kFileHelp);
  show->allow_extras();
  show->footer(
      "Any configuration key may follow as --key value (dotted for nested keys: "
      "--fsdp_config.fsdp_sharding_strategy SHARD_GRAD_OP, or the nested name alone when "
      "unique: --fsdp_sharding_strategy SHARD_GRAD_OP).");
  show->callback([file, show] { run_show(*file, show->remaining()); });

  cmd->callback([cmd, def, show, file] {
    if (cmd->got_subcommand(def) || cmd->got_subcommand(show)) return;
    run_questions(*file);
  });
}

}  // namespace braid::cli
