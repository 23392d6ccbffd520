// Device: parsing, printing and the invalid strings.
#include "braid/core/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <unordered_set>

#include "braid/core/error.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

TEST(Device, TypeNames) {
  EXPECT_EQ(device_type_name(DeviceType::kCPU), "cpu");
  EXPECT_EQ(device_type_name(DeviceType::kCUDA), "cuda");
  EXPECT_EQ(device_type_name(DeviceType::kHIP), "hip");
  EXPECT_EQ(device_type_name(DeviceType::kXPU), "xpu");
  EXPECT_EQ(device_type_name(DeviceType::kMeta), "meta");
}

TEST(Device, ParsesEachForm) {
  EXPECT_EQ(Device::parse("cpu"), Device(DeviceType::kCPU, 0));
  EXPECT_EQ(Device::parse("cpu:0"), Device(DeviceType::kCPU, 0));
  EXPECT_EQ(Device::parse("meta"), Device(DeviceType::kMeta, 0));
  EXPECT_EQ(Device::parse("cuda"), Device(DeviceType::kCUDA, 0));
  EXPECT_EQ(Device::parse("cuda:1"), Device(DeviceType::kCUDA, 1));
  EXPECT_EQ(Device::parse("hip:7"), Device(DeviceType::kHIP, 7));
  EXPECT_EQ(Device::parse("xpu:0"), Device(DeviceType::kXPU, 0));
}

TEST(Device, PrintParseRoundTrip) {
  for (const char* text : {"cpu", "meta", "cuda:0", "cuda:3", "hip:0", "hip:12", "xpu:2"}) {
    const Device d = Device::parse(text);
    EXPECT_EQ(d.str(), text);
    EXPECT_EQ(Device::parse(d.str()), d);
    std::ostringstream os;
    os << d;
    EXPECT_EQ(os.str(), text);
  }
}

TEST(Device, Predicates) {
  EXPECT_TRUE(kCPU.is_cpu());
  EXPECT_TRUE(kCPU.is_host());
  EXPECT_TRUE(kMeta.is_meta());
  EXPECT_FALSE(kMeta.is_host());
  EXPECT_FALSE(Device(DeviceType::kCUDA, 0).is_host());
  EXPECT_NE(Device(DeviceType::kCUDA, 0), Device(DeviceType::kCUDA, 1));
  EXPECT_NE(Device(DeviceType::kCUDA, 0), Device(DeviceType::kHIP, 0));
}

TEST(Device, HashSeparatesTypeAndIndex) {
  std::unordered_set<Device> set{Device(DeviceType::kCUDA, 0), Device(DeviceType::kCUDA, 1),
                                 Device(DeviceType::kHIP, 0), kCPU, kMeta};
  EXPECT_EQ(set.size(), 5u);
  EXPECT_EQ(set.count(Device::parse("cuda:1")), 1u);
}

void expect_invalid(const char* text, const char* expected_part) {
  try {
    Device::parse(text);
    ADD_FAILURE() << "parse('" << text << "') did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << text;
    EXPECT_THAT(e.message(), HasSubstr(std::string("'") + text + "'"));
    EXPECT_THAT(e.message(), HasSubstr(expected_part)) << text;
  }
}

TEST(Device, RejectsBadStrings) {
  expect_invalid("gpu", "expected cpu, meta");
  expect_invalid("cuda:x", "non-negative integer");
  expect_invalid("cuda:-1", "non-negative integer");
  expect_invalid("cuda:", "non-negative integer");
  expect_invalid("cuda:1x", "non-negative integer");
  expect_invalid("cpu:1", "only index 0");
  expect_invalid("meta:2", "only index 0");
  expect_invalid("CUDA", "is not known");
  expect_invalid("", "is not known");
}

}  // namespace
}  // namespace braid
