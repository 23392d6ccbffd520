// braid::Error -> Python exceptions (docs/errors.md, "At the C boundary"; docs/python.md,
// "Errors"). One class per ErrorKind, each derived from braid.BraidError and from the builtin
// exception a Python caller would catch for it, so both `except braid.TimeoutError` and
// `except TimeoutError` work. The exception's text is braid's message() (without the
// "[kind] file:line" prefix what() carries); its `kind` attribute is braid's kind name.
#include <array>

#include "braid/core/error.h"
#include "module.h"

namespace braid::python {
namespace {

struct KindClass {
  ErrorKind kind;
  const char* name;     // attribute of the module
  PyObject* builtin;    // the second base
  const char* summary;  // the class docstring
};

constexpr size_t kNumKinds = static_cast<size_t>(ErrorKind::kInternal) + 1;

// Classes by ErrorKind; created once at import and kept for the life of the process (the
// module is never unloaded).
std::array<PyObject*, kNumKinds> g_classes{};
PyObject* g_base = nullptr;

std::array<KindClass, kNumKinds> kind_classes() {
  return {{
      {ErrorKind::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError,
       "A value passed is wrong (shape, dtype, option, rank); nothing was changed."},
      {ErrorKind::kOutOfRange, "OutOfRangeError", PyExc_IndexError,
       "An index or size is outside what exists; nothing was changed."},
      {ErrorKind::kNotSupported, "NotSupportedError", PyExc_NotImplementedError,
       "A valid request this build, device or dtype cannot serve."},
      {ErrorKind::kIo, "IoError", PyExc_OSError,
       "The OS refused (open, read, write, rename, socket)."},
      {ErrorKind::kCorruptData, "CorruptDataError", PyExc_ValueError,
       "Bytes from outside (a file, a frame) do not parse."},
      {ErrorKind::kTimeout, "TimeoutError", PyExc_TimeoutError,
       "A wait reached its deadline; for collectives the group is no longer usable."},
      {ErrorKind::kPeerLost, "PeerLostError", PyExc_ConnectionError,
       "Another rank died or closed its connection; the group cannot be used again."},
      {ErrorKind::kOutOfMemory, "OutOfMemoryError", PyExc_MemoryError, "An allocation failed."},
      {ErrorKind::kInternal, "InternalError", PyExc_RuntimeError,
       "An invariant broke: a bug in braid (please report it with the message)."},
  }};
}

PyObject* new_class(py::module_& m, const char* name, PyObject* bases, const char* doc,
                    std::string_view kind) {
  const std::string qualified = std::string("braid.") + name;
  py::dict attrs;
  attrs["__doc__"] = doc;
  attrs["kind"] = py::str(kind.data(), kind.size());
  PyObject* cls = PyErr_NewException(qualified.c_str(), bases, attrs.ptr());
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // add_object increments; g_* keep the creation reference
  return cls;
}

}  // namespace

void register_errors(py::module_& m) {
  g_base = new_class(m, "BraidError", PyExc_Exception,
                     "Base class of braid's errors; `kind` names braid's error kind.", "");
  for (const KindClass& k : kind_classes()) {
    py::tuple bases = py::make_tuple(py::handle(g_base), py::handle(k.builtin));
    g_classes[static_cast<size_t>(k.kind)] =
        new_class(m, k.name, bases.ptr(), k.summary, to_string(k.kind));
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const size_t k = static_cast<size_t>(e.kind());
      PyErr_SetString(k < kNumKinds ? g_classes[k] : g_base, e.message().c_str());
    }
  });
}

}  // namespace braid::python
