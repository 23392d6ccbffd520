// SPDX-License-Identifier: Apache-2.0
// Device: a tiny value type naming where memory lives, after c10::Device.
// Printed and parsed as "cpu", "cuda:1", "hip:0", "xpu:0", "meta".
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace braid {

enum class DeviceType : uint8_t { kCPU, kCUDA, kHIP, kXPU, kMeta };
inline constexpr int kNumDeviceTypes = 5;

std::string_view device_type_name(DeviceType t);  // "cpu", "cuda", ...

struct Device {
  DeviceType type = DeviceType::kCPU;
  int16_t index = 0;  // always 0 for cpu and meta

  constexpr Device() = default;
  constexpr Device(DeviceType t, int idx = 0) : type(t), index(idx) {}  // NOLINT: implicit ok

  // "cpu", "meta", "cuda" (index 0), "cuda:1". Throws kInvalidArgument naming the text.
  static Device parse(std::string_view text);
  std::string str() const;

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_meta() const { return type == DeviceType::kMeta; }
  // cpu and meta memory is addressable by the host (meta has no memory at all).
  bool is_host() const { return type == DeviceType::kCPU; }

  friend constexpr bool operator==(const Device&, const Device&) = default;
};

inline constexpr Device kCPU{DeviceType::kCPU, 0};
inline constexpr Device kMeta{DeviceType::kMeta, 0};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace braid

template <>
struct std::hash<braid::Device> {
  size_t operator()(const braid::Device& d) const noexcept {
    return (static_cast<size_t>(d.type) << 16) ^ static_cast<size_t>(d.index);
  }
};
