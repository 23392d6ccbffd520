// Pieces the tracker sources share (trackers.h): an append-only log file written with one
// write(2) per record, number formatting, JSON string quoting. Internal to accel/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "braid/accel/trackers.h"

namespace braid::accel::detail {

// How AppendFile::open treats an existing file.
enum class OpenMode : uint8_t {
  kAppend,     // create if missing, else append (JSONL, CSV: a resumed run continues)
  kExclusive,  // the file must not exist (TensorBoard: one new file per writer)
};

// A file opened for appending. Each append() is handed to the OS before it returns (no
// user-space buffer), so a crash of the process keeps every complete record; sync() makes
// them durable against a crash of the machine. Errors are kIo naming the path.
class AppendFile {
 public:
  AppendFile() = default;
  AppendFile(const std::filesystem::path& path, OpenMode mode);
  ~AppendFile();
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  void append(std::string_view bytes);
  // fsync, then close. Idempotent.
  void close();
  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// The shortest text that reads back as the same double, as Python's repr spells it but
// without a trailing ".0" ("0.1", "3", "1e-05", "1e+21"); "nan", "inf",
// "-inf" for the non-finite values (callers spell those per format).
std::string format_double(double v);
// `v` as a JSON value: a number, or the strings "NaN", "Infinity", "-Infinity" (JSON has no
// literal for them; these are the names Python's float() and json module use).
std::string json_number(double v);
// `s` as a JSON string literal with quotes and escapes; `s` must be valid UTF-8.
std::string json_string(std::string_view s);
// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);
// Throws kInvalidArgument naming `what` when `s` is not valid UTF-8.
void check_utf8(std::string_view s, std::string_view what);
// Every hyperparameter name passes check_tracker_key and every string value is UTF-8.
void check_hparams(const HParams& config);
// The clock to use: `clock`, or system_wall_time when empty.
WallClock clock_or_default(WallClock clock);
// Throws kInvalidArgument "<tracker> tracker: <call> after finish()" when `finished`.
void check_not_finished(bool finished, std::string_view tracker, std::string_view call);

}  // namespace braid::accel::detail
