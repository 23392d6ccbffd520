/* Every collective of braid's C ABI on the launcher's ranks (ctest bindings.c_comm_n2 / _n4:
 * `braid launch --nproc-per-node N comm_test`). Inputs are small integers or halves, so every
 * expected value is exact in its type and given in closed form. Exits 1 naming the first
 * mismatch. */
#define _POSIX_C_SOURCE 200809L

#include "c_test_util.h"

static braidComm_t g_comm;
static int g_n;

/* ---- all_reduce ------------------------------------------------------------------------- */

static void test_all_reduce_f32(void) {
  const size_t count = 1001;
  float* send = test_alloc(count * sizeof(float));
  float* recv = test_alloc(count * sizeof(float));
  const int r = g_test_rank, n = g_n;
  /* sum, out of place: (r + 1)(i + 1) summed over r */
  for (size_t i = 0; i < count; ++i) send[i] = (float)((r + 1) * (int)(i + 1));
  CHECK_OK(braidAllReduce(send, recv, count, braidFloat32, braidSum, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_F64("all_reduce f32 sum", i, recv[i], (double)(i + 1) * n * (n + 1) / 2);
    EXPECT_EQ_F64("all_reduce f32 sum: the input", i, send[i], (double)(r + 1) * (i + 1));
  }
  /* max, in place: r * (i % 7) - i */
  for (size_t i = 0; i < count; ++i) recv[i] = (float)(r * (int)(i % 7) - (int)i);
  CHECK_OK(braidAllReduce(recv, recv, count, braidFloat32, braidMax, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_F64("all_reduce f32 max", i, recv[i], (double)((n - 1) * (int)(i % 7) - (int)i));
  }
  /* avg, in place: 2 (r + 1)(i + 1) averages to (n + 1)(i + 1) */
  for (size_t i = 0; i < count; ++i) recv[i] = (float)(2 * (r + 1) * (int)(i + 1));
  CHECK_OK(braidAllReduce(recv, recv, count, braidFloat32, braidAvg, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_F64("all_reduce f32 avg", i, recv[i], (double)(n + 1) * (i + 1));
  }
  free(send);
  free(recv);
}

static void test_all_reduce_i64(void) {
  const size_t count = 257;
  const int64_t big = (int64_t)1 << 40; /* needs all 64 bits' range */
  int64_t* send = test_alloc(count * sizeof(int64_t));
  int64_t* recv = test_alloc(count * sizeof(int64_t));
  const int r = g_test_rank, n = g_n;
  for (size_t i = 0; i < count; ++i) send[i] = big * (r + 1) + (int64_t)i;
  CHECK_OK(braidAllReduce(send, recv, count, braidInt64, braidSum, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_I64("all_reduce i64 sum", i, recv[i],
                  big * n * (n + 1) / 2 + (int64_t)n * (int64_t)i);
  }
  CHECK_OK(braidAllReduce(send, recv, count, braidInt64, braidMax, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_I64("all_reduce i64 max", i, recv[i], big * n + (int64_t)i);
  }
  /* avg: (big n (n + 1) / 2 + n i) / n, exact for even n (big is even) */
  memcpy(recv, send, count * sizeof(int64_t));
  CHECK_OK(braidAllReduce(recv, recv, count, braidInt64, braidAvg, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_I64("all_reduce i64 avg", i, recv[i], big * (n + 1) / 2 + (int64_t)i);
  }
  free(send);
  free(recv);
}

static void test_all_reduce_bf16(void) {
  const size_t count = 77;
  uint16_t* send = test_alloc(count * sizeof(uint16_t));
  uint16_t* recv = test_alloc(count * sizeof(uint16_t));
  const int r = g_test_rank, n = g_n;
  /* (r + 1)(i % 8) sums to at most 7 * 10: integers bf16 holds exactly */
  for (size_t i = 0; i < count; ++i) send[i] = to_bf16((float)((r + 1) * (int)(i % 8)));
  CHECK_OK(braidAllReduce(send, recv, count, braidBfloat16, braidSum, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_F64("all_reduce bf16 sum", i, from_bf16(recv[i]), (double)(i % 8) * n * (n + 1) / 2);
  }
  free(send);
  free(recv);
}

/* ---- rooted collectives ------------------------------------------------------------------ */

static void test_broadcast(void) {
  const size_t count = 33;
  const int root = g_n - 1;
  int32_t* send = test_alloc(count * sizeof(int32_t));
  int32_t* recv = test_alloc(count * sizeof(int32_t));
  for (size_t i = 0; i < count; ++i) {
    send[i] = (int32_t)(3 * i + 7);
    recv[i] = -1;
  }
  /* out of place; the other ranks pass no send buffer */
  const void* src = g_test_rank == root ? send : NULL;
  CHECK_OK(braidBroadcast(src, recv, count, braidInt32, root, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) EXPECT_EQ_I64("broadcast", i, recv[i], 3 * i + 7);
  /* in place from rank 0 */
  for (size_t i = 0; i < count; ++i) recv[i] = g_test_rank == 0 ? (int32_t)(100 - i) : 0;
  CHECK_OK(braidBroadcast(recv, recv, count, braidInt32, 0, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) EXPECT_EQ_I64("broadcast in place", i, recv[i], 100 - (int)i);
  free(send);
  free(recv);
}

static void test_reduce(void) {
  const size_t count = 19;
  const int root = 1 % g_n, n = g_n;
  double* send = test_alloc(count * sizeof(double));
  double* recv = test_alloc(count * sizeof(double));
  for (size_t i = 0; i < count; ++i) {
    send[i] = g_test_rank * (double)i + 0.25;
    recv[i] = -1;
  }
  void* dst = g_test_rank == root ? recv : NULL; /* only the root names a result buffer */
  CHECK_OK(braidReduce(send, dst, count, braidFloat64, braidSum, root, g_comm, NULL, NULL));
  if (g_test_rank == root) {
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ_F64("reduce f64 sum", i, recv[i], (double)i * n * (n - 1) / 2 + 0.25 * n);
    }
  }
  free(send);
  free(recv);
}

static void test_gather_scatter(void) {
  const size_t count = 6;
  const int n = g_n, r = g_test_rank;
  int32_t* mine = test_alloc(count * sizeof(int32_t));
  int32_t* all = test_alloc(n * count * sizeof(int32_t));
  /* gather to rank 0 */
  for (size_t i = 0; i < count; ++i) mine[i] = (int32_t)(r * 10 + (int)i);
  CHECK_OK(braidGather(mine, r == 0 ? all : NULL, count, braidInt32, 0, g_comm, NULL, NULL));
  if (r == 0) {
    for (int b = 0; b < n; ++b) {
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ_I64("gather", b * count + i, all[b * count + i], b * 10 + (int)i);
      }
    }
  }
  /* scatter from the last rank: block b holds b * 100 + i */
  const int root = n - 1;
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < count; ++i) all[b * count + i] = (int32_t)(b * 100 + (int)i);
  }
  memset(mine, 0, count * sizeof(int32_t));
  CHECK_OK(braidScatter(r == root ? all : NULL, mine, count, braidInt32, root, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) EXPECT_EQ_I64("scatter", i, mine[i], r * 100 + (int)i);
  free(mine);
  free(all);
}

/* ---- gathers, scatters and exchanges ----------------------------------------------------- */

static void test_all_gather(void) {
  const size_t count = 5;
  const int n = g_n, r = g_test_rank;
  int32_t* send = test_alloc(count * sizeof(int32_t));
  int32_t* recv = test_alloc(n * count * sizeof(int32_t));
  for (size_t i = 0; i < count; ++i) send[i] = (int32_t)(r * 100 + (int)i);
  CHECK_OK(braidAllGather(send, recv, count, braidInt32, g_comm, NULL, NULL));
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ_I64("all_gather", b * count + i, recv[b * count + i], b * 100 + (int)i);
    }
  }
  /* in place: this rank's block already sits at recvbuff + rank * count */
  for (size_t i = 0; i < n * count; ++i) recv[i] = -1;
  for (size_t i = 0; i < count; ++i) recv[r * count + i] = (int32_t)(r * 7 + (int)i);
  CHECK_OK(braidAllGather(recv + r * count, recv, count, braidInt32, g_comm, NULL, NULL));
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ_I64("all_gather in place", b * count + i, recv[b * count + i], b * 7 + (int)i);
    }
  }
  free(send);
  free(recv);
}

static void test_reduce_scatter(void) {
  const size_t count = 9;
  const int n = g_n, r = g_test_rank;
  int32_t* send = test_alloc(n * count * sizeof(int32_t));
  int32_t* recv = test_alloc(count * sizeof(int32_t));
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < count; ++i) send[b * count + i] = (int32_t)(r + b * 1000 + (int)i);
  }
  CHECK_OK(braidReduceScatter(send, recv, count, braidInt32, braidSum, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_I64("reduce_scatter", i, recv[i], n * (n - 1) / 2 + n * (r * 1000 + (int)i));
  }
  /* in place: the result lands in this rank's block of sendbuff */
  CHECK_OK(
      braidReduceScatter(send, send + r * count, count, braidInt32, braidMax, g_comm, NULL, NULL));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_I64("reduce_scatter in place", i, send[r * count + i], n - 1 + r * 1000 + (int)i);
  }
  free(send);
  free(recv);
}

