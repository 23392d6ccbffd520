// SPDX-License-Identifier: Apache-2.0
// braid's error model (docs/errors.md): one exception type, braid::Error, with a kind that
// says what a caller may do about it, a message that names the thing, the value and what
// was expected, and the source location that raised it.
//
// Two macros, two meanings:
//   BRAID_CHECK(cond, kind, parts...)  user input or environment was wrong: throws Error(kind)
//   BRAID_ASSERT(cond, parts...)       a braid bug: throws Error(kInternal)
// Library code never calls exit() or abort() on user errors.
#pragma once

#include <cstdint>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace braid {

enum class ErrorKind : uint8_t {
  kInvalidArgument,  // a value the caller passed is wrong (shape, dtype, option)
  kOutOfRange,       // an index or size is outside what exists
  kNotSupported,     // valid request this build / device / dtype cannot serve
  kIo,               // the OS refused: open, read, write, rename, socket
  kCorruptData,      // bytes from outside (a file, a frame) do not parse
  kTimeout,          // a wait reached its deadline
  kPeerLost,         // another rank died or closed its connection
  kOutOfMemory,      // an allocation failed
  kInternal,         // an invariant broke: a bug in braid
};

// "invalid argument", "out of range", ...
std::string_view to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message,
        std::source_location where = std::source_location::current());

  ErrorKind kind() const noexcept { return kind_; }
  // The message without the "[kind] file:line" prefix that what() carries.
  const std::string& message() const noexcept { return message_; }
  const std::source_location& where() const noexcept { return where_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::source_location where_;
};

namespace detail {

// Concatenates anything with operator<< into one string.
template <typename... Parts>
std::string concat(const Parts&... parts) {
  if constexpr (sizeof...(Parts) == 0) {
    return {};
  } else {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
  }
}

[[noreturn]] void throw_error(ErrorKind kind, std::string message, std::source_location where);

}  // namespace detail

}  // namespace braid

// User-input / environment check: `BRAID_CHECK(n >= 0, kInvalidArgument, "count ", n, ...)`.
#define BRAID_CHECK(cond, kind, ...)                                                               \
  do {                                                                                             \
    if (!(cond)) [[unlikely]] {                                                                    \
      ::braid::detail::throw_error(::braid::ErrorKind::kind, ::braid::detail::concat(__VA_ARGS__), \
                                   std::source_location::current());                               \
    }                                                                                              \
  } while (0)

// Unconditional failure with a kind: `BRAID_FAIL(kIo, "open ", path, ": ", strerror(e))`.
#define BRAID_FAIL(kind, ...)                                                                  \
  ::braid::detail::throw_error(::braid::ErrorKind::kind, ::braid::detail::concat(__VA_ARGS__), \
                               std::source_location::current())

// Internal invariant: a failure is a braid bug, reported as kInternal with the condition text.
#define BRAID_ASSERT(cond, ...)                                                                \
  do {                                                                                         \
    if (!(cond)) [[unlikely]] {                                                                \
      ::braid::detail::throw_error(::braid::ErrorKind::kInternal,                              \
                                   ::braid::detail::concat("internal invariant failed: " #cond \
                                                           ". " __VA_OPT__(, ) __VA_ARGS__),   \
                                   std::source_location::current());                           \
    }                                                                                          \
  } while (0)
