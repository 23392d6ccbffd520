// Runs one test of the calling test binary in a child process, for settings a process reads
// only once (BRAID_CPU_ISA, BRAID_CPU_ALLOCATOR_CACHE). The parent test patches the
// environment and calls run_child_test("Suite.Name"); the child test starts with
//   if (!in_child()) GTEST_SKIP() << ...;
// and ends with exit_child(), which exits with kChildPassed when all its checks held.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "braid/core/environment.h"

extern char** environ;

namespace braid::testing {

inline constexpr int kChildPassed = 42;

// Returns the child's exit status, or -1 when it could not start or did not exit normally.
inline int run_child_test(const std::string& test_name) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  std::string filter = "--gtest_filter=" + test_name;
  char* argv[] = {exe, filter.data(), nullptr};
  PatchEnvironment child{{"CORE_TEST_CHILD", "1"}};
  pid_t pid = 0;
  if (::posix_spawn(&pid, exe, nullptr, nullptr, argv, environ) != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline bool in_child() {
  return std::getenv("CORE_TEST_CHILD") != nullptr;
}

[[noreturn]] inline void exit_child() {
  std::_Exit(::testing::Test::HasFailure() ? 1 : kChildPassed);
}

}  // namespace braid::testing
