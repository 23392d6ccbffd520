/* braid's C ABI in one page: every rank adds its number, all_reduce sums them.
 * Build: cc quickstart.c -lbraid    Run: braid launch --nproc-per-node 2 ./a.out */
#include <braid.h>
#include <stdio.h>

int main(void) {
  braidComm_t comm;
  if (braidCommInitFromEnv(&comm, NULL) != braidSuccess) {
    fprintf(stderr, "braidCommInitFromEnv: %s\n", braidGetLastError());
    return 1;
  }
  int rank, size;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &size);

  float x[2] = {1.0f, (float)rank};
  braidResult_t r = braidAllReduce(x, x, 2, braidFloat32, braidSum, comm, NULL, NULL);
  if (r != braidSuccess) {
    fprintf(stderr, "braidAllReduce: %s: %s\n", braidGetErrorString(r), braidGetLastError());
    return 1;
  }
  printf("rank %d of %d: ranks %g, sum of ranks %g\n", rank, size, x[0], x[1]);
  braidCommDestroy(comm);
  return x[0] == (float)size ? 0 : 1;
}
