// What the source files of braid's Python module (_braid) share: tensors in and out through
// DLPack, argument parsing (dtypes, reduction ops, timeouts), the exception classes, and the
// GIL rules below. docs/python.md describes the module from the user's side.
//
// Note [GIL]: every call that can block (a collective, a gather, an optimizer step, file I/O,
// the collective constructors) runs with the GIL released, so other Python threads go on
// and braid's communication threads never wait for the interpreter. Memory a Python producer
// lent through DLPack is given back by calling the producer's deleter with the GIL held
// (PyGILState_Ensure), from whichever thread drops the last braid reference: an async call's
// tensors are let go on the group's communication thread. Objects whose destructor may wait
// for such a thread (a ProcessGroup draining its async calls, FlatParameters joining its
// communication thread) are released with the GIL released too (release_without_gil).
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "braid/comm/types.h"
#include "braid/core/dtype.h"
#include "braid/tensor/tensor.h"

namespace braid::python {

namespace py = pybind11;

// How a call uses an array it is given.
enum class Access : uint8_t {
  kRead,   // read only (inputs, initial values, gradients): a torch tensor that requires grad
           // is detached first (the values are the same memory)
  kWrite,  // written in place (collective outputs)
};

// A braid::Tensor viewing the memory of `obj`, without a copy: a braid.Tensor, any object
// with __dlpack__ (numpy arrays, torch tensors, ...) or an unconsumed "dltensor" capsule
// (torch.utils.dlpack.to_dlpack). The producer stays alive until the last braid reference to
// the memory goes (the capsule is renamed "used_dltensor" as the protocol says). Strides are
// kept (braid checks contiguity where a call needs it). `what` names the argument in errors:
// kInvalidArgument for an object that is none of these, kNotSupported for a dtype or device
// braid has no equivalent of.
Tensor tensor_from_object(py::handle obj, const char* what, Access access);

// A new "dltensor" capsule whose DLManagedTensor keeps `t` alive (zero-copy). CPU tensors
// only; kNotSupported for fp8 (no DLPack 0.6 code).
py::capsule to_dlpack_capsule(Tensor t);

// "f32", "bf16", torch's "float32", "bfloat16", ... (parse_dtype).
DType dtype_arg(std::string_view name);
// "sum", "prod", "min", "max", "avg"; kInvalidArgument naming `name` otherwise.
ReduceOp reduce_op_arg(std::string_view name);
// Seconds (fractions allowed) to the milliseconds braid's options take; None stays unset.
// Non-positive values pass through so that braid's own check names them.
std::optional<std::chrono::milliseconds> timeout_arg(const std::optional<double>& seconds);

// A shared_ptr to the same object whose last release drops `p` with the GIL released when
// the releasing thread holds it (Note [GIL]).
template <typename T>
std::shared_ptr<T> release_without_gil(std::shared_ptr<T> p) {
  T* raw = p.get();
  struct Release {
    std::shared_ptr<T> keep;
    void operator()(T*) {
      if (PyGILState_Check()) {
        py::gil_scoped_release unlocked;
        keep.reset();
      } else {
        keep.reset();
      }
    }
  };
  return std::shared_ptr<T>(raw, Release{std::move(p)});
}

// The parts of the module, registered by PYBIND11_MODULE in module.cc.
void register_errors(py::module_& m);
void register_tensor(py::module_& m);
void register_comm(py::module_& m);
void register_io(py::module_& m);
void register_zero(py::module_& m);

}  // namespace braid::python
