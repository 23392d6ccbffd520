// braid.load_safetensors / braid.save_safetensors (braid/tensor/safetensors.h; docs/files.md):
// the files transformers and the safetensors package read and write. Loaded tensors are views
// of a private copy-on-write map of the file (no copy; writes never reach the file). Saving
// takes any DLPack arrays, non-contiguous ones included (written in C order).
#include <pybind11/stl.h>

#include <string>

#include "braid/core/error.h"
#include "braid/tensor/safetensors.h"
#include "module.h"

namespace braid::python {

void register_io(py::module_& m) {
  m.def(
      "load_safetensors",
      [](const std::string& path) {
        NamedTensors tensors;
        {
          py::gil_scoped_release unlocked;
          tensors = load_safetensors(path);
        }
        py::dict out;  // file order
        for (auto& [name, t] : tensors) out[py::str(name)] = py::cast(std::move(t));
        return out;
      },
      py::arg("path"),
      "Every tensor of a .safetensors file, a model.safetensors.index.json or a folder holding "
      "one, as {name: braid.Tensor} in file order.");
  m.def(
      "save_safetensors",
      [](const std::string& path, const py::dict& tensors,
         const std::optional<StringMap>& metadata) {
        NamedTensors named;
        named.reserve(tensors.size());
        for (auto [key, value] : tensors) {
          BRAID_CHECK(py::isinstance<py::str>(key), kInvalidArgument,
                      "save_safetensors: tensor names must be str, got ",
                      std::string(py::str(py::type::handle_of(key).attr("__name__"))));
          const std::string name = key.cast<std::string>();
          const std::string what = "save_safetensors: '" + name + "'";
          named.emplace_back(name, tensor_from_object(value, what.c_str(), Access::kRead));
        }
        py::gil_scoped_release unlocked;
        save_safetensors(path, named, metadata.value_or(StringMap{}));
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = py::none(),
      "Writes {name: array} (any DLPack arrays, in dict order) and optional {str: str} metadata "
      "to one .safetensors file, atomically.");
}

}  // namespace braid::python
