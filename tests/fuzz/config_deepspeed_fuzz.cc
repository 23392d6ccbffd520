// libFuzzer target: a DeepSpeed JSON configuration (deepspeed_config_file;
// accel/src/config_deepspeed.cc). The input is the file's text. It is read into a DeepSpeed
// plugin whose fields are in their ranges, or refused with kCorruptData (not JSON, not an
// object) or kInvalidArgument naming the field.
#include <cstddef>
#include <cstdint>

#include "config_keys.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace braid;
  using namespace braid::accel;
  AcceleratorConfig config;
  if (!fuzz::parses({ErrorKind::kCorruptData, ErrorKind::kInvalidArgument}, [&] {
        accel::detail::apply_deepspeed_json_text(config, fuzz::as_text(data, size),
                                                 "ds_config.json");
      })) {
    return 0;
  }
  fuzz::check(config.deepspeed_plugin.has_value(), "a DeepSpeed file sets the plugin");
  const DeepSpeedPlugin& ds = *config.deepspeed_plugin;
  fuzz::check(ds.zero_stage >= 0 && ds.zero_stage <= 3, "zero_stage is 0..3");
  fuzz::check(ds.mics_shard_size >= 0, "mics_shard_size is 0 (off) or a group size");
  fuzz::check(!ds.gradient_clipping || *ds.gradient_clipping >= 0, "clipping is not negative");
  return 0;
}
