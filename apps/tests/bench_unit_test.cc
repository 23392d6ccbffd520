// Tests of apps/bench's pieces without processes: option parsing and validation, the bus
// bandwidth factors, the -c 1 checker against collectives simulated here in plain C++ (so a
// checker that accepts anything, or rejects correct results, fails), the table layout, and
// the order in which an interleaved sweep runs the libraries' loops, --iters-small's loop lengths
// and --loop-times' file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/check.h"
#include "bench/machine_probe.h"
#include "bench/report.h"
#include "bench/sweep.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"

namespace braid::bench {
namespace {

template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BenchOptions, SizesUseNcclTestsSuffixes) {
  EXPECT_EQ(parse_size("8", "-b"), 8);
  EXPECT_EQ(parse_size("64K", "-e"), 65536);
  EXPECT_EQ(parse_size("1m", "-e"), 1 << 20);
  EXPECT_EQ(parse_size("2G", "-e"), int64_t{2} << 30);
  EXPECT_EQ(parse_size("0.5K", "-e"), 512);
  expect_error([] { parse_size("12Q", "-b"); }, ErrorKind::kInvalidArgument, "-b '12Q'");
  expect_error([] { parse_size("-4", "-e"); }, ErrorKind::kInvalidArgument, "-e '-4'");
  expect_error([] { parse_size("", "-e"); }, ErrorKind::kInvalidArgument, "-e");
}

TEST(BenchOptions, DtypesAcceptNcclTestsAndBraidNames) {
  EXPECT_EQ(parse_bench_dtype("float"), DType::kF32);
  EXPECT_EQ(parse_bench_dtype("half"), DType::kF16);
  EXPECT_EQ(parse_bench_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_bench_dtype("int32"), DType::kI32);
  EXPECT_EQ(parse_bench_dtype("uint8"), DType::kU8);
  EXPECT_EQ(parse_bench_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_bench_dtype("f64"), DType::kF64);
  EXPECT_EQ(nccl_type_name(DType::kF32), "float");
  EXPECT_EQ(nccl_type_name(DType::kBF16), "bfloat16");
  expect_error([] { parse_bench_dtype("nosuch"); }, ErrorKind::kInvalidArgument, "nosuch");
  expect_error([] { parse_bench_dtype("uint32"); }, ErrorKind::kNotSupported, "uint32");
  expect_error([] { parse_bench_dtype("bool"); }, ErrorKind::kInvalidArgument, "bool");
}

TEST(BenchOptions, OpsAndRedops) {
  EXPECT_EQ(parse_ops("all").size(), 7u);
  EXPECT_EQ(parse_ops("scatter"), std::vector<Op>{Op::kScatter});
  EXPECT_EQ(parse_ops("allreduce"), std::vector<Op>{Op::kAllReduce});
  EXPECT_EQ(parse_ops("reduce_scatter"), std::vector<Op>{Op::kReduceScatter});
  EXPECT_EQ(parse_redop("avg"), ReduceOp::kAvg);
  expect_error([] { parse_ops("gossip"); }, ErrorKind::kInvalidArgument, "gossip");
  expect_error([] { parse_redop("xor"); }, ErrorKind::kInvalidArgument, "xor");
}

TEST(BenchOptions, ValidateNamesTheFlag) {
  BenchOptions o;
  o.min_bytes = 1024;
  o.max_bytes = 8;
  expect_error([&] { validate(o); }, ErrorKind::kInvalidArgument, "-b 1024 is larger than -e 8");
  o = BenchOptions{};
  o.factor = 1;
  expect_error([&] { validate(o); }, ErrorKind::kInvalidArgument, "-f 1");
  o = BenchOptions{};
  o.iters = 0;
  expect_error([&] { validate(o); }, ErrorKind::kInvalidArgument, "-n 0");
  o = BenchOptions{};
  o.iters_small = -1;
  expect_error([&] { validate(o); }, ErrorKind::kInvalidArgument, "--iters-small -1");
  o = BenchOptions{};
  o.peers = {"gloo"};
  expect_error([&] { validate(o); }, ErrorKind::kInvalidArgument, "--peer 'gloo'");
}

TEST(BenchOptions, ToArgsRoundTripsTheSweep) {
  BenchOptions o;
  o.min_bytes = 8;
  o.ops = {Op::kAllGather, Op::kReduce};
  o.dtype = DType::kBF16;
  std::vector<std::string> a = to_args(o);
  auto value_of = [&](const std::string& flag) {
    auto it = std::find(a.begin(), a.end(), flag);
    return it == a.end() || it + 1 == a.end() ? std::string("<missing>") : *(it + 1);
  };
  EXPECT_EQ(value_of("-b"), "8");
  EXPECT_EQ(parse_bench_dtype(value_of("-d")), DType::kBF16);
  EXPECT_EQ(std::count(a.begin(), a.end(), "--op"), 2);
  EXPECT_EQ(std::find(a.begin(), a.end(), "--nproc"), a.end());
  o.iters_small = 1000;
  a = to_args(o);
  EXPECT_EQ(value_of("--iters-small"), "1000");
}

// OSU micro-benchmarks' convention: sizes up to 8 KiB loop --iters-small times, larger ones -n.
TEST(BenchOptions, SmallSizesTakeTheirOwnIterationCount) {
  BenchOptions o;
  o.iters = 20;
  EXPECT_EQ(iters_for(o, 16), 20);  // unset: -n everywhere
  o.iters_small = 1000;
  EXPECT_EQ(iters_for(o, 0), 1000);
  EXPECT_EQ(iters_for(o, kSmallMessageBytes), 1000);
  EXPECT_EQ(iters_for(o, kSmallMessageBytes + 1), 20);
  EXPECT_EQ(iters_for(o, 64 << 20), 20);
}

TEST(BenchFormulas, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(Op::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Op::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Op::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Op::kAllToAll, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(Op::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Op::kReduce, 3), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Op::kScatter, 4), 0.75);
}

