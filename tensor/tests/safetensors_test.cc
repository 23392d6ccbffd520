// Tests of the safetensors reader and writer: the exact bytes of the reference writer, round
// trips of every dtype, zero-copy views that outlive the file object, and one hand-crafted
// broken file per validation rule (error kind and the field named in the message).
#include "braid/tensor/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/file_util.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

// ---- helpers ----

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A file with `header` as the JSON text (no padding added) and `data_bytes` bytes of data.
std::string craft(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x01');
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

SafetensorsHeader parse(const std::string& file) {
  return parse_safetensors_header(as_bytes(file), "crafted.safetensors");
}

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

// Expects `file` to be rejected with `kind` and a message containing every one of `parts`.
void expect_rejected(const std::string& file, ErrorKind kind,
                     std::initializer_list<std::string_view> parts) {
  const Error e = catch_error([&] { parse(file); });
  EXPECT_EQ(e.kind(), kind) << e.message();
  EXPECT_NE(e.message().find("crafted.safetensors"), std::string::npos) << e.message();
  for (std::string_view part : parts) {
    EXPECT_NE(e.message().find(part), std::string::npos)
        << "message lacks '" << part << "': " << e.message();
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("braid_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// ---- the bytes on disk ----

// The reference implementation's own test vector (safetensors tensor.rs,
// test_serialization_forced_alignement): one F32 tensor "attn0" of shape [1, 1, 2, 3] holding
// 0..5 is a 72-byte header padded with 7 spaces, then the 24 data bytes.
TEST_F(SafetensorsTest, MatchesTheReferenceWriterBytes) {
  const fs::path p = dir_ / "ref.safetensors";
  save_safetensors(p, {{"attn0", Tensor::from_vector({0, 1, 2, 3, 4, 5}, {1, 1, 2, 3})}});
  const std::string json = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  std::string expected = le64(72) + json + std::string(72 - json.size(), ' ');
  for (float v : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) {
    expected.append(reinterpret_cast<const char*>(&v), 4);
  }
  EXPECT_EQ(read_file(p), expected);
}

TEST_F(SafetensorsTest, MetadataComesFirstAndEmptyFileMatchesReference) {
  // tensor.rs test_empty: no tensors, metadata {"framework": "pt"}: a 40-byte header.
  const fs::path p = dir_ / "empty.safetensors";
  save_safetensors(p, {}, {{"framework", "pt"}});
  const std::string json = R"({"__metadata__":{"framework":"pt"}})";
  EXPECT_EQ(read_file(p), le64(40) + json + std::string(40 - json.size(), ' '));
  save_safetensors(p, {});
  EXPECT_EQ(read_file(p), le64(8) + "{}      ");
}

// ---- round trips ----

TEST_F(SafetensorsTest, EveryDTypeRoundTrips) {
  NamedTensors in;
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto dt = static_cast<DType>(i);
    std::vector<double> values = {0, 1, 0, 1, 1, 0};
    if (dt != DType::kBool) values = {-2, -1, 0, 1, 2, 3};
    if (dt == DType::kU8) values = {0, 1, 2, 3, 250, 255};
    if (is_floating(dt)) values = {-1.5, 0.25, 0, 2, -0.5, 1};
    in.emplace_back(std::string("t_") + std::string(dtype_name(dt)),
                    Tensor::from_vector(values, {2, 3}, dt));
  }
  const fs::path p = dir_ / "all.safetensors";
  save_safetensors(p, in, {{"format", "pt"}, {"note", "all dtypes"}});

  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.metadata(), (StringMap{{"format", "pt"}, {"note", "all dtypes"}}));
  ASSERT_EQ(f.names().size(), in.size());
  const NamedTensors out = f.load_all();
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(in[i].first);
    EXPECT_EQ(out[i].first, in[i].first);  // file order is the order saved
    EXPECT_EQ(out[i].second.dtype(), in[i].second.dtype());
    EXPECT_EQ(out[i].second.shape(), (Shape{2, 3}));
    EXPECT_EQ(out[i].second.to_vector(), in[i].second.to_vector());
    const std::span<const std::byte> raw = f.raw_bytes(in[i].first);
    ASSERT_EQ(raw.size(), in[i].second.nbytes());
    EXPECT_EQ(std::memcmp(raw.data(), in[i].second.data_ptr(), raw.size()), 0);
  }
}

TEST_F(SafetensorsTest, SpecialFloatValuesKeepTheirBits) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v = {inf, -inf, std::nan(""), -0.0, 1e-40, 65504};
  const Tensor f32 = Tensor::from_vector(v, {6}, DType::kF32);
  const Tensor f16 = Tensor::from_vector(v, {6}, DType::kF16);
  const fs::path p = dir_ / "special.safetensors";
  save_safetensors(p, {{"f32", f32}, {"f16", f16}});
  const SafetensorsFile f = SafetensorsFile::open(p);
  for (const auto& [name, t] : NamedTensors{{"f32", f32}, {"f16", f16}}) {
    const Tensor back = f.get(name);
    EXPECT_EQ(std::memcmp(back.data_ptr(), t.data_ptr(), t.nbytes()), 0) << name;
  }
}

