// cross_entropy_forward / _backward of the cuda kernel table (cpu.h): one block of 256 threads
// per row; logits f64 (computed in f64) or f32 / f16 / bf16 (computed in f32), targets i64 or
// i32 in device memory.
//
// Forward: the row's max, sum of exp(z - max) and sum of z, each folded by a fixed tree
// (Note [Fixed reduction trees] in launch.h): the same bits on every run; against the cpu
// (sequential sums, a 1-ulp exp) they differ by rounding only (docs/gpu.md). Backward is
// elementwise given lse: the cpu's operations one by one, so it differs from the cpu only by
// expf (2 ulp in CUDA).
//
// Targets cannot throw from the GPU: a target outside [0, classes) that is not ignore_index
// gives loss and lse NaN for its row, and a NaN gradient row (the cpu throws kOutOfRange).
#include <cstdint>

#include "braid/core/error.h"
#include "cast_math.h"
#include "launch.h"
#include "table_ops.h"

namespace braid::kernels::cuda::table_ops {
namespace {

using math::Bits;
using math::Compute;

constexpr int kCeThreads = 256;

__device__ inline int64_t target_at(const void* targets, bool i64, int64_t r) {
  return i64 ? static_cast<const int64_t*>(targets)[r] : static_cast<const int32_t*>(targets)[r];
}

template <typename Acc>
__device__ inline Acc exp_acc(Acc x) {
  if constexpr (sizeof(Acc) == 4) {
    return expf(x);
  } else {
    return exp(x);
  }
}

// The constants of one call, rounded to the compute dtype on the host as the cpu rounds them.
template <typename Acc>
struct CeConsts {
  bool smoothing;  // label_smoothing != 0
  Acc smooth;      // ls
  Acc keep;        // 1 - ls
  Acc per_class;   // ls / classes
  Acc classes;     // C
  int64_t ignore;  // ignore_index
  bool targets_i64;
};

template <typename Acc>
CeConsts<Acc> ce_consts(int64_t classes, DType target_dtype, int64_t ignore_index, double ls) {
  return {ls != 0.0,
          static_cast<Acc>(ls),
          static_cast<Acc>(1.0 - ls),
          static_cast<Acc>(ls / static_cast<double>(classes)),
          static_cast<Acc>(classes),
          ignore_index,
          target_dtype == DType::kI64};
}

template <DType D>
__global__ void __launch_bounds__(kCeThreads)
    ce_forward_kernel(int64_t rows, int64_t classes, const Bits<D>* logits, const void* targets,
                      CeConsts<Compute<D>> c, Compute<D>* loss, Compute<D>* lse) {
  using Acc = Compute<D>;
  __shared__ Acc smem[kCeThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = target_at(targets, c.targets_i64, r);
    if (t == c.ignore || t < 0 || t >= classes) {  // uniform over the block
      if (threadIdx.x == 0) {
        const Acc v = t == c.ignore ? Acc(0) : Acc(NAN);
        loss[r] = v;
        lse[r] = v;
      }
      continue;
    }
    const Bits<D>* z = logits + r * classes;
    Acc m = -INFINITY;
    for (int64_t k = threadIdx.x; k < classes; k += kCeThreads) {
      m = detail::max_nan(m, math::load<D>(z, k));
    }
    m = detail::block_fold<kCeThreads>(m, smem, [](Acc a, Acc b) { return detail::max_nan(a, b); });
    Acc se = 0, sz = 0;
    for (int64_t k = threadIdx.x; k < classes; k += kCeThreads) {
      const Acc v = math::load<D>(z, k);
      se += exp_acc(v - m);
      sz += v;
    }
    se = detail::block_fold<kCeThreads>(se, smem, [](Acc a, Acc b) { return a + b; });
    sz = detail::block_fold<kCeThreads>(sz, smem, [](Acc a, Acc b) { return a + b; });
    if (threadIdx.x == 0) {
      const Acc l = m + log(se);
      const Acc zt = math::load<D>(z, t);
      lse[r] = l;
      loss[r] =
          c.smoothing ? (1 - c.smooth) * (l - zt) + c.per_class * (c.classes * l - sz) : l - zt;
    }
  }
}

template <DType D>
__global__ void __launch_bounds__(kCeThreads)
    ce_backward_kernel(int64_t rows, int64_t classes, const Bits<D>* logits, const void* targets,
                       CeConsts<Compute<D>> c, const Compute<D>* lse, const Compute<D>* scale,
                       Bits<D>* dlogits) {
  using Acc = Compute<D>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = target_at(targets, c.targets_i64, r);
    const Bits<D>* z = logits + r * classes;
    Bits<D>* out = dlogits + r * classes;
    if (t == c.ignore || t < 0 || t >= classes) {
      const Acc v = t == c.ignore ? Acc(0) : Acc(NAN);
      for (int64_t k = threadIdx.x; k < classes; k += kCeThreads) math::store<D>(out, k, v);
      continue;
    }
    const Acc s = scale[r], l = lse[r];
    const Acc offset = -s * c.per_class;
    for (int64_t k = threadIdx.x; k < classes; k += kCeThreads) {
      Acc g = s * exp_acc(math::load<D>(z, k) - l) + offset;
      if (k == t) g -= s * c.keep;
      math::store<D>(out, k, g);
    }
  }
}

void check_ce_args(const char* name, DType logits_dtype, int64_t rows, int64_t classes,
                   DType target_dtype) {
  BRAID_CHECK(rows >= 0 && classes >= 0, kInvalidArgument, name, ": shape [rows ", rows,
              ", classes ", classes, "] must not be negative");
  BRAID_CHECK(logits_dtype == DType::kF64 || logits_dtype == DType::kF32 ||
                  logits_dtype == DType::kF16 || logits_dtype == DType::kBF16,
              kNotSupported, name, ": logits dtype ", logits_dtype,
              " is not supported; expected f64, f32, f16 or bf16");
  BRAID_CHECK(target_dtype == DType::kI64 || target_dtype == DType::kI32, kNotSupported, name,
              ": target dtype ", target_dtype, " is not supported; expected i64 or i32");
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 30));
}

}  // namespace

