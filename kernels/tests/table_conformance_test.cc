// Device conformance of the kernel tables (table.h), in the manner of ggml's test-backend-ops:
// every op of every table whose device this process can reach is run on the same inputs as the
// reference, the cpu table at CpuIsa::kScalar, and compared element by element with a
// tolerance per op (dtype_tolerance plus the f32 ulps each family may differ by). On a machine
// with no GPU the candidates are the cpu table at its native SIMD level (which proves the
// harness and every cpu table member) and meta; with a GPU the cuda table joins (label gpu:
// braid_kernels_table_gpu_test runs the same cases on cuda only).
//
// Also checked: supports() tells the truth (a supported (op, dtype) runs, an unsupported one
// throws kNotSupported), meta refuses exactly what cpu refuses and reads no memory, and
// kernels_for names the device it does not have.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/config.h"
#include "braid/core/cpu_features.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu_quant.h"  // the code tables only: every kernel runs through a table
#include "braid/kernels/table.h"
#include "kernel_test_util.h"

namespace braid::kernels {
namespace {

using cpu::testing::close_enough;
using cpu::testing::dtype_tolerance;
using cpu::testing::random_f32;
using cpu::testing::Tolerance;

std::string dn(DType d) {
  return std::string(dtype_name(d));
}

const DType kFloatDtypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16};

// Device memory for one case: uploads host data, allocates outputs, reads results back. Every
// buffer lives until the Lab goes.
class Lab {
 public:
  explicit Lab(Device device) : device_(device), k(kernels_for(device)), s(stream_for(device)) {}

  // n values (as f32) stored in `dtype` on the device.
  void* put(const std::vector<float>& v, DType dtype) {
    std::vector<uint8_t> host(v.size() * dtype_size(dtype));
    kernels_for(kCPU).cast(Stream{kCPU}, v.data(), DType::kF32, host.data(), dtype,
                           static_cast<int64_t>(v.size()), CastMode::kDefault);
    return put_bytes(host.data(), host.size());
  }
  void* put_bytes(const void* data, size_t bytes) {
    void* p = alloc(bytes);
    if (bytes > 0) copy_bytes(p, device_, data, kCPU, bytes);
    return p;
  }
  void* alloc(size_t bytes) {
    buffers_.push_back(get_allocator(device_).allocate(bytes == 0 ? 1 : bytes));
    return buffers_.back().get();
  }
  // Device values of `dtype` as f64 on the host.
  std::vector<double> get(const void* p, DType dtype, int64_t n) {
    std::vector<uint8_t> host(static_cast<size_t>(n) * dtype_size(dtype));
    if (n > 0) copy_bytes(host.data(), kCPU, p, device_, host.size());
    std::vector<double> out(static_cast<size_t>(n));
    kernels_for(kCPU).cast(Stream{kCPU}, host.data(), dtype, out.data(), DType::kF64, n,
                           CastMode::kDefault);
    return out;
  }

 private:
  Device device_;
  std::vector<DataPtr> buffers_;

