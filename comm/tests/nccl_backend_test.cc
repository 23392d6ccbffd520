// The nccl backend where no GPU is needed (part of braid_comm_test, no gpu label): it is
// registered and reported in a build with NCCL, the default device rule, and a group created
// where no GPU is visible fails on every rank with a clear kNotSupported naming the device,
// not a crash or a hang. The ranks run as forked processes with CUDA_VISIBLE_DEVICES empty, so
// the test behaves the same on a machine with GPUs. The collectives themselves are in
// nccl_*_gpu_test.cc (label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "braid/comm/backend.h"
#include "braid/comm/process_group.h"
#include "braid/comm/rank_info.h"
#include "braid/core/error.h"
#include "comm_test_util.h"

namespace braid {
namespace {

using std::chrono::milliseconds;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(NcclBackend, IsRegisteredInABuildWithNccl) {
  const std::vector<std::string> names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "nccl"), names.end());
}

TEST(NcclBackend, TheReportNamesTheLoadedLibraryAndTheHeader) {
  const std::string report = communication_report();
  EXPECT_TRUE(has(report, "nccl: NCCL 2.")) << report;
  EXPECT_TRUE(has(report, "(built against nccl.h 2.")) << report;
}

TEST(NcclBackend, TheDefaultDeviceIsTheLocalRankOrTheOnlyVisibleDevice) {
  EXPECT_EQ(default_device_index(0, 2), 0);
  EXPECT_EQ(default_device_index(1, 2), 1);
  EXPECT_EQ(default_device_index(3, 1), 0);  // CUDA_VISIBLE_DEVICES per rank
  try {
    default_device_index(2, 2);
    ADD_FAILURE() << "local rank 2 of 2 devices was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_TRUE(has(e.message(), "local rank 2")) << e.message();
    EXPECT_TRUE(has(e.message(), "2 are visible")) << e.message();
  }
  try {
    default_device_index(0, 0);
    ADD_FAILURE() << "no device was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_TRUE(has(e.message(), "no GPU is visible")) << e.message();
  }
}

// Every rank of a group created without a visible GPU gets kNotSupported naming itself and the
// device it needed, at once (not at the group's 60 s deadline).
void expect_no_gpu_error(int size) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = testing::run_processes(
      size,
      [](int rank, int n, std::shared_ptr<Store> store) {
        ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // before this process touches CUDA
        try {
          testing::make_group(rank, n, std::move(store), "nccl", milliseconds(60000));
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::kNotSupported) throw;
          const std::string& m = e.message();
          const std::string me = "world rank " + std::to_string(rank);
          if (!(has(m, "no CUDA device is visible") && has(m, "cuda:0") && has(m, me))) throw;
          return;
        }
        throw std::runtime_error("rank " + std::to_string(rank) +
                                 ": creating an nccl group without a GPU succeeded");
      },
      testing::StoreKind::kTcp);
  EXPECT_TRUE(result.ok()) << result.summary();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(NcclBackend, WithoutAVisibleGpuCreatingAGroupIsNotSupportedNamingTheDevice) {
  expect_no_gpu_error(1);
}

TEST(NcclBackend, WithoutAVisibleGpuEveryRankFailsAtOnce) {
  expect_no_gpu_error(2);
}

}  // namespace
}  // namespace braid