// ---- the checker against collectives computed here ----------------------------------------

template <typename T>
T fold(ReduceOp op, const std::vector<T>& xs, int n) {
  T acc = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) {
    if (op == ReduceOp::kProd)
      acc = acc * xs[i];
    else if (op == ReduceOp::kMin)
      acc = std::min(acc, xs[i]);
    else if (op == ReduceOp::kMax)
      acc = std::max(acc, xs[i]);
    else
      acc = acc + xs[i];
  }
  if (op == ReduceOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

// Rank `me`'s result of `op`, given every rank's input.
template <typename T>
std::vector<T> simulate(Op op, ReduceOp redop, const std::vector<std::vector<T>>& in, int me,
                        int root, int64_t count) {
  const int n = static_cast<int>(in.size());
  std::vector<T> out;
  auto column = [&](int64_t k) {
    std::vector<T> xs;
    for (int r = 0; r < n; ++r) xs.push_back(in[r][k]);
    return fold(redop, xs, n);
  };
  for (int64_t i = 0; i < result_elements(op, count, n); ++i) {
    switch (op) {
      case Op::kAllReduce:
      case Op::kReduce:
        out.push_back(column(i));
        break;
      case Op::kReduceScatter:
        out.push_back(column(me * count + i));
        break;
      case Op::kBroadcast:
        out.push_back(in[root][i]);
        break;
      case Op::kAllGather:
        out.push_back(in[i / count][i % count]);
        break;
      case Op::kAllToAll:
        out.push_back(in[i / count][me * count + i % count]);
        break;
      case Op::kScatter:
        out.push_back(in[root][me * count + i]);
        break;
    }
  }
  return out;
}

template <typename T>
void check_op(Op op, ReduceOp redop, DType dtype) {
  const int n = 3, root = 1;
  const int64_t count = 5;
  std::vector<std::vector<T>> in(n);
  for (int r = 0; r < n; ++r) {
    in[r].resize(input_elements(op, count, n));
    std::vector<T> recv(result_elements(op, count, n), T(77));
    CallBuffers b{in[r].data(), recv.data(), count, false};
    fill_inputs({op, dtype, redop, r, n, root}, b);
    EXPECT_TRUE(std::all_of(recv.begin(), recv.end(), [](T x) { return x == T(0); }))
        << "fill_inputs must clear the result buffer";
  }
  for (int me = 0; me < n; ++me) {
    SCOPED_TRACE(std::string(op_name(op)) + " " + std::string(reduce_op_name(redop)) + " rank " +
                 std::to_string(me));
    CheckCall c{op, dtype, redop, me, n, root};
    std::vector<T> got = simulate(op, redop, in, me, root, count);
    EXPECT_EQ(count_wrong(c, got.data(), count), 0);
    got[got.size() / 2] = got[got.size() / 2] + T(1);
    got[0] = T(-5);
    const int64_t expect = (op == Op::kReduce && me != root) ? 0 : 2;
    EXPECT_EQ(count_wrong(c, got.data(), count), expect);
  }
}

TEST(BenchCheck, AcceptsCorrectResultsAndCountsWrongOnes) {
  for (Op op : kAllOps) {
    for (ReduceOp redop :
         {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      if (!op_reduces(op) && redop != ReduceOp::kSum) continue;
      check_op<float>(op, redop, DType::kF32);
      check_op<double>(op, redop, DType::kF64);
      check_op<int32_t>(op, redop, DType::kI32);
    }
  }
}

TEST(BenchCheck, InputsDependOnTheRank) {
  std::vector<float> a(8), b(8), recv(8);
  fill_inputs({Op::kAllReduce, DType::kF32, ReduceOp::kSum, 0, 2, 0},
              {a.data(), recv.data(), 8, false});
  fill_inputs({Op::kAllReduce, DType::kF32, ReduceOp::kSum, 1, 2, 0},
              {b.data(), recv.data(), 8, false});
  EXPECT_NE(a, b);
}

// ---- table layout ---------------------------------------------------------------------------

TEST(BenchReport, RowFollowsNcclTestsColumns) {
  BenchOptions o;
  OpResult r;
  r.library = "braid shm";
  r.op = Op::kAllReduce;
  Row row;
  row.bytes = 1024;
  row.count = 256;
  row.out_of_place = {12.345, 0.08, 0.12, 0};
  row.in_place = {123.45, 0.01, 0.02, 3};
  r.rows = {row};
  EXPECT_EQ(format_heading(Op::kAllReduce, "braid shm"),
            "# Collective test: all_reduce (braid shm)\n");
  const std::string line = format_row(r, row, o);
  EXPECT_EQ(line,
            "        1024           256     float     sum      -1    12.35    0.08    0.12      0"
            "    123.5    0.01    0.02      3");
  EXPECT_NE(format_footer(r).find("# Out of bounds values : 3 FAILED"), std::string::npos);
  o.check = false;
  row.out_of_place.wrong = -1;
  EXPECT_NE(format_row(r, row, o).find("    N/A"), std::string::npos);
}

TEST(BenchReport, StealIsTheStealShareOfUserToSteal) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  const std::string a = "cpu  100 0 100 700 0 0 0 100 50 0";
  const std::string b = "cpu  200 0 200 1400 0 0 0 200 90 0";
  const Steal s = cpu_steal(a, b);
  EXPECT_DOUBLE_EQ(s.percent, 10.0);  // 100 of 1000; guest time is inside user
  EXPECT_EQ(s.ticks, 1000u);
  EXPECT_EQ(format_steal(s), "# cpu steal during the run: 10.0% of 1000 CPU ticks (/proc/stat)\n");
  EXPECT_LT(cpu_steal("", b).percent, 0);
  EXPECT_LT(cpu_steal("cpu0 1 2 3 4 5 6 7 8", b).percent, 0);  // a per-CPU line
  EXPECT_LT(cpu_steal("cpu  1 2 3", b).percent, 0);            // too few fields
  EXPECT_LT(cpu_steal(b, a).percent, 0);                       // counters went backwards
  EXPECT_LT(cpu_steal(a, a).percent, 0);                       // no time passed
  EXPECT_EQ(format_steal(Steal{}), "");
}

// ---- interleaved sweeps (--peer) --------------------------------------------------------------

// A one-rank library that logs its calls: "<name> run" / "<name> barrier".
class Recorder final : public Collectives {
 public:
  Recorder(std::string name, std::vector<std::string>* log, std::string unsupported = "")
      : name_(std::move(name)), log_(log), unsupported_(std::move(unsupported)) {}
  std::string name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void* run(Op, const CallBuffers& b, DType, ReduceOp, int) override {
    log_->push_back(name_ + " run");
    return b.recv;
  }
  void barrier() override { log_->push_back(name_ + " barrier"); }
  double sum_across(double value) override { return value; }
  std::string unsupported(Op, DType, ReduceOp) const override { return unsupported_; }

 private:
  std::string name_;
  std::vector<std::string>* log_;
  std::string unsupported_;
};

TEST(BenchSweep, InterleavedSweepAlternatesTheLibrariesLoopByLoop) {
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 16;  // two sizes
  o.factor = 2;
  o.iters = 2;
  o.warmup = 1;
  o.repeats = 3;
  o.check = false;
  std::vector<std::string> log;
  Recorder a("A", &log), b("B", &log), c("C", &log, "no such op here");
  std::vector<OpResult> r = sweep_interleaved({&a, &b, &c}, o, Op::kAllReduce);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].library, "A");
  EXPECT_EQ(r[1].library, "B");
  ASSERT_EQ(r[0].rows.size(), 2u);
  ASSERT_EQ(r[1].rows.size(), 2u);
  EXPECT_EQ(r[0].rows[1].bytes, 16);
  EXPECT_EQ(r[2].skipped, "no such op here");
  EXPECT_TRUE(r[2].rows.empty());
  // Warm-up: A's two calls (largest and smallest size), then B's. Then for each of 2 sizes x 2
  // placements: 3 repeats of A's loop and then B's (one untimed call, the barrier, 2 calls, and
  // a barrier before the other library runs: Note [Hand-over between libraries]), then A's
  // summary and B's, each ending with its library's barrier.
  std::vector<std::string> expect = {"A run", "A run", "B run", "B run"};
  for (int k = 0; k < 2 * 2; ++k) {
    for (int rep = 0; rep < 3; ++rep) {
      for (const char* lib : {"A", "B"}) {
        for (const char* what : {" run", " barrier", " run", " run", " barrier"}) {
          expect.push_back(std::string(lib) + what);
        }
      }
    }
    expect.push_back("A barrier");
    expect.push_back("B barrier");
  }
  EXPECT_EQ(log, expect);
}

