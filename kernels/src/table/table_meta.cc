// The meta kernel table: argument checks and no computation. Meta tensors have no memory
// (the meta allocator hands out null pointers), so a model built, run forward or sized on meta
// goes through the same code as on a real device and is refused where the reference would
// refuse it (unsupported dtypes, negative sizes), without touching data.
#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "table_support.h"

namespace braid::kernels::detail {
namespace {

void check(Op op, DType dtype, int64_t n) {
  BRAID_CHECK(reference_supports(op, dtype), kNotSupported, op_name(op), ": dtype ", dtype,
              " is not supported on meta");
  BRAID_CHECK(n >= 0, kInvalidArgument, op_name(op), ": element count ", n,
              " is negative; expected >= 0");
}

void check_shape(Op op, int ndim, const int64_t* shape) {
  BRAID_CHECK(ndim >= 0, kInvalidArgument, op_name(op), ": ndim ", ndim, " is negative");
  for (int i = 0; i < ndim; ++i) {
    BRAID_CHECK(shape[i] >= 0, kInvalidArgument, op_name(op), ": dimension ", i, " is ", shape[i],
                "; expected >= 0");
  }
}

// A block-wise quant op: n elements in blocks of bs (positive, even).
void block(Op op, int64_t n, int64_t bs) {
  check(op, DType::kF32, n);
  BRAID_CHECK(bs > 0 && bs % 2 == 0, kInvalidArgument, op_name(op), ": blocksize ", bs,
              " must be positive and even");
}

}  // namespace

const KernelTable& meta_kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.device = DeviceType::kMeta;
    t.supports = reference_supports;
    t.cast = [](Stream, const void*, DType sd, void*, DType, int64_t n, CastMode) {
      check(Op::kCast, sd, n);
    };
    t.fill = [](Stream, void*, DType d, int64_t n, double) { check(Op::kFill, d, n); };
    t.copy_strided = [](Stream, const void*, int64_t, int nd, const int64_t* shape, const int64_t*,
                        void*) { check_shape(Op::kCopyStrided, nd, shape); };
    t.copy_to_strided = [](Stream, const void*, int64_t, int nd, const int64_t* shape, void*,
                           const int64_t*) { check_shape(Op::kCopyToStrided, nd, shape); };
    t.binary = [](Stream, BinaryOp, DType d, int nd, const int64_t* shape, const void*,
                  const int64_t*, const void*, const int64_t*, void*) {
      check(Op::kBinary, d, 0);
      check_shape(Op::kBinary, nd, shape);
    };
    t.axpby = [](Stream, DType d, int64_t n, double, const void*, double, const void*, void*) {
      check(Op::kAxpby, d, n);
    };
    t.scale = [](Stream, DType d, int64_t n, double, const void*, void*) {
      check(Op::kScale, d, n);
    };
    t.unary = [](Stream, UnaryOp, DType d, int64_t n, const void*, void*) {
      check(Op::kUnary, d, n);
    };
    t.reduce = [](Stream, ReduceOp, DType d, int64_t o, int64_t l, int64_t i, const void*, DType,
                  void*) {
      check(Op::kReduce, d, o);
      check(Op::kReduce, d, l);
      check(Op::kReduce, d, i);
    };
    t.softmax = [](Stream, DType d, int64_t r, int64_t l, const void*, void*, bool) {
      check(Op::kSoftmax, d, r);
      check(Op::kSoftmax, d, l);
    };
    t.gemm = [](Stream, const GemmArgs& a) {
      check(Op::kGemm, a.ab_dtype, a.m);
      check(Op::kGemm, a.ab_dtype, a.n);
      check(Op::kGemm, a.ab_dtype, a.k);
      check(Op::kGemm, a.ab_dtype, a.batch);
    };
    t.layer_norm_forward = [](Stream, DType d, int64_t r, int64_t n, const void*, const void*,
                              const void*, double, void*, void*, void*) {
      check(Op::kLayerNormForward, d, r);
      check(Op::kLayerNormForward, d, n);
    };
    t.layer_norm_backward = [](Stream, DType d, int64_t r, int64_t n, const void*, const void*,
                               const void*, const void*, const void*, void*, void*, void*) {
      check(Op::kLayerNormBackward, d, r);
      check(Op::kLayerNormBackward, d, n);
    };
    t.rms_norm_forward = [](Stream, DType d, int64_t r, int64_t n, const void*, const void*, double,
                            void*, void*) {
      check(Op::kRmsNormForward, d, r);
      check(Op::kRmsNormForward, d, n);
    };
    t.rms_norm_backward = [](Stream, DType d, int64_t r, int64_t n, const void*, const void*,
                             const void*, const void*, void*, void*) {
      check(Op::kRmsNormBackward, d, r);
      check(Op::kRmsNormBackward, d, n);
    };
    t.activation_backward = [](Stream, ActivationGrad, DType d, int64_t n, const void*, const void*,
                               void*) { check(Op::kActivationBackward, d, n); };
    t.masked_scale = [](Stream, DType d, int64_t n, const void*, const uint8_t*, double, void*) {
      check(Op::kMaskedScale, d, n);
    };
    t.embedding_forward = [](Stream, DType d, int64_t num, int64_t dim, const void*, DType,
                             const void*, int64_t n, void*) {
      check(Op::kEmbeddingForward, d, num);
      check(Op::kEmbeddingForward, d, dim);
      check(Op::kEmbeddingForward, d, n);
    };
    t.embedding_backward = [](Stream, DType d, int64_t num, int64_t dim, DType, const void*,
                              int64_t n, const void*, void*) {
      check(Op::kEmbeddingBackward, d, num);
      check(Op::kEmbeddingBackward, d, dim);
      check(Op::kEmbeddingBackward, d, n);
    };
    t.cross_entropy_forward = [](Stream, DType d, int64_t r, int64_t c, const void*, DType,
                                 const void*, int64_t, double, void*, void*) {
      check(Op::kCrossEntropyForward, d, r);
      check(Op::kCrossEntropyForward, d, c);
    };
    t.cross_entropy_backward = [](Stream, DType d, int64_t r, int64_t c, const void*, DType,
                                  const void*, int64_t, double, const void*, const void*, void*) {
      check(Op::kCrossEntropyBackward, d, r);
      check(Op::kCrossEntropyBackward, d, c);
    };
    t.causal_attention_forward = [](Stream, const AttentionArgs& a, const void*, void*) {
      check(Op::kAttentionForward, a.dtype, a.batch * a.seq * a.n_head * a.head_dim);
    };
    t.causal_attention_backward = [](Stream, const AttentionArgs& a, const void*, const void*,
                                     void*) {
      check(Op::kAttentionBackward, a.dtype, a.batch * a.seq * a.n_head * a.head_dim);
    };
    t.optimizer_step = [](Stream, const OptimStep& st, const OptimTensor* ts, int64_t count, int) {
      check(Op::kOptimizerStep, st.param_dtype, count);
      for (int64_t i = 0; i < count; ++i) check(Op::kOptimizerStep, st.param_dtype, ts[i].n);
    };
    t.unscale_and_check_finite = [](Stream, DType d, void* const*, const int64_t* counts,
                                    int64_t count, float) {
      check(Op::kUnscaleCheckFinite, d, count);
      for (int64_t i = 0; i < count; ++i) check(Op::kUnscaleCheckFinite, d, counts[i]);
      return false;  // no values, so none is non-finite
    };
    // The quant ops have fixed operand dtypes (f32, u8, i8): sizes and block sizes are checked.
    t.quantize_4bit = [](Stream, Quant4Type, const float*, int64_t n, int64_t bs, uint8_t*,
                         float*) { block(Op::kQuantize4bit, n, bs); };
    t.dequantize_4bit = [](Stream, const float*, const uint8_t*, const float*, int64_t n,
                           int64_t bs, float*) { block(Op::kDequantize4bit, n, bs); };
    t.quantize_blockwise_8bit = [](Stream, const float*, const float*, int64_t n, int64_t bs,
                                   uint8_t*, float*) { block(Op::kQuantizeBlockwise8bit, n, bs); };
    t.dequantize_blockwise_8bit = [](Stream, const float*, const uint8_t*, const float*, int64_t n,
                                     int64_t bs,
                                     float*) { block(Op::kDequantizeBlockwise8bit, n, bs); };
    t.quantize_int8_rows = [](Stream, const float*, int64_t r, int64_t c, float th, int8_t*, float*,
                              int64_t*) -> int64_t {
      check(Op::kQuantizeInt8Rows, DType::kF32, r);
      check(Op::kQuantizeInt8Rows, DType::kF32, c);
      BRAID_CHECK(th >= 0, kInvalidArgument, "quantize_int8_rows: threshold ", th,
                  " is negative (0 turns outliers off)");
      return 0;  // no values, so no outliers
    };
    t.gemm_i8_i32 = [](Stream, const int8_t*, const int8_t*, int64_t m, int64_t n, int64_t k,
                       int32_t*) {
      check(Op::kGemmI8, DType::kI8, m);
      check(Op::kGemmI8, DType::kI8, n);
      check(Op::kGemmI8, DType::kI8, k);
      BRAID_CHECK(k < 133000, kNotSupported, "gemm_i8_i32: k ", k,
                  " could overflow the int32 accumulator (expected k < 133000)");
    };
    t.int8_linear = [](Stream, const float*, int64_t m, int64_t k, const int8_t*, const float*,
                       int64_t n, float th, float*) -> int64_t {
      check(Op::kInt8Linear, DType::kF32, m);
      check(Op::kInt8Linear, DType::kF32, n);
      check(Op::kInt8Linear, DType::kF32, k);
      BRAID_CHECK(th >= 0, kInvalidArgument, "int8_linear: threshold ", th, " is negative");
      return 0;
    };
    t.gemm_4bit = [](Stream, const float*, const uint8_t*, const float*, int64_t bs, int64_t m,
                     int64_t n, int64_t k, const void*, DType xd, void*, DType yd) {
      check(Op::kGemm4bit, xd, m);
      check(Op::kGemm4bit, yd, n);
      block(Op::kGemm4bit, k, bs);
    };
    t.gemm_4bit_nn = [](Stream, const float*, const uint8_t*, const float*, int64_t bs, int64_t m,
                        int64_t n, int64_t k, const void*, DType xd, void*, DType yd) {
      check(Op::kGemm4bitNN, xd, m);
      check(Op::kGemm4bitNN, yd, k);
      block(Op::kGemm4bitNN, n, bs);
    };
    return t;
  }();
  return table;
}

}  // namespace braid::kernels::detail
