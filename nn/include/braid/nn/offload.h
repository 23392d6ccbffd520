// SPDX-License-Identifier: Apache-2.0
// Optimizer state offload: where an optimizer keeps its per-parameter state between steps
// (DeepSpeed's offload_optimizer_device = none | cpu | nvme, docs/offload.md).
//
//   braid::nn::AdamW opt(params, {.lr = 3e-4});
//   opt.set_offload({.device = braid::nn::OffloadDevice::kNvme,
//                    .nvme_path = "/local_nvme", .buffer_count = 4});
//   opt.step();   // state streams through at most 4 parameters' worth of memory
//
// kNvme keeps exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer and the f32 master copy in
// a SwapStore (braid/tensor/swap_store.h) under nvme_path; kCpu keeps them in host memory,
// which is where they already are for cpu parameters; kNone is the default.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace braid::nn {

enum class OffloadDevice : uint8_t {
  kNone,  // state beside the parameters (host memory for cpu parameters)
  kCpu,   // state in host memory: a no-op for cpu parameters (docs/offload.md)
  kNvme,  // state in files under nvme_path, at most buffer_count parameters' in memory
};

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  // kNvme: an existing, writable folder (DeepSpeed's offload_optimizer_nvme_path).
  std::filesystem::path nvme_path{};  // {}: designated initializers may leave it out
  // kNvme: parameters whose state may be in memory at once during a step, the one being
  // stepped included (DeepSpeed's offload_optimizer.buffer_count); >= 1.
  int64_t buffer_count = 4;
  // kNvme: deadline of each wait for a read or write of the state files.
  std::chrono::milliseconds io_timeout{std::chrono::minutes(10)};
};

// "none", "cpu" or "nvme" (DeepSpeed's values, any case) -> OffloadDevice. Throws
// kInvalidArgument naming `option` and the value otherwise.
OffloadDevice parse_offload_device(std::string_view text,
                                   std::string_view option = "offload_optimizer_device");
// "none", "cpu", "nvme".
const char* offload_device_name(OffloadDevice device);

// Checks what can be checked without touching the disk: buffer_count >= 1, io_timeout >= 0,
// and a non-empty nvme_path for kNvme. Throws kInvalidArgument naming DeepSpeed's option
// (offload_optimizer_device, offload_optimizer_nvme_path, buffer_count). The folder itself is
// checked when the store is made (kIo naming offload_optimizer_nvme_path and the errno text).
void check_offload_config(const OffloadConfig& config);

}  // namespace braid::nn