// The timed loops make --iters-small calls at sizes up to 8 KiB and -n above: every library
// alike, so both columns of a ratio time loops of the same length.
TEST(BenchSweep, TimedLoopsOfSmallSizesMakeItersSmallCalls) {
  BenchOptions o;
  o.min_bytes = kSmallMessageBytes;
  o.max_bytes = 2 * kSmallMessageBytes;  // one size on each side
  o.factor = 2;
  o.iters = 2;
  o.iters_small = 5;
  o.warmup = 0;
  o.repeats = 1;
  o.check = false;
  std::vector<std::string> log;
  Recorder a("A", &log), b("B", &log);
  std::vector<OpResult> r = sweep_interleaved({&a, &b}, o, Op::kAllReduce);
  ASSERT_EQ(r.size(), 2u);
  // Per size and placement, each library: one untimed call, the barrier, the timed calls, a
  // barrier; then each library's summary barrier.
  std::vector<int> timed;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i] != "A barrier") continue;
    int calls = 0;
    while (i + 1 + calls < log.size() && log[i + 1 + calls] == "A run") ++calls;
    if (calls > 0) timed.push_back(calls);
  }
  EXPECT_EQ(timed, (std::vector<int>{5, 5, 2, 2}));  // 8 KiB out of / in place, then 16 KiB
}

