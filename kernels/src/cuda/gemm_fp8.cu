// GEMM on the GPU through cuBLASLt (braid/kernels/cuda.h): gemm_fp8 (fp8 operands with
// per-tensor device scales) and gemm (f32 / tf32 / f16 / bf16 / f64). Both keep cpu::gemm's
// row-major interface and share one path into cublasLtMatmul.
//
// Note [Row-major GEMM on cuBLASLt]. cuBLASLt is column-major. A row-major R x C matrix with
// leading dimension ld is, read column-major, its C x R transpose with the same ld. So the
// row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: cuBLASLt's
// first operand is our B (transposed when trans_b is), its second our A, its M x N is our n x m,
// and ldc stays ldc. cuBLASLt's fp8 kernels want "TN" (first operand transposed, second not),
// which in row-major terms is trans_a = kNo, trans_b = kYes: both operands contiguous along k.
// gemm_fp8 transposes any other operand into a temporary first (transpose_bytes).
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <cublasLt.h>

#include "braid/core/error.h"
#include "braid/kernels/cuda.h"
#include "runtime.h"
#include "vendor.h"

namespace braid::kernels::cuda {
namespace {

using cpu::Trans;

// ---- cuBLASLt status checks -----------------------------------------------------------------

ErrorKind cublas_error_kind(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return ErrorKind::kOutOfMemory;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_INITIALIZED:  // no device, no driver
      return ErrorKind::kNotSupported;
    case CUBLAS_STATUS_INVALID_VALUE:
      return ErrorKind::kInvalidArgument;
    default:
      return ErrorKind::kInternal;
  }
}

void check_cublas(cublasStatus_t st, const char* op, const char* call,
                  std::source_location where = std::source_location::current()) {
  if (st != CUBLAS_STATUS_SUCCESS) [[unlikely]] {
    ::braid::detail::throw_error(
        cublas_error_kind(st),
        ::braid::detail::concat(op, ": ", call, " failed: ", cublasLtGetStatusName(st), " (",
                                cublasLtGetStatusString(st), ")"),
        where);
  }
}

#define BRAID_CUBLAS_CHECK(op, ...) check_cublas((__VA_ARGS__), op, #__VA_ARGS__)

// One cuBLASLt handle per device, created on first use and never destroyed: destroying it
// from a static destructor may run after the CUDA runtime has been torn down.
cublasLtHandle_t lt_handle(const char* op, int device) {
  static std::mutex mu;
  static std::vector<cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= handles.size()) handles.resize(device + 1, nullptr);
  if (!handles[device]) BRAID_CUBLAS_CHECK(op, cublasLtCreate(&handles[device]));
  return handles[device];
}

// RAII owners of the cuBLASLt descriptors (destroy failures are ignored: destructors do not
// throw, and a descriptor is host memory).
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) (void)cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() {
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
  }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() {
    if (d) (void)cublasLtMatmulPreferenceDestroy(d);
  }
};

// ---- one cublasLtMatmul in column-major terms -------------------------------------------------

struct LtOperand {
  const void* ptr;
  cudaDataType_t type;
  cublasOperation_t op;
  uint64_t rows, cols;  // of the stored column-major matrix
  int64_t ld;
  int64_t batch_stride;  // elements
};

struct LtMatmul {
  LtOperand a, b, c;  // c is also the output D (same layout, in place)
  int64_t batch = 1;
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  const void* alpha;  // host, of scale_type
  const void* beta;
  const float* a_scale = nullptr;  // device, fp8 only
  const float* b_scale = nullptr;
};

// Hopper kernels use up to 32 MiB of workspace (NVIDIA's recommendation for sm_90).
constexpr uint64_t kMaxWorkspace = uint64_t{32} << 20;

void make_layout(const char* op, Layout& l, const LtOperand& x, int64_t batch) {
  BRAID_CUBLAS_CHECK(op, cublasLtMatrixLayoutCreate(&l.d, x.type, x.rows, x.cols, x.ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    BRAID_CUBLAS_CHECK(op, cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                            &count, sizeof(count)));
    BRAID_CUBLAS_CHECK(
        op, cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &x.batch_stride, sizeof(x.batch_stride)));
  }
}

