// Tests of the UCX transport (comm/src/ucx_transport.*, docs/ucx.md) with ranks as forked
// processes on UCX's default transports (shared memory and tcp here): matching by (peer, tag),
// order within one (peer, tag), sizes from 0 to past the rendezvous threshold, a timeout, a
// peer that dies, and bad input. Also registers the "ucx" backend with the conformance suite.
// Compiles to nothing without UCX.
#include "braid/core/config.h"
#include "braid/core/environment.h"

#if BRAID_HAVE_UCX

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../src/ucx_transport.h"
#include "comm_test_util.h"
#include "p2p_test_transport.h"

#include "conformance/registry.h"

namespace {
const bool kUcxConformance = [] {
  braid::conformance::ConformanceBackend b;
  b.name = "ucx_processes";
  b.backend = "ucx";
  b.sizes = {1, 2, 3, 4};
  return braid::conformance::register_backend_for_conformance(b);
}();
// Note [Unchecked data] (ucx_transport.cc): the same with data endpoints without peer error
// handling, over tcp, the network that mode is for.
const bool kUcxUncheckedConformance = [] {
  braid::conformance::ConformanceBackend b;
  b.name = "ucx_unchecked_data";
  b.backend = "ucx";
  b.sizes = {2, 3, 4};
  b.env = {{"BRAID_UCX_UNCHECKED_DATA", "1"}, {"UCX_TLS", "tcp,self"}};
  return braid::conformance::register_backend_for_conformance(b);
}();
}  // namespace

