// Elementwise kernels of the cuda table: binary (n-d with broadcast strides), axpby, scale,
// unary, activation_backward and masked_scale. The per-element code is elementwise_math.h's
// (shared with the host test); Note [Elementwise numerics on cuda] there says which results
// have the cpu's bits (binary, axpby, scale, masked_scale) and which may differ by one ulp of
// the output format (unary, activation_backward: double libm on each side). One thread per
// element in grid-stride loops with 64-bit indices.
#include <cstdint>

#include "braid/core/error.h"
#include "cast_math.h"
#include "elementwise_math.h"
#include "launch.h"
#include "table_ops.h"

namespace braid::kernels::cuda::table_ops {
namespace {

using detail::DTypeTag;
using math::Bits;
using math::Compute;

// ---- binary ------------------------------------------------------------------------------------

// rank <= 1 after coalescing: one strided run (strides 0 or any).
template <BinaryOp kOp, DType D>
__global__ void binary_run_kernel(const Bits<D>* a, int64_t sa, const Bits<D>* b, int64_t sb,
                                  Bits<D>* out, int64_t n) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) {
    out[i] = math::binary_element<kOp, D>(a[i * sa], b[i * sb]);
  }
}

template <BinaryOp kOp, DType D>
__global__ void binary_nd_kernel(const Bits<D>* a, const Bits<D>* b, Bits<D>* out,
                                 detail::NdLayout l) {
  for (int64_t i = detail::global_thread(); i < l.count; i += detail::grid_threads()) {
    int64_t oa, ob;
    detail::nd_offsets(l, i, oa, ob);
    out[i] = math::binary_element<kOp, D>(a[oa], b[ob]);
  }
}

template <BinaryOp kOp, DType D>
void launch_binary(const void* a, const void* b, void* out, const detail::NdLayout& l,
                   cudaStream_t st) {
  const auto* pa = static_cast<const Bits<D>*>(a);
  const auto* pb = static_cast<const Bits<D>*>(b);
  auto* po = static_cast<Bits<D>*>(out);
  const unsigned blocks = detail::blocks_for(l.count);
  if (l.rank <= 1) {
    const int64_t sa = l.rank ? l.stride[0][0] : 0, sb = l.rank ? l.stride[1][0] : 0;
    binary_run_kernel<kOp, D><<<blocks, detail::kThreads, 0, st>>>(pa, sa, pb, sb, po, l.count);
  } else {
    binary_nd_kernel<kOp, D><<<blocks, detail::kThreads, 0, st>>>(pa, pb, po, l);
  }
}

template <DType D>
void binary_typed(BinaryOp op, const void* a, const void* b, void* out, const detail::NdLayout& l,
                  cudaStream_t st) {
  switch (op) {
    case BinaryOp::kAdd:
      return launch_binary<BinaryOp::kAdd, D>(a, b, out, l, st);
    case BinaryOp::kSub:
      return launch_binary<BinaryOp::kSub, D>(a, b, out, l, st);
    case BinaryOp::kMul:
      return launch_binary<BinaryOp::kMul, D>(a, b, out, l, st);
    case BinaryOp::kDiv:
      return launch_binary<BinaryOp::kDiv, D>(a, b, out, l, st);
    case BinaryOp::kMax:
      return launch_binary<BinaryOp::kMax, D>(a, b, out, l, st);
    case BinaryOp::kMin:
      return launch_binary<BinaryOp::kMin, D>(a, b, out, l, st);
  }
}

// ---- axpby, scale, masked_scale ----------------------------------------------------------------

// Two products and one sum, each rounded (-fmad=false keeps them apart), as the cpu.
template <DType D>
__global__ void axpby_kernel(int64_t n, Compute<D> alpha, const Bits<D>* x, Compute<D> beta,
                             const Bits<D>* y, Bits<D>* out) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) {
    const Compute<D> ax = alpha * math::load<D>(x, i);
    const Compute<D> by = beta * math::load<D>(y, i);
    math::store<D>(out, i, ax + by);
  }
}

template <DType D>
__global__ void scale_kernel(int64_t n, Compute<D> alpha, const Bits<D>* x, Bits<D>* out) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) {
    math::store<D>(out, i, alpha * math::load<D>(x, i));
  }
}

template <DType D>
__global__ void masked_scale_kernel(int64_t n, const Bits<D>* x, const uint8_t* keep,
                                    Compute<D> scale, Bits<D>* out) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) {
    math::store<D>(out, i, keep[i] != 0 ? math::load<D>(x, i) * scale : Compute<D>(0));
  }
}

