// The point-to-point collectives (comm/src/p2p_collectives.*, docs/p2p.md) over the thread
// transport (p2p_test_transport.h): every algorithm family forced in turn against the
// conformance suite's independent reference (rank-order fold written in the test sources),
// bit for bit, at rank counts that are and are not powers of two; the errors (mismatch,
// timeout, broken group, bad tags); user send / recv between collectives; and the whole
// conformance suite with the backend registered as "p2p_threads".
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../src/p2p_collectives.h"
#include "braid/comm/store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "conformance/reference.h"
#include "conformance/registry.h"
#include "p2p_test_helpers.h"
#include "p2p_test_transport.h"

namespace braid::p2p {
namespace {

using conformance::detail::Bytes;
using conformance::detail::first_difference;
using conformance::detail::input_bytes;
using conformance::detail::reduce_reference;
using conformance::detail::Source;
using std::chrono::milliseconds;
using testing::desc;
using testing::expect_ok;
using testing::Fabric;
using testing::message;
using testing::on_ranks;
using testing::run;
using testing::ThreadTransport;
using testing::with;

const Algo kAlgos[] = {Algo::kAuto, Algo::kRing, Algo::kRd};

TEST(P2pCollectives, AllReduceSumIsBitIdenticalToTheReferenceForEveryAlgorithm) {
  for (Algo algo : kAlgos) {
    for (int n : {1, 2, 3, 4, 5, 8}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (int64_t count : {0, 1, 7, 1000, 40003}) {  // 40003 f32: above auto's 64 KiB
          const Source src{dtype, static_cast<uint64_t>(count * 7 + n), n};
          const Bytes want = reduce_reference(src, ReduceOp::kSum, 0, count);
          Options options = with(algo);
          // Segments of 1 MiB (one per block here), none, and 1001 bytes: many, not a whole
          // number of elements (the pipelined all_reduce rounds them down to whole ones), and
          // blocks whose segment counts differ by one between ranks.
          options.segment_bytes = count == 40003 ? 1001 : count == 1000 ? 0 : options.segment_bytes;
          expect_ok(on_ranks(n, options, [&](int r, Backend& b) {
            Bytes in = input_bytes(src, r, 0, count), out(want.size(), 0xee);
            CollectiveDesc d = desc(CollectiveKind::kAllReduce, dtype, count, 1);
            d.send = in.data();
            d.recv = out.data();
            run(b, d);
            EXPECT_EQ(first_difference(dtype, out.data(), want.data(), count), "")
                << "algo " << int(algo) << " ranks " << n << " " << dtype << " x " << count;
            d.seq = 2;
            d.recv = in.data();  // in place
            run(b, d);
            EXPECT_EQ(first_difference(dtype, in.data(), want.data(), count), "")
                << "in place: algo " << int(algo) << " ranks " << n << " count " << count;
          }));
        }
      }
    }
  }
}

// Ranks created with different algorithms and segment sizes run rank 0's (else they would
// wait for messages of phases their peers never send, or cut messages differently).
TEST(P2pCollectives, RankZerosAlgorithmDecidesForTheGroup) {
  constexpr int n = 3;
  constexpr int64_t count = 50000;
  const Source src{DType::kF32, 5, n};
  const Bytes want = reduce_reference(src, ReduceOp::kSum, 0, count);
  testing::RankSetup setup;
  setup.options = [](int r) {
    Options options = with(r == 0 ? Algo::kRing : Algo::kRd);
    options.segment_bytes = r == 0 ? 4000 : r == 1 ? 0 : 1 << 20;  // rank 0's decides too
    return options;
  };
  expect_ok(on_ranks(n, setup, [&](int r, Backend& b) {
    Bytes in = input_bytes(src, r, 0, count), out(want.size(), 0);
    CollectiveDesc d = desc(CollectiveKind::kAllReduce, DType::kF32, count, 1);
    d.send = in.data();
    d.recv = out.data();
    run(b, d);
    EXPECT_EQ(first_difference(DType::kF32, out.data(), want.data(), count), "");
  }));
}

// Every other collective once per algorithm family, on 5 ranks (not a power of two).
TEST(P2pCollectives, EveryCollectiveMatchesItsReference) {
  constexpr int n = 5;
  constexpr int64_t count = 9;
  const DType dt = DType::kF32;
  const size_t bytes = count * 4;
  for (Algo algo : kAlgos) {
    for (int64_t scale : {int64_t{1}, int64_t{5000}}) {  // 5000: auto picks the large paths
      const int64_t c = count * scale;
      const size_t cb = bytes * scale;
      const Source s{dt, static_cast<uint64_t>(99 + scale), n};
      expect_ok(on_ranks(n, with(algo), [&](int r, Backend& b) {
        uint64_t seq = 0;
        const Bytes mine = input_bytes(s, r, 0, c);
        std::vector<Bytes> all;
        for (int p = 0; p < n; ++p) all.push_back(input_bytes(s, p, 0, c));
        {  // broadcast from 2
          Bytes buf = r == 2 ? mine : Bytes(cb, 0);
          CollectiveDesc d = desc(CollectiveKind::kBroadcast, dt, c, ++seq);
          d.root = 2;
          d.send = d.recv = buf.data();
          run(b, d);
          EXPECT_EQ(buf, all[2]) << "broadcast";
        }
        {  // reduce max to 1
          Bytes out(cb, 0);
          CollectiveDesc d = desc(CollectiveKind::kReduce, dt, c, ++seq);
          d.op = ReduceOp::kMax;
          d.root = 1;
          d.send = mine.data();
          d.recv = out.data();
          run(b, d);
          if (r == 1) {
            const Bytes want = reduce_reference(s, ReduceOp::kMax, 0, c);
            EXPECT_EQ(first_difference(dt, out.data(), want.data(), c), "") << "reduce";
          }
        }
        {  // all_gather
          Bytes out(n * cb, 0);
          CollectiveDesc d = desc(CollectiveKind::kAllGather, dt, c, ++seq);
          d.send = mine.data();
          d.recv = out.data();
          run(b, d);
          for (int p = 0; p < n; ++p) {
            EXPECT_EQ(0, std::memcmp(out.data() + p * cb, all[p].data(), cb)) << "all_gather " << p;
          }
        }
        {  // reduce_scatter sum, premul_sum all_reduce
          std::vector<Bytes> wide;
          const Source ws{dt, static_cast<uint64_t>(7 + scale), n};
          Bytes in = input_bytes(ws, r, 0, n * c), out(cb, 0);
          CollectiveDesc d = desc(CollectiveKind::kReduceScatter, dt, c, ++seq);
          d.send = in.data();
          d.recv = out.data();
          run(b, d);
          const Bytes want = reduce_reference(ws, ReduceOp::kSum, r * c, c);
          EXPECT_EQ(first_difference(dt, out.data(), want.data(), c), "") << "reduce_scatter";
          d = desc(CollectiveKind::kAllReduce, dt, c, ++seq);
          d.op = ReduceOp::kPremulSum;
          d.premul_factor = conformance::detail::premul_factor(r);
          Bytes pin = mine, pout(cb, 0);
          d.send = pin.data();
          d.recv = pout.data();
          run(b, d);
          const Bytes pwant = reduce_reference(s, ReduceOp::kPremulSum, 0, c);
          EXPECT_EQ(first_difference(dt, pout.data(), pwant.data(), c), "") << "premul_sum";
        }
        {  // all_to_all: block p of rank r's send goes to rank p's block r
          Bytes in = input_bytes(s, r, 0, n * c), out(n * cb, 0);
          CollectiveDesc d = desc(CollectiveKind::kAllToAll, dt, c, ++seq);
          d.send = in.data();
          d.recv = out.data();
          run(b, d);
          for (int p = 0; p < n; ++p) {
            const Bytes theirs = input_bytes(s, p, r * c, c);
            EXPECT_EQ(0, std::memcmp(out.data() + p * cb, theirs.data(), cb)) << "all_to_all";
          }
        }
        {  // all_to_all_v: rank r sends p + r + 1 elements to rank p
          std::vector<int64_t> sc(n), so(n), rc(n), ro(n);
          int64_t st = 0, rt = 0;
          for (int p = 0; p < n; ++p) {
            sc[p] = p + r + 1, so[p] = st, st += sc[p];
            rc[p] = r + p + 1, ro[p] = rt, rt += rc[p];
          }
          Bytes in = input_bytes(s, r, 0, st), out(rt * 4, 0);
          CollectiveDesc d = desc(CollectiveKind::kAllToAllV, dt, 0, ++seq);
          d.send_counts = sc, d.send_offsets = so, d.recv_counts = rc, d.recv_offsets = ro;
          d.send = in.data();
          d.recv = out.data();
          run(b, d);
          for (int p = 0; p < n; ++p) {
            int64_t off = 0;  // rank p's offset of its block for r
            for (int q = 0; q < r; ++q) off += q + p + 1;
            const Bytes theirs = input_bytes(s, p, off, rc[p]);
            EXPECT_EQ(0, std::memcmp(out.data() + ro[p] * 4, theirs.data(), rc[p] * 4))
                << "all_to_all_v from " << p;
          }
        }
        {  // gather to 3, scatter from 4
          Bytes out(n * cb, 0);
          CollectiveDesc d = desc(CollectiveKind::kGather, dt, c, ++seq);
          d.root = 3;
          d.send = mine.data();
          d.recv = r == 3 ? out.data() : nullptr;
          run(b, d);
          if (r == 3) {
            for (int p = 0; p < n; ++p) {
              EXPECT_EQ(0, std::memcmp(out.data() + p * cb, all[p].data(), cb)) << "gather";
            }
          }
          Bytes whole = input_bytes(s, 4, 0, n * c), got(cb, 0);
          d = desc(CollectiveKind::kScatter, dt, c, ++seq);
          d.root = 4;
          d.send = r == 4 ? whole.data() : nullptr;
          d.recv = got.data();
          run(b, d);
          EXPECT_EQ(0, std::memcmp(got.data(), whole.data() + r * cb, cb)) << "scatter";
        }
        run(b, desc(CollectiveKind::kBarrier, dt, 0, ++seq));
      }));
    }
  }
}

TEST(P2pCollectives, MismatchFailsOnEveryRankNamingBothCallsAndBreaksTheGroup) {
  std::vector<std::string> first(4), second(4);
  auto errors = on_ranks(4, Options{}, [&](int r, Backend& b) {
    float x[4] = {1, 2, 3, 4}, y[4];
    CollectiveDesc d =
        desc(r == 1 ? CollectiveKind::kBroadcast : CollectiveKind::kAllReduce, DType::kF32, 4, 1);
    d.send = x;
    d.recv = r == 1 ? x : y;
    auto w = b.run(d);
    ASSERT_TRUE(w->error());
    ErrorKind k{};
    first[r] = message(w->error(), &k);
    EXPECT_EQ(k, ErrorKind::kInvalidArgument);
    d = desc(CollectiveKind::kBarrier, DType::kF32, 0, 2);
    auto w2 = b.run(d);  // broken: the same error at once
    ASSERT_TRUE(w2->error());
    second[r] = message(w2->error(), &k);
  });
  expect_ok(errors);
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(first[r].find("collective mismatch at group call #1"), std::string::npos) << first[r];
    EXPECT_NE(first[r].find("broadcast f32 x 4 root 0"), std::string::npos) << first[r];
    EXPECT_NE(first[r].find("all_reduce f32 x 4 sum"), std::string::npos) << first[r];
    EXPECT_NE(first[r].find(r == 1 ? "group rank 0" : "group rank 1"), std::string::npos)
        << first[r];
    EXPECT_EQ(first[r], second[r]);
  }
}

