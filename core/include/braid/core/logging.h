// SPDX-License-Identifier: Apache-2.0
// Logging: one process-wide threshold, one replaceable sink, whole lines.
//
//   BRAID_LOG(kInfo) << "bucket " << i << " ready: " << bytes << " bytes";
//
// prints, when the threshold lets kInfo through,
//
//   [braid rank 3] I 16:40:01.123 reducer.cc:42] bucket 0 ready: 4096 bytes
//
// The stream arguments are not evaluated when the level is filtered out, so logging in hot
// paths costs one atomic load. The threshold comes from BRAID_LOG_LEVEL (trace, debug, info,
// warning, error, off; case-insensitive; default warning) read at the first use; the rank
// prefix appears once a rank is known (set_log_rank, or RANK read at the first use).
// Lines are written whole under one lock, so lines from several threads never interleave.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <string_view>

namespace braid {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarning, kError, kOff };

std::string_view log_level_name(LogLevel level);  // "trace", ..., "off"
// Parses a level name, case-insensitively. Throws kInvalidArgument naming `what` (the variable
// or option the text came from), the text and the accepted names.
LogLevel parse_log_level(std::string_view text, std::string_view what = "log level");

// The threshold: messages below it are dropped; kOff drops everything. The first call reads
// BRAID_LOG_LEVEL (and RANK), throwing kInvalidArgument on a bad value.
LogLevel log_level();
void set_log_level(LogLevel level);
// True when a message at `level` would be written.
bool log_enabled(LogLevel level);

// The rank shown in the line prefix; -1 means none (no prefix). Throws kInvalidArgument for
// other negative values.
void set_log_rank(int rank);
int log_rank();

// Re-reads BRAID_LOG_LEVEL and RANK now, as the first use does (tests, or after the launcher
// has set the variables). Throws kInvalidArgument naming the variable on a bad value.
void configure_logging_from_env();

// Receives each formatted line, without the trailing newline. Called under the logging lock,
// so a sink sees one line at a time and must not log itself.
using LogSink = std::function<void(std::string_view line)>;
// Installs `sink` (an empty one restores the default, which writes to stderr) and returns the
// previous sink (empty when it was the default).
LogSink set_log_sink(LogSink sink);

// Formats and writes one line if `level` is enabled. Never throws: a failing sink loses the
// line rather than the caller's work.
void log_message(LogLevel level, const char* file, int line, std::string_view message) noexcept;

namespace detail {

// Collects one message and writes it when destroyed (the end of the BRAID_LOG statement).
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line)
      : level_(level), file_(file), line_(line) {}
  ~LogMessage() { log_message(level_, file_, line_, stream_.view()); }
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

// Turns `voidify & stream << ...` into a void expression for the ?: in BRAID_LOG; & binds
// more loosely than <<, so the whole chain is built first.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace detail
}  // namespace braid

// BRAID_LOG(kWarning) << ...; the ?: form keeps `if (x) BRAID_LOG(...) << y; else ...` correct.
#define BRAID_LOG(level)                          \
  !::braid::log_enabled(::braid::LogLevel::level) \
      ? (void)0                                   \
      : ::braid::detail::LogVoidify() &           \
            ::braid::detail::LogMessage(::braid::LogLevel::level, __FILE__, __LINE__).stream()
