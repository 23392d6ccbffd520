// ProcessGroup front: argument checks, descriptors, sequence numbers, signatures, timeout
// resolution, blocking vs async calls, subgroups and debug mode, against a recording Backend
// (a test double defined here and registered only by this test). The real collectives on the
// shm backend are in the ProcessGroupShm suite at the end.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "braid/comm/backend.h"
#include "braid/comm/process_group.h"
#include "braid/comm/work.h"
#include "braid/core/config.h"
#include "braid/core/environment.h"
#include "braid/tensor/ops.h"
#include "comm_test_util.h"

namespace braid {
namespace {

using std::chrono::milliseconds;
using testing::run_threads;

// How the recording backend answers run().
enum class Answer { kComplete, kFail, kPending };

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(const BackendContext& ctx) : ctx_(ctx) {
    caps_.devices = {DeviceType::kCPU};
    caps_.dtypes = {DType::kF32, DType::kF64, DType::kI64, DType::kU8};
    for (int k = 0; k <= static_cast<int>(CollectiveKind::kRecv); ++k) {
      if (static_cast<CollectiveKind>(k) != CollectiveKind::kScatter) {
        caps_.collectives.push_back(static_cast<CollectiveKind>(k));
      }
    }
    caps_.point_to_point = true;
  }
  std::string_view name() const override { return "recording"; }
  const BackendCapabilities& capabilities() const override { return caps_; }

  std::shared_ptr<Work> run(const CollectiveDesc& desc) override {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(desc);
    if (answer_ == Answer::kFail) {
      return completed_work(
          std::make_exception_ptr(Error(ErrorKind::kPeerLost, "recording: rank 1 went away")));
    }
    if (answer_ == Answer::kPending) {
      pending_ = std::make_shared<AsyncWork>("recording " + std::to_string(desc.seq), desc.timeout);
      if (on_pending_) on_pending_(pending_);
      return pending_;
    }
    // Gathers: block r of recv holds r + 1 (f32), so copy-outs can be checked.
    if ((desc.kind == CollectiveKind::kAllGather || desc.kind == CollectiveKind::kGather) &&
        desc.recv && desc.dtype == DType::kF32) {
      auto* out = static_cast<float*>(desc.recv);
      for (int r = 0; r < ctx_.size; ++r) {
        for (int64_t i = 0; i < desc.count; ++i) out[r * desc.count + i] = float(r + 1);
      }
    }
    return completed_work();
  }

  std::vector<CollectiveDesc> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  void answer(Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = a;
  }
  std::shared_ptr<AsyncWork> pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_;
  }
  const BackendContext& context() const { return ctx_; }
  // Called (under the backend's lock) with each pending Work it hands out.
  void on_pending(std::function<void(std::shared_ptr<AsyncWork>)> fn) {
    on_pending_ = std::move(fn);
  }

 private:
  BackendContext ctx_;
  BackendCapabilities caps_;
  std::mutex mu_;
  std::vector<CollectiveDesc> log_;
  Answer answer_ = Answer::kComplete;
  std::shared_ptr<AsyncWork> pending_;
  std::function<void(std::shared_ptr<AsyncWork>)> on_pending_;
};

const char* kRecording = "recording-test-double";

void register_recording_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(kRecording, [](const BackendContext& ctx) -> std::unique_ptr<Backend> {
      return std::make_unique<RecordingBackend>(ctx);
    });
  });
}

std::shared_ptr<ProcessGroup> recording_group(
    int rank, int size, std::shared_ptr<Store> store,
    std::optional<milliseconds> timeout = milliseconds(20000)) {
  register_recording_once();
  ProcessGroupOptions o;
  o.backend = kRecording;
  o.store = std::move(store);
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  return ProcessGroup::create(o);
}

// A group of one rank on its own store: enough for checks that need no peer.
std::shared_ptr<ProcessGroup> solo_group() {
  return recording_group(0, 1, std::make_shared<InMemoryStore>(milliseconds(20000)));
}

RecordingBackend& rec(ProcessGroup& pg) {
  return dynamic_cast<RecordingBackend&>(pg.backend());
}

// Runs `fn`, expects a braid::Error of `kind` whose message contains every part.
template <typename Fn>
void expect_error(Fn&& fn, ErrorKind kind, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error of kind " << to_string(kind);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    for (const auto& p : parts)
      EXPECT_NE(e.message().find(p), std::string::npos) << "'" << p << "' not in: " << e.message();
  }
}

// ------------------------------------------------------------------ argument checks

