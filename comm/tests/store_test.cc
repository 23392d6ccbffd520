// Store conformance: every operation on every store type (InMemoryStore, FileStore, TcpStore,
// and PrefixStore over two of them), plus what is specific to FileStore and PrefixStore.
// Waits that must time out use 100-300 ms deadlines; nothing asserts on elapsed time.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "braid/comm/store.h"
#include "braid/comm/tcp_store.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using namespace std::chrono_literals;

// Runs `fn`, expects an Error of `kind`, and returns its message.
template <typename Fn>
std::string error_of(ErrorKind kind, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "expected an Error of kind " << to_string(kind);
  return {};
}

std::vector<uint8_t> bytes(std::string_view s) {
  return {s.begin(), s.end()};
}

std::string temp_path(std::string_view stem) {
  static std::atomic<int> n{0};
  return (std::filesystem::temp_directory_path() /
          (std::string(stem) + "." + std::to_string(::getpid()) + "." + std::to_string(n++)))
      .string();
}

// One store under test: `open()` returns another handle onto the same keys (a second client,
// a second FileStore on the file), as another rank would hold.
struct Harness {
  virtual ~Harness() = default;
  virtual std::shared_ptr<Store> open() = 0;
};

struct MemoryHarness : Harness {
  std::shared_ptr<Store> store = std::make_shared<InMemoryStore>(10s);
  std::shared_ptr<Store> open() override { return store; }
};

struct FileHarness : Harness {
  std::string path = temp_path("braid_store_test");
  ~FileHarness() override { std::filesystem::remove(path); }
  std::shared_ptr<Store> open() override { return std::make_shared<FileStore>(path, 10s); }
};

struct TcpHarness : Harness {
  std::string token = generate_store_token();
  TcpStoreServer server{"127.0.0.1", 0, token};
  std::shared_ptr<Store> open() override {
    return std::make_shared<TcpStore>("127.0.0.1", server.port(), token, 10s);
  }
};

template <typename Inner>
struct PrefixHarness : Harness {
  Inner inner;
  std::shared_ptr<Store> open() override {
    return std::make_shared<PrefixStore>("group0", inner.open());
  }
};

using HarnessFactory = std::function<std::unique_ptr<Harness>()>;
struct StoreKind {
  std::string name;
  HarnessFactory make;
};

class StoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    store_ = harness_->open();
  }
  std::unique_ptr<Harness> harness_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGetReturnsTheBytes) {
  std::vector<uint8_t> binary = {0, 1, 2, 255, 0, 7};
  store_->set("bin", binary);
  store_->set("empty", std::string_view{});
  store_->set("text", "hello");
  EXPECT_EQ(store_->get("bin"), binary);
  EXPECT_TRUE(store_->get("empty").empty());
  EXPECT_EQ(store_->get_string("text"), "hello");
  EXPECT_EQ(harness_->open()->get_string("text"), "hello");  // another handle sees it
}

TEST_P(StoreTest, SetReplacesTheValue) {
  store_->set("k", "first");
  store_->set("k", "second value");
  EXPECT_EQ(store_->get_string("k"), "second value");
}

TEST_P(StoreTest, LargeValueRoundTrips) {
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 131 + (i >> 11));
  store_->set("big", big);
  EXPECT_EQ(harness_->open()->get("big"), big);
}

TEST_P(StoreTest, GetWaitsForAKeySetLaterByAnotherHandle) {
  auto other = harness_->open();
  std::thread setter([&] { other->set("late", "arrived"); });
  EXPECT_EQ(store_->get_string("late"), "arrived");
  setter.join();
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyIsSetByOtherThreads) {
  std::vector<std::string> keys = {"r0", "r1", "r2", "r3"};
  std::vector<std::thread> setters;
  for (const auto& key : keys) {
    setters.emplace_back([&, key] { harness_->open()->set(key, key); });
  }
  store_->wait(keys, 10s);
  EXPECT_TRUE(store_->check(keys));
  for (auto& t : setters) t.join();
}