static void test_all_to_all(void) {
  const size_t count = 4;
  const int n = g_n, r = g_test_rank;
  int32_t* send = test_alloc(n * count * sizeof(int32_t));
  int32_t* recv = test_alloc(n * count * sizeof(int32_t));
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < count; ++i) send[b * count + i] = (int32_t)(r * 1000 + b * 10 + (int)i);
  }
  CHECK_OK(braidAllToAll(send, recv, count, braidInt32, g_comm, NULL, NULL));
  for (int b = 0; b < n; ++b) {
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ_I64("all_to_all", b * count + i, recv[b * count + i], b * 1000 + r * 10 + (int)i);
    }
  }
  free(send);
  free(recv);
}

/* Rank r sends r + p + 1 elements to rank p (r * 10000 + p * 100 + j); the receive side keeps a
 * one-element gap after every block, which must stay untouched. */
static void test_all_to_allv(void) {
  const int n = g_n, r = g_test_rank;
  size_t sendcounts[8], sdispls[8], recvcounts[8], rdispls[8];
  size_t stotal = 0, rtotal = 0;
  for (int p = 0; p < n; ++p) {
    sendcounts[p] = (size_t)(r + p + 1);
    sdispls[p] = stotal;
    stotal += sendcounts[p];
    recvcounts[p] = (size_t)(p + r + 1);
    rdispls[p] = rtotal;
    rtotal += recvcounts[p] + 1;
  }
  int64_t* send = test_alloc(stotal * sizeof(int64_t));
  int64_t* recv = test_alloc(rtotal * sizeof(int64_t));
  for (int p = 0; p < n; ++p) {
    for (size_t j = 0; j < sendcounts[p]; ++j)
      send[sdispls[p] + j] = r * 10000 + p * 100 + (int64_t)j;
  }
  for (size_t i = 0; i < rtotal; ++i) recv[i] = -7;
  CHECK_OK(braidAllToAllv(send, sendcounts, sdispls, recv, recvcounts, rdispls, braidInt64, g_comm,
                          NULL, NULL));
  for (int p = 0; p < n; ++p) {
    for (size_t j = 0; j < recvcounts[p]; ++j) {
      EXPECT_EQ_I64("all_to_allv", rdispls[p] + j, recv[rdispls[p] + j],
                    p * 10000 + r * 100 + (int64_t)j);
    }
    EXPECT_EQ_I64("all_to_allv gap", rdispls[p] + recvcounts[p], recv[rdispls[p] + recvcounts[p]],
                  -7);
  }
  free(send);
  free(recv);
}

