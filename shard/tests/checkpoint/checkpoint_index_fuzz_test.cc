// Seeded mutation fuzzing of parse_checkpoint_index (docs/sharding.md, "Checkpoints"), as
// tensor/tests/safetensors_fuzz_test.cc does for the safetensors parsers. Valid index texts
// are mutated by byte flips, JSON tokens inserted or written over, truncation, duplicated
// slices and rewritten numbers. Each mutant must either parse into an index the reader can
// trust (every piece names a listed file, has count > 0, and the pieces tile [0, numel) of a
// shape whose product is numel; file names are plain; format_checkpoint_index then
// parse_checkpoint_index gives it back equal), or fail with kCorruptData / kNotSupported
// naming the file. Deterministic: a failure names the iteration that reproduces it.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "checkpoint_internal.h"

namespace braid::shard::detail {
namespace {

constexpr std::string_view kWhat = "fuzz/index.json";

std::vector<std::string> seeds() {
  CheckpointIndex a;
  a.world_size = 2;
  a.metadata = {{"step", "100"}, {"lr", "0.1"}};
  a.files = {{rank_file_name(0, 2), {120, 0xdeadbeef}}, {rank_file_name(1, 2), {96, 0x1}}};
  a.tensors["w"] = {DType::kF32,
                    {2, 3},
                    6,
                    {{rank_file_name(0, 2), "w@0", 0, 4}, {rank_file_name(1, 2), "w@4", 4, 2}}};
  a.tensors["b"] = {DType::kBF16, {3}, 3, {{rank_file_name(1, 2), "b@0", 0, 3}}};
  a.tensors["e"] = {DType::kF16, {0, 5}, 0, {}};
  a.tensors["s"] = {DType::kI64, {}, 1, {{rank_file_name(0, 2), "s@0", 0, 1}}};
  CheckpointIndex b;
  b.world_size = 1;
  b.files = {{rank_file_name(0, 1), {8, 0}}};
  b.tensors["x.y"] = {
      DType::kF8E4M3,
      {4, 1},
      4,
      {{rank_file_name(0, 1), "x.y@0", 0, 1}, {rank_file_name(0, 1), "x.y@1", 1, 3}}};
  return {format_checkpoint_index(a), format_checkpoint_index(b),
          R"({"format":"braid-sharded","version":1,"world_size":1,"files":{},"tensors":{}})"};
}

const std::vector<std::string> kTokens = {
    "\"format\"",
    "\"version\"",
    "\"world_size\"",
    "\"files\"",
    "\"tensors\"",
    "\"pieces\"",
    "\"offset\"",
    "\"count\"",
    "\"file\"",
    "\"key\"",
    "\"shape\"",
    "\"dtype\"",
    "\"bytes\"",
    "\"crc32c\"",
    "\"F32\"",
    "\"U16\"",
    "\"../x\"",
    "\"a/b\"",
    "\"\"",
    "0",
    "-1",
    "2",
    "1.5",
    "1e309",
    "9223372036854775807",
    "18446744073709551615",
    "[]",
    "{}",
    "null",
    "true",
    "\"ffffffff\"",
    "\"\\u0000\"",
    ",",
    ":",
};

std::string mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < rounds; ++k) {
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // insert a token
        s.insert(pick(s.size() + 1), kTokens[pick(kTokens.size())]);
        break;
      case 2: {  // overwrite with a token
        const std::string& t = kTokens[pick(kTokens.size())];
        const size_t at = pick(s.size() + 1);
        s.replace(at, std::min(t.size(), s.size() - at), t);
        break;
      }
      case 3:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 4: {  // duplicate a slice
        const size_t a = pick(s.size() + 1), n = pick(s.size() - a + 1);
        s.insert(pick(s.size() + 1), s.substr(a, n));
        break;
      }
      case 5: {  // rewrite a number
        const size_t at = s.find_first_of("0123456789", pick(s.size() + 1));
        if (at == std::string::npos) break;
        const size_t end = s.find_first_not_of("0123456789", at);
        const std::vector<std::string> numbers = {"0", "1", "3", "5", "7", "99", "4294967296"};
        s.replace(at, (end == std::string::npos ? s.size() : end) - at, numbers[pick(7)]);
        break;
      }
    }
  }
  return s;
}

// What the reader relies on.
void check_invariants(const CheckpointIndex& index, int iteration) {
  ASSERT_GE(index.world_size, 1) << iteration;
  for (const auto& [name, f] : index.files) {
    ASSERT_FALSE(name.empty()) << iteration;
    ASSERT_EQ(name.find('/'), std::string::npos) << iteration;
    ASSERT_NE(name, "..") << iteration;
    ASSERT_EQ(name.find('\0'), std::string::npos) << iteration;
  }
  for (const auto& [name, t] : index.tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      ASSERT_GE(d, 0) << iteration;
      numel *= d;
    }
    ASSERT_EQ(numel, t.numel) << iteration << " " << name;
    int64_t covered = 0;
    for (const auto& p : t.pieces) {
      ASSERT_TRUE(index.files.count(p.file)) << iteration << " " << name;
      ASSERT_GT(p.count, 0) << iteration;
      ASSERT_EQ(p.offset, covered) << iteration << " " << name;
      ASSERT_LE(p.count, t.numel - p.offset) << iteration << " " << name;
      covered += p.count;
    }
    ASSERT_EQ(covered, t.numel) << iteration << " " << name;
  }
}

TEST(CheckpointIndexFuzz, SeedsParseAndRoundTrip) {
  for (const std::string& s : seeds()) {
    const CheckpointIndex index = parse_checkpoint_index(s, kWhat);
    check_invariants(index, -1);
    EXPECT_EQ(parse_checkpoint_index(format_checkpoint_index(index), kWhat), index);
  }
}

