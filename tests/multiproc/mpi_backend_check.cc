// The MPI backend under mpirun (docs/mpi.md, "Tests"). Run by run_mpi_backend.sh as
// `mpirun -np N mpi_backend_check SCENARIO` with the store variables exported; every rank
// creates the world ProcessGroup with backend "mpi" (braid initializes MPI itself).
//   conformance  the conformance suite (when built with it) and direct checks: dtype handling
//                (f32 accumulation of bf16, integer avg, premul_sum, NaN max, bool ops), every
//                collective once, send / recv, a subgroup, and bad input (kNotSupported,
//                kInvalidArgument) that leaves the group usable. Exit 0 when all pass.
//   mismatch     the last rank calls broadcast where the others call all_reduce (group call
//                #2): every rank must get kInvalidArgument naming both calls, and the next
//                call must fail at once with the same error. Exit 0 when so.
//   timeout      the last rank skips an all_reduce; every other rank must get kTimeout (1 s
//                per-call timeout) naming the op and seq, and the group must stay broken.
//                Each prints "timeout as expected" and marks it in the store; rank 0 then
//                calls MPI_Abort(7) (a timed-out MPI collective cannot be cancelled), which
//                ends every rank. The script expects mpirun's status 7 and N-1 such lines.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/tensor/tensor.h"
#if BRAID_MPI_CHECK_CONFORMANCE
#include "conformance.h"
#endif