// ---- unary, activation_backward ----------------------------------------------------------------

template <UnaryOp kOp, DType D>
__global__ void unary_kernel(int64_t n, const Bits<D>* x, Bits<D>* out) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) {
    out[i] = math::unary_element<kOp, D>(x[i]);
  }
}

template <DType D>
__global__ void act_grad_kernel(ActivationGrad op, int64_t n, const Bits<D>* x, const Bits<D>* dy,
                                Bits<D>* dx) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) {
    dx[i] = math::act_grad_element<D>(op, x[i], dy[i]);
  }
}

template <DType D, typename Fn>
void for_unary_op(UnaryOp op, Fn&& fn) {
  switch (op) {
#define BRAID_UNARY_CASE(e) \
  case UnaryOp::e:          \
    return fn(std::integral_constant<UnaryOp, UnaryOp::e>{});
    BRAID_UNARY_CASE(kExp)
    BRAID_UNARY_CASE(kLog)
    BRAID_UNARY_CASE(kTanh)
    BRAID_UNARY_CASE(kSigmoid)
    BRAID_UNARY_CASE(kRelu)
    BRAID_UNARY_CASE(kGelu)
    BRAID_UNARY_CASE(kGeluTanh)
    BRAID_UNARY_CASE(kSilu)
    BRAID_UNARY_CASE(kSqrt)
    BRAID_UNARY_CASE(kRsqrt)
    BRAID_UNARY_CASE(kNeg)
    BRAID_UNARY_CASE(kAbs)
#undef BRAID_UNARY_CASE
  }
}

const char* act_name(ActivationGrad op) {
  switch (op) {
    case ActivationGrad::kRelu:
      return "relu";
    case ActivationGrad::kGelu:
      return "gelu";
    case ActivationGrad::kGeluTanh:
      return "gelu_tanh";
    case ActivationGrad::kSilu:
      return "silu";
  }
  return "?";
}

bool is_float(DType d) {
  return d == DType::kF64 || d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

void check_float_count(const char* kernel, DType dtype, int64_t n) {
  BRAID_CHECK(is_float(dtype), kNotSupported, kernel, ": dtype ", dtype,
              " is not supported (expected f64, f32, f16 or bf16)");
  BRAID_CHECK(n >= 0, kInvalidArgument, kernel, ": element count ", n, " must be >= 0");
}

}  // namespace

void binary(Stream s, BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a,
            const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out) {
  const bool ok = is_float(dtype) || dtype == DType::kI64 || dtype == DType::kI32;
  BRAID_CHECK(ok, kNotSupported, "binary: dtype ", dtype,
              " is not supported (expected f64, f32, f16, bf16, i64 or i32)");
  const int op_index = static_cast<int>(op);
  BRAID_CHECK(op_index >= 0 && op_index <= static_cast<int>(BinaryOp::kMin), kInvalidArgument,
              "binary: op value ", op_index, " is not a BinaryOp");
  BRAID_CHECK(ndim >= 0, kInvalidArgument, "binary: ndim ", ndim, " must be >= 0");
  BRAID_CHECK(ndim == 0 || b_strides, kInvalidArgument, "binary: ndim ", ndim,
              " with a null shape or strides pointer");
  const detail::NdLayout l = detail::coalesce("binary", ndim, shape, a_strides, b_strides);
  if (l.count == 0) return;
  BRAID_CHECK(a && b && out, kInvalidArgument, "binary: null ",
              !a   ? "a"
              : !b ? "b"
                   : "out",
              " pointer for a non-empty ", dtype, " operation");
  const cudaStream_t st = detail::stream_of(s);
  switch (dtype) {
    case DType::kI64:
      binary_typed<DType::kI64>(op, a, b, out, l, st);
      break;
    case DType::kI32:
      binary_typed<DType::kI32>(op, a, b, out, l, st);
      break;
    default:
      detail::visit_float(
          dtype, [&](auto tag) { binary_typed<decltype(tag)::value>(op, a, b, out, l, st); });
  }
  detail::check_launch("binary");
}

