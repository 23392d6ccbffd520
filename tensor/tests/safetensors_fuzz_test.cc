// Seeded mutation fuzzing of parse_safetensors_header and parse_safetensors_index
// (docs/files.md, "Validation"). Header: valid
// files, mutated by byte flips, JSON-ish insertions, truncations, slice duplication and
// rewritten length fields, must either parse into a header whose every entry lies inside the
// data section with the size its dtype and shape imply, or be rejected with kCorruptData /
// kNotSupported. Nothing else may escape (another exception, a crash, or, under the sanitizer
// build, a read outside the buffer: every mutant is parsed from a vector of exactly its size).
// Index: mutated model.safetensors.index.json texts must parse into a weight map of unique,
// non-empty, relative names without a ".." component, that format_safetensors_index writes and
// parse_safetensors_index reads back unchanged, or fail with kCorruptData naming the file.
// Deterministic: a fixed seed, so a failure names the iteration that reproduces it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/tensor/safetensors.h"

namespace braid {
namespace {

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

std::string craft(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x01');
}

// Valid files the mutations start from: several dtypes and shapes, metadata, an empty tensor,
// a scalar, padding spaces.
std::vector<std::string> seeds() {
  return {
      craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
      craft(R"({"__metadata__":{"format":"pt","k":"v"},)"
            R"("w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
            R"("b":{"dtype":"I64","shape":[1],"data_offsets":[12,20]}})",
            20),
      craft(R"({"e":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]},)"
            R"("s":{"dtype":"U8","shape":[],"data_offsets":[0,1]},)"
            R"("f8":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[1,4]}})"
            "        ",
            4),
      craft(R"({"x":{"dtype":"F64","shape":[1,1,2],"data_offsets":[0,16]},)"
            R"("y":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]}})",
            19),
  };
}

// The bytes a mutation inserts or writes: mostly JSON structure, digits and field names, so
// that mutants get past the JSON parser often enough to test the validation behind it.
constexpr std::string_view kAlphabet = "{}[]:,\"0123456789-.eE \\u\x01\xff";
const std::vector<std::string> kTokens = {
    "\"dtype\"",
    "\"shape\"",
    "\"data_offsets\"",
    "\"F32\"",
    "\"BF16\"",
    "\"U16\"",
    "\"__metadata__\"",
    "[0,8]",
    "[18446744073709551615]",
    "[-1]",
    "[]",
    "{}",
    "null",
    "1e309",
    "4294967296",
    "\"\\ud800\"",
    "true",
};

void mutate(std::string& f, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  switch (rng() % 7) {
    case 0:  // flip a bit anywhere
      if (!f.empty()) f[pick(f.size())] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 1:  // overwrite a byte with an alphabet character
      if (!f.empty()) f[pick(f.size())] = kAlphabet[pick(kAlphabet.size())];
      break;
    case 2:  // insert a token or character
      if (f.size() >= 8) {
        const size_t at = 8 + pick(f.size() - 7);
        f.insert(at, rng() % 2 ? kTokens[pick(kTokens.size())]
                               : std::string(1, kAlphabet[pick(kAlphabet.size())]));
      }
      break;
    case 3:  // truncate
      f.resize(pick(f.size() + 1));
      break;
    case 4:  // duplicate a slice
      if (!f.empty()) {
        const size_t a = pick(f.size()), len = pick(std::min<size_t>(32, f.size() - a) + 1);
        f.insert(a, f.substr(a, len));
      }
      break;
    case 5: {  // rewrite the header length: off by a little, or anything
      if (f.size() < 8) break;
      uint64_t n = 0;
      for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<uint8_t>(f[i])} << (8 * i);
      const int64_t delta = static_cast<int64_t>(rng() % 17) - 8;
      n = rng() % 4 == 0 ? rng() : n + static_cast<uint64_t>(delta);
      f.replace(0, 8, le64(n));
      break;
    }
    case 6:  // erase a few bytes of the header
      if (f.size() > 9) f.erase(8 + pick(f.size() - 8), 1 + pick(4));
      break;
  }
}

// A header that parsed must describe a layout that fits the file it came from.
void check_invariants(const SafetensorsHeader& h, size_t file_size, int iteration) {
  ASSERT_LE(h.data_start(), file_size) << "iteration " << iteration;
  EXPECT_EQ(h.data_start() + h.data_bytes, file_size) << "iteration " << iteration;
  for (const SafetensorsEntry& e : h.entries) {
    ASSERT_LE(e.begin, e.end) << "iteration " << iteration << ", entry " << e.name;
    ASSERT_LE(e.end, h.data_bytes) << "iteration " << iteration << ", entry " << e.name;
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      ASSERT_GE(d, 0) << "iteration " << iteration;
      numel *= static_cast<uint64_t>(d);
    }
    EXPECT_EQ(e.nbytes(), numel * dtype_size(e.dtype))
        << "iteration " << iteration << ", entry " << e.name;
  }
}

