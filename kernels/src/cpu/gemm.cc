// gemm(): argument checks, batching, the scalar reference core, and the f16 / bf16 path
// (inputs widened to f32, multiplied by the dispatched f32 core, rounded once into C).
#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"
#include "cast_kernels.h"
#include "gemm_impl.h"
#include "isa_dispatch.h"

namespace braid::kernels::cpu {
namespace scalar {
namespace {

// The reference: C[i, j] = alpha * sum_{p = 0..k-1, in order} A(i, p) B(p, j) (+ beta C[i, j]),
// accumulated in T with a separate multiply and add per term.
template <typename T>
void gemm_ref(const GemmCore<T>& g) {
  std::vector<T> acc(static_cast<size_t>(g.n));
  for (int64_t i = 0; i < g.m; ++i) {
    std::fill(acc.begin(), acc.end(), T(0));
    for (int64_t p = 0; p < g.k; ++p) {
      const T aip = g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
      if (g.trans_b) {
        for (int64_t j = 0; j < g.n; ++j) acc[j] += aip * g.b[j * g.ldb + p];
      } else {
        const T* brow = g.b + p * g.ldb;
        for (int64_t j = 0; j < g.n; ++j) acc[j] += aip * brow[j];
      }
    }
    T* crow = g.c + i * g.ldc;
    for (int64_t j = 0; j < g.n; ++j) {
      crow[j] = g.beta == T(0) ? g.alpha * acc[j] : g.alpha * acc[j] + g.beta * crow[j];
    }
  }
}

}  // namespace

void gemm_f32(const GemmCore<float>& g) {
  gemm_ref(g);
}
void gemm_f64(const GemmCore<double>& g) {
  gemm_ref(g);
}

}  // namespace scalar

void throw_gemm_out_of_memory(int64_t n) {
  BRAID_FAIL(kOutOfMemory, "gemm: allocating a packing buffer of ", n, " floats failed");
}

namespace {

constexpr IsaTable<GemmF32Fn> kGemmF32{scalar::gemm_f32, avx2::gemm_f32, avx512::gemm_f32, nullptr};
constexpr IsaTable<GemmF64Fn> kGemmF64{scalar::gemm_f64, avx2::gemm_f64, avx512::gemm_f64, nullptr};

template <typename T>
const T* at(const void* base, int64_t offset) {
  return static_cast<const T*>(base) + offset;
}

// C = beta C for one matrix (k == 0); beta == 0 writes zeros without reading C.
template <typename T>
void scale_c(T* c, int64_t m, int64_t n, int64_t ldc, double beta) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T& v = c[i * ldc + j];
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        v = beta == 0.0 ? T(0) : static_cast<T>(beta) * v;
      } else {
        v = T(beta == 0.0 ? 0.0f : static_cast<float>(beta) * static_cast<float>(v));
      }
    }
  }
}

// Widens a stored rows x cols matrix with leading dimension ld to a dense f32 one.
template <typename T>
void widen(const T* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(src[r * ld + c]);
  }
}

// An f32 scratch of n floats for the f16 / bf16 / f64 C path: the f32 product before it is
// rounded into C (slot 0) and one widened row of C (slot 1). Each slot is one buffer per
// thread, grown on demand and kept up to kKeptFloats (a fresh zero-filled vector per product
// cost a fill of m x n floats and, past malloc's mmap threshold, page faults on every call);
// larger requests get a buffer of their own, freed with this object. Not zeroed: every
// element is written before it is read.
constexpr int64_t kKeptFloats = int64_t{4} << 20;  // 16 MiB per slot and thread

template <int kSlot>
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    thread_local std::unique_ptr<float[]> kept;
    thread_local int64_t cap = 0;
    if (n > kKeptFloats) {
      own_.reset(new float[static_cast<size_t>(n)]);
      p_ = own_.get();
      return;
    }
    if (n > cap) {
      kept.reset(new float[static_cast<size_t>(n)]);
      cap = n;
    }
    p_ = kept.get();
  }
  float* get() const { return p_; }

 private:
  std::unique_ptr<float[]> own_;
  float* p_ = nullptr;
};

