// SwapStore (tensor/include/braid/tensor/swap_store.h): round trips, many keys, prefetch,
// the memory limit, deadlines through an injected hook, and I/O errors naming the file.
#include "braid/tensor/swap_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/tensor/ops.h"

namespace braid {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ::testing::HasSubstr;

class SwapStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_swap_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  SwapStoreOptions options() const {
    SwapStoreOptions o;
    o.folder = dir_;
    o.tag = "t0";
    return o;
  }
  fs::path dir_;
};

Tensor random_tensor(uint64_t seed, Shape shape, DType dtype = DType::kF32) {
  Generator gen(seed);
  return Tensor::randn(std::move(shape), DType::kF32, &gen).to(dtype);
}

// "k<i>" (appended rather than "k" + ..., which trips GCC 12's -Wrestrict false positive).
std::string key_of(int i) {
  std::string key = "k";
  key += std::to_string(i);
  return key;
}

// The error `fn` throws (or a failure when it throws nothing).
template <typename Fn>
Error error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no braid::Error thrown";
  return Error(ErrorKind::kInternal, "none");
}

TEST_F(SwapStoreTest, RoundTripsDtypesShapesAndViews) {
  SwapStore store(options());
  std::vector<std::pair<std::string, Tensor>> cases = {
      {"f32", random_tensor(1, {3, 5})},
      {"bf16", random_tensor(2, {7}, DType::kBF16)},
      {"f16", random_tensor(3, {2, 2, 2}, DType::kF16)},
      {"i64", Tensor::arange(11)},
      {"scalar", Tensor::full({}, 2.5)},
      {"empty", Tensor::empty({0, 4})},
      {"transposed", random_tensor(4, {4, 6}).t()},  // written in C order
  };
  size_t bytes = 0;
  for (const auto& [key, t] : cases) {
    store.put(key, t);
    bytes += t.nbytes();
  }
  store.flush();
  SwapStoreStats s = store.stats();
  EXPECT_EQ(s.keys, cases.size());
  EXPECT_EQ(s.file_bytes, bytes);
  EXPECT_EQ(s.resident_bytes, 0u);  // written, so dropped
  EXPECT_EQ(s.writes, cases.size());
  for (const auto& [key, t] : cases) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(fs::exists(store.file(key)));
    EXPECT_EQ(fs::file_size(store.file(key)), t.nbytes());
    const Tensor back = store.get(key);
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_TRUE(back.is_contiguous());
    EXPECT_TRUE(equal(back, t));
    store.release(key);
  }
  EXPECT_EQ(store.stats().resident_bytes, 0u);
}

