// The per-thread current stream of each device (braid/core/stream.h). A thread_local table per
// device type, indexed by device index and grown on first set; an unset entry is the null
// handle, which every runtime reads as the device's default stream.
#include "braid/core/stream.h"

#include <array>
#include <vector>

#include "braid/core/error.h"

namespace braid {
namespace {

std::array<std::vector<void*>, kNumDeviceTypes>& table() {
  thread_local std::array<std::vector<void*>, kNumDeviceTypes> current;
  return current;
}

int type_slot(Device device) {
  const int t = static_cast<int>(device.type);
  BRAID_CHECK(t >= 0 && t < kNumDeviceTypes, kInvalidArgument, "device type ", t,
              " is not a known DeviceType");
  return t;
}

}  // namespace

Stream current_stream(Device device) {
  const std::vector<void*>& handles = table()[type_slot(device)];
  const bool known = device.index >= 0 && static_cast<size_t>(device.index) < handles.size();
  return Stream{device, known ? handles[device.index] : nullptr};
}

void set_current_stream(Stream stream) {
  BRAID_CHECK(stream.device.index >= 0, kInvalidArgument, "set_current_stream: device index ",
              stream.device.index, " is negative; expected 0 or more");
  std::vector<void*>& handles = table()[type_slot(stream.device)];
  const auto index = static_cast<size_t>(stream.device.index);
  if (index >= handles.size()) {
    if (stream.handle == nullptr) return;  // the default already
    handles.resize(index + 1, nullptr);
  }
  handles[index] = stream.handle;
}

}  // namespace braid
