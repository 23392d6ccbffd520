// docs/errors.md's two macros (three uses), each made to fail once: exits 1 unless each throws
// braid::Error of the documented kind, with the documented message.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "braid/core/error.h"

namespace {

void read_range(int64_t count, const std::string& path, int64_t offset, int64_t capacity) {
  // [snippet]
  // User input or environment was wrong: throws Error(kind).
  BRAID_CHECK(count >= 0, kInvalidArgument, "count ", count, " is negative; expected >= 0");

  // Unconditional failure with a kind.
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) BRAID_FAIL(kIo, "open ", path, ": ", std::strerror(errno));

  // An internal invariant: failure means a braid bug; throws Error(kInternal) whose message
  // includes the condition text.
  BRAID_ASSERT(offset + count <= capacity, "offset ", offset, " count ", count);
  // [end snippet]
  ::close(fd);
}

// Whether read_range(...) throws an Error of `kind` whose message contains `text`.
bool throws(braid::ErrorKind kind, const std::string& text, int64_t count, const char* path,
            int64_t offset) {
  try {
    read_range(count, path, offset, 4);
  } catch (const braid::Error& e) {
    std::printf("%s\n", e.what());
    return e.kind() == kind && e.message().find(text) != std::string::npos;
  }
  return false;
}

}  // namespace

int main() {
  bool ok = throws(braid::ErrorKind::kInvalidArgument, "count -1 is negative; expected >= 0", -1,
                   "/dev/null", 0) &&
            throws(braid::ErrorKind::kIo, "open /nonexistent/file: No such file", 1,
                   "/nonexistent/file", 0) &&
            throws(braid::ErrorKind::kInternal, "offset + count <= capacity", 2, "/dev/null", 3);
  try {
    read_range(2, "/dev/null", 2, 4);  // every check passes
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "unexpected: %s\n", e.what());
    ok = false;
  }
  if (!ok) std::fprintf(stderr, "FAIL: a macro did not throw as docs/errors.md says\n");
  return ok ? 0 : 1;
}