namespace braid {
namespace {

int g_failures = 0;
int g_rank = 0;

void fail(const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAIL: %s\n", g_rank, what.c_str());
}

template <typename T>
void expect_eq(const std::string& what, T got, T want) {
  if (!(got == want)) {
    fail(what + ": got " + std::to_string(double(got)) + ", want " + std::to_string(double(want)));
  }
}

// Runs `call` and checks that it throws `kind` with every piece of `needles` in the message;
// returns the message ("" when nothing was thrown).
template <typename F>
std::string expect_error(const std::string& what, ErrorKind kind,
                         const std::vector<std::string>& needles, F&& call) {
  try {
    call();
  } catch (const Error& e) {
    if (e.kind() != kind) {
      fail(what + ": error kind " + std::string(to_string(e.kind())) + ", want " +
           std::string(to_string(kind)) + ": " + e.what());
    }
    for (const auto& n : needles) {
      if (std::string(e.what()).find(n) == std::string::npos) {
        fail(what + ": message lacks '" + n + "': " + e.what());
      }
    }
    return e.what();
  }
  fail(what + ": no error");
  return "";
}

CallOptions with_op(ReduceOp op, double premul_factor = 1.0) {
  CallOptions o;
  o.op = op;
  o.premul_factor = premul_factor;
  return o;
}

CallOptions async_call() {
  CallOptions o;
  o.async = AsyncOp::kYes;
  return o;
}

CallOptions with_timeout(std::chrono::milliseconds timeout) {
  CallOptions o;
  o.timeout = timeout;
  return o;
}

void check_reductions(ProcessGroup& pg) {
  const int n = pg.size(), me = pg.rank();
  {  // bf16: converted once to f32, summed, rounded once. 256 + 1 + 1 in bf16 steps is 256.
    Tensor t = Tensor::empty({3}, DType::kBF16);
    for (int i = 0; i < 3; ++i) t.data<bfloat16>()[i] = bfloat16(me == 0 ? 256.0f : 1.0f);
    pg.all_reduce(t);
    const float want = float(bfloat16(256.0f + float(n - 1)));
    expect_eq("bf16 sum (f32 accumulation)", float(t.data<bfloat16>()[2]), want);
  }
  {  // i32 avg: floor of the i64 sum / n
    Tensor t = Tensor::empty({2}, DType::kI32);
    t.data<int32_t>()[0] = -(me + 1) * 7;
    t.data<int32_t>()[1] = std::numeric_limits<int32_t>::max() - me;  // the sum overflows i32
    pg.all_reduce(t, with_op(ReduceOp::kAvg));
    int64_t s0 = 0, s1 = 0;
    for (int r = 0; r < n; ++r) s0 += -(r + 1) * 7, s1 += std::numeric_limits<int32_t>::max() - r;
    expect_eq("i32 avg", int64_t(t.data<int32_t>()[0]), int64_t(std::floor(double(s0) / n)));
    expect_eq("i32 avg (i64 sum)", int64_t(t.data<int32_t>()[1]), s1 / n);
  }
  {  // premul_sum: each rank scales its own contribution by its own factor
    Tensor t = Tensor::full({5}, 4.0, DType::kF32);
    pg.all_reduce(t, with_op(ReduceOp::kPremulSum, 0.5 * (me + 1)));
    double want = 0;
    for (int r = 0; r < n; ++r) want += 4.0 * 0.5 * (r + 1);
    expect_eq("f32 premul_sum", double(t.data<float>()[4]), want);
  }
  {  // max propagates NaN (as torch.maximum); min of the rest
    Tensor t = Tensor::full({2}, double(me), DType::kF32);
    if (me == n - 1) t.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    Tensor u = t.clone();
    pg.all_reduce(t, with_op(ReduceOp::kMax));
    pg.all_reduce(u, with_op(ReduceOp::kMin));
    if (!std::isnan(t.data<float>()[0])) fail("f32 max did not propagate NaN");
    expect_eq("f32 max", double(t.data<float>()[1]), double(n - 1));
    expect_eq("f32 min", double(u.data<float>()[1]), 0.0);
  }
  {  // bool: sum is "any", prod is "all"; element 1 differs on the last rank only
    Tensor any = Tensor::zeros({2}, DType::kBool), all = Tensor::ones({2}, DType::kBool);
    if (me == n - 1) any.data<bool>()[1] = true, all.data<bool>()[1] = false;
    pg.all_reduce(any);
    pg.all_reduce(all, with_op(ReduceOp::kProd));
    expect_eq("bool sum of zeros", int(any.data<bool>()[0]), 0);
    expect_eq("bool sum with a one", int(any.data<bool>()[1]), 1);
    expect_eq("bool prod of ones", int(all.data<bool>()[0]), 1);
    expect_eq("bool prod with a zero", int(all.data<bool>()[1]), 0);
  }
  {  // reduce to the last rank, reduce_scatter from one buffer
    Tensor t = Tensor::full({4}, double(me + 1), DType::kF64);
    pg.reduce(t, n - 1);
    if (me == n - 1) expect_eq("reduce f64", t.data<double>()[3], n * (n + 1) / 2.0);
    if (me != n - 1) expect_eq("reduce leaves non-roots", t.data<double>()[3], double(me + 1));
    Tensor in = Tensor::empty({n * 3}, DType::kI16), out = Tensor::empty({3}, DType::kI16);
    for (int64_t i = 0; i < n * 3; ++i) in.data<int16_t>()[i] = int16_t(i * (me + 1));
    pg.reduce_scatter_from(out, in);
    expect_eq("reduce_scatter i16", int(out.data<int16_t>()[1]), (me * 3 + 1) * n * (n + 1) / 2);
  }
}

void check_movement(ProcessGroup& pg) {
  const int n = pg.size(), me = pg.rank();
  Tensor b = Tensor::full({6}, double(me), DType::kF16);
  pg.broadcast(b, n - 1);
  expect_eq("broadcast f16", float(b.data<half>()[5]), float(n - 1));
  Tensor mine = Tensor::full({2}, double(me * 10), DType::kI64);
  Tensor all = Tensor::empty({n * 2}, DType::kI64);
  pg.all_gather_into(all, mine);
  for (int r = 0; r < n; ++r)
    expect_eq("all_gather", all.data<int64_t>()[2 * r + 1], int64_t(r * 10));
  std::vector<Tensor> outs;
  for (int r = 0; r < n; ++r) outs.push_back(Tensor::empty({2}, DType::kI64));
  pg.gather(outs, mine, 0);
  if (me == 0) {
    for (int r = 0; r < n; ++r) expect_eq("gather", outs[r].data<int64_t>()[0], int64_t(r * 10));
  }
  Tensor got = Tensor::empty({2}, DType::kI64);
  pg.scatter(got, outs, 0);  // root 0 scatters what it gathered
  expect_eq("scatter", got.data<int64_t>()[1], int64_t(me * 10));
  // all_to_all with splits: rank r sends r + 1 rows to every peer.
  Tensor in = Tensor::full({n * (me + 1), 2}, double(me), DType::kU8);
  Tensor out = Tensor::empty({n * (n + 1) / 2, 2}, DType::kU8);
  std::vector<int64_t> in_splits(n, me + 1), out_splits;
  for (int r = 0; r < n; ++r) out_splits.push_back(r + 1);
  pg.all_to_all(out, in, out_splits, in_splits);
  int64_t row = 0;
  for (int r = 0; r < n; ++r, row += r)
    expect_eq("all_to_all_v", int(out.data<uint8_t>()[2 * row]), r);
  pg.barrier();
  if (n > 1) {  // a ring of send / recv, tag 5
    Tensor s = Tensor::full({3}, double(me), DType::kF32), r = Tensor::empty({3}, DType::kF32);
    auto sent = pg.send(s, (me + 1) % n, 5, async_call());
    pg.recv(r, (me + n - 1) % n, 5);
    sent->wait();
    expect_eq("recv", double(r.data<float>()[2]), double((me + n - 1) % n));
  }
}

void check_bad_input(ProcessGroup& pg) {
  Tensor t = Tensor::ones({4}, DType::kI32);
  expect_error("premul_sum on i32", ErrorKind::kNotSupported, {"premul_sum", "i32"},
               [&] { pg.all_reduce(t, with_op(ReduceOp::kPremulSum, 2.0)); });
  if (pg.size() > 1) {
    expect_error("negative tag", ErrorKind::kInvalidArgument, {"tag -1"},
                 [&] { pg.send(t, (pg.rank() + 1) % pg.size(), -1); });
  }
  pg.all_reduce(t);  // still usable
  expect_eq("all_reduce after rejected calls", t.data<int32_t>()[0], pg.size());
}

int check_all(ProcessGroup& pg) {
  check_reductions(pg);
  check_movement(pg);
  check_bad_input(pg);
  if (pg.size() >= 2) {  // a subgroup of the even ranks
    std::vector<int> evens;
    for (int r = 0; r < pg.size(); r += 2) evens.push_back(r);
    auto sub = pg.new_group(evens);
    if (sub->rank() >= 0) {
      Tensor t = Tensor::full({3}, double(pg.rank()), DType::kF32);
      sub->all_reduce(t);
      double want = 0;
      for (int r : evens) want += r;
      expect_eq("subgroup all_reduce", double(t.data<float>()[0]), want);
    }
  }
#if BRAID_MPI_CHECK_CONFORMANCE
  conformance::Options options;
  options.counts = {0, 1, 7, 4099, 70001};
  for (const auto& line : conformance::run_conformance(pg, options)) fail("conformance: " + line);
#else
  if (pg.rank() == 0) std::printf("conformance suite not built in: direct checks only\n");
#endif
  return g_failures == 0 ? 0 : 1;
}

int check_mismatch(ProcessGroup& pg) {
  if (pg.size() < 2) return 0;
  Tensor t = Tensor::ones({10}, DType::kF32);
  pg.all_reduce(t);  // group call #1 agrees
  const bool odd_one = pg.rank() == pg.size() - 1;
  const std::vector<std::string> needles = {"collective mismatch at group call #2",
                                            "all_reduce f32 x 10 sum", "broadcast f32 x 10 root 0",
                                            "group rank " + std::to_string(pg.size() - 1)};
  const std::string message =
      expect_error("mismatched collective", ErrorKind::kInvalidArgument, needles, [&] {
        if (odd_one)
          pg.broadcast(t, 0);
        else
          pg.all_reduce(t);
      });
  if (pg.rank() == 0) std::printf("rank 0: %s\n", message.c_str());
  expect_error("call after a mismatch", ErrorKind::kInvalidArgument,
               {"collective mismatch at group call #2"}, [&] { pg.barrier(); });
  return g_failures == 0 ? 0 : 1;
}

int check_timeout(ProcessGroup& pg, Store& store) {
  if (pg.size() < 2) return 0;
  Tensor t = Tensor::ones({10}, DType::kF32);
  pg.all_reduce(t);
  const int skipper = pg.size() - 1;
  if (pg.rank() == skipper) {
    // Wait to be ended by rank 0's MPI_Abort; the store wait bounds it if that never comes.
    store.wait({"never-set"}, std::chrono::milliseconds(60000));
    return 4;
  }
  const std::string message =
      expect_error("skipped all_reduce", ErrorKind::kTimeout,
                   {"all_reduce (seq 2", "timed out after 1000 ms", "cross-rank check"},
                   [&] { pg.all_reduce(t, with_timeout(std::chrono::milliseconds(1000))); });
  expect_error("call after a timeout", ErrorKind::kTimeout, {"all_reduce (seq 2"},
               [&] { pg.barrier(); });
  if (g_failures != 0) return 1;
  std::printf("rank %d: timeout as expected: %s\n", pg.rank(), message.c_str());
  std::fflush(stdout);
  store.set("timed-out/" + std::to_string(pg.rank()), std::string("1"));
  if (pg.rank() != 0) {
    store.wait({"never-set"}, std::chrono::milliseconds(60000));
    return 4;
  }
  std::vector<std::string> keys;
  for (int r = 0; r < skipper; ++r) keys.push_back("timed-out/" + std::to_string(r));
  store.wait(keys, std::chrono::milliseconds(60000));
  MPI_Abort(MPI_COMM_WORLD, 7);
  return 4;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "conformance";
  int code = 0;
  try {
    braid::ProcessGroupOptions options;
    options.backend = "mpi";
    options.store = braid::store_from_env();
    auto pg = braid::ProcessGroup::create(options);
    braid::g_rank = pg->rank();
    if (scenario == "conformance") {
      code = braid::check_all(*pg);
    } else if (scenario == "mismatch") {
      code = braid::check_mismatch(*pg);
    } else if (scenario == "timeout") {
      code = braid::check_timeout(*pg, *options.store);
    } else {
      std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
      code = 2;
    }
    // Rank 0 serves the store: nobody leaves before every rank is done with it. The mismatch
    // left the group broken, but with nothing pending: MPI's own barrier is safe there.
    if (code == 0 && scenario == "conformance") pg->barrier();
    if (code == 0 && scenario == "mismatch") MPI_Barrier(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", braid::g_rank, e.what());
    code = 3;
  }
  if (braid::g_rank == 0 && code == 0) std::printf("mpi_backend_check %s: ok\n", scenario.c_str());
  return code;
}