TEST(ProcessGroupChecks, UndefinedTensor) {
  auto pg = solo_group();
  Tensor undefined;
  expect_error([&] { pg->all_reduce(undefined); }, ErrorKind::kInvalidArgument,
               {"all_reduce", "tensor", "undefined"});
  expect_error([&] { pg->broadcast(undefined, 0); }, ErrorKind::kInvalidArgument,
               {"broadcast", "undefined"});
}

TEST(ProcessGroupChecks, NonContiguousTensor) {
  auto pg = solo_group();
  Tensor t = Tensor::zeros({2, 3}).transpose(0, 1);
  expect_error([&] { pg->all_reduce(t); }, ErrorKind::kInvalidArgument,
               {"all_reduce", "[3, 2]", "contiguous"});
}

TEST(ProcessGroupChecks, DeviceDtypeAndKindOutsideCapabilities) {
  auto pg = solo_group();
  Tensor meta = Tensor::empty({4}, DType::kF32, kMeta);
  expect_error([&] { pg->all_reduce(meta); }, ErrorKind::kNotSupported,
               {"all_reduce", kRecording, "meta"});
  Tensor fp8 = Tensor::zeros({4}, DType::kF8E4M3);
  expect_error([&] { pg->all_reduce(fp8); }, ErrorKind::kNotSupported,
               {"all_reduce", "f8e4m3", "supported: f32, f64, i64, u8"});
  Tensor out = Tensor::zeros({4});
  std::vector<Tensor> inputs = {Tensor::zeros({4})};
  expect_error([&] { pg->scatter(out, inputs, 0); }, ErrorKind::kNotSupported,
               {"does not implement scatter"});
  EXPECT_TRUE(rec(*pg).log().empty()) << "nothing may reach the backend after a failed check";
}