/* ---- point to point, requests, barrier ---------------------------------------------------- */

static void test_send_recv_ring(void) {
  const size_t count = 100;
  const int n = g_n, r = g_test_rank;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  float* send = test_alloc(count * sizeof(float));
  float* recv = test_alloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) {
    send[i] = (float)(r * 1000 + (int)i) + 0.5f;
    recv[i] = -1;
  }
  braidRequest_t sent = NULL;
  CHECK_OK(braidSend(send, count, braidFloat32, next, 5, g_comm, NULL, &sent));
  CHECK_OK(braidRecv(recv, count, braidFloat32, prev, 5, g_comm, NULL, NULL));
  CHECK_OK(braidRequestWait(sent));
  CHECK_OK(braidRequestFree(sent));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_F64("recv from the previous rank", i, recv[i], prev * 1000.0 + (double)i + 0.5);
  }
  free(send);
  free(recv);
}

static void test_nonblocking_all_reduce(void) {
  const size_t count = 4099;
  const int n = g_n, r = g_test_rank;
  int32_t* buf = test_alloc(count * sizeof(int32_t));
  for (size_t i = 0; i < count; ++i) buf[i] = (int32_t)(r + (int)i);
  braidRequest_t request = NULL;
  braidCallOptions_t options = BRAID_CALL_OPTIONS_INITIALIZER;
  options.timeout_ms = 60000;
  CHECK_OK(braidAllReduce(buf, buf, count, braidInt32, braidSum, g_comm, &options, &request));
  if (request == NULL) test_fail("braidAllReduce with a request pointer gave no request");
  int done = -1;
  braidResult_t tested = braidRequestTest(request, &done);
  if (!((tested == braidInProgress && done == 0) || (tested == braidSuccess && done == 1))) {
    test_fail(
        "braidRequestTest returned %s with done = %d (expected in progress / 0 or "
        "success / 1): %s",
        braidGetErrorString(tested), done, braidGetLastError());
  }
  CHECK_OK(braidRequestWait(request));
  done = 0;
  CHECK_OK(braidRequestTest(request, &done));
  if (done != 1) test_fail("braidRequestTest after braidRequestWait gave done = %d", done);
  CHECK_OK(braidRequestFree(request));
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ_I64("non-blocking all_reduce", i, buf[i], n * (n - 1) / 2 + n * (int)i);
  }
  /* a barrier as a request too */
  CHECK_OK(braidBarrier(g_comm, NULL, &request));
  CHECK_OK(braidRequestWait(request));
  CHECK_OK(braidRequestFree(request));
  free(buf);
}