TEST_F(SafetensorsTest, NonContiguousTensorIsWrittenInCOrder) {
  const Tensor m = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kI32);
  const Tensor t = m.t();  // [[1, 4], [2, 5], [3, 6]]
  ASSERT_FALSE(t.is_contiguous());
  const fs::path p = dir_ / "t.safetensors";
  save_safetensors(p, {{"t", t}});
  const Tensor back = SafetensorsFile::open(p).get("t");
  EXPECT_EQ(back.shape(), (Shape{3, 2}));
  EXPECT_EQ(back.to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST_F(SafetensorsTest, EmptyAndScalarTensors) {
  const fs::path p = dir_ / "shapes.safetensors";
  save_safetensors(p, {{"empty", Tensor::zeros({0, 4})},
                       {"scalar", Tensor::full({}, 7.0, DType::kF64)},
                       {"after", Tensor::ones({2}, DType::kBF16)}});
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.get("empty").shape(), (Shape{0, 4}));
  EXPECT_EQ(f.get("scalar").shape(), Shape{});
  EXPECT_EQ(f.get("scalar").item(), 7.0);
  EXPECT_EQ(f.get("after").to_vector(), (std::vector<double>{1, 1}));
  EXPECT_EQ(f.info("scalar").begin, 0u);  // the empty tensor takes no bytes
  EXPECT_EQ(f.info("scalar").end, 8u);
}

// ---- zero-copy views ----

TEST_F(SafetensorsTest, GetIsAViewIntoTheMapping) {
  const fs::path p = dir_ / "v.safetensors";
  save_safetensors(p, {{"a", Tensor::arange(16, DType::kF32)}});
  const SafetensorsFile f = SafetensorsFile::open(p);
  const Tensor a = f.get("a");
  EXPECT_EQ(a.data_ptr(), static_cast<const void*>(f.raw_bytes("a").data()));
}