TEST(ProcessGroupChecks, RootAndPeerOutOfRange) {
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor t = Tensor::zeros({3});
    expect_error([&] { pg->broadcast(t, 2); }, ErrorKind::kOutOfRange,
                 {"broadcast", "root 2", "[0, 2)"});
    expect_error([&] { pg->reduce(t, -1); }, ErrorKind::kOutOfRange, {"reduce", "root -1"});
    expect_error([&] { pg->send(t, 5); }, ErrorKind::kOutOfRange, {"send", "peer 5"});
    expect_error([&] { pg->recv(t, rank); }, ErrorKind::kInvalidArgument,
                 {"recv", "this rank itself"});
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupChecks, AllGatherIntoOutputMustBeSizeTimesInput) {
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor in = Tensor::zeros({2, 3});
    Tensor bad = Tensor::zeros({3, 3});
    expect_error([&] { pg->all_gather_into(bad, in); }, ErrorKind::kInvalidArgument,
                 {"all_gather_into", "output", "[3, 3]", "[2, 2, 3]", "[4, 3]"});
    Tensor wrong_dtype = Tensor::zeros({4, 3}, DType::kF64);
    expect_error([&] { pg->all_gather_into(wrong_dtype, in); }, ErrorKind::kInvalidArgument,
                 {"output", "f64", "f32"});
    Tensor stacked = Tensor::zeros({2, 2, 3});
    Tensor flat = Tensor::zeros({4, 3});
    pg->all_gather_into(stacked, in);
    pg->all_gather_into(flat, in);
    Tensor small_out = Tensor::zeros({3});
    Tensor big_in = Tensor::zeros({5});
    expect_error([&] { pg->reduce_scatter_from(small_out, big_in); }, ErrorKind::kInvalidArgument,
                 {"reduce_scatter_from", "input", "[5]", "[2, 3]", "[6]"});
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupChecks, ListFormsNeedOneTensorPerRankLikeTheInput) {
  auto result = run_threads(3, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor in = Tensor::zeros({2});
    std::vector<Tensor> two = {Tensor::zeros({2}), Tensor::zeros({2})};
    expect_error([&] { pg->all_gather(two, in); }, ErrorKind::kInvalidArgument,
                 {"all_gather", "outputs", "holds 2", "3"});
    std::vector<Tensor> odd = {Tensor::zeros({2}), Tensor::zeros({3}), Tensor::zeros({2})};
    expect_error([&] { pg->all_gather(odd, in); }, ErrorKind::kInvalidArgument,
                 {"outputs[1]", "[3]", "[2]"});
    Tensor out = Tensor::zeros({2});
    expect_error([&] { pg->reduce_scatter(out, odd); }, ErrorKind::kInvalidArgument,
                 {"reduce_scatter", "inputs[1]"});
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupChecks, AllToAllSplits) {
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor in = Tensor::zeros({5, 2});
    Tensor out = Tensor::zeros({4, 2});
    expect_error(
        [&] {
          pg->all_to_all(out, in, {2, 2}, {2, 2});
        },
        ErrorKind::kInvalidArgument, {"input_splits", "sum to 4", "5"});
    expect_error(
        [&] {
          pg->all_to_all(out, in, {2, 2}, {6, -1});
        },
        ErrorKind::kInvalidArgument, {"input_splits[1]", "negative"});
    expect_error(
        [&] {
          pg->all_to_all(out, in, {2, 2}, {5});
        },
        ErrorKind::kInvalidArgument, {"input_splits", "holds 1"});
    Tensor wide = Tensor::zeros({4, 3});
    expect_error(
        [&] {
          pg->all_to_all(wide, in, {2, 2}, {2, 3});
        },
        ErrorKind::kInvalidArgument, {"[4, 3]", "[5, 2]", "beyond dimension 0"});
    expect_error([&] { pg->all_to_all(out, in, {}, {}); }, ErrorKind::kInvalidArgument,
                 {"input_splits is empty", "5 rows", "2 ranks"});
    Tensor odd = Tensor::zeros({3});
    Tensor odd_out = Tensor::zeros({3});
    expect_error([&] { pg->all_to_all(odd_out, odd); }, ErrorKind::kInvalidArgument,
                 {"all_to_all", "3 elements", "2 equal parts"});
    // Valid: rows {2, 3} out, {1, 3} in (rank-dependent, as all_to_all_single allows).
    Tensor in4 = Tensor::zeros({4, 2});
    pg->all_to_all(in, in4, {2, 3}, {1, 3});
    const CollectiveDesc d = rec(*pg).log().back();
    EXPECT_EQ(d.kind, CollectiveKind::kAllToAllV);
    EXPECT_EQ(d.count, 2);  // one row
    EXPECT_EQ(d.send_counts, (std::vector<int64_t>{2, 6}));
    EXPECT_EQ(d.send_offsets, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(d.recv_counts, (std::vector<int64_t>{4, 6}));
    EXPECT_EQ(d.recv_offsets, (std::vector<int64_t>{0, 4}));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupChecks, RawRunChecksCountsBuffersAndVectors) {
  auto pg = solo_group();
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllReduce;
  d.count = -1;
  expect_error([&] { pg->run(d); }, ErrorKind::kInvalidArgument, {"run(all_reduce)", "count -1"});
  d.count = 4;
  expect_error([&] { pg->run(d); }, ErrorKind::kInvalidArgument, {"send buffer is null"});
  float buf[4] = {};
  d.send = buf;
  expect_error([&] { pg->run(d); }, ErrorKind::kInvalidArgument, {"recv buffer is null"});
  d.recv = buf;
  pg->run(d);
  d.kind = CollectiveKind::kAllToAllV;
  d.send_counts = {4};
  expect_error([&] { pg->run(d); }, ErrorKind::kInvalidArgument, {"send_offsets", "holds 0"});
  d.kind = CollectiveKind::kBroadcast;
  d.root = 1;
  expect_error([&] { pg->run(d); }, ErrorKind::kOutOfRange, {"root 1"});
}

TEST(ProcessGroupChecks, UnknownBackendNamesTheAvailableOnes) {
  register_recording_once();
  ProcessGroupOptions o;
  o.backend = "carrier-pigeon";
  o.store = std::make_shared<InMemoryStore>();
  o.rank = 0;
  o.size = 1;
  expect_error([&] { ProcessGroup::create(o); }, ErrorKind::kInvalidArgument,
               {"carrier-pigeon", kRecording});
  o.backend = kRecording;
  o.rank = 1;
  expect_error([&] { ProcessGroup::create(o); }, ErrorKind::kInvalidArgument, {"rank 1", "[0, 1)"});
  o.rank = 0;
  o.size = -1;
  expect_error([&] { ProcessGroup::create(o); }, ErrorKind::kInvalidArgument,
               {"both rank and size"});
}

// `braid env`'s communication lines (backend.h): every backend of the build, then the UCX and
// MPI libraries as loaded, with the UCX version, the one braid was built against, and the file.
TEST(CommunicationReport, NamesTheBackendsAndTheLoadedLibraries) {
  const std::string report = communication_report();
  std::string backends = "comm backends:";
  for (const std::string& name : backend_names()) backends += " " + name;
  EXPECT_EQ(report.substr(0, report.find('\n')), backends) << report;
  EXPECT_NE(backends.find(" shm"), std::string::npos) << report;
#if BRAID_HAVE_UCX
  EXPECT_TRUE(std::regex_search(
      report,
      std::regex(
          R"(\nucx: [0-9]+\.[0-9]+\.[0-9]+ \(built against 1\.[0-9]+; /[^)]*libucp\.so[^)]*\)\n)")))
      << report;
#else
  EXPECT_EQ(report.find("ucx:"), std::string::npos) << report;
#endif
#if BRAID_HAVE_MPI
  EXPECT_TRUE(std::regex_search(report, std::regex(R"(\nmpi: [^\n]*MPI[^\n]*[0-9]\n)"))) << report;
#else
  EXPECT_EQ(report.find("mpi:"), std::string::npos) << report;
#endif
}

// ------------------------------------------------------------------ descriptor, seq, signature

TEST(ProcessGroupFront, DescriptorCarriesTheCall) {
  auto pg = solo_group();
  Tensor t = Tensor::zeros({2, 3}, DType::kF64);
  CallOptions o;
  o.op = ReduceOp::kPremulSum;
  o.premul_factor = 0.25;
  pg->all_reduce(t, o);
  o.op = ReduceOp::kAvg;
  pg->reduce(t, 0, o);
  const auto log = rec(*pg).log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].kind, CollectiveKind::kAllReduce);
  EXPECT_EQ(log[0].send, t.data_ptr());
  EXPECT_EQ(log[0].recv, t.data_ptr());
  EXPECT_EQ(log[0].count, 6);
  EXPECT_EQ(log[0].dtype, DType::kF64);
  EXPECT_EQ(log[0].op, ReduceOp::kPremulSum);  // handed over as-is
  EXPECT_EQ(log[0].premul_factor, 0.25);
  EXPECT_EQ(log[1].kind, CollectiveKind::kReduce);
  EXPECT_EQ(log[1].op, ReduceOp::kAvg);
  EXPECT_EQ(log[1].timeout, milliseconds(20000));
}

