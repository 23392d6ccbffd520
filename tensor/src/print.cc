// Tensor printing: "tensor([[1, 2, 3], [4, 5, 6]], dtype=f32)", with "..." replacing the
// middle of any dimension longer than 2 * edge (torch summarises the same way).
#include <sstream>

#include "braid/core/error.h"
#include "braid/tensor/tensor.h"

namespace braid {
namespace {

void print_value(std::ostringstream& out, double v, DType dtype) {
  if (dtype == DType::kBool) {
    out << (v != 0 ? "True" : "False");
  } else if (!is_floating(dtype)) {
    out << static_cast<int64_t>(v);
  } else {
    out << v;
  }
}

// Prints the sub-array at `base` (offset into the contiguous host copy) of dimension d.
void print_dim(std::ostringstream& out, const std::vector<double>& values, const Shape& shape,
               const Strides& strides, size_t d, int64_t base, int64_t edge, DType dtype) {
  if (d == shape.size()) {
    print_value(out, values[static_cast<size_t>(base)], dtype);
    return;
  }
  out << '[';
  const int64_t n = shape[d];
  const bool cut = edge >= 0 && n > 2 * edge;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == edge) {
      out << "..., ";
      i = n - edge - 1;
      continue;
    }
    print_dim(out, values, shape, strides, d + 1, base + i * strides[d], edge, dtype);
    if (i + 1 < n) out << ", ";
  }
  out << ']';
}

}  // namespace

std::string Tensor::to_string(int64_t edge) const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream out;
  out << "tensor(";
  if (device().is_meta()) {
    out << "..., shape=" << shape_str(shape());
  } else {
    const std::vector<double> values = to_vector();
    print_dim(out, values, shape(), contiguous_strides(shape()), 0, 0, edge, dtype());
  }
  out << ", dtype=" << dtype();
  if (!device().is_cpu()) out << ", device=" << device();
  out << ')';
  return out.str();
}

}  // namespace braid