TEST_P(StoreTest, GetTimesOutNamingTheKeyAndTimeout) {
  auto msg = error_of(ErrorKind::kTimeout, [&] { store_->get("never_set", 100ms); });
  EXPECT_NE(msg.find("never_set"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100 ms"), std::string::npos) << msg;
}

TEST_P(StoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  store_->set("present", "1");
  auto msg = error_of(ErrorKind::kTimeout, [&] { store_->wait({"present", "absent"}, 150ms); });
  auto from = msg.find("missing keys [");
  auto to = msg.find("] of [");
  ASSERT_TRUE(from != std::string::npos && to != std::string::npos && from < to) << msg;
  std::string missing = msg.substr(from, to - from);
  EXPECT_NE(missing.find("absent"), std::string::npos) << msg;
  EXPECT_EQ(missing.find("present"), std::string::npos) << msg;
  EXPECT_NE(msg.find("150 ms"), std::string::npos) << msg;
}

TEST_P(StoreTest, WaitWithoutTimeoutUsesTheStoreTimeout) {
  store_->set_timeout(120ms);
  EXPECT_EQ(store_->timeout(), 120ms);
  auto msg = error_of(ErrorKind::kTimeout, [&] { store_->wait({"nope"}); });
  EXPECT_NE(msg.find("120 ms"), std::string::npos) << msg;
  msg = error_of(ErrorKind::kTimeout, [&] { store_->get("nope"); });
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
}

TEST_P(StoreTest, StoreStillWorksAfterATimeout) {
  EXPECT_THROW(store_->get("x", 100ms), Error);
  store_->set("x", "now");
  EXPECT_EQ(store_->get_string("x"), "now");
}

TEST_P(StoreTest, AddCreatesAtZeroAndReturnsTheNewValue) {
  EXPECT_EQ(store_->add("counter", 5), 5);
  EXPECT_EQ(store_->add("counter", -7), -2);
  EXPECT_EQ(store_->add("counter", 0), -2);
  EXPECT_EQ(store_->get_string("counter"), "-2");
  store_->set("preset", "40");
  EXPECT_EQ(store_->add("preset", 2), 42);
}

TEST_P(StoreTest, AddFromManyThreadsCountsEveryIncrement) {
  constexpr int kThreads = 6, kAdds = 40;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto handle = harness_->open();
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(handle->add("n", 1));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  // Every add returned a distinct value: 1..N, each exactly once.
  EXPECT_EQ(all.size(), size_t{kThreads * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(store_->add("n", 0), kThreads * kAdds);
}

TEST_P(StoreTest, AddRejectsNonIntegerValuesAndOverflow) {
  store_->set("text", "abc");
  auto msg = error_of(ErrorKind::kInvalidArgument, [&] { store_->add("text", 1); });
  EXPECT_NE(msg.find("text'"), std::string::npos) << msg;
  EXPECT_EQ(store_->get_string("text"), "abc");
  store_->set("max", std::to_string(INT64_MAX));
  msg = error_of(ErrorKind::kOutOfRange, [&] { store_->add("max", 1); });
  EXPECT_NE(msg.find("overflows"), std::string::npos) << msg;
  EXPECT_EQ(store_->add("max", -1), INT64_MAX - 1);  // the store is still usable
}

TEST_P(StoreTest, CompareSetFollowsTorchSemantics) {
  // Missing key, non-empty expected: no swap, returns empty, key stays missing.
  EXPECT_EQ(store_->compare_set("cs", "x", "y"), "");
  EXPECT_FALSE(store_->check({"cs"}));
  // Missing key, empty expected: creates it.
  EXPECT_EQ(store_->compare_set("cs", "", "first"), "first");
  EXPECT_EQ(store_->get_string("cs"), "first");
  // Stored value differs from expected: no swap, returns the stored value.
  EXPECT_EQ(store_->compare_set("cs", "wrong", "second"), "first");
  EXPECT_EQ(store_->get_string("cs"), "first");
  // Stored value equals expected: swaps.
  EXPECT_EQ(store_->compare_set("cs", "first", "second"), "second");
  EXPECT_EQ(store_->get_string("cs"), "second");
  // Byte overload.
  auto out = store_->compare_set("cs", bytes("second"), std::vector<uint8_t>{0, 9});
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 9}));
}

TEST_P(StoreTest, CompareSetWakesWaiters) {
  auto other = harness_->open();
  std::thread setter([&] { other->compare_set("flag", "", "up"); });
  EXPECT_EQ(store_->get_string("flag"), "up");
  setter.join();
}

TEST_P(StoreTest, CheckNeverWaits) {
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"a"}));
  store_->set("a", "1");
  EXPECT_TRUE(store_->check({"a"}));
  EXPECT_FALSE(store_->check({"a", "b"}));
  store_->wait({});  // an empty wait returns at once
}

