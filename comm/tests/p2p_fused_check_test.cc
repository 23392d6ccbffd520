// The fused cross-rank check (Note [Fused check] in comm/src/p2p_collectives.cc, docs/p2p.md,
// "Cross-rank check"): a small all_reduce, reduce, reduce_scatter, all_gather or broadcast sends
// its data in the check's own messages, so the call is the check's ceil(log2 n) rounds and
// nothing more; ranks that decide differently still agree; a mismatch between a fused and an
// unfused call is the ordinary mismatch error; and a check message that is not braid's records
// is an error naming the peer. Results against the conformance suite's reference.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../src/p2p_collectives_impl.h"
#include "braid/core/error.h"
#include "conformance/reference.h"
#include "p2p_test_helpers.h"
#include "p2p_test_transport.h"

namespace braid::p2p {
namespace {

using conformance::detail::Bytes;
using conformance::detail::first_difference;
using conformance::detail::input_bytes;
using conformance::detail::reduce_reference;
using conformance::detail::Source;
using testing::desc;
using testing::expect_ok;
using testing::Fabric;
using testing::message;
using testing::on_ranks;
using testing::RankSetup;
using testing::run;
using testing::ThreadTransport;
using testing::with;

// The thread transport, counting the messages its rank sends.
class CountingTransport final : public Transport {
 public:
  CountingTransport(std::shared_ptr<Fabric> fabric, int rank, std::atomic<int>& sends)
      : inner_(std::move(fabric), rank), sends_(sends) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::unique_ptr<Request> isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    ++sends_;
    return inner_.isend(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_.irecv(peer, tag, data, bytes);
  }
  void wait_all(std::vector<std::unique_ptr<Request>>& requests, const std::vector<int>& peers,
                Clock::time_point deadline, const std::string& what) override {
    inner_.wait_all(requests, peers, deadline, what);
  }

