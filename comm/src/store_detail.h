// Helpers the Store implementations share (not installed): key lists and the timeout message
// every store raises, and the decimal integer format add() stores.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::store_detail {

// "[a, b]"; long lists are cut after 16 keys with a count of the rest.
std::string format_keys(const std::vector<std::string>& keys);

// Throws kTimeout: "<store>: wait timed out after <ms> ms; missing keys [..] of [..]".
[[noreturn]] void throw_wait_timeout(std::string_view store,
                                     const std::vector<std::string>& missing,
                                     const std::vector<std::string>& keys,
                                     std::chrono::milliseconds timeout);

// The int64 add() keeps under `key`, stored as base-10 text.
// Throws kInvalidArgument naming the key when the value is not base-10 int64 text.
int64_t parse_counter(std::string_view key, std::span<const uint8_t> value);
std::vector<uint8_t> format_counter(int64_t value);

// Adds with a clear error instead of signed overflow.
int64_t checked_add(std::string_view key, int64_t current, int64_t delta);

inline std::span<const uint8_t> as_bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace braid::store_detail