TEST_P(StoreTest, DeleteKeyAndNumKeys) {
  int64_t before = store_->num_keys();
  store_->set("d1", "1");
  store_->set("d2", "2");
  EXPECT_EQ(store_->num_keys(), before + 2);
  EXPECT_TRUE(store_->delete_key("d1"));
  EXPECT_FALSE(store_->delete_key("d1"));
  EXPECT_EQ(store_->num_keys(), before + 1);
  EXPECT_FALSE(store_->check({"d1"}));
  EXPECT_THROW(store_->get("d1", 100ms), Error);
  EXPECT_EQ(store_->add("d1", 3), 3);  // a deleted counter restarts at 0
}

TEST_P(StoreTest, BadArgumentsAreRejectedWithClearErrors) {
  auto msg = error_of(ErrorKind::kInvalidArgument, [&] { store_->set("", "v"); });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  std::string long_key(Store::kMaxKeyBytes + 1, 'k');
  msg = error_of(ErrorKind::kInvalidArgument, [&] { store_->get(long_key, 10ms); });
  EXPECT_NE(msg.find("4096"), std::string::npos) << msg;
  std::vector<uint8_t> huge(Store::kMaxValueBytes + 1);
  msg = error_of(ErrorKind::kInvalidArgument, [&] { store_->set("huge", huge); });
  EXPECT_NE(msg.find("'huge'"), std::string::npos) << msg;
  std::vector<std::string> many(Store::kMaxKeysPerRequest + 1, "k");
  msg = error_of(ErrorKind::kInvalidArgument, [&] { store_->check(many); });
  EXPECT_NE(msg.find(std::to_string(Store::kMaxKeysPerRequest)), std::string::npos) << msg;
  msg = error_of(ErrorKind::kInvalidArgument, [&] { store_->wait({"a"}, -1ms); });
  EXPECT_NE(msg.find("negative"), std::string::npos) << msg;
  EXPECT_THROW(store_->set_timeout(-5ms), Error);
  EXPECT_FALSE(store_->check({"huge"}));  // nothing was stored
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreTest,
    ::testing::Values(StoreKind{"InMemory", [] { return std::make_unique<MemoryHarness>(); }},
                      StoreKind{"File", [] { return std::make_unique<FileHarness>(); }},
                      StoreKind{"Tcp", [] { return std::make_unique<TcpHarness>(); }},
                      StoreKind{"PrefixOverMemory",
                                [] { return std::make_unique<PrefixHarness<MemoryHarness>>(); }},
                      StoreKind{"PrefixOverTcp",
                                [] { return std::make_unique<PrefixHarness<TcpHarness>>(); }}),
    [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------

TEST(PrefixStoreTest, GroupsSharingAStoreDoNotSeeEachOther) {
  auto base = std::make_shared<InMemoryStore>(10s);
  PrefixStore a("a", base), b("b", base);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_EQ(base->get_string("a/k"), "from a");
  EXPECT_FALSE(a.check({"only_b"}));
  b.set("only_b", "1");
  EXPECT_FALSE(a.check({"only_b"}));
  EXPECT_TRUE(b.delete_key("k"));
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 10), 10);
}