// Columns of C the packed bf16 path stages in f32 at a time when C is bf16 / f16 and k spans more
// than one slice: as many as keep m x width within the kept scratch (whole kPackedNr blocks), but
// at least kMinStagedCols so that each block still splits across the threads. Staging the whole
// m x n instead took a buffer of its own past kKeptFloats, fresh pages on every call: GPT-2's head
// (1024 x 50257 f32, 206 MB) page-faulted about 50,000 times a training step (docs/performance.md,
// "bf16 training on Zen 4"). The sums do not depend on the block: each C element is the same
// product over k, in the same slices.
int64_t staged_width(int64_t m, int64_t n) {
  constexpr int64_t kMinStagedCols = 1024;
  int64_t width = kKeptFloats / std::max<int64_t>(m, 1) / kPackedNr * kPackedNr;
  width = std::max(width, kMinStagedCols);
  return std::min(width, n);
}

// acc (m x n, dense f32, alpha not applied) into C: C = alpha acc + beta C, rounded once.
template <typename C>
void epilogue(float* acc, int64_t m, int64_t n, double alpha, double beta, C* c, int64_t ldc) {
  using Wide = std::conditional_t<std::is_same_v<C, double>, double, float>;
  const Wide a = static_cast<Wide>(alpha);
  const Wide b = static_cast<Wide>(beta);
  if constexpr (std::is_same_v<C, bfloat16> || std::is_same_v<C, half>) {
    // The same f32 arithmetic as the loop below (a product, then a separate add of b C), a
    // row at a time in place in acc, with C widened and rounded by the level's cast kernels
    // (bit-identical to the scalar conversions, cast_kernels.h).
    constexpr bool kBf16 = std::is_same_v<C, bfloat16>;
    const CastFn narrow = hot_cast_fn(kBf16 ? kCastF32ToBF16 : kCastF32ToF16);
    if (beta == 0.0) {
      if (a != 1.0f) {
        for (int64_t i = 0; i < m * n; ++i) acc[i] = a * acc[i];
      }
      if (ldc == n) return narrow(acc, c, m * n);
      for (int64_t i = 0; i < m; ++i) narrow(acc + i * n, c + i * ldc, n);
      return;
    }
    const CastFn widen_row = hot_cast_fn(kBf16 ? kCastBF16ToF32 : kCastF16ToF32);
    const Scratch<1> old_row(n);
    float* const old = old_row.get();
    for (int64_t i = 0; i < m; ++i) {
      float* row = acc + i * n;
      widen_row(c + i * ldc, old, n);
      for (int64_t j = 0; j < n; ++j) {
        const float v = a * row[j];
        const float bc = b * old[j];
        row[j] = v + bc;
      }
      narrow(row, c + i * ldc, n);
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      C& out = c[i * ldc + j];
      const Wide v = a * static_cast<Wide>(acc[i * n + j]);
      if (beta == 0.0) {
        out = C(v);
      } else if constexpr (std::is_same_v<C, double>) {
        out = v + b * out;  // an f64 C is read at full precision
      } else {
        out = C(v + b * static_cast<float>(out));
      }
    }
  }
}

// Note [GEMM threads]
// gemm() spreads its work over the intra-op threads (core/thread_pool.h) only in ways that
// leave every element of C computed exactly as on one thread, so the bits do not depend on
// the thread count:
//   - batch items, each whole, when there are at least as many items as threads;
//   - otherwise column blocks of one item, when the core computes a column block exactly as
//     the whole: the scalar reference (any block), and the packed AVX-512 kernel (its k
//     blocking is fixed and every block stays at least kPackedMinDim wide, a multiple of its
//     micro-tile, so each block is packed too). Eigen's blocking depends on the problem's
//     sizes, so its problems (AVX2, f64, small f32) run on one thread.
// Column blocks of B and C: B's columns are its rows when transposed.
template <typename T>
bool column_split_keeps_bits(const GemmCore<T>& c) {
  const CpuIsa isa = cpu_dispatch_isa();
  if (isa == CpuIsa::kScalar) return true;
  if constexpr (std::is_same_v<T, float>) {
    return isa >= CpuIsa::kAvx512 && uses_packed_f32(c.m, c.n, c.k);
  }
  return false;
}

