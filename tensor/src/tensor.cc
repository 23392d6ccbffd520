// Tensor: factories, metadata, views and copies. Element work goes through the kernel table of
// the tensor's device (braid/kernels/table.h);
// memory through the device's Allocator; copies between devices through DeviceRuntime.
#include "braid/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "dispatch.h"

namespace braid {
using kernels::Op;
using kernels::stream_for;

namespace {

// Bytes a view with this shape, strides and offset reaches in its storage.
size_t reach_bytes(const Shape& shape, const Strides& strides, int64_t offset, size_t elem) {
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return static_cast<size_t>(offset) * elem;
    last += (shape[i] - 1) * strides[i];
  }
  return static_cast<size_t>(last + 1) * elem;
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides,
               int64_t offset)
    : storage_(std::move(storage)),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset) {}

// ---- factories ---------------------------------------------------------------------------

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  // An empty block still records its device (the allocator's empty DataPtr would not).
  DataPtr data = bytes == 0 ? DataPtr(nullptr, device, {}) : get_allocator(device).allocate(bytes);
  auto storage = std::make_shared<Storage>(std::move(data), bytes);
  Strides strides = contiguous_strides(shape);
  return Tensor(std::move(storage), dtype, std::move(shape), std::move(strides), 0);
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  return full(std::move(shape), 0, dtype, device);
}

Tensor Tensor::ones(Shape shape, DType dtype, Device device) {
  return full(std::move(shape), 1, dtype, device);
}

