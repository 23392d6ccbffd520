// cross_entropy_forward() / cross_entropy_backward(): argument and target checks, the scalar
// reference rows (std::exp in the compute dtype), the f64 path (scalar at every level) and the
// f16 / bf16 path (each row widened to an f32 buffer, rounded once on store). The forward keeps
// only lse per row; the backward recomputes exp(z - lse) instead of saving the probabilities,
// so a [tokens, vocab] f32 array is never held between the passes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/float_types.h"
#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"
#include "isa_dispatch.h"
#include "nn_kernels.h"

namespace braid::kernels::cpu {
namespace {

template <typename T>
void ce_stats_ref(const T* z, int64_t classes, T* max_out, T* sum_exp, T* sum_z) {
  T m = z[0];
  for (int64_t k = 1; k < classes; ++k) {
    if (z[k] > m || std::isnan(z[k])) m = std::isnan(m) ? m : z[k];
  }
  T se = 0, sz = 0;
  for (int64_t k = 0; k < classes; ++k) {
    se += std::exp(z[k] - m);
    sz += z[k];
  }
  *max_out = m;
  *sum_exp = se;
  *sum_z = sz;
}

template <typename T>
void ce_grad_ref(const T* z, int64_t classes, T lse, T scale, T offset, T* out) {
  for (int64_t k = 0; k < classes; ++k) out[k] = scale * std::exp(z[k] - lse) + offset;
}

// Rows are independent, so they are split over the intra-op threads in pieces of about
// kPieceElements logits; every row is computed exactly as on one thread (docs/kernels.md,
// "Threads").
constexpr int64_t kPieceElements = 1 << 15;

template <typename Fn>
void for_row_pieces(int64_t rows, int64_t classes, Fn&& fn) {
  const int64_t per = std::max<int64_t>(1, kPieceElements / std::max<int64_t>(classes, 1));
  const int64_t pieces = (rows + per - 1) / per;
  if (pieces <= 1 || get_num_threads() == 1) return fn(int64_t{0}, rows);
  parallel_for(pieces, [&](int64_t p) { fn(p * per, std::min(rows, (p + 1) * per)); });
}

constexpr IsaTable<CeStatsFn> kCeStats{scalar::ce_stats_f32, avx2::ce_stats_f32,
                                       avx512::ce_stats_f32, nullptr};
constexpr IsaTable<CeGradFn> kCeGrad{scalar::ce_grad_f32, avx2::ce_grad_f32, avx512::ce_grad_f32,
                                     nullptr};

int64_t target_at(DType target_dtype, const void* targets, int64_t r) {
  return target_dtype == DType::kI64 ? static_cast<const int64_t*>(targets)[r]
                                     : static_cast<const int32_t*>(targets)[r];
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

// The target of row r, or -1 when it is ignored; throws when out of range.
int64_t checked_target(const char* name, DType target_dtype, const void* targets, int64_t r,
                       int64_t classes, int64_t ignore_index) {
  const int64_t t = target_at(target_dtype, targets, r);
  if (t == ignore_index) return -1;
  BRAID_CHECK(t >= 0 && t < classes, kOutOfRange, name, ": target ", t, " of row ", r,
              " is outside [0, ", classes, ") and is not ignore_index ", ignore_index);
  return t;
}

// Row r's logits as Acc: a pointer into the input (same type) or a widened copy in buf.
template <typename Acc, typename T>
const Acc* row_as(const T* logits, int64_t r, int64_t classes, std::vector<Acc>& buf) {
  const T* z = logits + r * classes;
  if constexpr (std::is_same_v<Acc, T>) {
    return z;
  } else {
    for (int64_t k = 0; k < classes; ++k) buf[k] = static_cast<Acc>(static_cast<float>(z[k]));
    return buf.data();
  }
}

template <typename Acc, typename T>
void ce_forward_typed(int64_t rows, int64_t classes, const T* logits, DType target_dtype,
                      const void* targets, int64_t ignore_index, double ls, Acc* loss, Acc* lse) {
  const CeStatsFn stats_f32 = kCeStats.get();
  const Acc smooth = static_cast<Acc>(ls);
  const Acc per_class = static_cast<Acc>(ls / static_cast<double>(classes));
  const Acc c = static_cast<Acc>(classes);
  for_row_pieces(rows, classes, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> buf(std::is_same_v<Acc, T> ? 0 : static_cast<size_t>(classes));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t =
          checked_target("cross_entropy_forward", target_dtype, targets, r, classes, ignore_index);
      if (t < 0) {
        loss[r] = 0;
        lse[r] = 0;
        continue;
      }
      const Acc* z = row_as<Acc>(logits, r, classes, buf);
      Acc m, se, sz;
      if constexpr (std::is_same_v<Acc, float>) {
        stats_f32(z, classes, &m, &se, &sz);
      } else {
        ce_stats_ref(z, classes, &m, &se, &sz);
      }
      const Acc l = m + std::log(se);
      lse[r] = l;
      loss[r] = ls == 0.0 ? l - z[t] : (1 - smooth) * (l - z[t]) + per_class * (c * l - sz);
    }
  });
}

template <typename Acc, typename T>
void ce_backward_typed(int64_t rows, int64_t classes, const T* logits, DType target_dtype,
                       const void* targets, int64_t ignore_index, double ls, const Acc* lse,
                       const Acc* scale, T* dlogits) {
  const CeGradFn grad_f32 = kCeGrad.get();
  const Acc keep = static_cast<Acc>(1.0 - ls);
  const Acc per_class = static_cast<Acc>(ls / static_cast<double>(classes));
  for_row_pieces(rows, classes, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> buf(std::is_same_v<Acc, T> ? 0 : static_cast<size_t>(classes));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t =
          checked_target("cross_entropy_backward", target_dtype, targets, r, classes, ignore_index);
      T* out = dlogits + r * classes;
      if (t < 0) {
        for (int64_t k = 0; k < classes; ++k) out[k] = T(0.0f);
        continue;
      }
      const Acc* z = row_as<Acc>(logits, r, classes, buf);
      Acc* o = std::is_same_v<Acc, T> ? reinterpret_cast<Acc*>(out) : buf.data();
      const Acc s = scale[r];
      if constexpr (std::is_same_v<Acc, float>) {
        grad_f32(z, classes, lse[r], s, -s * per_class, o);
      } else {
        ce_grad_ref(z, classes, lse[r], s, -s * per_class, o);
      }
      o[t] -= s * keep;
      if constexpr (!std::is_same_v<Acc, T>) {
        for (int64_t k = 0; k < classes; ++k) out[k] = T(buf[k]);
      }
    }
  });
}

}  // namespace