TEST_F(SwapStoreTest, ManyKeysPrefetchThenGetOnSeveralThreads) {
  SwapStoreOptions o = options();
  o.io_threads = 3;
  SwapStore store(o);
  constexpr int kKeys = 200;
  std::vector<Tensor> ts;
  for (int i = 0; i < kKeys; ++i) {
    ts.push_back(random_tensor(100 + i, {1 + (i * 37) % 301}));
    store.put(key_of(i), ts.back());
  }
  store.flush();
  for (int i = 0; i < kKeys; ++i) store.prefetch(key_of(i));
  for (int i = kKeys - 1; i >= 0; --i) {  // any order
    const std::string key = key_of(i);
    ASSERT_TRUE(equal(store.get(key), ts[i])) << key;
    store.release(key);
  }
  const SwapStoreStats s = store.stats();
  EXPECT_EQ(s.reads, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(s.resident_bytes, 0u);
}

TEST_F(SwapStoreTest, GetDuringAWriteAndPutReplaces) {
  std::promise<void> open_gate;
  std::shared_future<void> gate = open_gate.get_future().share();
  SwapStoreOptions o = options();
  o.before_io = [gate](SwapOp op, const std::string&) {
    if (op == SwapOp::kWrite) gate.wait();
  };
  SwapStore store(o);
  const Tensor a = random_tensor(5, {64});
  store.put("x", a);
  EXPECT_TRUE(store.write_pending("x"));
  store.prefetch("x");  // asked for while the write is pending: the memory stays, no read
  open_gate.set_value();
  EXPECT_TRUE(equal(store.get("x"), a));
  EXPECT_EQ(store.stats().reads, 0u);
  EXPECT_EQ(store.stats().resident_bytes, a.nbytes());
  const Tensor b = random_tensor(6, {3, 3}, DType::kBF16);  // another size and dtype
  store.put("x", b);
  store.flush();
  EXPECT_EQ(store.stats().file_bytes, b.nbytes());
  EXPECT_TRUE(equal(store.get("x"), b));
  // Update in place and put back: the usual read-modify-write cycle.
  Tensor c = store.get("x");
  c.fill_(1.0);
  store.put("x", c);
  store.wait_written("x");
  EXPECT_FALSE(store.write_pending("x"));
  EXPECT_TRUE(equal(store.get("x"), Tensor::ones({3, 3}, DType::kBF16)));
}

TEST_F(SwapStoreTest, PrefetchStaysUnderTheMemoryLimit) {
  SwapStoreOptions o = options();
  constexpr int64_t kElems = 1000;
  const size_t one = kElems * sizeof(float);
  o.max_resident_bytes = 3 * one;
  SwapStore store(o);
  std::vector<Tensor> ts;
  for (int i = 0; i < 10; ++i) {
    ts.push_back(random_tensor(200 + i, {kElems}));
    store.put(key_of(i), ts.back());
  }
  store.flush();
  store.reset_peak();
  for (int i = 0; i < 10; ++i) store.prefetch(key_of(i));
  for (int i = 0; i < 10; ++i) {
    const std::string key = key_of(i);
    ASSERT_TRUE(equal(store.get(key), ts[i]));
    store.release(key);
  }
  EXPECT_LE(store.stats().peak_resident_bytes, 3 * one);
  EXPECT_GE(store.stats().peak_resident_bytes, one);
}

TEST_F(SwapStoreTest, GetPastItsDeadlineNamesTheKeyAndFile) {
  std::promise<void> open_gate;
  std::shared_future<void> gate = open_gate.get_future().share();
  SwapStoreOptions o = options();
  o.before_io = [gate](SwapOp op, const std::string& key) {
    if (op == SwapOp::kRead && key == "slow") gate.wait();
  };
  SwapStore store(o);
  const Tensor t = random_tensor(7, {16});
  store.put("slow", t);
  store.flush();
  store.prefetch("slow");  // the I/O thread now blocks in the hook
  const Error e = error_of([&] { store.get("slow", milliseconds(1)); });
  EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
  EXPECT_THAT(e.message(), HasSubstr("get('slow')"));
  EXPECT_THAT(e.message(), HasSubstr(store.file("slow").string()));
  open_gate.set_value();
  EXPECT_TRUE(equal(store.get("slow"), t));  // the read completes once unblocked
}

TEST_F(SwapStoreTest, FailedWritesStickUntilPutAgain) {
  std::atomic<bool> fail{true};
  SwapStoreOptions o = options();
  o.before_io = [&fail](SwapOp op, const std::string&) {
    if (op == SwapOp::kWrite && fail.load()) BRAID_FAIL(kIo, "injected write failure");
  };
  SwapStore store(o);
  const Tensor t = random_tensor(8, {8});
  store.put("w", t);
  EXPECT_EQ(error_of([&] { store.flush(); }).kind(), ErrorKind::kIo);
  EXPECT_EQ(error_of([&] { store.get("w"); }).kind(), ErrorKind::kIo);
  EXPECT_EQ(error_of([&] { store.wait_written("w"); }).kind(), ErrorKind::kIo);
  EXPECT_EQ(store.stats().resident_bytes, t.nbytes());  // the only good copy is kept
  fail = false;
  store.put("w", t);
  store.flush();
  EXPECT_TRUE(equal(store.get("w"), t));
}

TEST_F(SwapStoreTest, FileRemovedOrTruncatedUnderTheStoreIsIoNamingIt) {
  SwapStore store(options());
  store.put("gone", random_tensor(9, {32}));
  store.put("cut", random_tensor(10, {32}));
  store.flush();
  const fs::path gone = store.file("gone");
  fs::remove(gone);
  Error e = error_of([&] { store.get("gone"); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_THAT(e.message(), HasSubstr(gone.string()));
  EXPECT_THAT(e.message(), HasSubstr("No such file or directory"));
  // A failed read is reported once; the next get tries again (and fails again here).
  EXPECT_EQ(error_of([&] { store.get("gone"); }).kind(), ErrorKind::kIo);

  const fs::path cut = store.file("cut");
  fs::resize_file(cut, 10);
  e = error_of([&] { store.get("cut"); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_THAT(e.message(), HasSubstr(cut.string()));
  EXPECT_THAT(e.message(), HasSubstr("short read"));
  e = error_of([&] { store.map("cut"); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_THAT(e.message(), HasSubstr(cut.string()));
}

// A write the file system refuses part-way (as on a full disk): the file size limit makes
// write() fail with EFBIG after the first bytes.
TEST_F(SwapStoreTest, ARefusedWriteIsIoNamingTheFileAndErrno) {
  SwapStore store(options());
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  store.put("big", random_tensor(11, {4096}));
  Error e = error_of([&] { store.flush(); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_THAT(e.message(), HasSubstr(store.file("big").string()));
  EXPECT_THAT(e.message(), HasSubstr("File too large"));
  EXPECT_THAT(e.message(), HasSubstr("of 16384 bytes"));
}

TEST_F(SwapStoreTest, BadFoldersAreIoNamingTheOption) {
  SwapStoreOptions o = options();
  o.option = "offload_optimizer_nvme_path";
  o.folder = dir_ / "missing";
  Error e = error_of([&] { SwapStore s(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_THAT(e.message(), HasSubstr("offload_optimizer_nvme_path"));
  EXPECT_THAT(e.message(), HasSubstr((dir_ / "missing").string()));
  EXPECT_THAT(e.message(), HasSubstr("No such file or directory"));

  std::ofstream(dir_ / "file") << "x";
  o.folder = dir_ / "file";
  e = error_of([&] { SwapStore s(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_THAT(e.message(), HasSubstr("Not a directory"));

  o.folder.clear();
  EXPECT_EQ(error_of([&] { SwapStore s(o); }).kind(), ErrorKind::kInvalidArgument);
  o = options();
  o.tag = "a/b";
  EXPECT_EQ(error_of([&] { SwapStore s(o); }).kind(), ErrorKind::kInvalidArgument);
  o = options();
  o.io_threads = 0;
  EXPECT_EQ(error_of([&] { SwapStore s(o); }).kind(), ErrorKind::kInvalidArgument);
}

TEST_F(SwapStoreTest, ReadOnlyFolderIsIo) {
  const fs::path ro = dir_ / "ro";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(ro.c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: permissions not enforced";
  SwapStoreOptions o = options();
  o.folder = ro;
  const Error e = error_of([&] { SwapStore s(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_THAT(e.message(), HasSubstr("Permission denied"));
  EXPECT_THAT(e.message(), HasSubstr(ro.string()));
}

TEST_F(SwapStoreTest, FilesAreUniquePerStoreAndRemovedAtTheEnd) {
  fs::path first, second;
  {
    SwapStore a(options());
    SwapStore b(options());
    first = a.directory();
    second = b.directory();
    EXPECT_NE(first, second);
    EXPECT_THAT(first.filename().string(), HasSubstr("t0-" + std::to_string(::getpid())));
    a.put("k", random_tensor(12, {5}));
    b.put("k", random_tensor(13, {5}));
    a.flush();
    b.flush();
    EXPECT_EQ(a.file("k").parent_path(), first);
    EXPECT_TRUE(fs::exists(a.file("k")));
  }
  EXPECT_FALSE(fs::exists(first));
  EXPECT_FALSE(fs::exists(second));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SwapStoreTest, MapEraseAndUnknownKeys) {
  SwapStore store(options());
  const Tensor t = random_tensor(14, {6, 7});
  store.put("m", t);
  {
    const Tensor view = store.map("m");  // waits for the write
    EXPECT_TRUE(equal(view, t));
    EXPECT_EQ(error_of([&] { store.put("m", t); }).kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(error_of([&] { store.erase("m"); }).kind(), ErrorKind::kInvalidArgument);
  }
  store.put("m", t);  // the view is gone
  const fs::path file = store.file("m");
  store.erase("m");
  EXPECT_FALSE(store.contains("m"));
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(store.stats().file_bytes, 0u);
  const Error e = error_of([&] { store.get("m"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_THAT(e.message(), HasSubstr("get('m')"));
  EXPECT_EQ(error_of([&] { store.prefetch("nope"); }).kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(error_of([&] { store.put("u", Tensor()); }).kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace braid
