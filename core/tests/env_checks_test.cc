// Capability checks and the environment report.
#include "braid/core/env_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/core/config.h"
#include "braid/core/cpu_features.h"
#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"

namespace braid {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(DeviceCount, HostTypesHaveOneAndUnbuiltTypesZero) {
  EXPECT_EQ(device_count(DeviceType::kCPU), 1);
  EXPECT_EQ(device_count(DeviceType::kMeta), 1);
  EXPECT_EQ(device_count(DeviceType::kXPU), 0);
  EXPECT_FALSE(is_xpu_available());
  for (DeviceType t : {DeviceType::kCUDA, DeviceType::kHIP}) {
    if (!is_runtime_built(t)) {
      EXPECT_EQ(device_count(t), 0) << device_type_name(t);
    }
  }
  EXPECT_EQ(device_count(static_cast<DeviceType>(77)), 0);  // never throws
}

TEST(DeviceCount, AvailabilityMatchesCounts) {
  EXPECT_EQ(is_cuda_available(), device_count(DeviceType::kCUDA) > 0);
  EXPECT_EQ(is_hip_available(), device_count(DeviceType::kHIP) > 0);
}

TEST(Bf16, CpuWithAvx512Bf16IsEnough) {
  if (cpu_features().avx512_bf16) {
    EXPECT_TRUE(is_bf16_available());
  } else if (!is_runtime_built(DeviceType::kCUDA)) {
    EXPECT_FALSE(is_bf16_available());  // no CPU support and no GPU to provide it
  }
}

TEST(EnvironmentReport, ListsVersionBuildCpuDevicesAndVariables) {
  PatchEnvironment env{{"BRAID_REPORT_TEST_VAR", "visible-value"}};
  ::unsetenv("BRAID_REPORT_TEST_UNSET");
  const std::string report = environment_report();
  EXPECT_THAT(report, HasSubstr(std::string("braid ") + BRAID_VERSION_STRING));
  EXPECT_THAT(report, HasSubstr("BRAID_HAVE_CUDA=" + std::to_string(BRAID_HAVE_CUDA)));
  EXPECT_THAT(report, HasSubstr("BRAID_HAVE_HIP=" + std::to_string(BRAID_HAVE_HIP)));
  EXPECT_THAT(report, HasSubstr("BRAID_HAVE_XPU=0"));
  if (!cpu_features().brand.empty()) {
    EXPECT_THAT(report, HasSubstr(cpu_features().brand));
  }
  EXPECT_THAT(report, HasSubstr(cpu_features().vendor));
  if (cpu_features().avx2) {
    EXPECT_THAT(report, HasSubstr("avx2"));
  }
  EXPECT_THAT(report, HasSubstr("active " + std::string(cpu_isa_name(cpu_active_isa()))));
  EXPECT_THAT(report, HasSubstr("cpu=1"));
  EXPECT_THAT(report, HasSubstr("xpu=0 (no runtime in this build)"));
  // A built GPU runtime with no device says why it is not usable.
  if (is_runtime_built(DeviceType::kCUDA) && device_count(DeviceType::kCUDA) == 0) {
    EXPECT_THAT(report, HasSubstr("cuda not usable: "));
  }
  EXPECT_THAT(report, HasSubstr("BRAID_REPORT_TEST_VAR=visible-value"));
  EXPECT_THAT(report, Not(HasSubstr("BRAID_REPORT_TEST_UNSET")));
}

TEST(EnvironmentReport, SaysWhenNoVariableIsSet) {
  ClearEnvironment clear;
  EXPECT_THAT(environment_report(), HasSubstr("no BRAID_* variables set"));
}

}  // namespace
}  // namespace braid
