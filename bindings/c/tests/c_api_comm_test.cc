// Communicators of the C ABI inside one process: one rank through braidCommInitExplicit and a
// unique id (every collective against the identity it reduces to), configuration checks,
// and two ranks as threads for what needs a peer: abort and destroy with a request in
// flight, and a split whose keys would reorder the ranks.
#include <arpa/inet.h>
#include <braid.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string last_error() {
  return braidGetLastError();
}

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

braidConfig_t config_with_timeout(int64_t ms) {
  braidConfig_t c = BRAID_CONFIG_INITIALIZER;
  c.timeout_ms = ms;
  return c;
}

braidComm_t one_rank_comm() {
  braidComm_t comm = nullptr;
  const braidConfig_t config = config_with_timeout(20000);
  EXPECT_EQ(braidCommInitExplicit(&comm, "127.0.0.1", free_port(), "one-rank", 0, 1, &config),
            braidSuccess)
      << last_error();
  return comm;
}

TEST(CApiOneRank, EveryCollectiveIsItsIdentity) {
  braidComm_t comm = one_rank_comm();
  ASSERT_NE(comm, nullptr);
  int n = 0, rank = -1;
  const char* backend = nullptr;
  ASSERT_EQ(braidCommCount(comm, &n), braidSuccess);
  ASSERT_EQ(braidCommUserRank(comm, &rank), braidSuccess);
  ASSERT_EQ(braidCommGetBackend(comm, &backend), braidSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(rank, 0);
  EXPECT_STREQ(backend, "shm");

  const std::vector<float> in = {1.5f, -2.0f, 3.25f};
  std::vector<float> out(3, 0.0f);
  auto reset = [&] { std::fill(out.begin(), out.end(), 0.0f); };
  ASSERT_EQ(
      braidAllReduce(in.data(), out.data(), 3, braidFloat32, braidMax, comm, nullptr, nullptr),
      braidSuccess)
      << last_error();
  EXPECT_EQ(out, in);
  reset();
  ASSERT_EQ(braidBroadcast(in.data(), out.data(), 3, braidFloat32, 0, comm, nullptr, nullptr),
            braidSuccess);
  EXPECT_EQ(out, in);
  reset();
  ASSERT_EQ(
      braidReduce(in.data(), out.data(), 3, braidFloat32, braidSum, 0, comm, nullptr, nullptr),
      braidSuccess);
  EXPECT_EQ(out, in);
  reset();
  ASSERT_EQ(braidAllGather(in.data(), out.data(), 3, braidFloat32, comm, nullptr, nullptr),
            braidSuccess);
  EXPECT_EQ(out, in);
  reset();
  ASSERT_EQ(
      braidReduceScatter(in.data(), out.data(), 3, braidFloat32, braidSum, comm, nullptr, nullptr),
      braidSuccess);
  EXPECT_EQ(out, in);
  reset();
  ASSERT_EQ(braidAllToAll(in.data(), out.data(), 3, braidFloat32, comm, nullptr, nullptr),
            braidSuccess);
  EXPECT_EQ(out, in);
  reset();
  const size_t counts[1] = {3}, displs[1] = {0};
  ASSERT_EQ(braidAllToAllv(in.data(), counts, displs, out.data(), counts, displs, braidFloat32,
                           comm, nullptr, nullptr),
            braidSuccess);
  EXPECT_EQ(out, in);
  reset();
  ASSERT_EQ(braidGather(in.data(), out.data(), 3, braidFloat32, 0, comm, nullptr, nullptr),
            braidSuccess);
  EXPECT_EQ(out, in);
  reset();
  ASSERT_EQ(braidScatter(in.data(), out.data(), 3, braidFloat32, 0, comm, nullptr, nullptr),
            braidSuccess);
  EXPECT_EQ(out, in);
  ASSERT_EQ(braidBarrier(comm, nullptr, nullptr), braidSuccess);

  // A DLPack tensor in place; a strided one is refused.
  std::vector<int64_t> values = {4, -5, 6, 7};
  int64_t shape[1] = {4}, stride2[1] = {2}, half[1] = {2};
  DLTensor t{values.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, shape, nullptr, 0};
  ASSERT_EQ(braidAllReduceTensor(&t, braidSum, comm, nullptr, nullptr), braidSuccess)
      << last_error();
  EXPECT_EQ(values, (std::vector<int64_t>{4, -5, 6, 7}));
  DLTensor strided{values.data(), {kDLCPU, 0}, 1, {kDLInt, 64, 1}, half, stride2, 0};
  EXPECT_EQ(braidAllReduceTensor(&strided, braidSum, comm, nullptr, nullptr), braidInvalidArgument);
  EXPECT_NE(last_error().find("tensor (shape [2], strides [2]) is not contiguous"),
            std::string::npos)
      << last_error();

  // Per-call options: a timeout, a wrong size, a negative timeout.
  braidCallOptions_t options = BRAID_CALL_OPTIONS_INITIALIZER;
  options.timeout_ms = 5000;
  EXPECT_EQ(braidBarrier(comm, &options, nullptr), braidSuccess);
  options.timeout_ms = -1;
  EXPECT_EQ(braidBarrier(comm, &options, nullptr), braidInvalidArgument);
  EXPECT_EQ(last_error(),
            "braidBarrier: options->timeout_ms is -1; expected > 0, or 0 for the communicator's "
            "timeout");
  options = BRAID_CALL_OPTIONS_INITIALIZER;
  options.size += 8;
  EXPECT_EQ(braidBarrier(comm, &options, nullptr), braidInvalidArgument);
  EXPECT_NE(last_error().find("newer braid.h"), std::string::npos) << last_error();

  // Splitting one rank: a color gives a communicator of one, no color gives none.
  braidComm_t sub = nullptr;
  ASSERT_EQ(braidCommSplit(comm, 5, 0, &sub), braidSuccess) << last_error();
  ASSERT_NE(sub, nullptr);
  ASSERT_EQ(braidCommCount(sub, &n), braidSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(braidCommDestroy(sub), braidSuccess);
  sub = reinterpret_cast<braidComm_t>(&n);  // must be overwritten
  ASSERT_EQ(braidCommSplit(comm, BRAID_SPLIT_NOCOLOR, 0, &sub), braidSuccess);
  EXPECT_EQ(sub, nullptr);
  EXPECT_EQ(braidCommSplit(comm, -2, 0, &sub), braidInvalidArgument);
  EXPECT_EQ(last_error(),
            "braidCommSplit: rank 0 passed color -2; expected >= 0 or BRAID_SPLIT_NOCOLOR (-1)");

  // Requests: a finished request tests done and frees.
  braidRequest_t request = nullptr;
  float y = 2.0f;
  ASSERT_EQ(braidAllReduce(&y, &y, 1, braidFloat32, braidSum, comm, nullptr, &request),
            braidSuccess);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(braidRequestWait(request), braidSuccess);
  int done = 0;
  EXPECT_EQ(braidRequestTest(request, &done), braidSuccess);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(braidRequestFree(request), braidSuccess);
  EXPECT_EQ(y, 2.0f);
  EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
}

TEST(CApiOneRank, CollectiveArgumentsAreCheckedAndNamed) {
  braidComm_t comm = one_rank_comm();
  ASSERT_NE(comm, nullptr);
  float x[2] = {};
  size_t counts[1] = {2};
  struct Case {
    std::function<braidResult_t()> call;
    braidResult_t result;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[&] {
         return braidAllReduce(nullptr, x, 2, braidFloat32, braidSum, comm, nullptr, nullptr);
       },
       braidInvalidArgument,
       "braidAllReduce: sendbuff is NULL with count 2; expected a buffer of 2 elements"},
      {[&] { return braidBroadcast(x, x, 2, braidFloat32, 1, comm, nullptr, nullptr); },
       braidInvalidArgument, "braidBroadcast: root 1 is outside the communicator's ranks [0, 1)"},
      {[&] {
         return braidReduce(x, nullptr, 2, braidFloat32, braidSum, 0, comm, nullptr, nullptr);
       },
       braidInvalidArgument,
       "braidReduce: recvbuff (on the root) is NULL with count 2; expected a buffer of 2 elements"},
      {[&] { return braidAllGather(x, x, SIZE_MAX, braidFloat32, comm, nullptr, nullptr); },
       braidInvalidArgument,
       "braidAllGather: sendcount 18446744073709551615 is too large; expected at most "
       "9223372036854775807 elements"},
      {[&] {
         return braidReduceScatter(x, x, 1, braidFloat32, static_cast<braidRedOp_t>(-1), comm,
                                   nullptr, nullptr);
       },
       braidInvalidArgument,
       "braidReduceScatter: op -1 is not a braidRedOp_t; expected braidSum (0), braidProd, "
       "braidMin, braidMax or braidAvg (4)"},
      {[&] {
         return braidAllToAll(x, x, 1, static_cast<braidDataType_t>(12), comm, nullptr, nullptr);
       },
       braidInvalidArgument,
       "braidAllToAll: datatype 12 is not a braidDataType_t; expected braidFloat64 (0) .. "
       "braidBool (11)"},
      {[&] {
         return braidAllToAllv(x, counts, nullptr, x, counts, counts, braidFloat32, comm, nullptr,
                               nullptr);
       },
       braidInvalidArgument, "braidAllToAllv: sdispls is NULL"},
      {[&] { return braidGather(x, x, 1, braidFloat32, 3, comm, nullptr, nullptr); },
       braidInvalidArgument, "braidGather: root 3 is outside the communicator's ranks [0, 1)"},
      {[&] { return braidScatter(nullptr, x, 1, braidFloat32, 0, comm, nullptr, nullptr); },
       braidInvalidArgument,
       "braidScatter: sendbuff (on the root) is NULL with count 1; expected a buffer of 1 "
       "elements"},
      {[&] { return braidSend(x, 1, braidFloat32, 0, 0, comm, nullptr, nullptr); },
       braidInvalidArgument,
       "braidSend: peer 0 is this rank itself; expected another rank of the communicator"},
      {[&] { return braidRecv(x, 1, braidFloat32, 1, 0, comm, nullptr, nullptr); },
       braidInvalidArgument, "braidRecv: peer 1 is outside the communicator's ranks [0, 1)"},
      {[&] { return braidAllReduceTensor(nullptr, braidSum, comm, nullptr, nullptr); },
       braidInvalidArgument, "braidAllReduceTensor: tensor is NULL"},
      {[&] { return braidRequestTest(nullptr, nullptr); }, braidInvalidArgument,
       "braidRequestTest: request is NULL"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.call(), c.result) << c.message;
    EXPECT_EQ(last_error(), c.message);
  }
  // A refused call with a request pointer leaves no request behind.
  braidRequest_t request = reinterpret_cast<braidRequest_t>(x);
  EXPECT_EQ(braidAllReduce(nullptr, x, 2, braidFloat32, braidSum, comm, nullptr, &request),
            braidInvalidArgument);
  EXPECT_EQ(request, nullptr);
  // Zero elements need no buffers.
  EXPECT_EQ(braidAllReduce(nullptr, nullptr, 0, braidFloat32, braidSum, comm, nullptr, nullptr),
            braidSuccess)
      << last_error();
  EXPECT_EQ(braidBarrier(comm, nullptr, nullptr), braidSuccess);  // still usable
  EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
}

TEST(CApiCreate, ConfigurationAndAddressesAreChecked) {
  braidComm_t comm = reinterpret_cast<braidComm_t>(&comm);
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.size = 4;
  EXPECT_EQ(braidCommInitFromEnv(&comm, &config), braidInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(last_error().find("braidCommInitFromEnv: config->size is 4, expected"),
            std::string::npos)
      << last_error();
  config = BRAID_CONFIG_INITIALIZER;
  config.backend = "";
  EXPECT_EQ(braidCommInitFromEnv(&comm, &config), braidInvalidArgument);
  EXPECT_NE(last_error().find("config->backend is ''"), std::string::npos) << last_error();
  config = BRAID_CONFIG_INITIALIZER;
  config.timeout_ms = -5;
  EXPECT_EQ(braidCommInitFromEnv(&comm, &config), braidInvalidArgument);
  EXPECT_NE(last_error().find("config->timeout_ms is -5"), std::string::npos) << last_error();

  EXPECT_EQ(braidCommInitExplicit(&comm, "127.0.0.1", 0, "t", 0, 1, nullptr), braidInvalidArgument);
  EXPECT_EQ(last_error(),
            "braidCommInitExplicit: store_port 0 is not in 1..65535 (every rank must know it, so "
            "0 cannot be used)");
  EXPECT_EQ(braidCommInitExplicit(&comm, "127.0.0.1", 29555, "", 0, 1, nullptr),
            braidInvalidArgument);
  EXPECT_NE(last_error().find("token is ''"), std::string::npos);
  EXPECT_EQ(braidCommInitExplicit(&comm, "127.0.0.1", 29555, "t", 2, 2, nullptr),
            braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidCommInitExplicit: rank 2 is outside [0, size = 2)");
  EXPECT_EQ(braidCommInitExplicit(&comm, nullptr, 29555, "t", 0, 1, nullptr), braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidCommInitExplicit: store_host is NULL");
  // An unknown backend is refused by the group, naming it.
  config = config_with_timeout(20000);
  config.backend = "carrier-pigeon";
  EXPECT_NE(braidCommInitExplicit(&comm, "127.0.0.1", free_port(), "t", 0, 1, &config),
            braidSuccess);
  EXPECT_NE(last_error().find("carrier-pigeon"), std::string::npos) << last_error();
  EXPECT_EQ(comm, nullptr);
}

TEST(CApiUniqueId, OneRankFromAnIdAndIdsThatDoNotParse) {
  braidUniqueId id;
  ASSERT_EQ(braidGetUniqueId(&id), braidSuccess) << last_error();
  EXPECT_EQ(std::string(id.internal).rfind("braid-uid-1 127.0.0.1 ", 0), 0u) << id.internal;
  braidComm_t comm = nullptr;
  const braidConfig_t config = config_with_timeout(20000);
  ASSERT_EQ(braidCommInitRank(&comm, 1, id, 0, &config), braidSuccess) << last_error();
  int v = 3;
  ASSERT_EQ(braidAllReduce(&v, &v, 1, braidInt32, braidSum, comm, nullptr, nullptr), braidSuccess);
  EXPECT_EQ(v, 3);
  EXPECT_EQ(braidCommDestroy(comm), braidSuccess);

  auto refused = [&](const std::string& text, const std::string& why) {
    braidUniqueId bad;
    std::memset(bad.internal, 'x', sizeof bad.internal);
    if (text.size() < sizeof bad.internal) std::memcpy(bad.internal, text.c_str(), text.size() + 1);
    braidComm_t c = nullptr;
    EXPECT_EQ(braidCommInitRank(&c, 1, bad, 0, &config), braidInvalidArgument) << text;
    EXPECT_NE(last_error().find("braidCommInitRank: id does not parse (" + why), std::string::npos)
        << last_error();
    EXPECT_EQ(c, nullptr);
  };
  refused(std::string(200, 'x'), "no terminating NUL");
  refused("", "not a braid unique id");
  refused("braid-uid-1 127.0.0.1 0 0123456789abcdef0123456789abcdef", "port '0'");
  refused("braid-uid-1 127.0.0.1 70000 0123456789abcdef0123456789abcdef", "port '70000'");
  refused("braid-uid-1 127.0.0.1 29500 notatoken", "the token is not 32 hex digits");
  refused("braid-uid-1 127.0.0.1 29500 0123456789abcdef0123456789abcdef extra", "trailing text");
  EXPECT_EQ(braidCommInitRank(&comm, 0, id, 0, &config), braidInvalidArgument);
  EXPECT_EQ(last_error(), "braidCommInitRank: nranks is 0; expected >= 1");

  ASSERT_EQ(setenv("BRAID_UNIQUE_ID_ADDR", "two words", 1), 0);
  EXPECT_EQ(braidGetUniqueId(&id), braidInvalidArgument);
  EXPECT_NE(last_error().find("BRAID_UNIQUE_ID_ADDR='two words' is not a host"), std::string::npos)
      << last_error();
  ASSERT_EQ(unsetenv("BRAID_UNIQUE_ID_ADDR"), 0);
}

// ---- two ranks as threads --------------------------------------------------------------------

// Runs fn(rank, comm) on two threads, each with its rank of one communicator (rank 0 hosts
// the store). The communicators are the functions' to destroy or abort.
void two_ranks(int64_t timeout_ms, const std::function<void(int, braidComm_t)>& fn) {
  const int port = free_port();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      braidComm_t comm = nullptr;
      const braidConfig_t config = config_with_timeout(timeout_ms);
      ASSERT_EQ(braidCommInitExplicit(&comm, "127.0.0.1", port, "two-threads", rank, 2, &config),
                braidSuccess)
          << last_error();
      fn(rank, comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CApiTwoRanks, AbortReturnsAtOnceAndARunningRequestFailsWithPeerLost) {
  std::atomic<bool> rank0_done{false};
  two_ranks(20000, [&](int rank, braidComm_t comm) {
    if (rank == 1) {
      // Never joins rank 0's all_reduce; waits until rank 0 is through, then leaves.
      while (!rank0_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
      return;
    }
    float x = 1.0f;
    braidCallOptions_t options = BRAID_CALL_OPTIONS_INITIALIZER;
    options.timeout_ms = 3000;
    braidRequest_t request = nullptr;
    ASSERT_EQ(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, &options, &request),
              braidSuccess);
    const auto start = Clock::now();
    EXPECT_EQ(braidCommAbort(comm), braidSuccess);
    // Did not wait for the call (which cannot end before its 3 s deadline).
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(2000));
    int done = -1;
    const braidResult_t tested = braidRequestTest(request, &done);
    EXPECT_EQ(tested, braidInProgress);  // the call runs on until its deadline
    EXPECT_EQ(done, 0);
    EXPECT_EQ(braidRequestWait(request), braidPeerLost);
    EXPECT_NE(last_error().find("braidRequestWait: the communicator was aborted"),
              std::string::npos)
        << last_error();
    EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(2000));  // ended at its deadline
    EXPECT_EQ(braidRequestTest(request, &done), braidPeerLost);
    EXPECT_EQ(done, 1);
    EXPECT_NE(last_error().find("braidRequestTest: the communicator was aborted"),
              std::string::npos)
        << last_error();
    EXPECT_EQ(braidRequestFree(request), braidSuccess);
    rank0_done = true;
  });
}

TEST(CApiTwoRanks, DestroyWaitsForTheRequestsInFlight) {
  two_ranks(20000, [&](int rank, braidComm_t comm) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      int64_t v = 2;
      EXPECT_EQ(braidAllReduce(&v, &v, 1, braidInt64, braidSum, comm, nullptr, nullptr),
                braidSuccess)
          << last_error();
      EXPECT_EQ(v, 3);
      EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
      return;
    }
    int64_t v = 1;
    braidRequest_t request = nullptr;
    ASSERT_EQ(braidAllReduce(&v, &v, 1, braidInt64, braidSum, comm, nullptr, &request),
              braidSuccess);
    const auto start = Clock::now();
    EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
    EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150));  // waited for rank 1
    int done = 0;
    EXPECT_EQ(braidRequestTest(request, &done), braidSuccess) << last_error();
    EXPECT_EQ(done, 1);
    EXPECT_EQ(v, 3);
    EXPECT_EQ(braidRequestFree(request), braidSuccess);
  });
}

TEST(CApiTwoRanks, SplitRefusesKeysThatReorderTheRanksOnEveryRank) {
  two_ranks(20000, [&](int rank, braidComm_t comm) {
    braidComm_t sub = nullptr;
    EXPECT_EQ(braidCommSplit(comm, 0, 1 - rank, &sub), braidNotSupported);
    EXPECT_EQ(last_error(),
              "braidCommSplit: color 0 orders its ranks by key as [1, 0] (ranks of comm), but "
              "braid's subgroups keep comm's rank order [0, 1]; expected keys that do not "
              "decrease with the rank (or all equal)");
    EXPECT_EQ(sub, nullptr);
    // Equal keys keep the order; the parent is still usable.
    ASSERT_EQ(braidCommSplit(comm, 0, 7, &sub), braidSuccess) << last_error();
    int sub_rank = -1;
    EXPECT_EQ(braidCommUserRank(sub, &sub_rank), braidSuccess);
    EXPECT_EQ(sub_rank, rank);
    EXPECT_EQ(braidCommDestroy(sub), braidSuccess);
    EXPECT_EQ(braidBarrier(comm, nullptr, nullptr), braidSuccess);
    EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
  });
}

}  // namespace
