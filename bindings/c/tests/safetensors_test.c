/* safetensors through braid's C ABI (check_safetensors.py drives it):
 *   safetensors_test save DIR   writes DIR/model.safetensors (f32, bf16, i64, bool and a
 *                               strided view with a byte offset, plus metadata) and the same
 *                               tensors sharded into DIR/sharded at 64 bytes per shard;
 *   safetensors_test load DIR   loads both back through braidSafetensorsLoad and checks every
 *                               value, reading each DLManagedTensor after the list was freed.
 * Python's safetensors package reads the files in between. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>

#include "c_test_util.h"

enum { kTensors = 5 };
static const char* const kNames[kTensors] = {"w_f32", "b_bf16", "step_i64", "mask_bool",
                                             "strided_f32"};

/* The expected values of tensor t, flattened in C order. */
static double expected(int t, int i) {
  static const double bf16_values[4] = {1.5, -2.0, 3.25, 100.0};
  static const double i64_values[3] = {1099511627776.0, -5.0, 7.0};
  static const double bool_values[3] = {1, 0, 1};
  switch (t) {
    case 0:
      return i * 0.5 - 1.0; /* [2, 3] */
    case 1:
      return bf16_values[i];
    case 2:
      return i64_values[i];
    case 3:
      return bool_values[i];
    default: /* [3, 2]: columns 1..3 of base, transposed: element (a, b) = 10 b + 1 + a */
      return 10.0 * (i % 2) + 1 + i / 2;
  }
}

static int save(const char* dir) {
  float w[6];
  for (int i = 0; i < 6; ++i) w[i] = (float)expected(0, i);
  uint16_t b[4];
  for (int i = 0; i < 4; ++i) b[i] = to_bf16((float)expected(1, i));
  int64_t step[3] = {(int64_t)1 << 40, -5, 7};
  uint8_t mask[3] = {1, 0, 1};
  /* base [4, 5] holds 10 r + c; the view [3, 2] with strides [1, 5] from element 1 reads
   * base[1 + a + 5 b] = 10 b + 1 + a: not contiguous, and offset by one element */
  float base[20];
  for (int i = 0; i < 20; ++i) base[i] = (float)(10 * (i / 5) + i % 5);

  int64_t shape_w[2] = {2, 3}, shape_b[1] = {4}, shape_step[1] = {3}, shape_mask[1] = {3};
  int64_t shape_view[2] = {3, 2}, strides_view[2] = {1, 5};
  const DLDevice cpu = {kDLCPU, 0};
  DLTensor t[kTensors] = {
      {w, cpu, 2, {kDLFloat, 32, 1}, shape_w, NULL, 0},
      {b, cpu, 1, {kDLBfloat, 16, 1}, shape_b, NULL, 0},
      {step, cpu, 1, {kDLInt, 64, 1}, shape_step, NULL, 0},
      {mask, cpu, 1, {6 /* kDLBool in DLPack >= 0.8 */, 8, 1}, shape_mask, NULL, 0},
      {base, cpu, 2, {kDLFloat, 32, 1}, shape_view, strides_view, sizeof(float)},
  };
  const DLTensor* tensors[kTensors] = {&t[0], &t[1], &t[2], &t[3], &t[4]};
  const char* keys[2] = {"format", "producer"};
  const char* values[2] = {"pt", "braid c test"};
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK_OK(braidSafetensorsSave(path, kTensors, kNames, tensors, 2, keys, values));
  snprintf(path, sizeof path, "%s/sharded", dir);
  CHECK_OK(braidSafetensorsSaveSharded(path, kTensors, kNames, tensors, "64"));

  /* refused: a negative stride, fp8 through DLPack, repeated metadata keys */
  int64_t bad_strides[2] = {-1, 5};
  DLTensor bad = t[4];
  bad.strides = bad_strides;
  const DLTensor* bad_list[1] = {&bad};
  snprintf(path, sizeof path, "%s/refused.safetensors", dir);
  CHECK_ERROR(braidSafetensorsSave(path, 1, kNames, bad_list, 0, NULL, NULL), braidInvalidArgument,
              "tensors[0]->strides[0]");
  const char* twice[2] = {"format", "format"};
  CHECK_ERROR(braidSafetensorsSave(path, kTensors, kNames, tensors, 2, twice, values),
              braidInvalidArgument, "meta_keys[1]");
  printf("safetensors_test: saved %s\n", dir);
  return 0;
}

