// infer_auto_device_map, get_balanced_memory, get_max_memory and clean_device_map. The expected
// maps were traced by hand through Accelerate's algorithm (utils/modeling.py) on the small GPT of
// bigmodel_test_util.h (sizes there) and on toy modules; other budgets are checked for the
// invariants every map keeps.
#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <sstream>

#include "bigmodel_test_util.h"
#include "braid/accel/big_model.h"

namespace braid::accel {
namespace {

using testing::expect_error;
using testing::meta_gpt;

const std::vector<std::string> kBlocks{"GPT2Block"};

// Bytes of the model's tensors per device of `map` (shared tensors once).
std::map<std::string, int64_t> placed_bytes(nn::Module& model, const DeviceMap& map) {
  std::map<std::string, int64_t> out;
  for (auto& [name, p] : model.named_parameters()) {
    out[device_for(map, name)] += static_cast<int64_t>(p.data().nbytes());
  }
  for (auto& [name, t] : model.named_buffers())
    out[device_for(map, name)] += static_cast<int64_t>(t.nbytes());
  return out;
}

// What every map must satisfy: every tensor covered, tied names on one device, GPUs and the CPU
// within their limits, no key inside a no-split module.
void expect_valid(nn::Module& model, const DeviceMap& map, const MaxMemory& limits,
                  const std::vector<std::string>& no_split) {
  EXPECT_NO_THROW(check_device_map(model, map));
  for (const auto& group : nn::find_tied_parameters(model)) {
    std::set<std::string> devices;
    for (const auto& n : group) devices.insert(device_for(map, n));
    EXPECT_EQ(devices.size(), 1u) << group[0];
  }
  for (const auto& [device, bytes] : placed_bytes(model, map)) {
    if (device == "disk") continue;
    auto it = limits.find(device);
    if (it != limits.end()) {
      EXPECT_LE(bytes, it->second.bytes()) << device;
    }
  }
  for (auto& [path, m] : model.named_modules()) {
    if (std::find(no_split.begin(), no_split.end(), m->type_name()) == no_split.end()) continue;
    for (const auto& [key, device] : map) {
      EXPECT_FALSE(key.size() > path.size() && key.starts_with(path + "."))
          << key << " splits " << path;
    }
  }
}

TEST(InferAutoDeviceMap, EverythingFitsOnOneGpu) {
  auto gpt = meta_gpt();
  const DeviceMap map = infer_auto_device_map(*gpt, MaxMemory{{"cuda:0", 100000}, {"cpu", 100000}});
  EXPECT_EQ(map, (DeviceMap{{"", "cuda:0"}}));
}

TEST(InferAutoDeviceMap, NoSplitBlocksGoToTheCpu) {
  // GPU 5000: wte (with the tied lm_head), wpe, drop fit beside the 3488-byte block reserve; the
  // blocks then go to the CPU (8000 keeps room for one block while it fills).
  auto gpt = meta_gpt();
  const MaxMemory limits{{"cuda:0", 5000}, {"cpu", 8000}};
  const DeviceMap map = infer_auto_device_map(*gpt, limits, {.no_split_module_classes = kBlocks});
  EXPECT_EQ(map, (DeviceMap{{"transformer.wte", "cuda:0"},
                            {"lm_head", "cuda:0"},
                            {"transformer.wpe", "cuda:0"},
                            {"transformer.drop", "cuda:0"},
                            {"transformer.ln_f", "cpu"},
                            {"transformer.h", "cpu"}}));
  expect_valid(*gpt, map, limits, kBlocks);
}

TEST(InferAutoDeviceMap, SpillsToDisk) {
  // With 5000 bytes of CPU a block does not fit beside the CPU's own reserve: the rest goes to
  // disk, which is added to the devices even when max_memory does not name it.
  auto gpt = meta_gpt();
  const MaxMemory limits{{"cuda:0", 5000}, {"cpu", 5000}};
  const DeviceMap map = infer_auto_device_map(*gpt, limits, {.no_split_module_classes = kBlocks});
  EXPECT_EQ(map, (DeviceMap{{"transformer.wte", "cuda:0"},
                            {"lm_head", "cuda:0"},
                            {"transformer.wpe", "cuda:0"},
                            {"transformer.drop", "cuda:0"},
                            {"transformer.ln_f", "disk"},
                            {"transformer.h", "disk"}}));
  expect_valid(*gpt, map, limits, kBlocks);

  const MaxMemory cpu_only{{"cpu", 5000}, {"disk", 0}};
  EXPECT_EQ(infer_auto_device_map(*gpt, cpu_only, {.no_split_module_classes = kBlocks}),
            (DeviceMap{{"transformer.wte", "cpu"},
                       {"lm_head", "cpu"},
                       {"transformer.wpe", "cpu"},
                       {"transformer.drop", "cpu"},
                       {"transformer.ln_f", "disk"},
                       {"transformer.h", "disk"}}));
}

TEST(InferAutoDeviceMap, TiedModulesMoveTogether) {
  // head's weight is emb's: head (1200 bytes of its own bias) goes with emb to the GPU, while
  // mid, listed between them, no longer fits and goes to the CPU.
  auto owner = testing::tied_toy();
  nn::Module& root = *owner;
  ASSERT_EQ(nn::find_tied_parameters(root),
            (std::vector<std::vector<std::string>>{{"emb.weight", "head.weight"}}));

  const MaxMemory limits{{"cuda:0", 3000}, {"cpu", 100000}};
  const DeviceMap map = infer_auto_device_map(root, limits);
  EXPECT_EQ(map, (DeviceMap{{"emb", "cuda:0"}, {"head", "cuda:0"}, {"mid", "cpu"}}));
  expect_valid(root, map, limits, {});
}

TEST(InferAutoDeviceMap, FallbackAllocation) {
  // big cannot fit on the GPU beside the reserve; with fallback_allocation the GPU takes tiny,
  // a later module that fits, instead of staying empty.
  auto owner = testing::fallback_toy();
  nn::Module& root = *owner;
  const MaxMemory limits{{"cuda:0", 4200}, {"cpu", 100000}};
  EXPECT_EQ(infer_auto_device_map(root, limits), (DeviceMap{{"", "cpu"}}));
  EXPECT_EQ(infer_auto_device_map(root, limits, {.fallback_allocation = true}),
            (DeviceMap{{"tiny", "cuda:0"}, {"big", "cpu"}, {"small", "cpu"}}));
}

TEST(InferAutoDeviceMap, InvariantsOverBudgets) {
  auto gpt = meta_gpt();
  for (const std::vector<std::string>& no_split : {std::vector<std::string>{}, kBlocks}) {
    for (int64_t gpu : {0, 700, 2000, 4000, 6000, 9000}) {
      for (int64_t cpu : {0, 3000, 6000, 20000}) {
        SCOPED_TRACE(std::to_string(gpu) + " / " + std::to_string(cpu));
        const MaxMemory limits{{"cuda:0", gpu}, {"cuda:1", gpu / 2}, {"cpu", cpu}};
        const DeviceMap map =
            infer_auto_device_map(*gpt, limits, {.no_split_module_classes = no_split});
        expect_valid(*gpt, map, limits, no_split);
        const DeviceMap raw = infer_auto_device_map(
            *gpt, limits, {.no_split_module_classes = no_split, .clean_result = false});
        EXPECT_EQ(clean_device_map(raw), map);
        EXPECT_EQ(placed_bytes(*gpt, raw), placed_bytes(*gpt, map));
      }
    }
  }
}

TEST(InferAutoDeviceMap, DtypeShrinksTheModel) {
  auto gpt = meta_gpt();  // 7808 bytes in f32, 3904 in bf16
  const MaxMemory limits{{"cuda:0", 6000}, {"cpu", 100000}};
  EXPECT_NE(infer_auto_device_map(*gpt, limits), (DeviceMap{{"", "cuda:0"}}));
  EXPECT_EQ(infer_auto_device_map(*gpt, limits, {.dtype = DType::kBF16}),
            (DeviceMap{{"", "cuda:0"}}));
}

TEST(InferAutoDeviceMap, VerbosePrintsDecisions) {
  auto gpt = meta_gpt();
  std::ostringstream captured;
  std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
  const DeviceMap map =
      infer_auto_device_map(*gpt, MaxMemory{{"cuda:0", 5000}, {"cpu", 8000}},
                            {.no_split_module_classes = kBlocks, .verbose = true});
  std::cout.rdbuf(old);
  EXPECT_NE(captured.str().find("Treating module transformer."), std::string::npos);
  EXPECT_NE(captured.str().find("Splitting transformer."), std::string::npos);
  EXPECT_NE(captured.str().find("Putting transformer.wte and [lm_head]"), std::string::npos);
  EXPECT_NE(captured.str().find("This module cannot be split, going to the next device."),
            std::string::npos);
  EXPECT_EQ(map.size(), 6u);
}

TEST(BalancedMemory, SpreadsOverGpus) {
  auto gpt = meta_gpt();
  // per GPU 7808 / 2 = 3904, plus 1.25 x max(first GPT2Block 3488, mean leaf 7808 / 15 = 520):
  // 3904 + 4360 = 8264 for every GPU but the last.
  const MaxMemory two{{"cuda:0", 10000}, {"cuda:1", 10000}, {"cpu", 100000}};
  EXPECT_EQ(get_balanced_memory(*gpt, two, {.no_split_module_classes = kBlocks}),
            (MaxMemory{{"cuda:0", 8264}, {"cuda:1", 10000}, {"cpu", 100000}}));
  // Without no-split classes the buffer is 1.25 x 520 = 650.
  EXPECT_EQ(get_balanced_memory(*gpt, two).at("cuda:0").bytes(), 3904 + 650);
  // low_zero: GPU 0 keeps what the others cannot hold: 7808 - 2 x 3000 = 1808.
  const MaxMemory three{{"0", "3000"}, {"1", 3000}, {"cuda:2", 3000}, {"cpu", 100000}};
  const MaxMemory balanced =
      get_balanced_memory(*gpt, three, {.no_split_module_classes = kBlocks, .low_zero = true});
  EXPECT_EQ(balanced,
            (MaxMemory{{"cuda:0", 1808}, {"cuda:1", 3000}, {"cuda:2", 3000}, {"cpu", 100000}}));
  EXPECT_EQ(get_balanced_memory(*gpt, two, {.no_split_module_classes = kBlocks, .low_zero = true})
                .at("cuda:0")
                .bytes(),
            0);
  const DeviceMap map = infer_auto_device_map(*gpt, balanced, {.no_split_module_classes = kBlocks});
  expect_valid(*gpt, map, balanced, kBlocks);
  EXPECT_LE(placed_bytes(*gpt, map)["cuda:0"], 1808);
  // No GPU: the limits come back as they are.
  EXPECT_EQ(get_balanced_memory(*gpt, MaxMemory{{"cpu", 1000}}), (MaxMemory{{"cpu", 1000}}));
}

TEST(MaxMemory, OrderUnitsAndErrors) {
  const auto budget =
      get_max_memory(MaxMemory{{"1", "1KiB"}, {"cuda:0", 2048}, {"disk", 0}, {"cpu", "1MB"}});
  ASSERT_EQ(budget.size(), 4u);
  EXPECT_EQ(budget[0].device, "cuda:0");
  EXPECT_EQ(budget[0].bytes, 2048);
  EXPECT_EQ(budget[1].device, "cuda:1");
  EXPECT_EQ(budget[1].bytes, 1024);
  EXPECT_EQ(budget[2].device, "cpu");
  EXPECT_EQ(budget[2].bytes, 1000000);
  EXPECT_EQ(budget[3].device, "disk");
  // No "cpu": 80% of the available memory is added.
  const auto no_cpu = get_max_memory(MaxMemory{{"cuda:0", 1}});
  ASSERT_EQ(no_cpu.size(), 2u);
  EXPECT_EQ(no_cpu[1].device, "cpu");
  EXPECT_GT(no_cpu[1].bytes, 0);
  // Unset: no GPU here, the available CPU memory.
  const auto unset = get_max_memory();
  ASSERT_EQ(unset.size(), 1u);
  EXPECT_GT(unset[0].bytes, 0);

  expect_error(
      [] {
        get_max_memory(MaxMemory{{"mps", 1}});
      },
      ErrorKind::kInvalidArgument, "'mps' is not recognized");
  expect_error(
      [] {
        get_max_memory(MaxMemory{{"meta", 1}});
      },
      ErrorKind::kInvalidArgument, "not recognized");
  expect_error(
      [] {
        get_max_memory(MaxMemory{{"0", 1}, {"cuda:0", 2}});
      },
      ErrorKind::kInvalidArgument, "given twice");
  expect_error([] { MemoryLimit bad("ten"); }, ErrorKind::kInvalidArgument, "ten");
  expect_error([] { MemoryLimit bad(-1); }, ErrorKind::kInvalidArgument, "non-negative");
}

TEST(DeviceMaps, CleanLookupAndCheck) {
  EXPECT_EQ(clean_device_map({{"a.x", "cpu"}, {"a.y", "cpu"}, {"b", "cuda:0"}}),
            (DeviceMap{{"b", "cuda:0"}, {"a", "cpu"}}));
  EXPECT_EQ(clean_device_map({{"a.x", "cpu"}, {"a.y", "cpu"}}), (DeviceMap{{"", "cpu"}}));
  EXPECT_EQ(clean_device_map({{"a.x.p", "cpu"}, {"a.x.q", "cpu"}, {"a.y", "disk"}}),
            (DeviceMap{{"a.y", "disk"}, {"a.x", "cpu"}}));

  const DeviceMap map{{"", "cpu"}, {"transformer.h.1", "disk"}, {"transformer.h.10", "cuda:0"}};
  EXPECT_EQ(device_for(map, "transformer.h.1.attn.c_attn.weight"), "disk");
  EXPECT_EQ(device_for(map, "transformer.h.10.ln_1.bias"), "cuda:0");
  EXPECT_EQ(device_for(map, "transformer.h.11.ln_1.bias"), "cpu");
  expect_error([] { device_for({{"a", "cpu"}}, "ab.w"); }, ErrorKind::kInvalidArgument, "'ab.w'");

  auto gpt = meta_gpt();
  EXPECT_NO_THROW(check_device_map(*gpt, {{"transformer", "cpu"}, {"lm_head", "cpu"}}));
  expect_error(
      [&] {
        check_device_map(*gpt, {{"transformer", "cpu"}});
      },
      ErrorKind::kInvalidArgument, "lm_head.weight");

  EXPECT_EQ(normalize_device("3"), "cuda:3");
  EXPECT_EQ(normalize_device("cuda"), "cuda:0");
  EXPECT_EQ(normalize_device("hip:1"), "hip:1");
  EXPECT_EQ(normalize_device("disk"), "disk");
  expect_error([] { normalize_device("npu:0"); }, ErrorKind::kInvalidArgument, "npu:0");
}

}  // namespace
}  // namespace braid::accel
