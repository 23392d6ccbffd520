// Helpers shared by the configuration tests: the data folder, a scratch folder, and catching
// a braid::Error to look at its kind and message.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "braid/core/error.h"

namespace braid::accel::testing {

inline std::filesystem::path data_dir() {
  return std::filesystem::path(BRAID_SOURCE_DIR) / "accel" / "tests" / "config" / "data";
}

// A fresh folder under the system's temporary folder, removed with its contents at the end.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("braid_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The braid::Error `f` throws (a test failure when it throws none).
template <typename F>
braid::Error error_of(F&& f) {
  try {
    f();
  } catch (const braid::Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a braid::Error";
  return braid::Error(braid::ErrorKind::kInternal, "no error was thrown");
}

}  // namespace braid::accel::testing
