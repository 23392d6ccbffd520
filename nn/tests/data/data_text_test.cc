// default_collate, TextBytesDataset and SyntheticDataset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "braid/core/error.h"
#include "braid/nn/data.h"
#include "braid/nn/data_text.h"

namespace braid::nn {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

std::vector<int64_t> bytes_of(const std::string& s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

TEST(DefaultCollate, StacksTensorsAndTurnsNumbersIntoTensors) {
  std::vector<Tree> samples;
  for (int i = 0; i < 3; ++i) {
    samples.push_back(Tree::map({{"t", Tensor::full({2}, i, DType::kF32)},
                                 {"i", Tree(i)},
                                 {"d", Tree(0.5 * i)},
                                 {"b", Tree(i == 1)},
                                 {"s", Tree(std::to_string(i))},
                                 {"l", Tree::list({Tree(i), Tree(10 + i)})}}));
  }
  const Tree out = default_collate(samples);
  EXPECT_EQ(out.at("t").tensor().shape(), (Shape{3, 2}));
  EXPECT_EQ(out.at("t").tensor().to_vector(), (std::vector<double>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(out.at("i").tensor().dtype(), DType::kI64);
  EXPECT_EQ(ints(out.at("i").tensor()), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(out.at("d").tensor().dtype(), DType::kF64);
  EXPECT_EQ(out.at("d").tensor().to_vector(), (std::vector<double>{0, 0.5, 1}));
  EXPECT_EQ(out.at("b").tensor().dtype(), DType::kBool);
  EXPECT_EQ(out.at("b").tensor().to_vector(), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(out.at("s").at(2).as_string(), "2");
  EXPECT_EQ(ints(out.at("l").at(1).tensor()), (std::vector<int64_t>{10, 11, 12}));
}

TEST(DefaultCollate, ErrorsNameTheSampleAndTheKey) {
  try {
    default_collate(
        {Tree::map({{"x", Tensor::zeros({2})}}), Tree::map({{"x", Tensor::zeros({3})}})});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("key \"x\": sample 1"));
    EXPECT_THAT(e.message(), HasSubstr("[3]"));
  }
  EXPECT_THROW(default_collate({Tree(1), Tree(2.0)}), Error);
  EXPECT_THROW(default_collate({Tree::map({{"a", 1}}), Tree::map({{"b", 1}})}), Error);
  EXPECT_THROW(default_collate({}), Error);
  EXPECT_THROW(default_collate({Tree()}), Error);
}

class TextFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_text_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sub");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const fs::path& rel, const std::string& text) {
    std::ofstream(dir_ / rel, std::ios::binary) << text;
  }
  fs::path dir_;
};

TEST_F(TextFiles, ConcatenatesSortedFilesWithASeparator) {
  write("b.txt", "hello");
  write("a.txt", "abc");
  TextBytesDataset d(dir_, {.context_length = 4});
  EXPECT_EQ(d.files().size(), 2u);
  EXPECT_EQ(d.files()[0].filename(), "a.txt");
  EXPECT_EQ(d.bytes().size(), 9u);  // "abc" 0 "hello"
  EXPECT_EQ(d.size(), 2);           // windows of 5 at 0 and 4
  const Tree s0 = d.get(0), s1 = d.get(1);
  EXPECT_EQ(ints(s0.at("input_ids").tensor()), (std::vector<int64_t>{'a', 'b', 'c', 0}));
  EXPECT_EQ(ints(s0.at("labels").tensor()), (std::vector<int64_t>{'b', 'c', 0, 'h'}));
  EXPECT_EQ(ints(s1.at("input_ids").tensor()), bytes_of("hell"));
  EXPECT_EQ(ints(s1.at("labels").tensor()), bytes_of("ello"));
  EXPECT_EQ(s0.at("input_ids").tensor().dtype(), DType::kI64);
  EXPECT_THROW(d.get(2), Error);

  TextBytesDataset strided(dir_, {.context_length = 4, .stride = 1, .separator = '\n'});
  EXPECT_EQ(strided.size(), 5);
  EXPECT_EQ(ints(strided.get(4).at("labels").tensor()), bytes_of("ello"));
  EXPECT_EQ(ints(strided.get(0).at("input_ids").tensor()), bytes_of("abc\n"));
}

TEST_F(TextFiles, ReadsSubfoldersAndExplicitFileLists) {
  write("sub/z.txt", "xyz");
  write("a.txt", "ab");
  TextBytesDataset d(dir_, {.context_length = 2});
  EXPECT_EQ(d.bytes().size(), 6u);  // "ab" 0 "xyz"
  TextBytesDataset listed(std::vector<fs::path>{dir_ / "sub/z.txt"}, {.context_length = 2});
  EXPECT_EQ(listed.size(), 1);
}

TEST_F(TextFiles, ClearErrors) {
  try {
    TextBytesDataset d(dir_ / "missing", {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_THAT(e.message(), HasSubstr("missing"));
  }
  EXPECT_THROW(TextBytesDataset(dir_ / "sub", {}), Error);  // no files
  write("sub/empty.txt", "");
  try {
    TextBytesDataset d(dir_ / "sub", {.context_length = 1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("empty"));
  }
  write("a.txt", "abcd");
  try {
    TextBytesDataset d(dir_ / "a.txt", {.context_length = 4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("needs at least 5 bytes"));
  }
  EXPECT_THROW(TextBytesDataset(dir_ / "a.txt", {.context_length = 0}), Error);
}

TEST(TextBytesDataset, ReadsTheSystemLicenses) {
  const fs::path licenses = "/usr/share/common-licenses";
  if (!fs::is_directory(licenses)) GTEST_SKIP() << licenses << " is not on this machine";
  TextBytesDataset d(licenses, {.context_length = 64});
  EXPECT_GT(d.size(), 100);
  DataLoader loader(
      std::make_shared<TextBytesDataset>(licenses, TextBytesOptions{.context_length = 64}),
      {.batch_size = 4, .shuffle = true, .seed = 1, .drop_last = true});
  auto it = loader.begin();
  EXPECT_EQ(it->at("input_ids").tensor().shape(), (Shape{4, 64}));
}

TEST(SyntheticDataset, IsAPureFunctionOfSeedAndIndex) {
  SyntheticDataset a({.size = 10, .features = 5, .classes = 3, .seed = 4});
  SyntheticDataset b({.size = 10, .features = 5, .classes = 3, .seed = 4});
  SyntheticDataset c({.size = 10, .features = 5, .classes = 3, .seed = 5});
  EXPECT_EQ(a.get(7).at("x").tensor().to_vector(), b.get(7).at("x").tensor().to_vector());
  EXPECT_NE(a.get(7).at("x").tensor().to_vector(), c.get(7).at("x").tensor().to_vector());
  EXPECT_NE(a.get(7).at("x").tensor().to_vector(), a.get(6).at("x").tensor().to_vector());
  EXPECT_EQ(a.get(7).at("index").tensor().item<int64_t>(), 7);
  const int64_t y = a.get(3).at("y").tensor().item<int64_t>();
  EXPECT_GE(y, 0);
  EXPECT_LT(y, 3);
  EXPECT_THROW(a.get(10), Error);
}

}  // namespace
}  // namespace braid::nn
