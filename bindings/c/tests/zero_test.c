/* SPDX-License-Identifier: Apache-2.0 */
/* ZeRO through the C ABI, compiled as C11, under `braid launch` (2 and 4 ranks): a linear
 * model y = x . w + b written here by hand (the "framework"), its parameters registered as
 * two units and sharded at the stage given in argv[1]; G = 4 micro-batches per step, rank r
 * runs r, r + W, ...; after two AdamW steps every rank checks the full state dict against the
 * same model trained in this process without braid (closed form, in float), then saves a
 * sharded checkpoint, scribbles over the parameters by a third step and loads it back.
 * Also: calls out of order return braidInvalidArgument with a message.
 *   zero_test STAGE CHECKPOINT_DIR */
#include <braid.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 5 /* inputs */
#define G 4 /* micro-batches per step */
#define LR 0.05
#define WD 0.01

static void check(braidResult_t r, const char* what) {
  if (r != braidSuccess) {
    fprintf(stderr, "zero_test: %s failed: %s: %s\n", what, braidGetErrorString(r),
            braidGetLastError());
    exit(1);
  }
}

#define CHECK(call) check((call), #call)

static DLTensor host_f32(float* data, int ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

/* Micro-batch m of step s: one input row and its target. */
static void micro_batch(int s, int m, float* x, float* t) {
  int i;
  *t = 0.0f;
  for (i = 0; i < N; ++i) {
    x[i] = (float)sin(0.7 * (s * G + m) + 1.3 * i);
    *t += x[i] * (float)(i - 2) * 0.25f;
  }
  *t += 0.5f;
}

/* Squared-error gradient of one micro-batch for weight w and bias b. */
static void grads(const float* w, float b, const float* x, float t, float* gw, float* gb) {
  int i;
  float y = b, d;
  for (i = 0; i < N; ++i) y += x[i] * w[i];
  d = 2.0f * (y - t);
  for (i = 0; i < N; ++i) gw[i] = d * x[i];
  *gb = d;
}

/* torch.optim.AdamW, one element, step k (1-based), in double then rounded as braid's f32. */
static void adamw(float* p, float g, float* m, float* v, int k) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  double mh, vh;
  *p = (float)(*p * (1.0 - LR * WD));
  *m = (float)(b1 * *m + (1 - b1) * g);
  *v = (float)(b2 * *v + (1 - b2) * (double)g * g);
  mh = *m / (1 - pow(b1, k));
  vh = *v / (1 - pow(b2, k));
  *p = (float)(*p - LR * mh / (sqrt(vh) + eps));
}

