// OffloadConfig parsing and checks (docs/offload.md); the optimizer side is optim_offload.cc.
#include "braid/nn/offload.h"

#include <cctype>
#include <string>

#include "braid/core/error.h"

namespace braid::nn {

OffloadDevice parse_offload_device(std::string_view text, std::string_view option) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "none") return OffloadDevice::kNone;
  if (lower == "cpu") return OffloadDevice::kCpu;
  if (lower == "nvme") return OffloadDevice::kNvme;
  BRAID_FAIL(kInvalidArgument, option, " '", text, "': expected none, cpu or nvme");
}

const char* offload_device_name(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "?";
}

void check_offload_config(const OffloadConfig& config) {
  BRAID_CHECK(config.device == OffloadDevice::kNone || config.device == OffloadDevice::kCpu ||
                  config.device == OffloadDevice::kNvme,
              kInvalidArgument, "offload_optimizer_device ", static_cast<int>(config.device),
              ": expected none, cpu or nvme");
  BRAID_CHECK(config.buffer_count >= 1, kInvalidArgument, "offload_optimizer.buffer_count ",
              config.buffer_count, ": expected >= 1");
  BRAID_CHECK(config.io_timeout.count() >= 0, kInvalidArgument, "offload io_timeout ",
              config.io_timeout.count(), " ms: expected >= 0");
  BRAID_CHECK(config.device != OffloadDevice::kNvme || !config.nvme_path.empty(), kInvalidArgument,
              "offload_optimizer_device 'nvme' needs offload_optimizer_nvme_path (a writable "
              "folder), got an empty path");
}

}  // namespace braid::nn
