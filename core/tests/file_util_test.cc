// Tests of AtomicFile, write_file_atomic, read_file and MappedFile: content round trips,
// the target left intact when a write is abandoned or fails, and kIo messages that name the
// path and the OS reason.
#include "braid/core/file_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "braid/core/error.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("braid_file_util_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every entry of the folder: used to prove no temporary file was left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename());
    return out;
  }

  static void write_plain(const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
  }

  fs::path dir_;
};

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

TEST_F(FileUtilTest, WriteAtomicThenReadGivesTheBytes) {
  const fs::path p = dir_ / "a.bin";
  std::string bytes = "hello";
  bytes.push_back('\0');
  bytes += "world";
  write_file_atomic(p, bytes);
  EXPECT_EQ(read_file(p), bytes);
  EXPECT_EQ(entries(), std::vector<std::string>{"a.bin"});
}

TEST_F(FileUtilTest, WriteAtomicReplacesAnExistingFile) {
  const fs::path p = dir_ / "a.bin";
  write_plain(p, "old content that is longer");
  write_file_atomic(p, "new");
  EXPECT_EQ(read_file(p), "new");
  EXPECT_EQ(entries().size(), 1u);
}

TEST_F(FileUtilTest, TemporaryFileLivesBesideTheTarget) {
  const fs::path p = dir_ / "target.safetensors";
  AtomicFile out(p);
  EXPECT_EQ(out.temp_path().parent_path(), dir_);
  EXPECT_NE(out.temp_path(), p);
  EXPECT_TRUE(fs::exists(out.temp_path()));
  EXPECT_FALSE(fs::exists(p));  // nothing visible under the target name before commit
}

TEST_F(FileUtilTest, AbandonedWriteLeavesOldContentAndNoTemporary) {
  const fs::path p = dir_ / "ckpt";
  write_plain(p, "previous checkpoint");
  {
    AtomicFile out(p);
    out.write("half-written new checkp");
  }  // destroyed without commit, as after a crash of the writer's logic
  EXPECT_EQ(read_file(p), "previous checkpoint");
  EXPECT_EQ(entries(), std::vector<std::string>{"ckpt"});
}

TEST_F(FileUtilTest, ExceptionMidWriteLeavesOldContentAndNoTemporary) {
  const fs::path p = dir_ / "ckpt";
  write_plain(p, "previous");
  EXPECT_THROW(
      {
        AtomicFile out(p);
        out.write(std::string(3 << 20, 'x'));  // past the buffer: really on disk
        throw std::runtime_error("serializer failed");
      },
      std::runtime_error);
  EXPECT_EQ(read_file(p), "previous");
  EXPECT_EQ(entries(), std::vector<std::string>{"ckpt"});
}