TEST(CheckpointIndexFuzz, MutantsParseIntoTrustworthyIndexesOrFailClearly) {
  const std::vector<std::string> base = seeds();
  std::mt19937_64 rng(20240611);
  int parsed = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string text = mutate(base[i % base.size()], rng);
    try {
      const CheckpointIndex index = parse_checkpoint_index(text, kWhat);
      ++parsed;
      check_invariants(index, i);
      if (::testing::Test::HasFatalFailure()) return;
      ASSERT_EQ(parse_checkpoint_index(format_checkpoint_index(index), kWhat), index)
          << "iteration " << i << ":\n"
          << text;
    } catch (const Error& e) {
      ++rejected;
      ASSERT_TRUE(e.kind() == ErrorKind::kCorruptData || e.kind() == ErrorKind::kNotSupported)
          << "iteration " << i << ": " << e.what();
      ASSERT_NE(e.message().find(kWhat), std::string::npos)
          << "iteration " << i << ": " << e.message();
    } catch (const std::exception& e) {
      FAIL() << "iteration " << i << ": not a braid::Error: " << e.what() << "\n" << text;
    }
  }
  // Both outcomes must be exercised, or the mutations test nothing.
  EXPECT_GT(parsed, 200);
  EXPECT_GT(rejected, 2000);
}

// Hand-made broken indexes: the message names the field.
TEST(CheckpointIndexParse, ErrorsNameTheField) {
  const std::string head = R"({"format":"braid-sharded","version":1,"world_size":1,)";
  const std::string files = R"("files":{"r.safetensors":{"bytes":8,"crc32c":"00000000"}},)";
  auto fails = [&](const std::string& text, ErrorKind kind, const std::string& part) {
    try {
      parse_checkpoint_index(text, kWhat);
      ADD_FAILURE() << "parsed: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.message();
      EXPECT_NE(e.message().find(part), std::string::npos) << part << " not in " << e.message();
      EXPECT_NE(e.message().find(kWhat), std::string::npos) << e.message();
    }
  };
  auto tensor = [&](const std::string& body) {
    return head + files + R"("tensors":{"w":)" + body + "}}";
  };
  fails("[]", ErrorKind::kCorruptData, "the top level is an array, expected an object");
  fails(R"({"format":"pt"})", ErrorKind::kCorruptData, "\"format\" is the string \"pt\"");
  fails(R"({"format":"braid-sharded","version":2,"world_size":1,"files":{},"tensors":{}})",
        ErrorKind::kNotSupported, "format version 2");
  fails(R"({"format":"braid-sharded","version":1,"world_size":0,"files":{},"tensors":{}})",
        ErrorKind::kCorruptData, "\"world_size\" is the integer 0, expected an integer >= 1");
  fails(head + R"("files":{"../x":{"bytes":1,"crc32c":"00000000"}},"tensors":{}})",
        ErrorKind::kCorruptData, "files.\"../x\" is not a plain file name");
  fails(head + R"("files":{"r":{"bytes":1,"crc32c":"xyz"}},"tensors":{}})", ErrorKind::kCorruptData,
        "files.\"r\".crc32c is \"xyz\", expected 8 hex digits");
  fails(head + files + R"("tensors":{"w":{},"w":{}}})", ErrorKind::kCorruptData,
        "duplicate key 'w'");
  fails(tensor(R"({"dtype":"F33","shape":[2],"pieces":[]})"), ErrorKind::kCorruptData,
        "tensors.\"w\".dtype is the unknown dtype \"F33\"");
  fails(tensor(R"({"dtype":"F32","shape":[2,-1],"pieces":[]})"), ErrorKind::kCorruptData,
        "tensors.\"w\".shape[1] is the integer -1");
  fails(tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"pieces":[]})"),
        ErrorKind::kCorruptData, "more than 2^63-1 elements");
  fails(tensor(R"({"dtype":"F32","shape":[2]})"), ErrorKind::kCorruptData,
        "tensors.\"w\" has no \"pieces\"");
  fails(
      tensor(
          R"({"dtype":"F32","shape":[4],"pieces":[{"file":"q","key":"w","offset":0,"count":4}]})"),
      ErrorKind::kCorruptData, "pieces[0].file \"q\" is not listed");
  fails(
      tensor(
          R"({"dtype":"F32","shape":[4],"pieces":[{"file":"r.safetensors","key":"w","offset":1,"count":3}]})"),
      ErrorKind::kCorruptData, "elements [0, 1) are in no piece");
  fails(
      tensor(
          R"({"dtype":"F32","shape":[4],"pieces":[{"file":"r.safetensors","key":"a","offset":0,"count":3},)"
          R"({"file":"r.safetensors","key":"b","offset":2,"count":2}]})"),
      ErrorKind::kCorruptData, "pieces[1].offset is 2 but the previous piece ends at 3");
  fails(
      tensor(
          R"({"dtype":"F32","shape":[4],"pieces":[{"file":"r.safetensors","key":"a","offset":0,"count":5}]})"),
      ErrorKind::kCorruptData, "past the tensor's 4 elements");
  fails(
      tensor(
          R"({"dtype":"F32","shape":[4],"pieces":[{"file":"r.safetensors","key":"a","offset":0,"count":3}]})"),
      ErrorKind::kCorruptData, "elements [3, 4) are in no piece");
  fails(
      tensor(
          R"({"dtype":"F32","shape":[4],"pieces":[{"file":"r.safetensors","key":"a","offset":0,"count":0}]})"),
      ErrorKind::kCorruptData, "count is the integer 0, expected an integer >= 1");
}

}  // namespace
}  // namespace braid::shard::detail
