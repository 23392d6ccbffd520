// What a CUDA build does on a machine without a usable GPU (the build machines: CUDA toolkit,
// no driver): the cuda runtime is registered, reports no device, and every entry point says
// so with kNotSupported instead of crashing. Runs in every build; without CUDA it skips. With
// a GPU, braid_core_cuda_test (label gpu) covers the runtime itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "braid/core/allocator.h"
#include "braid/core/config.h"
#include "braid/core/device_runtime.h"
#include "braid/core/env_checks.h"
#include "braid/core/error.h"
#include "braid/core/stream.h"

namespace braid {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

template <typename Fn>
Error capture(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected braid::Error";
  return Error(ErrorKind::kInternal, "no error");
}

TEST(CudaRuntimeRegistration, BuiltWhenConfiguredWithCuda) {
  if (!BRAID_HAVE_CUDA) GTEST_SKIP() << "configured without CUDA";
  EXPECT_TRUE(is_runtime_built(DeviceType::kCUDA));
}

TEST(CudaWithoutDevice, EveryEntryPointSaysNoDeviceIsVisible) {
  if (!BRAID_HAVE_CUDA) GTEST_SKIP() << "configured without CUDA";
  if (device_count(DeviceType::kCUDA) > 0) {
    GTEST_SKIP() << "a CUDA device is visible; braid_core_cuda_test covers it";
  }
  const Error e = capture([] { device_runtime(DeviceType::kCUDA); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_THAT(e.message(), HasSubstr("cuda: the runtime is built but no device is visible"));
  // CUDA's own reason: no driver (cudaErrorInsufficientDriver), none visible, ...
  EXPECT_THAT(e.message(), HasSubstr("cudaGetDeviceCount"));
  EXPECT_THAT(e.message(), Not(HasSubstr("not registered")));
  EXPECT_THAT(e.message(), Not(HasSubstr("not available in this build")));

  EXPECT_EQ(capture([] { get_allocator(Device(DeviceType::kCUDA, 0)); }).kind(),
            ErrorKind::kNotSupported);
  const Error pinned = capture([] { pinned_host_allocator(); });
  EXPECT_EQ(pinned.kind(), ErrorKind::kNotSupported);
  EXPECT_THAT(pinned.message(), HasSubstr("pinned host memory needs a GPU runtime"));
  EXPECT_THAT(pinned.message(), HasSubstr("no device is visible"));
  EXPECT_FALSE(is_cuda_available());
  // The current stream is bookkeeping only: no CUDA call, so it works without a device.
  EXPECT_EQ(current_stream(Device(DeviceType::kCUDA, 0)).handle, nullptr);
  // Asking twice gives the same answer (the count is cached, the reason asked again).
  EXPECT_EQ(capture([] { device_runtime(DeviceType::kCUDA); }).message(), e.message());
}

}  // namespace
}  // namespace braid
