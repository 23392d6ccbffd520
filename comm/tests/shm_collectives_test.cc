// The shm backend with ranks as threads of this process (each thread its own backend, one
// InMemoryStore), at the Backend level: every reduction op on every dtype with both
// all_reduce algorithms, checked bit for bit against a reference folded here in rank order in
// the accumulation type; bit-identity across algorithms and chunk sizes; send / recv; and the
// error paths that need no second process. The grid of every collective x dtype x count x
// placement x group size (default and 4 KiB slots) is the conformance suite's
// (conformance_test.cc), which runs through the ProcessGroup front.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "../src/shm_backend.h"
#include "../src/shm_group.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/kernels/table.h"

namespace braid {
namespace {

using Bytes = std::vector<uint8_t>;
using std::chrono::milliseconds;

// Runs fn(rank, backend) on n threads, each with its own shm backend of one group.
void run_ranks(int n, const ShmOptions& options, milliseconds timeout,
               const std::function<void(int, Backend&)>& fn) {
  auto store = std::make_shared<InMemoryStore>(milliseconds(20000));
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        BackendContext ctx;
        ctx.store = store;
        ctx.rank = r;
        ctx.size = n;
        for (int i = 0; i < n; ++i)
          ctx.global_ranks.push_back(10 + i);  // distinct from group ranks
        ctx.job_id = "shmtest";
        ctx.timeout = timeout;
        auto backend = create_shm_backend(ctx, options);
        fn(r, *backend);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// ---- the reference ------------------------------------------------------------------------

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double,
                               std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

template <class T>
Acc<T> widen(T v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(v);
  } else {
    return static_cast<Acc<T>>(v);
  }
}

template <class T>
T narrow(Acc<T> a) {
  if constexpr (std::is_same_v<T, bool>) {
    return a != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(a));  // wraps
  } else {
    return T(a);
  }
}

// Folds element i of every input in rank order, as docs/shm.md promises.
template <class T>
Bytes reference_fold(const std::vector<const uint8_t*>& inputs, int64_t count, ReduceOp op,
                     const std::vector<double>& factors) {
  using A = Acc<T>;
  const int n = static_cast<int>(inputs.size());
  Bytes out(count * sizeof(T));
  for (int64_t i = 0; i < count; ++i) {
    A acc{};
    for (int r = 0; r < n; ++r) {
      T x;
      std::memcpy(&x, inputs[r] + i * sizeof(T), sizeof(T));
      A v = widen(x);
      if (op == ReduceOp::kPremulSum) v = v * static_cast<A>(factors[r]);
      if (r == 0) {
        acc = v;
      } else if (op == ReduceOp::kProd) {
        if constexpr (std::is_integral_v<A>) {
          acc = static_cast<A>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
        } else {
          acc = acc * v;
        }
      } else if (op == ReduceOp::kMin) {
        acc = acc < v ? acc : v;
      } else if (op == ReduceOp::kMax) {
        acc = acc > v ? acc : v;
      } else {
        acc = acc + v;
      }
    }
    if (op == ReduceOp::kAvg) {
      if constexpr (std::is_integral_v<A>) {
        A q = acc / n;
        if (acc % n != 0 && acc < 0) --q;
        acc = q;
      } else {
        acc = acc / static_cast<A>(n);
      }
    }
    const T result = narrow<T>(acc);
    std::memcpy(out.data() + i * sizeof(T), &result, sizeof(T));
  }
  return out;
}

Bytes fold(DType dtype, const std::vector<const uint8_t*>& inputs, int64_t count, ReduceOp op,
           const std::vector<double>& factors) {
  switch (dtype) {
#define BRAID_REF_CASE(e, nm, st, T, sz, fl) \
  case DType::e:                             \
    return reference_fold<T>(inputs, count, op, factors);
    BRAID_FOR_EACH_DTYPE(BRAID_REF_CASE)
#undef BRAID_REF_CASE
  }
  return {};
}

// Deterministic input of `rank` for grid case `id`: small values (so fp8 sums stay finite and
// integer products stay meaningful), rounded to the dtype.
Bytes make_input(DType dtype, int64_t count, int rank, uint64_t id) {
  std::mt19937_64 gen(id * 1000003 + rank * 7919 + 17);
  std::vector<double> values(count);
  const bool fl = is_floating(dtype);
  for (auto& v : values) {
    const int64_t k = static_cast<int64_t>(gen() % 9) - 4;  // -4..4
    v = fl ? static_cast<double>(k) * 0.375 + static_cast<double>(gen() % 64) / 256.0
           : static_cast<double>(k);
  }
  Bytes out(count * dtype_size(dtype));
  kernels::kernels_for(kCPU).cast(Stream{kCPU}, values.data(), DType::kF64, out.data(), dtype,
                                  count, kernels::CastMode::kDefault);
  return out;
}

// ---- the grid -----------------------------------------------------------------------------

struct Case {
  CollectiveKind kind;
  DType dtype;
  int64_t count;
  ReduceOp op;
  bool in_place;
  std::string str() const {
    std::ostringstream o;
    o << collective_name(kind) << " " << dtype << " x " << count << " " << reduce_op_name(op)
      << (in_place ? " in-place" : " out-of-place");
    return o.str();
  }
};

// all_to_all_v: elements rank s sends to rank d (at most count), and the gap between blocks.
int64_t v_count(int s, int d, int64_t count) {
  return (count * (s + 1) + 3 * d) % (count + 1);
}

struct Buffers {
  std::vector<Bytes> inputs;  // every rank's send buffer
  Bytes recv;
  CollectiveDesc desc;
  const uint8_t* result = nullptr;  // where this rank's output lands
};

void v_layout(int me, int n, int64_t count, CollectiveDesc& d) {
  int64_t send_off = 0, recv_off = 0;
  for (int p = 0; p < n; ++p) {
    d.send_counts.push_back(v_count(me, p, count));
    d.send_offsets.push_back(send_off);
    send_off += d.send_counts.back() + 1;  // a gap, so offsets matter
    d.recv_counts.push_back(v_count(p, me, count));
    d.recv_offsets.push_back(recv_off);
    recv_off += d.recv_counts.back() + 2;
  }
}

int64_t v_extent(const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets) {
  int64_t e = 0;
  for (size_t i = 0; i < counts.size(); ++i) e = std::max(e, offsets[i] + counts[i]);
  return e;
}

// Elements of rank r's send buffer for this kind.
int64_t send_elems(const Case& c, int r, int n) {
  switch (c.kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return n * c.count;
    case CollectiveKind::kScatter:
      return r == 1 % n ? n * c.count : 0;
    case CollectiveKind::kAllToAllV: {
      CollectiveDesc d;
      v_layout(r, n, c.count, d);
      return std::max(v_extent(d.send_counts, d.send_offsets),
                      v_extent(d.recv_counts, d.recv_offsets));
    }
    default:
      return c.count;
  }
}

int64_t recv_elems(const Case& c, int n) {
  switch (c.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
    case CollectiveKind::kAllToAll:
      return n * c.count;
    default:
      return c.count;
  }
}

Buffers prepare(const Case& c, uint64_t id, int me, int n) {
  Buffers b;
  const int root = 1 % n;
  const size_t es = dtype_size(c.dtype);
  for (int r = 0; r < n; ++r) b.inputs.push_back(make_input(c.dtype, send_elems(c, r, n), r, id));
  CollectiveDesc& d = b.desc;
  d.kind = c.kind;
  d.dtype = c.dtype;
  d.count = c.count;
  d.op = c.op;
  d.root = root;
  d.premul_factor = 0.5 + me;  // each rank its own factor, as NCCL allows
  d.seq = id;
  if (c.kind == CollectiveKind::kAllToAllV) v_layout(me, n, c.count, d);
  Bytes send = b.inputs[me];
  const int64_t rcount = c.kind == CollectiveKind::kAllToAllV
                             ? v_extent(d.recv_counts, d.recv_offsets)
                             : recv_elems(c, n);
  b.recv.assign(std::max<int64_t>(rcount, 1) * es, 0xA5);
  // A non-root scatter rank has no send buffer to work in place in.
  if (!c.in_place || (c.kind == CollectiveKind::kScatter && me != root)) {
    b.inputs[me].resize(std::max<size_t>(send.size(), 1));  // a valid pointer even for 0
    d.send = b.inputs[me].data();
    d.recv = b.recv.data();
    b.result = b.recv.data();
    return b;
  }
  switch (c.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      if (!send.empty()) std::memcpy(b.recv.data() + me * c.count * es, send.data(), send.size());
      d.recv = b.recv.data();
      d.send = b.recv.data() + me * c.count * es;
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kScatter:
      b.recv = send;
      b.recv.resize(std::max<size_t>(send.size(), 1));
      d.send = b.recv.data();
      d.recv = b.recv.data() + me * c.count * es;
      if (c.kind == CollectiveKind::kScatter) d.recv = b.recv.data() + root * c.count * es;
      break;
    default:
      b.recv = send;
      b.recv.resize(std::max<size_t>(std::max<int64_t>(rcount, 1) * es, send.size()));
      d.send = d.recv = b.recv.data();
  }
  b.result = static_cast<const uint8_t*>(d.recv);
  if (c.kind == CollectiveKind::kAllGather || c.kind == CollectiveKind::kGather) {
    b.result = b.recv.data();
  }
  return b;
}

// What rank `me` must hold after the call, or empty when nothing is specified there.
Bytes expected(const Case& c, const Buffers& b, int me, int n) {
  const int root = 1 % n;
  const size_t es = dtype_size(c.dtype);
  const int64_t bytes = c.count * es;
  std::vector<double> factors;
  for (int r = 0; r < n; ++r) factors.push_back(0.5 + r);
  std::vector<const uint8_t*> in;
  for (int r = 0; r < n; ++r) in.push_back(b.inputs[r].data());
  Bytes out;
  auto block = [&](int r, int64_t index) {
    return Bytes(b.inputs[r].begin() + index * bytes, b.inputs[r].begin() + (index + 1) * bytes);
  };
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      return fold(c.dtype, in, c.count, c.op, factors);
    case CollectiveKind::kReduce:
      return me == root ? fold(c.dtype, in, c.count, c.op, factors) : Bytes{};
    case CollectiveKind::kBroadcast:
      return block(root, 0);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      if (c.kind == CollectiveKind::kGather && me != root) return {};
      for (int r = 0; r < n; ++r) {
        Bytes x = block(r, 0);
        out.insert(out.end(), x.begin(), x.end());
      }
      return out;
    case CollectiveKind::kReduceScatter:
      for (auto& p : in) p += me * bytes;
      return fold(c.dtype, in, c.count, c.op, factors);
    case CollectiveKind::kAllToAll:
      for (int r = 0; r < n; ++r) {
        Bytes x = block(r, me);
        out.insert(out.end(), x.begin(), x.end());
      }
      return out;
    case CollectiveKind::kScatter:
      return block(root, me);
    case CollectiveKind::kAllToAllV: {
      out = Bytes(b.recv.size(), 0);  // compared only inside the blocks
      for (int r = 0; r < n; ++r) {
        CollectiveDesc ds;
        v_layout(r, n, c.count, ds);
        if (ds.send_counts[me] == 0) continue;  // memcpy of nothing may still not take null
        std::memcpy(out.data() + b.desc.recv_offsets[r] * es,
                    b.inputs[r].data() + ds.send_offsets[me] * es, ds.send_counts[me] * es);
      }
      return out;
    }
    default:
      return {};
  }
}