// Runs one product, split into column blocks over the intra-op threads when `splittable`.
// Core: GemmCore<T> or GemmCoreBf16 (the same members).
template <typename Core>
void run_split(void (*fn)(const Core&), const Core& c, bool splittable) {
  const int threads = get_num_threads();
  if (threads <= 1 || !splittable) return fn(c);
  // As many blocks as threads, each a multiple of kPackedNr and at least kPackedMinDim wide.
  int64_t blocks = std::min<int64_t>(threads, c.n / kPackedMinDim);
  int64_t width = 0;
  for (; blocks > 1; --blocks) {
    width = (c.n + blocks - 1) / blocks;
    width = (width + kPackedNr - 1) / kPackedNr * kPackedNr;
    if (c.n - (blocks - 1) * width >= kPackedMinDim) break;
  }
  if (blocks <= 1) return fn(c);
  parallel_for(blocks, [&](int64_t i) {
    Core part = c;
    const int64_t j0 = i * width;
    part.n = std::min(width, c.n - j0);
    part.b = c.trans_b ? c.b + j0 * c.ldb : c.b + j0;
    if constexpr (std::is_same_v<Core, GemmCoreBf16>) {
      if (c.c16 != nullptr) {
        part.c16 = c.c16 + j0;
        return fn(part);
      }
    }
    part.c = c.c + j0;
    fn(part);
  });
}

template <typename T>
void run_core(void (*fn)(const GemmCore<T>&), const GemmCore<T>& c) {
  run_split(fn, c, column_split_keeps_bits(c));
}

template <typename T>
void gemm_native(const GemmArgs& g) {
  const auto fn = [] {
    if constexpr (std::is_same_v<T, float>)
      return kGemmF32.get();
    else
      return kGemmF64.get();
  }();
  const auto item = [&](int64_t i) {
    return GemmCore<T>{g.trans_a == Trans::kYes,
                       g.trans_b == Trans::kYes,
                       g.m,
                       g.n,
                       g.k,
                       static_cast<T>(g.alpha),
                       static_cast<T>(g.beta),
                       at<T>(g.a, i * g.stride_a),
                       g.lda,
                       at<T>(g.b, i * g.stride_b),
                       g.ldb,
                       static_cast<T*>(g.c) + i * g.stride_c,
                       g.ldc};
  };
  if (g.batch > 1 && g.batch >= get_num_threads()) {
    parallel_for(g.batch, [&](int64_t i) { fn(item(i)); });
    return;
  }
  for (int64_t i = 0; i < g.batch; ++i) run_core(fn, item(i));
}