// --loop-times: every timed loop of every library, one line each, in PATH.rank<R>; appended,
// so a second sweep adds its lines after the first's.
TEST(BenchSweep, LoopTimesListEveryTimedLoop) {
  char dir[] = "/tmp/braid-loop-times-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 16;
  o.factor = 2;
  o.iters = 3;
  o.warmup = 0;
  o.repeats = 2;
  o.check = false;
  o.loop_times_path = std::string(dir) + "/loops";
  std::vector<std::string> log;
  Recorder a("A", &log), b("B", &log);
  sweep_interleaved({&a, &b}, o, Op::kBroadcast);
  sweep(a, o, Op::kBroadcast, nullptr);
  const std::string path = o.loop_times_path + ".rank0";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::vector<std::vector<std::string>> lines;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::istringstream f(line);
    for (std::string x; std::getline(f, x, '\t');) fields.push_back(x);
    ASSERT_EQ(fields.size(), 7u) << line;
    lines.push_back(fields);
  }
  // 2 sizes x 2 placements x 2 loops, for A and B, then for A alone.
  ASSERT_EQ(lines.size(), 24u);
  EXPECT_EQ(lines[0], (std::vector<std::string>{"A", "broadcast", "8", "out_of_place", "0", "3",
                                                lines[0][6]}));
  EXPECT_EQ(lines[1][4], "1");
  EXPECT_GE(std::stod(lines[0][6]), 0.0);
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [](auto& l) { return l[0] == "B"; }), 8);
  EXPECT_EQ(lines.back()[0], "A");
  EXPECT_EQ(lines.back()[2], "16");
  EXPECT_EQ(lines.back()[3], "in_place");
  std::remove(path.c_str());
  // A file that cannot be written: the sweep's results stand, and stderr names the path.
  o.loop_times_path = std::string(dir) + "/no-such-folder/loops";
  ::testing::internal::CaptureStderr();
  const OpResult r = sweep(a, o, Op::kBroadcast, nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.rows.size(), 2u);
  EXPECT_NE(err.find("--loop-times: cannot append to " + o.loop_times_path + ".rank0"),
            std::string::npos)
      << err;
  ::rmdir(dir);
}

