// Sharded checkpoints in one process (docs/sharding.md, "Checkpoints"): a group of one rank,
// and groups of 2-4 ranks as threads on an in-memory store (comm/tests/comm_test_util.h).
// Round trips, reads across piece boundaries with dtype conversion, the coverage check with
// the same error on every rank, the atomic publish (a failure at each stage keeps the
// previous checkpoint; leftovers of an interrupted save are explained and cleaned up),
// corrupt files and merge_weights. Real processes and SIGKILL: checkpoint_worker.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <random>

#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/kernels/table.h"
#include "braid/shard/checkpoint.h"
#include "checkpoint_internal.h"
#include "checkpoint_test_util.h"
#include "comm_test_util.h"

namespace braid::shard {
namespace {

namespace fs = std::filesystem;
using testing::cut;
using testing::make_model;
using testing::same_bytes;

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("braid_ckpt_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::shared_ptr<ProcessGroup> solo() {
  return braid::testing::make_group(0, 1, std::make_shared<InMemoryStore>());
}

template <typename Fn>
void expect_error(Fn&& fn, ErrorKind kind, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error of kind " << to_string(kind);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    for (const auto& p : parts) {
      EXPECT_NE(e.message().find(p), std::string::npos) << "'" << p << "' not in: " << e.message();
    }
  }
}

void expect_model(const fs::path& folder, int seed) {
  const ShardedCheckpoint ckpt(folder);
  const NamedTensors model = make_model(seed);
  ASSERT_EQ(ckpt.names().size(), model.size());
  for (const auto& [name, t] : model) {
    ASSERT_TRUE(ckpt.contains(name)) << name;
    EXPECT_EQ(ckpt.shape(name), t.shape()) << name;
    EXPECT_EQ(ckpt.dtype(name), t.dtype()) << name;
    EXPECT_TRUE(same_bytes(ckpt.read(name), t)) << name;
  }
}

// Saves `seed`'s model from `world` thread ranks; returns each rank's error ("" when none).
std::vector<std::string> save_threads(const fs::path& folder, int world, int seed,
                                      const std::function<std::vector<Piece>(int)>& pieces = {}) {
  std::vector<std::string> errors(world);
  const NamedTensors model = make_model(seed);
  auto r = braid::testing::run_threads(world, [&](int rank, int size, auto store) {
    auto pg = braid::testing::make_group(rank, size, store);
    try {
      save_sharded_checkpoint(folder, pieces ? pieces(rank) : cut(model, rank, size), *pg,
                              {{"seed", std::to_string(seed)}});
    } catch (const Error& e) {
      errors[rank] = e.message();
    }
  });
  EXPECT_TRUE(r.ok()) << r.summary();
  return errors;
}

void expect_same_error(const std::vector<std::string>& errors, const std::string& part) {
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(errors[r], errors[0]) << "rank " << r;
    EXPECT_NE(errors[r].find(part), std::string::npos) << "'" << part << "' not in: " << errors[r];
  }
}

// ---------------------------------------------------------------- CRC32C (core/crc32c.h)

// An empty tensor whose other dimensions multiply past int64 (strides that overflow; the
// object format's fuzz finding, docs/fuzzing.md) is refused by the index parser.
TEST(CheckpointIndexParse, EmptyShapeWithOverflowingStridesIsCorrupt) {
  detail::CheckpointIndex index;
  const int64_t big = int64_t{1} << 40;
  index.tensors["e"] = {DType::kF32, {0, big, big, big}, 0, {}};
  try {
    detail::parse_checkpoint_index(detail::format_checkpoint_index(index), "index.json");
    ADD_FAILURE() << "parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorruptData) << e.message();
    EXPECT_NE(e.message().find("tensors.\"e\".shape"), std::string::npos) << e.message();
  }
}

TEST(Crc32cHex, IndexForm) {
  EXPECT_EQ(detail::crc32c_hex(0xE3069283u), "e3069283");
  EXPECT_EQ(detail::crc32c_hex(0x1u), "00000001");
}

// ---------------------------------------------------------------- round trips