 private:
  ThreadTransport inner_;
  std::atomic<int>& sends_;
};

int log2_ceil(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Runs each of the five fusable kinds once on every rank with `count` f32 elements per rank
// (reduce_scatter: per block) and checks the results; sends[r][k] is how many messages rank r
// sent for kind k.
void five_kinds(int n, int64_t count, const RankSetup& base, std::vector<std::vector<int>>& sends) {
  std::vector<std::atomic<int>> counters(n);
  RankSetup setup = base;
  setup.transport = [&](std::shared_ptr<Fabric> fabric, int r) {
    return std::make_unique<CountingTransport>(std::move(fabric), r, counters[r]);
  };
  sends.assign(n, std::vector<int>(5, 0));
  const DType dt = DType::kF32;
  const size_t cb = count * 4;
  const Source s{dt, static_cast<uint64_t>(11 + n + count), n};
  const Source wide{dt, static_cast<uint64_t>(3 + n + count), n};
  expect_ok(on_ranks(n, setup, [&](int r, Backend& b) {
    const Bytes mine = input_bytes(s, r, 0, count);
    auto counted = [&](int k, const CollectiveDesc& d) {
      const int before = counters[r];
      run(b, d);
      sends[r][k] = counters[r] - before;
    };
    uint64_t seq = 0;
    {
      Bytes out(cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kAllReduce, dt, count, ++seq);
      d.send = mine.data();
      d.recv = out.data();
      counted(0, d);
      const Bytes want = reduce_reference(s, ReduceOp::kSum, 0, count);
      EXPECT_EQ(first_difference(dt, out.data(), want.data(), count), "") << "all_reduce";
    }
    {
      Bytes out(cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kReduce, dt, count, ++seq);
      d.op = ReduceOp::kMax;
      d.root = 1 % n;
      d.send = mine.data();
      d.recv = out.data();
      counted(1, d);
      const Bytes want = reduce_reference(s, ReduceOp::kMax, 0, count);
      if (r == d.root) {
        EXPECT_EQ(first_difference(dt, out.data(), want.data(), count), "") << "reduce";
      }
    }
    {
      Bytes in = input_bytes(wide, r, 0, n * count), out(cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kReduceScatter, dt, count, ++seq);
      d.send = in.data();
      d.recv = out.data();
      counted(2, d);
      const Bytes want = reduce_reference(wide, ReduceOp::kSum, r * count, count);
      EXPECT_EQ(first_difference(dt, out.data(), want.data(), count), "") << "reduce_scatter";
    }
    {
      Bytes out(n * cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kAllGather, dt, count, ++seq);
      d.send = mine.data();
      d.recv = out.data();
      counted(3, d);
      for (int p = 0; p < n; ++p) {
        EXPECT_EQ(Bytes(out.begin() + p * cb, out.begin() + (p + 1) * cb),
                  input_bytes(s, p, 0, count))
            << "all_gather block " << p;
      }
    }
    {
      const int root = n - 1;
      Bytes buf = r == root ? mine : Bytes(cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kBroadcast, dt, count, ++seq);
      d.root = root;
      d.send = d.recv = buf.data();
      counted(4, d);
      EXPECT_EQ(buf, input_bytes(s, root, 0, count)) << "broadcast";
    }
  }));
}

TEST(P2pFusedCheck, ASmallCallIsTheChecksRoundsAndNothingMore) {
  for (int n : {2, 3, 5, 8}) {
    std::vector<std::vector<int>> sends;
    five_kinds(n, 9, RankSetup{}, sends);
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < 5; ++k) {
        EXPECT_EQ(sends[r][k], log2_ceil(n)) << "ranks " << n << " rank " << r << " kind " << k;
      }
    }
  }
}

TEST(P2pFusedCheck, RingForcedOrDataAboveTheLimitSendsMoreThanTheCheck) {
  constexpr int n = 4;
  std::vector<std::vector<int>> sends;
  RankSetup ring;
  ring.options = [](int) { return with(Algo::kRing); };
  five_kinds(n, 9, ring, sends);
  for (int r = 0; r < n; ++r) {  // every rank sends in the all_reduce's algorithm
    EXPECT_GT(sends[r][0], log2_ceil(n)) << "rank " << r;
  }
  // 64 KiB + 4 bytes per rank: above what travels with the header (fuse_limit), and with the
  // latency algorithms chosen up to 1 MiB.
  RankSetup large_small;
  large_small.options = [](int) {
    Options o;
    o.small_bytes = 1 << 20;
    return o;
  };
  five_kinds(n, 16385, large_small, sends);
  for (int r = 0; r < n; ++r) EXPECT_GT(sends[r][0], log2_ceil(n)) << "rank " << r;
}

// One rank forced to the bandwidth algorithms does not fuse; the others do, see that it did
// not, and all run rank 0's algorithms (here: the latency ones, unfused) to the same results.
TEST(P2pFusedCheck, RanksThatDecideDifferentlyRunTheOrdinaryAlgorithms) {
  for (int odd : {0, 2}) {
    constexpr int n = 3;
    RankSetup setup;
    setup.options = [odd](int r) { return with(r == odd ? Algo::kRing : Algo::kAuto); };
    std::vector<std::vector<int>> sends;
    five_kinds(n, 9, setup, sends);
    for (int r = 0; r < n; ++r) EXPECT_GT(sends[r][0], log2_ceil(n)) << "rank " << r;
  }
}

TEST(P2pFusedCheck, AFusedAndAnUnfusedCallAreAMismatchOnEveryRank) {
  for (int n : {2, 3}) {
    std::vector<std::string> msgs(n);
    expect_ok(on_ranks(n, Options{}, [&](int r, Backend& b) {
      const int64_t count = r == 1 ? 100000 : 4;  // rank 1's is too large to fuse
      std::vector<float> in(count, 1.0f), out(count);
      CollectiveDesc d = desc(CollectiveKind::kAllReduce, DType::kF32, count, 1);
      d.send = in.data();
      d.recv = out.data();
      auto w = b.run(d);
      ASSERT_TRUE(w->error());
      ErrorKind k{};
      msgs[r] = message(w->error(), &k);
      EXPECT_EQ(k, ErrorKind::kInvalidArgument);
    }));
    for (int r = 0; r < n; ++r) {
      EXPECT_NE(msgs[r].find("collective mismatch at group call #1"), std::string::npos) << msgs[r];
      EXPECT_NE(msgs[r].find("all_reduce f32 x 4 sum"), std::string::npos) << msgs[r];
      EXPECT_NE(msgs[r].find("all_reduce f32 x 100000 sum"), std::string::npos) << msgs[r];
    }
  }
}

// Rank 1 is not a braid group but a thread that answers the check's first round with `junk`.
std::string answer_with(const Bytes& junk) {
  auto fabric = std::make_shared<Fabric>(2);
  std::exception_ptr error;
  std::thread rank0([&] {
    try {
      BackendContext ctx;
      ctx.size = 2;
      ctx.timeout = std::chrono::milliseconds(5000);
      auto b = make_p2p_backend("p2p", ctx, std::make_unique<ThreadTransport>(fabric, 0));
      float x[4] = {1, 2, 3, 4};
      CollectiveDesc d = desc(CollectiveKind::kAllReduce, DType::kF32, 4, 1);
      d.send = d.recv = x;
      run(*b, d);
    } catch (...) {
      error = std::current_exception();
    }
  });
  ThreadTransport raw(fabric, 1);
  std::vector<std::unique_ptr<Request>> requests;
  requests.push_back(raw.isend(0, collective_tag(1, 0, 0), junk.data(), junk.size()));
  rank0.join();
  if (!error) return "no error";
  ErrorKind k{};
  const std::string m = message(error, &k);
  EXPECT_EQ(k, ErrorKind::kInvalidArgument) << m;
  return m;
}

TEST(P2pFusedCheck, ACheckMessageThatIsNotCallRecordsIsAnErrorNamingThePeer) {
  const std::string shorter = answer_with(Bytes(40, 0));  // less than one header
  EXPECT_NE(shorter.find("check message from group rank 1 (world rank 1) has 40 bytes, which are "
                         "not 1 call records"),
            std::string::npos)
      << shorter;
  const std::string longer = answer_with(Bytes(100, 0));  // a header of no data, 36 bytes more
  EXPECT_NE(longer.find("has 100 bytes, 36 more than its 1 call records"), std::string::npos)
      << longer;
  CallHeader h;  // a header that claims 1 MiB of data
  h.fused = 1;
  h.payload = 1 << 20;
  Bytes huge(sizeof(h));
  std::memcpy(huge.data(), &h, sizeof(h));
  const std::string claimed = answer_with(huge);
  EXPECT_NE(claimed.find("has 64 bytes, which are not 1 call records"), std::string::npos)
      << claimed;
}

}  // namespace
}  // namespace braid::p2p
