// The compiled half of the Python package `actorch` (python/actorch/__init__.py imports it as
// actorch._C): tensors, datasets and samplers, transforms, and the loader under
// actorch.DataLoader, each bound in a file of its own (bindings.hpp). See Note [Python module]
// in loader.cpp.
#include "base/error.hpp"
#include "python/src/bindings.hpp"

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  m.doc() = "actorch's compiled core: tensors, datasets, transforms and the loader";
  py::register_exception<actorch::error>(m, "Error", PyExc_RuntimeError);
  actorch::python::bind_tensor(m);
  auto data = m.def_submodule("data", "datasets, samplers and worker info");
  actorch::python::bind_data(data);
  auto transforms = m.def_submodule("transforms", "torchvision's per-sample transforms, in C++");
  actorch::python::bind_transforms(transforms);
  actorch::python::bind_vision(data);
  actorch::python::bind_loader(m);
  actorch::python::bind_serialize(m);
}