 public:
  const KernelTable& k;
  Stream s;
};

// What a case produces: named outputs, each compared with its own tolerance.
struct Output {
  std::string name;
  std::vector<double> values;
  Tolerance tol;
};
struct Case {
  std::string name;
  Op op;
  DType dtype;
  std::function<std::vector<Output>(Lab&)> run;
};

std::vector<float> inputs(int64_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  return random_f32(n, seed, lo, hi);
}

// ---- the cases ---------------------------------------------------------------------------

void add_data_movement(std::vector<Case>& cases) {
  const DType all[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                       DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                       DType::kI16,    DType::kI8,     DType::kU8,  DType::kBool};
  for (DType from : all) {
    for (DType to : {DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kI32}) {
      cases.push_back({"cast_" + (dn(from)) + "_to_" + dn(to), Op::kCast, from, [from, to](Lab& L) {
                         const int64_t n = 1037;
                         const void* x = L.put(inputs(n, 1, -300.0f, 300.0f), from);
                         void* y = L.alloc(n * dtype_size(to));
                         L.k.cast(L.s, x, from, y, to, n, CastMode::kSaturate);
                         return std::vector<Output>{{"y", L.get(y, to, n), {0, 0}}};
                       }});
    }
    cases.push_back({"fill_" + (dn(from)), Op::kFill, from, [from](Lab& L) {
                       void* y = L.alloc(777 * dtype_size(from));
                       L.k.fill(L.s, y, from, 777, -1.75);
                       return std::vector<Output>{{"y", L.get(y, from, 777), {0, 0}}};
                     }});
  }
  for (DType d : {DType::kF64, DType::kF16, DType::kU8}) {
    cases.push_back({"copy_strided_" + (dn(d)), Op::kCopyStrided, d, [d](Lab& L) {
                       // A [3, 5, 7] view of a [7, 5, 3] array with its axes reversed.
                       const int64_t shape[3] = {3, 5, 7}, strides[3] = {1, 3, 15};
                       const void* x = L.put(inputs(105, 2, 0, 100), d);
                       void* y = L.alloc(105 * dtype_size(d));
                       L.k.copy_strided(L.s, x, dtype_size(d), 3, shape, strides, y);
                       void* z = L.alloc(105 * dtype_size(d));
                       L.k.copy_to_strided(L.s, y, dtype_size(d), 3, shape, z, strides);
                       return std::vector<Output>{{"gathered", L.get(y, d, 105), {0, 0}},
                                                  {"scattered", L.get(z, d, 105), {0, 0}}};
                     }});
  }
}

void add_elementwise(std::vector<Case>& cases) {
  const BinaryOp binops[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,
                             BinaryOp::kDiv, BinaryOp::kMax, BinaryOp::kMin};
  for (DType d : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    for (BinaryOp op : binops) {
      cases.push_back({"binary" + std::to_string(static_cast<int>(op)) + "_" + dn(d), Op::kBinary,
                       d, [d, op](Lab& L) {
                         // [4, 33] op [33] broadcast along the rows.
                         const int64_t shape[2] = {4, 33}, as[2] = {33, 1}, bs[2] = {0, 1};
                         const void* a = L.put(inputs(132, 3, -50, 50), d);
                         const void* b = L.put(inputs(33, 4, 1, 9), d);  // no zero divisor
                         void* y = L.alloc(132 * dtype_size(d));
                         L.k.binary(L.s, op, d, 2, shape, a, as, b, bs, y);
                         return std::vector<Output>{{"y", L.get(y, d, 132), dtype_tolerance(d, 1)}};
                       }});
    }
  }
  for (DType d : kFloatDtypes) {
    cases.push_back({std::string("axpby_scale_") + dn(d), Op::kAxpby, d, [d](Lab& L) {
                       const int64_t n = 4099;
                       const void* x = L.put(inputs(n, 5), d);
                       const void* y = L.put(inputs(n, 6), d);
                       void* o = L.alloc(n * dtype_size(d));
                       void* o2 = L.alloc(n * dtype_size(d));
                       L.k.axpby(L.s, d, n, 0.75, x, -1.5, y, o);
                       L.k.scale(L.s, d, n, 3.0, x, o2);
                       return std::vector<Output>{
                           {"axpby", L.get(o, d, n), dtype_tolerance(d, 4)},
                           {"scale", L.get(o2, d, n), dtype_tolerance(d, 1)}};
                     }});
    for (int u = 0; u <= static_cast<int>(UnaryOp::kAbs); ++u) {
      const auto op = static_cast<UnaryOp>(u);
      cases.push_back({"unary" + std::to_string(u) + "_" + dn(d), Op::kUnary, d, [d, op](Lab& L) {
                         const bool positive =
                             op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt;
                         const int64_t n = 1031;
                         const void* x = L.put(inputs(n, 7, positive ? 0.01f : -6.0f, 6.0f), d);
                         void* y = L.alloc(n * dtype_size(d));
                         L.k.unary(L.s, op, d, n, x, y);
                         // Vector exp / tanh / erf: a few ulps (docs/kernels.md), plus an
                         // absolute floor for results near zero.
                         Tolerance t = dtype_tolerance(d, 64);
                         t.abs = std::max(t.abs, d == DType::kF64 ? 1e-13 : 1e-6);
                         return std::vector<Output>{{"y", L.get(y, d, n), t}};
                       }});
    }
  }
}

void add_reductions(std::vector<Case>& cases) {
  for (DType d : kFloatDtypes) {
    for (int r = 0; r <= static_cast<int>(ReduceOp::kNormL2); ++r) {
      const auto op = static_cast<ReduceOp>(r);
      cases.push_back({"reduce" + std::to_string(r) + "_" + dn(d), Op::kReduce, d, [d, op](Lab& L) {
                         const int64_t outer = 3, len = 517, inner = 5;
                         const void* x = L.put(inputs(outer * len * inner, 8), d);
                         const DType od = d == DType::kF64 ? d : DType::kF32;
                         void* y = L.alloc(outer * inner * dtype_size(od));
                         L.k.reduce(L.s, op, d, outer, len, inner, x, od, y);
                         // Sums in another order: len ulps of the accumulation, bounded by sqrt.
                         Tolerance t = dtype_tolerance(od, 64);
                         t.abs = od == DType::kF64 ? 1e-11 : 1e-4;
                         return std::vector<Output>{{"y", L.get(y, od, outer * inner), t}};
                       }});
    }
    for (bool log : {false, true}) {
      cases.push_back({std::string(log ? "log_softmax_" : "softmax_") + dn(d), Op::kSoftmax, d,
                       [d, log](Lab& L) {
                         const int64_t rows = 9, len = 301;
                         const void* x = L.put(inputs(rows * len, 9, -8, 8), d);
                         void* y = L.alloc(rows * len * dtype_size(d));
                         L.k.softmax(L.s, d, rows, len, x, y, log);
                         Tolerance t = dtype_tolerance(d, 64);
                         t.abs = std::max(t.abs, d == DType::kF64 ? 1e-13 : 1e-6);
                         return std::vector<Output>{{"y", L.get(y, d, rows * len), t}};
                       }});
    }
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        cases.push_back({"gemm_" + std::to_string(ta) + std::to_string(tb) + "_" + dn(d), Op::kGemm,
                         d, [d, ta, tb](Lab& L) {
                           GemmArgs g;
                           g.trans_a = ta ? Trans::kYes : Trans::kNo;
                           g.trans_b = tb ? Trans::kYes : Trans::kNo;
                           g.m = 37, g.n = 29, g.k = 71;
                           g.lda = ta ? g.m : g.k;
                           g.ldb = tb ? g.k : g.n;
                           g.ldc = g.n;
                           g.alpha = 0.5, g.beta = 0.25;
                           g.a = L.put(inputs(g.m * g.k, 10), d);
                           g.b = L.put(inputs(g.k * g.n, 11), d);
                           g.c = L.put(inputs(g.m * g.n, 12), d);
                           g.ab_dtype = g.c_dtype = d;
                           L.k.gemm(L.s, g);
                           Tolerance t = dtype_tolerance(d, 256);
                           t.abs = d == DType::kF64 ? 1e-11 : 1e-3;
                           return std::vector<Output>{{"c", L.get(g.c, d, g.m * g.n), t}};
                         }});
      }
    }
  }
}