// `what` describes the problem in row-major terms for the "no algorithm" message.
void lt_matmul(const char* op, const LtMatmul& mm, const std::string& what, cudaStream_t stream) {
  int device = 0;
  BRAID_CUDA_CHECK(op, cudaGetDevice(&device));
  const cublasLtHandle_t handle = lt_handle(op, device);

  MatmulDesc desc;
  BRAID_CUBLAS_CHECK(op, cublasLtMatmulDescCreate(&desc.d, mm.compute, mm.scale_type));
  BRAID_CUBLAS_CHECK(op, cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &mm.a.op, sizeof(mm.a.op)));
  BRAID_CUBLAS_CHECK(op, cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &mm.b.op, sizeof(mm.b.op)));
  if (mm.a_scale) {
    BRAID_CUBLAS_CHECK(op,
                       cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &mm.a_scale, sizeof(mm.a_scale)));
  }
  if (mm.b_scale) {
    BRAID_CUBLAS_CHECK(op,
                       cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &mm.b_scale, sizeof(mm.b_scale)));
  }
  Layout la, lb, lc;
  make_layout(op, la, mm.a, mm.batch);
  make_layout(op, lb, mm.b, mm.batch);
  make_layout(op, lc, mm.c, mm.batch);

  Preference pref;
  BRAID_CUBLAS_CHECK(op, cublasLtMatmulPreferenceCreate(&pref.d));
  BRAID_CUBLAS_CHECK(
      op, cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &kMaxWorkspace, sizeof(kMaxWorkspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc.d, la.d, lb.d, lc.d, lc.d,
                                                           pref.d, 1, &result, &found);
  BRAID_CHECK(st != CUBLAS_STATUS_NOT_SUPPORTED && (st != CUBLAS_STATUS_SUCCESS || found > 0),
              kNotSupported, op, ": cuBLASLt has no algorithm for ", what, " on cuda:", device);
  BRAID_CUBLAS_CHECK(op, st);

  detail::StreamBuffer workspace(op, result.workspaceSize, stream);
  BRAID_CUBLAS_CHECK(
      op, cublasLtMatmul(handle, desc.d, mm.alpha, mm.a.ptr, la.d, mm.b.ptr, lb.d, mm.beta,
                         mm.c.ptr, lc.d, const_cast<void*>(mm.c.ptr), lc.d, &result.algo,
                         workspace.get(), result.workspaceSize, stream));
  workspace.release(op);
}

// Note [Row-major GEMM on cuBLASLt]: fills mm.a (our B), mm.b (our A) and mm.c.
void map_row_major(LtMatmul& mm, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                   const void* a, int64_t lda, cudaDataType_t a_type, int64_t stride_a,
                   const void* b, int64_t ldb, cudaDataType_t b_type, int64_t stride_b, void* c,
                   int64_t ldc, cudaDataType_t c_type, int64_t stride_c) {
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  if (trans_b == Trans::kNo) {  // B stored k x n: column-major n x k, used as is
    mm.a = {b, b_type, CUBLAS_OP_N, u(n), u(k), ldb, stride_b};
  } else {  // B stored n x k: column-major k x n, transposed
    mm.a = {b, b_type, CUBLAS_OP_T, u(k), u(n), ldb, stride_b};
  }
  if (trans_a == Trans::kNo) {  // A stored m x k: column-major k x m
    mm.b = {a, a_type, CUBLAS_OP_N, u(k), u(m), lda, stride_a};
  } else {  // A stored k x m: column-major m x k, transposed
    mm.b = {a, a_type, CUBLAS_OP_T, u(m), u(k), lda, stride_a};
  }
  mm.c = {c, c_type, CUBLAS_OP_N, u(n), u(m), ldc, stride_c};
}

// ---- fp8 helpers
// ---------------------------------------------------------------------------------

// out (cols x rows, leading dimension rows) = transpose of in (rows x cols, leading dimension
// ld_in), one byte per element; 32 x 32 tiles through shared memory so that reads and writes
// are both coalesced. gridDim.y may be smaller than the tile rows: blocks stride over them.
constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;

__global__ void __launch_bounds__(kTile* kTileRowsPerPass)
    transpose_bytes(const uint8_t* in, int64_t rows, int64_t cols, int64_t ld_in, uint8_t* out) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t tiles_y = (rows + kTile - 1) / kTile;
  for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
    const int64_t r0 = ty * kTile;
    for (int dy = threadIdx.y; dy < kTile; dy += kTileRowsPerPass) {
      const int64_t r = r0 + dy, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[dy][threadIdx.x] = in[r * ld_in + c];
    }
    __syncthreads();
    for (int dy = threadIdx.y; dy < kTile; dy += kTileRowsPerPass) {
      const int64_t oc = c0 + dy, orow = r0 + threadIdx.x;  // out row oc, column orow
      if (oc < cols && orow < rows) out[oc * rows + orow] = tile[threadIdx.x][dy];
    }
    __syncthreads();
  }
}

