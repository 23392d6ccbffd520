// Logging: threshold and rank (atomics, read on every BRAID_LOG), line formatting, and the
// sink, called under one mutex so lines from several threads stay whole.
#include "braid/core/logging.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

constexpr int kUnconfigured = -1;
constexpr int kNoRank = -1;

std::atomic<int> g_level{kUnconfigured};
std::atomic<int> g_rank{kNoRank};

std::mutex& sink_mutex() {
  static std::mutex* mu = new std::mutex;  // never destroyed: logging may run at exit
  return *mu;
}

LogSink& sink() {
  static LogSink* s = new LogSink;
  return *s;
}

void write_stderr(std::string_view line) {
  std::string buf(line);
  buf += '\n';
  std::fwrite(buf.data(), 1, buf.size(), stderr);
  std::fflush(stderr);
}

int rank_from_env() {
  const int64_t rank = get_env_int("RANK", kNoRank);
  BRAID_CHECK(rank >= 0 || rank == kNoRank, kInvalidArgument, "RANK='", rank,
              "' is not valid; expected a non-negative integer");
  return static_cast<int>(rank);
}

LogLevel level_from_env() {
  const std::optional<std::string> v = get_env_string("BRAID_LOG_LEVEL");
  if (!v || v->empty()) return LogLevel::kWarning;
  return parse_log_level(*v, "BRAID_LOG_LEVEL");
}

// The first BRAID_LOG reads the environment; a bad value throws there, in the caller's code,
// rather than in LogMessage's destructor.
int current_level() {
  const int level = g_level.load(std::memory_order_relaxed);
  if (level != kUnconfigured) return level;
  configure_logging_from_env();
  return g_level.load(std::memory_order_relaxed);
}

char level_letter(LogLevel level) {
  static constexpr char kLetters[] = {'T', 'D', 'I', 'W', 'E', 'O'};
  return kLetters[static_cast<int>(level)];
}

std::string_view base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string format_line(LogLevel level, const char* file, int line, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms));

  std::string out = "[braid";
  const int rank = g_rank.load(std::memory_order_relaxed);
  if (rank >= 0) out += " rank " + std::to_string(rank);
  out += "] ";
  out += level_letter(level);
  out += ' ';
  out += stamp;
  out += ' ';
  out += base_name(file);
  out += ':';
  out += std::to_string(line);
  out += "] ";
  out += message;
  return out;
}

}  // namespace

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "?";
}

LogLevel parse_log_level(std::string_view text, std::string_view what) {
  std::string l(text);
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i) {
    if (l == log_level_name(static_cast<LogLevel>(i))) return static_cast<LogLevel>(i);
  }
  BRAID_FAIL(kInvalidArgument, what, "='", text,
             "' is not a log level; expected trace, debug, info, warning, error or off");
}

LogLevel log_level() {
  return static_cast<LogLevel>(current_level());
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) {
  return level != LogLevel::kOff && static_cast<int>(level) >= current_level();
}

void set_log_rank(int rank) {
  BRAID_CHECK(rank >= kNoRank, kInvalidArgument, "log rank ", rank,
              " is not valid; expected a rank >= 0, or -1 for none");
  g_rank.store(rank, std::memory_order_relaxed);
}

int log_rank() {
  current_level();  // the first use reads RANK
  return g_rank.load(std::memory_order_relaxed);
}

void configure_logging_from_env() {
  // Read both before storing either, so a bad value leaves the previous state untouched.
  const LogLevel level = level_from_env();
  const int rank = rank_from_env();
  if (rank != kNoRank) g_rank.store(rank, std::memory_order_relaxed);
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogSink set_log_sink(LogSink new_sink) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  LogSink previous = std::move(sink());
  sink() = std::move(new_sink);
  return previous;
}

void log_message(LogLevel level, const char* file, int line, std::string_view message) noexcept {
  try {
    if (!log_enabled(level)) return;
    const std::string text = format_line(level, file, line, message);
    std::lock_guard<std::mutex> lock(sink_mutex());
    if (sink()) {
      sink()(text);
    } else {
      write_stderr(text);
    }
  } catch (...) {
    // Logging must not turn a working call into a failing one.
  }
}

}  // namespace braid