Tolerance layer_tol(DType d) {
  Tolerance t = dtype_tolerance(d, 256);
  t.abs = d == DType::kF64 ? 1e-11 : 1e-4;
  return t;
}

void add_layers(std::vector<Case>& cases) {
  for (DType d : {DType::kF64, DType::kF32}) {
    cases.push_back({std::string("layer_norm_") + dn(d), Op::kLayerNormForward, d, [d](Lab& L) {
                       const int64_t rows = 13, n = 96;
                       const void* x = L.put(inputs(rows * n, 13), d);
                       const void* w = L.put(inputs(n, 14), d);
                       const void* b = L.put(inputs(n, 15), d);
                       const void* dy = L.put(inputs(rows * n, 16), d);
                       void *y = L.alloc(rows * n * 8), *mean = L.alloc(rows * 8),
                            *rstd = L.alloc(rows * 8);
                       void *dx = L.alloc(rows * n * 8), *dw = L.alloc(n * 8), *db = L.alloc(n * 8);
                       L.k.layer_norm_forward(L.s, d, rows, n, x, w, b, 1e-5, y, mean, rstd);
                       L.k.layer_norm_backward(L.s, d, rows, n, x, w, mean, rstd, dy, dx, dw, db);
                       const Tolerance t = layer_tol(d);
                       return std::vector<Output>{{"y", L.get(y, d, rows * n), t},
                                                  {"rstd", L.get(rstd, d, rows), t},
                                                  {"dx", L.get(dx, d, rows * n), t},
                                                  {"dw", L.get(dw, d, n), t},
                                                  {"db", L.get(db, d, n), t}};
                     }});
    cases.push_back({std::string("rms_norm_") + dn(d), Op::kRmsNormForward, d, [d](Lab& L) {
                       const int64_t rows = 11, n = 80;
                       const void* x = L.put(inputs(rows * n, 17), d);
                       const void* w = L.put(inputs(n, 18), d);
                       const void* dy = L.put(inputs(rows * n, 19), d);
                       void *y = L.alloc(rows * n * 8), *rstd = L.alloc(rows * 8);
                       void *dx = L.alloc(rows * n * 8), *dw = L.alloc(n * 8);
                       L.k.rms_norm_forward(L.s, d, rows, n, x, w, 1e-6, y, rstd);
                       L.k.rms_norm_backward(L.s, d, rows, n, x, w, rstd, dy, dx, dw);
                       const Tolerance t = layer_tol(d);
                       return std::vector<Output>{{"y", L.get(y, d, rows * n), t},
                                                  {"dx", L.get(dx, d, rows * n), t},
                                                  {"dw", L.get(dw, d, n), t}};
                     }});
    cases.push_back({std::string("embedding_") + dn(d), Op::kEmbeddingBackward, d, [d](Lab& L) {
                       const int64_t num = 50, dim = 24, n = 61;
                       std::vector<int64_t> ids(n);
                       for (int64_t i = 0; i < n; ++i) ids[i] = (i * 17 + 3) % num;  // repeats
                       const void* idp = L.put_bytes(ids.data(), ids.size() * 8);
                       const void* w = L.put(inputs(num * dim, 20), d);
                       const void* dy = L.put(inputs(n * dim, 21), d);
                       void* y = L.alloc(n * dim * 8);
                       void* dw = L.put(std::vector<float>(num * dim, 0.5f), d);
                       L.k.embedding_forward(L.s, d, num, dim, w, DType::kI64, idp, n, y);
                       L.k.embedding_backward(L.s, d, num, dim, DType::kI64, idp, n, dy, dw);
                       return std::vector<Output>{{"y", L.get(y, d, n * dim), {0, 0}},
                                                  {"dw", L.get(dw, d, num * dim), layer_tol(d)}};
                     }});
  }
  for (DType d : kFloatDtypes) {
    cases.push_back(
        {std::string("activation_dropout_") + dn(d), Op::kActivationBackward, d, [d](Lab& L) {
           const int64_t n = 2053;
           const void* x = L.put(inputs(n, 22, -5, 5), d);
           const void* dy = L.put(inputs(n, 23), d);
           std::vector<uint8_t> keep(n);
           for (int64_t i = 0; i < n; ++i) keep[i] = (i * 7) % 3 != 0;
           const auto* kp = static_cast<const uint8_t*>(L.put_bytes(keep.data(), n));
           std::vector<Output> out;
           for (int a = 0; a <= static_cast<int>(ActivationGrad::kSilu); ++a) {
             void* dx = L.alloc(n * dtype_size(d));
             L.k.activation_backward(L.s, static_cast<ActivationGrad>(a), d, n, x, dy, dx);
             Tolerance t = dtype_tolerance(d, 64);
             t.abs = std::max(t.abs, d == DType::kF64 ? 1e-13 : 1e-6);
             out.push_back({"act" + std::to_string(a), L.get(dx, d, n), t});
           }
           void* m = L.alloc(n * dtype_size(d));
           L.k.masked_scale(L.s, d, n, x, kp, 1.25, m);
           out.push_back({"masked_scale", L.get(m, d, n), dtype_tolerance(d, 1)});
           return out;
         }});
    cases.push_back(
        {std::string("cross_entropy_") + dn(d), Op::kCrossEntropyForward, d, [d](Lab& L) {
           const int64_t rows = 17, classes = 257;
           std::vector<int64_t> tg(rows);
           for (int64_t r = 0; r < rows; ++r) tg[r] = r == 5 ? -100 : (r * 31) % classes;
           const void* t = L.put_bytes(tg.data(), rows * 8);
           const void* z = L.put(inputs(rows * classes, 24, -6, 6), d);
           const DType cd = d == DType::kF64 ? d : DType::kF32;
           void *loss = L.alloc(rows * 8), *lse = L.alloc(rows * 8);
           L.k.cross_entropy_forward(L.s, d, rows, classes, z, DType::kI64, t, -100, 0.1, loss,
                                     lse);
           const void* sc = L.put(std::vector<float>(rows, 1.0f / rows), cd);
           void* dz = L.alloc(rows * classes * dtype_size(d));
           L.k.cross_entropy_backward(L.s, d, rows, classes, z, DType::kI64, t, -100, 0.1, lse, sc,
                                      dz);
           const Tolerance tc = layer_tol(cd);
           Tolerance td = dtype_tolerance(d, 64);
           td.abs = std::max(td.abs, d == DType::kF64 ? 1e-13 : 1e-6);
           return std::vector<Output>{{"loss", L.get(loss, cd, rows), tc},
                                      {"lse", L.get(lse, cd, rows), tc},
                                      {"dlogits", L.get(dz, d, rows * classes), td}};
         }});
    for (double p : {0.0, 0.25}) {
      cases.push_back(
          {std::string("attention_p") + (p > 0 ? "25_" : "0_") + dn(d), Op::kAttentionForward, d,
           [d, p](Lab& L) {
             AttentionArgs a;
             a.batch = 2, a.seq = 19, a.n_head = 3, a.head_dim = 8;
             a.dtype = d;
             a.dropout_p = p, a.dropout_seed = 7, a.dropout_offset = 12;
             const int64_t c = a.n_head * a.head_dim, bt = a.batch * a.seq;
             const void* qkv = L.put(inputs(bt * 3 * c, 25), d);
             const void* dout = L.put(inputs(bt * c, 26), d);
             void* out = L.alloc(bt * c * dtype_size(d));
             void* dqkv = L.alloc(bt * 3 * c * dtype_size(d));
             L.k.causal_attention_forward(L.s, a, qkv, out);
             L.k.causal_attention_backward(L.s, a, qkv, dout, dqkv);
             Tolerance t = dtype_tolerance(d, 256);
             t.abs = std::max(t.abs, d == DType::kF64 ? 1e-12 : d == DType::kF32 ? 1e-5 : 2e-2);
             return std::vector<Output>{{"out", L.get(out, d, bt * c), t},
                                        {"dqkv", L.get(dqkv, d, bt * 3 * c), t}};
           }});
    }
  }
}