void launch_transpose(const char* op, const void* in, int64_t rows, int64_t cols, int64_t ld_in,
                      void* out, cudaStream_t stream) {
  const int64_t tiles_x = (cols + kTile - 1) / kTile, tiles_y = (rows + kTile - 1) / kTile;
  BRAID_CHECK(tiles_x <= INT32_MAX, kNotSupported, op, ": a matrix with ", cols,
              " columns is too wide to transpose");
  const dim3 grid(static_cast<unsigned>(tiles_x),
                  static_cast<unsigned>(tiles_y < 65535 ? tiles_y : 65535));
  const dim3 block(kTile, kTileRowsPerPass);
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  void* args[] = {&src, &rows, &cols, &ld_in, &dst};
  BRAID_CUDA_CHECK(op, cudaLaunchKernel(reinterpret_cast<const void*>(transpose_bytes), grid, block,
                                        args, 0, stream));
}

bool is_fp8(DType t) {
  return t == DType::kF8E4M3 || t == DType::kF8E5M2;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF64:
      return CUDA_R_64F;
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::kF8E5M2:
      return CUDA_R_8F_E5M2;
    default:
      BRAID_ASSERT(false, "no CUDA data type for ", t);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The shape checks cpu::gemm makes, in its words.
void check_shape(const char* op, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                 const void* a, int64_t lda, const void* b, int64_t ldb, const void* c,
                 int64_t ldc) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, op, ": m, n, k = ", m, ", ", n, ", ", k,
              " must be >= 0");
  const int64_t a_row = trans_a == Trans::kNo ? k : m;
  const int64_t b_row = trans_b == Trans::kNo ? n : k;
  BRAID_CHECK(lda >= std::max<int64_t>(a_row, 1), kInvalidArgument, op, ": lda ", lda,
              " is below the row length of A (", a_row, ")");
  BRAID_CHECK(ldb >= std::max<int64_t>(b_row, 1), kInvalidArgument, op, ": ldb ", ldb,
              " is below the row length of B (", b_row, ")");
  BRAID_CHECK(ldc >= std::max<int64_t>(n, 1), kInvalidArgument, op, ": ldc ", ldc, " is below n (",
              n, ")");
  if (m > 0 && n > 0) {
    BRAID_CHECK(c, kInvalidArgument, op, ": c is null");
    BRAID_CHECK(k == 0 || (a && b), kInvalidArgument, op, ": a or b is null");
  }
}

std::string describe(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, DType at, int64_t lda,
                     DType bt, int64_t ldb, DType ct, int64_t ldc) {
  return ::braid::detail::concat("m ", m, " n ", n, " k ", k, " (A ", at,
                                 ta == Trans::kNo ? "" : " transposed", " lda ", lda, ", B ", bt,
                                 tb == Trans::kNo ? "" : " transposed", " ldb ", ldb, ", C ", ct,
                                 " ldc ", ldc, ")");
}

}  // namespace