int main(int argc, char** argv) {
  braidComm_t comm;
  braidZero_t zero;
  braidZeroConfig_t config = BRAID_ZERO_CONFIG_INITIALIZER;
  braidTensorList_t list;
  DLManagedTensor* view;
  float w0[N] = {0.1f, -0.2f, 0.3f, 0.0f, 0.05f}, b0 = 0.2f;
  float ref_w[N], ref_b, mw[N] = {0}, vw[N] = {0}, mb = 0, vb = 0, saved_w[N];
  int64_t shape_w[1] = {N}, shape_b[1] = {1};
  const char* name_w = "weight";
  const char* name_b = "bias";
  DLTensor init_w, init_b;
  const DLTensor* inits[1];
  int unit_w, unit_b, rank, world, s, j, i, k;
  size_t count;

  if (argc != 3) {
    fprintf(stderr, "usage: zero_test STAGE CHECKPOINT_DIR\n");
    return 2;
  }
  CHECK(braidCommInitFromEnv(&comm, NULL));
  CHECK(braidCommUserRank(comm, &rank));
  CHECK(braidCommCount(comm, &world));
  config.stage = atoi(argv[1]);
  config.overlap = 0;
  CHECK(braidZeroCreate(comm, &config, &zero));
  init_w = host_f32(w0, 1, shape_w);
  init_b = host_f32(&b0, 1, shape_b);
  inits[0] = &init_w;
  CHECK(braidZeroAddUnit(zero, "linear", 1, &name_w, inits, &unit_w));
  inits[0] = &init_b;
  CHECK(braidZeroAddUnit(zero, "offset", 1, &name_b, inits, &unit_b));
  CHECK(braidZeroFinalize(zero, LR, 0.9, 0.999, 1e-8, WD));

  /* Out of order: a gradient before the backward began. */
  if (braidZeroReduceGradients(zero, unit_w, 0, NULL) != braidInvalidArgument ||
      strstr(braidGetLastError(), "in the backward") == NULL) {
    fprintf(stderr, "zero_test: expected an out-of-order error, got '%s'\n", braidGetLastError());
    return 1;
  }

  memcpy(ref_w, w0, sizeof w0);
  ref_b = b0;
  for (s = 0; s < 2; ++s) {
    float sum_w[N] = {0}, sum_b = 0;
    /* The reference: every micro-batch of the step, summed in order (as braid's fold). */
    for (j = 0; j < G; ++j) {
      float x[N], t, gw[N], gb;
      micro_batch(s, j, x, &t);
      grads(ref_w, ref_b, x, t, gw, &gb);
      for (i = 0; i < N; ++i) sum_w[i] += gw[i];
      sum_b += gb;
    }
    /* braid: this rank's micro-batches through the sharded parameters. */
    for (j = rank; j < G; j += world) {
      float x[N], t, gw[N], gb, *w, b;
      DLManagedTensor *vw_, *vb_;
      DLTensor gt_w, gt_b;
      const DLTensor* gs[1];
      micro_batch(s, j, x, &t);
      CHECK(braidZeroBeginForward(zero));
      CHECK(braidZeroGather(zero, unit_w));
      CHECK(braidZeroGather(zero, unit_b));
      CHECK(braidZeroParam(zero, unit_w, 0, &vw_));
      CHECK(braidZeroParam(zero, unit_b, 0, &vb_));
      w = (float*)vw_->dl_tensor.data;
      b = *(float*)vb_->dl_tensor.data;
      if (vw_->dl_tensor.ndim != 1 || vw_->dl_tensor.shape[0] != N) {
        fprintf(stderr, "zero_test: the weight view has the wrong shape\n");
        return 1;
      }
      grads(w, b, x, t, gw, &gb); /* forward and backward at once: the parameters are here */
      vw_->deleter(vw_);
      vb_->deleter(vb_);
      CHECK(braidZeroRelease(zero, unit_b));
      CHECK(braidZeroRelease(zero, unit_w));
      CHECK(braidZeroEndForward(zero));
      CHECK(braidZeroBeginBackward(zero));
      gt_w = host_f32(gw, 1, shape_w);
      gt_b = host_f32(&gb, 1, shape_b);
      CHECK(braidZeroGather(zero, unit_b));
      gs[0] = &gt_b;
      CHECK(braidZeroReduceGradients(zero, unit_b, 1, gs));
      CHECK(braidZeroGather(zero, unit_w));
      gs[0] = &gt_w;
      CHECK(braidZeroReduceGradients(zero, unit_w, 1, gs));
      CHECK(braidZeroEndBackward(zero));
    }
    CHECK(braidZeroFinishGradients(zero, 1.0 / G));
    CHECK(braidZeroStep(zero));
    for (i = 0; i < N; ++i) adamw(&ref_w[i], sum_w[i] * (float)(1.0 / G), &mw[i], &vw[i], s + 1);
    adamw(&ref_b, sum_b * (float)(1.0 / G), &mb, &vb, s + 1);
  }

  CHECK(braidZeroFullStateDict(zero, &list));
  CHECK(braidTensorListSize(list, &count));
  if (count != 2) {
    fprintf(stderr, "zero_test: the state dict has %zu tensors, expected 2\n", count);
    return 1;
  }
  for (k = 0; k < 2; ++k) {
    const char* name;
    const float* got;
    const float* want = k == 0 ? ref_w : &ref_b;
    const int n = k == 0 ? N : 1;
    CHECK(braidTensorListGet(list, (size_t)k, &name, &view));
    if (strcmp(name, k == 0 ? "linear.weight" : "offset.bias") != 0) {
      fprintf(stderr, "zero_test: state dict entry %d is '%s'\n", k, name);
      return 1;
    }
    got = (const float*)view->dl_tensor.data;
    if (k == 0) memcpy(saved_w, got, sizeof saved_w);
    for (i = 0; i < n; ++i) {
      /* braid's AdamW computes in f32: agreement to a few ulps of the step. */
      if (fabs(got[i] - want[i]) > 1e-6 * (1 + fabs(want[i]))) {
        fprintf(stderr, "zero_test: %s[%d] = %.9g, expected %.9g\n", name, i, got[i], want[i]);
        return 1;
      }
    }
    view->deleter(view);
  }
  CHECK(braidTensorListFree(list));

  /* Checkpoint, a third step that changes everything, then the checkpoint back. */
  CHECK(braidZeroSaveCheckpoint(zero, argv[2]));
  CHECK(braidZeroBeginForward(zero));
  CHECK(braidZeroEndForward(zero));
  CHECK(braidZeroBeginBackward(zero));
  {
    float gw[N] = {1, 1, 1, 1, 1}, gb = 1;
    DLTensor gt_w = host_f32(gw, 1, shape_w), gt_b = host_f32(&gb, 1, shape_b);
    const DLTensor* gs[1];
    gs[0] = &gt_b;
    CHECK(braidZeroGather(zero, unit_b));
    CHECK(braidZeroReduceGradients(zero, unit_b, 1, gs));
    gs[0] = &gt_w;
    CHECK(braidZeroGather(zero, unit_w));
    CHECK(braidZeroReduceGradients(zero, unit_w, 1, gs));
  }
  CHECK(braidZeroEndBackward(zero));
  CHECK(braidZeroFinishGradients(zero, 1.0));
  CHECK(braidZeroStep(zero));
  CHECK(braidZeroLoadCheckpoint(zero, argv[2]));
  CHECK(braidZeroFullStateDict(zero, &list));
  {
    const char* name;
    CHECK(braidTensorListGet(list, 0, &name, &view));
  }
  for (i = 0; i < N; ++i) {
    const float got = ((const float*)view->dl_tensor.data)[i];
    if (got != saved_w[i]) { /* the same bits as saved */
      fprintf(stderr, "zero_test: after loading the checkpoint weight[%d] = %.9g, saved %.9g\n", i,
              got, saved_w[i]);
      return 1;
    }
  }
  view->deleter(view);
  CHECK(braidTensorListFree(list));

  CHECK(braidZeroDestroy(zero));
  CHECK(braidCommDestroy(comm));
  if (rank == 0) printf("zero_test: stage %s on %d ranks matches the reference\n", argv[1], world);
  return 0;
}