void add_optimizer(std::vector<Case>& cases) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    cases.push_back(
        {std::string("adamw_unscale_") + dn(d), Op::kOptimizerStep, d, [d](Lab& L) {
           const int64_t n = 3001;
           OptimStep st;
           st.algo = OptimAlgo::kAdamW;
           st.param_dtype = st.grad_dtype = d;
           st.weight_decay = 0.01;
           st.step = 3;
           OptimTensor t;
           t.n = n;
           t.param = L.put(inputs(n, 27), d);
           t.master = static_cast<float*>(L.put(inputs(n, 27), DType::kF32));
           t.grad = L.put(inputs(n, 28), d);
           t.state0 = static_cast<float*>(L.put(inputs(n, 29, -0.1f, 0.1f), DType::kF32));
           t.state1 = static_cast<float*>(L.put(inputs(n, 30, 0, 0.1f), DType::kF32));
           L.k.optimizer_step(L.s, st, &t, 1, 1);
           void* g = L.put(inputs(n, 31), d);
           const bool clean = !L.k.unscale_and_check_finite(L.s, d, &g, &n, 1, 0.5f);
           // The optimizer's finite results are the cpu's bits on every device.
           return std::vector<Output>{{"param", L.get(t.param, d, n), {0, 0}},
                                      {"master", L.get(t.master, DType::kF32, n), {0, 0}},
                                      {"exp_avg_sq", L.get(t.state1, DType::kF32, n), {0, 0}},
                                      {"unscaled", L.get(g, d, n), {0, 0}},
                                      {"finite", {clean ? 1.0 : 0.0}, {0, 0}}};
         }});
  }
}

