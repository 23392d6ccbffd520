// Shape helpers: element counts, contiguous strides, broadcasting.
#include <limits>
#include <sstream>

#include "braid/core/error.h"
#include "braid/tensor/shape_checks.h"
#include "braid/tensor/tensor.h"

namespace braid {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    BRAID_CHECK(shape[i] >= 0, kInvalidArgument, "shape ", shape_str(shape), ": dimension ", i,
                " is ", shape[i], ", expected >= 0");
    BRAID_CHECK(shape[i] == 0 || n <= std::numeric_limits<int64_t>::max() / shape[i],
                kInvalidArgument, "shape ", shape_str(shape), " has more than 2^63 elements");
    n *= shape[i];
  }
  return n;
}

bool strides_fit(const Shape& shape) {
  int64_t s = 1;
  for (int64_t d : shape) {
    if (d > 1 && s > std::numeric_limits<int64_t>::max() / d) return false;
    s *= d > 1 ? d : 1;
  }
  return true;
}

Strides contiguous_strides(const Shape& shape) {
  // Found by tests/fuzz/object_format_fuzz: an empty tensor's shape overflowed here (UB).
  BRAID_CHECK(strides_fit(shape), kInvalidArgument, "shape ", shape_str(shape),
              ": its strides overflow int64 (the product of its non-zero dimensions is above "
              "2^63 - 1)");
  Strides strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    BRAID_CHECK(da == db || da == 1 || db == 1, kInvalidArgument, "shapes ", shape_str(a), " and ",
                shape_str(b), " do not broadcast: dimension ", i, " is ", da, " vs ", db,
                " (expected equal sizes or 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace braid