void gemm_fp8(const GemmFp8Args& g, void* stream) {
  constexpr const char* kOp = "cuda::gemm_fp8";
  check_shape(kOp, g.trans_a, g.trans_b, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, g.c, g.ldc);
  BRAID_CHECK(is_fp8(g.a_dtype) && is_fp8(g.b_dtype), kNotSupported, kOp, ": A is ", g.a_dtype,
              " and B is ", g.b_dtype, "; expected f8e4m3 or f8e5m2");
  BRAID_CHECK(!(g.a_dtype == DType::kF8E5M2 && g.b_dtype == DType::kF8E5M2), kNotSupported, kOp,
              ": A and B are both f8e5m2; cuBLASLt needs at least one f8e4m3 operand");
  BRAID_CHECK(g.c_dtype == DType::kBF16 || g.c_dtype == DType::kF32, kNotSupported, kOp, ": C is ",
              g.c_dtype, "; expected bf16 or f32");
  if (g.m == 0 || g.n == 0) return;
  BRAID_CHECK(g.k > 0 && g.k % 16 == 0, kNotSupported, kOp, ": k = ", g.k,
              "; fp8 GEMM needs k to be a positive multiple of 16");
  // Operands used in place must meet cuBLASLt's fp8 alignment; transposed copies always do.
  const bool copy_a = g.trans_a != Trans::kNo, copy_b = g.trans_b != Trans::kYes;
  BRAID_CHECK(copy_a || (g.lda % 16 == 0 && aligned16(g.a)), kNotSupported, kOp,
              ": A needs a 16-byte aligned pointer and lda a multiple of 16 (lda ", g.lda, ")");
  BRAID_CHECK(copy_b || (g.ldb % 16 == 0 && aligned16(g.b)), kNotSupported, kOp,
              ": B needs a 16-byte aligned pointer and ldb a multiple of 16 (ldb ", g.ldb, ")");

  // Two attributes rather than cudaGetDeviceProperties, which fills ~100 fields (some by
  // querying the driver) on every call.
  int device = 0, major = 0, minor = 0;
  BRAID_CUDA_CHECK(kOp, cudaGetDevice(&device));
  BRAID_CUDA_CHECK(kOp, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  BRAID_CUDA_CHECK(kOp, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  BRAID_CHECK(major * 10 + minor >= 89, kNotSupported, kOp, ": cuda:", device,
              " has compute capability ", major, ".", minor,
              "; fp8 GEMM needs 8.9 or newer (Ada, Hopper, Blackwell)");

  const auto s = static_cast<cudaStream_t>(stream);
  // K-contiguous copies: A (stored k x m) becomes m x k, B (stored k x n) becomes n x k.
  detail::StreamBuffer a_copy(kOp, copy_a ? static_cast<size_t>(g.m * g.k) : 0, s);
  detail::StreamBuffer b_copy(kOp, copy_b ? static_cast<size_t>(g.n * g.k) : 0, s);
  if (copy_a) launch_transpose(kOp, g.a, g.k, g.m, g.lda, a_copy.get(), s);
  if (copy_b) launch_transpose(kOp, g.b, g.k, g.n, g.ldb, b_copy.get(), s);
  const void* a = copy_a ? a_copy.get() : g.a;
  const void* b = copy_b ? b_copy.get() : g.b;
  const int64_t lda = copy_a ? g.k : g.lda, ldb = copy_b ? g.k : g.ldb;

  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  LtMatmul mm{};
  map_row_major(mm, Trans::kNo, Trans::kYes, g.m, g.n, g.k, a, lda, cuda_type(g.a_dtype), 0, b, ldb,
                cuda_type(g.b_dtype), 0, g.c, g.ldc, cuda_type(g.c_dtype), 0);
  mm.compute = CUBLAS_COMPUTE_32F;
  mm.scale_type = CUDA_R_32F;
  mm.alpha = &alpha;
  mm.beta = &beta;
  mm.a_scale = g.scale_b;  // cuBLASLt's A is our B (Note [Row-major GEMM on cuBLASLt])
  mm.b_scale = g.scale_a;
  lt_matmul(kOp, mm,
            describe(g.trans_a, g.trans_b, g.m, g.n, g.k, g.a_dtype, g.lda, g.b_dtype, g.ldb,
                     g.c_dtype, g.ldc),
            s);
  a_copy.release(kOp);
  b_copy.release(kOp);
}

void gemm(const cpu::GemmArgs& g, void* stream, F32Math f32_math) {
  constexpr const char* kOp = "cuda::gemm";
  check_shape(kOp, g.trans_a, g.trans_b, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, g.c, g.ldc);
  BRAID_CHECK(g.batch >= 0, kInvalidArgument, kOp, ": batch ", g.batch, " is negative");
  BRAID_CHECK(g.batch <= INT32_MAX, kNotSupported, kOp, ": batch ", g.batch,
              " is above cuBLASLt's limit (2^31 - 1)");
  const DType ab = g.ab_dtype, cd = g.c_dtype;
  const bool half = ab == DType::kF16 || ab == DType::kBF16;
  BRAID_CHECK((ab == DType::kF32 && cd == DType::kF32) ||
                  (ab == DType::kF64 && cd == DType::kF64) ||
                  (half && (cd == ab || cd == DType::kF32)),
              kNotSupported, kOp, ": A/B ", ab, " with C ", cd,
              " is not supported (expected f32 -> f32, f64 -> f64, f16 or bf16 -> itself or f32)");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  BRAID_CHECK(g.k > 0, kNotSupported, kOp, ": k = 0 is not supported on the GPU yet");

  LtMatmul mm{};
  map_row_major(mm, g.trans_a, g.trans_b, g.m, g.n, g.k, g.a, g.lda, cuda_type(ab), g.stride_a, g.b,
                g.ldb, cuda_type(ab), g.stride_b, g.c, g.ldc, cuda_type(cd), g.stride_c);
  mm.batch = g.batch;
  const double alpha64 = g.alpha, beta64 = g.beta;
  const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  if (ab == DType::kF64) {
    mm.compute = CUBLAS_COMPUTE_64F;
    mm.scale_type = CUDA_R_64F;
    mm.alpha = &alpha64;
    mm.beta = &beta64;
  } else {
    mm.compute = ab == DType::kF32 && f32_math == F32Math::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                 : CUBLAS_COMPUTE_32F;
    mm.scale_type = CUDA_R_32F;
    mm.alpha = &alpha32;
    mm.beta = &beta32;
  }
  lt_matmul(kOp, mm, describe(g.trans_a, g.trans_b, g.m, g.n, g.k, ab, g.lda, ab, g.ldb, cd, g.ldc),
            static_cast<cudaStream_t>(stream));
}

}  // namespace braid::kernels::cuda