TEST(SafetensorsHeaderFuzz, MutantsParseConsistentlyOrFailWithCorruptDataOrNotSupported) {
  const std::vector<std::string> base = seeds();
  std::mt19937_64 rng(20261130);
  int parsed = 0, corrupt = 0, unsupported = 0;
  constexpr int kIterations = 20000;
  for (int i = 0; i < kIterations; ++i) {
    std::string f = base[rng() % base.size()];
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) mutate(f, rng);
    // Exactly the mutant's bytes, heap-allocated, so a read past the end is a sanitizer error.
    std::vector<std::byte> bytes(f.size());
    for (size_t k = 0; k < f.size(); ++k) bytes[k] = static_cast<std::byte>(f[k]);
    try {
      const SafetensorsHeader h = parse_safetensors_header(bytes, "fuzz.safetensors");
      check_invariants(h, bytes.size(), i);
      ++parsed;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kCorruptData) {
        ++corrupt;
      } else if (e.kind() == ErrorKind::kNotSupported) {
        ++unsupported;
      } else {
        ADD_FAILURE() << "iteration " << i << ": unexpected error kind " << to_string(e.kind())
                      << ": " << e.message();
      }
      EXPECT_NE(e.message().find("fuzz.safetensors"), std::string::npos)
          << "iteration " << i << ": the error does not name the file: " << e.message();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << ": non-braid exception: " << e.what();
    }
    if (testing::Test::HasFailure()) break;  // one reproducible failure is enough
  }
  // The mutations must reach both outcomes, or the fuzzer tests nothing.
  EXPECT_GT(parsed, kIterations / 100);
  EXPECT_GT(corrupt, kIterations / 4);
  RecordProperty("parsed", parsed);
  RecordProperty("corrupt", corrupt);
  RecordProperty("not_supported", unsupported);
}

void mutate_text(std::string& t, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  switch (rng() % 5) {
    case 0:
      if (!t.empty()) t[pick(t.size())] = kAlphabet[pick(kAlphabet.size())];
      break;
    case 1:
      t.insert(pick(t.size() + 1),
               rng() % 2 ? kTokens[pick(kTokens.size())] : std::string(rng() % 2 ? "../" : "/"));
      break;
    case 2:
      t.resize(pick(t.size() + 1));
      break;
    case 3:
      if (!t.empty()) t.erase(pick(t.size()), 1 + pick(3));
      break;
    case 4:
      if (!t.empty()) {
        const size_t a = pick(t.size()), len = pick(std::min<size_t>(24, t.size() - a) + 1);
        t.insert(a, t.substr(a, len));
      }
      break;
  }
}

TEST(SafetensorsIndexFuzz, MutantsParseIntoASafeWeightMapThatRoundTripsOrAreCorrupt) {
  const std::vector<std::string> base = {
      R"({"metadata": {"total_size": 1200, "format": "pt"},
          "weight_map": {"x": "model-00001-of-00002.safetensors",
                         "y.w": "sub/model-00002-of-00002.safetensors"}})",
      R"({"weight_map": {"a": "m.safetensors", "b": "m.safetensors", "c": "n.safetensors"}})",
      R"({"metadata": {"total_size": 1.5e3}, "weight_map": {}})",
  };
  std::mt19937_64 rng(20261201);
  int parsed = 0, corrupt = 0;
  constexpr int kIterations = 20000;
  for (int i = 0; i < kIterations; ++i) {
    std::string t = base[rng() % base.size()];
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n; ++m) mutate_text(t, rng);
    try {
      const SafetensorsIndex index = parse_safetensors_index(t, "fuzz.index.json");
      ++parsed;
      std::set<std::string> names;
      for (const auto& [name, file] : index.weight_map) {
        EXPECT_TRUE(names.insert(name).second) << "iteration " << i << ": duplicate " << name;
        EXPECT_FALSE(file.empty()) << "iteration " << i;
        EXPECT_NE(file.front(), '/') << "iteration " << i << ": absolute " << file;
        // No component may climb out of the index's folder ("a..b" is a plain name).
        std::string component;
        for (size_t k = 0; k <= file.size(); ++k) {
          if (k == file.size() || file[k] == '/') {
            EXPECT_NE(component, "..") << "iteration " << i << ": " << file;
            component.clear();
          } else {
            component += file[k];
          }
        }
      }
      const SafetensorsIndex again =
          parse_safetensors_index(format_safetensors_index(index), "formatted");
      EXPECT_EQ(again.total_size, index.total_size) << "iteration " << i;
      auto sorted = [](std::vector<std::pair<std::string, std::string>> v) {
        std::sort(v.begin(), v.end());
        return v;
      };
      EXPECT_EQ(sorted(again.weight_map), sorted(index.weight_map)) << "iteration " << i;
    } catch (const Error& e) {
      ++corrupt;
      EXPECT_EQ(e.kind(), ErrorKind::kCorruptData) << "iteration " << i << ": " << e.message();
      EXPECT_NE(e.message().find("fuzz.index.json"), std::string::npos)
          << "iteration " << i << ": " << e.message();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << ": non-braid exception: " << e.what();
    }
    if (testing::Test::HasFailure()) break;
  }
  EXPECT_GT(parsed, kIterations / 100);
  EXPECT_GT(corrupt, kIterations / 4);
  RecordProperty("parsed", parsed);
  RecordProperty("corrupt", corrupt);
}

}  // namespace
}  // namespace braid