TEST_F(SafetensorsTest, TensorOutlivesTheFileObject) {
  const fs::path p = dir_ / "v.safetensors";
  save_safetensors(p, {{"a", Tensor::arange(8, DType::kI64)}});
  Tensor a;
  {
    const SafetensorsFile f = SafetensorsFile::open(p);
    a = f.get("a");
  }
  EXPECT_EQ(a.to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST_F(SafetensorsTest, WritingAViewNeverChangesTheFile) {
  const fs::path p = dir_ / "v.safetensors";
  save_safetensors(p, {{"a", Tensor::zeros({4})}});
  const std::string before = read_file(p);
  {
    Tensor a = SafetensorsFile::open(p).get("a");
    a.fill_(3.0);
    EXPECT_EQ(a.to_vector(), (std::vector<double>{3, 3, 3, 3}));
  }
  EXPECT_EQ(read_file(p), before);
}

TEST_F(SafetensorsTest, OverwritingKeepsLiveViewsOfTheOldFileIntact) {
  const fs::path p = dir_ / "v.safetensors";
  save_safetensors(p, {{"a", Tensor::full({1000}, 1.0)}});
  const Tensor old = SafetensorsFile::open(p).get("a");
  save_safetensors(p, {{"a", Tensor::full({3}, 2.0)}});  // replaced, never truncated
  EXPECT_EQ(old.numel(), 1000);
  EXPECT_EQ(old.to_vector()[999], 1.0);
  EXPECT_EQ(SafetensorsFile::open(p).get("a").to_vector(), (std::vector<double>{2, 2, 2}));
}

TEST_F(SafetensorsTest, MisalignedDataFromOtherWritersIsCopied) {
  // A 3-byte header pushes the data to file offset 11: not 4-byte aligned.
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file = le64(header.size() + 3) + header + "   ";
  for (float v : {1.5f, -2.f}) file.append(reinterpret_cast<const char*>(&v), 4);
  ASSERT_NE((8 + header.size() + 3) % 4, 0u);
  const fs::path p = dir_ / "odd.safetensors";
  std::ofstream(p, std::ios::binary) << file;
  const Tensor x = SafetensorsFile::open(p).get("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data_ptr()) % 4, 0u);
  EXPECT_EQ(x.to_vector(), (std::vector<double>{1.5, -2}));
}

TEST_F(SafetensorsTest, HeaderOrderIsFileOrderEvenWhenOffsetsDisagree) {
  const std::string header = "{" + entry("second", "U8", "[2]", "[2,4]") + "," +
                             entry("first", "U8", "[2]", "[0,2]") + "}";
  const fs::path p = dir_ / "order.safetensors";
  std::ofstream(p, std::ios::binary) << le64(header.size()) << header << "\x01\x02\x03\x04";
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"second", "first"}));
  EXPECT_EQ(f.get("first").to_vector(), (std::vector<double>{1, 2}));
  EXPECT_EQ(f.get("second").to_vector(), (std::vector<double>{3, 4}));
}