TEST(ProcessGroupFront, SequenceNumbersCountPerGroup) {
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor t = Tensor::zeros({1});
    pg->all_reduce(t);
    pg->barrier();
    auto sub = pg->new_group({0, 1});
    sub->all_reduce(t);
    pg->all_reduce(t);
    const auto world = rec(*pg).log();
    ASSERT_EQ(world.size(), 3u);
    EXPECT_EQ(world[0].seq, 1u);
    EXPECT_EQ(world[1].seq, 2u);
    EXPECT_EQ(world[2].seq, 3u);
    const auto child = rec(*sub).log();
    ASSERT_EQ(child.size(), 1u);
    EXPECT_EQ(child[0].seq, 1u);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupFront, SignatureCoversKindDtypeCountOpRootAndGroup) {
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    auto sub = pg->new_group({0, 1});
    Tensor f4 = Tensor::zeros({4});
    Tensor f5 = Tensor::zeros({5});
    Tensor d4 = Tensor::zeros({4}, DType::kF64);
    CallOptions max_op;
    max_op.op = ReduceOp::kMax;
    pg->all_reduce(f4);          // 0
    pg->all_reduce(f5);          // 1: count
    pg->all_reduce(d4);          // 2: dtype
    pg->all_reduce(f4, max_op);  // 3: op
    pg->broadcast(f4, 0);        // 4: kind
    pg->broadcast(f4, 1);        // 5: root
    pg->all_reduce(f4);          // 6: same as 0
    sub->all_reduce(f4);         //    group
    std::vector<Tensor> outs = {Tensor::zeros({4}), Tensor::zeros({4})};
    pg->all_gather(outs, f4);          // 7
    pg->all_gather(outs, f4, max_op);  // 8: op does not matter to all_gather
    Tensor peer = Tensor::zeros({4});
    if (rank == 0)
      pg->send(peer, 1);
    else
      pg->recv(peer, 0);  // 9
    const auto w = rec(*pg).log();
    std::set<uint64_t> distinct;
    for (int i = 0; i <= 5; ++i) distinct.insert(w[i].signature);
    EXPECT_EQ(distinct.size(), 6u) << "each field must change the signature";
    EXPECT_EQ(w[6].signature, w[0].signature);
    EXPECT_NE(rec(*sub).log()[0].signature, w[0].signature);
    EXPECT_EQ(w[7].signature, w[8].signature);
    // The same call on another rank has the same signature: publish and compare.
    store->set("sig/" + std::to_string(rank), std::to_string(w[0].signature));
    EXPECT_EQ(store->get_string("sig/0"), store->get_string("sig/1"));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// ------------------------------------------------------------------ timeouts

TEST(ProcessGroupFront, TimeoutResolutionCallThenGroupThenEnvThenDefault) {
  {
    PatchEnvironment env{{"BRAID_TIMEOUT", "7.5"}};
    auto from_env = recording_group(0, 1, std::make_shared<InMemoryStore>(), std::nullopt);
    EXPECT_EQ(from_env->timeout(), milliseconds(7500));
    auto from_group = recording_group(0, 1, std::make_shared<InMemoryStore>(), milliseconds(1234));
    EXPECT_EQ(from_group->timeout(), milliseconds(1234));
    Tensor t = Tensor::zeros({1});
    CallOptions o;
    o.timeout = milliseconds(99);
    from_group->all_reduce(t, o);
    from_group->all_reduce(t);
    const auto log = rec(*from_group).log();
    EXPECT_EQ(log[0].timeout, milliseconds(99));
    EXPECT_EQ(log[1].timeout, milliseconds(1234));
  }
  {
    PatchEnvironment env{{"BRAID_TIMEOUT", ""}};
    auto by_default = recording_group(0, 1, std::make_shared<InMemoryStore>(), std::nullopt);
    EXPECT_EQ(by_default->timeout(), milliseconds(300000));
  }
}

TEST(ProcessGroupFront, BadTimeoutsAreRejected) {
  {
    PatchEnvironment env{{"BRAID_TIMEOUT", "soon"}};
    expect_error([] { recording_group(0, 1, std::make_shared<InMemoryStore>(), std::nullopt); },
                 ErrorKind::kInvalidArgument, {"BRAID_TIMEOUT", "soon"});
  }
  {
    PatchEnvironment env{{"BRAID_TIMEOUT", "0"}};
    expect_error([] { recording_group(0, 1, std::make_shared<InMemoryStore>(), std::nullopt); },
                 ErrorKind::kInvalidArgument, {"BRAID_TIMEOUT", "> 0"});
  }
  expect_error([] { recording_group(0, 1, std::make_shared<InMemoryStore>(), milliseconds(0)); },
               ErrorKind::kInvalidArgument, {"ProcessGroupOptions.timeout"});
  auto pg = solo_group();
  Tensor t = Tensor::zeros({1});
  CallOptions o;
  o.timeout = milliseconds(-5);
  expect_error([&] { pg->all_reduce(t, o); }, ErrorKind::kInvalidArgument,
               {"CallOptions.timeout", "-5"});
}

// ------------------------------------------------------------------ blocking and async

TEST(ProcessGroupFront, BlockingCallWaitsAndThrowsTheBackendError) {
  auto pg = solo_group();
  Tensor t = Tensor::zeros({1});
  rec(*pg).answer(Answer::kFail);
  expect_error([&] { pg->all_reduce(t); }, ErrorKind::kPeerLost, {"rank 1 went away"});
  // Async: the error stays in the Work until someone waits.
  CallOptions async;
  async.async = AsyncOp::kYes;
  auto work = pg->all_reduce(t, async);
  EXPECT_TRUE(work->test());
  EXPECT_NE(work->error(), nullptr);
  expect_error([&] { work->wait(); }, ErrorKind::kPeerLost, {"went away"});
}

TEST(ProcessGroupFront, BlockingCallReturnsOnlyOnceTheWorkCompleted) {
  auto pg = solo_group();
  Tensor t = Tensor::zeros({1});
  rec(*pg).answer(Answer::kPending);
  std::atomic<bool> completed{false};
  std::thread completer;
  rec(*pg).on_pending([&](std::shared_ptr<AsyncWork> w) {
    completer = std::thread([&completed, w] {
      completed = true;
      w->complete();
    });
  });
  auto work = pg->all_reduce(t);
  EXPECT_TRUE(completed.load());
  EXPECT_TRUE(work->test());
  completer.join();
}

TEST(ProcessGroupFront, AsyncCallReturnsBeforeCompletion) {
  auto pg = solo_group();
  Tensor t = Tensor::zeros({1});
  rec(*pg).answer(Answer::kPending);
  CallOptions async;
  async.async = AsyncOp::kYes;
  auto work = pg->all_reduce(t, async);
  EXPECT_FALSE(work->test());
  EXPECT_FALSE(work->wait(milliseconds(1)));
  rec(*pg).pending()->complete();
  EXPECT_TRUE(work->wait());
}

TEST(ProcessGroupFront, BlockingCallTimesOutNamingTheOp) {
  auto pg = solo_group();
  Tensor t = Tensor::zeros({1});
  rec(*pg).answer(Answer::kPending);
  CallOptions o;
  o.timeout = milliseconds(20);
  expect_error([&] { pg->all_reduce(t, o); }, ErrorKind::kTimeout, {"recording 1", "20 ms"});
}

TEST(ProcessGroupFront, ListFormsCopyOutOfTheStagingBuffer) {
  auto result = run_threads(3, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor in = Tensor::zeros({2, 2});
    std::vector<Tensor> outs;
    for (int r = 0; r < size; ++r) outs.push_back(Tensor::zeros({2, 2}));
    pg->all_gather(outs, in);
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(outs[r].to_vector(), std::vector<double>(4, r + 1)) << "block " << r;
    }
    // Async: the copy happens when the Work is waited on, not before.
    for (auto& o : outs) o.zero_();
    CallOptions async;
    async.async = AsyncOp::kYes;
    auto work = pg->gather(outs, in, rank, async);
    EXPECT_EQ(outs[2].to_vector(), std::vector<double>(4, 0.0));
    work->wait();
    EXPECT_EQ(outs[2].to_vector(), std::vector<double>(4, 3.0));
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// ------------------------------------------------------------------ subgroups

TEST(ProcessGroupSubgroups, MembersGetRanksNonMembersAPlaceholder) {
  auto result = run_threads(4, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    auto odd = pg->new_group({3, 1});
    if (rank % 2 == 1) {
      EXPECT_EQ(odd->rank(), rank / 2);
      EXPECT_EQ(odd->size(), 2);
      EXPECT_EQ(odd->global_ranks(), (std::vector<int>{1, 3}));
      EXPECT_EQ(rec(*odd).context().global_ranks, (std::vector<int>{1, 3}));
      EXPECT_EQ(rec(*odd).context().rank, rank / 2);
    } else {
      EXPECT_EQ(odd->rank(), -1);
      Tensor t = Tensor::zeros({1});
      expect_error(
          [&] { odd->all_reduce(t); }, ErrorKind::kInvalidArgument,
          {"all_reduce", "world rank " + std::to_string(rank), "not a member", "group 0.1"});
      expect_error([&] { odd->new_group({0}); }, ErrorKind::kInvalidArgument, {"not a member"});
    }
    auto all = pg->new_group({0, 1, 2, 3});
    EXPECT_EQ(all->rank(), rank);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupSubgroups, DisagreeingListsFailOnEveryRankNamingTheRank) {
  auto result = run_threads(3, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    std::vector<int> ranks = rank == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1};
    pg->new_group(ranks);
  });
  ASSERT_EQ(result.failures.size(), 3u) << result.summary();
  for (const auto& f : result.failures) {
    EXPECT_NE(f.message.find("invalid argument"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("new_group #1"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("rank 2 (world rank 2): ranks=[0, 2]"), std::string::npos)
        << f.message;
    EXPECT_NE(f.message.find("differs"), std::string::npos) << f.message;
  }
}

TEST(ProcessGroupSubgroups, BadListsFailOnEveryRank) {
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    expect_error([&] { pg->new_group({0, 2}); }, ErrorKind::kOutOfRange, {"rank 2", "[0, 2)"});
    expect_error([&] { pg->new_group({1, 1}); }, ErrorKind::kInvalidArgument, {"listed twice"});
    expect_error([&] { pg->new_group({}); }, ErrorKind::kInvalidArgument, {"empty"});
    auto ok = pg->new_group({1});  // counters stayed in step after the failures
    EXPECT_EQ(ok->rank(), rank == 1 ? 0 : -1);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// ------------------------------------------------------------------ debug mode

TEST(ProcessGroupDebugMode, MismatchedShapesRaiseAPerRankReport) {
  PatchEnvironment env{{"BRAID_DEBUG_MODE", "1"}};
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor same = Tensor::zeros({2, 3});
    pg->all_reduce(same);  // agrees: no error
    Tensor t = rank == 0 ? Tensor::zeros({2, 3}) : Tensor::zeros({3, 2});
    pg->all_reduce(t);
  });
  ASSERT_EQ(result.failures.size(), 2u) << result.summary();
  for (const auto& f : result.failures) {
    EXPECT_NE(f.message.find("all_reduce #2"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("BRAID_DEBUG_MODE"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("rank 0 (world rank 0): all_reduce dtype=f32 count=6 op=sum "
                             "shape=[2, 3]"),
              std::string::npos)
        << f.message;
    EXPECT_NE(f.message.find("shape=[3, 2]   <- differs"), std::string::npos) << f.message;
  }
}

TEST(ProcessGroupDebugMode, MismatchedOpsAndRootsAreCaught) {
  PatchEnvironment env{{"BRAID_DEBUG_MODE", "true"}};
  auto result = run_threads(3, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor t = Tensor::zeros({4});
    pg->broadcast(t, rank == 1 ? 2 : 0);
  });
  ASSERT_EQ(result.failures.size(), 3u) << result.summary();
  EXPECT_NE(result.message_of(0).find("root=2 shape=[4]   <- differs"), std::string::npos)
      << result.summary();
}

TEST(ProcessGroupDebugMode, OffByDefault) {
  PatchEnvironment env{{"BRAID_DEBUG_MODE", "0"}};
  auto result = run_threads(2, [](int rank, int size, auto store) {
    auto pg = recording_group(rank, size, store);
    Tensor t = rank == 0 ? Tensor::zeros({2, 3}) : Tensor::zeros({3, 2});
    pg->all_reduce(t);  // the recording backend does not compare either
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupDebugMode, TheOptionOverridesTheEnvironment) {
  PatchEnvironment env{{"BRAID_DEBUG_MODE", "0"}};
  auto result = run_threads(2, [](int rank, int size, auto store) {
    register_recording_once();
    ProcessGroupOptions o;
    o.backend = kRecording;
    o.store = store;
    o.rank = rank;
    o.size = size;
    o.timeout = milliseconds(20000);
    o.debug_mode = true;  // the Accelerator's `debug: true`
    auto pg = ProcessGroup::create(o);
    Tensor t = rank == 0 ? Tensor::zeros({2, 3}) : Tensor::zeros({3, 2});
    pg->all_reduce(t);
  });
  ASSERT_EQ(result.failures.size(), 2u) << result.summary();
  EXPECT_NE(result.message_of(1).find("shape=[3, 2]   <- differs"), std::string::npos)
      << result.summary();
}

// ------------------------------------------------------------------ shm: real collectives

// rank r's value i: r * 100 + i (exact in every float type used below).
Tensor rank_values(int rank, int64_t n, DType dtype = DType::kF32) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rank * 100.0 + double(i);
  return Tensor::from_vector(v, {n}, dtype);
}

// Runs every tensor collective once on `pg` and checks the results against formulas.
void exercise_collectives(ProcessGroup& pg, int64_t n) {
  const int rank = pg.rank(), size = pg.size();
  double rank_sum = 0;
  for (int r = 0; r < size; ++r) rank_sum += r * 100.0;

  Tensor sum = rank_values(rank, n, DType::kF64);
  pg.all_reduce(sum);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum.to_vector()[i], rank_sum + size * double(i));

  Tensor mx = rank_values(rank, n);
  CallOptions max_op;
  max_op.op = ReduceOp::kMax;
  pg.all_reduce(mx, max_op);
  EXPECT_TRUE(equal(mx, rank_values(size - 1, n)));

  for (int root = 0; root < size; ++root) {
    Tensor b = rank_values(rank, n, DType::kI64);
    pg.broadcast(b, root);
    EXPECT_TRUE(equal(b, rank_values(root, n, DType::kI64))) << "root " << root;
  }

  std::vector<Tensor> outs;
  for (int r = 0; r < size; ++r) outs.push_back(Tensor::zeros({n}));
  pg.all_gather(outs, rank_values(rank, n));
  for (int r = 0; r < size; ++r) EXPECT_TRUE(equal(outs[r], rank_values(r, n))) << "block " << r;

  Tensor into = Tensor::zeros({size, n}, DType::kBF16);
  pg.all_gather_into(into, rank_values(rank, n, DType::kBF16));
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(equal(into.select(0, r), rank_values(r, n, DType::kBF16)));
  }

  // reduce_scatter: input block b of rank r holds r*100 + b*1000 + i; output = sum over r.
  std::vector<Tensor> blocks;
  for (int b = 0; b < size; ++b)
    blocks.push_back(add(rank_values(rank, n, DType::kF64), b * 1000.0));
  Tensor rs = Tensor::zeros({n}, DType::kF64);
  pg.reduce_scatter(rs, blocks);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(rs.to_vector()[i], rank_sum + size * (rank * 1000.0 + double(i)));
  }

  // all_to_all (splits): rank r sends r + 1 rows to every peer q, each row = r * 10 + q.
  std::vector<int64_t> in_splits(size, rank + 1), out_splits;
  for (int q = 0; q < size; ++q) out_splits.push_back(q + 1);
  std::vector<double> send_rows;
  for (int q = 0; q < size; ++q) {
    for (int k = 0; k <= rank; ++k) send_rows.push_back(rank * 10 + q);
  }
  Tensor a2a_in = Tensor::from_vector(send_rows, {int64_t(send_rows.size()), 1});
  int64_t out_rows = 0;
  for (auto s : out_splits) out_rows += s;
  Tensor a2a_out = Tensor::zeros({out_rows, 1});
  pg.all_to_all(a2a_out, a2a_in, out_splits, in_splits);
  std::vector<double> expected_rows;
  for (int q = 0; q < size; ++q) {
    for (int k = 0; k <= q; ++k) expected_rows.push_back(q * 10 + rank);
  }
  EXPECT_EQ(a2a_out.to_vector(), expected_rows);

  std::vector<Tensor> gathered;
  const int root = size - 1;
  if (rank == root) {
    for (int r = 0; r < size; ++r) gathered.push_back(Tensor::zeros({n}, DType::kI32));
  }
  pg.gather(gathered, rank_values(rank, n, DType::kI32), root);
  for (int r = 0; r < int(gathered.size()); ++r) {
    EXPECT_TRUE(equal(gathered[r], rank_values(r, n, DType::kI32)));
  }

  if (size > 1) {  // a ring of send / recv
    Tensor got = Tensor::zeros({n});
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    CallOptions async;
    async.async = AsyncOp::kYes;
    auto sent = pg.send(rank_values(rank, n), next, 7, async);
    pg.recv(got, prev, 7);
    sent->wait();
    EXPECT_TRUE(equal(got, rank_values(prev, n)));
  }
  pg.barrier();
}

class ProcessGroupShm : public ::testing::TestWithParam<int> {};

TEST_P(ProcessGroupShm, CollectivesMatchReferenceOnThreads) {
  const int size = GetParam();
  for (int64_t n : {0, 1, 7, 1000}) {
    auto result = run_threads(size, [n](int rank, int size, auto store) {
      auto pg = testing::make_group(rank, size, store);
      exercise_collectives(*pg, n);
    });
    EXPECT_TRUE(result.ok()) << "n=" << n << result.summary();
  }
}

TEST_P(ProcessGroupShm, SubgroupsRunTheirOwnCollectives) {
  const int size = GetParam();
  auto result = run_threads(size, [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    std::vector<int> evens;
    for (int r = 0; r < size; r += 2) evens.push_back(r);
    auto sub = pg->new_group(evens);
    if (rank % 2 == 0) {
      Tensor t = Tensor::full({3}, rank, DType::kI64);
      sub->all_reduce(t);
      double expected = 0;
      for (int r : evens) expected += r;
      EXPECT_EQ(t.to_vector(), std::vector<double>(3, expected));
      exercise_collectives(*sub, 5);
    }
    pg->barrier();  // the world group still works after the subgroup's calls
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessGroupShm, ::testing::Values(1, 2, 3, 4));

TEST(ProcessGroupShmForked, CollectivesOnFileStore) {
  auto result = testing::run_processes(3, [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    exercise_collectives(*pg, 33);
    auto pair = pg->new_group({0, 2});
    if (pair->rank() >= 0) exercise_collectives(*pair, 4);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupShmForked, CollectivesOnTcpStore) {
  auto result = testing::run_processes(
      4,
      [](int rank, int size, auto store) {
        auto pg = testing::make_group(rank, size, store);
        exercise_collectives(*pg, 100);
      },
      testing::StoreKind::kTcp);
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ProcessGroupShmForked, DebugModeReportsAcrossProcesses) {
  PatchEnvironment env{{"BRAID_DEBUG_MODE", "1"}};
  auto result = testing::run_processes(2, [](int rank, int size, auto store) {
    auto pg = testing::make_group(rank, size, store);
    Tensor t = Tensor::zeros({rank + 1}, DType::kF32);
    pg->all_reduce(t);
  });
  ASSERT_EQ(result.failures.size(), 2u) << result.summary();
  EXPECT_NE(result.message_of(1).find("count=2 op=sum shape=[2]   <- differs"), std::string::npos)
      << result.summary();
}

// A plain process (no launcher variables at all) is a one-rank world with its own store, as
// torch's init_process_group(world_size=1) and Accelerate's Accelerator() are.
TEST(ProcessGroupPlainProcess, CreateWithoutALauncherIsAOneRankWorld) {
  ClearEnvironment env;  // no launcher variables at all
  auto pg = ProcessGroup::create({});
  EXPECT_EQ(pg->rank(), 0);
  EXPECT_EQ(pg->size(), 1);
  exercise_collectives(*pg, 17);
  auto sub = pg->new_group({0});
  EXPECT_EQ(sub->size(), 1);
  exercise_collectives(*sub, 5);
}

// A launcher's variables without its port are still an error: a rank of a larger job must not
// quietly become a world of its own.
TEST(ProcessGroupPlainProcess, ALauncherWorldWithoutMasterPortIsStillAnError) {
  PatchEnvironment env(EnvPatch{{"MASTER_PORT", std::nullopt},
                                {"RANK", "0"},
                                {"WORLD_SIZE", "2"},
                                {"LOCAL_RANK", "0"},
                                {"LOCAL_WORLD_SIZE", "2"}});
  try {
    (void)ProcessGroup::create({});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("MASTER_PORT is not set"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace braid
