// Tensors between Python and braid through DLPack 0.6 (/usr/include/dlpack/dlpack.h), both
// ways without a copy, and the braid.Tensor class (docs/python.md, "Tensors and DLPack").
//
// In: tensor_from_object takes a braid.Tensor, an object with __dlpack__ or a "dltensor"
// capsule, renames the capsule "used_dltensor" and wraps the DLTensor's memory with
// Tensor::from_blob; the deleter hands the DLManagedTensor back to its producer with the GIL
// held (Note [GIL], module.h). Out: braid.Tensor.__dlpack__ returns a "dltensor" capsule whose
// DLManagedTensor holds the braid::Tensor (and so its storage) until the consumer's deleter
// runs; the capsule's destructor frees it only when no consumer took it.
#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "dlpack_tensor.h"
#include "module.h"

namespace braid::python {
namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";
bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Gives a consumed DLManagedTensor back to its producer (Note [GIL]). Once the interpreter
// is shutting down the producer's deleter may no longer touch Python: the memory is left to
// the process's exit instead.
void return_to_producer(DLManagedTensor* m) {
  if (m == nullptr || m->deleter == nullptr) return;
  if (!Py_IsInitialized() || interpreter_finalizing()) return;
  PyGILState_STATE state = PyGILState_Ensure();
  m->deleter(m);
  PyGILState_Release(state);
}

// The capsule of `obj`: itself, or what its __dlpack__ returns. A CUDA producer is asked
// again with stream=1, to order its work before the legacy default stream, on which braid's
// GPU backends run calls made without a stream. (Asking __dlpack_device__ first would cost
// every cpu call a Python method call: 2.5 us of torch's 1.13 code, a third of a small
// all_reduce.)
py::object capsule_of(py::handle obj, const char* what, Access access) {
  if (PyCapsule_CheckExact(obj.ptr())) return py::reinterpret_borrow<py::object>(obj);
  py::object source = py::reinterpret_borrow<py::object>(obj);
  if (access == Access::kRead) {
    py::object requires_grad = py::getattr(obj, "requires_grad", py::none());
    if (!requires_grad.is_none() && PyObject_IsTrue(requires_grad.ptr()) == 1) {
      source = obj.attr("detach")();  // torch refuses to export tensors that require grad
    }
  }
  py::object export_fn = py::getattr(source, "__dlpack__", py::none());
  BRAID_CHECK(!export_fn.is_none(), kInvalidArgument, what,
              ": expected an array with __dlpack__ (numpy array, torch tensor, braid.Tensor) or "
              "a DLPack capsule, got an object of type '",
              std::string(py::str(py::type::handle_of(obj).attr("__name__"))), "'");
  py::object capsule = export_fn();
  if (PyCapsule_IsValid(capsule.ptr(), kCapsuleName)) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
    if (m != nullptr && m->dl_tensor.device.device_type == kDLCUDA) {
      return export_fn(py::arg("stream") = 1);  // the first capsule frees itself unconsumed
    }
  }
  return capsule;
}

// The capsule destructor of the DLPack Python specification: frees the tensor only when no
// consumer renamed the capsule, and keeps any exception being raised.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kUsedCapsuleName)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (m == nullptr) {
    PyErr_WriteUnraisable(capsule);
  } else if (m->deleter != nullptr) {
    m->deleter(m);
  }
  PyErr_Restore(type, value, traceback);
}

py::tuple int_tuple(const std::vector<int64_t>& v) {
  py::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = py::int_(v[i]);
  return t;
}

// numpy's type string of a dtype numpy has (little-endian host: braid runs on x86-64 and
// aarch64); kNotSupported for bf16 and fp8.
std::string numpy_typestr(DType d) {
  switch (d) {
    case DType::kF64:
      return "<f8";
    case DType::kF32:
      return "<f4";
    case DType::kF16:
      return "<f2";
    case DType::kI64:
      return "<i8";
    case DType::kI32:
      return "<i4";
    case DType::kI16:
      return "<i2";
    case DType::kI8:
      return "|i1";
    case DType::kU8:
      return "|u1";
    case DType::kBool:
      return "|b1";
    default:
      break;
  }
  BRAID_FAIL(kNotSupported, "__array_interface__: numpy has no dtype ", dtype_name(d),
             "; view it through DLPack instead (torch.utils.dlpack.from_dlpack)");
}

// The array interface (version 3): numpy.asarray(t) is a writable view that keeps `t` alive.
// numpy 1.x makes arrays from DLPack read-only, so this is the way to write from numpy.
py::dict array_interface(const Tensor& t) {
  BRAID_CHECK(t.device().is_cpu(), kNotSupported, "__array_interface__: tensor on ",
              t.device().str(), "; only cpu tensors have one");
  py::dict d;
  d["version"] = 3;
  d["shape"] = int_tuple(t.shape());
  d["typestr"] = numpy_typestr(t.dtype());
  std::vector<int64_t> byte_strides = t.strides();
  for (int64_t& s : byte_strides) s *= static_cast<int64_t>(t.element_size());
  d["strides"] = int_tuple(byte_strides);
  d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(t.data_ptr()), false);
  return d;
}

