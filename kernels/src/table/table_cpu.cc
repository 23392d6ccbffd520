// The cpu kernel table: kernels/cpu.h's functions (ISA-dispatched at run time) behind the
// KernelTable of table.h. The stream is ignored: cpu work is done when a call returns.
#include "braid/kernels/cpu.h"
#include "braid/kernels/cpu_quant.h"
#include "braid/kernels/table.h"
#include "table_support.h"

namespace braid::kernels::detail {
namespace {

namespace c = kernels::cpu;

bool cpu_supports(Op op, DType dtype) {
  return reference_supports(op, dtype);
}

}  // namespace

const KernelTable& cpu_kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.device = DeviceType::kCPU;
    t.supports = cpu_supports;
    t.cast = [](Stream, const void* src, DType sd, void* dst, DType dd, int64_t n, CastMode m) {
      c::cast(src, sd, dst, dd, n, m);
    };
    t.fill = [](Stream, void* dst, DType d, int64_t n, double v) { c::fill(dst, d, n, v); };
    t.copy_strided = [](Stream, const void* src, int64_t es, int nd, const int64_t* shape,
                        const int64_t* ss,
                        void* dst) { c::copy_strided(src, es, nd, shape, ss, dst); };
    t.copy_to_strided = [](Stream, const void* src, int64_t es, int nd, const int64_t* shape,
                           void* dst,
                           const int64_t* ds) { c::copy_to_strided(src, es, nd, shape, dst, ds); };
    t.copy_nontemporal = c::copy_nontemporal;
    t.binary = [](Stream, BinaryOp op, DType d, int nd, const int64_t* shape, const void* a,
                  const int64_t* as, const void* b, const int64_t* bs,
                  void* out) { c::binary(op, d, nd, shape, a, as, b, bs, out); };
    t.axpby = [](Stream, DType d, int64_t n, double al, const void* x, double be, const void* y,
                 void* out) { c::axpby(d, n, al, x, be, y, out); };
    t.scale = [](Stream, DType d, int64_t n, double al, const void* x, void* out) {
      c::scale(d, n, al, x, out);
    };
    t.unary = [](Stream, UnaryOp op, DType d, int64_t n, const void* x, void* out) {
      c::unary(op, d, n, x, out);
    };
    t.reduce = [](Stream, ReduceOp op, DType d, int64_t o, int64_t l, int64_t i, const void* x,
                  DType od, void* out) { c::reduce(op, d, o, l, i, x, od, out); };
    t.softmax = [](Stream, DType d, int64_t r, int64_t l, const void* x, void* out, bool lg) {
      c::softmax(d, r, l, x, out, lg);
    };
    t.gemm = [](Stream, const GemmArgs& a) { c::gemm(a); };
    t.layer_norm_forward = [](Stream, DType d, int64_t r, int64_t n, const void* x, const void* w,
                              const void* b, double eps, void* y, void* mean, void* rstd) {
      c::layer_norm_forward(d, r, n, x, w, b, eps, y, mean, rstd);
    };
    t.layer_norm_backward = [](Stream, DType d, int64_t r, int64_t n, const void* x, const void* w,
                               const void* mean, const void* rstd, const void* dy, void* dx,
                               void* dw, void* db) {
      c::layer_norm_backward(d, r, n, x, w, mean, rstd, dy, dx, dw, db);
    };
    t.rms_norm_forward = [](Stream, DType d, int64_t r, int64_t n, const void* x, const void* w,
                            double eps, void* y,
                            void* rstd) { c::rms_norm_forward(d, r, n, x, w, eps, y, rstd); };
    t.rms_norm_backward = [](Stream, DType d, int64_t r, int64_t n, const void* x, const void* w,
                             const void* rstd, const void* dy, void* dx,
                             void* dw) { c::rms_norm_backward(d, r, n, x, w, rstd, dy, dx, dw); };
    t.activation_backward = [](Stream, ActivationGrad op, DType d, int64_t n, const void* x,
                               const void* dy,
                               void* dx) { c::activation_backward(op, d, n, x, dy, dx); };
    t.masked_scale = [](Stream, DType d, int64_t n, const void* x, const uint8_t* keep, double sc,
                        void* out) { c::masked_scale(d, n, x, keep, sc, out); };
    t.embedding_forward = [](Stream, DType d, int64_t num, int64_t dim, const void* w, DType idt,
                             const void* ids, int64_t n,
                             void* out) { c::embedding_forward(d, num, dim, w, idt, ids, n, out); };
    t.embedding_backward = [](Stream, DType d, int64_t num, int64_t dim, DType idt, const void* ids,
                              int64_t n, const void* dy, void* dw) {
      c::embedding_backward(d, num, dim, idt, ids, n, dy, dw);
    };
    t.cross_entropy_forward = [](Stream, DType ld, int64_t r, int64_t cl, const void* lg, DType td,
                                 const void* tg, int64_t ig, double ls, void* loss, void* lse) {
      c::cross_entropy_forward(ld, r, cl, lg, td, tg, ig, ls, loss, lse);
    };
    t.cross_entropy_backward = [](Stream, DType ld, int64_t r, int64_t cl, const void* lg, DType td,
                                  const void* tg, int64_t ig, double ls, const void* lse,
                                  const void* sc, void* dl) {
      c::cross_entropy_backward(ld, r, cl, lg, td, tg, ig, ls, lse, sc, dl);
    };
    t.causal_attention_forward = [](Stream, const AttentionArgs& a, const void* qkv, void* out) {
      c::causal_attention_forward(a, qkv, out);
    };
    t.causal_attention_backward = [](Stream, const AttentionArgs& a, const void* qkv,
                                     const void* dout, void* dqkv) {
      c::causal_attention_backward(a, qkv, dout, dqkv);
    };
    t.optimizer_step = [](Stream, const OptimStep& st, const OptimTensor* ts, int64_t count,
                          int threads) { c::optimizer_step_threaded(st, ts, count, threads); };
    t.unscale_and_check_finite = [](Stream, DType d, void* const* data, const int64_t* counts,
                                    int64_t count, float inv) {
      return c::unscale_and_check_finite(d, data, counts, count, inv);
    };
    t.quantize_4bit = [](Stream, Quant4Type ty, const float* x, int64_t n, int64_t bs, uint8_t* p,
                         float* am) { c::quantize_4bit(ty, x, n, bs, p, am); };
    t.dequantize_4bit = [](Stream, const float* code, const uint8_t* p, const float* am, int64_t n,
                           int64_t bs, float* y) { c::dequantize_4bit(code, p, am, n, bs, y); };
    t.quantize_blockwise_8bit = [](Stream, const float* code, const float* x, int64_t n, int64_t bs,
                                   uint8_t* q, float* am) {
      c::quantize_blockwise_8bit(code, x, n, bs, q, am);
    };
    t.dequantize_blockwise_8bit = [](Stream, const float* code, const uint8_t* q, const float* am,
                                     int64_t n, int64_t bs, float* y) {
      c::dequantize_blockwise_8bit(code, q, am, n, bs, y);
    };
    t.quantize_int8_rows = [](Stream, const float* x, int64_t r, int64_t cols, float th, int8_t* q,
                              float* am, int64_t* oc) {
      return c::quantize_int8_rows(x, r, cols, th, q, am, oc);
    };
    t.gemm_i8_i32 = [](Stream, const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                       int32_t* cc) { c::gemm_i8_i32(a, b, m, n, k, cc); };
    t.int8_linear = [](Stream, const float* x, int64_t m, int64_t k, const int8_t* cb,
                       const float* scb, int64_t n, float th,
                       float* y) { return c::int8_linear(x, m, k, cb, scb, n, th, y); };
    t.gemm_4bit = [](Stream, const float* code, const uint8_t* p, const float* am, int64_t bs,
                     int64_t m, int64_t n, int64_t k, const void* x, DType xd, void* y,
                     DType yd) { c::gemm_4bit(code, p, am, bs, m, n, k, x, xd, y, yd); };
    t.gemm_4bit_nn = [](Stream, const float* code, const uint8_t* p, const float* am, int64_t bs,
                        int64_t m, int64_t n, int64_t k, const void* x, DType xd, void* y,
                        DType yd) { c::gemm_4bit_nn(code, p, am, bs, m, n, k, x, xd, y, yd); };
    return t;
  }();
  return table;
}

}  // namespace braid::kernels::detail
