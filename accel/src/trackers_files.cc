// The two text trackers, jsonl and csv (trackers.h, docs/trackers.md), and the pieces every
// tracker shares: AppendFile (one write(2) per record, fsync at finish), number and JSON
// string formatting, UTF-8 validation.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "braid/accel/trackers.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "trackers_internal.h"

namespace braid::accel {

namespace fs = std::filesystem;

// ---- shared pieces --------------------------------------------------------------------------

namespace detail {

AppendFile::AppendFile(const fs::path& path, OpenMode mode) : path_(path) {
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
  if (mode == OpenMode::kExclusive) flags |= O_EXCL;
  fd_ = ::open(path.c_str(), flags, 0644);
  BRAID_CHECK(fd_ >= 0, kIo, "open ", path, " for appending: ", std::strerror(errno));
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) {
    ::fsync(fd_);
    ::close(fd_);
  }
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void AppendFile::append(std::string_view bytes) {
  BRAID_CHECK(fd_ >= 0, kInvalidArgument, "write to ", path_, " after it was closed");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    BRAID_CHECK(n > 0, kIo, "write ", path_, ": ", n < 0 ? std::strerror(errno) : "wrote nothing");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void AppendFile::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0;
  BRAID_CHECK(synced, kIo, "fsync ", path_, ": ", std::strerror(sync_errno));
  BRAID_CHECK(closed, kIo, "close ", path_, ": ", std::strerror(errno));
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Python's repr: the shortest round-trip digits, fixed notation for exponents -4..15 and
  // scientific otherwise ("0.0003", "1700000000.25", "1e+21", "1.5e-07").
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const char* e = std::find(buf, r.ptr, 'e');
  int exponent = 0;
  std::from_chars(e + 1 + (e[1] == '+' ? 1 : 0), r.ptr, exponent);
  if (exponent >= -4 && exponent < 16) {
    r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  }
  return std::string(buf, r.ptr);
}

std::string json_number(double v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  return format_double(v);
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[static_cast<unsigned char>(c) >> 4];
          out += kHex[c & 15];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    uint32_t min;
    if ((b & 0xE0) == 0xC0) {
      len = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, cp = b & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

void check_utf8(std::string_view s, std::string_view what) {
  BRAID_CHECK(valid_utf8(s), kInvalidArgument, what, " is not valid UTF-8; expected UTF-8 text");
}

void check_hparams(const HParams& config) {
  for (const auto& [key, value] : config) {
    check_tracker_key(key, "hyperparameter name");
    if (const auto* s = std::get_if<std::string>(&value)) {
      check_utf8(*s, "hyperparameter '" + key + "' (a string value)");
    }
  }
}

WallClock clock_or_default(WallClock clock) {
  return clock ? std::move(clock) : WallClock(system_wall_time);
}

void check_not_finished(bool finished, std::string_view tracker, std::string_view call) {
  BRAID_CHECK(!finished, kInvalidArgument, tracker, " tracker: ", call,
              " after finish() (end_training)");
}

}  // namespace detail

namespace {

using detail::AppendFile;
using detail::OpenMode;

void make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  BRAID_CHECK(!ec, kIo, "create the tracker folder ", dir, ": ", ec.message());
}

// True when `path` exists, is not empty and its last byte is not a newline (a record cut
// short by a crash while it was written): the next record starts on a new line.
bool needs_newline(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) return false;
  in.seekg(-1, std::ios::end);
  return in.get() != '\n';
}

void check_keys(const Scalars& values) {
  for (const auto& kv : values) check_log_key(kv.first);
}

// A CSV field as RFC 4180 and Python's csv module write it: quoted (quotes doubled) when it
// holds a comma, a quote or a line break.
std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The fields of one CSV line (no line breaks inside fields); false when quoting is broken.
bool parse_csv_line(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t i = 0;
  while (true) {
    std::string field;
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) return false;
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      if (i < line.size() && line[i] != ',') return false;
    } else {
      const size_t end = std::min(line.find(',', i), line.size());
      field.assign(line.substr(i, end - i));
      i = end;
    }
    fields.push_back(std::move(field));
    if (i >= line.size()) return true;
    ++i;  // the comma
  }
}