// Quantization (cpu_quant.h): codes, absmax, int8 values and int32 sums are exact on every
// device (bits); the fused 4-bit GEMM keeps one summation order everywhere (Note [gemm_4bit
// order] in kernels/src/cpu/quant.cc), so its results are bits too.
void add_quant(std::vector<Case>& cases) {
  for (Quant4Type type : {Quant4Type::kNf4, Quant4Type::kFp4}) {
    const std::string tn = type == Quant4Type::kNf4 ? "nf4" : "fp4";
    cases.push_back({"quant4_" + tn, Op::kQuantize4bit, DType::kF32, [type](Lab& L) {
                       const int64_t n = 4099, bs = 64, blocks = (n + bs - 1) / bs;
                       std::vector<float> xv = inputs(n, 40, -3, 3);
                       for (int64_t i = 128; i < 192; ++i) xv[i] = 0.0f;  // an all-zero block
                       const auto* x = static_cast<const float*>(L.put(xv, DType::kF32));
                       auto* packed = static_cast<uint8_t*>(L.alloc((n + 1) / 2));
                       auto* absmax = static_cast<float*>(L.alloc(blocks * 4));
                       auto* y = static_cast<float*>(L.alloc(n * 4));
                       const auto* code = static_cast<const float*>(L.put(
                           std::vector<float>(cpu::quant4_code(type), cpu::quant4_code(type) + 16),
                           DType::kF32));
                       L.k.quantize_4bit(L.s, type, x, n, bs, packed, absmax);
                       L.k.dequantize_4bit(L.s, code, packed, absmax, n, bs, y);
                       return std::vector<Output>{
                           {"packed", L.get(packed, DType::kU8, (n + 1) / 2), {0, 0}},
                           {"absmax", L.get(absmax, DType::kF32, blocks), {0, 0}},
                           {"y", L.get(y, DType::kF32, n), {0, 0}}};
                     }});
  }
  cases.push_back(
      {"quant8_blockwise", Op::kQuantizeBlockwise8bit, DType::kF32, [](Lab& L) {
         const int64_t n = 1000, bs = 256, blocks = 4;
         const auto* x =
             static_cast<const float*>(L.put(inputs(n, 41, -0.02f, 0.03f), DType::kF32));
         const float* dyn = cpu::dynamic_code_signed();
         const auto* code =
             static_cast<const float*>(L.put(std::vector<float>(dyn, dyn + 256), DType::kF32));
         auto* q = static_cast<uint8_t*>(L.alloc(n));
         auto* absmax = static_cast<float*>(L.alloc(blocks * 4));
         auto* y = static_cast<float*>(L.alloc(n * 4));
         L.k.quantize_blockwise_8bit(L.s, code, x, n, bs, q, absmax);
         L.k.dequantize_blockwise_8bit(L.s, code, q, absmax, n, bs, y);
         return std::vector<Output>{{"q", L.get(q, DType::kU8, n), {0, 0}},
                                    {"absmax", L.get(absmax, DType::kF32, blocks), {0, 0}},
                                    {"y", L.get(y, DType::kF32, n), {0, 0}}};
       }});
  cases.push_back(
      {"int8_rows_gemm_linear", Op::kInt8Linear, DType::kF32, [](Lab& L) {
         const int64_t m = 9, k = 133, n = 21;
         std::vector<float> xv = inputs(m * k, 42, -3, 3);
         xv[2 * k + 7] = 9.0f;  // outlier columns at threshold 6
         xv[5 * k + 100] = -7.5f;
         const auto* x = static_cast<const float*>(L.put(xv, DType::kF32));
         const auto* w =
             static_cast<const float*>(L.put(inputs(n * k, 43, -0.1f, 0.1f), DType::kF32));
         auto* qx = static_cast<int8_t*>(L.alloc(m * k));
         auto* sx = static_cast<float*>(L.alloc(m * 4));
         auto* cols = static_cast<int64_t*>(L.alloc(k * 8));
         auto* cb = static_cast<int8_t*>(L.alloc(n * k));
         auto* scb = static_cast<float*>(L.alloc(n * 4));
         auto* acc = static_cast<int32_t*>(L.alloc(m * n * 4));
         auto* y = static_cast<float*>(L.alloc(m * n * 4));
         auto* y0 = static_cast<float*>(L.alloc(m * n * 4));
         const int64_t outliers = L.k.quantize_int8_rows(L.s, x, m, k, 6.0f, qx, sx, cols);
         L.k.quantize_int8_rows(L.s, w, n, k, 0.0f, cb, scb, nullptr);
         L.k.gemm_i8_i32(L.s, qx, cb, m, n, k, acc);
         const int64_t lin = L.k.int8_linear(L.s, x, m, k, cb, scb, n, 6.0f, y);
         L.k.int8_linear(L.s, x, m, k, cb, scb, n, 0.0f, y0);
         return std::vector<Output>{{"qx", L.get(qx, DType::kI8, m * k), {0, 0}},
                                    {"sx", L.get(sx, DType::kF32, m), {0, 0}},
                                    {"outliers", {double(outliers), double(lin)}, {0, 0}},
                                    {"cols", L.get(cols, DType::kI64, outliers), {0, 0}},
                                    {"cb", L.get(cb, DType::kI8, n * k), {0, 0}},
                                    {"scb", L.get(scb, DType::kF32, n), {0, 0}},
                                    {"acc", L.get(acc, DType::kI32, m * n), {0, 0}},
                                    {"y", L.get(y, DType::kF32, m * n), {0, 0}},
                                    {"y_no_outliers", L.get(y0, DType::kF32, m * n), {0, 0}}};
       }});
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    cases.push_back({"gemm_4bit_" + dn(d), Op::kGemm4bit, d, [d](Lab& L) {
                       const int64_t m = 5, n = 67, k = 97, bs = 64, count = n * k;
                       const auto* w = static_cast<const float*>(
                           L.put(inputs(count, 44, -0.2f, 0.2f), DType::kF32));
                       auto* packed = static_cast<uint8_t*>(L.alloc((count + 1) / 2));
                       auto* absmax = static_cast<float*>(L.alloc(((count + bs - 1) / bs) * 4));
                       const float* nf4 = cpu::quant4_code(Quant4Type::kNf4);
                       const auto* code = static_cast<const float*>(
                           L.put(std::vector<float>(nf4, nf4 + 16), DType::kF32));
                       L.k.quantize_4bit(L.s, Quant4Type::kNf4, w, count, bs, packed, absmax);
                       const void* x = L.put(inputs(m * k, 45), d);
                       void* y = L.alloc(m * n * dtype_size(d));
                       L.k.gemm_4bit(L.s, code, packed, absmax, bs, m, n, k, x, d, y, d);
                       const void* dy = L.put(inputs(m * n, 46), d);
                       void* dx = L.alloc(m * k * dtype_size(d));
                       L.k.gemm_4bit_nn(L.s, code, packed, absmax, bs, m, n, k, dy, d, dx, d);
                       return std::vector<Output>{{"y", L.get(y, d, m * n), {0, 0}},
                                                  {"dx", L.get(dx, d, m * k), {0, 0}}};
                     }});
  }
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> c;
    add_data_movement(c);
    add_elementwise(c);
    add_reductions(c);
    add_layers(c);
    add_optimizer(c);
    add_quant(c);
    return c;
  }();
  return cases;
}