template <typename In, typename C>
void gemm_widened(const GemmArgs& g) {
  const bool ta = g.trans_a == Trans::kYes, tb = g.trans_b == Trans::kYes;
  const int64_t a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const int64_t b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  const CpuIsa isa = cpu_dispatch_isa();
  // Few rows of A against a large B (generation): the bf16 path that reads B in place.
  const bool few_rows = !ta && g.m < kPackedMinDim && g.n >= kPackedMinDim && g.k >= kPackedMinDim;
  // The packed bf16 path stages a column block of a bf16 / f16 C (staged_width), the others
  // all of C.
  const bool packed_bf16 = std::is_same_v<In, bfloat16> && isa >= CpuIsa::kAvx512Bf16 &&
                           !few_rows && uses_packed_f32(g.m, g.n, g.k);
  const int64_t staged_cols = packed_bf16 ? staged_width(g.m, g.n) : g.n;
  const Scratch<0> staging(std::is_same_v<C, float> ? 0 : g.m * staged_cols);
  float* const acc = staging.get();
  if constexpr (std::is_same_v<In, bfloat16>) {
    // AVX512_BF16: the packed vdpbf16ps kernel reads the bf16 inputs directly; the scalar
    // level (the reference) and smaller problems widen as below.
    if (isa >= CpuIsa::kAvx512Bf16 && few_rows) {
      // B read in place, never widened.
      for (int64_t i = 0; i < g.batch; ++i) {
        C* c = static_cast<C*>(g.c) + i * g.stride_c;
        GemmCoreBf16 core{false,
                          tb,
                          g.m,
                          g.n,
                          g.k,
                          static_cast<float>(g.alpha),
                          static_cast<float>(g.beta),
                          at<uint16_t>(g.a, i * g.stride_a),
                          g.lda,
                          at<uint16_t>(g.b, i * g.stride_b),
                          g.ldb,
                          nullptr,
                          g.ldc};
        if constexpr (std::is_same_v<C, float>) {
          core.c = c;
          run_split(avx512bf16::bf16gemm_rows, core, true);
          continue;
        } else if constexpr (std::is_same_v<C, bfloat16>) {
          core.c16 = reinterpret_cast<uint16_t*>(c);
          run_split(avx512bf16::bf16gemm_rows, core, true);
          continue;
        }
        // An f64 C: the f32 block staged, then the epilogue.
        core.alpha = 1.0f;
        core.beta = 0.0f;
        core.c = acc;
        core.ldc = g.n;
        run_split(avx512bf16::bf16gemm_rows, core, true);
        epilogue(acc, g.m, g.n, g.alpha, g.beta, c, g.ldc);
      }
      return;
    }
    if (isa >= CpuIsa::kAvx512Bf16 && uses_packed_f32(g.m, g.n, g.k)) {
      const auto kernel =
          isa == CpuIsa::kAmx ? avx512bf16::bf16gemm_amx : avx512bf16::bf16gemm_packed;
      for (int64_t i = 0; i < g.batch; ++i) {
        C* c = static_cast<C*>(g.c) + i * g.stride_c;
        GemmCoreBf16 core{ta,    tb,
                          g.m,   g.n,
                          g.k,   1.0f,
                          0.0f,  at<uint16_t>(g.a, i * g.stride_a),
                          g.lda, at<uint16_t>(g.b, i * g.stride_b),
                          g.ldb, nullptr,
                          0};
        if constexpr (std::is_same_v<C, float>) {
          core.alpha = static_cast<float>(g.alpha);
          core.beta = static_cast<float>(g.beta);
          core.c = c;
          core.ldc = g.ldc;
          run_split(kernel, core, true);
        } else if (std::is_same_v<C, bfloat16> && g.k <= kBf16Kc) {
          // One k slice: the kernel rounds into the bf16 C itself, as epilogue() would.
          core.alpha = static_cast<float>(g.alpha);
          core.beta = static_cast<float>(g.beta);
          core.c16 = reinterpret_cast<uint16_t*>(c);
          core.ldc = g.ldc;
          run_split(kernel, core, true);
        } else {
          for (int64_t j = 0; j < g.n; j += staged_cols) {
            GemmCoreBf16 part = core;
            part.n = std::min(staged_cols, g.n - j);
            part.b = tb ? core.b + j * g.ldb : core.b + j;
            part.c = acc;
            part.ldc = part.n;
            run_split(kernel, part, true);
            epilogue(acc, g.m, part.n, g.alpha, g.beta, c + j, g.ldc);
          }
        }
      }
      return;
    }
  }
  std::vector<float> a(static_cast<size_t>(a_rows * a_cols)),
      b(static_cast<size_t>(b_rows * b_cols));
  const GemmF32Fn fn = kGemmF32.get();
  for (int64_t i = 0; i < g.batch; ++i) {
    widen(at<In>(g.a, i * g.stride_a), a_rows, a_cols, g.lda, a.data());
    widen(at<In>(g.b, i * g.stride_b), b_rows, b_cols, g.ldb, b.data());
    C* c = static_cast<C*>(g.c) + i * g.stride_c;
    if constexpr (std::is_same_v<C, float>) {
      run_core(fn, {ta, tb, g.m, g.n, g.k, static_cast<float>(g.alpha), static_cast<float>(g.beta),
                    a.data(), a_cols, b.data(), b_cols, c, g.ldc});
    } else {
      run_core(fn,
               {ta, tb, g.m, g.n, g.k, 1.0f, 0.0f, a.data(), a_cols, b.data(), b_cols, acc, g.n});
      epilogue(acc, g.m, g.n, g.alpha, g.beta, c, g.ldc);
    }
  }
}