void cross_entropy_forward(Stream s, DType logits_dtype, int64_t rows, int64_t classes,
                           const void* logits, DType target_dtype, const void* targets,
                           int64_t ignore_index, double label_smoothing, void* loss, void* lse) {
  check_ce_args("cross_entropy_forward", logits_dtype, rows, classes, target_dtype);
  if (rows == 0) return;
  BRAID_CHECK(classes > 0, kInvalidArgument, "cross_entropy_forward: ", rows, " rows of 0 classes");
  BRAID_CHECK(logits != nullptr && targets != nullptr && loss != nullptr && lse != nullptr,
              kInvalidArgument, "cross_entropy_forward: null logits, targets, loss or lse");
  detail::visit_float(logits_dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    using Acc = Compute<D>;
    ce_forward_kernel<D><<<row_blocks(rows), kCeThreads, 0, detail::stream_of(s)>>>(
        rows, classes, static_cast<const Bits<D>*>(logits), targets,
        ce_consts<Acc>(classes, target_dtype, ignore_index, label_smoothing),
        static_cast<Acc*>(loss), static_cast<Acc*>(lse));
  });
  detail::check_launch("cross_entropy_forward");
}

void cross_entropy_backward(Stream s, DType logits_dtype, int64_t rows, int64_t classes,
                            const void* logits, DType target_dtype, const void* targets,
                            int64_t ignore_index, double label_smoothing, const void* lse,
                            const void* scale, void* dlogits) {
  check_ce_args("cross_entropy_backward", logits_dtype, rows, classes, target_dtype);
  if (rows == 0 || classes == 0) return;
  BRAID_CHECK(logits != nullptr && targets != nullptr && lse != nullptr && scale != nullptr &&
                  dlogits != nullptr,
              kInvalidArgument,
              "cross_entropy_backward: null logits, targets, lse, scale or dlogits");
  detail::visit_float(logits_dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    using Acc = Compute<D>;
    ce_backward_kernel<D><<<row_blocks(rows), kCeThreads, 0, detail::stream_of(s)>>>(
        rows, classes, static_cast<const Bits<D>*>(logits), targets,
        ce_consts<Acc>(classes, target_dtype, ignore_index, label_smoothing),
        static_cast<const Acc*>(lse), static_cast<const Acc*>(scale),
        static_cast<Bits<D>*>(dlogits));
  });
  detail::check_launch("cross_entropy_backward");
}

}  // namespace braid::kernels::cuda::table_ops