/* ---- split --------------------------------------------------------------------------------- */

static void test_split(void) {
  const int n = g_n, r = g_test_rank;
  braidComm_t half = NULL;
  CHECK_OK(braidCommSplit(g_comm, r % 2, r, &half));
  if (half == NULL) test_fail("braidCommSplit gave no communicator for color %d", r % 2);
  int half_n = 0, half_rank = -1;
  CHECK_OK(braidCommCount(half, &half_n));
  CHECK_OK(braidCommUserRank(half, &half_rank));
  EXPECT_EQ_I64("split: size", 0, half_n, (n - r % 2 + 1) / 2);
  EXPECT_EQ_I64("split: rank", 0, half_rank, r / 2);
  int64_t value = r, sum = -1;
  CHECK_OK(braidAllReduce(&value, &sum, 1, braidInt64, braidSum, half, NULL, NULL));
  int64_t want = 0;
  for (int q = r % 2; q < n; q += 2) want += q;
  EXPECT_EQ_I64("all_reduce on the even / odd communicator", 0, sum, want);
  CHECK_OK(braidCommDestroy(half));

  /* rank 0 joins none; the others form one communicator */
  braidComm_t rest = NULL;
  CHECK_OK(braidCommSplit(g_comm, r == 0 ? BRAID_SPLIT_NOCOLOR : 3, 0, &rest));
  if (r == 0 && rest != NULL) test_fail("BRAID_SPLIT_NOCOLOR gave a communicator");
  if (r != 0) {
    if (rest == NULL) test_fail("color 3 gave no communicator");
    int rest_n = 0;
    CHECK_OK(braidCommCount(rest, &rest_n));
    EXPECT_EQ_I64("split without rank 0: size", 0, rest_n, n - 1);
    CHECK_OK(braidBarrier(rest, NULL, NULL));
    CHECK_OK(braidCommDestroy(rest));
  }
}