TEST_F(SafetensorsTest, BoolBytesOtherThanZeroOrOneAreCorrupt) {
  const std::string header = "{" + entry("b", "BOOL", "[3]", "[0,3]") + "}";
  const fs::path p = dir_ / "bool.safetensors";
  std::ofstream(p, std::ios::binary)
      << le64(header.size()) << header << std::string("\x01\x00\x02", 3);
  const SafetensorsFile f = SafetensorsFile::open(p);
  const Error e = catch_error([&] { f.get("b"); });
  EXPECT_EQ(e.kind(), ErrorKind::kCorruptData);
  EXPECT_NE(e.message().find("'b'"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("element 2"), std::string::npos) << e.message();
}

TEST_F(SafetensorsTest, MissingTensorIsOutOfRangeNamingFileAndName) {
  const fs::path p = dir_ / "m.safetensors";
  save_safetensors(p, {{"a", Tensor::zeros({1})}});
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_FALSE(f.contains("nope"));
  const Error e = catch_error([&] { f.get("nope"); });
  EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(e.message().find("'nope'"), std::string::npos);
  EXPECT_NE(e.message().find(p.string()), std::string::npos);
}

TEST_F(SafetensorsTest, OpenMissingFileIsIo) {
  const Error e = catch_error([&] { SafetensorsFile::open(dir_ / "none.safetensors"); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find("none.safetensors"), std::string::npos);
}

// ---- writer errors ----

TEST_F(SafetensorsTest, SaveRejectsBadInput) {
  const fs::path p = dir_ / "bad.safetensors";
  const Tensor t = Tensor::zeros({2});
  struct Case {
    NamedTensors tensors;
    std::string_view expected;
  };
  const std::vector<Case> cases = {
      {{{"a", t}, {"a", t}}, "appears twice"},
      {{{"__metadata__", t}}, "reserved"},
      {{{"u", Tensor()}}, "undefined"},
      {{{"m", Tensor::empty({2}, DType::kF32, kMeta)}}, "meta"},
      {{{std::string("bad\xff", 4), t}}, "UTF-8"},
  };
  for (const Case& c : cases) {
    const Error e = catch_error([&] { save_safetensors(p, c.tensors); });
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.message();
    EXPECT_NE(e.message().find(c.expected), std::string::npos) << e.message();
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::is_empty(dir_));  // no temporary left behind either

  const Error io = catch_error([&] {
    save_safetensors(dir_ / "no" / "x.safetensors", {{"a", t}});
  });
  EXPECT_EQ(io.kind(), ErrorKind::kIo);
}

// ---- validation: one crafted file per rule ----

TEST(SafetensorsHeaderTest, ValidMinimalFile) {
  const SafetensorsHeader h = parse(craft("{" + entry("a", "F32", "[2]", "[0,8]") + "}", 8));
  ASSERT_EQ(h.entries.size(), 1u);
  EXPECT_EQ(h.entries[0].name, "a");
  EXPECT_EQ(h.entries[0].dtype, DType::kF32);
  EXPECT_EQ(h.entries[0].shape, Shape{2});
  EXPECT_EQ(h.data_bytes, 8u);
  EXPECT_TRUE(h.metadata.empty());
}

TEST(SafetensorsHeaderTest, WhitespaceAndExtraFieldsAreAccepted) {
  const SafetensorsHeader h = parse(craft(
      "  {\"a\": {\"dtype\": \"I8\", \"shape\": [3], \"data_offsets\": [0, 3], \"x\": 1}}   ", 3));
  EXPECT_EQ(h.entries.at(0).shape, Shape{3});
}

TEST(SafetensorsHeaderTest, ZeroSizedTensorsMayShareAnOffset) {
  const SafetensorsHeader h = parse(craft("{" + entry("e1", "F32", "[0]", "[0,0]") + "," +
                                              entry("e2", "F64", "[2,0]", "[0,0]") + "," +
                                              entry("a", "U8", "[1]", "[0,1]") + "}",
                                          1));
  EXPECT_EQ(h.entries.size(), 3u);
}

TEST(SafetensorsHeaderTest, FileTooShort) {
  expect_rejected("", ErrorKind::kCorruptData, {"too short"});
  expect_rejected("1234567", ErrorKind::kCorruptData, {"7 bytes", "too short"});
}

TEST(SafetensorsHeaderTest, HeaderLengthPastTheFile) {
  expect_rejected(le64(100) + "{}", ErrorKind::kCorruptData, {"header length 100", "past the end"});
}

TEST(SafetensorsHeaderTest, HeaderLengthAbsurd) {
  expect_rejected(le64(100'000'001) + "{}", ErrorKind::kCorruptData, {"exceeds the limit"});
  expect_rejected(le64(~uint64_t{0}) + "{}", ErrorKind::kCorruptData, {"exceeds the limit"});
}

TEST(SafetensorsHeaderTest, HeaderNotUtf8) {
  expect_rejected(craft("{\"a\xc3\x28\":1}", 0), ErrorKind::kCorruptData, {"UTF-8", "byte 3"});
  // An encoded surrogate (U+D800) is not UTF-8 either.
  expect_rejected(craft("{\"\xed\xa0\x80\":1}", 0), ErrorKind::kCorruptData, {"UTF-8"});
}

TEST(SafetensorsHeaderTest, HeaderNotJson) {
  expect_rejected(craft("{\"a\": ", 0), ErrorKind::kCorruptData, {"not valid JSON"});
  expect_rejected(craft("", 0), ErrorKind::kCorruptData, {"not valid JSON"});
  expect_rejected(craft(std::string("{}\0\0", 4), 0), ErrorKind::kCorruptData, {"not valid JSON"});
}

TEST(SafetensorsHeaderTest, HeaderNotAnObject) {
  expect_rejected(craft("[1, 2]", 0), ErrorKind::kCorruptData, {"an array", "JSON object"});
  expect_rejected(craft("\"x\"", 0), ErrorKind::kCorruptData, {"JSON object"});
}

TEST(SafetensorsHeaderTest, EntryNotAnObjectOrMissingField) {
  expect_rejected(craft("{\"a\": 5}", 0), ErrorKind::kCorruptData, {"tensor 'a'", "integer 5"});
  expect_rejected(craft(R"({"a":{"dtype":"F32","data_offsets":[0,0]}})", 0),
                  ErrorKind::kCorruptData, {"tensor 'a'", "\"shape\""});
  expect_rejected(craft(R"({"a":{"shape":[],"data_offsets":[0,4]}})", 4), ErrorKind::kCorruptData,
                  {"tensor 'a'", "\"dtype\""});
  expect_rejected(craft(R"({"a":{"dtype":"F32","shape":[]}})", 4), ErrorKind::kCorruptData,
                  {"tensor 'a'", "\"data_offsets\""});
}

TEST(SafetensorsHeaderTest, UnknownDType) {
  expect_rejected(craft("{" + entry("w", "F33", "[1]", "[0,4]") + "}", 4), ErrorKind::kCorruptData,
                  {"tensor 'w'", "unknown dtype", "F33", "BF16"});
  expect_rejected(craft("{" + entry("w", "f32", "[1]", "[0,4]") + "}", 4), ErrorKind::kCorruptData,
                  {"unknown dtype"});  // the format's names are upper case only
  expect_rejected(craft(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
                  ErrorKind::kCorruptData, {"\"dtype\"", "integer 4"});
}

TEST(SafetensorsHeaderTest, FormatDTypeBraidLacksIsNotSupported) {
  expect_rejected(craft("{" + entry("w", "U16", "[1]", "[0,2]") + "}", 2), ErrorKind::kNotSupported,
                  {"tensor 'w'", "U16"});
}

TEST(SafetensorsHeaderTest, BadShape) {
  const std::vector<std::pair<std::string, std::string_view>> cases = {
      {"3", "\"shape\" is the integer 3"},
      {"[-1]", "shape[0] is the integer -1"},
      {"[2.5]", "shape[0] is the number 2.5"},
      {"[1,\"2\"]", "shape[1] is the string"},
      {"[null]", "shape[0] is null"},
      {"[1e30]", "shape[0] is the number"},
      {"[99999999999999999999]", "shape[0] is the number"},  // past u64: a float to JSON
  };
  for (const auto& [shape, expected] : cases) {
    SCOPED_TRACE(shape);
    expect_rejected(craft("{" + entry("s", "F32", shape, "[0,4]") + "}", 4),
                    ErrorKind::kCorruptData, {"tensor 's'", expected});
  }
}

// An empty tensor whose other dimensions multiply past int64 cannot be a braid tensor (its
// strides overflow; the object format's fuzz finding, docs/fuzzing.md): kCorruptData.
TEST(SafetensorsHeaderTest, EmptyShapeWithOverflowingStrides) {
  expect_rejected(
      craft("{" + entry("s", "F32", "[0,1099511627776,1099511627776,1099511627776]", "[0,0]") + "}",
            0),
      ErrorKind::kCorruptData, {"tensor 's'", "2^63"});
}

TEST(SafetensorsHeaderTest, BadDataOffsets) {
  for (const std::string offsets :
       {"[0]", "[0,4,8]", "[-1,4]", "[\"0\",4]", "[0.0,4]", "4", "{}"}) {
    SCOPED_TRACE(offsets);
    expect_rejected(craft("{" + entry("o", "F32", "[1]", offsets) + "}", 4),
                    ErrorKind::kCorruptData, {"tensor 'o'", "\"data_offsets\"", "[begin, end]"});
  }
  expect_rejected(craft("{" + entry("o", "F32", "[1]", "[8,4]") + "}", 8), ErrorKind::kCorruptData,
                  {"tensor 'o'", "[8, 4]", "begin > end"});
}

TEST(SafetensorsHeaderTest, EndBeyondTheDataSection) {
  expect_rejected(craft("{" + entry("big", "F32", "[4]", "[0,16]") + "}", 8),
                  ErrorKind::kCorruptData, {"tensor 'big'", "[0, 16]", "past the data section (8"});
}

TEST(SafetensorsHeaderTest, ByteCountDisagreesWithShape) {
  expect_rejected(craft("{" + entry("w", "F32", "[3]", "[0,8]") + "}", 8), ErrorKind::kCorruptData,
                  {"tensor 'w'", "needs 12 bytes", "span 8"});
  expect_rejected(craft("{" + entry("w", "BF16", "[2,2]", "[0,4]") + "}", 4),
                  ErrorKind::kCorruptData, {"needs 8 bytes"});
}

TEST(SafetensorsHeaderTest, ShapeOverflow) {
  expect_rejected(
      craft("{" + entry("w", "F32", "[4611686018427387904,4611686018427387904]", "[0,4]") + "}", 4),
      ErrorKind::kCorruptData, {"tensor 'w'", "overflows"});
}

TEST(SafetensorsHeaderTest, OverlappingTensors) {
  expect_rejected(craft("{" + entry("a", "F32", "[2]", "[0,8]") + "," +
                            entry("b", "F32", "[2]", "[4,12]") + "}",
                        12),
                  ErrorKind::kCorruptData, {"tensor 'b'", "overlap tensor 'a'"});
  // Two tensors on the very same bytes (aliasing) are overlap too.
  expect_rejected(
      craft("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[0,4]") + "}",
            4),
      ErrorKind::kCorruptData, {"overlap"});
}

TEST(SafetensorsHeaderTest, HoleBetweenTensors) {
  expect_rejected(craft("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                            entry("b", "F32", "[1]", "[8,12]") + "}",
                        12),
                  ErrorKind::kCorruptData, {"bytes [4, 8)", "belong to no tensor", "'b'"});
  expect_rejected(craft("{" + entry("a", "F32", "[1]", "[4,8]") + "}", 8), ErrorKind::kCorruptData,
                  {"bytes [0, 4)"});
}

TEST(SafetensorsHeaderTest, TrailingBytes) {
  expect_rejected(craft("{" + entry("a", "F32", "[1]", "[0,4]") + "}", 6), ErrorKind::kCorruptData,
                  {"cover 4 bytes", "holds 6"});
  expect_rejected(craft("{}", 1), ErrorKind::kCorruptData, {"cover 0 bytes"});
}

TEST(SafetensorsHeaderTest, DuplicateNames) {
  expect_rejected(
      craft("{" + entry("w", "F32", "[1]", "[0,4]") + "," + entry("w", "F32", "[1]", "[4,8]") + "}",
            8),
      ErrorKind::kCorruptData, {"duplicate key 'w'", "top-level"});
  expect_rejected(
      craft(R"({"w":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4),
      ErrorKind::kCorruptData, {"duplicate key 'dtype'", "object 'w'"});
  expect_rejected(craft(R"({"__metadata__":{"k":"a","k":"b"}})", 0), ErrorKind::kCorruptData,
                  {"duplicate key 'k'", "'__metadata__'"});
}

TEST(SafetensorsHeaderTest, MetadataMustBeStringToString) {
  const SafetensorsHeader ok = parse(craft(R"({"__metadata__":{"format":"pt","":"x"}})", 0));
  EXPECT_EQ(ok.metadata, (StringMap{{"format", "pt"}, {"", "x"}}));
  expect_rejected(craft(R"({"__metadata__":"pt"})", 0), ErrorKind::kCorruptData,
                  {"\"__metadata__\" is the string"});
  expect_rejected(craft(R"({"__metadata__":{"epoch":3}})", 0), ErrorKind::kCorruptData,
                  {"key 'epoch'", "integer 3"});
  expect_rejected(craft(R"({"__metadata__":{"n":null}})", 0), ErrorKind::kCorruptData, {"null"});
}

// Every truncation and every single-byte change of a valid file either parses or throws
// braid::Error: never a crash and never a read past the buffer (run under ASan to see it).
TEST(SafetensorsHeaderTest, TruncationsAndByteFlipsNeverCrash) {
  const std::string file =
      craft("{\"__metadata__\":{\"k\":\"v\"}," + entry("a", "F32", "[2]", "[0,8]") + "," +
                entry("b", "I8", "[3]", "[8,11]") + "}",
            11);
  ASSERT_NO_THROW(parse(file));
  for (size_t n = 0; n < file.size(); ++n) {
    const std::string cut = file.substr(0, n);
    EXPECT_THROW(parse_safetensors_header(as_bytes(cut), "cut"), Error) << n;
  }
  size_t accepted = 0;
  for (size_t i = 0; i < file.size(); ++i) {
    for (int delta : {1, 0x80}) {
      std::string mutated = file;
      mutated[i] = static_cast<char>(mutated[i] ^ delta);
      try {
        parse_safetensors_header(as_bytes(mutated), "mutated");
        ++accepted;
      } catch (const Error&) {
      }
    }
  }
  // Flipping data bytes or letters of a metadata value leaves a valid file; most flips do not.
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, file.size());
}

}  // namespace
}  // namespace braid
