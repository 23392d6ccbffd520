// The shm backend's step line (docs/shm.md, "Step protocol" and "Cross-rank check"; Note [Call
// key] in comm/src/shm_check.cc): the key of the call beside the ready word, the message of up to
// shm::kInlineBytes (48) in the same line. Every step-path collective at 2, 3, 4 and 8 ranks with
// messages on both sides of that limit, exact; each field the check compares, made to differ on
// one rank, is a mismatch naming both calls; the fields it does not compare for a kind (root of
// an all_reduce, op of an all_gather, dtype and count of a barrier, count of an all_to_all_v)
// are not.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "../src/shm_backend.h"
#include "../src/shm_segment.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "comm_test_util.h"
#include "shm_test_util.h"

namespace braid {
namespace {

using std::chrono::milliseconds;

using shm_test::make_backend;
using shm_test::run;

// Every collective through the step protocol: the small broadcast and reduce paths off.
ShmOptions step_path_only() {
  ShmOptions o;
  o.bcast_bytes = o.bcast_shared_bytes = 0;
  o.reduce_bytes = 0;
  return o;
}

// Rank r's element i: small integers, so that every sum is exact in f32.
float value(int r, int64_t i, int call) {
  return static_cast<float>((r + 1) * 100 + i + call);
}

// Element counts of f32 (4 bytes each) on both sides of 16 bytes (the limit before the key) and
// of 48 (the limit now), and past one line.
const std::vector<int64_t> kCounts = {1, 3, 4, 5, 8, 11, 12, 13, 16, 33};

TEST(ShmStepLine, MessagesAroundTheInlineLimitAreExact) {
  static_assert(shm::kInlineBytes == 48, "the counts above straddle 48 bytes");
  for (int n : {2, 3, 4, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    const std::string job = shm_test::unique_job("ck");
    auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
      auto b = make_backend(me, size, store, job, milliseconds(60000), step_path_only());
      int call = 0;
      for (int64_t count : kCounts) {
        for (bool in_place : {false, true}) {
          ++call;
          const std::string where = "count " + std::to_string(count) +
                                    (in_place ? " in place" : " out of place") + ", rank " +
                                    std::to_string(me);
          // all_reduce (sum), then reduce to the last rank.
          for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kReduce}) {
            std::vector<float> send(count), recv(count, -1.f);
            for (int64_t i = 0; i < count; ++i) send[i] = value(me, i, call);
            CollectiveDesc d;
            d.kind = kind;
            d.count = count;
            d.root = size - 1;
            d.send = send.data();
            d.recv = in_place ? send.data() : recv.data();
            run(*b, d);
            const float* out = in_place ? send.data() : recv.data();
            if (kind == CollectiveKind::kReduce && me != size - 1) continue;
            for (int64_t i = 0; i < count; ++i) {
              float want = 0;
              for (int r = 0; r < size; ++r) want += value(r, i, call);
              ASSERT_EQ(out[i], want) << collective_name(kind) << " element " << i << ", " << where;
            }
          }
          // reduce_scatter: rank r's block b holds value(r, b * count + i).
          {
            std::vector<float> send(count * size), recv(count, -1.f);
            for (int64_t i = 0; i < count * size; ++i) send[i] = value(me, i, call);
            CollectiveDesc d;
            d.kind = CollectiveKind::kReduceScatter;
            d.count = count;
            d.send = send.data();
            d.recv = in_place ? send.data() + me * count : recv.data();
            run(*b, d);
            const float* out = static_cast<const float*>(d.recv);
            for (int64_t i = 0; i < count; ++i) {
              float want = 0;
              for (int r = 0; r < size; ++r) want += value(r, me * count + i, call);
              ASSERT_EQ(out[i], want) << "reduce_scatter element " << i << ", " << where;
            }
          }
          // all_gather, all_to_all and broadcast (root 1 % n).
          {
            std::vector<float> mine(count), all(count * size, -1.f);
            for (int64_t i = 0; i < count; ++i) mine[i] = value(me, i, call);
            if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + me * count);
            CollectiveDesc d;
            d.kind = CollectiveKind::kAllGather;
            d.count = count;
            d.send = in_place ? all.data() + me * count : mine.data();
            d.recv = all.data();
            run(*b, d);
            for (int r = 0; r < size; ++r) {
              for (int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(all[r * count + i], value(r, i, call))
                    << "all_gather block " << r << " element " << i << ", " << where;
              }
            }
          }
          if (!in_place) {
            std::vector<float> send(count * size), recv(count * size, -1.f);
            // Rank me's block for rank p: value(me, p * 1000 + i).
            for (int p = 0; p < size; ++p) {
              for (int64_t i = 0; i < count; ++i)
                send[p * count + i] = value(me, p * 1000 + i, call);
            }
            CollectiveDesc d;
            d.kind = CollectiveKind::kAllToAll;
            d.count = count;
            d.send = send.data();
            d.recv = recv.data();
            run(*b, d);
            for (int p = 0; p < size; ++p) {
              for (int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(recv[p * count + i], value(p, me * 1000 + i, call))
                    << "all_to_all block from " << p << " element " << i << ", " << where;
              }
            }
          }
          {
            const int root = 1 % size;
            std::vector<float> buf(count, -1.f), out(count, -1.f);
            if (me == root) {
              for (int64_t i = 0; i < count; ++i) buf[i] = value(root, i, call);
            }
            CollectiveDesc d;
            d.kind = CollectiveKind::kBroadcast;
            d.count = count;
            d.root = root;
            d.send = buf.data();
            d.recv = in_place ? buf.data() : out.data();
            run(*b, d);
            const float* got = static_cast<const float*>(d.recv);
            for (int64_t i = 0; i < count; ++i) {
              ASSERT_EQ(got[i], value(root, i, call)) << "broadcast element " << i << ", " << where;
            }
          }
        }
      }
    });
    EXPECT_TRUE(result.ok()) << result.summary();
  }
}

