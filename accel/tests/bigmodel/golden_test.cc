// braid's device maps, balanced memory and module sizes against what Hugging Face Accelerate
// computes for the same models (accelerate_golden.json, written by accelerate_golden.py with
// accelerate 1.11 and torch, committed): the hand-traced cases of device_map_test.cc, a grid of
// GPU / CPU limits with and without no-split classes and fallback allocation, cleaned and raw,
// a bf16 dtype, and balanced memory over 2 and 3 GPUs with and without low_zero.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "bigmodel_test_util.h"
#include "braid/accel/big_model.h"
#include "braid/core/file_util.h"

namespace braid::accel {
namespace {

using nlohmann::json;

const json& golden() {
  static const json j = json::parse(read_file(std::filesystem::path(BRAID_SOURCE_DIR) /
                                              "accel/tests/bigmodel/accelerate_golden.json"));
  return j;
}

DeviceMap to_map(const json& j) {
  DeviceMap out;
  for (const auto& e : j) out.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
  return out;
}

// Cleaned maps compare as sets: Accelerate orders merged entries by walking a Python set.
DeviceMap sorted(DeviceMap map) {
  std::sort(map.begin(), map.end());
  return map;
}

MaxMemory to_limits(const json& j) {
  MaxMemory out;
  for (const auto& [k, v] : j.items()) out.emplace(k, v.get<int64_t>());
  return out;
}

const std::vector<std::string> kBlocks{"GPT2Block"};

TEST(AccelerateGolden, HandTracedCases) {
  const json& g = golden();
  auto gpt = testing::meta_gpt();
  EXPECT_EQ(sorted(infer_auto_device_map(*gpt, MaxMemory{{"cuda:0", 100000}, {"cpu", 100000}})),
            sorted(to_map(g["fits"])));
  EXPECT_EQ(sorted(infer_auto_device_map(*gpt, MaxMemory{{"cuda:0", 5000}, {"cpu", 8000}},
                                         {.no_split_module_classes = kBlocks})),
            sorted(to_map(g["blocks_cpu"])));
  EXPECT_EQ(sorted(infer_auto_device_map(*gpt, MaxMemory{{"cuda:0", 5000}, {"cpu", 5000}},
                                         {.no_split_module_classes = kBlocks})),
            sorted(to_map(g["disk"])));
  EXPECT_EQ(sorted(infer_auto_device_map(*gpt, MaxMemory{{"cpu", 5000}, {"disk", 0}},
                                         {.no_split_module_classes = kBlocks})),
            sorted(to_map(g["cpu_disk"])));
  auto tied = testing::tied_toy();
  EXPECT_EQ(sorted(infer_auto_device_map(*tied, MaxMemory{{"cuda:0", 3000}, {"cpu", 100000}})),
            sorted(to_map(g["tied"])));
  auto fb = testing::fallback_toy();
  const MaxMemory fb_limits{{"cuda:0", 4200}, {"cpu", 100000}};
  EXPECT_EQ(sorted(infer_auto_device_map(*fb, fb_limits)), sorted(to_map(g["fallback_off"])));
  EXPECT_EQ(sorted(infer_auto_device_map(*fb, fb_limits, {.fallback_allocation = true})),
            sorted(to_map(g["fallback_on"])));
}

TEST(AccelerateGolden, DeviceMapGrid) {
  auto gpt = testing::meta_gpt();
  const json& grid = golden()["grid"];
  ASSERT_EQ(grid.size(), 96u);
  for (const json& c : grid) {
    const int64_t gpu = c["gpu"], cpu = c["cpu"];
    const bool fallback = c["fallback"];
    const auto no_split = c["no_split"].get<std::vector<std::string>>();
    SCOPED_TRACE(std::to_string(gpu) + " / " + std::to_string(cpu) + (fallback ? " fallback" : "") +
                 (no_split.empty() ? "" : " no-split"));
    const MaxMemory limits{{"cuda:0", gpu}, {"cuda:1", gpu / 2}, {"cpu", cpu}};
    DeviceMapOptions options{.no_split_module_classes = no_split, .fallback_allocation = fallback};
    EXPECT_EQ(sorted(infer_auto_device_map(*gpt, limits, options)), sorted(to_map(c["map"])));
    options.clean_result = false;
    EXPECT_EQ(infer_auto_device_map(*gpt, limits, options), to_map(c["raw"]));
  }
  for (const json& c : golden()["bf16"]) {
    const int64_t gpu = c["gpu"];
    EXPECT_EQ(sorted(infer_auto_device_map(*gpt, MaxMemory{{"cuda:0", gpu}, {"cpu", 3000}},
                                           {.dtype = DType::kBF16})),
              sorted(to_map(c["map"])))
        << gpu;
  }
}

TEST(AccelerateGolden, BalancedMemory) {
  auto gpt = testing::meta_gpt();
  const json& g = golden();
  const MaxMemory two{{"cuda:0", 10000}, {"cuda:1", 10000}, {"cpu", 100000}};
  EXPECT_EQ(get_balanced_memory(*gpt, two, {.no_split_module_classes = kBlocks}),
            to_limits(g["bal_two"]));
  EXPECT_EQ(get_balanced_memory(*gpt, two), to_limits(g["bal_two_plain"]));
  EXPECT_EQ(get_balanced_memory(*gpt, two, {.no_split_module_classes = kBlocks, .low_zero = true}),
            to_limits(g["bal_two_low"]));
  const MaxMemory three{{"cuda:0", 3000}, {"cuda:1", 3000}, {"cuda:2", 3000}, {"cpu", 100000}};
  EXPECT_EQ(
      get_balanced_memory(*gpt, three, {.no_split_module_classes = kBlocks, .low_zero = true}),
      to_limits(g["bal_three_low"]));
  for (const json& c : g["balanced"]) {
    const int gpus = c["gpus"];
    const int64_t per = c["per"];
    MaxMemory limits{{"cpu", 100000}};
    for (int i = 0; i < gpus; ++i) limits.emplace("cuda:" + std::to_string(i), per);
    const BalancedMemoryOptions options{.no_split_module_classes = c["no_split"],
                                        .low_zero = c["low_zero"].get<bool>()};
    EXPECT_EQ(get_balanced_memory(*gpt, limits, options), to_limits(c["result"])) << c.dump();
  }
}

TEST(AccelerateGolden, ModuleSizes) {
  auto gpt = testing::meta_gpt();
  for (const auto& [key, dtype] :
       {std::pair<const char*, std::optional<DType>>{"sizes", {}}, {"sizes_bf16", DType::kBF16}}) {
    const ModuleSizes braid_sizes = compute_module_sizes(*gpt, dtype);
    const json& want = golden()[key];
    for (const auto& [name, bytes] : want.items()) {
      ASSERT_EQ(braid_sizes.count(name), 1u) << name;
      EXPECT_EQ(braid_sizes.at(name), bytes.get<int64_t>()) << name;
    }
    // braid lists every module too; those Accelerate leaves out hold nothing.
    for (const auto& [name, bytes] : braid_sizes) {
      if (!want.contains(name)) {
        EXPECT_EQ(bytes, 0) << name;
      }
    }
  }
}

}  // namespace
}  // namespace braid::accel