TEST(ShardedCheckpoint, OneRankRoundTrip) {
  TempDir dir;
  const fs::path folder = dir.path() / "ckpt";
  auto pg = solo();
  save_sharded_checkpoint(folder, cut(make_model(1), 0, 1), *pg, {{"step", "100"}});
  expect_model(folder, 1);
  const ShardedCheckpoint ckpt(folder);
  EXPECT_EQ(ckpt.world_size(), 1);
  EXPECT_EQ(ckpt.metadata(), (StringMap{{"step", "100"}}));
  auto names = ckpt.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_TRUE(fs::exists(folder / "index.json"));
  EXPECT_TRUE(fs::exists(folder / "rank-00000-of-00001.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.partial"));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.old"));
  // A trailing separator names the same folder.
  EXPECT_EQ(ShardedCheckpoint(folder.string() + "/").names(), names);
  const NamedTensors all = ckpt.read_all();
  ASSERT_EQ(all.size(), names.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].first, names[i]);
}

TEST(ShardedCheckpoint, FourRanksSaveOneProcessReads) {
  TempDir dir;
  const auto errors = save_threads(dir.path() / "ckpt", 4, 2);
  for (const auto& e : errors) EXPECT_EQ(e, "");
  expect_model(dir.path() / "ckpt", 2);
  const ShardedCheckpoint ckpt(dir.path() / "ckpt");
  EXPECT_EQ(ckpt.world_size(), 4);
  EXPECT_EQ(ckpt.metadata().at("seed"), "2");
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(fs::exists(dir.path() / "ckpt" / detail::rank_file_name(r, 4)));
  }
}

TEST(ShardedCheckpoint, RanksWithoutPiecesWriteEmptyFiles) {
  TempDir dir;
  const NamedTensors model = make_model(3);
  // Rank 1 holds everything, ranks 0 and 2 nothing.
  const auto errors = save_threads(dir.path() / "ckpt", 3, 3, [&](int rank) {
    return rank == 1 ? cut(model, 0, 1) : std::vector<Piece>{};
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  expect_model(dir.path() / "ckpt", 3);
}

// Every range [lo, hi) of a tensor cut into uneven pieces, into four dtypes, against the
// reference cast of the original elements.
TEST(ShardedCheckpoint, ReadRangeAcrossPiecesConvertsDtype) {
  TempDir dir;
  std::vector<double> values(37);
  for (size_t i = 0; i < values.size(); ++i) values[i] = (double(i) - 18) * 1.37;
  const Tensor w = Tensor::from_vector(values, {37}, DType::kF32);
  std::vector<Piece> pieces;
  const std::vector<int64_t> cuts = {0, 1, 9, 10, 23, 37};
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    pieces.push_back({"w", {37}, cuts[i], w.slice(0, cuts[i], cuts[i + 1])});
  }
  std::reverse(pieces.begin(), pieces.end());  // order within a rank does not matter
  auto pg = solo();
  save_sharded_checkpoint(dir.path() / "ckpt", pieces, *pg);
  const ShardedCheckpoint ckpt(dir.path() / "ckpt");
  for (DType to : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32}) {
    const size_t es = dtype_size(to);
    for (int64_t lo = 0; lo <= 37; ++lo) {
      for (int64_t hi = lo; hi <= 37; ++hi) {
        std::vector<std::byte> got((hi - lo) * es + 1), want((hi - lo) * es + 1);
        ckpt.read_range("w", lo, hi - lo, got.data(), to);
        kernels::kernels_for(kCPU).cast(Stream{kCPU}, w.data<float>() + lo, DType::kF32,
                                        want.data(), to, hi - lo, kernels::CastMode::kDefault);
        ASSERT_EQ(got, want) << dtype_name(to) << " [" << lo << ", " << hi << ")";
      }
    }
  }
}