namespace braid {
namespace {

using p2p::Clock;
using testing::run_processes;
using Requests = std::vector<std::unique_ptr<p2p::Request>>;

constexpr auto kWait = std::chrono::seconds(10);

std::unique_ptr<p2p::Transport> connect(int rank, int size, std::shared_ptr<Store> store) {
  BackendContext ctx;
  ctx.store = std::move(store);
  ctx.rank = rank;
  ctx.size = size;
  for (int r = 0; r < size; ++r) ctx.global_ranks.push_back(r);
  ctx.job_id = "local";
  ctx.timeout = std::chrono::milliseconds(30000);
  return make_ucx_transport(ctx);
}

// Distinct bytes per (message, sender, position), so a message delivered to the wrong receive
// shows up as wrong content.
std::vector<uint8_t> pattern(size_t bytes, int message, int sender) {
  std::vector<uint8_t> v(bytes);
  for (size_t k = 0; k < bytes; ++k)
    v[k] = static_cast<uint8_t>(k * 7 + message * 31 + sender * 101);
  return v;
}

void wait(p2p::Transport& t, Requests& reqs, const std::vector<int>& peers, const char* what) {
  t.wait_all(reqs, peers, Clock::now() + kWait, what);
}

// Note [Unchecked data] (ucx_transport.cc): the tests of messages, order, timeouts and abandoned
// or lost requests run in both of the transport's modes: peer error handling on every endpoint
// (the default), and BRAID_UCX_UNCHECKED_DATA=1, data endpoints without it beside one with it.
// The second runs over tcp alone (UCX_TLS=tcp,self), the network it is for; the variables are
// set in the test process, so the forked ranks start with them.
class UcxModes : public ::testing::TestWithParam<bool> {
 protected:
  PatchEnvironment env_{
      EnvPatch{{"BRAID_UCX_UNCHECKED_DATA", GetParam() ? "1" : "0"},
               {"UCX_TLS", GetParam() ? std::optional<std::string>("tcp,self") : std::nullopt}}};
};
INSTANTIATE_TEST_SUITE_P(UcxTransport, UcxModes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "unchecked_data" : "checked";
                         });

const std::vector<size_t> kSizes = {
    0, 1, 4099, (size_t{1} << 20) + 3, (size_t{2} << 20) + 6, (size_t{8} << 20) + 5};

TEST_P(UcxModes, PingPongSizesWithTagsMatchedOutOfOrder) {
  auto result = run_processes(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    const int other = 1 - rank;
    const int n = static_cast<int>(kSizes.size());
    std::vector<std::vector<uint8_t>> in(n), out(n);
    for (int i = 0; i < n; ++i) in[i].assign(kSizes[i] + 16, 0xEE);  // room to spare
    // Rank 0 pings first, rank 1 pongs back what it got under other tags.
    for (int round = 0; round < 2; ++round) {
      const bool sender = (round == 0) == (rank == 0);
      Requests reqs;
      std::vector<int> peers;
      if (sender) {
        for (int i = 0; i < n; ++i) {
          out[i] = round == 0 ? pattern(kSizes[i], i, rank) : in[i];
          out[i].resize(kSizes[i]);
          reqs.push_back(t->isend(other, 100 * (round + 1) + i, out[i].data(), out[i].size()));
          peers.push_back(other);
        }
      } else {
        for (int i = n - 1; i >= 0; --i) {  // reversed: matching must go by tag
          reqs.push_back(t->irecv(other, 100 * (round + 1) + i, in[i].data(), in[i].size()));
          peers.push_back(other);
        }
      }
      wait(*t, reqs, peers, "ping-pong");
      if (!sender) {
        for (int i = 0; i < n; ++i) {
          EXPECT_EQ(reqs[n - 1 - i]->received(), kSizes[i]) << "message " << i;
          const auto want = pattern(kSizes[i], i, 0);
          EXPECT_TRUE(std::equal(want.begin(), want.end(), in[i].begin()))
              << "round " << round << " message " << i << " of " << kSizes[i] << " bytes";
          EXPECT_EQ(in[i][kSizes[i]], 0xEE) << "bytes written past the message " << i;
        }
      }
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(UcxModes, SameTagFromTwoPeersMatchesTheNamedPeer) {
  auto result = run_processes(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    const size_t bytes = 5000;
    if (rank != 0) {
      auto msg = pattern(bytes, 9, rank);
      Requests reqs;
      reqs.push_back(t->isend(0, 42, msg.data(), msg.size()));
      wait(*t, reqs, {0}, "send to 0");
      return;
    }
    std::vector<uint8_t> from2(bytes), from1(bytes), self(8);
    uint64_t mine = 0x1122334455667788ull;
    Requests reqs;
    reqs.push_back(t->irecv(2, 42, from2.data(), bytes));
    reqs.push_back(t->irecv(1, 42, from1.data(), bytes));
    reqs.push_back(t->irecv(0, 42, self.data(), self.size()));
    reqs.push_back(t->isend(0, 42, &mine, sizeof(mine)));
    wait(*t, reqs, {2, 1, 0, 0}, "receive from 1, 2 and self");
    EXPECT_EQ(from1, pattern(bytes, 9, 1));
    EXPECT_EQ(from2, pattern(bytes, 9, 2));
    uint64_t got = 0;
    std::memcpy(&got, self.data(), sizeof(got));
    EXPECT_EQ(got, mine);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(UcxModes, ManyMessagesOfOnePeerAndTagArriveInOrder) {
  auto result = run_processes(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    constexpr int kCount = 300;
    std::vector<uint32_t> values(kCount);
    Requests reqs;
    std::vector<int> peers(kCount, 1 - rank);
    for (int i = 0; i < kCount; ++i) {
      if (rank == 0) {
        values[i] = static_cast<uint32_t>(i * 2654435761u);
        reqs.push_back(t->isend(1, 7, &values[i], sizeof(uint32_t)));
      } else {
        reqs.push_back(t->irecv(0, 7, &values[i], sizeof(uint32_t)));
      }
    }
    wait(*t, reqs, peers, "stream");
    if (rank == 1) {
      for (int i = 0; i < kCount; ++i) {
        ASSERT_EQ(values[i], static_cast<uint32_t>(i * 2654435761u)) << "message " << i;
      }
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(UcxModes, SilentPeerTimesOutNamingItThenLaterMessageStillMatches) {
  auto result = run_processes(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    int value = 0;
    if (rank == 1) {
      {
        Requests reqs;
        reqs.push_back(t->irecv(0, 5, &value, sizeof(value)));
        try {
          t->wait_all(reqs, {0}, Clock::now() + std::chrono::milliseconds(200), "the silent recv");
          ADD_FAILURE() << "wait_all returned although peer 0 never sent";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
          EXPECT_NE(e.message().find("the silent recv"), std::string::npos) << e.message();
          EXPECT_NE(e.message().find("peers 0"), std::string::npos) << e.message();
        }
      }  // the timed-out receive is cancelled here: it must not take the next message
      store->set("timed_out", "1");
      Requests reqs;
      reqs.push_back(t->irecv(0, 5, &value, sizeof(value)));
      wait(*t, reqs, {0}, "the later recv");
      EXPECT_EQ(value, 1234);
    } else {
      store->get("timed_out");
      value = 1234;
      Requests reqs;
      reqs.push_back(t->isend(1, 5, &value, sizeof(value)));
      wait(*t, reqs, {1}, "the late send");
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Rank 0's side of the abandoned-receive tests: `big` (tag 1) and then `after` (tag 2) to rank
// 1, posted, not waited on.
Requests send_big_then_small(p2p::Transport& t, std::vector<uint8_t>& big, int& after) {
  Requests reqs;
  reqs.push_back(t.isend(1, 1, big.data(), big.size()));
  reqs.push_back(t.isend(1, 2, &after, sizeof(after)));
  return reqs;
}

// Rank 1's side: posts the receive of the big message and waits for the small one sent after
// it on the same endpoint; once that is here, the big message has been matched and its data is
// on its way. Returns the big receive, still unfinished.
Requests receive_big_until_the_small_after_it(p2p::Transport& t, std::vector<uint8_t>& big) {
  Requests big_req;
  big_req.push_back(t.irecv(0, 1, big.data(), big.size()));
  int after = 0;
  Requests small;
  small.push_back(t.irecv(0, 2, &after, sizeof(after)));
  wait(t, small, {0}, "the message after the big one");
  EXPECT_FALSE(big_req[0]->test()) << "the big message arrived at once: the test shows nothing";
  return big_req;
}

// Fills `buffer`, whose receive was abandoned, progresses `t` for half a second (waiting on a
// receive from itself that never comes: every wait progresses every lane, Note [Progress every
// worker]) and checks that UCX wrote nothing into it.
void expect_untouched_while_progressing(p2p::Transport& t, std::vector<uint8_t>& buffer) {
  std::fill(buffer.begin(), buffer.end(), uint8_t{0xAB});
  int never_value = 0;
  Requests never;
  never.push_back(t.irecv(t.rank(), 3, &never_value, sizeof(never_value)));
  try {
    t.wait_all(never, {t.rank()}, Clock::now() + std::chrono::milliseconds(500), "progress");
  } catch (const Error&) {
  }
  EXPECT_EQ(std::count(buffer.begin(), buffer.end(), uint8_t{0xAB}),
            static_cast<long>(buffer.size()))
      << "UCX wrote into the buffer of an abandoned receive";
}

// Note [Abandoned requests] in ucx_transport.cc: a receive whose rendezvous data is already
// arriving cannot be cancelled; destroying it must stop UCX writing into the buffer, which its
// owner may reuse or free at once.
TEST_P(UcxModes, AnAbandonedReceiveInFlightNoLongerWritesItsBuffer) {
  constexpr size_t kBig = size_t{128} << 20;  // long enough over tcp to still be arriving
  auto result = run_processes(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    if (rank == 0) {
      std::vector<uint8_t> big(kBig, 0x11);
      int after = 7;
      Requests reqs = send_big_then_small(*t, big, after);
      try {
        wait(*t, reqs, {1, 1}, "the big send");
      } catch (const Error&) {  // rank 1 closing its endpoint may fail the big send: fine
      }
      store->get("checked");
      return;
    }
    std::vector<uint8_t> big(kBig, 0);
    {
      Requests big_req = receive_big_until_the_small_after_it(*t, big);
    }  // the big receive is abandoned here
    expect_untouched_while_progressing(*t, big);
    store->set("checked", "1");
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Note [Abandoned requests]: a request left on a lane whose endpoint UCX failed (the peer
// died mid-transfer) is dropped without waiting; the buffer must stay untouched all the same.
TEST_P(UcxModes, AReceiveFromAPeerThatDiedMidTransferIsReportedAndNoLongerWritesItsBuffer) {
  constexpr size_t kBig = size_t{128} << 20;
  auto result = run_processes(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    if (rank == 0) {
      std::vector<uint8_t> big(kBig, 0x11);
      int after = 7;
      Requests reqs = send_big_then_small(*t, big, after);
      // Drive the sends until the small one has gone, then stop driving them (the big one
      // moves only while this rank progresses), and when told to, die mid-transfer without
      // closing anything.
      while (!reqs[1]->test()) {
        reqs[0]->test();
      }
      store->get("die");
      ::_exit(0);
    }
    std::vector<uint8_t> big(kBig, 0);
    {
      Requests big_req = receive_big_until_the_small_after_it(*t, big);
      store->set("die", "1");
      try {
        t->wait_all(big_req, {0}, Clock::now() + std::chrono::seconds(20), "the big receive");
        ADD_FAILURE() << "the big receive completed although its sender died mid-transfer";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
      }
    }  // the big receive is abandoned here, its lane failed
    expect_untouched_while_progressing(*t, big);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST_P(UcxModes, PeerThatExitsIsReportedNotWaitedOn) {
  auto result = run_processes(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    if (rank == 0) {
      // Make sure the connection exists, then die without closing anything.
      int v = 1;
      Requests reqs;
      reqs.push_back(t->isend(1, 1, &v, sizeof(v)));
      wait(*t, reqs, {1}, "hello");
      store->set("dying", "1");
      ::_exit(0);
    }
    int v = 0;
    Requests reqs;
    reqs.push_back(t->irecv(0, 1, &v, sizeof(v)));
    wait(*t, reqs, {0}, "hello");
    store->get("dying");
    reqs.clear();
    reqs.push_back(t->irecv(0, 2, &v, sizeof(v)));
    try {
      t->wait_all(reqs, {0}, Clock::now() + std::chrono::seconds(5), "after the exit");
      ADD_FAILURE() << "wait_all returned although peer 0 exited";
    } catch (const Error& e) {
      EXPECT_TRUE(e.kind() == ErrorKind::kPeerLost || e.kind() == ErrorKind::kTimeout) << e.what();
      EXPECT_NE(e.message().find("after the exit"), std::string::npos) << e.message();
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// How UCX sends a tagged message to a peer, read from its own account of the endpoint
// (describe_ucx_endpoint), in either of the two forms UCX prints it (docs/ucx.md, "UCX
// versions"):
// - UCX 1.13, one line per kind of send:
//     "tag_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)"
// - later UCX (1.22), a table per kind of send, one row per size range:
//     "| tagged message by ucp_tag_send*(fast-completion) from host memory |"
//     "|      0..8184 | eager short                      | tcp/lo |"
//     "|   1..16483   | eager zero-copy copy-out         | tcp/lo |"
struct TagSend {
  size_t short_limit = 0;    // the largest size sent eagerly as "short" (into one tcp segment)
  bool eager_zcopy = false;  // some size goes eagerly zero-copy
  bool eager_bcopy = false;  // some size goes eagerly copied into UCX's buffers (1.13's form)
};

TagSend tag_send(p2p::Transport& t, int peer) {
  const std::string info = describe_ucx_endpoint(t, peer);
  TagSend s;
  if (const size_t at = info.find("tag_send:"); at != std::string::npos) {  // UCX 1.13
    const std::string line = info.substr(at, info.find('\n', at) - at);
    const std::string key = "<egr/short>..";
    if (const size_t k = line.find(key); k != std::string::npos) {
      s.short_limit = std::strtoull(line.c_str() + k + key.size(), nullptr, 10);
    }
    s.eager_zcopy = line.find("<egr/zcopy>") != std::string::npos;
    s.eager_bcopy = line.find("<egr/bcopy>") != std::string::npos;
    return s;
  }
  std::istringstream lines(info);  // the tables of later UCX
  std::string table;
  for (std::string line; std::getline(lines, line);) {
    if (const size_t at = line.find("tagged message by ucp_tag_send"); at != std::string::npos) {
      table = line.substr(at);
      continue;
    }
    if (table.empty() || line.find("..") == std::string::npos) continue;
    // "# |  0..8184 | eager short | tcp/lo |": the range and the description cells.
    const size_t bar1 = line.find('|'), bar2 = line.find('|', bar1 + 1);
    if (bar1 == std::string::npos || bar2 == std::string::npos) continue;
    const std::string range = line.substr(bar1 + 1, bar2 - bar1 - 1);
    const std::string what = line.substr(bar2 + 1, line.find('|', bar2 + 1) - bar2 - 1);
    const bool fast = table.find("(fast-completion)") != std::string::npos;
    if (fast && what.find("eager short") != std::string::npos) {
      s.short_limit = std::strtoull(range.c_str() + range.find("..") + 2, nullptr, 10);
    }
    if (what.find("eager zero-copy") != std::string::npos) s.eager_zcopy = true;
  }
  return s;
}

// Note [braid's UCX defaults] and Note [Copy mode on tcp] (ucx_transport.cc): over tcp alone,
// tcp's segments are 512 KiB and sends copy (no zero-copy) unless the job sets
// UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE / UCX_ZCOPY_THRESH itself, which then win. The
// segment size shows in how large a message goes eagerly as "short" (UCX 1.13: up to 524281
// bytes with 512 KiB segments, 8185 with UCX's 8 KiB; UCX 1.22: 262143 and 8184), the copy mode
// in the eager protocols (no eager zero-copy; UCX 1.13 names its copying one, bcopy). Passes on
// both versions (docs/ucx.md, "UCX versions").
TEST(UcxTransport, TcpSettingsAreBraidsDefaultsUnlessTheJobSetsThem) {
  for (const bool job_sets : {false, true}) {
    auto result = run_processes(2, [job_sets](int rank, int size, std::shared_ptr<Store> store) {
      // nullopt unsets: braid's defaults apply only where the job has not set the variables.
      auto job = [job_sets](const char* value) {
        return job_sets ? std::optional<std::string>(value) : std::nullopt;
      };
      PatchEnvironment env(EnvPatch{{"UCX_TLS", "tcp,self"},
                                    {"UCX_TCP_TX_SEG_SIZE", job("8K")},
                                    {"UCX_TCP_RX_SEG_SIZE", job("64K")},
                                    {"UCX_ZCOPY_THRESH", job("auto")}});
      auto t = connect(rank, size, store);
      const std::string info = describe_ucx_endpoint(*t, 1 - rank);
      ASSERT_NE(info.find("tcp/"), std::string::npos) << "no tcp lane to the peer:\n" << info;
      const TagSend s = tag_send(*t, 1 - rank);
      const bool ucx_1_13 = info.find("tag_send:") != std::string::npos;
      if (job_sets) {
        EXPECT_GT(s.short_limit, 0u) << info;
        EXPECT_LE(s.short_limit, size_t{8} << 10) << "UCX_TCP_TX_SEG_SIZE=8K was not kept:\n"
                                                  << info;
        EXPECT_TRUE(s.eager_zcopy) << "UCX_ZCOPY_THRESH=auto was not kept:\n" << info;
      } else {
        EXPECT_GT(s.short_limit, size_t{128} << 10) << "tcp's segments are not 512 KiB:\n" << info;
        EXPECT_LE(s.short_limit, size_t{512} << 10) << info;
        if (ucx_1_13) EXPECT_TRUE(s.eager_bcopy) << info;
        EXPECT_FALSE(s.eager_zcopy) << "zero-copy over tcp alone:\n" << info;
      }
      EXPECT_THROW(describe_ucx_endpoint(*t, 2), Error);
    });
    EXPECT_TRUE(result.ok()) << (job_sets ? "job sets the values: " : "braid's defaults: ")
                             << result.summary();
  }
}

// Note [Unchecked data] (ucx_transport.cc): with BRAID_UCX_UNCHECKED_DATA=1 over tcp the
// endpoint that carries the messages has a lane for RMA ("rma_bw#" in UCX's account), so that
// a rendezvous (from 512 KiB on, with braid's tcp segments) writes into the receive buffer;
// with peer error handling on it there is no such lane. The transport then prefers 4 MiB
// segments (p2p::Options::segment_bytes). Messages on either side of the threshold arrive whole
// either way.
TEST(UcxTransport, UncheckedDataEndpointsGiveTcpAnRmaLane) {
  for (const bool unchecked : {false, true}) {
    auto result = run_processes(2, [unchecked](int rank, int size, std::shared_ptr<Store> store) {
      PatchEnvironment env(
          EnvPatch{{"UCX_TLS", "tcp,self"}, {"BRAID_UCX_UNCHECKED_DATA", unchecked ? "1" : "0"}});
      auto t = connect(rank, size, store);
      const std::string info = describe_ucx_endpoint(*t, 1 - rank);
      EXPECT_EQ(info.find("rma_bw#") != std::string::npos, unchecked) << info;
      EXPECT_EQ(t->preferred_segment_bytes(), unchecked ? uint64_t{4} << 20 : 0) << "segments";
      for (const size_t bytes : {size_t{300} << 10, (size_t{4} << 20) + 1}) {
        std::vector<uint8_t> out = pattern(bytes, 1, rank), in(bytes);
        Requests reqs;
        reqs.push_back(t->irecv(1 - rank, 5, in.data(), in.size()));
        reqs.push_back(t->isend(1 - rank, 5, out.data(), out.size()));
        wait(*t, reqs, {1 - rank, 1 - rank}, "exchange");
        EXPECT_EQ(in, pattern(bytes, 1, 1 - rank)) << bytes << " bytes";
      }
    });
    EXPECT_TRUE(result.ok()) << (unchecked ? "unchecked: " : "checked: ") << result.summary();
  }
}

TEST(UcxTransport, AnUncheckedDataValueThatIsNotABooleanIsInvalidArgument) {
  PatchEnvironment env(EnvPatch{{"BRAID_UCX_UNCHECKED_DATA", "sometimes"}});
  try {
    connect(0, 1, std::make_shared<InMemoryStore>());
    ADD_FAILURE() << "BRAID_UCX_UNCHECKED_DATA=sometimes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(e.message().find("BRAID_UCX_UNCHECKED_DATA='sometimes'"), std::string::npos)
        << e.message();
  }
}

TEST(UcxTransport, DescribingATransportThatIsNotUcxsIsInvalidArgument) {
  p2p::testing::ThreadTransport threads(std::make_shared<p2p::testing::Fabric>(1), 0);
  try {
    describe_ucx_endpoint(threads, 0);
    ADD_FAILURE() << "describe_ucx_endpoint accepted a transport that is not UCX's";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(e.message().find("make_ucx_transport"), std::string::npos) << e.message();
  }
}

TEST(UcxTransport, BadInputIsRejected) {
  auto result = run_processes(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto t = connect(rank, size, store);
    EXPECT_EQ(t->rank(), rank);
    EXPECT_EQ(t->size(), 2);
    int v = 0;
    try {
      t->isend(2, 1, &v, sizeof(v));
      ADD_FAILURE() << "isend to peer 2 of 2 ranks was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(e.message().find("peer 2"), std::string::npos) << e.message();
    }
    // A message longer than the receive buffer.
    std::vector<uint8_t> big(100, 3), small(10);
    Requests reqs;
    if (rank == 0) {
      reqs.push_back(t->isend(1, 9, big.data(), big.size()));
      wait(*t, reqs, {1}, "long send");
      return;
    }
    reqs.push_back(t->irecv(0, 9, small.data(), small.size()));
    try {
      wait(*t, reqs, {0}, "short recv");
      ADD_FAILURE() << "a 100-byte message into a 10-byte buffer was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(e.message().find("longer than the receive buffer"), std::string::npos)
          << e.message();
    }
    Requests none;
    none.push_back(t->irecv(0, 10, small.data(), small.size()));
    try {
      t->wait_all(none, {}, Clock::now() + kWait, "mismatched");
      ADD_FAILURE() << "wait_all accepted 0 peers for 1 request";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(e.message().find("0 peers for 1 requests"), std::string::npos) << e.message();
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid

#endif  // BRAID_HAVE_UCX