std::string check_result(const Case& c, const Buffers& b, int me, int n) {
  const Bytes want = expected(c, b, me, n);
  if (want.empty()) return {};
  const size_t es = dtype_size(c.dtype);
  const uint8_t* got = b.result;
  for (size_t i = 0; i < want.size(); i += es) {
    if (c.kind == CollectiveKind::kAllToAllV) {  // only inside the blocks
      bool inside = false;
      for (int r = 0; r < n; ++r) {
        const size_t lo = b.desc.recv_offsets[r] * es, hi = lo + b.desc.recv_counts[r] * es;
        inside = inside || (i >= lo && i < hi);
      }
      if (!inside) continue;
    }
    if (std::memcmp(got + i, want.data() + i, es) != 0) {
      double g = 0, w = 0;
      kernels::kernels_for(kCPU).cast(Stream{kCPU}, got + i, c.dtype, &g, DType::kF64, 1,
                                      kernels::CastMode::kDefault);
      kernels::kernels_for(kCPU).cast(Stream{kCPU}, want.data() + i, c.dtype, &w, DType::kF64, 1,
                                      kernels::CastMode::kDefault);
      return c.str() + " on " + std::to_string(n) + " ranks: rank " + std::to_string(me) +
             " element " + std::to_string(i / es) + " is " + std::to_string(g) + ", expected " +
             std::to_string(w);
    }
  }
  return {};
}