TEST(ShardedCheckpoint, ReadErrorsNameTheTensorAndRange) {
  TempDir dir;
  auto pg = solo();
  save_sharded_checkpoint(dir.path() / "ckpt", cut(make_model(1), 0, 1), *pg);
  const ShardedCheckpoint ckpt(dir.path() / "ckpt");
  float buf[200];
  expect_error([&] { ckpt.read_range("nope", 0, 1, buf, DType::kF32); }, ErrorKind::kOutOfRange,
               {"'nope'"});
  expect_error([&] { (void)ckpt.shape("nope"); }, ErrorKind::kOutOfRange, {"'nope'"});
  expect_error([&] { ckpt.read_range("embed.weight", 90, 2, buf, DType::kF32); },
               ErrorKind::kOutOfRange, {"'embed.weight'", "offset 90", "count 2", "91 elements"});
  expect_error([&] { ckpt.read_range("embed.weight", -1, 2, buf, DType::kF32); },
               ErrorKind::kOutOfRange, {"offset -1"});
  expect_error([&] { ckpt.read_range("embed.weight", 0, 2, nullptr, DType::kF32); },
               ErrorKind::kInvalidArgument, {"dst is null"});
  ckpt.read_range("embed.weight", 91, 0, nullptr, DType::kF32);  // empty: fine
}

// ---------------------------------------------------------------- coverage check

TEST(ShardedCheckpointCoverage, EveryRankGetsTheSameErrorForAGap) {
  TempDir dir;
  const NamedTensors model = make_model(1);
  const auto errors = save_threads(dir.path() / "ckpt", 3, 1, [&](int rank) {
    auto p = cut(model, rank, 3);
    if (rank == 1) p.erase(p.begin());  // rank 1's first run is lost
    return p;
  });
  expect_same_error(errors, "are in no rank's piece");
  EXPECT_NE(errors[0].find("tensor '"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt"));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.partial"));
}

TEST(ShardedCheckpointCoverage, Overlap) {
  TempDir dir;
  const Tensor w = Tensor::from_vector(std::vector<double>(10, 1.0), {10}, DType::kF32);
  const auto errors = save_threads(dir.path() / "ckpt", 2, 1, [&](int rank) {
    std::vector<Piece> pieces;  // not a ?: of two initializer lists: GCC 12 -Wmaybe-uninitialized
    if (rank == 0) {
      pieces.push_back({"w", {2, 5}, 0, w.slice(0, 0, 6)});
    } else {
      pieces.push_back({"w", {2, 5}, 4, w.slice(0, 4, 10)});
    }
    return pieces;
  });
  expect_same_error(errors,
                    "tensor 'w': elements [4, 6) are in two pieces, rank 0's [0, 6) and "
                    "rank 1's [4, 10)");
}

TEST(ShardedCheckpointCoverage, ShapeAndDtypeMustAgree) {
  TempDir dir;
  const Tensor w = Tensor::from_vector(std::vector<double>(10, 1.0), {10}, DType::kF32);
  auto errors = save_threads(dir.path() / "ckpt", 2, 1, [&](int rank) {
    return std::vector<Piece>{
        {"w", rank == 0 ? Shape{2, 5} : Shape{5, 2}, rank * 5, w.slice(0, rank * 5, rank * 5 + 5)}};
  });
  expect_same_error(errors, "tensor 'w': rank 1 gives shape [5, 2] but rank 0 gives [2, 5]");
  errors = save_threads(dir.path() / "ckpt", 2, 1, [&](int rank) {
    Tensor part = w.slice(0, rank * 5, rank * 5 + 5);
    if (rank == 1) part = part.to(DType::kBF16);
    return std::vector<Piece>{{"w", {10}, rank * 5, part}};
  });
  expect_same_error(errors, "tensor 'w': rank 1 gives dtype bf16 but rank 0 gives f32");
}

TEST(ShardedCheckpointCoverage, BadLocalPiecesAreReportedByRank) {
  TempDir dir;
  const Tensor w = Tensor::from_vector(std::vector<double>(10, 1.0), {10}, DType::kF32);
  auto errors = save_threads(dir.path() / "ckpt", 2, 1, [&](int rank) {
    if (rank == 0) return std::vector<Piece>{{"w", {10}, 0, w.slice(0, 0, 5)}};
    return std::vector<Piece>{{"w", {10}, 5, w.slice(0, 5, 10).reshape({5, 1})}};
  });
  expect_same_error(errors, "rank 1: piece 0 ('w'): data must be a contiguous 1-D tensor");
  errors = save_threads(dir.path() / "ckpt", 2, 1, [&](int rank) {
    return std::vector<Piece>{{"w", {10}, rank * 6, w.slice(0, 0, 5)}};
  });
  expect_same_error(errors, "rank 1: piece 0 ('w') covers elements [6, 11) but the tensor");
  errors = save_threads(dir.path() / "ckpt", 2, 1, [&](int rank) {
    return std::vector<Piece>{{"w", {10}, 0, Tensor()}};
  });
  expect_same_error(errors, "rank 0: piece 0 ('w') has no data");
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt"));
}

