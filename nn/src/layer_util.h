// Argument checks and dtype rules shared by the layers and losses of layers.h / loss.h
// (linear.cc, embedding.cc, norm.cc, activation.cc, dropout.cc, loss.cc). Internal to nn/.
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/tensor/tensor.h"

namespace braid::nn::detail {

inline bool is_float_dtype(DType dt) {
  return dt == DType::kF64 || dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16;
}

// "<layer>: <what> must be a floating tensor (f64, f32, f16 or bf16), got i64".
inline void check_float_input(const char* layer, const char* what, const Tensor& x) {
  BRAID_CHECK(x.defined(), kInvalidArgument, layer, ": ", what, " is undefined");
  BRAID_CHECK(is_float_dtype(x.dtype()), kInvalidArgument, layer, ": ", what,
              " must be a floating tensor (f64, f32, f16 or bf16), got dtype ", x.dtype());
}

// x is [..., expected]: "<layer>: input of shape [2, 5] has last dimension 5; expected <name> 4".
inline void check_last_dim(const char* layer, const Tensor& x, int64_t expected, const char* name) {
  BRAID_CHECK(x.dim() >= 1 && x.size(-1) == expected, kInvalidArgument, layer, ": input of shape ",
              shape_str(x.shape()), " has last dimension ", x.dim() >= 1 ? x.size(-1) : 0,
              "; expected ", name, " ", expected);
}

// The gradient of an output must have the output's shape.
inline void check_grad_shape(const char* layer, const Tensor& g, const Shape& expected) {
  BRAID_CHECK(g.defined(), kInvalidArgument, layer, ": backward got an undefined gradient");
  BRAID_CHECK(g.shape() == expected, kInvalidArgument, layer, ": gradient of shape ",
              shape_str(g.shape()), " does not match the output's shape ", shape_str(expected));
}

// Rows of a [..., d] tensor.
inline int64_t leading_rows(const Tensor& x) {
  const int64_t d = x.size(-1);
  return d == 0 ? 0 : x.numel() / d;
}

// Norms, softmax and losses compute in f64 for f64 data, else in f32.
inline DType f32_or_f64(DType dt) {
  return dt == DType::kF64 ? DType::kF64 : DType::kF32;
}

// Parameter gradients computed from 16-bit data are accumulated in f32 (f64 for f64).
inline DType grad_accum_dtype(DType compute) {
  return f32_or_f64(compute);
}

// The kernels of `x`'s device (docs/kernels.md, "Kernel tables") and the stream they go on:
// every layer reaches its kernels through this, so a layer runs wherever its input lives.
// Refuses, naming the layer, a device without the kernel for `dtype`.
struct DeviceKernels {
  const kernels::KernelTable& k;
  Stream s;
};
inline void require_kernel(const char* layer, const kernels::KernelTable& k, Device device,
                           kernels::Op op, DType dtype) {
  BRAID_CHECK(k.supports(op, dtype), kNotSupported, layer, ": kernel ", kernels::op_name(op),
              " does not support dtype ", dtype, " on ", device);
}
inline DeviceKernels kernels_of(const char* layer, const Tensor& x, kernels::Op op, DType dtype) {
  const kernels::KernelTable& k = kernels::kernels_for(x.device());
  require_kernel(layer, k, x.device(), op, dtype);
  return DeviceKernels{k, kernels::stream_for(x.device())};
}

}  // namespace braid::nn::detail