TEST(P2pCollectives, APeerThatSkipsACallTimesOutNamingTheOpSeqAndPeer) {
  std::vector<std::string> msgs(3);
  std::vector<ErrorKind> kinds(3);
  auto errors = on_ranks(
      3, {},
      [&](int r, Backend& b) {
        if (r == 2) return;  // never enters
        float x[2] = {1, 2};
        CollectiveDesc d = desc(CollectiveKind::kAllReduce, DType::kF32, 2, 17);
        d.send = d.recv = x;
        auto w = b.run(d);
        ASSERT_TRUE(w->error());
        msgs[r] = message(w->error(), &kinds[r]);
        auto again = b.run(desc(CollectiveKind::kBarrier, DType::kF32, 0, 18));
        ErrorKind k{};
        EXPECT_EQ(message(again->error(), &k), msgs[r]);
      },
      milliseconds(200));
  expect_ok(errors);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(kinds[r], ErrorKind::kTimeout);
    EXPECT_NE(msgs[r].find("all_reduce #17"), std::string::npos) << msgs[r];
    EXPECT_NE(msgs[r].find("[2]"), std::string::npos) << msgs[r];
  }
}

TEST(P2pCollectives, UserSendRecvInterleaveWithCollectives) {
  expect_ok(on_ranks(3, Options{}, [&](int r, Backend& b) {
    int32_t msg[3] = {r * 10, r * 10 + 1, r * 10 + 2}, got[3] = {};
    int32_t sum[3] = {r, r, r};
    const int peer = (r + 1) % 3, from = (r + 2) % 3;
    CollectiveDesc s = desc(CollectiveKind::kSend, DType::kI32, 3, 0);
    s.peer = peer;
    s.tag = 0;  // the same low bits as a collective's first step
    s.send = msg;
    run(b, s);
    CollectiveDesc a = desc(CollectiveKind::kAllReduce, DType::kI32, 3, 1);
    a.send = a.recv = sum;
    run(b, a);  // user message pending from `from` while the collective runs
    CollectiveDesc v = desc(CollectiveKind::kRecv, DType::kI32, 3, 0);
    v.peer = from;
    v.tag = 0;
    v.recv = got;
    run(b, v);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i], from * 10 + i);
      EXPECT_EQ(sum[i], 3);
    }
  }));
}