template <typename In>
void gemm_reduced(const GemmArgs& g) {
  switch (g.c_dtype) {
    case DType::kF32:
      return gemm_widened<In, float>(g);
    case DType::kF64:
      return gemm_widened<In, double>(g);
    default:
      return gemm_widened<In, In>(g);
  }
}

template <typename T>
void scale_batch(const GemmArgs& g) {
  for (int64_t i = 0; i < g.batch; ++i) {
    scale_c(static_cast<T*>(g.c) + i * g.stride_c, g.m, g.n, g.ldc, g.beta);
  }
}

void scale_only(const GemmArgs& g) {
  switch (g.c_dtype) {
    case DType::kF64:
      return scale_batch<double>(g);
    case DType::kF32:
      return scale_batch<float>(g);
    case DType::kF16:
      return scale_batch<half>(g);
    case DType::kBF16:
      return scale_batch<bfloat16>(g);
    default:
      return;
  }
}

void check_args(const GemmArgs& g) {
  const DType ab = g.ab_dtype, c = g.c_dtype;
  BRAID_CHECK(ab == DType::kF32 || ab == DType::kF64 || ab == DType::kF16 || ab == DType::kBF16,
              kNotSupported, "gemm: ab_dtype ", ab,
              " is not supported; expected f32, f64, f16 or bf16");
  const bool reduced = ab == DType::kF16 || ab == DType::kBF16;
  BRAID_CHECK(
      c == ab || (reduced && (c == DType::kF32 || c == DType::kF64)), kNotSupported,
      "gemm: c_dtype ", c, " with ab_dtype ", ab,
      " is not supported; expected c_dtype == ab_dtype, or f32 / f64 for f16 / bf16 inputs");
  BRAID_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0, kInvalidArgument, "gemm: sizes m ",
              g.m, ", n ", g.n, ", k ", g.k, ", batch ", g.batch, " must not be negative");
  const bool ta = g.trans_a == Trans::kYes, tb = g.trans_b == Trans::kYes;
  const int64_t a_cols = ta ? g.m : g.k, b_cols = tb ? g.k : g.n;
  BRAID_CHECK(g.lda >= a_cols, kInvalidArgument, "gemm: lda ", g.lda, " is less than ", a_cols,
              ", the row length of the stored A", ta ? " (transposed: m)" : " (k)");
  BRAID_CHECK(g.ldb >= b_cols, kInvalidArgument, "gemm: ldb ", g.ldb, " is less than ", b_cols,
              ", the row length of the stored B", tb ? " (transposed: k)" : " (n)");
  BRAID_CHECK(g.ldc >= g.n, kInvalidArgument, "gemm: ldc ", g.ldc, " is less than n ", g.n);
  BRAID_CHECK(g.stride_a >= 0 && g.stride_b >= 0 && g.stride_c >= 0, kInvalidArgument,
              "gemm: batch strides (a ", g.stride_a, ", b ", g.stride_b, ", c ", g.stride_c,
              ") must not be negative");
  const int64_t c_span = g.m > 0 && g.n > 0 ? (g.m - 1) * g.ldc + g.n : 0;
  BRAID_CHECK(g.batch <= 1 || g.stride_c >= c_span, kInvalidArgument, "gemm: stride_c ", g.stride_c,
              " makes the ", g.batch, " C matrices overlap; expected at least ", c_span);
  const bool empty_c = g.m == 0 || g.n == 0 || g.batch == 0;
  BRAID_CHECK(empty_c || g.c != nullptr, kInvalidArgument, "gemm: C is null for a ", g.m, " x ",
              g.n, " result");
  BRAID_CHECK(empty_c || g.k == 0 || (g.a != nullptr && g.b != nullptr), kInvalidArgument,
              "gemm: null input (A ", g.a, ", B ", g.b, ") with k ", g.k);
}

}  // namespace

void gemm(const GemmArgs& g) {
  check_args(g);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (g.k == 0) return scale_only(g);
  switch (g.ab_dtype) {
    case DType::kF32:
      return gemm_native<float>(g);
    case DType::kF64:
      return gemm_native<double>(g);
    case DType::kF16:
      return gemm_reduced<half>(g);
    case DType::kBF16:
      return gemm_reduced<bfloat16>(g);
    default:
      return;
  }
}

}  // namespace braid::kernels::cpu