// The reference: the cpu table at the scalar level.
std::vector<Output> reference(const Case& c) {
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  Lab lab(kCPU);
  return c.run(lab);
}

// Runs every case the candidate supports and compares it with the reference. Returns how many
// cases ran.
int check_device(Device device) {
  const KernelTable& k = kernels_for(device);
  int ran = 0;
  for (const Case& c : all_cases()) {
    if (!k.supports(c.op, c.dtype)) continue;
    SCOPED_TRACE(c.name + " on " + device.str());
    const std::vector<Output> want = reference(c);
    Lab lab(device);
    const std::vector<Output> got = c.run(lab);
    ++ran;
    EXPECT_EQ(got.size(), want.size());
    if (got.size() != want.size()) continue;
    for (size_t o = 0; o < got.size(); ++o) {
      EXPECT_EQ(got[o].values.size(), want[o].values.size()) << got[o].name;
      if (got[o].values.size() != want[o].values.size()) continue;
      int bad = 0;
      for (size_t i = 0; i < got[o].values.size() && bad < 5; ++i) {
        if (!close_enough(want[o].values[i], got[o].values[i], want[o].tol)) {
          ADD_FAILURE() << c.name << " " << got[o].name << "[" << i << "]: got " << got[o].values[i]
                        << ", reference " << want[o].values[i];
          ++bad;
        }
      }
    }
  }
  return ran;
}

TEST(TableConformance, CpuAtItsSimdLevelMatchesTheScalarReference) {
  const int ran = check_device(kCPU);
  EXPECT_EQ(ran, static_cast<int>(all_cases().size()));  // cpu supports every case
}

