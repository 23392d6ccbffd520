/* A transport through its plugin (docs/layout.md, "Components"): this program links
 * libbraid.so only, which holds no transport, so every backend but shm comes from a plugin
 * beside libbraid.so that the backend registry loads on first use.
 *
 *   plugin_test run BACKEND
 *       under a launcher (mpirun for mpi, braid launch for ucx and shm): a communicator on
 *       BACKEND, which must be the backend it reports, and an all_reduce checked against its
 *       closed form; proves the plugin loads and works. Then /proc/self/maps: a plugin is
 *       mapped for mpi and ucx; for shm none is, nor any MPI, UCX or CUDA library.
 *   plugin_test missing BACKEND TEXT...
 *       one process, with a libbraid.so whose plugin for BACKEND is absent or broken: shm still
 *       works, and asking for BACKEND fails with braidInvalidArgument and a last error naming
 *       every TEXT (the plugin's path, dlerror()'s text), without crashing.
 * Exits 1 naming the first mismatch (ctest bindings.plugin_*). */
#define _POSIX_C_SOURCE 200809L

#include "c_test_util.h"

/* all_reduce sum of (r + 1) * big + i over n ranks: n (n + 1) / 2 * big + n i. */
static void all_reduce_check(braidComm_t comm, int rank, int n) {
  const size_t count = 4099; /* odd, more than a page of int64 */
  const int64_t big = (int64_t)1 << 33;
  int64_t* buf = test_alloc(count * sizeof(int64_t));
  for (size_t i = 0; i < count; ++i) buf[i] = big * (rank + 1) + (int64_t)i;
  CHECK_OK(braidAllReduce(buf, buf, count, braidInt64, braidSum, comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_I64("all_reduce i64 sum", i, buf[i], big * n * (n + 1) / 2 + (int64_t)n * (int64_t)i);
  }
  free(buf);
}

/* Whether a file whose name contains `part` is mapped into this process. */
static int mapped(const char* part) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) test_fail("cannot open /proc/self/maps");
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof line, maps) != NULL) found = strstr(line, part) != NULL;
  fclose(maps);
  return found;
}

static void check_loaded(const char* backend) {
  static const char* const outside[] = {"libmpi", "libucp", "libucs", "libcudart", "libnccl"};
  if (strcmp(backend, "shm") == 0) {
    if (mapped("libbraid_")) test_fail("a plugin is loaded, though only shm was asked for");
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; ++i) {
      if (mapped(outside[i])) test_fail("%s is loaded, though only shm was asked for", outside[i]);
    }
  } else if (!mapped("libbraid_comm_")) {
    test_fail("the %s backend runs, but no plugin libbraid_comm_*.so is mapped", backend);
  }
}

static int run(const char* backend) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.backend = backend;
  braidComm_t comm;
  CHECK_OK(braidCommInitFromEnv(&comm, &config));
  int n = 0;
  CHECK_OK(braidCommUserRank(comm, &g_test_rank));
  CHECK_OK(braidCommCount(comm, &n));
  const char* name = NULL;
  CHECK_OK(braidCommGetBackend(comm, &name));
  if (strcmp(name, backend) != 0) test_fail("the communicator runs on '%s', expected '%s'", name, backend);
  all_reduce_check(comm, g_test_rank, n);
  CHECK_OK(braidCommDestroy(comm));
  check_loaded(backend);
  printf("rank %d of %d: all_reduce over the %s backend: ok\n", g_test_rank, n, backend);
  return 0;
}

static int missing(const char* backend, int ntexts, char** texts) {
  /* shm is part of libbraid.so: it needs no plugin. */
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.backend = "shm";
  braidComm_t comm;
  CHECK_OK(braidCommInitFromEnv(&comm, &config));
  g_test_rank = 0;
  all_reduce_check(comm, 0, 1);
  CHECK_OK(braidCommDestroy(comm));

  config.backend = backend;
  comm = NULL;
  const braidResult_t result = braidCommInitFromEnv(&comm, &config);
  if (result != braidInvalidArgument) {
    test_fail("asking for '%s' returned %s, expected %s (last error: %s)", backend,
              braidGetErrorString(result), braidGetErrorString(braidInvalidArgument),
              braidGetLastError());
  }
  const char* error = braidGetLastError();
  for (int i = 0; i < ntexts; ++i) {
    if (strstr(error, texts[i]) == NULL) {
      test_fail("the error for '%s' does not name '%s': %s", backend, texts[i], error);
    }
  }
  /* A second ask gives the same answer: the failed load is remembered, not retried. */
  const braidResult_t again = braidCommInitFromEnv(&comm, &config);
  if (again != braidInvalidArgument) {
    test_fail("asking for '%s' again returned %s", backend, braidGetErrorString(again));
  }
  printf("shm: ok; '%s' without its plugin: %s\n", backend, braidGetLastError());
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "run") == 0) return run(argv[2]);
  if (argc >= 3 && strcmp(argv[1], "missing") == 0) return missing(argv[2], argc - 3, argv + 3);
  fprintf(stderr, "usage: plugin_test run BACKEND | missing BACKEND TEXT...\n");
  return 2;
}