std::string hparam_text(const HParamValue& v, bool json) {
  return std::visit(
      [json](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return json ? detail::json_number(x) : detail::format_double(x);
        } else {
          return json ? detail::json_string(x) : x;
        }
      },
      v);
}

}  // namespace

// ---- JsonlTracker ---------------------------------------------------------------------------

struct JsonlTracker::Impl {
  fs::path dir;
  AppendFile file;
  WallClock clock;
  bool finished = false;
};

JsonlTracker::JsonlTracker(fs::path dir, WallClock clock) : impl_(std::make_unique<Impl>()) {
  make_dir(dir);
  const fs::path path = dir / kMetricsFile;
  const bool newline = needs_newline(path);
  impl_->file = AppendFile(path, OpenMode::kAppend);
  if (newline) impl_->file.append("\n");
  impl_->dir = std::move(dir);
  impl_->clock = detail::clock_or_default(std::move(clock));
}

JsonlTracker::~JsonlTracker() = default;

fs::path JsonlTracker::path() const {
  return impl_->dir / kMetricsFile;
}

void JsonlTracker::store_init_configuration(const HParams& config) {
  detail::check_not_finished(impl_->finished, "jsonl", "store_init_configuration");
  detail::check_hparams(config);
  std::string text = "{";
  for (const auto& [key, value] : config) {
    text += text.size() == 1 ? "\n  " : ",\n  ";
    text += detail::json_string(key) + ": " + hparam_text(value, /*json=*/true);
  }
  text += config.empty() ? "}\n" : "\n}\n";
  write_file_atomic(impl_->dir / kConfigFile, text);
}

void JsonlTracker::log(const Scalars& values, int64_t step) {
  detail::check_not_finished(impl_->finished, "jsonl", "log");
  check_keys(values);
  if (values.empty()) return;
  std::string line = "{\"step\":" + std::to_string(step);
  for (const auto& [key, value] : values) {
    line += ',';
    line += detail::json_string(key);
    line += ':';
    line += detail::json_number(value);
  }
  line += ",\"time\":";
  line += detail::json_number(impl_->clock());
  line += "}\n";
  impl_->file.append(line);
}

void JsonlTracker::log_text(std::string_view tag, std::string_view text, int64_t step) {
  detail::check_not_finished(impl_->finished, "jsonl", "log_text");
  check_log_key(tag);
  detail::check_utf8(text, "text logged under '" + std::string(tag) + "'");
  std::string line = "{\"step\":" + std::to_string(step);
  line += ',';
  line += detail::json_string(tag);
  line += ':';
  line += detail::json_string(text);
  line += ",\"time\":";
  line += detail::json_number(impl_->clock());
  line += "}\n";
  impl_->file.append(line);
}

void JsonlTracker::finish() {
  impl_->finished = true;
  impl_->file.close();
}

// ---- CsvTracker -----------------------------------------------------------------------------

struct CsvTracker::Impl {
  fs::path dir;
  fs::path path;
  AppendFile file;
  WallClock clock;
  std::vector<std::string> columns;
  std::map<std::string, size_t, std::less<>> index;
  bool finished = false;

  static std::string header(const std::vector<std::string>& columns) {
    std::string out = "step,time";
    for (const std::string& c : columns) {
      out += ',';
      out += csv_field(c);
    }
    return out + "\n";
  }

  void set_columns(std::vector<std::string> cols) {
    columns = std::move(cols);
    index.clear();
    for (size_t i = 0; i < columns.size(); ++i) index.emplace(columns[i], i);
  }