// Runs every case on one group of n thread-ranks and checks every rank's result.
void run_cases(int n, const ShmOptions& options, const std::vector<Case>& cases) {
  run_ranks(n, options, milliseconds(60000), [&](int me, Backend& backend) {
    for (size_t i = 0; i < cases.size(); ++i) {
      Buffers b = prepare(cases[i], i + 1, me, n);
      backend.run(b.desc)->wait();
      const std::string err = check_result(cases[i], b, me, n);
      if (!err.empty()) ADD_FAILURE() << err;
    }
  });
}

TEST(ShmReduceOps, EveryOpOnEveryDtypeAndBothAlgorithms) {
  for (ShmAlgo algo : {ShmAlgo::kOneShot, ShmAlgo::kReduceScatter}) {
    ShmOptions o;
    o.algo = algo;
    o.slot_bytes = 8192;
    for (int n : {1, 3, 4}) {
      std::vector<Case> cases;
      for (auto kind :
           {CollectiveKind::kAllReduce, CollectiveKind::kReduce, CollectiveKind::kReduceScatter}) {
        for (auto op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                        ReduceOp::kAvg, ReduceOp::kPremulSum}) {
          for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64,
                              DType::kF64, DType::kF8E4M3, DType::kF8E5M2, DType::kI16, DType::kI8,
                              DType::kU8, DType::kBool}) {
            if (op == ReduceOp::kPremulSum && !is_floating(dtype)) continue;
            if (op == ReduceOp::kAvg && dtype == DType::kBool) continue;
            for (int64_t count : {int64_t{7}, int64_t{3001}}) {
              cases.push_back({kind, dtype, count, op, count == 7});
            }
          }
        }
      }
      run_cases(n, o, cases);
    }
  }
}

