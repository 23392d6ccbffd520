// braid::Error: kind names and the message prefix.
#include "braid/core/error.h"

#include <cstring>

namespace braid {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kOutOfRange:
      return "out of range";
    case ErrorKind::kNotSupported:
      return "not supported";
    case ErrorKind::kIo:
      return "I/O error";
    case ErrorKind::kCorruptData:
      return "corrupt data";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kPeerLost:
      return "peer lost";
    case ErrorKind::kOutOfMemory:
      return "out of memory";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "unknown error";
}

namespace {

std::string_view base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string format_what(ErrorKind kind, const std::string& message,
                        const std::source_location& where) {
  std::string out = "braid: ";
  out += to_string(kind);
  out += ": ";
  out += message;
  out += " [";
  out += base_name(where.file_name());
  out += ":";
  out += std::to_string(where.line());
  out += "]";
  return out;
}

}  // namespace

Error::Error(ErrorKind kind, std::string message, std::source_location where)
    : std::runtime_error(format_what(kind, message, where)),
      kind_(kind),
      message_(std::move(message)),
      where_(where) {}

namespace detail {

void throw_error(ErrorKind kind, std::string message, std::source_location where) {
  throw Error(kind, std::move(message), where);
}

}  // namespace detail
}  // namespace braid