// GPU tables: every case the table supports, against the same reference. Built into the
// gpu-labelled binary braid_kernels_table_gpu_test (BRAID_TABLE_GPU), which skips with the
// runtime's reason where no device is visible.
#if BRAID_TABLE_GPU
TEST(TableConformanceGpu, CudaMatchesTheCpuReference) {
  try {
    (void)device_runtime(DeviceType::kCUDA);
  } catch (const Error& e) {
    GTEST_SKIP() << e.message();
  }
  const int ran = check_device(Device{DeviceType::kCUDA, 0});
  std::cout << "cuda ran " << ran << " of " << all_cases().size() << " cases\n";
  EXPECT_GT(ran, 0);
}
#else

// ---- supports() tells the truth ------------------------------------------------------------

// Calls `op` on one element of `dtype` (host memory) through the table.
void call_one(const KernelTable& k, Op op, DType d) {
  alignas(16) uint8_t a[64] = {}, b[64] = {}, c[64] = {}, e[64] = {}, f[64] = {}, g[64] = {};
  const int64_t one = 1, shape[1] = {1}, st[1] = {1};
  const Stream s{Device{k.device, 0}};
  float master = 0, s0 = 0, s1 = 0;
  switch (op) {
    case Op::kCast:
      return k.cast(s, a, d, b, DType::kF32, 1, CastMode::kDefault);
    case Op::kFill:
      return k.fill(s, a, d, 1, 1.0);
    case Op::kCopyStrided:
      return k.copy_strided(s, a, dtype_size(d), 1, shape, st, b);
    case Op::kCopyToStrided:
      return k.copy_to_strided(s, a, dtype_size(d), 1, shape, b, st);
    case Op::kBinary:
      return k.binary(s, BinaryOp::kAdd, d, 1, shape, a, st, b, st, c);
    case Op::kAxpby:
      return k.axpby(s, d, 1, 1.0, a, 1.0, b, c);
    case Op::kScale:
      return k.scale(s, d, 1, 2.0, a, b);
    case Op::kUnary:
      return k.unary(s, UnaryOp::kNeg, d, 1, a, b);
    case Op::kReduce:
      return k.reduce(s, ReduceOp::kSum, d, 1, 1, 1, a, d, b);
    case Op::kSoftmax:
      return k.softmax(s, d, 1, 1, a, b, false);
    case Op::kGemm: {
      GemmArgs gm;
      gm.m = gm.n = gm.k = gm.lda = gm.ldb = gm.ldc = 1;
      gm.a = a, gm.b = b, gm.c = c;
      gm.ab_dtype = gm.c_dtype = d;
      return k.gemm(s, gm);
    }
    case Op::kLayerNormForward:
      return k.layer_norm_forward(s, d, 1, 1, a, nullptr, nullptr, 1e-5, b, c, e);
    case Op::kLayerNormBackward:
      return k.layer_norm_backward(s, d, 1, 1, a, nullptr, b, c, e, f, g, nullptr);
    case Op::kRmsNormForward:
      return k.rms_norm_forward(s, d, 1, 1, a, nullptr, 1e-5, b, c);
    case Op::kRmsNormBackward:
      return k.rms_norm_backward(s, d, 1, 1, a, nullptr, b, c, e, f);
    case Op::kActivationBackward:
      return k.activation_backward(s, ActivationGrad::kRelu, d, 1, a, b, c);
    case Op::kMaskedScale:
      return k.masked_scale(s, d, 1, a, b, 2.0, c);
    case Op::kEmbeddingForward:
      return k.embedding_forward(s, d, 1, 1, a, DType::kI64, b, 1, c);
    case Op::kEmbeddingBackward:
      return k.embedding_backward(s, d, 1, 1, DType::kI64, b, 1, a, c);
    case Op::kCrossEntropyForward:
      return k.cross_entropy_forward(s, d, 1, 1, a, DType::kI64, b, -100, 0.0, c, e);
    case Op::kCrossEntropyBackward:
      return k.cross_entropy_backward(s, d, 1, 1, a, DType::kI64, b, -100, 0.0, c, e, f);
    case Op::kAttentionForward:
    case Op::kAttentionBackward: {
      AttentionArgs at;
      at.batch = at.seq = at.n_head = at.head_dim = 1;
      at.dtype = d;
      if (op == Op::kAttentionForward) return k.causal_attention_forward(s, at, a, b);
      return k.causal_attention_backward(s, at, a, b, c);
    }
    case Op::kOptimizerStep: {
      OptimStep os;
      os.param_dtype = os.grad_dtype = d;
      OptimTensor t;
      t.n = 1, t.param = a, t.grad = b, t.master = &master, t.state0 = &s0, t.state1 = &s1;
      return k.optimizer_step(s, os, &t, 1, 1);
    }
    case Op::kUnscaleCheckFinite: {
      void* p = a;
      (void)k.unscale_and_check_finite(s, d, &p, &one, 1, 0.5f);
      return;
    }
    case Op::kGemm4bit:
      return k.gemm_4bit(s, reinterpret_cast<const float*>(e), b, reinterpret_cast<float*>(f), 2, 1,
                         1, 1, a, d, c, d);
    case Op::kGemm4bitNN:
      return k.gemm_4bit_nn(s, reinterpret_cast<const float*>(e), b, reinterpret_cast<float*>(f), 2,
                            1, 1, 1, a, d, c, d);
    // The other quant ops have fixed operand dtypes (no dtype argument): a caller asks
    // supports() first, as here, and supports() answers the one dtype they take.
    default:
      break;
  }
  require_support(k, op, d);
  auto* fa = reinterpret_cast<float*>(a);
  auto* fe = reinterpret_cast<float*>(e);
  auto* ff = reinterpret_cast<float*>(f);
  static float code256[256] = {};  // the 8-bit search reads up to 256 entries
  switch (op) {
    case Op::kQuantize4bit:
      return k.quantize_4bit(s, Quant4Type::kNf4, fa, 2, 2, b, fe);
    case Op::kDequantize4bit:
      return k.dequantize_4bit(s, ff, b, fe, 2, 2, fa);
    case Op::kQuantizeBlockwise8bit:
      return k.quantize_blockwise_8bit(s, code256, fa, 2, 2, b, fe);
    case Op::kDequantizeBlockwise8bit:
      return k.dequantize_blockwise_8bit(s, code256, b, fe, 2, 2, fa);
    case Op::kQuantizeInt8Rows:
      (void)k.quantize_int8_rows(s, fa, 1, 1, 0.0f, reinterpret_cast<int8_t*>(b), fe, nullptr);
      return;
    case Op::kGemmI8:
      return k.gemm_i8_i32(s, reinterpret_cast<int8_t*>(a), reinterpret_cast<int8_t*>(b), 1, 1, 1,
                           reinterpret_cast<int32_t*>(c));
    case Op::kInt8Linear:
      (void)k.int8_linear(s, fa, 1, 1, reinterpret_cast<int8_t*>(b), fe, 1, 0.0f, ff);
      return;
    default:
      break;
  }
}

