// docs/layout.md: reading the generated braid/core/config.h. Exits 1 unless the version macros
// agree with each other; the flags' values are checked at compile time.
#include <cstdio>
#include <string>

// [snippet]
#include "braid/core/config.h"  // <build>/generated/braid/core/config.h, from core/config.h.in

// #cmakedefine01: every BRAID_HAVE_* is always defined, 0 or 1; test with #if, never #ifdef.
static_assert(BRAID_HAVE_CUDA == 0 || BRAID_HAVE_CUDA == 1);
#if BRAID_HAVE_UCX
constexpr const char* kInterNode = "ucx";
#else
constexpr const char* kInterNode = "none";
#endif

int main() {
  std::printf(
      "braid %s (%d.%d.%d): cuda %d hip %d nccl %d ucx %d mpi %d xpu %d; between nodes: %s\n",
      BRAID_VERSION_STRING, BRAID_VERSION_MAJOR, BRAID_VERSION_MINOR, BRAID_VERSION_PATCH,
      BRAID_HAVE_CUDA, BRAID_HAVE_HIP, BRAID_HAVE_NCCL, BRAID_HAVE_UCX, BRAID_HAVE_MPI,
      BRAID_HAVE_XPU, kInterNode);
  // [end snippet]
  static_assert(
      BRAID_HAVE_HIP + BRAID_HAVE_NCCL + BRAID_HAVE_UCX + BRAID_HAVE_MPI + BRAID_HAVE_XPU >= 0);
  const std::string version = std::to_string(BRAID_VERSION_MAJOR) + "." +
                              std::to_string(BRAID_VERSION_MINOR) + "." +
                              std::to_string(BRAID_VERSION_PATCH);
  const bool ok = version == BRAID_VERSION_STRING;
  if (!ok) std::fprintf(stderr, "FAIL: %s is not %s\n", BRAID_VERSION_STRING, version.c_str());
  return ok ? 0 : 1;
}
