// The collective conformance suite (conformance/conformance.h) under GoogleTest: one test per
// (backend registered in conformance/registry.h, group size). shm registers itself three
// times: ranks as forked processes (the deployment shape), as threads of this process, and as
// processes with 4 KiB slots so every collective runs in chunks. A faulty backend (shm with
// planted errors) shows that the suite catches wrong results and written-into inputs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "braid/comm/backend.h"
#include "braid/core/environment.h"
#include "comm_test_util.h"
#include "conformance/conformance.h"
#include "conformance/registry.h"

namespace braid {
namespace {

using std::chrono::milliseconds;

using conformance::ConformanceBackend;

ConformanceBackend shm_entry(std::string name, ConformanceBackend::Ranks ranks) {
  ConformanceBackend b;
  b.name = std::move(name);
  b.backend = "shm";
  b.ranks = ranks;
  return b;
}

const bool kShmRegistered = [] {
  using Ranks = ConformanceBackend::Ranks;
  conformance::register_backend_for_conformance(shm_entry("shm_processes", Ranks::kProcesses));
  ConformanceBackend threads = shm_entry("shm_threads", Ranks::kThreads);
  threads.sizes = {1, 3, 8};
  conformance::register_backend_for_conformance(threads);
  // 4 KiB slots and 256-byte mailboxes: 4099 elements already span many chunks (and the
  // per-rank sub-slots of reduce_scatter and all_to_all a few dozen elements), so the large
  // count, which would take thousands of chunk steps per call, is left to the other two.
  ConformanceBackend tiny = shm_entry("shm_tiny_slots", Ranks::kProcesses);
  tiny.env = {{"BRAID_SHM_SLOT_BYTES", "4096"}, {"BRAID_SHM_MAILBOX_BYTES", "256"}};
  tiny.options.counts = {0, 1, 7, 4099};
  return conformance::register_backend_for_conformance(tiny);
}();

// One rank: its world group, the suite, and its failures as the rank's error.
void run_rank(const ConformanceBackend& b, int rank, int size, std::shared_ptr<Store> store) {
  // Generous: ranks outside a subgroup wait at their next call while its members run the grid.
  auto pg = testing::make_group(rank, size, std::move(store), b.backend, milliseconds(300000));
  conformance::Options options = b.options;
  if (const char* only = std::getenv("BRAID_CONFORMANCE_ONLY")) options.only = only;
  const std::vector<std::string> failures = conformance::run_conformance(*pg, options);
  if (failures.empty()) return;
  std::string text = std::to_string(failures.size()) + " failures:";
  for (size_t i = 0; i < failures.size() && i < 20; ++i) text += "\n    " + failures[i];
  throw std::runtime_error(text);
}

testing::RunResult run_suite(const ConformanceBackend& b, int size) {
  constexpr milliseconds kDeadline(540000);  // below ctest's 600 s
  const EnvPatch patch(b.env.begin(), b.env.end());
  if (b.ranks == ConformanceBackend::Ranks::kThreads) {
    PatchEnvironment env(patch);
    return testing::run_threads(
        size, [&](int rank, int n, auto store) { run_rank(b, rank, n, store); }, kDeadline);
  }
  return testing::run_processes(
      size,
      [&](int rank, int n, auto store) {
        PatchEnvironment env(patch);  // in the forked rank only
        run_rank(b, rank, n, store);
      },
      testing::StoreKind::kTcp, kDeadline);
}

struct Param {
  const ConformanceBackend* backend;
  int size;
};

std::vector<Param> conformance_params() {
  std::vector<Param> params;
  for (const auto& b : conformance::conformance_backends()) {
    for (int size : b.sizes) params.push_back({&b, size});
  }
  return params;
}

void PrintTo(const Param& p, std::ostream* os) {
  *os << p.backend->name << " on " << p.size << " ranks";
}

class Conformance : public ::testing::TestWithParam<Param> {};

TEST_P(Conformance, EveryCollectiveDtypeCountPlacementAndGroupMatchesTheReference) {
  const Param& p = GetParam();
  const testing::RunResult result = run_suite(*p.backend, p.size);
  EXPECT_TRUE(result.ok()) << p.backend->name << " on " << p.size << " ranks:" << result.summary();
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(conformance_params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.backend->name + "_" + std::to_string(info.param.size) +
                                  "ranks";
                         });

// ---- the suite can fail ----

// shm with two planted faults: all_reduce on bf16 changes the last bit of element 3 of its
// result, and all_gather on i32 writes into its (const) input.
class FaultyBackend final : public Backend {
 public:
  explicit FaultyBackend(const BackendContext& ctx)
      : inner_(create_backend("shm", ctx)), size_(ctx.size) {}
  std::string_view name() const override { return "faulty"; }
  const BackendCapabilities& capabilities() const override { return inner_->capabilities(); }
  std::shared_ptr<Work> run(const CollectiveDesc& d) override {
    inner_->run(d)->wait();
    if (d.kind == CollectiveKind::kAllReduce && d.dtype == DType::kBF16 && d.count > 3) {
      static_cast<uint8_t*>(d.recv)[3 * 2] ^= 1;
    }
    if (d.kind == CollectiveKind::kAllGather && d.dtype == DType::kI32 && d.count > 0) {
      const auto* send = static_cast<const uint8_t*>(d.send);
      const auto* recv = static_cast<const uint8_t*>(d.recv);
      const bool in_place = send >= recv && send < recv + d.count * 4 * size_;
      if (!in_place) ++static_cast<int32_t*>(const_cast<void*>(d.send))[0];
    }
    return completed_work();
  }

