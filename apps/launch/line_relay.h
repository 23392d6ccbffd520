// Splits a rank's output stream into whole lines and hands each to a sink, so the launcher
// can print "[rank N] ..." lines from many ranks without ever mixing two ranks inside one
// line. Bytes arrive in arbitrary chunks (pipe reads); a line is handed on once its '\n'
// arrives, a line longer than kMaxLine is cut into kMaxLine pieces (so one rank cannot make
// the launcher buffer without bound), and finish() hands on a final partial line.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace braid::launch {

class LineRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // `sink` receives each line without its '\n'.
  explicit LineRelay(std::function<void(std::string_view line)> sink) : sink_(std::move(sink)) {}

  void feed(std::string_view bytes);
  // Hands on what is buffered as a last line, if anything is. Idempotent.
  void finish();

 private:
  std::function<void(std::string_view)> sink_;
  std::string partial_;
};

}  // namespace braid::launch