// Random f32 data whose sums round: the bits must not depend on the algorithm, the chunk
// size or the rank that reads them.
TEST(ShmDeterminism, AllReduceBitsAreIdenticalAcrossAlgorithmsChunkSizesAndRanks) {
  constexpr int kRanks = 4;
  const int64_t count = 100003;
  std::vector<std::vector<float>> inputs(kRanks, std::vector<float>(count));
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1000.f, 1000.f);
  for (auto& v : inputs) {
    for (auto& x : v) x = dist(gen) * std::pow(10.f, static_cast<float>(gen() % 7) - 3.f);
  }
  std::vector<std::vector<float>> results;  // one per (algorithm, slot size, rank)
  std::mutex mu;
  for (ShmAlgo algo : {ShmAlgo::kOneShot, ShmAlgo::kReduceScatter, ShmAlgo::kAuto}) {
    for (uint64_t slot : {uint64_t{4096}, uint64_t{65536}, uint64_t{4} << 20}) {
      ShmOptions o;
      o.algo = algo;
      o.slot_bytes = slot;
      run_ranks(kRanks, o, milliseconds(60000), [&](int me, Backend& backend) {
        std::vector<float> out(count);
        CollectiveDesc d;
        d.send = inputs[me].data();
        d.recv = out.data();
        d.count = count;
        backend.run(d)->wait();
        std::lock_guard<std::mutex> lock(mu);
        results.push_back(std::move(out));
      });
    }
  }
  ASSERT_EQ(results.size(), 3u * 3u * kRanks);
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(std::memcmp(results[i].data(), results[0].data(), count * sizeof(float)), 0)
        << "result " << i << " differs from result 0";
  }
  // And they are the rank-order f32 sum, not some other order's.
  for (int64_t i = 0; i < count; i += 997) {
    float acc = inputs[0][i];
    for (int r = 1; r < kRanks; ++r) acc = acc + inputs[r][i];
    ASSERT_EQ(std::memcmp(&acc, &results[0][i], sizeof acc), 0) << "element " << i;
  }
}

TEST(ShmPointToPoint, MessagesMatchInOrderAcrossChunksAndTags) {
  ShmOptions o;
  o.mailbox_bytes = 256;  // 1000 i32 span 16 chunks
  run_ranks(3, o, milliseconds(30000), [&](int me, Backend& backend) {
    const int next = (me + 1) % 3, prev = (me + 2) % 3;
    for (int64_t tag : {5, 6}) {
      std::vector<int32_t> out(1000), in(1000, -1);
      for (int i = 0; i < 1000; ++i) out[i] = me * 100000 + static_cast<int>(tag) * 1000 + i;
      CollectiveDesc s;
      s.kind = CollectiveKind::kSend;
      s.dtype = DType::kI32;
      s.send = out.data();
      s.count = 1000;
      s.peer = next;
      s.tag = tag;
      CollectiveDesc r = s;
      r.kind = CollectiveKind::kRecv;
      r.send = nullptr;
      r.recv = in.data();
      r.peer = prev;
      // Even ranks send first; with 3 ranks rank 2 -> 0 still flows because 0 receives next.
      if (me % 2 == 0) {
        backend.run(s)->wait();
        backend.run(r)->wait();
      } else {
        backend.run(r)->wait();
        backend.run(s)->wait();
      }
      for (int i = 0; i < 1000; ++i) {
        ASSERT_EQ(in[i], prev * 100000 + static_cast<int>(tag) * 1000 + i) << "tag " << tag;
      }
    }
    // Collectives after p2p still line up (p2p does not advance the collective count).
    CollectiveDesc b;
    b.kind = CollectiveKind::kBarrier;
    backend.run(b)->wait();
  });
}

// ---- errors -------------------------------------------------------------------------------

// Runs fn on every rank and returns what each rank's call threw (empty: no error).
std::vector<std::optional<Error>> errors_of(int n, milliseconds timeout,
                                            const std::function<void(int, Backend&)>& fn) {
  std::vector<std::optional<Error>> errors(n);
  run_ranks(n, ShmOptions{}, timeout, [&](int me, Backend& backend) {
    try {
      fn(me, backend);
    } catch (const Error& e) {
      errors[me] = e;
    }
  });
  return errors;
}

