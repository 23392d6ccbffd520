/* Helpers shared by the C tests of braid's C ABI (C11, linked only to libbraid.so). Every
 * failure prints what was expected and what came, with the rank, and exits 1. */
#ifndef BRAID_C_TEST_UTIL_H_
#define BRAID_C_TEST_UTIL_H_

#include <braid.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_test_rank = -1; /* for messages; -1 before the communicator exists */

static inline void test_fail(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "FAIL (rank %d): ", g_test_rank);
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "\n");
  va_end(args);
  exit(1);
}

/* Runs a braid call that must succeed. */
#define CHECK_OK(call)                                                       \
  do {                                                                       \
    braidResult_t check_ok_result_ = (call);                                 \
    if (check_ok_result_ != braidSuccess) {                                  \
      test_fail("%s:%d: %s returned %s: %s", __FILE__, __LINE__, #call,      \
                braidGetErrorString(check_ok_result_), braidGetLastError()); \
    }                                                                        \
  } while (0)

/* Runs a braid call that must fail with `expected` and a last error containing `text`. */
#define CHECK_ERROR(call, expected, text)                                                         \
  do {                                                                                            \
    braidResult_t check_err_result_ = (call);                                                     \
    if (check_err_result_ != (expected)) {                                                        \
      test_fail("%s:%d: %s returned %s, expected %s (last error: %s)", __FILE__, __LINE__, #call, \
                braidGetErrorString(check_err_result_), braidGetErrorString(expected),            \
                braidGetLastError());                                                             \
    }                                                                                             \
    if (strstr(braidGetLastError(), (text)) == NULL) {                                            \
      test_fail("%s:%d: %s: the last error '%s' does not name '%s'", __FILE__, __LINE__, #call,   \
                braidGetLastError(), (text));                                                     \
    }                                                                                             \
  } while (0)

#define EXPECT_EQ_I64(what, index, got, want)                                          \
  do {                                                                                 \
    long long got_ = (long long)(got), want_ = (long long)(want);                      \
    if (got_ != want_) {                                                               \
      test_fail("%s[%ld] is %lld, expected %lld", (what), (long)(index), got_, want_); \
    }                                                                                  \
  } while (0)

/* Exact comparison of floating-point values (the tests pick values every step keeps exact). */
#define EXPECT_EQ_F64(what, index, got, want)                                            \
  do {                                                                                   \
    double got_ = (double)(got), want_ = (double)(want);                                 \
    if (got_ != want_) {                                                                 \
      test_fail("%s[%ld] is %.17g, expected %.17g", (what), (long)(index), got_, want_); \
    }                                                                                    \
  } while (0)

/* bfloat16 <-> float for values bf16 holds exactly (truncation is exact there). */
static inline uint16_t to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)(bits >> 16);
}
static inline float from_bf16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline void* test_alloc(size_t bytes) {
  void* p = malloc(bytes == 0 ? 1 : bytes);
  if (p == NULL) test_fail("malloc(%zu) failed", bytes);
  return p;
}

#endif /* BRAID_C_TEST_UTIL_H_ */
