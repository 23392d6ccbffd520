// Tests of sharded checkpoints: parse_size against transformers' convert_file_size_to_int,
// the split rule, the index JSON transformers writes, save/load round trips, clean-up of an
// earlier save, the folder loader's choice, and a broken index per validation rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/tensor/checkpoint_names.h"
#include "braid/tensor/safetensors.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

template <typename F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected braid::Error";
  return Error(ErrorKind::kInternal, "no error thrown");
}

class ShardedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("braid_sharded_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

  // Five F32 tensors of 40, 40, 120, 8 and 40 bytes, values distinct per tensor.
  static NamedTensors model() {
    NamedTensors out;
    const std::vector<std::pair<std::string, int64_t>> spec = {{"embed.weight", 10},
                                                               {"layer.0.w", 10},
                                                               {"layer.1.w", 30},
                                                               {"layer.1.b", 2},
                                                               {"head.w", 10}};
    double base = 0;
    for (const auto& [name, n] : spec) {
      out.emplace_back(name, Tensor::arange(base, base + double(n), 1.0, DType::kF32));
      base += 100;
    }
    return out;
  }

  static void expect_same(const NamedTensors& a, const NamedTensors& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
    }
  }

  fs::path dir_;
};

// ---- parse_size ----

TEST(ParseSizeTest, MatchesConvertFileSizeToInt) {
  // Expected values computed by hand from transformers.utils.hub.convert_file_size_to_int.
  EXPECT_EQ(parse_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(parse_size("5GiB"), 5ull << 30);
  EXPECT_EQ(parse_size("500MB"), 500'000'000u);
  EXPECT_EQ(parse_size("100KB"), 100'000u);
  EXPECT_EQ(parse_size("1KiB"), 1024u);
  EXPECT_EQ(parse_size("10mib"), 10u << 20);
  EXPECT_EQ(parse_size("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(parse_size("1TiB"), 1ull << 40);
  EXPECT_EQ(parse_size("1000"), 1000u);
  EXPECT_EQ(parse_size(" 5GB "), 5'000'000'000u);
  EXPECT_EQ(parse_size("5 GB"), 5'000'000'000u);
}

TEST(ParseSizeTest, LowercaseBMeansBits) {
  // convert_file_size_to_int: `int_size // 8 if size.endswith("b")`.
  EXPECT_EQ(parse_size("5Gb"), 625'000'000u);
  EXPECT_EQ(parse_size("5gb"), 625'000'000u);
  EXPECT_EQ(parse_size("100kb"), 12'500u);
  EXPECT_EQ(parse_size("5gib"), 5ull << 30);  // binary units have no bit form
}

TEST(ParseSizeTest, DecimalValuesAsAccelerate) {
  EXPECT_EQ(parse_size("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(parse_size("0.5KiB"), 512u);
}

TEST(ParseSizeTest, BadTextIsInvalidArgumentNamingIt) {
  for (const char* bad : {"", "GB", "5XB", "-5GB", "5 G B", "1.2.3GB", "1.5", "5B", "five GB",
                          "99999999999999999999", "20000000TiB"}) {
    SCOPED_TRACE(bad);
    const Error e = catch_error([&] { parse_size(bad); });
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find(std::string(1, '\'').append(bad).append("'")), std::string::npos)
        << e.message();
  }
  const Error e = catch_error([] { parse_size("5XB"); });
  EXPECT_NE(e.message().find("GiB"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("5GB"), std::string::npos) << e.message();
}

// ---- the split rule ----

using Plan = std::vector<std::vector<size_t>>;

TEST(PlanShardsTest, GreedyInOrder) {
  const std::vector<uint64_t> sizes = {3, 3, 3};
  EXPECT_EQ(plan_shards(sizes, 6), (Plan{{0, 1}, {2}}));
  EXPECT_EQ(plan_shards(sizes, 9), (Plan{{0, 1, 2}}));
  EXPECT_EQ(plan_shards(sizes, 5), (Plan{{0}, {1}, {2}}));
}

TEST(PlanShardsTest, ExactFitStaysInTheShard) {
  const std::vector<uint64_t> sizes = {2, 3, 5};
  EXPECT_EQ(plan_shards(sizes, 5), (Plan{{0, 1}, {2}}));
}

TEST(PlanShardsTest, OversizedTensorGoesAlone) {
  const std::vector<uint64_t> sizes = {1, 10, 1, 1};
  EXPECT_EQ(plan_shards(sizes, 5), (Plan{{0}, {1}, {2, 3}}));
  const std::vector<uint64_t> first_big = {10, 1};
  EXPECT_EQ(plan_shards(first_big, 5), (Plan{{0}, {1}}));  // no empty shard before it
}

TEST(PlanShardsTest, EmptyAndZeroSized) {
  EXPECT_EQ(plan_shards({}, 5), Plan{});
  const std::vector<uint64_t> zeros = {0, 0, 4, 0};
  EXPECT_EQ(plan_shards(zeros, 4), (Plan{{0, 1, 2, 3}}));
}

TEST(PlanShardsTest, HugeSizesDoNotOverflow) {
  // A naive `current + size > max` would wrap around and pack all three together.
  const std::vector<uint64_t> sizes = {~uint64_t{0} - 1, ~uint64_t{0} - 1, 1, 1};
  EXPECT_EQ(plan_shards(sizes, ~uint64_t{0}), (Plan{{0}, {1, 2}, {3}}));
}

TEST(ShardFileNameTest, FiveDigits) {
  EXPECT_EQ(shard_file_name(0, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(shard_file_name(11, 12), "model-00012-of-00012.safetensors");
}

// ---- the index JSON ----

TEST(IndexTest, FormatIsWhatTransformersWrites) {
  // json.dumps(index, indent=2, sort_keys=True) + "\n"
  SafetensorsIndex index;
  index.total_size = 24;
  index.weight_map = {{"b", "model-00002-of-00002.safetensors"},
                      {"a", "model-00001-of-00002.safetensors"}};
  EXPECT_EQ(format_safetensors_index(index),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 24\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"a\": \"model-00001-of-00002.safetensors\",\n"
            "    \"b\": \"model-00002-of-00002.safetensors\"\n"
            "  }\n"
            "}\n");
}

TEST(IndexTest, ParseAcceptsWhatHuggingFaceWrites) {
  const SafetensorsIndex i = parse_safetensors_index(
      R"({"metadata": {"total_size": 1.2e3, "total_parameters": 300, "format": "pt"},
          "weight_map": {"x": "model-00001-of-00002.safetensors",
                         "y": "sub/model-00002-of-00002.safetensors"}})",
      "idx.json");
  EXPECT_EQ(i.total_size, 1200u);
  ASSERT_EQ(i.weight_map.size(), 2u);
  EXPECT_EQ(i.weight_map[1].second, "sub/model-00002-of-00002.safetensors");
  EXPECT_FALSE(parse_safetensors_index(R"({"weight_map": {}})", "i").total_size.has_value());
}

TEST(IndexTest, ParseRejectsBrokenIndexes) {
  const std::vector<std::pair<std::string, std::string_view>> cases = {
      {"not json", "not valid JSON"},
      {"[]", "JSON object"},
      {R"({"metadata": {}})", "no \"weight_map\""},
      {R"({"weight_map": []})", "\"weight_map\" is an array"},
      {R"({"weight_map": {"a": 3}})", "tensor 'a'"},
      {R"({"weight_map": {"a": "f", "a": "g"}})", "duplicate key 'a'"},
      {R"({"weight_map": {"a": "../escape.safetensors"}})", "'..'"},
      {R"({"weight_map": {"a": "/abs.safetensors"}})", "absolute"},
      {R"({"weight_map": {"a": ""}})", "relative"},
      {R"({"metadata": [], "weight_map": {}})", "\"metadata\" is an array"},
      {R"({"metadata": {"total_size": "big"}, "weight_map": {}})", "total_size"},
      {R"({"metadata": {"total_size": -4}, "weight_map": {}})", "total_size"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    const Error e = catch_error([&] { parse_safetensors_index(text, "idx.json"); });
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
    EXPECT_NE(e.message().find("idx.json"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
  }
}

// ---- save and load ----

TEST_F(ShardedTest, SplitsWritesIndexAndLoadsBack) {
  const NamedTensors in = model();
  // 40 + 40 = 80 <= 100; +120 is over; 120 alone (oversized); 8 + 40 = 48.
  const ShardedSaveResult r = save_sharded(dir_, in, 100, {{"format", "pt"}});
  EXPECT_EQ(r.total_size, 248u);
  ASSERT_EQ(r.files.size(), 3u);
  EXPECT_EQ(r.index, dir_ / kSafeWeightsIndexName);
  EXPECT_EQ(entries(), (std::vector<std::string>{
                           "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));

  const SafetensorsIndex index = parse_safetensors_index(read_file(r.index), r.index.string());
  EXPECT_EQ(index.total_size, 248u);
  const std::vector<std::pair<std::string, std::string>> expected_map = {
      {"embed.weight", "model-00001-of-00003.safetensors"},
      {"head.w", "model-00003-of-00003.safetensors"},
      {"layer.0.w", "model-00001-of-00003.safetensors"},
      {"layer.1.b", "model-00003-of-00003.safetensors"},
      {"layer.1.w", "model-00002-of-00003.safetensors"}};
  EXPECT_EQ(index.weight_map, expected_map);  // sorted by name, as transformers writes it

  const SafetensorsFile shard = SafetensorsFile::open(dir_ / "model-00003-of-00003.safetensors");
  EXPECT_EQ(shard.names(), (std::vector<std::string>{"layer.1.b", "head.w"}));
  EXPECT_EQ(shard.metadata(), (StringMap{{"format", "pt"}}));

  expect_same(load_safetensors(dir_), in);  // the saved order comes back
  expect_same(load_safetensors(r.index), in);
  expect_same(load_sharded(r.index), in);
}

TEST_F(ShardedTest, OneShardIsAPlainModelFile) {
  const NamedTensors in = model();
  const ShardedSaveResult r = save_sharded(dir_, in, "5GB");
  EXPECT_EQ(r.files, std::vector<fs::path>{dir_ / kSafeWeightsName});
  EXPECT_TRUE(r.index.empty());
  EXPECT_EQ(entries(), std::vector<std::string>{"model.safetensors"});
  expect_same(load_safetensors(dir_), in);
  expect_same(load_safetensors(dir_ / kSafeWeightsName), in);
}

TEST_F(ShardedTest, FolderIsCreated) {
  const fs::path sub = dir_ / "a" / "b";
  save_sharded(sub, model(), 1000);
  EXPECT_TRUE(fs::exists(sub / kSafeWeightsName));
}

TEST_F(ShardedTest, ResavingRemovesFilesOfTheEarlierLayoutOnly) {
  std::ofstream(dir_ / "config.json") << "{}";
  std::ofstream(dir_ / "model-notes.txt") << "keep me";
  save_sharded(dir_, model(), 50);  // 4 shards: [40] [40] [120] [8, 40]
  EXPECT_EQ(entries().size(), 2u + 4u + 1u);
  EXPECT_TRUE(fs::exists(dir_ / "model-00004-of-00004.safetensors"));

  save_sharded(dir_, model(), 100);  // 3 shards: the 4-shard files go
  EXPECT_EQ(entries(), (std::vector<std::string>{
                           "config.json", "model-00001-of-00003.safetensors",
                           "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
                           "model-notes.txt", "model.safetensors.index.json"}));

  save_sharded(dir_, model(), "1MB");  // one file: the index and shards go
  EXPECT_EQ(entries(),
            (std::vector<std::string>{"config.json", "model-notes.txt", "model.safetensors"}));

  save_sharded(dir_, model(), 100);  // sharded again: the single file goes
  EXPECT_FALSE(fs::exists(dir_ / kSafeWeightsName));
  expect_same(load_safetensors(dir_), model());
}

TEST_F(ShardedTest, SaveRejectsBadArguments) {
  EXPECT_EQ(catch_error([&] { save_sharded(dir_, model(), 0); }).kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(catch_error([&] { save_sharded(dir_, model(), "lots"); }).kind(),
            ErrorKind::kInvalidArgument);
  NamedTensors dup = model();
  dup.push_back(dup.front());
  const Error e = catch_error([&] { save_sharded(dir_, dup, 50); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(e.message().find("'embed.weight' appears twice"), std::string::npos) << e.message();
  EXPECT_TRUE(fs::is_empty(dir_));  // checked before anything is written
}

TEST_F(ShardedTest, FolderPrefersTheSingleFile) {
  save_sharded(dir_, model(), 100);
  NamedTensors other = {{"only", Tensor::ones({3})}};
  // A model.safetensors written beside the index by someone else.
  save_safetensors(dir_ / kSafeWeightsName, other);
  expect_same(load_safetensors(dir_), other);
  expect_same(load_safetensors(dir_ / kSafeWeightsIndexName), model());
}

TEST_F(ShardedTest, FolderWithNeitherNamesBoth) {
  const Error e = catch_error([&] { load_safetensors(dir_); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find(dir_.string()), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("model.safetensors"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("model.safetensors.index.json"), std::string::npos) << e.message();
}

TEST_F(ShardedTest, IndexNamingAMissingFileIsCorrupt) {
  const ShardedSaveResult r = save_sharded(dir_, model(), 100);
  fs::remove(dir_ / "model-00002-of-00003.safetensors");
  const Error e = catch_error([&] { load_safetensors(dir_); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find(r.index.string()), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("model-00002-of-00003.safetensors"), std::string::npos);
  EXPECT_NE(e.message().find("'layer.1.w'"), std::string::npos) << e.message();
}

TEST_F(ShardedTest, IndexNamingAMissingTensorIsCorrupt) {
  save_sharded(dir_, model(), 100);
  SafetensorsIndex index =
      parse_safetensors_index(read_file(dir_ / kSafeWeightsIndexName), "index");
  index.weight_map.emplace_back("ghost", "model-00001-of-00003.safetensors");
  write_file_atomic(dir_ / kSafeWeightsIndexName, format_safetensors_index(index));
  const Error e = catch_error([&] { load_safetensors(dir_); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("'ghost'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("model-00001-of-00003.safetensors"), std::string::npos);
  EXPECT_NE(e.message().find(kSafeWeightsIndexName), std::string::npos);
}

TEST_F(ShardedTest, TensorsTheIndexDoesNotNameAreSkipped) {
  save_sharded(dir_, model(), 100);
  SafetensorsIndex index =
      parse_safetensors_index(read_file(dir_ / kSafeWeightsIndexName), "index");
  std::erase_if(index.weight_map, [](const auto& kv) { return kv.first == "head.w"; });
  write_file_atomic(dir_ / kSafeWeightsIndexName, format_safetensors_index(index));
  NamedTensors expected = model();
  expected.pop_back();  // head.w
  expect_same(load_safetensors(dir_), expected);
}

TEST(CheckpointNamesTest, SeedConstants) {
  EXPECT_EQ(kModelName, "pytorch_model");
  EXPECT_EQ(kOptimizerName, "optimizer");
  EXPECT_EQ(kRngStateName, "random_states");
  EXPECT_EQ(kScalerName, "scaler.pt");
  EXPECT_EQ(kSchedulerName, "scheduler");
  EXPECT_EQ(kWeightsName, "pytorch_model.bin");
  EXPECT_EQ(kSafeWeightsName, "model.safetensors");
  EXPECT_EQ(kWeightsIndexName, "pytorch_model.bin.index.json");
  EXPECT_EQ(kSafeWeightsIndexName, "model.safetensors.index.json");
}

}  // namespace
}  // namespace braid
