// libFuzzer target: the YAML configuration (apply_config_yaml, accel/src/config_yaml.cc, with
// the key table behind it). The input is a default_config.yaml. It loads, and then to_yaml
// writes it so that it loads back to the same text; or it fails with kInvalidArgument (a key or
// value), kCorruptData (not YAML, not a mapping) or kIo (a deepspeed_config_file that is not
// there). Relative paths resolve in a folder holding ds_config.json, a valid DeepSpeed file,
// so a file naming it reaches the JSON reader as well.
#include <cstddef>
#include <cstdint>
#include <string>

#include "braid/accel/config.h"
#include "braid/core/logging.h"
#include "fuzz_util.h"

namespace {

const std::filesystem::path& base_dir() {
  static const std::filesystem::path dir = [] {
    auto d = braid::fuzz::temp_dir() / "config";
    std::filesystem::create_directories(d);
    const std::string json =
        R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},)"
        R"( "gradient_accumulation_steps": 2, "bf16": {"enabled": true}})";
    braid::fuzz::write_file(d / "ds_config.json",
                            {reinterpret_cast<const uint8_t*>(json.data()), json.size()});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  using namespace braid::accel;
  static const LogSink quiet = set_log_sink([](std::string_view) {});  // ignored-key warnings
  const std::initializer_list<ErrorKind> refusals = {ErrorKind::kInvalidArgument,
                                                     ErrorKind::kCorruptData, ErrorKind::kIo};
  AcceleratorConfig config;
  if (!fuzz::parses(refusals, [&] {
        apply_config_yaml(config, fuzz::as_text(data, size), "input.yaml", {}, base_dir());
      })) {
    return 0;
  }
  const std::string written = to_yaml(config);
  AcceleratorConfig back;
  fuzz::check(fuzz::parses({}, [&] { apply_config_yaml(back, written, "written.yaml"); }),
              "what to_yaml writes loads");
  fuzz::check(to_yaml(back) == written, "the configuration survives a round trip");
  return 0;
}
