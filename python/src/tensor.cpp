// actorch.Tensor for Python: DLPack both ways (numpy.from_dlpack and torch.from_dlpack take it
// without a copy), torch's dtype shortcuts, item() and len().
#include <pybind11/stl.h>

#include "core/dlpack.hpp"
#include "core/ops/factory.hpp"
#include "core/random.hpp"
#include "python/src/bindings.hpp"
#include "python/src/convert.hpp"

namespace actorch::python {

void bind_tensor(py::module_& m) {
  py::class_<tensor>(m, "Tensor")
      .def_property_readonly("shape",
                             [](const tensor& t) { return py::tuple(py::cast(t.sizes())); })
      .def_property_readonly("dtype",
                             [](const tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def(
          "__dlpack__", [](const tensor& t, py::object /*stream*/) { return to_capsule(t); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const tensor& t) {
             if (t.device().is_cuda())
               return py::make_tuple(int(kDLCUDA), t.device().index);
             return py::make_tuple(int(kDLCPU), 0);
           })
      .def("item",
           [](const tensor& t) -> py::object {
             if (is_floating_point(t.dtype()))
               return py::float_(t.item<double>());
             return py::int_(t.item<int64_t>());
           })
      .def("__int__", [](const tensor& t) { return t.item<int64_t>(); })
      .def("__index__", [](const tensor& t) { return t.item<int64_t>(); })
      .def("__float__", [](const tensor& t) { return t.item<double>(); })
      .def("__repr__", [](const tensor& t) { return t.str(); })
      .def("float", &tensor::to_float)
      .def("double", &tensor::to_double)
      .def("half", &tensor::to_half)
      .def("long", &tensor::to_long)
      .def("int", &tensor::to_int)
      .def("short", &tensor::to_short)
      .def("__len__", [](const tensor& t) { return t.dim() == 0 ? 0 : t.size(0); });
  m.def("from_dlpack", &tensor_from_dlpack, py::arg("obj"),
        "A tensor over the memory of `obj` (numpy array, torch tensor, capsule), without a copy");
  m.def("arange", [](int64_t n) { return arange(n); });
  m.def(
      "manual_seed", [](uint64_t seed) { actorch::manual_seed(seed); }, py::arg("seed"),
      "torch.manual_seed for actorch's default generator: the draws of transforms called "
      "outside a loader (a loader seeds each batch's own generator)");
}

} // namespace actorch::python