TEST(ShmErrors, DifferentCollectivesRaiseInvalidArgumentNamingBothRanksAndCalls) {
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& backend) {
    std::vector<float> buf(1024, 1.f);
    CollectiveDesc d;
    d.send = d.recv = buf.data();
    d.count = 1024;
    d.seq = 1;
    if (me == 2) d.kind = CollectiveKind::kBroadcast;
    backend.run(d)->wait();
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
    const std::string msg = errors[r]->message();
    EXPECT_NE(msg.find("all_reduce f32 x 1024 sum"), std::string::npos) << msg;
    EXPECT_NE(msg.find("broadcast f32 x 1024 root 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("group rank 2 (world rank 12)"), std::string::npos) << msg;
  }
}

TEST(ShmErrors, DifferentCountsAreAMismatchToo) {
  auto errors = errors_of(2, milliseconds(20000), [](int me, Backend& backend) {
    std::vector<int64_t> buf(16, 1);
    CollectiveDesc d;
    d.dtype = DType::kI64;
    d.send = d.recv = buf.data();
    d.count = me == 0 ? 16 : 8;
    backend.run(d)->wait();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r].has_value());
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(errors[r]->message().find("i64 x 8"), std::string::npos) << errors[r]->message();
  }
}

TEST(ShmErrors, APeerThatNeverArrivesIsATimeoutNamingItAndTheGroupIsThenUnusable) {
  auto errors = errors_of(3, milliseconds(300), [](int me, Backend& backend) {
    std::vector<float> buf(8, 1.f);
    CollectiveDesc d;
    d.send = d.recv = buf.data();
    d.count = 8;
    d.seq = 41;
    if (me == 1) return;  // never calls
    const auto work = backend.run(d);
    EXPECT_TRUE(work->test());  // synchronous: finished, with its error
    EXPECT_TRUE(work->error() != nullptr);
    try {
      work->wait();
    } catch (const Error&) {
      // The group stays failed: the next call reports an error at once, it does not hang.
      auto again = backend.run(d);
      EXPECT_THROW(again->wait(), Error);
      throw;
    }
  });
  EXPECT_FALSE(errors[1].has_value());
  for (int r : {0, 2}) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    const std::string msg = errors[r]->message();
    // The first rank to time out names rank 1; a rank that sees the other one give up first
    // reports it as lost. Either way the op and its sequence number are named.
    EXPECT_TRUE(errors[r]->kind() == ErrorKind::kTimeout ||
                errors[r]->kind() == ErrorKind::kPeerLost)
        << errors[r]->what();
    EXPECT_NE(msg.find("all_reduce (seq 41"), std::string::npos) << msg;
    if (errors[r]->kind() == ErrorKind::kTimeout) {
      EXPECT_NE(msg.find("group ranks [1] (world ranks [11])"), std::string::npos) << msg;
    }
  }
}

// Regression (kill soak, docs/faults.md): a rank waiting in recv from rank 2, which never
// sends, saw rank 0 give up after its own timeout and reported "waiting for group ranks [0]":
// the rank that left, not the one it waited for. It must name rank 2.
TEST(ShmErrors, ARecvThatSeesAnotherRankLeaveStillNamesThePeerItWaitsFor) {
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& backend) {
    if (me == 2) return;  // never sends, never calls
    std::vector<float> buf(8, 1.f);
    CollectiveDesc d;
    d.send = d.recv = buf.data();
    d.count = 8;
    if (me == 0) {
      d.timeout = milliseconds(300);  // all_reduce: times out (1 and 2 never arrive), leaves
    } else {
      d.kind = CollectiveKind::kRecv;
      d.peer = 2;
    }
    backend.run(d)->wait();
  });
  ASSERT_TRUE(errors[0].has_value());
  EXPECT_EQ(errors[0]->kind(), ErrorKind::kTimeout) << errors[0]->what();
  ASSERT_TRUE(errors[1].has_value());
  EXPECT_EQ(errors[1]->kind(), ErrorKind::kPeerLost) << errors[1]->what();
  const std::string msg = errors[1]->message();
  EXPECT_NE(msg.find("recv (seq"), std::string::npos) << msg;
  EXPECT_NE(msg.find("group rank 0 (world rank 10) left the group after a timeout error"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("waiting for group ranks [2] (world ranks [12])"), std::string::npos) << msg;
  EXPECT_FALSE(errors[2].has_value());
}

