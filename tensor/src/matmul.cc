// matmul: maps 2-d and batched 3-d products onto one strided GEMM call. A view whose last
// two dimensions are transposed (stride 1 on the row axis) is passed as Trans::kYes with its
// own leading dimension instead of being copied.
#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/tensor/ops.h"
#include "dispatch.h"

namespace braid {
namespace kc = kernels;

namespace {

struct Operand {
  Tensor t;  // the tensor actually passed (possibly a contiguous copy)
  kc::Trans trans = kc::Trans::kNo;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// Describes the last two dims of `t` (rows x cols) as a row-major matrix, op(M) = M or M^T.
Operand as_matrix(const Tensor& t) {
  const int nd = t.dim();
  const int64_t rows = t.size(nd - 2), cols = t.size(nd - 1);
  const int64_t rs = t.stride(nd - 2), cs = t.stride(nd - 1);
  Operand op{t};
  if (cs == 1 && (rs >= cols || rows <= 1)) {
    op.trans = kc::Trans::kNo;
    op.ld = std::max<int64_t>(rs, std::max<int64_t>(cols, 1));
  } else if (rs == 1 && (cs >= rows || cols <= 1)) {
    op.trans = kc::Trans::kYes;  // memory holds the transpose, row-major
    op.ld = std::max<int64_t>(cs, std::max<int64_t>(rows, 1));
  } else {
    op.t = t.contiguous();
    op.trans = kc::Trans::kNo;
    op.ld = std::max<int64_t>(cols, 1);
  }
  op.batch_stride = nd == 3 ? op.t.stride(0) : 0;
  return op;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  BRAID_CHECK(a.defined() && b.defined(), kInvalidArgument, "matmul: an operand is undefined");
  const auto& table = detail::table_for(kernels::Op::kGemm, a.dtype(), "matmul", a, &b);
  BRAID_CHECK(a.dtype() == b.dtype(), kInvalidArgument, "matmul: operands have dtypes ", a.dtype(),
              " and ", b.dtype(), "; convert one with .to(dtype)");
  BRAID_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3) &&
                  !(a.dim() == 2 && b.dim() == 3),
              kInvalidArgument, "matmul: shapes ", shape_str(a.shape()), " and ",
              shape_str(b.shape()), ": expected 2-d x 2-d, 3-d x 3-d or 3-d x 2-d");
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  BRAID_CHECK(b.size(-2) == k, kInvalidArgument, "matmul: shapes ", shape_str(a.shape()), " and ",
              shape_str(b.shape()), " cannot be multiplied (", k, " != ", b.size(-2), ")");
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  if (b.dim() == 3) {
    BRAID_CHECK(b.size(0) == batch, kInvalidArgument, "matmul: batch sizes ", batch, " and ",
                b.size(0), " differ");
  }
  const DType dt = a.dtype();
  Shape out_shape = a.dim() == 3 ? Shape{batch, m, n} : Shape{m, n};
  Tensor out = Tensor::empty(out_shape, dt, a.device());
  if (out.numel() == 0) return out;

  const Operand oa = as_matrix(a);
  const Operand ob = as_matrix(b);
  kc::GemmArgs g;
  g.trans_a = oa.trans;
  g.trans_b = ob.trans;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = oa.t.data_ptr();
  g.lda = oa.ld;
  g.b = ob.t.data_ptr();
  g.ldb = ob.ld;
  g.c = out.data_ptr();
  g.ldc = n;
  g.ab_dtype = dt;
  g.c_dtype = dt;
  g.batch = batch;
  g.stride_a = oa.batch_stride;
  g.stride_b = b.dim() == 3 ? ob.batch_stride : 0;
  g.stride_c = m * n;
  table.gemm(kernels::stream_for(a.device()), g);
  return out;
}

}  // namespace braid