TEST(P2pCollectives, BadInputIsRejectedWithoutBreakingTheGroup) {
  expect_ok(on_ranks(2, Options{}, [&](int r, Backend& b) {
    int32_t x[2] = {1, 2};
    ErrorKind k{};
    for (int64_t tag : {int64_t{-1}, kMaxUserTag + 1}) {
      CollectiveDesc s = desc(CollectiveKind::kSend, DType::kI32, 2, 0);
      s.peer = 1 - r;
      s.tag = tag;
      s.send = x;
      auto w = b.run(s);
      ASSERT_TRUE(w->error());
      EXPECT_NE(message(w->error(), &k).find("tag " + std::to_string(tag)), std::string::npos);
      EXPECT_EQ(k, ErrorKind::kInvalidArgument);
    }
    CollectiveDesc p = desc(CollectiveKind::kAllReduce, DType::kI32, 2, 1);
    p.op = ReduceOp::kPremulSum;
    p.send = p.recv = x;
    auto w = b.run(p);
    ASSERT_TRUE(w->error());
    message(w->error(), &k);
    EXPECT_EQ(k, ErrorKind::kNotSupported);
    run(b, desc(CollectiveKind::kBarrier, DType::kI32, 0, 2));  // still usable
  }));
  EXPECT_EQ(parse_algo("ring"), Algo::kRing);
  EXPECT_EQ(parse_algo(""), Algo::kAuto);
  try {
    parse_algo("tree2");
    ADD_FAILURE() << "no error for an unknown algorithm";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_P2P_ALGO is 'tree2'"), std::string::npos);
  }
}