Tensor Tensor::full(Shape shape, Scalar value, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(double start, double end, double step, DType dtype, Device device) {
  BRAID_CHECK(step != 0, kInvalidArgument, "arange: step must be non-zero");
  BRAID_CHECK((end - start) / step >= 0 || start == end, kInvalidArgument, "arange: start ", start,
              ", end ", end, " and step ", step, " give a negative length");
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  std::vector<double> values(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<double>(i) * step;
  Tensor t = from_vector(values, {static_cast<int64_t>(values.size())}, dtype);
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::from_vector(const std::vector<double>& values, Shape shape, DType dtype) {
  const int64_t n = shape_numel(shape);
  BRAID_CHECK(n == static_cast<int64_t>(values.size()), kInvalidArgument,
              "from_vector: ", values.size(), " values do not fill shape ", shape_str(shape), " (",
              n, " elements)");
  Tensor t = empty(std::move(shape), dtype);
  kernels::kernels_for(kCPU).cast(stream_for(kCPU), values.data(), DType::kF64, t.data_ptr(), dtype,
                                  n, kernels::CastMode::kDefault);
  return t;
}

Tensor Tensor::from_blob(void* data, Shape shape, DType dtype, Device device,
                         std::function<void(void*)> deleter, std::optional<Strides> strides) {
  const int64_t numel = shape_numel(shape);  // also rejects negative dimensions
  Strides s = strides ? std::move(*strides) : contiguous_strides(shape);
  BRAID_CHECK(s.size() == shape.size(), kInvalidArgument, "from_blob: ", s.size(),
              " strides for shape ", shape_str(shape), " (expected ", shape.size(), ")");
  for (size_t i = 0; i < s.size(); ++i) {
    BRAID_CHECK(s[i] >= 0, kInvalidArgument, "from_blob: stride ", s[i], " of dimension ", i,
                " is negative");
  }
  BRAID_CHECK(data != nullptr || numel == 0 || device.is_meta(), kInvalidArgument,
              "from_blob: data is null for a tensor of shape ", shape_str(shape));
  const size_t bytes = reach_bytes(shape, s, 0, dtype_size(dtype));
  auto storage = std::make_shared<Storage>(DataPtr(data, device, std::move(deleter)), bytes);
  return Tensor(std::move(storage), dtype, std::move(shape), std::move(s), 0);
}

// ---- metadata ----------------------------------------------------------------------------

void Tensor::check_defined(const char* what) const {
  BRAID_CHECK(storage_ != nullptr, kInvalidArgument, what, ": the tensor is undefined");
}

DType Tensor::dtype() const {
  check_defined("dtype()");
  return dtype_;
}
Device Tensor::device() const {
  check_defined("device()");
  return storage_->device();
}
const Shape& Tensor::shape() const {
  check_defined("shape()");
  return shape_;
}
const Strides& Tensor::strides() const {
  check_defined("strides()");
  return strides_;
}
int64_t Tensor::offset() const {
  check_defined("offset()");
  return offset_;
}
int Tensor::dim() const {
  check_defined("dim()");
  return static_cast<int>(shape_.size());
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("storage()");
  return storage_;
}

int Tensor::wrap_dim(int d, const char* what, int ndim_extra) const {
  const int n = dim() + ndim_extra;
  BRAID_CHECK(d >= -n && d < n, kOutOfRange, what, ": dimension ", d, " is out of range for a ",
              dim(), "-d tensor (expected ", -n, " to ", n - 1, ")");
  return d < 0 ? d + n : d;
}

int64_t Tensor::size(int d) const {
  return shape_[wrap_dim(d, "size")];
}
int64_t Tensor::stride(int d) const {
  return strides_[wrap_dim(d, "stride")];
}
int64_t Tensor::numel() const {
  return shape_numel(shape());
}

bool Tensor::is_contiguous() const {
  check_defined("is_contiguous()");
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (shape_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr()");
  char* base = static_cast<char*>(storage_->data());
  if (base == nullptr) return nullptr;
  return base + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void Tensor::check_dtype(DType expected, const char* what) const {
  BRAID_CHECK(dtype() == expected, kInvalidArgument, what, ": expected dtype ", expected, ", got ",
              dtype_);
}

// ---- views -------------------------------------------------------------------------------

Tensor Tensor::slice(int d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, "slice");
  BRAID_CHECK(step > 0, kInvalidArgument, "slice: step ", step, " must be positive");
  const int64_t n = shape_[d];
  auto clamp = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  start = clamp(start);
  end = std::max(clamp(end), start);
  Shape shape = shape_;
  Strides strides = strides_;
  shape[d] = (end - start + step - 1) / step;
  strides[d] = strides_[d] * step;
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides),
                offset_ + start * strides_[d]);
}

Tensor Tensor::narrow(int d, int64_t start, int64_t length) const {
  const int w = wrap_dim(d, "narrow");
  if (start < 0) start += shape_[w];
  BRAID_CHECK(start >= 0 && length >= 0 && start + length <= shape_[w], kOutOfRange,
              "narrow: start ", start, " and length ", length, " do not fit dimension ", w,
              " of size ", shape_[w]);
  return slice(w, start, start + length);
}

Tensor Tensor::select(int d, int64_t index) const {
  d = wrap_dim(d, "select");
  const int64_t n = shape_[d];
  BRAID_CHECK(index >= -n && index < n, kOutOfRange, "select: index ", index,
              " is out of range for dimension ", d, " of size ", n);
  if (index < 0) index += n;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides),
                offset_ + index * strides_[d]);
}

namespace {

// Resolves one -1 in `shape` against numel; checks the element count matches.
Shape infer_shape(Shape shape, int64_t numel, const Shape& from) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      BRAID_CHECK(infer < 0, kInvalidArgument, "view ", shape_str(shape),
                  ": only one dimension can be -1");
      infer = static_cast<int>(i);
    } else {
      BRAID_CHECK(shape[i] >= 0, kInvalidArgument, "view ", shape_str(shape), ": dimension ", i,
                  " is ", shape[i]);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    BRAID_CHECK(known != 0 && numel % known == 0, kInvalidArgument, "view: shape ",
                shape_str(shape), " is invalid for a tensor of shape ", shape_str(from), " (",
                numel, " elements)");
    shape[infer] = numel / known;
    known *= shape[infer];
  }
  BRAID_CHECK(known == numel, kInvalidArgument, "view: shape ", shape_str(shape),
              " is invalid for a tensor of shape ", shape_str(from), " (", numel, " elements)");
  return shape;
}