 private:
  std::unique_ptr<Backend> inner_;
  int size_;
};

// shm that lists fewer dtypes (f32, i32) and collectives (no scatter, no point-to-point).
class NarrowBackend final : public Backend {
 public:
  explicit NarrowBackend(const BackendContext& ctx) : inner_(create_backend("shm", ctx)) {
    caps_ = inner_->capabilities();
    caps_.dtypes = {DType::kF32, DType::kI32};
    std::erase(caps_.collectives, CollectiveKind::kScatter);
    caps_.point_to_point = false;
  }
  std::string_view name() const override { return "narrow"; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  std::shared_ptr<Work> run(const CollectiveDesc& d) override { return inner_->run(d); }

 private:
  std::unique_ptr<Backend> inner_;
  BackendCapabilities caps_;
};

std::vector<std::string> faulty_failures(int rank, int size, std::shared_ptr<Store> store,
                                         const conformance::Options& options,
                                         const std::string& backend = "conformance_faulty") {
  static const bool registered = [] {
    register_backend("conformance_faulty",
                     [](const BackendContext& c) { return std::make_unique<FaultyBackend>(c); });
    register_backend("conformance_narrow",
                     [](const BackendContext& c) { return std::make_unique<NarrowBackend>(c); });
    return true;
  }();
  (void)registered;
  auto pg = testing::make_group(rank, size, std::move(store), backend);
  return conformance::run_conformance(*pg, options);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ConformanceSuite, ReportsAWrongReductionResultNamingTheCaseAndTheElement) {
  conformance::Options options;
  options.counts = {7};
  options.dtypes = {DType::kF32, DType::kBF16};
  options.subgroups = false;
  options.only = "all_reduce";
  std::vector<std::vector<std::string>> failures(2);
  const auto result = testing::run_threads(2, [&](int rank, int size, auto store) {
    failures[rank] = faulty_failures(rank, size, store, options);
  });
  ASSERT_TRUE(result.ok()) << result.summary();
  for (int r = 0; r < 2; ++r) {
    // One line per op bf16 allows, for each of the two placements.
    ASSERT_EQ(failures[r].size(), 12u) << "rank " << r;
    for (const std::string& line : failures[r]) {
      EXPECT_TRUE(has(line, "all_reduce (")) << line;
      EXPECT_TRUE(has(line, "dtype=bf16 count=7")) << line;
      EXPECT_TRUE(has(line, "on group world as rank " + std::to_string(r) + " of 2")) << line;
      EXPECT_TRUE(has(line, "element 3 is ")) << line;
      EXPECT_TRUE(has(line, ", expected ")) << line;
      EXPECT_FALSE(has(line, "f32")) << line;
    }
    EXPECT_TRUE(has(failures[r][0], "(tensor, in-place)")) << failures[r][0];
    EXPECT_TRUE(has(failures[r][1], "(raw, out-of-place)")) << failures[r][1];
  }
}

TEST(ConformanceSuite, ReportsAnOutOfPlaceInputTheBackendWroteInto) {
  conformance::Options options;
  options.counts = {7};
  options.dtypes = {DType::kI32};
  options.subgroups = false;
  options.only = "all_gather";
  std::vector<std::vector<std::string>> failures(3);
  const auto result = testing::run_threads(3, [&](int rank, int size, auto store) {
    failures[rank] = faulty_failures(rank, size, store, options);
  });
  ASSERT_TRUE(result.ok()) << result.summary();
  for (int r = 0; r < 3; ++r) {
    // The list form and the one-buffer out-of-place form; not the in-place one.
    ASSERT_EQ(failures[r].size(), 2u) << "rank " << r;
    for (const std::string& line : failures[r]) {
      EXPECT_TRUE(has(line, "all_gather (")) << line;
      EXPECT_TRUE(has(line, "dtype=i32 count=7")) << line;
      EXPECT_TRUE(has(line, "the input changed: element 0 is ")) << line;
      EXPECT_FALSE(has(line, "in-place")) << line;
    }
  }
}

// What the backend does not list must be refused with `not supported` (the suite checks that
// instead of running those cases): no failure, and the listed part still runs.
TEST(ConformanceSuite, ExpectsNotSupportedForWhatTheBackendDoesNotList) {
  conformance::Options options;
  options.counts = {7};
  options.dtypes = {DType::kF32, DType::kBF16};  // bf16 is not listed
  options.subgroups = false;
  const auto result = testing::run_threads(2, [&](int rank, int size, auto store) {
    const auto failures = faulty_failures(rank, size, store, options, "conformance_narrow");
    for (const auto& line : failures) ADD_FAILURE() << line;
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid
