// braid's Python extension module, braid._braid (docs/python.md). The package braid
// (bindings/python/braid/__init__.py) re-exports it. Built with pybind11: Debian ships it for
// its python3 (nanobind is not packaged there).
#include "module.h"
#include "braid/core/config.h"

PYBIND11_MODULE(_braid, m) {
  m.doc() = "braid: collectives, ZeRO sharding and safetensors I/O on DLPack arrays";
  m.attr("__version__") = BRAID_VERSION_STRING;
  braid::python::register_errors(m);
  braid::python::register_tensor(m);
  braid::python::register_comm(m);
  braid::python::register_io(m);
  braid::python::register_zero(m);
}
