/* The two rendezvous of braid's C ABI that need no launcher variables
 * (run_unique_id_test.sh runs both):
 *   unique_id_test uid DIR
 *       under `braid launch --nproc-per-node N`: rank 0 (RANK) calls braidGetUniqueId and
 *       writes the id to DIR/id atomically (a temporary name, then rename); the other ranks
 *       wait for the file (60 s deadline); every rank calls braidCommInitRank with it.
 *   unique_id_test explicit HOST PORT RANK SIZE
 *       braidCommInitExplicit: rank 0 hosts the store on HOST:PORT.
 * Either way the ranks then all_reduce and check the result exactly. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "c_test_util.h"

static int env_int(const char* name) {
  const char* v = getenv(name);
  if (v == NULL || *v == '\0') test_fail("%s is not set (run under braid launch)", name);
  return atoi(v);
}

static void write_id(const char* dir, const braidUniqueId* id) {
  char tmp[4096], final_path[4096];
  snprintf(tmp, sizeof tmp, "%s/id.tmp", dir);
  snprintf(final_path, sizeof final_path, "%s/id", dir);
  FILE* f = fopen(tmp, "wb");
  if (f == NULL) test_fail("cannot create %s: %s", tmp, strerror(errno));
  if (fwrite(id, sizeof *id, 1, f) != 1 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
    test_fail("cannot write %s: %s", tmp, strerror(errno));
  }
  fclose(f);
  if (rename(tmp, final_path) != 0) test_fail("cannot rename %s: %s", tmp, strerror(errno));
}

static void read_id(const char* dir, braidUniqueId* id) {
  char path[4096];
  snprintf(path, sizeof path, "%s/id", dir);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      const size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got != 1) test_fail("%s holds fewer than %zu bytes", path, sizeof *id);
      return;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 60) test_fail("%s did not appear within 60 s", path);
    const struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
}

static void check_all_reduce(braidComm_t comm, int rank, int size) {
  int count = 0, me = -1;
  CHECK_OK(braidCommCount(comm, &count));
  CHECK_OK(braidCommUserRank(comm, &me));
  EXPECT_EQ_I64("communicator size", 0, count, size);
  EXPECT_EQ_I64("communicator rank", 0, me, rank);
  int64_t values[3] = {rank + 1, 10 * rank, -rank};
  CHECK_OK(braidAllReduce(values, values, 3, braidInt64, braidSum, comm, NULL, NULL));
  EXPECT_EQ_I64("all_reduce", 0, values[0], size * (size + 1) / 2);
  EXPECT_EQ_I64("all_reduce", 1, values[1], 10 * size * (size - 1) / 2);
  EXPECT_EQ_I64("all_reduce", 2, values[2], -size * (size - 1) / 2);
}

static int run_uid(const char* dir) {
  const int rank = env_int("RANK"), size = env_int("WORLD_SIZE");
  g_test_rank = rank;
  braidUniqueId id;
  if (rank == 0) {
    CHECK_OK(braidGetUniqueId(&id));
    write_id(dir, &id);
  } else {
    read_id(dir, &id);
  }
  /* an id that does not parse is refused before any rendezvous */
  braidUniqueId bad = id;
  memcpy(bad.internal, "not-an-id", 10);
  braidComm_t comm = NULL;
  CHECK_ERROR(braidCommInitRank(&comm, size, bad, rank, NULL), braidInvalidArgument, "id");
  if (comm != NULL) test_fail("a refused braidCommInitRank left a communicator");

  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeout_ms = 60000;
  CHECK_OK(braidCommInitRank(&comm, size, id, rank, &config));
  check_all_reduce(comm, rank, size);
  CHECK_OK(braidCommDestroy(comm));
  printf("unique_id_test uid: rank %d of %d passed\n", rank, size);
  return 0;
}

static int run_explicit(const char* host, int port, int rank, int size) {
  g_test_rank = rank;
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeout_ms = 60000;
  braidComm_t comm = NULL;
  CHECK_OK(braidCommInitExplicit(&comm, host, port, "bindings-explicit-test", rank, size, &config));
  check_all_reduce(comm, rank, size);
  CHECK_OK(braidCommDestroy(comm));
  printf("unique_id_test explicit: rank %d of %d passed\n", rank, size);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "uid") == 0) return run_uid(argv[2]);
  if (argc == 6 && strcmp(argv[1], "explicit") == 0) {
    return run_explicit(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  }
  fprintf(stderr,
          "usage: %s uid DIR   (under braid launch)\n"
          "       %s explicit HOST PORT RANK SIZE\n",
          argv[0], argv[0]);
  return 2;
}