// Regression (kill soak, docs/faults.md): rank 1 waits in a recv from rank 2, which has gone on
// to the all_reduce instead; rank 0, in the all_reduce, waits for rank 1 alone. Its timeout
// must also say whom rank 1 waits for, the rank the fault is with (in the soak, a stopped one).
TEST(ShmErrors, ATimeoutNamesWhomTheMissingRankWaitsFor) {
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& backend) {
    std::vector<float> buf(8, 1.f);
    CollectiveDesc d;
    d.send = d.recv = buf.data();
    d.count = 8;
    if (me == 0) d.timeout = milliseconds(1000);
    if (me == 1) {
      d.kind = CollectiveKind::kRecv;
      d.peer = 2;
    }
    backend.run(d)->wait();
  });
  ASSERT_TRUE(errors[0].has_value());
  EXPECT_EQ(errors[0]->kind(), ErrorKind::kTimeout) << errors[0]->what();
  const std::string msg = errors[0]->message();
  EXPECT_NE(msg.find("waiting for group ranks [1] (world ranks [11]); group rank 1 (world rank "
                     "11) waits for group rank 2 (world rank 12)"),
            std::string::npos)
      << msg;
  // The others see rank 0 leave; rank 2, in the all_reduce, waits for rank 1, whose wait for
  // rank 2 ends the chain there.
  ASSERT_TRUE(errors[2].has_value());
  EXPECT_EQ(errors[2]->kind(), ErrorKind::kPeerLost) << errors[2]->what();
  EXPECT_NE(errors[2]->message().find("waiting for group ranks [1] (world ranks [11])"),
            std::string::npos)
      << errors[2]->message();
  EXPECT_EQ(errors[2]->message().find("waits for"), std::string::npos) << errors[2]->message();
}

TEST(ShmErrors, RecvWithAnotherTagIsInvalidArgument) {
  auto errors = errors_of(2, milliseconds(5000), [](int me, Backend& backend) {
    int32_t v = 7;
    CollectiveDesc d;
    d.kind = me == 0 ? CollectiveKind::kSend : CollectiveKind::kRecv;
    d.dtype = DType::kI32;
    d.count = 1;
    d.peer = 1 - me;
    d.tag = me == 0 ? 3 : 4;
    d.send = &v;
    d.recv = &v;
    backend.run(d)->wait();
  });
  EXPECT_FALSE(errors[0].has_value());
  ASSERT_TRUE(errors[1].has_value());
  EXPECT_EQ(errors[1]->kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(errors[1]->message().find("has tag 3"), std::string::npos) << errors[1]->message();
  EXPECT_NE(errors[1]->message().find("expected tag 4"), std::string::npos);
}

TEST(ShmErrors, AllToAllVCountsThatDisagreeAreNamed) {
  auto errors = errors_of(2, milliseconds(5000), [](int me, Backend& backend) {
    std::vector<float> send(8, 1.f), recv(8);
    CollectiveDesc d;
    d.kind = CollectiveKind::kAllToAllV;
    d.send = send.data();
    d.recv = recv.data();
    d.send_counts = {2, 2};
    d.recv_counts = {2, me == 1 ? 3 : 2};  // rank 1 expects 3 from itself but sends 2
    backend.run(d)->wait();
  });
  ASSERT_TRUE(errors[1].has_value());
  EXPECT_EQ(errors[1]->kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(errors[1]->message().find("recv_counts[1] is 3"), std::string::npos)
      << errors[1]->message();
}

// The backend keeps one Folder across calls (folder_for): each call must still fold with its
// own dtype, op and premul factors, one step or several (small slots: the 4096-element calls
// take several steps, where a premul call's factors must last to its last step).
TEST(ShmCollectives, ConsecutiveCallsFoldWithTheirOwnDtypeOpAndFactors) {
  ShmOptions o;
  o.slot_bytes = 4096;  // the area holds 256 floats: 4096 elements take 16 steps or more
  constexpr int kRanks = 3;
  run_ranks(kRanks, o, milliseconds(30000), [](int me, Backend& backend) {
    auto all_reduce = [&](DType dtype, ReduceOp op, double factor, void* buf, int64_t count) {
      CollectiveDesc d;
      d.dtype = dtype;
      d.op = op;
      d.premul_factor = factor;
      d.send = d.recv = buf;
      d.count = count;
      backend.run(d)->wait();
    };
    for (const int64_t count : {int64_t{4}, int64_t{4096}}) {
      // x_r = r + 1; factors differ between the two premul calls.
      std::vector<float> a(count, me + 1.f);
      all_reduce(DType::kF32, ReduceOp::kSum, 1.0, a.data(), count);
      EXPECT_EQ(a.front(), 6.f);
      EXPECT_EQ(a.back(), 6.f);
      std::vector<float> b(count, me + 1.f);
      all_reduce(DType::kF32, ReduceOp::kPremulSum, me + 1.0, b.data(), count);  // 1+4+9
      EXPECT_EQ(b.front(), 14.f);
      EXPECT_EQ(b.back(), 14.f);
      std::vector<float> c(count, me + 1.f);
      all_reduce(DType::kF32, ReduceOp::kPremulSum, 2.0 * me + 3, c.data(), count);  // 3+10+21
      EXPECT_EQ(c.front(), 34.f);
      EXPECT_EQ(c.back(), 34.f);
      std::vector<float> m(count, me + 1.f);
      all_reduce(DType::kF32, ReduceOp::kMax, 1.0, m.data(), count);
      EXPECT_EQ(m.front(), 3.f);
      EXPECT_EQ(m.back(), 3.f);
      std::vector<double> e(count, 0.25 * (me + 1));
      all_reduce(DType::kF64, ReduceOp::kSum, 1.0, e.data(), count);
      EXPECT_EQ(e.front(), 1.5);
      EXPECT_EQ(e.back(), 1.5);
      std::vector<float> f(count, me + 1.f);
      all_reduce(DType::kF32, ReduceOp::kSum, 1.0, f.data(), count);  // sum again after them
      EXPECT_EQ(f.front(), 6.f);
      EXPECT_EQ(f.back(), 6.f);
    }
  });
}

// Note [Staging ring]: a step of at most 4 KiB stages in the small ring, of at most 64 KiB in
// the middle one, a larger one in the large ring; calls of every size in a random order take
// each ring round many times, and every result is exact.
TEST(ShmStagingRing, EachStepSizeStagesInItsRingAndMixedSizesStayExact) {
  ShmOptions o;
  o.slot_bytes = 2 << 20;
  const uint64_t small = shm::small_ring_bytes(o.slot_bytes);
  const uint64_t middle = shm::middle_ring_bytes(o.slot_bytes);
  ASSERT_EQ(small, 16u << 10);
  ASSERT_EQ(middle, 264u << 10);
  // Element counts of an f32 all_reduce; 2 ranks fold every size up to the area (512 KiB) in
  // one one-shot step of exactly the message.
  const std::vector<int64_t> counts = {64, 1024, 1040, 4096, 16384, 16400, 65536};
  run_ranks(2, o, milliseconds(60000), [&](int me, Backend& backend) {
    auto& group = dynamic_cast<shm::ShmGroup&>(backend);
    std::mt19937 rng(7);  // the same sequence on both ranks
    std::vector<float> send, recv;
    for (int k = 0; k < 600; ++k) {
      const int64_t count = counts[rng() % counts.size()];
      const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
      send.resize(count);
      recv.assign(count, -1.f);
      for (int64_t i = 0; i < count; ++i)
        send[i] = me * 1000.f + static_cast<float>((k * 7 + i) % 997);
      CollectiveDesc d;
      d.send = send.data();
      d.recv = recv.data();
      d.count = count;
      backend.run(d)->wait();
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[i], 1000.f + 2.f * static_cast<float>((k * 7 + i) % 997))
            << "call " << k << ", " << bytes << " bytes, element " << i;
      }
      const uint64_t at = group.staging_offset();
      std::string ring = "large";
      uint64_t begin = 0, end = o.slot_bytes;
      if (bytes <= small / 4) {
        ring = "small", begin = o.slot_bytes, end = begin + small;
      } else if (bytes <= middle / 4) {
        ring = "middle", begin = o.slot_bytes + small, end = begin + middle;
      }
      ASSERT_TRUE(at >= begin && at + bytes <= end)
          << "call " << k << " of " << bytes << " bytes staged at " << at << ", outside the "
          << ring << " ring [" << begin << ", " << end << ")";
    }
  });
}