// ---------------------------------------------------------------- atomic publish

TEST(ShardedCheckpointPublish, SecondSaveReplacesTheFirst) {
  TempDir dir;
  const fs::path folder = dir.path() / "ckpt";
  save_threads(folder, 2, 1);
  expect_model(folder, 1);
  save_threads(folder, 3, 2);  // another world size: the folder's files change
  expect_model(folder, 2);
  EXPECT_EQ(ShardedCheckpoint(folder).world_size(), 3);
  EXPECT_FALSE(fs::exists(folder / detail::rank_file_name(0, 2)));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.partial"));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.old"));
}

// A failure at each stage of the second save (an exception from the hook stands for a crash
// that unwinds, or an I/O error) leaves the first checkpoint loadable; with the one-step
// exchange and with the two-rename fallback (old-moved-aside).
TEST(ShardedCheckpointPublish, AFailureAtAnyStageKeepsThePreviousCheckpoint) {
  for (const char* stage : {"file-written", "index-written", "exchanged", "old-moved-aside"}) {
    SCOPED_TRACE(stage);
    const bool two_renames = std::string(stage) == "old-moved-aside";
    detail::set_rename_exchange(!two_renames);
    TempDir dir;
    const fs::path folder = dir.path() / "ckpt";
    save_threads(folder, 2, 1);
    const int victim = std::string(stage) == "file-written" ? 1 : 0;
    detail::set_save_hook([&](std::string_view s, int rank) {
      if (s == stage && rank == victim) BRAID_FAIL(kIo, "injected failure at ", s);
    });
    const auto errors = save_threads(folder, 2, 2);
    detail::set_save_hook({});
    detail::set_rename_exchange(true);
    expect_same_error(errors, "injected failure at " + std::string(stage));
    expect_model(folder, 1);
    EXPECT_FALSE(fs::exists(dir.path() / "ckpt.old"));
    EXPECT_FALSE(fs::exists(dir.path() / "ckpt.partial"));
  }
}

// Regression (kill soak, docs/faults.md): the publish replaced the folder by two renames, so
// a crash between them left no loadable <folder> (only <folder>.old). Now, at every stage of
// a save that replaces a checkpoint, <folder> loads and holds the previous or the new one.
TEST(ShardedCheckpointPublish, TheFolderLoadsAtEveryStageOfAReplacement) {
  TempDir dir;
  const fs::path folder = dir.path() / "ckpt";
  save_threads(folder, 2, 1);
  std::vector<std::string> seen;  // "<stage>: seed <s>" or "<stage>: <error>"
  detail::set_save_hook([&](std::string_view stage, int rank) {
    if (rank != 0) return;
    try {
      seen.push_back(std::string(stage) + ": seed " +
                     ShardedCheckpoint(folder).metadata().at("seed"));
    } catch (const Error& e) {
      seen.push_back(std::string(stage) + ": " + e.message());
    }
  });
  const auto errors = save_threads(folder, 2, 2);
  detail::set_save_hook({});
  expect_same_error(errors, "");
  EXPECT_EQ(seen, (std::vector<std::string>{"checked: seed 1", "file-written: seed 1",
                                            "index-written: seed 1", "exchanged: seed 2",
                                            "published: seed 2"}));
  expect_model(folder, 2);
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.partial"));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.old"));
}