const DType kEveryDtype[] = {DType::kF64,    DType::kF32,    DType::kF16, DType::kBF16,
                             DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                             DType::kI16,    DType::kI8,     DType::kU8,  DType::kBool};

TEST(TableConformance, CpuSupportsTellsTheTruth) {
  const KernelTable& k = kernels_for(kCPU);
  for (int o = 0; o < kNumOps; ++o) {
    const auto op = static_cast<Op>(o);
    for (DType d : kEveryDtype) {
      SCOPED_TRACE(std::string(op_name(op)) + " " + dn(d));
      if (k.supports(op, d)) {
        EXPECT_NO_THROW(call_one(k, op, d));
      } else {
        try {
          call_one(k, op, d);
          ADD_FAILURE() << "ran although supports() is false";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kNotSupported) << e.what();
        }
      }
    }
  }
}

TEST(TableConformance, MetaRefusesWhatCpuRefusesAndTouchesNoMemory) {
  const KernelTable& meta = kernels_for(kMeta);
  const KernelTable& cpu = kernels_for(kCPU);
  EXPECT_EQ(meta.device, DeviceType::kMeta);
  for (int o = 0; o < kNumOps; ++o) {
    const auto op = static_cast<Op>(o);
    for (DType d : kEveryDtype) {
      SCOPED_TRACE(std::string(op_name(op)) + " " + dn(d));
      EXPECT_EQ(meta.supports(op, d), cpu.supports(op, d));
      if (!meta.supports(op, d)) {
        try {
          call_one(meta, op, d);
          ADD_FAILURE() << "meta ran an unsupported op";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
          EXPECT_NE(std::string(e.what()).find("meta"), std::string::npos) << e.what();
        }
      }
    }
  }
  // Null pointers everywhere: meta never dereferences.
  meta.fill(Stream{kMeta}, nullptr, DType::kF32, 1 << 20, 1.0);
  meta.cast(Stream{kMeta}, nullptr, DType::kF32, nullptr, DType::kBF16, 1 << 20,
            CastMode::kDefault);
  GemmArgs g;
  g.m = g.n = g.k = 4096;
  meta.gemm(Stream{kMeta}, g);
  EXPECT_THROW(meta.fill(Stream{kMeta}, nullptr, DType::kF32, -1, 0.0), Error);
}

TEST(TableConformance, KernelsForNamesWhatThisBuildLacks) {
  EXPECT_TRUE(has_kernels(DeviceType::kCPU));
  EXPECT_TRUE(has_kernels(DeviceType::kMeta));
  EXPECT_EQ(has_kernels(DeviceType::kCUDA), static_cast<bool>(BRAID_HAVE_CUDA));
  EXPECT_FALSE(has_kernels(DeviceType::kXPU));
  try {
    (void)kernels_for(DeviceType::kXPU);
    ADD_FAILURE() << "xpu has no table";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("xpu"), std::string::npos) << e.what();
  }
  for (int o = 0; o < kNumOps; ++o) {
    EXPECT_NE(op_name(static_cast<Op>(o)), "unknown op");
  }
}

#endif  // BRAID_TABLE_GPU

}  // namespace
}  // namespace braid::kernels
