// SPDX-License-Identifier: Apache-2.0
// Tensor-level operations. Each checks its arguments (shapes, dtypes, devices), then calls
// the device's kernel (kernels/cpu.h on cpu). Results are new contiguous tensors.
//
// Dtypes are never promoted implicitly: both operands of a binary op must have the same
// dtype (convert with .to(dtype) first). This keeps the precision a caller computes in
// explicit, which mixed-precision training depends on. Scalars take the tensor's dtype.
#pragma once

#include <optional>
#include <vector>

#include "braid/tensor/tensor.h"

namespace braid {

// ---- elementwise, with numpy broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN propagates, as torch.maximum
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);

inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}

// alpha * x + beta * y; x and y of the same shape and dtype.
Tensor axpby(double alpha, const Tensor& x, double beta, const Tensor& y);
// alpha * x
Tensor scale(const Tensor& x, double alpha);
// In place: y = alpha * x + beta * y (y contiguous).
void axpby_(double alpha, const Tensor& x, double beta, Tensor& y);

Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximate { kNone, kTanh };
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::kNone);
Tensor silu(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);

// ---- reductions (fixed accumulation order: the same bits on every run) ----
// Whole tensor to a 0-d tensor; out_dtype defaults to the input dtype.
Tensor sum(const Tensor& x, std::optional<DType> out_dtype = {});
Tensor mean(const Tensor& x, std::optional<DType> out_dtype = {});
Tensor amax(const Tensor& x);
Tensor amin(const Tensor& x);
Tensor norm(const Tensor& x, std::optional<DType> out_dtype = {});  // L2
// Along one dimension.
Tensor sum(const Tensor& x, int dim, bool keepdim = false, std::optional<DType> out_dtype = {});
Tensor mean(const Tensor& x, int dim, bool keepdim = false, std::optional<DType> out_dtype = {});
Tensor amax(const Tensor& x, int dim, bool keepdim = false);
Tensor amin(const Tensor& x, int dim, bool keepdim = false);

Tensor softmax(const Tensor& x, int dim = -1);
Tensor log_softmax(const Tensor& x, int dim = -1);

// ---- matrix products ----
// a [..., m, k] x b [..., k, n]: 2-d x 2-d, batched 3-d x 3-d (equal batch), or 3-d x 2-d.
// Transposed views are used without copying. f16 / bf16 accumulate in f32.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- structure ----
// Concatenates along dim; all tensors share dtype, device and every other dimension.
Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);

// ---- comparison (tests, checks) ----
// Same shape and dtype and every element equal (NaN equal to NaN when equal_nan).
bool equal(const Tensor& a, const Tensor& b, bool equal_nan = false);
// |a - b| <= atol + rtol * |b| elementwise, as torch.allclose; shapes must match.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);

}  // namespace braid