TEST(ShardedCheckpointPublish, LeftoversAreExplainedAndCleanedUp) {
  TempDir dir;
  const fs::path folder = dir.path() / "ckpt";
  save_threads(folder, 2, 1);
  // Stopped between the two renames: the previous checkpoint is in ckpt.old.
  fs::rename(folder, dir.path() / "ckpt.old");
  fs::create_directory(dir.path() / "ckpt.partial");
  expect_error([&] { ShardedCheckpoint c(folder); }, ErrorKind::kIo,
               {"ckpt.old", "previous complete checkpoint", "Rename it back"});
  // The next save restores it first, then replaces it.
  save_threads(folder, 2, 2);
  expect_model(folder, 2);
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.old"));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.partial"));

  // A first save interrupted: only ckpt.partial.
  const fs::path other = dir.path() / "other";
  fs::create_directories(dir.path() / "other.partial");
  std::ofstream(dir.path() / "other.partial" / "rank-00000-of-00002.safetensors") << "junk";
  expect_error([&] { ShardedCheckpoint c(other); }, ErrorKind::kIo,
               {"other.partial", "interrupted first save"});
  save_threads(other, 2, 3);
  expect_model(other, 3);
  EXPECT_FALSE(fs::exists(dir.path() / "other.partial"));

  // A publish stopped after its swap: ckpt and ckpt.old both exist; the next save cleans up.
  fs::create_directories(dir.path() / "ckpt.old");
  save_threads(folder, 1, 4);
  expect_model(folder, 4);
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt.old"));
}

TEST(ShardedCheckpointPublish, RefusesToReplaceAFolderThatIsNotACheckpoint) {
  TempDir dir;
  const fs::path folder = dir.path() / "notes";
  fs::create_directories(folder);
  std::ofstream(folder / "keep.txt") << "precious";
  auto pg = solo();
  expect_error([&] { save_sharded_checkpoint(folder, cut(make_model(1), 0, 1), *pg); },
               ErrorKind::kInvalidArgument, {"notes", "not a sharded checkpoint"});
  EXPECT_EQ(read_file(folder / "keep.txt"), "precious");
  // An empty folder is fine.
  save_sharded_checkpoint(dir.path() / "empty", cut(make_model(1), 0, 1), *pg);
  fs::create_directories(dir.path() / "empty2");
  save_sharded_checkpoint(dir.path() / "empty2", cut(make_model(1), 0, 1), *pg);
  expect_model(dir.path() / "empty2", 1);
}

// ---------------------------------------------------------------- damaged folders

class DamagedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = dir_.path() / "ckpt";
    save_threads(folder_, 2, 1);
    file_ = folder_ / detail::rank_file_name(1, 2);
  }
  // The first read that touches rank 1's file.
  void read_rank1() const {
    const ShardedCheckpoint ckpt(folder_);
    (void)ckpt.read("lm_head.weight");  // the last tensor: in rank 1's file
  }
  void rewrite_index(const std::string& from, const std::string& to) const {
    std::string text = read_file(folder_ / "index.json");
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write_file_atomic(folder_ / "index.json", text);
  }

  TempDir dir_;
  fs::path folder_;
  fs::path file_;
};

TEST_F(DamagedCheckpoint, FlippedByteFailsTheChecksum) {
  std::string bytes = read_file(file_);
  bytes[bytes.size() - 3] ^= 0x10;
  write_file_atomic(file_, bytes);
  expect_error([&] { read_rank1(); }, ErrorKind::kCorruptData,
               {"rank-00001-of-00002.safetensors", "CRC32C", "the index says"});
  // Rank 0's file is still readable.
  EXPECT_NO_THROW(ShardedCheckpoint(folder_).read("embed.weight"));
}

TEST_F(DamagedCheckpoint, TruncatedFile) {
  const std::string bytes = read_file(file_);
  write_file_atomic(file_, bytes.substr(0, bytes.size() / 2));
  expect_error([&] { read_rank1(); }, ErrorKind::kCorruptData,
               {"rank-00001-of-00002.safetensors", std::to_string(bytes.size() / 2) + " bytes",
                "the index says " + std::to_string(bytes.size())});
}

TEST_F(DamagedCheckpoint, MissingFile) {
  fs::remove(file_);
  expect_error([&] { read_rank1(); }, ErrorKind::kCorruptData,
               {"rank-00001-of-00002.safetensors", "which does not exist"});
}

