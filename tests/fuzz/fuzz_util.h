// What braid's libFuzzer targets share (docs/fuzzing.md): the rule every parser keeps (bad
// input ends in a braid::Error of a kind the parser documents, with a message, and nothing
// else), a check that turns a broken invariant into a crash libFuzzer records with its input,
// and a private folder for parsers that read files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "braid/core/error.h"

namespace braid::fuzz {

// Prints why and aborts: libFuzzer saves the input as crash-<sha1> and the run fails.
[[noreturn]] inline void fail(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "\nbraid fuzz: %.*s: %.*s\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// An invariant of a successful parse (a round trip, a bound).
inline void check(bool ok, std::string_view what) {
  if (!ok) fail("invariant broken", what);
}

// Runs parse(): true when it returns, false when it throws a braid::Error of an `allowed` kind
// with a non-empty message (the parser's answer to bad input). Any other exception, kind or an
// empty message is a bug and aborts.
template <typename Fn>
bool parses(std::initializer_list<ErrorKind> allowed, Fn&& parse) {
  try {
    parse();
    return true;
  } catch (const Error& e) {
    for (ErrorKind k : allowed) {
      if (e.kind() == k) {
        if (e.message().empty()) fail("error without a message", to_string(e.kind()));
        return false;
      }
    }
    fail(std::string("unexpected error kind ") + std::string(to_string(e.kind())), e.message());
  } catch (const std::exception& e) {
    fail("an exception that is not braid::Error", e.what());
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A folder of this process's own: under /dev/shm when it is writable (memory: fast), else
// $TMPDIR or /tmp. Made on first use and removed at a normal exit (a crash leaves it).
const std::filesystem::path& temp_dir();
// Writes `bytes` to `path`, replacing it; aborts when it cannot (not the parser's fault).
void write_file(const std::filesystem::path& path, std::span<const uint8_t> bytes);

}  // namespace braid::fuzz
