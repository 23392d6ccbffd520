// Tensor-level elementwise, reduction, softmax and concatenation ops: argument checks, then
// the kernel table of the operands' device (dispatch.h). Results live on that device.
#include "braid/tensor/ops.h"

#include <cmath>

#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "dispatch.h"

namespace braid {
namespace kc = kernels;
using detail::table_for;
using kernels::Op;
using kernels::stream_for;

namespace {

void require_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  BRAID_CHECK(a.dtype() == b.dtype(), kInvalidArgument, op, ": operands have dtypes ", a.dtype(),
              " and ", b.dtype(), "; convert one with .to(dtype) (braid does not promote)");
}

Tensor binary(kc::BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  const auto& k = table_for(Op::kBinary, a.dtype(), name, a, &b);
  require_same_dtype(a, b, name);
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  const Tensor ea = a.expand(shape);
  const Tensor eb = b.expand(shape);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  k.binary(stream_for(a.device()), op, a.dtype(), static_cast<int>(shape.size()), shape.data(),
           ea.data_ptr(), ea.strides().data(), eb.data_ptr(), eb.strides().data(), out.data_ptr());
  return out;
}

Tensor unary(kc::UnaryOp op, const Tensor& x, const char* name) {
  const auto& k = table_for(Op::kUnary, x.dtype(), name, x);
  const Tensor in = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  k.unary(stream_for(x.device()), op, x.dtype(), in.numel(), in.data_ptr(), out.data_ptr());
  return out;
}

Tensor scalar_like(const Tensor& t, Scalar v) {
  return Tensor::full({}, v, t.dtype(), t.device());
}

// Reduces dimension `dim` (or everything when dim is nullopt).
Tensor reduce(kc::ReduceOp op, const Tensor& x, std::optional<int> dim, bool keepdim,
              std::optional<DType> out_dtype, const char* name) {
  const auto& k = table_for(Op::kReduce, x.dtype(), name, x);
  const Tensor in = x.contiguous();
  const DType odt = out_dtype.value_or(x.dtype());
  const Shape& s = in.shape();
  int64_t outer = 1, len = in.numel(), inner = 1;
  Shape out_shape;
  if (dim) {
    const int d = *dim < 0 ? *dim + in.dim() : *dim;
    BRAID_CHECK(d >= 0 && d < in.dim(), kOutOfRange, name, ": dimension ", *dim,
                " is out of range for a ", in.dim(), "-d tensor");
    outer = 1;
    for (int i = 0; i < d; ++i) outer *= s[i];
    len = s[d];
    inner = 1;
    for (int i = d + 1; i < in.dim(); ++i) inner *= s[i];
    out_shape = s;
    if (keepdim) {
      out_shape[d] = 1;
    } else {
      out_shape.erase(out_shape.begin() + d);
    }
  }
  Tensor out = Tensor::empty(out_shape, odt, x.device());
  k.reduce(stream_for(x.device()), op, in.dtype(), outer, len, inner, in.data_ptr(), odt,
           out.data_ptr());
  return out;
}

Tensor softmax_impl(const Tensor& x, int dim, bool log, const char* name) {
  const auto& k = table_for(Op::kSoftmax, x.dtype(), name, x);
  const int nd = x.dim();
  BRAID_CHECK(nd > 0, kInvalidArgument, name, ": needs at least one dimension");
  const int d = dim < 0 ? dim + nd : dim;
  BRAID_CHECK(d >= 0 && d < nd, kOutOfRange, name, ": dimension ", dim, " is out of range for a ",
              nd, "-d tensor");
  // Move the softmax dimension last, compute over rows, move it back.
  const Tensor moved = (d == nd - 1 ? x : x.transpose(d, nd - 1)).contiguous();
  Tensor out = Tensor::empty(moved.shape(), x.dtype(), x.device());
  const int64_t len = moved.size(-1);
  const int64_t rows = len == 0 ? 0 : moved.numel() / len;
  k.softmax(stream_for(x.device()), x.dtype(), rows, len, moved.data_ptr(), out.data_ptr(), log);
  return d == nd - 1 ? out : out.transpose(d, nd - 1).contiguous();
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(kc::BinaryOp::kAdd, a, b, "add");
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(kc::BinaryOp::kSub, a, b, "sub");
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(kc::BinaryOp::kMul, a, b, "mul");
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(kc::BinaryOp::kDiv, a, b, "div");
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(kc::BinaryOp::kMax, a, b, "maximum");
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(kc::BinaryOp::kMin, a, b, "minimum");
}
Tensor add(const Tensor& a, Scalar b) {
  return add(a, scalar_like(a, b));
}
Tensor mul(const Tensor& a, Scalar b) {
  return mul(a, scalar_like(a, b));
}

Tensor axpby(double alpha, const Tensor& x, double beta, const Tensor& y) {
  const auto& k = table_for(Op::kAxpby, x.dtype(), "axpby", x, &y);
  require_same_dtype(x, y, "axpby");
  BRAID_CHECK(x.shape() == y.shape(), kInvalidArgument, "axpby: shapes ", shape_str(x.shape()),
              " and ", shape_str(y.shape()), " differ (expected equal shapes)");
  const Tensor cx = x.contiguous();
  const Tensor cy = y.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  k.axpby(stream_for(x.device()), x.dtype(), x.numel(), alpha, cx.data_ptr(), beta, cy.data_ptr(),
          out.data_ptr());
  return out;
}

void axpby_(double alpha, const Tensor& x, double beta, Tensor& y) {
  const auto& k = table_for(Op::kAxpby, x.dtype(), "axpby_", x, &y);
  require_same_dtype(x, y, "axpby_");
  BRAID_CHECK(x.shape() == y.shape(), kInvalidArgument, "axpby_: shapes ", shape_str(x.shape()),
              " and ", shape_str(y.shape()), " differ (expected equal shapes)");
  BRAID_CHECK(y.is_contiguous(), kInvalidArgument, "axpby_: the destination must be contiguous");
  const Tensor cx = x.contiguous();
  k.axpby(stream_for(x.device()), x.dtype(), x.numel(), alpha, cx.data_ptr(), beta, y.data_ptr(),
          y.data_ptr());
}

Tensor scale(const Tensor& x, double alpha) {
  const auto& k = table_for(Op::kScale, x.dtype(), "scale", x);
  const Tensor cx = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  k.scale(stream_for(x.device()), x.dtype(), x.numel(), alpha, cx.data_ptr(), out.data_ptr());
  return out;
}

Tensor exp(const Tensor& x) {
  return unary(kc::UnaryOp::kExp, x, "exp");
}
Tensor log(const Tensor& x) {
  return unary(kc::UnaryOp::kLog, x, "log");
}
Tensor tanh(const Tensor& x) {
  return unary(kc::UnaryOp::kTanh, x, "tanh");
}
Tensor sigmoid(const Tensor& x) {
  return unary(kc::UnaryOp::kSigmoid, x, "sigmoid");
}
Tensor relu(const Tensor& x) {
  return unary(kc::UnaryOp::kRelu, x, "relu");
}
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  return unary(approximate == GeluApproximate::kTanh ? kc::UnaryOp::kGeluTanh : kc::UnaryOp::kGelu,
               x, "gelu");
}
Tensor silu(const Tensor& x) {
  return unary(kc::UnaryOp::kSilu, x, "silu");
}
Tensor sqrt(const Tensor& x) {
  return unary(kc::UnaryOp::kSqrt, x, "sqrt");
}
Tensor rsqrt(const Tensor& x) {
  return unary(kc::UnaryOp::kRsqrt, x, "rsqrt");
}
Tensor neg(const Tensor& x) {
  return unary(kc::UnaryOp::kNeg, x, "neg");
}
Tensor abs(const Tensor& x) {
  return unary(kc::UnaryOp::kAbs, x, "abs");
}

