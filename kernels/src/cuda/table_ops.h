// The members of the cuda kernel table (braid/kernels/table.h), one function per member with
// the member's signature, defined by family in cast_copy.cu, elementwise.cu, reduce_softmax.cu,
// nn_layers.cu, cross_entropy.cu, attention.cu and quant.cu and gathered by table_cuda.cu. Each
// computes what the cpu function of the same name documents (cpu.h), checks its arguments with the
// cpu's messages before enqueueing anything, launches nothing for empty work, and enqueues on the
// Stream's cudaStream_t without waiting. docs/gpu.md ("Kernel table on cuda") lists what each one
// guarantees against the cpu reference.
#pragma once

#include <cstdint>

#include "braid/core/device_runtime.h"
#include "braid/core/dtype.h"
#include "braid/kernels/types.h"

namespace braid::kernels::cuda::table_ops {

// cast_copy.cu
void cast(Stream s, const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
          CastMode mode);
void fill(Stream s, void* dst, DType dtype, int64_t n, double value);
void copy_strided(Stream s, const void* src, int64_t elem_size, int ndim, const int64_t* shape,
                  const int64_t* src_strides, void* dst);
void copy_to_strided(Stream s, const void* src, int64_t elem_size, int ndim, const int64_t* shape,
                     void* dst, const int64_t* dst_strides);

// elementwise.cu
void binary(Stream s, BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a,
            const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out);
void axpby(Stream s, DType dtype, int64_t n, double alpha, const void* x, double beta,
           const void* y, void* out);
void scale(Stream s, DType dtype, int64_t n, double alpha, const void* x, void* out);
void unary(Stream s, UnaryOp op, DType dtype, int64_t n, const void* x, void* out);
void activation_backward(Stream s, ActivationGrad op, DType dtype, int64_t n, const void* x,
                         const void* dy, void* dx);
void masked_scale(Stream s, DType dtype, int64_t n, const void* x, const uint8_t* keep,
                  double scale, void* out);

// reduce_softmax.cu
void reduce(Stream s, ReduceOp op, DType dtype, int64_t outer, int64_t len, int64_t inner,
            const void* x, DType out_dtype, void* out);
void softmax(Stream s, DType dtype, int64_t rows, int64_t len, const void* x, void* out, bool log);

// nn_layers.cu
void layer_norm_forward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                        const void* w, const void* b, double eps, void* y, void* mean, void* rstd);
void layer_norm_backward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                         const void* w, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dw, void* db);
void rms_norm_forward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                      double eps, void* y, void* rstd);
void rms_norm_backward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                       const void* rstd, const void* dy, void* dx, void* dw);
void embedding_forward(Stream s, DType dtype, int64_t num, int64_t dim, const void* weight,
                       DType id_dtype, const void* ids, int64_t n, void* out);
void embedding_backward(Stream s, DType dtype, int64_t num, int64_t dim, DType id_dtype,
                        const void* ids, int64_t n, const void* dy, void* dweight);

// cross_entropy.cu
void cross_entropy_forward(Stream s, DType logits_dtype, int64_t rows, int64_t classes,
                           const void* logits, DType target_dtype, const void* targets,
                           int64_t ignore_index, double label_smoothing, void* loss, void* lse);
void cross_entropy_backward(Stream s, DType logits_dtype, int64_t rows, int64_t classes,
                            const void* logits, DType target_dtype, const void* targets,
                            int64_t ignore_index, double label_smoothing, const void* lse,
                            const void* scale, void* dlogits);

// attention.cu
void causal_attention_forward(Stream s, const AttentionArgs& args, const void* qkv, void* out);
void causal_attention_backward(Stream s, const AttentionArgs& args, const void* qkv,
                               const void* dout, void* dqkv);

// quant.cu
void quantize_4bit(Stream s, Quant4Type type, const float* x, int64_t n, int64_t blocksize,
                   uint8_t* packed, float* absmax);
void dequantize_4bit(Stream s, const float* code, const uint8_t* packed, const float* absmax,
                     int64_t n, int64_t blocksize, float* y);
void quantize_blockwise_8bit(Stream s, const float* code, const float* x, int64_t n,
                             int64_t blocksize, uint8_t* q, float* absmax);
void dequantize_blockwise_8bit(Stream s, const float* code, const uint8_t* q, const float* absmax,
                               int64_t n, int64_t blocksize, float* y);
int64_t quantize_int8_rows(Stream s, const float* x, int64_t rows, int64_t cols, float threshold,
                           int8_t* q, float* absmax, int64_t* outlier_cols);
void gemm_i8_i32(Stream s, const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                 int32_t* c);
int64_t int8_linear(Stream s, const float* x, int64_t m, int64_t k, const int8_t* cb,
                    const float* scb, int64_t n, float threshold, float* y);
void gemm_4bit(Stream s, const float* code, const uint8_t* packed, const float* absmax,
               int64_t blocksize, int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype,
               void* y, DType y_dtype);
void gemm_4bit_nn(Stream s, const float* code, const uint8_t* packed, const float* absmax,
                  int64_t blocksize, int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype,
                  void* y, DType y_dtype);

}  // namespace braid::kernels::cuda::table_ops