TEST(P2pCollectives, ARecvOfTheWrongSizeFailsNamingThePeer) {
  auto errors = on_ranks(2, Options{}, [&](int r, Backend& b) {
    int32_t x[4] = {1, 2, 3, 4};
    CollectiveDesc d = desc(r == 0 ? CollectiveKind::kSend : CollectiveKind::kRecv, DType::kI32,
                            r == 0 ? 2 : 4, 0);
    d.peer = 1 - r;
    d.tag = 3;
    d.send = d.recv = x;
    run(b, d);
  });
  EXPECT_FALSE(errors[0]);
  ASSERT_TRUE(errors[1]);
  ErrorKind k{};
  const std::string m = message(errors[1], &k);
  EXPECT_EQ(k, ErrorKind::kInvalidArgument);
  EXPECT_NE(m.find("group rank 0"), std::string::npos) << m;
  EXPECT_NE(m.find("has 8 bytes; expected 16"), std::string::npos) << m;
}

TEST(P2pCollectives, ARecvSmallerThanTheMessageFails) {
  auto errors = on_ranks(2, Options{}, [&](int r, Backend& b) {
    int32_t x[4] = {1, 2, 3, 4};
    CollectiveDesc d = desc(r == 0 ? CollectiveKind::kSend : CollectiveKind::kRecv, DType::kI32,
                            r == 0 ? 4 : 2, 0);
    d.peer = 1 - r;
    d.tag = 9;
    d.send = d.recv = x;
    run(b, d);
  });
  EXPECT_FALSE(errors[0]);
  ASSERT_TRUE(errors[1]);
  ErrorKind k{};
  const std::string m = message(errors[1], &k);
  EXPECT_EQ(k, ErrorKind::kInvalidArgument);
  EXPECT_NE(m.find("larger than the 8 bytes"), std::string::npos) << m;
}