Tensor sum(const Tensor& x, std::optional<DType> out_dtype) {
  return reduce(kc::ReduceOp::kSum, x, std::nullopt, false, out_dtype, "sum");
}
Tensor mean(const Tensor& x, std::optional<DType> out_dtype) {
  return reduce(kc::ReduceOp::kMean, x, std::nullopt, false, out_dtype, "mean");
}
Tensor amax(const Tensor& x) {
  return reduce(kc::ReduceOp::kMax, x, std::nullopt, false, std::nullopt, "amax");
}
Tensor amin(const Tensor& x) {
  return reduce(kc::ReduceOp::kMin, x, std::nullopt, false, std::nullopt, "amin");
}
Tensor norm(const Tensor& x, std::optional<DType> out_dtype) {
  return reduce(kc::ReduceOp::kNormL2, x, std::nullopt, false, out_dtype, "norm");
}
Tensor sum(const Tensor& x, int dim, bool keepdim, std::optional<DType> out_dtype) {
  return reduce(kc::ReduceOp::kSum, x, dim, keepdim, out_dtype, "sum");
}
Tensor mean(const Tensor& x, int dim, bool keepdim, std::optional<DType> out_dtype) {
  return reduce(kc::ReduceOp::kMean, x, dim, keepdim, out_dtype, "mean");
}
Tensor amax(const Tensor& x, int dim, bool keepdim) {
  return reduce(kc::ReduceOp::kMax, x, dim, keepdim, std::nullopt, "amax");
}
Tensor amin(const Tensor& x, int dim, bool keepdim) {
  return reduce(kc::ReduceOp::kMin, x, dim, keepdim, std::nullopt, "amin");
}

