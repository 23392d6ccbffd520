// SPDX-License-Identifier: Apache-2.0
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as ext4, iSCSI, gRPC, TFRecord and
// braid's sharded checkpoints use it: crc32c("123456789") == 0xE3069283. SSE4.2 when the CPU
// has it, else tables; the same bits either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace braid {

// `crc` continues a previous call (0 to start).
uint32_t crc32c(std::span<const std::byte> bytes, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view bytes, uint32_t crc = 0) {
  return crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), crc);
}
// The table-driven path, always available.
uint32_t crc32c_portable(std::span<const std::byte> bytes, uint32_t crc = 0);
bool crc32c_hardware_available();

}  // namespace braid