TEST_F(DamagedCheckpoint, MissingIndex) {
  fs::remove(folder_ / "index.json");
  expect_error([&] { ShardedCheckpoint c(folder_); }, ErrorKind::kIo, {"has no index.json"});
  expect_error([&] { ShardedCheckpoint c(dir_.path() / "nothing"); }, ErrorKind::kIo,
               {"nothing", "does not exist"});
}

TEST_F(DamagedCheckpoint, BadIndexJson) {
  write_file_atomic(folder_ / "index.json", "{\"format\": \"braid-sharded\", ");
  expect_error([&] { ShardedCheckpoint c(folder_); }, ErrorKind::kCorruptData,
               {"index.json", "not valid JSON"});
}

TEST_F(DamagedCheckpoint, IndexWithAGapNamesTheTensor) {
  // lm_head.weight has 91 elements; make its last piece one element short.
  const ShardedCheckpoint before(folder_);
  rewrite_index("\"shape\": [\n        7,\n        13\n      ]",
                "\"shape\": [\n        7,\n        14\n      ]");
  expect_error([&] { ShardedCheckpoint c(folder_); }, ErrorKind::kCorruptData,
               {"index.json", "tensors.\"lm_head.weight\".pieces", "are in no piece"});
}

TEST_F(DamagedCheckpoint, IndexAndFileDisagree) {
  // A piece key the file does not hold (the file's checksum is still right).
  rewrite_index("\"key\": \"lm_head.weight@", "\"key\": \"lm_head.weight@x");
  expect_error([&] { read_rank1(); }, ErrorKind::kCorruptData,
               {"rank-00001-of-00002.safetensors", "lacks 'lm_head.weight@x"});
}

// ---------------------------------------------------------------- merge_weights

TEST(MergeWeights, OneFileEqualsTheModel) {
  TempDir dir;
  save_threads(dir.path() / "ckpt", 4, 5);
  const auto files = merge_weights(dir.path() / "ckpt", dir.path() / "out");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename(), "model.safetensors");
  const NamedTensors merged = load_safetensors(dir.path() / "out");
  NamedTensors model = make_model(5);
  std::sort(model.begin(), model.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  ASSERT_EQ(merged.size(), model.size());
  for (size_t i = 0; i < model.size(); ++i) {
    EXPECT_EQ(merged[i].first, model[i].first);
    EXPECT_TRUE(same_bytes(merged[i].second, model[i].second)) << model[i].first;
  }
  EXPECT_EQ(SafetensorsFile::open(files[0]).metadata(), (StringMap{{"format", "pt"}}));
}

TEST(MergeWeights, ShardsAndNameFilters) {
  TempDir dir;
  save_threads(dir.path() / "ckpt", 3, 6);
  const auto files = merge_weights(dir.path() / "ckpt", dir.path() / "out", "400");
  ASSERT_GT(files.size(), 2u);
  EXPECT_EQ(files.back().filename(), "model.safetensors.index.json");
  const NamedTensors merged = load_safetensors(dir.path() / "out");
  const NamedTensors model = make_model(6);
  ASSERT_EQ(merged.size(), model.size());
  for (const auto& [name, t] : model) {
    auto it =
        std::find_if(merged.begin(), merged.end(), [&](const auto& m) { return m.first == name; });
    ASSERT_NE(it, merged.end()) << name;
    EXPECT_TRUE(same_bytes(it->second, t)) << name;
  }

  merge_weights(dir.path() / "ckpt", dir.path() / "some", "5GB", {"layers.0.", "embed.weight"});
  std::vector<std::string> names;
  for (const auto& [name, t] : load_safetensors(dir.path() / "some")) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"embed.weight", "layers.0.attn.b", "layers.0.attn.w",
                                             "layers.0.ids"}));
  expect_error([&] { merge_weights(dir.path() / "ckpt", dir.path() / "x", "5GB", {"layers.9."}); },
               ErrorKind::kInvalidArgument, {"'layers.9.' matches no tensor"});
  expect_error([&] { merge_weights(dir.path() / "ckpt", dir.path() / "x", "5XB"); },
               ErrorKind::kInvalidArgument, {"5XB"});
  expect_error([&] { merge_weights(dir.path() / "none", dir.path() / "x"); }, ErrorKind::kIo,
               {"none", "does not exist"});
}

}  // namespace
}  // namespace braid::shard