TEST(PrefixStoreTest, PrefixesNest) {
  auto base = std::make_shared<InMemoryStore>(10s);
  auto outer = std::make_shared<PrefixStore>("outer", base);
  PrefixStore inner("inner", outer);
  inner.set("k", "v");
  EXPECT_EQ(base->get_string("outer/inner/k"), "v");
  EXPECT_EQ(outer->get_string("inner/k"), "v");
}

TEST(PrefixStoreTest, RejectsEmptyPrefixAndNullStore) {
  auto msg = error_of(ErrorKind::kInvalidArgument,
                      [] { PrefixStore p("", std::make_shared<InMemoryStore>()); });
  EXPECT_NE(msg.find("prefix"), std::string::npos) << msg;
  msg = error_of(ErrorKind::kInvalidArgument, [] { PrefixStore p("g", nullptr); });
  EXPECT_NE(msg.find("null"), std::string::npos) << msg;
}

TEST(PrefixStoreTest, TimeoutMessageNamesThePrefixedKey) {
  PrefixStore p("grp", std::make_shared<InMemoryStore>());
  auto msg = error_of(ErrorKind::kTimeout, [&] { p.wait({"k"}, 100ms); });
  EXPECT_NE(msg.find("grp/k"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------

TEST(FileStoreTest, SharedByTwoForkedProcesses) {
  std::string path = temp_path("braid_filestore_fork");
  constexpr int kAdds = 50;
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      FileStore store(path, 20s);
      store.wait({"parent_ready"});
      for (int i = 0; i < kAdds; ++i) store.add("count", 1);
      store.set("child_done", std::to_string(::getpid()));
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  FileStore store(path, 20s);
  store.set("parent_ready", "1");
  for (int i = 0; i < kAdds; ++i) store.add("count", 1);
  EXPECT_EQ(store.get_string("child_done"), std::to_string(child));
  EXPECT_EQ(store.add("count", 0), 2 * kAdds);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::filesystem::remove(path);
}

TEST(FileStoreTest, IgnoresATornTailAndOverwritesIt) {
  std::string path = temp_path("braid_filestore_torn");
  {
    FileStore store(path);
    store.set("kept", "yes");
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write("\x01\x05\x00\x00\x00\x09", 6);  // a set record cut short by a "crash"
  }
  FileStore store(path, 10s);
  EXPECT_EQ(store.get_string("kept"), "yes");
  EXPECT_EQ(store.num_keys(), 1);
  store.set("after", "crash");
  FileStore reopened(path, 10s);
  EXPECT_EQ(reopened.get_string("after"), "crash");
  EXPECT_EQ(reopened.num_keys(), 2);
  std::filesystem::remove(path);
}

TEST(FileStoreTest, RejectsAFileThatIsNotAStoreLog) {
  std::string path = temp_path("braid_filestore_bad");
  std::ofstream(path) << "this is not a store";
  auto msg = error_of(ErrorKind::kCorruptData, [&] { FileStore store(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  std::filesystem::remove(path);
}

TEST(FileStoreTest, RejectsACorruptRecord) {
  std::string path = temp_path("braid_filestore_rec");
  { FileStore store(path); }
  std::ofstream(path, std::ios::binary | std::ios::app)
      .write("\x07\x01\x00\x00\x00\x00\x00\x00\x00k", 10);
  auto msg = error_of(ErrorKind::kCorruptData, [&] { FileStore store(path); });
  EXPECT_NE(msg.find("bad record"), std::string::npos) << msg;
  std::filesystem::remove(path);
}

TEST(FileStoreTest, OpenFailureNamesThePath) {
  auto msg = error_of(ErrorKind::kIo, [] { FileStore store("/nonexistent_dir_braid/x/store"); });
  EXPECT_NE(msg.find("/nonexistent_dir_braid/x/store"), std::string::npos) << msg;
}

}  // namespace
}  // namespace braid