/* ---- argument errors ------------------------------------------------------------------------- */

static void test_argument_errors(void) {
  float x[4] = {0, 0, 0, 0};
  CHECK_ERROR(braidAllReduce(NULL, x, 4, braidFloat32, braidSum, g_comm, NULL, NULL),
              braidInvalidArgument, "sendbuff");
  CHECK_ERROR(braidAllReduce(x, NULL, 4, braidFloat32, braidSum, g_comm, NULL, NULL),
              braidInvalidArgument, "recvbuff");
  CHECK_ERROR(braidBroadcast(x, x, 4, braidFloat32, g_n + 3, g_comm, NULL, NULL),
              braidInvalidArgument, "root");
  CHECK_ERROR(braidReduce(x, x, 4, braidFloat32, braidSum, -1, g_comm, NULL, NULL),
              braidInvalidArgument, "root -1");
  CHECK_ERROR(braidAllReduce(x, x, 4, (braidDataType_t)42, braidSum, g_comm, NULL, NULL),
              braidInvalidArgument, "datatype 42");
  CHECK_ERROR(braidAllReduce(x, x, 4, braidFloat32, (braidRedOp_t)9, g_comm, NULL, NULL),
              braidInvalidArgument, "op 9");
  CHECK_ERROR(braidSend(x, 4, braidFloat32, g_test_rank, 0, g_comm, NULL, NULL),
              braidInvalidArgument, "peer");
  braidCallOptions_t bad = BRAID_CALL_OPTIONS_INITIALIZER;
  bad.size = 3;
  CHECK_ERROR(braidBarrier(g_comm, &bad, NULL), braidInvalidArgument, "options->size");
  /* the communicator is still usable: every rank made the same refused calls */
  CHECK_OK(braidBarrier(g_comm, NULL, NULL));
}

int main(void) {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeout_ms = 60000;
  CHECK_OK(braidCommInitFromEnv(&g_comm, &config));
  CHECK_OK(braidCommUserRank(g_comm, &g_test_rank));
  CHECK_OK(braidCommCount(g_comm, &g_n));
  const char* backend = NULL;
  CHECK_OK(braidCommGetBackend(g_comm, &backend));
  if (g_n > 8) test_fail("this test supports up to 8 ranks, got %d", g_n);
  if (g_test_rank == 0) printf("comm_test: %d ranks on backend %s\n", g_n, backend);

  test_all_reduce_f32();
  test_all_reduce_i64();
  test_all_reduce_bf16();
  test_broadcast();
  test_reduce();
  test_all_gather();
  test_reduce_scatter();
  test_all_to_all();
  test_all_to_allv();
  test_gather_scatter();
  test_send_recv_ring();
  test_nonblocking_all_reduce();
  test_split();
  test_argument_errors();

  CHECK_OK(braidBarrier(g_comm, NULL, NULL));
  CHECK_OK(braidCommDestroy(g_comm));
  printf("comm_test: rank %d passed\n", g_test_rank);
  return 0;
}
