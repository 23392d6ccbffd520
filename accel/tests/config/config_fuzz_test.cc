// The YAML reader against mutated input (design.md: a fuzzer for every parser): the real
// Accelerate files with bytes flipped, inserted and deleted and lines repeated, 4000 times from
// a fixed seed. Every mutant either loads, and then writes back the same text after a round
// trip, or fails with a braid::Error of kind invalid argument, corrupt data or I/O; no other
// exception escapes and nothing crashes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "braid/accel/config.h"
#include "braid/core/file_util.h"
#include "braid/core/logging.h"
#include "config_test_util.h"

namespace braid::accel {
namespace {

std::string mutate(std::string text, std::mt19937_64& rng) {
  const std::string alphabet = ":- \n'\"{}[],#&*!|>%@`0123456789abcdefFULLSHARDtruenull~.";
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !text.empty(); ++i) {
    size_t at = rng() % text.size();
    switch (rng() % 5) {
      case 0:  // replace a byte
        text[at] = alphabet[rng() % alphabet.size()];
        break;
      case 1:  // insert a byte
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at),
                    alphabet[rng() % alphabet.size()]);
        break;
      case 2:  // delete a run
        text.erase(at, 1 + rng() % 8);
        break;
      case 3: {  // repeat a line
        size_t b = text.rfind('\n', at);
        b = b == std::string::npos ? 0 : b + 1;
        size_t e = text.find('\n', at);
        e = e == std::string::npos ? text.size() : e + 1;
        text.insert(b, text.substr(b, e - b));
        break;
      }
      default:  // a raw byte
        text[at] = static_cast<char>(rng() % 256);
        break;
    }
  }
  return text;
}

TEST(ConfigFuzz, MutatedAccelerateFilesLoadOrFailCleanly) {
  std::vector<std::string> seeds;
  for (const char* name :
       {"accelerate_fsdp.yaml", "accelerate_fsdp2.yaml", "accelerate_deepspeed.yaml",
        "accelerate_0_12_fsdp.yaml", "accelerate_fp8.yaml", "accelerate_multi_cpu.yaml",
        "accelerate_megatron.yaml"}) {
    seeds.push_back(read_file(testing::data_dir() / name));
  }
  LogSink previous = set_log_sink([](std::string_view) {});  // deprecation / ignored-key noise
  std::mt19937_64 rng(20240601);
  int loaded = 0, refused = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string text = mutate(seeds[i % seeds.size()], rng);
    AcceleratorConfig c;
    try {
      apply_config_yaml(c, text, "mutant.yaml");
    } catch (const Error& e) {
      EXPECT_TRUE(e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kCorruptData ||
                  e.kind() == ErrorKind::kIo)
          << to_string(e.kind()) << ": " << e.message() << "\n"
          << text;
      ++refused;
      continue;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-braid exception " << e.what() << " for\n" << text;
      continue;
    }
    ++loaded;
    std::string y = to_yaml(c);
    AcceleratorConfig back;
    EXPECT_NO_THROW(apply_config_yaml(back, y, "written.yaml")) << y;
    EXPECT_EQ(to_yaml(back), y) << "mutant:\n" << text;
  }
  set_log_sink(previous);
  EXPECT_GT(loaded, 50);  // both paths are exercised (89 and 3911 with this seed)
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace braid::accel
