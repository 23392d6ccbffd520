// SPDX-License-Identifier: Apache-2.0
// The compute seam (docs/kernels.md, "Kernel tables"): one table of kernel functions per device
// type, in the manner of ggml's backend interfaces and c10's per-device registries. Layers above
// kernels/ (tensor ops, nn, amp, comm, shard) reach kernels only through
//
//   const kernels::KernelTable& k = kernels::kernels_for(tensor.device());
//   if (k.supports(kernels::Op::kSoftmax, dtype)) k.softmax(stream, dtype, rows, len, x, y, false);
//
// and never name a device's functions (cmake/check_layering.py refuses braid/kernels/cpu.h
// outside tensor/ and kernels/). Adding a device means filling one table, not editing five
// layers.
//
// Contracts. Every member computes what the cpu function of the same name documents in
// cpu.h (argument order identical, a Stream first): cpu is the reference every other table is
// checked against by kernels/tests/table_conformance_test.cc with the dtype-aware tolerances
// of kernels/tests/kernel_test_util.h. Pointers are memory of the table's device (descriptor
// arrays such as OptimTensor[] and shape / stride arrays are host memory, read during the call
// only). On cpu the work is done when the call returns; on a GPU it is enqueued on `stream`
// (null handle: the device's default stream) and the call returns at once, except where a
// member says it waits. Bad arguments throw braid::Error before anything is enqueued; an
// (op, dtype) for which supports() is false throws kNotSupported naming the kernel, dtype and
// device.
//
// The meta table checks arguments and computes nothing (meta tensors have no memory): it lets a
// model be built, sized and traced on meta with the same code paths as on a real device.
#pragma once

#include <cstdint>
#include <string_view>

#include "braid/core/device.h"
#include "braid/core/device_runtime.h"
#include "braid/core/dtype.h"
#include "braid/core/stream.h"
#include "braid/kernels/optim.h"
#include "braid/kernels/types.h"

namespace braid::kernels {

// One entry per member of KernelTable that computes (supports() is asked per op).
enum class Op : uint8_t {
  kCast,
  kFill,
  kCopyStrided,
  kCopyToStrided,
  kBinary,
  kAxpby,
  kScale,
  kUnary,
  kReduce,
  kSoftmax,
  kGemm,
  kLayerNormForward,
  kLayerNormBackward,
  kRmsNormForward,
  kRmsNormBackward,
  kActivationBackward,
  kMaskedScale,
  kEmbeddingForward,
  kEmbeddingBackward,
  kCrossEntropyForward,
  kCrossEntropyBackward,
  kAttentionForward,
  kAttentionBackward,
  kOptimizerStep,
  kUnscaleCheckFinite,
  // quantization in bitsandbytes' formats (cpu_quant.h, docs/quantization.md)
  kQuantize4bit,
  kDequantize4bit,
  kQuantizeBlockwise8bit,
  kDequantizeBlockwise8bit,
  kQuantizeInt8Rows,
  kGemmI8,
  kInt8Linear,
  kGemm4bit,
  kGemm4bitNN,
};
inline constexpr int kNumOps = static_cast<int>(Op::kGemm4bitNN) + 1;
std::string_view op_name(Op op);  // "cast", "layer_norm_forward", ...

// The dtype supports() is asked about, per op: the source dtype for cast, the element dtype of
// copies, fill and elementwise / layer ops, ab_dtype for gemm, the logits' dtype for cross
// entropy, param_dtype for optimizer_step. A call may still refuse a combination the single
// dtype does not decide (a cast's target, gemm's c_dtype) with kNotSupported.
struct KernelTable {
  DeviceType device = DeviceType::kCPU;

  bool (*supports)(Op op, DType dtype) = nullptr;

  // ---- data movement ----
  void (*cast)(Stream s, const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
               CastMode mode) = nullptr;
  void (*fill)(Stream s, void* dst, DType dtype, int64_t n, double value) = nullptr;
  void (*copy_strided)(Stream s, const void* src, int64_t elem_size, int ndim, const int64_t* shape,
                       const int64_t* src_strides, void* dst) = nullptr;
  void (*copy_to_strided)(Stream s, const void* src, int64_t elem_size, int ndim,
                          const int64_t* shape, void* dst, const int64_t* dst_strides) = nullptr;
  // (optional, cpu only) memcpy whose stores bypass the caches; null elsewhere.
  void (*copy_nontemporal)(void* dst, const void* src, int64_t bytes) = nullptr;

  // ---- elementwise ----
  void (*binary)(Stream s, BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a,
                 const int64_t* a_strides, const void* b, const int64_t* b_strides,
                 void* out) = nullptr;
  void (*axpby)(Stream s, DType dtype, int64_t n, double alpha, const void* x, double beta,
                const void* y, void* out) = nullptr;
  void (*scale)(Stream s, DType dtype, int64_t n, double alpha, const void* x, void* out) = nullptr;
  void (*unary)(Stream s, UnaryOp op, DType dtype, int64_t n, const void* x, void* out) = nullptr;

  // ---- reductions, softmax, GEMM ----
  void (*reduce)(Stream s, ReduceOp op, DType dtype, int64_t outer, int64_t len, int64_t inner,
                 const void* x, DType out_dtype, void* out) = nullptr;
  void (*softmax)(Stream s, DType dtype, int64_t rows, int64_t len, const void* x, void* out,
                  bool log) = nullptr;
  void (*gemm)(Stream s, const GemmArgs& args) = nullptr;

