// Inputs and expected results for -c 1 (check.h). Templates over the element type so the
// per-element loops have no dtype switch; one dispatch per call.
#include "bench/check.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"

namespace braid::bench {
namespace {

int64_t input_value(const CheckCall& c, int rank, int64_t k) {
  if (c.redop == ReduceOp::kProd) return 1 + (k + rank) % 2;
  return 1 + (k + 3 * rank) % 8;
}

template <typename T>
constexpr bool kReducedFloat = std::is_class_v<T>;  // half, bfloat16, fp8: stored narrow

template <typename T>
T from_double(double v) {
  if constexpr (kReducedFloat<T>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double to_double(T v) {
  if constexpr (kReducedFloat<T>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// The input as this dtype holds it (values 1..8 are exact in every dtype braid bench takes).
template <typename T>
double stored_input(const CheckCall& c, int rank, int64_t k) {
  return to_double(from_double<T>(static_cast<double>(input_value(c, rank, k))));
}

// The reduction over ranks of input element k, rounded once to T (docs/shm.md).
template <typename T>
T expected_reduced(const CheckCall& c, int64_t k) {
  if constexpr (std::is_floating_point_v<T> || kReducedFloat<T>) {
    double acc = stored_input<T>(c, 0, k);
    for (int r = 1; r < c.nranks; ++r) {
      double x = stored_input<T>(c, r, k);
      switch (c.redop) {
        case ReduceOp::kProd:
          acc *= x;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, x);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, x);
          break;
        default:
          acc += x;
          break;
      }
    }
    if (c.redop == ReduceOp::kAvg) {
      // f32 accumulation divides in f32 (exact sum, one rounding), f64 in f64.
      if constexpr (std::is_same_v<T, double>) return acc / c.nranks;
      return from_double<T>(static_cast<float>(acc) / static_cast<float>(c.nranks));
    }
    return from_double<T>(acc);
  } else {
    int64_t acc = input_value(c, 0, k);
    for (int r = 1; r < c.nranks; ++r) {
      int64_t x = input_value(c, r, k);
      switch (c.redop) {
        case ReduceOp::kProd:
          acc *= x;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, x);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, x);
          break;
        default:
          acc += x;
          break;
      }
    }
    if (c.redop == ReduceOp::kAvg) acc /= c.nranks;  // positive: floor == truncation
    return static_cast<T>(acc);                      // wraps, as braid's integer reductions
  }
}

// Expected element i of this rank's result.
template <typename T>
T expected_at(const CheckCall& c, int64_t i, int64_t count) {
  switch (c.op) {
    case Op::kAllReduce:
    case Op::kReduce:
      return expected_reduced<T>(c, i);
    case Op::kReduceScatter:
      return expected_reduced<T>(c, c.rank * count + i);
    case Op::kBroadcast:
      return from_double<T>(stored_input<T>(c, c.root, i));
    case Op::kAllGather:
      return from_double<T>(stored_input<T>(c, int(i / count), i % count));
    case Op::kAllToAll:
      return from_double<T>(stored_input<T>(c, int(i / count), c.rank * count + i % count));
    case Op::kScatter:
      return from_double<T>(stored_input<T>(c, c.root, c.rank * count + i));
  }
  return T{};
}

template <typename T>
void fill_typed(const CheckCall& c, const CallBuffers& b) {
  const int64_t in = input_elements(c.op, b.count, c.nranks);
  const int64_t out = result_elements(c.op, b.count, c.nranks);
  if (!b.in_place || c.op == Op::kAllGather) {
    std::memset(b.recv, 0, static_cast<size_t>(out) * sizeof(T));
  }
  T* send = static_cast<T*>(const_cast<void*>(b.send));
  for (int64_t k = 0; k < in; ++k) {
    send[k] = from_double<T>(static_cast<double>(input_value(c, c.rank, k)));
  }
}

template <typename T>
int64_t count_typed(const CheckCall& c, const void* result, int64_t count) {
  if (c.op == Op::kReduce && c.rank != c.root) return 0;
  const int64_t n = result_elements(c.op, count, c.nranks);
  const auto* got = static_cast<const unsigned char*>(result);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    T want = expected_at<T>(c, i, count);
    if (std::memcmp(got + i * sizeof(T), &want, sizeof(T)) != 0) ++wrong;
  }
  return wrong;
}

template <typename F>
auto dispatch(DType dtype, F&& f) {
  switch (dtype) {
#define BRAID_BENCH_CASE(e, n, st, T, sz, fl) \
  case DType::e:                              \
    return f(T{});
    BRAID_FOR_EACH_DTYPE(BRAID_BENCH_CASE)
#undef BRAID_BENCH_CASE
  }
  BRAID_FAIL(kInternal, "check: unknown dtype");
}

}  // namespace

int64_t result_elements(Op op, int64_t count, int nranks) {
  return (op == Op::kAllGather || op == Op::kAllToAll) ? count * nranks : count;
}

int64_t input_elements(Op op, int64_t count, int nranks) {
  return (op == Op::kReduceScatter || op == Op::kAllToAll || op == Op::kScatter) ? count * nranks
                                                                                 : count;
}

void fill_inputs(const CheckCall& c, const CallBuffers& b) {
  BRAID_CHECK(c.dtype != DType::kBool, kNotSupported, "-c 1: dtype bool is not checked");
  dispatch(c.dtype, [&](auto tag) {
    fill_typed<decltype(tag)>(c, b);
    return 0;
  });
}

int64_t count_wrong(const CheckCall& c, const void* result, int64_t count) {
  return dispatch(c.dtype, [&](auto tag) { return count_typed<decltype(tag)>(c, result, count); });
}

}  // namespace braid::bench
