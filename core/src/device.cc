// Device: names, parsing and printing.
#include "braid/core/device.h"

#include <charconv>

#include "braid/core/error.h"

namespace braid {

std::string_view device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return "cuda";
    case DeviceType::kHIP:
      return "hip";
    case DeviceType::kXPU:
      return "xpu";
    case DeviceType::kMeta:
      return "meta";
  }
  return "?";
}

Device Device::parse(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view type_text = text.substr(0, colon);
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    const auto t = static_cast<DeviceType>(i);
    if (type_text != device_type_name(t)) continue;
    if (colon == std::string_view::npos) return Device(t, 0);
    const std::string_view idx = text.substr(colon + 1);
    int value = -1;
    const auto [end, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), value);
    BRAID_CHECK(ec == std::errc() && end == idx.data() + idx.size() && value >= 0 && value < 32768,
                kInvalidArgument, "device '", text,
                "': the index after ':' must be a non-negative integer");
    BRAID_CHECK(value == 0 || (t != DeviceType::kCPU && t != DeviceType::kMeta), kInvalidArgument,
                "device '", text, "': ", type_text, " has only index 0");
    return Device(t, value);
  }
  BRAID_FAIL(kInvalidArgument, "device '", text,
             "' is not known; expected cpu, meta, cuda[:N], hip[:N] or xpu[:N]");
}

std::string Device::str() const {
  std::string s(device_type_name(type));
  if (type != DeviceType::kCPU && type != DeviceType::kMeta) {
    s += ':';
    s += std::to_string(index);
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.str();
}

}  // namespace braid