// Strides for viewing (old_shape, old_strides) as new_shape without copying, as
// torch's computeStride does; nullopt when the memory layout does not allow it.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides,
                                    const Shape& new_shape) {
  Strides out(new_shape.size());
  if (old_shape.empty()) {
    std::fill(out.begin(), out.end(), 1);
    return out;
  }
  const int64_t numel = shape_numel(old_shape);
  if (numel == 0) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 ||
        (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor Tensor::view(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), shape_);
  auto strides = view_strides(shape_, strides_, shape);
  BRAID_CHECK(strides.has_value(), kInvalidArgument, "view: a tensor of shape ", shape_str(shape_),
              " and strides ", shape_str(strides_), " cannot be viewed as ", shape_str(shape),
              " without a copy; use reshape()");
  return Tensor(storage_, dtype_, std::move(shape), std::move(*strides), offset_);
}

Tensor Tensor::reshape(Shape shape) const {
  shape = infer_shape(std::move(shape), numel(), shape_);
  if (auto strides = view_strides(shape_, strides_, shape)) {
    return Tensor(storage_, dtype_, std::move(shape), std::move(*strides), offset_);
  }
  return contiguous().view(std::move(shape));
}

Tensor Tensor::permute(const std::vector<int>& dims) const {
  BRAID_CHECK(static_cast<int>(dims.size()) == dim(), kInvalidArgument, "permute: ", dims.size(),
              " dimensions given for a ", dim(), "-d tensor");
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size());
  Strides strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int d = wrap_dim(dims[i], "permute");
    BRAID_CHECK(!seen[d], kInvalidArgument, "permute: dimension ", d, " appears twice");
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::transpose(int d0, int d1) const {
  d0 = wrap_dim(d0, "transpose");
  d1 = wrap_dim(d1, "transpose");
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[d0], shape[d1]);
  std::swap(strides[d0], strides[d1]);
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::expand(Shape shape) const {
  const int n = static_cast<int>(shape.size());
  BRAID_CHECK(n >= dim(), kInvalidArgument, "expand: target ", shape_str(shape),
              " has fewer dimensions than the tensor's ", shape_str(shape_));
  Strides strides(n, 0);
  const int lead = n - dim();
  for (int i = 0; i < n; ++i) {
    if (i < lead) {
      BRAID_CHECK(shape[i] >= 0, kInvalidArgument, "expand: new leading dimension ", i,
                  " cannot be ", shape[i]);
      continue;
    }
    const int64_t have = shape_[i - lead];
    if (shape[i] == -1) shape[i] = have;
    BRAID_CHECK(have == shape[i] || have == 1, kInvalidArgument, "expand: cannot expand ",
                shape_str(shape_), " to ", shape_str(shape), ": dimension ", i, " has size ", have,
                " (expected ", shape[i], " or 1)");
    strides[i] = have == shape[i] ? strides_[i - lead] : 0;
  }
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::unsqueeze(int d) const {
  d = wrap_dim(d, "unsqueeze", 1);
  Shape shape = shape_;
  Strides strides = strides_;
  const int64_t stride = d < dim() ? strides_[d] * shape_[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::squeeze(int d) const {
  d = wrap_dim(d, "squeeze");
  if (shape_[d] != 1) return *this;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset_);
}

// ---- copies ------------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor& Tensor::copy_(const Tensor& src_in) {
  check_defined("copy_ (destination)");
  src_in.check_defined("copy_ (source)");
  Tensor src = src_in.shape() == shape_ ? src_in : src_in.expand(shape_);
  if (numel() == 0 || device().is_meta()) return *this;
  BRAID_CHECK(!src.device().is_meta(), kNotSupported,
              "copy_: the source is a meta tensor, "
              "which has no data");

  // Different devices: stage through contiguous memory and the device runtime.
  if (src.device() != device()) {
    Tensor staged = src.contiguous();
    Tensor landing = (is_contiguous() && dtype_ == staged.dtype_)
                         ? *this
                         : empty(shape_, staged.dtype_, device());
    // On the current stream of the side that is not the host (the destination's between two
    // GPUs), so the copy follows the kernels queued there. When the host is one side it reads or
    // reuses its memory after this returns: wait for the copy (a bounded wait).
    const Device dev = !device().is_host() ? device() : staged.device();
    const Stream s = stream_for(dev);
    copy_bytes(landing.data_ptr(), device(), staged.data_ptr(), staged.device(), staged.nbytes(),
               s);
    if (s.handle != nullptr && (device().is_host() || staged.device().is_host())) {
      device_runtime(dev.type).synchronize_stream(s);
    }
    if (!landing.shares_storage(*this)) copy_(landing);
    return *this;
  }

  // Same device. Overlapping source and destination: copy the source out first.
  if (src.shares_storage(*this)) src = src.clone();
  const int nd = dim();
  const Stream s = stream_for(device());
  if (src.dtype_ == dtype_) {
    if (is_contiguous()) {
      const auto& k = detail::table_for(Op::kCopyStrided, dtype_, "copy_", *this);
      k.copy_strided(s, src.data_ptr(), element_size(), nd, shape_.data(), src.strides_.data(),
                     data_ptr());
    } else {
      const auto& k = detail::table_for(Op::kCopyToStrided, dtype_, "copy_", *this);
      Tensor packed = src.contiguous();
      k.copy_to_strided(s, packed.data_ptr(), element_size(), nd, shape_.data(), data_ptr(),
                        strides_.data());
    }
    return *this;
  }
  const auto& k = detail::table_for(Op::kCast, src.dtype_, "copy_", *this);
  Tensor packed = src.contiguous();
  if (is_contiguous()) {
    k.cast(s, packed.data_ptr(), packed.dtype_, data_ptr(), dtype_, numel(),
           kernels::CastMode::kDefault);
  } else {
    Tensor converted = empty(shape_, dtype_, device());
    k.cast(s, packed.data_ptr(), packed.dtype_, converted.data_ptr(), dtype_, numel(),
           kernels::CastMode::kDefault);
    copy_(converted);  // same dtype now: the strided scatter above
  }
  return *this;
}

Tensor Tensor::to(Device device) const {
  return to(device, dtype());
}
Tensor Tensor::to(DType dtype) const {
  return to(device(), dtype);
}

Tensor Tensor::to(Device device, DType dtype) const {
  if (device == this->device() && dtype == dtype_) return *this;
  Tensor out = empty(shape(), dtype, device);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::fill_(Scalar value) {
  check_defined("fill_");
  if (device().is_meta() || numel() == 0) return *this;
  const auto& k = detail::table_for(Op::kFill, dtype_, "fill_", *this);
  if (is_contiguous()) {
    k.fill(stream_for(device()), data_ptr(), dtype_, numel(), value.to_double());
    return *this;
  }
  Tensor one = empty({}, dtype_, device());
  k.fill(stream_for(device()), one.data_ptr(), dtype_, 1, value.to_double());
  return copy_(one);
}

double Tensor::item() const {
  BRAID_CHECK(numel() == 1, kInvalidArgument, "item: the tensor has ", numel(), " elements (shape ",
              shape_str(shape_), "), expected exactly 1");
  return to_vector()[0];
}

std::vector<double> Tensor::to_vector() const {
  check_defined("to_vector");
  BRAID_CHECK(!device().is_meta(), kNotSupported, "to_vector: meta tensors have no data");
  Tensor host = to(kCPU, DType::kF64).contiguous();
  const auto* p = static_cast<const double*>(host.data_ptr());
  return std::vector<double>(p, p + host.numel());
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.to_string();
}

}  // namespace braid
