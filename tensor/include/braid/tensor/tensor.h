// SPDX-License-Identifier: Apache-2.0
// Tensor: reference-counted Storage plus shape, strides and offset (design.md, "Tensor").
// Views (slice, narrow, select, view, permute, transpose, expand, ...) share storage;
// contiguous(), clone(), to() make new storage when they must. from_blob wraps external
// memory with a deleter: the embedding path for framework builders.
//
// Shapes and strides are in elements. A default-constructed Tensor is undefined
// (defined() == false); every other operation on it throws kInvalidArgument.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/device.h"
#include "braid/core/dtype.h"

namespace braid {

class Generator;

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// Number of elements of a shape (1 for a 0-d shape). Throws kInvalidArgument on a negative
// dimension or overflow.
int64_t shape_numel(const Shape& shape);
// Row-major (C order) strides of a shape.
Strides contiguous_strides(const Shape& shape);
// "[2, 3, 4]"
std::string shape_str(const Shape& shape);
// The broadcast of two shapes (numpy rules); throws kInvalidArgument naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Memory owned by one or more tensors. nbytes is what was allocated (or wrapped).
class Storage {
 public:
  Storage(DataPtr data, size_t nbytes) : data_(std::move(data)), nbytes_(nbytes) {}
  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return data_.device(); }

 private:
  DataPtr data_;
  size_t nbytes_;
};

// A number for fill / full / item: holds a double or an int64 exactly.
class Scalar {
 public:
  Scalar(double v) : is_int_(false), d_(v), i_(0) {}   // NOLINT: implicit by design
  Scalar(float v) : Scalar(static_cast<double>(v)) {}  // NOLINT
  Scalar(int v) : Scalar(static_cast<int64_t>(v)) {}   // NOLINT
  Scalar(int64_t v) : is_int_(true), d_(static_cast<double>(v)), i_(v) {}  // NOLINT
  Scalar(bool v) : Scalar(static_cast<int64_t>(v)) {}                      // NOLINT
  bool is_integral() const { return is_int_; }
  double to_double() const { return d_; }
  int64_t to_int() const { return is_int_ ? i_ : static_cast<int64_t>(d_); }

 private:
  bool is_int_;
  double d_;
  int64_t i_;
};

class Tensor {
 public:
  Tensor() = default;

  // ---- factories ----
  static Tensor empty(Shape shape, DType dtype = DType::kF32, Device device = kCPU);
  static Tensor zeros(Shape shape, DType dtype = DType::kF32, Device device = kCPU);
  static Tensor ones(Shape shape, DType dtype = DType::kF32, Device device = kCPU);
  static Tensor full(Shape shape, Scalar value, DType dtype = DType::kF32, Device device = kCPU);
  // [start, end) with step, like torch.arange; dtype i64 unless given.
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::kI64,
                       Device device = kCPU);
  static Tensor arange(int64_t end, DType dtype = DType::kI64) {
    return arange(0, double(end), 1, dtype);
  }
  // Uniform [0, 1) and standard normal from a Philox generator (the default one when null).
  static Tensor rand(Shape shape, DType dtype = DType::kF32, Generator* gen = nullptr);
  static Tensor randn(Shape shape, DType dtype = DType::kF32, Generator* gen = nullptr);
  // Copies host values into a new tensor of `dtype` (converted as cast() does).
  static Tensor from_vector(const std::vector<double>& values, Shape shape,
                            DType dtype = DType::kF32);
  // Wraps external memory. `deleter` runs when the last tensor viewing it goes away
  // (may be empty for borrowed memory the caller keeps alive). Strides default to
  // contiguous; `nbytes` defaults to what shape/strides reach.
  static Tensor from_blob(void* data, Shape shape, DType dtype, Device device = kCPU,
                          std::function<void(void*)> deleter = {},
                          std::optional<Strides> strides = {});

  // ---- metadata ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const;
  Device device() const;
  const Shape& shape() const;
  const Strides& strides() const;
  int64_t offset() const;  // in elements, into the storage
  int dim() const;
  // Size of dimension d; negative d counts from the end. Throws kOutOfRange.
  int64_t size(int d) const;
  int64_t stride(int d) const;
  int64_t numel() const;
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  // True when the two tensors view the same storage.
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }
  const std::shared_ptr<Storage>& storage() const;

  // Pointer to element 0 of this view (nullptr on meta). data<T>() checks T against dtype().
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<T>(), "data<T>()");
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage) ----
  // Elements [start, end) step `step` of dimension d; negative start/end count from the
  // end and are clamped as Python slices are.
  Tensor slice(int d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int d, int64_t start, int64_t length) const;
  Tensor select(int d, int64_t index) const;  // removes dimension d
  // Same elements, new shape (one -1 allowed); needs compatible strides (throws otherwise).
  Tensor view(Shape shape) const;
  // view() when possible, otherwise a contiguous copy.
  Tensor reshape(Shape shape) const;
  Tensor permute(const std::vector<int>& dims) const;
  Tensor transpose(int d0, int d1) const;
  Tensor t() const { return transpose(0, 1); }
  // Broadcasts size-1 dimensions (stride 0); -1 keeps a size; new leading dims allowed.
  Tensor expand(Shape shape) const;
  Tensor unsqueeze(int d) const;
  Tensor squeeze(int d) const;
  Tensor flatten() const { return reshape({numel()}); }

  // ---- copies ----
  // This tensor if contiguous, else a contiguous copy.
  Tensor contiguous() const;
  Tensor clone() const;
  // Copies src into this (shapes must broadcast to this one), converting dtype and device.
  Tensor& copy_(const Tensor& src);
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor& fill_(Scalar value);
  Tensor& zero_() { return fill_(0); }

  // The single element of a 1-element tensor, as double / T.
  double item() const;
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  // Flattened values converted to double (host copy): for tests and small tensors.
  std::vector<double> to_vector() const;

  // "tensor([[1, 2], [3, 4]], dtype=f32)" with at most `edge` items per edge of each dim
  // ("..." between), as torch prints.
  std::string to_string(int64_t edge = 3) const;

  // Throws kInvalidArgument "<what>: expected dtype X, got Y".
  void check_dtype(DType expected, const char* what) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides,
         int64_t offset);
  void check_defined(const char* what) const;
  int wrap_dim(int d, const char* what, int ndim_extra = 0) const;

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace braid