// A reduce_scatter of 64 KiB in all stages its n blocks, each rounded up to whole lines, in one
// step of a little over 64 KiB (65,600 bytes at 5 ranks): it still takes the middle ring, whose
// pages stay in use (Note [Staging ring]). Results exact.
TEST(ShmStagingRing, ASixtyFourKibReduceScatterStagesInTheMiddleRingAtAnyRankCount) {
  ShmOptions o;
  o.kernel_copy_bytes = 0;  // stage every block
  for (const int n : {3, 5, 6, 7}) {
    const int64_t count = (int64_t{64} << 10) / 4 / n;  // f32 a rank
    run_ranks(n, o, milliseconds(60000), [&](int me, Backend& backend) {
      auto& group = dynamic_cast<shm::ShmGroup&>(backend);
      const uint64_t slot = o.slot_bytes, small = shm::small_ring_bytes(slot);
      const uint64_t middle = shm::middle_ring_bytes(slot);
      std::vector<float> send(n * count), recv(count, -1.f);
      for (int64_t i = 0; i < n * count; ++i) send[i] = static_cast<float>(me + i % 1001);
      CollectiveDesc d;
      d.kind = CollectiveKind::kReduceScatter;
      d.send = send.data();
      d.recv = recv.data();
      d.count = count;
      backend.run(d)->wait();
      for (int64_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(n * ((me * count + i) % 1001) + n * (n - 1) / 2);
        ASSERT_EQ(recv[i], want) << n << " ranks, element " << i;
      }
      const uint64_t at = group.staging_offset();
      EXPECT_TRUE(at >= slot + small && at < slot + small + middle)
          << n << " ranks: staged at " << at << ", outside the middle ring [" << slot + small
          << ", " << slot + small + middle << ")";
    });
  }
}