Shape shape_arg(py::handle shape) {
  if (py::isinstance<py::int_>(shape)) return {shape.cast<int64_t>()};
  return shape.cast<Shape>();
}

}  // namespace

Tensor tensor_from_object(py::handle obj, const char* what, Access access) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  py::object capsule = capsule_of(obj, what, access);
  BRAID_CHECK(PyCapsule_IsValid(capsule.ptr(), kCapsuleName), kInvalidArgument, what,
              ": the capsule is not an unconsumed DLPack capsule (named 'dltensor'; a capsule "
              "can be consumed once, after which it is named 'used_dltensor')");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  BRAID_CHECK(m != nullptr, kInvalidArgument, what, ": the DLPack capsule holds no tensor");
  // Everything is checked before the capsule is consumed: on an error it stays the producer's.
  Tensor view = dlpack::view_of(m->dl_tensor, what, [m](void*) { return_to_producer(m); });
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);  // braid owns it from here on
  return view;
}

py::capsule to_dlpack_capsule(Tensor t) {
  BRAID_CHECK(t.defined(), kInvalidArgument, "__dlpack__: the tensor is undefined");
  BRAID_CHECK(t.device().is_cpu(), kNotSupported, "__dlpack__: tensor on ", t.device().str(),
              "; braid's Python module exports cpu tensors only");
  DLManagedTensor* managed = dlpack::to_managed(std::move(t));
  PyObject* capsule = PyCapsule_New(managed, kCapsuleName, &capsule_destructor);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

DType dtype_arg(std::string_view name) {
  return parse_dtype(name);
}

ReduceOp reduce_op_arg(std::string_view name) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
    if (reduce_op_name(op) == name) return op;
  }
  BRAID_FAIL(kInvalidArgument, "op '", name,
             "' is not a reduction; expected sum, prod, min, max or avg");
}

std::optional<std::chrono::milliseconds> timeout_arg(const std::optional<double>& seconds) {
  if (!seconds) return std::nullopt;
  double ms = *seconds * 1000.0;
  if (ms > 0 && ms < 1) ms = 1;  // a positive timeout never rounds to "not positive"
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

void register_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", R"(A tensor held by braid (CPU memory), e.g. a parameter of
FlatParameters or a tensor of a loaded safetensors file. Exchange it with numpy or torch through
DLPack without a copy: numpy.from_dlpack(t), torch.utils.dlpack.from_dlpack(t).)")
      .def_property_readonly("shape", [](const Tensor& t) { return int_tuple(t.shape()); })
      .def_property_readonly(
          "strides", [](const Tensor& t) { return int_tuple(t.strides()); }, "Strides in elements.")
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return dtype_name(t.dtype()); },
          "braid's dtype name: 'f32', 'bf16', 'i64', ...")
      .def_property_readonly("device", [](const Tensor& t) { return t.device().str(); })
      .def_property_readonly("numel", &Tensor::numel)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def(
          "__dlpack__",
          [](const Tensor& t, const py::object& stream, const py::object& max_version,
             const py::object& dl_device, const py::object& copy) {
            BRAID_CHECK(stream.is_none(), kInvalidArgument,
                        "__dlpack__: stream must be None for a cpu tensor");
            if (!dl_device.is_none()) {
              py::tuple dev = dl_device;
              BRAID_CHECK(dev.size() == 2 && dev[0].cast<int>() == kDLCPU, kNotSupported,
                          "__dlpack__: dl_device must be the cpu, (1, 0)");
            }
            (void)max_version;  // answered with an unversioned (DLPack 0.6) capsule
            const bool want_copy = !copy.is_none() && copy.cast<bool>();
            return to_dlpack_capsule(want_copy ? t.clone() : t);
          },
          py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
          "A DLPack capsule viewing this tensor's memory (the Python array API's protocol).")
      .def("__dlpack_device__",
           [](const Tensor& t) {
             BRAID_CHECK(t.device().is_cpu(), kNotSupported, "__dlpack_device__: tensor on ",
                         t.device().str(), "; braid's Python module exports cpu tensors only");
             return py::make_tuple(static_cast<int>(kDLCPU), 0);
           })
      .def_property_readonly("__array_interface__", &array_interface,
                             "numpy's array interface: numpy.asarray(t) is a writable view.")
      .def("__repr__", [](const Tensor& t) { return "braid." + t.to_string(); });

  m.def(
      "from_dlpack",
      [](py::handle obj) { return tensor_from_object(obj, "from_dlpack", Access::kWrite); },
      py::arg("array"),
      "A braid.Tensor viewing the memory of any DLPack array (numpy, torch, a capsule): no copy.");
  m.def(
      "zeros",
      [](py::handle shape, std::string_view dtype) {
        return Tensor::zeros(shape_arg(shape), dtype_arg(dtype));
      },
      py::arg("shape"), py::arg("dtype") = "f32", "A new zero-filled braid.Tensor (CPU memory).");
}

}  // namespace braid::python