// Two ranks make an all_reduce of 8 f32 (inline: the call key and the data in one line), which
// `change(rank, desc)` alters, and return what each threw.
std::vector<std::optional<Error>> errors_of(
    const std::function<void(int, CollectiveDesc&)>& change) {
  return shm_test::errors_of(2, milliseconds(20000), shm_test::unique_job("ck"),
                             [&](int me, Backend& b) {
                               std::vector<float> send(16, 1.f), recv(16, 0.f);
                               CollectiveDesc d;
                               d.count = 8;
                               d.send = send.data();
                               d.recv = recv.data();
                               d.seq = 1;
                               change(me, d);
                               run(b, d);
                             });
}

TEST(ShmCallKey, EachComparedFieldThatDiffersIsAMismatchNamingBothCalls) {
  struct Case {
    const char* what;
    std::function<void(int, CollectiveDesc&)> change;
    const char* rank0;  // how the message describes rank 0's call, and rank 1's
    const char* rank1;
  };
  const Case cases[] = {
      {"kind",
       [](int me, CollectiveDesc& d) {
         if (me == 1) d.kind = CollectiveKind::kAllGather;
       },
       "all_reduce f32 x 8 sum", "all_gather f32 x 8"},
      {"dtype",
       [](int me, CollectiveDesc& d) {
         if (me == 1) d.dtype = DType::kI32;
       },
       "all_reduce f32 x 8 sum", "all_reduce i32 x 8 sum"},
      {"count",
       [](int me, CollectiveDesc& d) {
         if (me == 1) d.count = 12;
       },
       "all_reduce f32 x 8 sum", "all_reduce f32 x 12 sum"},
      {"op",
       [](int me, CollectiveDesc& d) {
         if (me == 1) d.op = ReduceOp::kMax;
       },
       "all_reduce f32 x 8 sum", "all_reduce f32 x 8 max"},
      {"root",
       [](int me, CollectiveDesc& d) {
         d.kind = CollectiveKind::kGather;
         d.count = 4;
         d.root = me;
       },
       "gather f32 x 4 root 0", "gather f32 x 4 root 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("differs in ") + c.what);
    const auto errors = errors_of(c.change);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
      EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
      const std::string msg = errors[r]->message();
      EXPECT_NE(msg.find("collective mismatch at group call #1"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.rank0), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.rank1), std::string::npos) << msg;
    }
  }
}

TEST(ShmCallKey, FieldsAKindDoesNotUseMayDiffer) {
  const std::string job = shm_test::unique_job("ck");
  auto result = testing::run_threads(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, milliseconds(20000));
    // all_reduce: root differs; all_gather: op differs.
    std::vector<float> send(8), recv(16, 0.f);
    for (int i = 0; i < 8; ++i) send[i] = value(me, i, 0);
    CollectiveDesc d;
    d.count = 8;
    d.send = send.data();
    d.recv = recv.data();
    d.root = me;
    run(*b, d);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(recv[i], value(0, i, 0) + value(1, i, 0));
    d.kind = CollectiveKind::kAllGather;
    d.root = 0;
    d.op = me == 0 ? ReduceOp::kSum : ReduceOp::kMax;
    run(*b, d);
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 8; ++i) ASSERT_EQ(recv[r * 8 + i], value(r, i, 0));
    }
    // barrier: dtype and count differ.
    CollectiveDesc bar;
    bar.kind = CollectiveKind::kBarrier;
    bar.dtype = me == 0 ? DType::kF32 : DType::kI64;
    bar.count = me == 0 ? 0 : 5;
    run(*b, bar);
    // all_to_all_v: the count field differs, the per-pair counts agree (rank r sends r + 1 + p
    // elements to rank p).
    std::vector<int64_t> sc(size), so(size), rc(size), ro(size);
    for (int p = 0; p < size; ++p) {
      sc[p] = me + 1 + p;
      rc[p] = p + 1 + me;
    }
    std::exclusive_scan(sc.begin(), sc.end(), so.begin(), int64_t{0});
    std::exclusive_scan(rc.begin(), rc.end(), ro.begin(), int64_t{0});
    std::vector<float> vs(so.back() + sc.back()), vr(ro.back() + rc.back(), -1.f);
    for (int p = 0; p < size; ++p) {
      for (int64_t i = 0; i < sc[p]; ++i) vs[so[p] + i] = value(me, p * 1000 + i, 0);
    }
    CollectiveDesc v;
    v.kind = CollectiveKind::kAllToAllV;
    v.count = me == 0 ? 0 : 7;
    v.send = vs.data();
    v.recv = vr.data();
    v.send_counts = sc;
    v.send_offsets = so;
    v.recv_counts = rc;
    v.recv_offsets = ro;
    run(*b, v);
    for (int p = 0; p < size; ++p) {
      for (int64_t i = 0; i < rc[p]; ++i) {
        ASSERT_EQ(vr[ro[p] + i], value(p, me * 1000 + i, 0)) << "from " << p << " element " << i;
      }
    }
    // And the group goes on: an all_reduce that agrees everywhere.
    d.kind = CollectiveKind::kAllReduce;
    d.op = ReduceOp::kSum;
    run(*b, d);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(recv[i], value(0, i, 0) + value(1, i, 0));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid
