// docs/config.md's example: an AcceleratorConfig from code defaults, a file and the command
// line. ctest runs it under braid launch with
//   --config_file train.yaml --max_steps 7 --lr 0.1 data.bin
// after writing train.yaml itself; exits 1 unless each source won where it should.
#include <cstdio>
#include <fstream>

#include "braid/accel/accelerator.h"

int main(int argc, char** argv) {
  std::ofstream("train.yaml") << "mixed_precision: fp16\nmax_steps: 50\n";
  // [snippet]
  std::vector<std::string> args(argv + 1, argv + argc);
  braid::accel::ConfigOptions opts{.extra_keys = {"max_steps"}};  // the program's own keys
  braid::accel::AcceleratorConfig defaults;                       // code defaults
  defaults.mixed_precision = braid::amp::PrecisionType::kBf16;
  braid::accel::AcceleratorConfig cfg = braid::accel::resolve_config(
      defaults, {.command_line = braid::accel::take_config_arguments(args, opts), .options = opts});
  cfg.seed = 1234;  // explicit: wins over all
  int64_t max_steps = braid::accel::extra_int(cfg, "max_steps", 1000);
  braid::accel::Accelerator acc(cfg);  // docs/accelerator.md
  // [end snippet]

  // The file beat the code default, the command line the file, the code everything.
  const bool ok = cfg.mixed_precision == braid::amp::PrecisionType::kFp16 && max_steps == 7 &&
                  cfg.seed == 1234u && args == std::vector<std::string>{"--lr", "0.1", "data.bin"};
  if (!ok) std::fprintf(stderr, "FAIL: the configuration did not resolve as documented\n");
  return ok ? 0 : 1;
}
