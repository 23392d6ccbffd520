// The cuda kernel table (braid/kernels/table.h): what this build runs on NVIDIA GPUs behind the
// one seam every layer uses. Members enqueue on the Stream's cudaStream_t (null: the legacy
// default stream) of the current device and return without waiting, except
// unscale_and_check_finite, which returns a host bool. The kernels live by family in
// cast_copy.cu, elementwise.cu, reduce_softmax.cu, nn_layers.cu, cross_entropy.cu,
// attention.cu and quant.cu (table_ops.h); gemm, optimizer_step and unscale are cuda.h's.
// supports() lists exactly the (op, dtype) pairs these members accept; docs/gpu.md ("Kernel table
// on cuda") gives each member's tolerance against the cpu reference.
#include "braid/kernels/cuda.h"
#include "braid/kernels/table.h"
#include "table_ops.h"

namespace braid::kernels::detail {
namespace {

namespace ops = cuda::table_ops;

bool cuda_supports(Op op, DType d) {
  const bool f64 = d == DType::kF64, f32 = d == DType::kF32;
  const bool half = d == DType::kF16 || d == DType::kBF16;
  const bool flt = f64 || f32 || half;
  switch (op) {
    case Op::kCast:
    case Op::kFill:
    case Op::kCopyStrided:
    case Op::kCopyToStrided:
    case Op::kEmbeddingForward:  // rows are copied as words of the dtype's size
      return true;
    case Op::kBinary:
    case Op::kReduce:  // integer mean / norm are refused by the call, as on the cpu
      return flt || d == DType::kI64 || d == DType::kI32;
    case Op::kAxpby:
    case Op::kScale:
    case Op::kUnary:
    case Op::kSoftmax:
    case Op::kGemm:
    case Op::kActivationBackward:
    case Op::kMaskedScale:
    case Op::kCrossEntropyForward:
    case Op::kCrossEntropyBackward:
    case Op::kAttentionForward:
    case Op::kAttentionBackward:
      return flt;
    case Op::kLayerNormForward:
    case Op::kLayerNormBackward:
    case Op::kRmsNormForward:
    case Op::kRmsNormBackward:
    case Op::kEmbeddingBackward:
      return f64 || f32;
    case Op::kOptimizerStep:
    case Op::kUnscaleCheckFinite:
    case Op::kGemm4bit:
    case Op::kGemm4bitNN:
      return f32 || half;
    case Op::kQuantize4bit:
    case Op::kDequantize4bit:
    case Op::kQuantizeBlockwise8bit:
    case Op::kDequantizeBlockwise8bit:
    case Op::kQuantizeInt8Rows:
    case Op::kInt8Linear:
      return f32;
    case Op::kGemmI8:
      return d == DType::kI8;
  }
  return false;
}

}  // namespace

const KernelTable& cuda_kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.device = DeviceType::kCUDA;
    t.supports = cuda_supports;
    t.cast = ops::cast;
    t.fill = ops::fill;
    t.copy_strided = ops::copy_strided;
    t.copy_to_strided = ops::copy_to_strided;
    t.binary = ops::binary;
    t.axpby = ops::axpby;
    t.scale = ops::scale;
    t.unary = ops::unary;
    t.reduce = ops::reduce;
    t.softmax = ops::softmax;
    t.gemm = [](Stream s, const GemmArgs& a) { cuda::gemm(a, s.handle); };
    t.layer_norm_forward = ops::layer_norm_forward;
    t.layer_norm_backward = ops::layer_norm_backward;
    t.rms_norm_forward = ops::rms_norm_forward;
    t.rms_norm_backward = ops::rms_norm_backward;
    t.activation_backward = ops::activation_backward;
    t.masked_scale = ops::masked_scale;
    t.embedding_forward = ops::embedding_forward;
    t.embedding_backward = ops::embedding_backward;
    t.cross_entropy_forward = ops::cross_entropy_forward;
    t.cross_entropy_backward = ops::cross_entropy_backward;
    t.causal_attention_forward = ops::causal_attention_forward;
    t.causal_attention_backward = ops::causal_attention_backward;
    t.optimizer_step = [](Stream s, const OptimStep& st, const OptimTensor* ts, int64_t count,
                          int) { cuda::optimizer_step(st, ts, count, s.handle); };
    t.unscale_and_check_finite = [](Stream s, DType d, void* const* data, const int64_t* counts,
                                    int64_t count, float inv) {
      return cuda::unscale_and_check_finite(d, data, counts, count, inv, s.handle);
    };
    t.quantize_4bit = ops::quantize_4bit;
    t.dequantize_4bit = ops::dequantize_4bit;
    t.quantize_blockwise_8bit = ops::quantize_blockwise_8bit;
    t.dequantize_blockwise_8bit = ops::dequantize_blockwise_8bit;
    t.quantize_int8_rows = ops::quantize_int8_rows;
    t.gemm_i8_i32 = ops::gemm_i8_i32;
    t.int8_linear = ops::int8_linear;
    t.gemm_4bit = ops::gemm_4bit;
    t.gemm_4bit_nn = ops::gemm_4bit_nn;
    return t;
  }();
  return table;
}

}  // namespace braid::kernels::detail

// The kernels_cuda component's entry point (table_registry.cc references it weakly).
extern "C" const braid::kernels::KernelTable* braid_kernels_cuda_table() {
  return &braid::kernels::detail::cuda_kernel_table();
}