void axpby(Stream s, DType dtype, int64_t n, double alpha, const void* x, double beta,
           const void* y, void* out) {
  check_float_count("axpby", dtype, n);
  if (n == 0) return;
  if (beta == 0.0) return scale(s, dtype, n, alpha, x, out);  // y is not read, as BLAS
  BRAID_CHECK(x && y && out, kInvalidArgument, "axpby: null ",
              !x   ? "x"
              : !y ? "y"
                   : "out",
              " pointer for ", n, " elements of ", dtype);
  detail::visit_float(dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    axpby_kernel<D><<<detail::blocks_for(n), detail::kThreads, 0, detail::stream_of(s)>>>(
        n, static_cast<Compute<D>>(alpha), static_cast<const Bits<D>*>(x),
        static_cast<Compute<D>>(beta), static_cast<const Bits<D>*>(y), static_cast<Bits<D>*>(out));
  });
  detail::check_launch("axpby");
}

void scale(Stream s, DType dtype, int64_t n, double alpha, const void* x, void* out) {
  check_float_count("scale", dtype, n);
  if (n == 0) return;
  BRAID_CHECK(x && out, kInvalidArgument, "scale: null ", !x ? "x" : "out", " pointer for ", n,
              " elements of ", dtype);
  detail::visit_float(dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    scale_kernel<D><<<detail::blocks_for(n), detail::kThreads, 0, detail::stream_of(s)>>>(
        n, static_cast<Compute<D>>(alpha), static_cast<const Bits<D>*>(x),
        static_cast<Bits<D>*>(out));
  });
  detail::check_launch("scale");
}

void unary(Stream s, UnaryOp op, DType dtype, int64_t n, const void* x, void* out) {
  BRAID_CHECK(is_float(dtype), kNotSupported, "unary: dtype ", dtype,
              " is not supported (expected f64, f32, f16 or bf16)");
  const int op_index = static_cast<int>(op);
  BRAID_CHECK(op_index >= 0 && op_index <= static_cast<int>(UnaryOp::kAbs), kInvalidArgument,
              "unary: op value ", op_index, " is not a UnaryOp");
  BRAID_CHECK(n >= 0, kInvalidArgument, "unary: element count ", n, " must be >= 0");
  if (n == 0) return;
  BRAID_CHECK(x && out, kInvalidArgument, "unary: null ", !x ? "x" : "out", " pointer for ", n,
              " elements of ", dtype);
  const cudaStream_t st = detail::stream_of(s);
  detail::visit_float(dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    for_unary_op<D>(op, [&](auto op_tag) {
      unary_kernel<decltype(op_tag)::value, D><<<detail::blocks_for(n), detail::kThreads, 0, st>>>(
          n, static_cast<const Bits<D>*>(x), static_cast<Bits<D>*>(out));
    });
  });
  detail::check_launch("unary");
}

void activation_backward(Stream s, ActivationGrad op, DType dtype, int64_t n, const void* x,
                         const void* dy, void* dx) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "activation_backward(", act_name(op), "): count ", n,
              " must not be negative");
  BRAID_CHECK(is_float(dtype), kNotSupported, "activation_backward(", act_name(op), "): dtype ",
              dtype, " is not supported; expected f64, f32, f16 or bf16");
  BRAID_CHECK(static_cast<int>(op) <= static_cast<int>(ActivationGrad::kSilu), kInvalidArgument,
              "activation_backward: op value ", static_cast<int>(op), " is not an ActivationGrad");
  if (n == 0) return;
  BRAID_CHECK(x != nullptr && dy != nullptr && dx != nullptr, kInvalidArgument,
              "activation_backward(", act_name(op), "): null pointer for ", n, " elements");
  detail::visit_float(dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    act_grad_kernel<D><<<detail::blocks_for(n), detail::kThreads, 0, detail::stream_of(s)>>>(
        op, n, static_cast<const Bits<D>*>(x), static_cast<const Bits<D>*>(dy),
        static_cast<Bits<D>*>(dx));
  });
  detail::check_launch("activation_backward");
}

void masked_scale(Stream s, DType dtype, int64_t n, const void* x, const uint8_t* keep,
                  double scale, void* out) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "masked_scale: count ", n, " must not be negative");
  BRAID_CHECK(is_float(dtype), kNotSupported, "masked_scale: dtype ", dtype,
              " is not supported; expected f64, f32, f16 or bf16");
  if (n == 0) return;
  BRAID_CHECK(x != nullptr && keep != nullptr && out != nullptr, kInvalidArgument,
              "masked_scale: null pointer for ", n, " elements");
  detail::visit_float(dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    masked_scale_kernel<D><<<detail::blocks_for(n), detail::kThreads, 0, detail::stream_of(s)>>>(
        n, static_cast<const Bits<D>*>(x), keep, static_cast<Compute<D>>(scale),
        static_cast<Bits<D>*>(out));
  });
  detail::check_launch("masked_scale");
}

}  // namespace braid::kernels::cuda::table_ops