/* Reads element i of a contiguous DLTensor as double. */
static double element(const DLTensor* t, int i) {
  const char* p = (const char*)t->data + t->byte_offset;
  if (t->dtype.code == kDLFloat && t->dtype.bits == 32) return ((const float*)p)[i];
  if (t->dtype.code == kDLBfloat && t->dtype.bits == 16) return from_bf16(((const uint16_t*)p)[i]);
  if (t->dtype.code == kDLInt && t->dtype.bits == 64) return (double)((const int64_t*)p)[i];
  if (t->dtype.code == 6 && t->dtype.bits == 8) return ((const uint8_t*)p)[i];
  test_fail("unexpected DLPack dtype code %d bits %d", t->dtype.code, t->dtype.bits);
  return 0;
}

static void check_loaded(const char* path) {
  static const int64_t numel[kTensors] = {6, 4, 3, 3, 6};
  static const int code[kTensors] = {kDLFloat, kDLBfloat, kDLInt, 6, kDLFloat};
  braidTensorList_t list = NULL;
  CHECK_OK(braidSafetensorsLoad(path, &list));
  size_t n = 0;
  CHECK_OK(braidTensorListSize(list, &n));
  EXPECT_EQ_I64("number of tensors loaded", 0, n, kTensors);
  DLManagedTensor* managed[kTensors] = {NULL};
  for (size_t i = 0; i < n; ++i) {
    const char* name = NULL;
    DLManagedTensor* m = NULL;
    CHECK_OK(braidTensorListGet(list, i, &name, &m));
    int t = 0;
    while (t < kTensors && strcmp(name, kNames[t]) != 0) ++t;
    if (t == kTensors) test_fail("%s: unexpected tensor '%s'", path, name);
    if (managed[t] != NULL) test_fail("%s: tensor '%s' listed twice", path, name);
    managed[t] = m;
  }
  CHECK_ERROR(braidTensorListGet(list, n, NULL, managed), braidOutOfRange, "i 5");
  /* the tensors keep the file's memory alive after the list is gone */
  CHECK_OK(braidTensorListFree(list));
  for (int t = 0; t < kTensors; ++t) {
    const DLTensor* dl = &managed[t]->dl_tensor;
    if (dl->device.device_type != kDLCPU) test_fail("%s: '%s' is not on kDLCPU", path, kNames[t]);
    if (dl->dtype.code != code[t] || dl->dtype.lanes != 1) {
      test_fail("%s: '%s' has DLPack code %d, expected %d", path, kNames[t], dl->dtype.code,
                code[t]);
    }
    int64_t count = 1;
    for (int d = 0; d < dl->ndim; ++d) count *= dl->shape[d];
    EXPECT_EQ_I64(kNames[t], -1, count, numel[t]);
    if (t == 4) {
      EXPECT_EQ_I64("strided_f32 shape", 0, dl->shape[0], 3);
      EXPECT_EQ_I64("strided_f32 shape", 1, dl->shape[1], 2);
      EXPECT_EQ_I64("strided_f32 strides (saved contiguous)", 0, dl->strides[0], 2);
    }
    for (int i = 0; i < count; ++i) EXPECT_EQ_F64(kNames[t], i, element(dl, i), expected(t, i));
    managed[t]->deleter(managed[t]);
  }
}

static int load(const char* dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  check_loaded(path);
  snprintf(path, sizeof path, "%s/sharded", dir);
  check_loaded(path);
  printf("safetensors_test: loaded %s back\n", dir);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "save") == 0) return save(argv[2]);
  if (argc == 3 && strcmp(argv[1], "load") == 0) return load(argv[2]);
  fprintf(stderr, "usage: %s save|load DIR\n", argv[0]);
  return 2;
}