// Every collective with messages cut into segments of 36 bytes (9 f32): each message of the
// large paths goes as several, and the results are still exact.
TEST(P2pCollectives, TinySegmentsGiveTheSameResults) {
  constexpr int n = 3;
  constexpr int64_t c = 20000;  // 80 KB: auto's large paths
  const Source s{DType::kF32, 7, n};
  Options options = with(Algo::kRing);
  options.segment_bytes = 36;
  expect_ok(on_ranks(n, options, [&](int r, Backend& b) {
    uint64_t seq = 0;
    const Bytes mine = input_bytes(s, r, 0, c);
    const size_t cb = mine.size();
    {
      Bytes out(cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kAllReduce, DType::kF32, c, ++seq);
      d.send = mine.data();
      d.recv = out.data();
      run(b, d);
      const Bytes want = reduce_reference(s, ReduceOp::kSum, 0, c);
      EXPECT_EQ(first_difference(DType::kF32, out.data(), want.data(), c), "") << "all_reduce";
    }
    {
      Bytes out(n * cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kAllGather, DType::kF32, c, ++seq);
      d.send = mine.data();
      d.recv = out.data();
      run(b, d);
      for (int p = 0; p < n; ++p) {
        EXPECT_EQ(0, std::memcmp(out.data() + p * cb, input_bytes(s, p, 0, c).data(), cb))
            << "all_gather block " << p;
      }
    }
    {
      Bytes buf = r == 1 ? mine : Bytes(cb, 0);
      CollectiveDesc d = desc(CollectiveKind::kBroadcast, DType::kF32, c, ++seq);
      d.root = 1;
      d.send = d.recv = buf.data();
      run(b, d);
      EXPECT_EQ(buf, input_bytes(s, 1, 0, c)) << "broadcast";
    }
  }));
}