Tensor softmax(const Tensor& x, int dim) {
  return softmax_impl(x, dim, false, "softmax");
}
Tensor log_softmax(const Tensor& x, int dim) {
  return softmax_impl(x, dim, true, "log_softmax");
}

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  BRAID_CHECK(!tensors.empty(), kInvalidArgument, "cat: expected at least one tensor");
  const Tensor& first = tensors.front();
  BRAID_CHECK(first.defined(), kInvalidArgument, "cat: tensor 0 is undefined");
  const int nd = first.dim();
  const int d = dim < 0 ? dim + nd : dim;
  BRAID_CHECK(d >= 0 && d < nd, kOutOfRange, "cat: dimension ", dim, " is out of range for ", nd,
              "-d tensors");
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    BRAID_CHECK(t.defined() && t.dim() == nd, kInvalidArgument, "cat: tensor ", i,
                " must be a defined ", nd, "-d tensor");
    BRAID_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), kInvalidArgument,
                "cat: tensor ", i, " is ", t.dtype(), " on ", t.device(), ", expected ",
                first.dtype(), " on ", first.device());
    for (int k = 0; k < nd; ++k) {
      BRAID_CHECK(k == d || t.size(k) == first.size(k), kInvalidArgument, "cat: tensor ", i,
                  " has shape ", shape_str(t.shape()), ", expected ", shape_str(first.shape()),
                  " except in dimension ", d);
    }
    shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    out.narrow(d, at, t.size(d)).copy_(t);
    at += t.size(d);
  }
  return out;
}

bool equal(const Tensor& a, const Tensor& b, bool equal_nan) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> va = a.to_vector();
  const std::vector<double> vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) {
    if (va[i] == vb[i]) continue;
    if (equal_nan && std::isnan(va[i]) && std::isnan(vb[i])) continue;
    return false;
  }
  return true;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  BRAID_CHECK(a.shape() == b.shape(), kInvalidArgument, "allclose: shapes ", shape_str(a.shape()),
              " and ", shape_str(b.shape()), " differ");
  const std::vector<double> va = a.to_vector();
  const std::vector<double> vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (equal_nan && std::isnan(va[i]) && std::isnan(vb[i])) continue;
      return false;
    }
    if (va[i] == vb[i]) continue;  // equal infinities
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) return false;
  }
  return true;
}

}  // namespace braid