  // Rewrites the file with `added` columns appended to the header and as many empty cells
  // appended to every row; atomic, so a reader sees the old file or the new one.
  void add_columns(const std::vector<std::string>& added) {
    file.close();
    std::vector<std::string> cols = columns;
    cols.insert(cols.end(), added.begin(), added.end());
    try {
      const std::string text = read_file(path);
      const size_t eol = text.find('\n');
      BRAID_CHECK(eol != std::string::npos, kCorruptData, path,
                  ": the header line has no end; was the file changed by another writer?");
      std::string out = header(cols);
      const std::string pad(added.size(), ',');
      size_t begin = eol + 1;
      while (begin < text.size()) {
        size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        out.append(text, begin, end - begin);
        out += pad + "\n";
        begin = end + 1;
      }
      write_file_atomic(path, out);
    } catch (...) {
      file = AppendFile(path, OpenMode::kAppend);
      throw;
    }
    set_columns(std::move(cols));
    file = AppendFile(path, OpenMode::kAppend);
  }
};

CsvTracker::CsvTracker(fs::path dir, WallClock clock) : impl_(std::make_unique<Impl>()) {
  make_dir(dir);
  impl_->path = dir / kMetricsFile;
  impl_->dir = std::move(dir);
  impl_->clock = detail::clock_or_default(std::move(clock));
  std::error_code ec;
  const bool existing = fs::exists(impl_->path, ec) && fs::file_size(impl_->path, ec) > 0 && !ec;
  if (existing) {
    std::ifstream in(impl_->path, std::ios::binary);
    std::string line;
    std::getline(in, line);
    std::vector<std::string> fields;
    BRAID_CHECK(parse_csv_line(line, fields) && fields.size() >= 2 && fields[0] == "step" &&
                    fields[1] == "time",
                kCorruptData, impl_->path, ": expected a header starting with 'step,time' (",
                "a metrics.csv written by braid), found '", line.substr(0, 80),
                "'; move the file away or log to another folder");
    fields.erase(fields.begin(), fields.begin() + 2);
    impl_->set_columns(std::move(fields));
    const bool newline = needs_newline(impl_->path);
    impl_->file = AppendFile(impl_->path, OpenMode::kAppend);
    if (newline) impl_->file.append("\n");
  } else {
    impl_->file = AppendFile(impl_->path, OpenMode::kAppend);
    impl_->file.append(Impl::header({}));
  }
}

CsvTracker::~CsvTracker() = default;

fs::path CsvTracker::path() const {
  return impl_->path;
}

const std::vector<std::string>& CsvTracker::columns() const {
  return impl_->columns;
}

void CsvTracker::store_init_configuration(const HParams& config) {
  detail::check_not_finished(impl_->finished, "csv", "store_init_configuration");
  detail::check_hparams(config);
  std::string text = "key,value\n";
  for (const auto& [key, value] : config) {
    text += csv_field(key) + "," + csv_field(hparam_text(value, /*json=*/false)) + "\n";
  }
  write_file_atomic(impl_->dir / kConfigFile, text);
}

void CsvTracker::log(const Scalars& values, int64_t step) {
  detail::check_not_finished(impl_->finished, "csv", "log");
  check_keys(values);
  if (values.empty()) return;
  std::vector<std::string> added;
  for (const auto& kv : values) {
    if (!impl_->index.contains(kv.first)) added.push_back(kv.first);
  }
  if (!added.empty()) impl_->add_columns(added);

  std::vector<const double*> cells(impl_->columns.size(), nullptr);
  for (const auto& [key, value] : values) cells[impl_->index.find(key)->second] = &value;
  std::string row = std::to_string(step) + "," + detail::format_double(impl_->clock());
  for (const double* cell : cells) {
    row += ',';
    if (cell != nullptr) row += detail::format_double(*cell);
  }
  impl_->file.append(row + "\n");
}

void CsvTracker::finish() {
  impl_->finished = true;
  impl_->file.close();
}

}  // namespace braid::accel