  // ---- layers ----
  void (*layer_norm_forward)(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                             const void* w, const void* b, double eps, void* y, void* mean,
                             void* rstd) = nullptr;
  void (*layer_norm_backward)(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                              const void* w, const void* mean, const void* rstd, const void* dy,
                              void* dx, void* dw, void* db) = nullptr;
  void (*rms_norm_forward)(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                           const void* w, double eps, void* y, void* rstd) = nullptr;
  void (*rms_norm_backward)(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                            const void* w, const void* rstd, const void* dy, void* dx,
                            void* dw) = nullptr;
  void (*activation_backward)(Stream s, ActivationGrad op, DType dtype, int64_t n, const void* x,
                              const void* dy, void* dx) = nullptr;
  // keep: n bytes of this device's memory.
  void (*masked_scale)(Stream s, DType dtype, int64_t n, const void* x, const uint8_t* keep,
                       double scale, void* out) = nullptr;
  void (*embedding_forward)(Stream s, DType dtype, int64_t num, int64_t dim, const void* weight,
                            DType id_dtype, const void* ids, int64_t n, void* out) = nullptr;
  void (*embedding_backward)(Stream s, DType dtype, int64_t num, int64_t dim, DType id_dtype,
                             const void* ids, int64_t n, const void* dy, void* dweight) = nullptr;
  void (*cross_entropy_forward)(Stream s, DType logits_dtype, int64_t rows, int64_t classes,
                                const void* logits, DType target_dtype, const void* targets,
                                int64_t ignore_index, double label_smoothing, void* loss,
                                void* lse) = nullptr;
  void (*cross_entropy_backward)(Stream s, DType logits_dtype, int64_t rows, int64_t classes,
                                 const void* logits, DType target_dtype, const void* targets,
                                 int64_t ignore_index, double label_smoothing, const void* lse,
                                 const void* scale, void* dlogits) = nullptr;
  void (*causal_attention_forward)(Stream s, const AttentionArgs& args, const void* qkv,
                                   void* out) = nullptr;
  void (*causal_attention_backward)(Stream s, const AttentionArgs& args, const void* qkv,
                                    const void* dout, void* dqkv) = nullptr;

  // ---- optimizer and mixed precision (optim.h) ----
  // threads: the cpu's intra-op thread count for this call (optimizer_step_threaded);
  // devices with their own parallelism ignore it.
  void (*optimizer_step)(Stream s, const OptimStep& step, const OptimTensor* tensors, int64_t count,
                         int threads) = nullptr;
  // Waits: the answer is a host bool, so a GPU table synchronizes `s` before returning.
  bool (*unscale_and_check_finite)(Stream s, DType dtype, void* const* data, const int64_t* counts,
                                   int64_t count, float inv_scale) = nullptr;

  // ---- quantization (cpu_quant.h's functions of the same names; docs/quantization.md) ----
  // Code tables (`code`: 16 or 256 f32) are memory of the table's device, like every operand.
  void (*quantize_4bit)(Stream s, Quant4Type type, const float* x, int64_t n, int64_t blocksize,
                        uint8_t* packed, float* absmax) = nullptr;
  void (*dequantize_4bit)(Stream s, const float* code, const uint8_t* packed, const float* absmax,
                          int64_t n, int64_t blocksize, float* y) = nullptr;
  void (*quantize_blockwise_8bit)(Stream s, const float* code, const float* x, int64_t n,
                                  int64_t blocksize, uint8_t* q, float* absmax) = nullptr;
  void (*dequantize_blockwise_8bit)(Stream s, const float* code, const uint8_t* q,
                                    const float* absmax, int64_t n, int64_t blocksize,
                                    float* y) = nullptr;
  // Returns the outlier column count: with threshold > 0 a GPU table waits for it.
  int64_t (*quantize_int8_rows)(Stream s, const float* x, int64_t rows, int64_t cols,
                                float threshold, int8_t* q, float* absmax,
                                int64_t* outlier_cols) = nullptr;
  void (*gemm_i8_i32)(Stream s, const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                      int32_t* c) = nullptr;
  // Returns the outlier column count: with threshold > 0 a GPU table waits for it.
  int64_t (*int8_linear)(Stream s, const float* x, int64_t m, int64_t k, const int8_t* cb,
                         const float* scb, int64_t n, float threshold, float* y) = nullptr;
  // Fused 4-bit dequant-GEMM: y (m x n) = x (m x k) · dequant(W)ᵀ, W never materialized.
  void (*gemm_4bit)(Stream s, const float* code, const uint8_t* packed, const float* absmax,
                    int64_t blocksize, int64_t m, int64_t n, int64_t k, const void* x,
                    DType x_dtype, void* y, DType y_dtype) = nullptr;
  // y (m x k) = x (m x n) · dequant(W) for the same W (n x k): a 4-bit Linear's input gradient.
  void (*gemm_4bit_nn)(Stream s, const float* code, const uint8_t* packed, const float* absmax,
                       int64_t blocksize, int64_t m, int64_t n, int64_t k, const void* x,
                       DType x_dtype, void* y, DType y_dtype) = nullptr;
};

// The table of a device type. Throws kNotSupported naming the device type when this build has
// no kernels for it (hip and xpu today; cuda without BRAID_HAVE_CUDA).
const KernelTable& kernels_for(DeviceType type);
inline const KernelTable& kernels_for(Device device) {
  return kernels_for(device.type);
}
// True when this build has a table for the type (whether or not a device is present).
bool has_kernels(DeviceType type);

// The stream tensor ops and layers enqueue their kernels on for `device`: the calling thread's
// current stream (braid/core/stream.h; the device's default stream until a StreamGuard sets
// another), which is also the stream the caching allocator gives new blocks to.
inline Stream stream_for(Device device) {
  return current_stream(device);
}

// Throws kNotSupported "<kernel>: dtype <d> is not supported on <device>" unless
// table.supports(op, dtype): the one message every caller and table uses.
void require_support(const KernelTable& table, Op op, DType dtype);

}  // namespace braid::kernels
