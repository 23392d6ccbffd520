// CRC32C (core/crc32c.h): known vectors, continuation, and the SSE4.2 path against the
// portable one at every small length and alignment.
#include "braid/core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace braid {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) B.4 and the usual check value.
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(bytes_of(std::string(32, '\0'))), 0x8A9136AAu);
  EXPECT_EQ(crc32c(bytes_of(std::string(32, '\xff'))), 0x62A8AB43u);
  EXPECT_EQ(crc32c(bytes_of("")), 0u);
  EXPECT_EQ(crc32c_portable(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283u);
  // Continuing a checksum equals checksumming the concatenation.
  EXPECT_EQ(crc32c(bytes_of("56789"), crc32c(bytes_of("1234"))), 0xE3069283u);
}

TEST(Crc32c, HardwarePathMatchesPortableAtEveryLengthAndAlignment) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2";
  std::mt19937 rng(7);
  std::vector<std::byte> buf(600);
  for (auto& b : buf) b = std::byte(rng() & 0xff);
  for (size_t start = 0; start < 8; ++start) {
    for (size_t n = 0; n + start <= 300; ++n) {
      const std::span<const std::byte> s(buf.data() + start, n);
      ASSERT_EQ(crc32c(s, 0x1234u), crc32c_portable(s, 0x1234u)) << start << " " << n;
    }
  }
}

}  // namespace
}  // namespace braid
