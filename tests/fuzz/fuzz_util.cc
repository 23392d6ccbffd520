// fuzz_util.h: the temporary folder and file writing of the fuzz targets.
#include "fuzz_util.h"

#include <unistd.h>

#include <fstream>

namespace braid::fuzz {
namespace {
std::filesystem::path made;  // what temp_dir() created, removed at a normal exit
void remove_made() {
  std::error_code ec;
  std::filesystem::remove_all(made, ec);
}
}  // namespace

const std::filesystem::path& temp_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = "/dev/shm";
    if (::access(base.c_str(), W_OK) != 0) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? tmp : "/tmp";
    }
    std::filesystem::path d = base / ("braid-fuzz-" + std::to_string(::getpid()));
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
    std::filesystem::create_directories(d, ec);
    if (ec) fail("cannot create the temporary folder " + d.string(), ec.message());
    made = d;
    std::atexit(remove_made);
    return d;
  }();
  return dir;
}

void write_file(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail("cannot write", path.string());
}

}  // namespace braid::fuzz