// The probe between two threads of one process over an in-memory store: the same segment and
// protocol as between two ranks, so both copies are measured and rank 0 has the figures.
TEST(MachineProbe, TwoRanksMeasureBothCopies) {
  auto store = std::make_shared<InMemoryStore>();
  MachineProbe r0, r1;
  std::thread t([&] { r1 = probe_machine(*store, 1, 3, "t"); });
  r0 = probe_machine(*store, 0, 3, "t");
  t.join();
  ASSERT_EQ(r0.skipped, "");
  EXPECT_GT(r0.cross_gbs, 0);
  EXPECT_GT(r0.local_gbs, 0);
  EXPECT_EQ(r1.skipped, "");
  EXPECT_GT(r1.cross_gbs, 0);
  const MachineProbe r2 = probe_machine(*store, 2, 3, "t");  // rank 2 takes no part
  EXPECT_EQ(r2.skipped, "");
  EXPECT_EQ(r2.cross_gbs, 0);
  EXPECT_EQ(probe_machine(*store, 0, 1, "u").skipped, "one rank");
}

TEST(MachineProbe, FooterWarnsOnlyBelowTheSlowRatio) {
  MachineProbe ok{.local_gbs = 30, .cross_gbs = 15, .skipped = ""};
  MachineProbe slow{.local_gbs = 30, .cross_gbs = 2, .skipped = ""};
  MachineProbe none{
      .local_gbs = 0, .cross_gbs = 0, .skipped = "ranks 0 and 1 are on different hosts"};
  const std::string fine = format_probe(ok, ok);
  EXPECT_NE(fine.find("at the start 15.0 GB/s (0.50 of the copy within one, 30.0 GB/s)"),
            std::string::npos)
      << fine;
  EXPECT_EQ(fine.find("warning"), std::string::npos) << fine;
  const std::string bad = format_probe(ok, slow);
  EXPECT_NE(bad.find("# warning: at the end the copy between processes ran at 0.07"),
            std::string::npos)
      << bad;
  EXPECT_EQ(bad.find("at the start the copy"), std::string::npos) << bad;
  const std::string skipped = format_probe(none, none);
  EXPECT_NE(skipped.find("not run (ranks 0 and 1 are on different hosts)"), std::string::npos);
  EXPECT_EQ(skipped.find("warning"), std::string::npos);
  EXPECT_EQ(format_probe(MachineProbe{.skipped = "one rank"}, MachineProbe{.skipped = "one rank"}),
            "");
}

}  // namespace
}  // namespace braid::bench
