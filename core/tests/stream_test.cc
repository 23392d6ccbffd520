// The per-thread current stream (braid/core/stream.h): defaults, set / restore, per device and
// per thread. Handles are opaque here; no device is touched.
#include "braid/core/stream.h"

#include <gtest/gtest.h>

#include <thread>

#include "braid/core/error.h"

namespace braid {
namespace {

void* fake_handle(uintptr_t n) {
  return reinterpret_cast<void*>(n);
}

TEST(CurrentStream, DefaultIsTheNullHandleOfTheDevice) {
  for (Device d : {kCPU, kMeta, Device(DeviceType::kCUDA, 0), Device(DeviceType::kCUDA, 7),
                   Device(DeviceType::kHIP, 1)}) {
    const Stream s = current_stream(d);
    EXPECT_EQ(s.device, d);
    EXPECT_EQ(s.handle, nullptr) << d;
  }
}

TEST(CurrentStream, SetIsPerDeviceAndGuardRestores) {
  const Device gpu0(DeviceType::kCUDA, 0), gpu1(DeviceType::kCUDA, 1);
  const Device hip1(DeviceType::kHIP, 1);
  {
    StreamGuard g1(Stream{gpu1, fake_handle(0x10)});
    EXPECT_EQ(current_stream(gpu1).handle, fake_handle(0x10));
    EXPECT_EQ(current_stream(gpu0).handle, nullptr);  // other index
    EXPECT_EQ(current_stream(hip1).handle, nullptr);  // other type, same index
    {
      StreamGuard g2(Stream{gpu1, fake_handle(0x20)});
      EXPECT_EQ(g2.previous().handle, fake_handle(0x10));
      EXPECT_EQ(current_stream(gpu1).handle, fake_handle(0x20));
    }
    EXPECT_EQ(current_stream(gpu1).handle, fake_handle(0x10));
  }
  EXPECT_EQ(current_stream(gpu1).handle, nullptr);
}

TEST(CurrentStream, GuardRestoresWhenAnExceptionLeaves) {
  const Device gpu2(DeviceType::kCUDA, 2);
  try {
    StreamGuard g(Stream{gpu2, fake_handle(0x30)});
    throw Error(ErrorKind::kInternal, "leaving the scope");
  } catch (const Error&) {
  }
  EXPECT_EQ(current_stream(gpu2).handle, nullptr);
}

TEST(CurrentStream, IsPerThread) {
  const Device gpu0(DeviceType::kCUDA, 0);
  set_current_stream(Stream{gpu0, fake_handle(0x40)});
  void* seen = fake_handle(1);
  std::thread([&] { seen = current_stream(gpu0).handle; }).join();
  EXPECT_EQ(seen, nullptr);
  EXPECT_EQ(current_stream(gpu0).handle, fake_handle(0x40));
  set_current_stream(Stream{gpu0, nullptr});
  EXPECT_EQ(current_stream(gpu0).handle, nullptr);
}

TEST(CurrentStream, NegativeIndexIsRefused) {
  try {
    set_current_stream(Stream{Device(DeviceType::kCUDA, -1), nullptr});
    FAIL() << "a negative index was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("-1"), std::string::npos) << e.message();
  }
  EXPECT_EQ(current_stream(Device(DeviceType::kCUDA, -1)).handle, nullptr);
}

}  // namespace
}  // namespace braid