// all_to_all_v's counts are not compared across ranks, so its messages are never segmented: a
// rank that sends more than its peer expects is still an error, not a partial match.
TEST(P2pCollectives, AllToAllVWithCountsThatDisagreeFailsEvenWithSegments) {
  Options options;
  options.segment_bytes = 8;
  auto errors = on_ranks(
      2, options,
      [&](int r, Backend& b) {
        std::vector<float> in(8, 1.0f), out(8, 0.0f);
        CollectiveDesc d = desc(CollectiveKind::kAllToAllV, DType::kF32, 0, 1);
        d.send = in.data();
        d.recv = out.data();
        d.send_counts = {r == 1 ? 2 : 4, 4};  // rank 1 sends 2 to rank 0, which expects 4
        d.send_offsets = {0, 4};
        d.recv_counts = {4, 4};
        d.recv_offsets = {0, 4};
        run(b, d);
      },
      milliseconds(2000));
  ASSERT_TRUE(errors[0]);
  ErrorKind k{};
  const std::string m = message(errors[0], &k);
  EXPECT_EQ(k, ErrorKind::kInvalidArgument) << m;
  EXPECT_NE(m.find("sent 8 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("expected 16"), std::string::npos) << m;
}

TEST(P2pCollectives, SegmentBytesComeFromTheEnvironment) {
  EXPECT_EQ(Options{}.segment_bytes, uint64_t{1} << 20);
  {
    PatchEnvironment env{{"BRAID_P2P_SEGMENT_BYTES", "256K"}};
    EXPECT_EQ(options_from_env().segment_bytes, uint64_t{256} << 10);
  }
  {
    PatchEnvironment env{{"BRAID_P2P_SEGMENT_BYTES", "0"}};
    EXPECT_EQ(options_from_env().segment_bytes, 0u);
  }
  PatchEnvironment env{{"BRAID_P2P_SEGMENT_BYTES", "1.5M"}};
  try {
    options_from_env();
    ADD_FAILURE() << "BRAID_P2P_SEGMENT_BYTES=1.5M was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("BRAID_P2P_SEGMENT_BYTES='1.5M'"), std::string::npos)
        << e.what();
  }
}

// A transport may prefer a segment size (the ucx transport's unchecked data endpoints: 4 MiB);
// it replaces Options' default, never a BRAID_P2P_SEGMENT_BYTES the job set.
TEST(P2pCollectives, ATransportsPreferredSegmentIsTheDefault) {
  class Preferring final : public Transport {
   public:
    explicit Preferring(uint64_t bytes) : bytes_(bytes) {}
    int rank() const override { return 0; }
    int size() const override { return 1; }
    uint64_t preferred_segment_bytes() const override { return bytes_; }
    std::unique_ptr<Request> isend(int, uint64_t, const void*, size_t) override { return nullptr; }
    std::unique_ptr<Request> irecv(int, uint64_t, void*, size_t) override { return nullptr; }
    void wait_all(std::vector<std::unique_ptr<Request>>&, const std::vector<int>&,
                  Clock::time_point, const std::string&) override {}

   private:
    uint64_t bytes_;
  };
  PatchEnvironment unset(EnvPatch{{"BRAID_P2P_SEGMENT_BYTES", std::nullopt}});
  EXPECT_EQ(options_from_env(Preferring(4 << 20)).segment_bytes, uint64_t{4} << 20);
  EXPECT_EQ(options_from_env(Preferring(0)).segment_bytes, Options{}.segment_bytes);
  PatchEnvironment env{{"BRAID_P2P_SEGMENT_BYTES", "256K"}};
  EXPECT_EQ(options_from_env(Preferring(4 << 20)).segment_bytes, uint64_t{256} << 10);
}

TEST(P2pCollectives, AnUnknownBraidP2pAlgoFailsAtCreation) {
  ::setenv("BRAID_P2P_ALGO", "fastest", 1);
  auto fabric = std::make_shared<Fabric>(1);
  BackendContext ctx;
  try {
    make_p2p_backend("p2p", ctx, std::make_unique<ThreadTransport>(fabric, 0));
    ADD_FAILURE() << "created with BRAID_P2P_ALGO=fastest";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'fastest'"), std::string::npos) << e.what();
  }
  ::unsetenv("BRAID_P2P_ALGO");
}

// ---- the conformance suite over the thread transport -------------------------------------

// The ranks of one group find their fabric through the group's store: rank 0 creates it and
// publishes its number.
std::shared_ptr<Fabric> fabric_for(const BackendContext& ctx) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Fabric>> fabrics;  // kept for the process
  static int next = 0;
  std::string id;
  if (ctx.rank == 0) {
    std::lock_guard<std::mutex> lock(mu);
    id = std::to_string(next++);
    fabrics[id] = std::make_shared<Fabric>(ctx.size);
    ctx.store->set("p2p_fabric", id);
  } else {
    id = ctx.store->get_string("p2p_fabric");
  }
  std::lock_guard<std::mutex> lock(mu);
  return fabrics.at(id);
}

const bool kP2pConformance = [] {
  register_backend("p2p_threads", [](const BackendContext& ctx) {
    return make_p2p_backend("p2p_threads", ctx,
                            std::make_unique<ThreadTransport>(fabric_for(ctx), ctx.rank));
  });
  // auto, then each family forced through BRAID_P2P_ALGO (read at backend creation).
  for (const char* algo : {"auto", "ring", "rd"}) {
    conformance::ConformanceBackend b;
    b.name = std::string("p2p_threads_") + algo;
    b.backend = "p2p_threads";
    b.ranks = conformance::ConformanceBackend::Ranks::kThreads;
    b.env = {{"BRAID_P2P_ALGO", algo}};
    b.sizes =
        std::string(algo) == "auto" ? std::vector<int>{1, 2, 3, 5, 8} : std::vector<int>{3, 4};
    conformance::register_backend_for_conformance(b);
  }
  // Messages cut into segments of 1000 bytes (not a whole number of 8-byte elements): every
  // large path sends many per piece, and the pipelined all_reduce folds 125-element segments.
  conformance::ConformanceBackend seg;
  seg.name = "p2p_threads_segments";
  seg.backend = "p2p_threads";
  seg.ranks = conformance::ConformanceBackend::Ranks::kThreads;
  seg.env = {{"BRAID_P2P_ALGO", "ring"}, {"BRAID_P2P_SEGMENT_BYTES", "1000"}};
  seg.sizes = {2, 3};
  conformance::register_backend_for_conformance(seg);
  return true;
}();

}  // namespace
}  // namespace braid::p2p