namespace scalar {
void ce_stats_f32(const float* z, int64_t classes, float* max_out, float* sum_exp, float* sum_z) {
  ce_stats_ref(z, classes, max_out, sum_exp, sum_z);
}
void ce_grad_f32(const float* z, int64_t classes, float lse, float scale, float offset,
                 float* out) {
  ce_grad_ref(z, classes, lse, scale, offset, out);
}
}  // namespace scalar

void cross_entropy_forward(DType logits_dtype, int64_t rows, int64_t classes, const void* logits,
                           DType target_dtype, const void* targets, int64_t ignore_index,
                           double label_smoothing, void* loss, void* lse) {
  check_ce_args("cross_entropy_forward", logits_dtype, rows, classes, target_dtype);
  if (rows == 0) return;
  BRAID_CHECK(classes > 0, kInvalidArgument, "cross_entropy_forward: ", rows, " rows of 0 classes");
  BRAID_CHECK(logits != nullptr && targets != nullptr && loss != nullptr && lse != nullptr,
              kInvalidArgument, "cross_entropy_forward: null logits, targets, loss or lse");
  const double ls = label_smoothing;
  switch (logits_dtype) {
    case DType::kF64:
      return ce_forward_typed<double>(rows, classes, static_cast<const double*>(logits),
                                      target_dtype, targets, ignore_index, ls,
                                      static_cast<double*>(loss), static_cast<double*>(lse));
    case DType::kF32:
      return ce_forward_typed<float>(rows, classes, static_cast<const float*>(logits), target_dtype,
                                     targets, ignore_index, ls, static_cast<float*>(loss),
                                     static_cast<float*>(lse));
    case DType::kF16:
      return ce_forward_typed<float>(rows, classes, static_cast<const half*>(logits), target_dtype,
                                     targets, ignore_index, ls, static_cast<float*>(loss),
                                     static_cast<float*>(lse));
    case DType::kBF16:
      return ce_forward_typed<float>(rows, classes, static_cast<const bfloat16*>(logits),
                                     target_dtype, targets, ignore_index, ls,
                                     static_cast<float*>(loss), static_cast<float*>(lse));
    default:
      return;
  }
}

void cross_entropy_backward(DType logits_dtype, int64_t rows, int64_t classes, const void* logits,
                            DType target_dtype, const void* targets, int64_t ignore_index,
                            double label_smoothing, const void* lse, const void* scale,
                            void* dlogits) {
  check_ce_args("cross_entropy_backward", logits_dtype, rows, classes, target_dtype);
  if (rows == 0 || classes == 0) return;
  BRAID_CHECK(logits != nullptr && targets != nullptr && lse != nullptr && scale != nullptr &&
                  dlogits != nullptr,
              kInvalidArgument,
              "cross_entropy_backward: null logits, targets, lse, scale or dlogits");
  const double ls = label_smoothing;
  switch (logits_dtype) {
    case DType::kF64:
      return ce_backward_typed<double>(
          rows, classes, static_cast<const double*>(logits), target_dtype, targets, ignore_index,
          ls, static_cast<const double*>(lse), static_cast<const double*>(scale),
          static_cast<double*>(dlogits));
    case DType::kF32:
      return ce_backward_typed<float>(
          rows, classes, static_cast<const float*>(logits), target_dtype, targets, ignore_index, ls,
          static_cast<const float*>(lse), static_cast<const float*>(scale),
          static_cast<float*>(dlogits));
    case DType::kF16:
      return ce_backward_typed<float>(rows, classes, static_cast<const half*>(logits), target_dtype,
                                      targets, ignore_index, ls, static_cast<const float*>(lse),
                                      static_cast<const float*>(scale),
                                      static_cast<half*>(dlogits));
    case DType::kBF16:
      return ce_backward_typed<float>(
          rows, classes, static_cast<const bfloat16*>(logits), target_dtype, targets, ignore_index,
          ls, static_cast<const float*>(lse), static_cast<const float*>(scale),
          static_cast<bfloat16*>(dlogits));
    default:
      return;
  }
}

}  // namespace braid::kernels::cpu