TEST_F(FileUtilTest, ExplicitAbortRemovesTemporary) {
  const fs::path p = dir_ / "x";
  AtomicFile out(p);
  const fs::path temp = out.temp_path();
  out.write("abc");
  out.abort();
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_FALSE(fs::exists(p));
  out.abort();  // idempotent
  const Error e = catch_error([&] { out.write("more"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
}

TEST_F(FileUtilTest, MixedSmallAndLargeWritesKeepOrder) {
  const fs::path p = dir_ / "mixed";
  std::string expected;
  AtomicFile out(p);
  for (int i = 0; i < 5; ++i) {
    const std::string small(100 + i, static_cast<char>('a' + i));
    const std::string large((1 << 20) + 7 * i, static_cast<char>('A' + i));
    out.write(small);
    out.write(large.data(), large.size());
    expected += small + large;
  }
  EXPECT_EQ(out.bytes_written(), expected.size());
  out.commit();
  EXPECT_EQ(read_file(p), expected);
}

TEST_F(FileUtilTest, WriteAfterCommitIsRejected) {
  AtomicFile out(dir_ / "f");
  out.write("x");
  out.commit();
  EXPECT_EQ(catch_error([&] { out.write("y"); }).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(catch_error([&] { out.commit(); }).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(read_file(dir_ / "f"), "x");
}

TEST_F(FileUtilTest, FailedRenameThrowsIoAndRemovesTemporary) {
  // A non-empty folder under the target name: rename() must fail.
  const fs::path p = dir_ / "occupied";
  fs::create_directories(p / "child");
  AtomicFile out(p);
  out.write("data");
  const Error e = catch_error([&] { out.commit(); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find("rename"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find(p.string()), std::string::npos) << e.message();
  EXPECT_EQ(entries(), std::vector<std::string>{"occupied"});
  EXPECT_TRUE(fs::is_directory(p / "child"));
}

TEST_F(FileUtilTest, MissingFolderNamesThePathAndReason) {
  const fs::path p = dir_ / "no" / "such" / "folder" / "f.bin";
  const Error e = catch_error([&] { AtomicFile out(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find(p.string()), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("No such file or directory"), std::string::npos) << e.message();
}

TEST_F(FileUtilTest, EmptyPathIsInvalidArgument) {
  EXPECT_EQ(catch_error([] { AtomicFile out(""); }).kind(), ErrorKind::kInvalidArgument);
}

TEST_F(FileUtilTest, ReadMissingFileNamesPath) {
  const fs::path p = dir_ / "missing.bin";
  const Error e = catch_error([&] { read_file(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(e.message().find(p.string()), std::string::npos);
  EXPECT_NE(e.message().find("No such file or directory"), std::string::npos);
}

TEST_F(FileUtilTest, MappedFileSeesTheBytes) {
  const fs::path p = dir_ / "m.bin";
  std::string bytes;
  for (int i = 0; i < 10000; ++i) bytes.push_back(static_cast<char>(i * 7));
  write_plain(p, bytes);
  const MappedFile m = MappedFile::open(p);
  ASSERT_EQ(m.size(), bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), m.size()), bytes);
  EXPECT_EQ(m.path(), p);
  EXPECT_EQ(m.bytes().size(), bytes.size());
}

TEST_F(FileUtilTest, MappedFileOfEmptyFile) {
  const fs::path p = dir_ / "empty";
  write_plain(p, "");
  const MappedFile m = MappedFile::open(p);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.data(), nullptr);
}

TEST_F(FileUtilTest, MappedFileMoveTransfersTheMapping) {
  const fs::path p = dir_ / "m";
  write_plain(p, "abcdef");
  MappedFile a = MappedFile::open(p);
  const std::byte* addr = a.data();
  MappedFile b = std::move(a);
  EXPECT_EQ(b.data(), addr);
  EXPECT_EQ(b.size(), 6u);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.data(), nullptr);
}

TEST_F(FileUtilTest, CopyOnWriteMappingNeverChangesTheFile) {
  const fs::path p = dir_ / "cow";
  write_plain(p, "original");
  {
    MappedFile m = MappedFile::open(p, MapMode::kCopyOnWrite);
    m.mutable_data()[0] = std::byte{'X'};
    EXPECT_EQ(static_cast<char>(m.data()[0]), 'X');
  }
  EXPECT_EQ(read_file(p), "original");
}

TEST_F(FileUtilTest, MappedFileErrorsNameThePath) {
  const Error missing = catch_error([&] { MappedFile::open(dir_ / "nope"); });
  EXPECT_EQ(missing.kind(), ErrorKind::kIo);
  EXPECT_NE(missing.message().find((dir_ / "nope").string()), std::string::npos);
  EXPECT_NE(missing.message().find("No such file or directory"), std::string::npos);

  const Error folder = catch_error([&] { MappedFile::open(dir_); });
  EXPECT_EQ(folder.kind(), ErrorKind::kIo);
  EXPECT_NE(folder.message().find("not a regular file"), std::string::npos) << folder.message();
}

}  // namespace
}  // namespace braid