TEST(ShmErrors, PremulSumOnIntegersIsNotSupportedAndLeavesTheGroupUsable) {
  run_ranks(2, ShmOptions{}, milliseconds(10000), [](int, Backend& backend) {
    std::vector<int32_t> buf(4, 1);
    CollectiveDesc d;
    d.dtype = DType::kI32;
    d.op = ReduceOp::kPremulSum;
    d.send = d.recv = buf.data();
    d.count = 4;
    try {
      backend.run(d)->wait();
      ADD_FAILURE() << "premul_sum on i32 did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
      EXPECT_NE(e.message().find("premul_sum"), std::string::npos);
    }
    d.op = ReduceOp::kSum;
    backend.run(d)->wait();
    EXPECT_EQ(buf[0], 2);
  });
}

TEST(ShmOptionsTest, EnvironmentIsParsedAndBadValuesAreNamed) {
  setenv("BRAID_SHM_SLOT_BYTES", "65536", 1);
  setenv("BRAID_SHM_ALGO", "rs", 1);
  ShmOptions o = shm_options_from_env();
  EXPECT_EQ(o.slot_bytes, 65536u);
  EXPECT_EQ(o.algo, ShmAlgo::kReduceScatter);
  setenv("BRAID_SHM_ALGO", "ring", 1);
  try {
    shm_options_from_env();
    ADD_FAILURE() << "BRAID_SHM_ALGO=ring accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("BRAID_SHM_ALGO='ring'"), std::string::npos);
  }
  unsetenv("BRAID_SHM_ALGO");
  // Byte counts take get_env_bytes' binary suffixes, and each has its least value.
  setenv("BRAID_SHM_SLOT_BYTES", "4M", 1);
  setenv("BRAID_SHM_CHUNK_BYTES", "256k", 1);
  o = shm_options_from_env();
  EXPECT_EQ(o.slot_bytes, 4u << 20);
  EXPECT_EQ(o.chunk_bytes, 256u << 10);
  unsetenv("BRAID_SHM_CHUNK_BYTES");
  setenv("BRAID_SHM_SLOT_BYTES", "12q", 1);
  EXPECT_THROW(shm_options_from_env(), Error);
  setenv("BRAID_SHM_SLOT_BYTES", "2k", 1);
  try {
    shm_options_from_env();
    ADD_FAILURE() << "BRAID_SHM_SLOT_BYTES=2k accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("BRAID_SHM_SLOT_BYTES=2k is too small (expected at least 4096"),
              std::string::npos)
        << e.message();
  }
  unsetenv("BRAID_SHM_SLOT_BYTES");
  // The small-broadcast limits (at most 256 KiB) and all_gather's kernel-copy threshold.
  setenv("BRAID_SHM_BCAST_BYTES", "8K", 1);
  setenv("BRAID_SHM_BCAST_SHARED_BYTES", "256K", 1);
  setenv("BRAID_SHM_KERNEL_COPY_GATHER_BYTES", "0", 1);
  o = shm_options_from_env();
  EXPECT_EQ(o.bcast_bytes, 8u << 10);
  EXPECT_EQ(o.bcast_shared_bytes, 256u << 10);
  EXPECT_EQ(o.kernel_copy_gather_bytes, 0u);
  setenv("BRAID_SHM_BCAST_SHARED_BYTES", "257K", 1);
  try {
    shm_options_from_env();
    ADD_FAILURE() << "BRAID_SHM_BCAST_SHARED_BYTES=257K accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("BRAID_SHM_BCAST_SHARED_BYTES=263168 is too large (expected at "
                               "most 262144 bytes)"),
              std::string::npos)
        << e.message();
  }
  unsetenv("BRAID_SHM_BCAST_BYTES");
  unsetenv("BRAID_SHM_BCAST_SHARED_BYTES");
  unsetenv("BRAID_SHM_KERNEL_COPY_GATHER_BYTES");
  // The small-reduce limit.
  setenv("BRAID_SHM_REDUCE_BYTES", "0", 1);
  EXPECT_EQ(shm_options_from_env().reduce_bytes, 0u);
  setenv("BRAID_SHM_REDUCE_BYTES", "64K", 1);
  EXPECT_EQ(shm_options_from_env().reduce_bytes, 64u << 10);
  setenv("BRAID_SHM_REDUCE_BYTES", "1G", 1);  // no upper bound: larger ones go in chunks
  EXPECT_EQ(shm_options_from_env().reduce_bytes, uint64_t{1} << 30);
  unsetenv("BRAID_SHM_REDUCE_BYTES");
}

}  // namespace
}  // namespace braid
