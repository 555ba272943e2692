// actorch.transforms: torchvision's per-sample transforms, in C++ (core/data/transforms.hpp),
// callable from Python on an array and given to TransformedDataset; Lambda wraps Python code.
#include <pybind11/stl.h>

#include "python/src/bindings.hpp"
#include "python/src/convert.hpp"
#include "python/src/transform.hpp"

namespace actorch::python {

void bind_transforms(py::module_& tf_m) {
  namespace tf = data::transforms;
  py::class_<py_transform>(tf_m, "Transform")
      .def("__call__", [](const py_transform& t, const py::object& image) {
        return t.fn(tensor_from_dlpack(image));
      });
  auto crop_of = [](const std::vector<int64_t>& size, const char* who) {
    ACTORCH_CHECK(size.size() == 1 || size.size() == 2, who,
                  ": size is one number or (height, width), got ", size.size(), " numbers");
    return size.size() == 1 ? tf::crop_size(size[0]) : tf::crop_size(size[0], size[1]);
  };
  tf_m.def(
      "Compose",
      [](const std::vector<py_transform>& ts) {
        std::vector<tf::transform> fns;
        for (const auto& t : ts)
          fns.push_back(t.fn);
        return py_transform{tf::compose(std::move(fns))};
      },
      py::arg("transforms"));
  tf_m.def(
      "Normalize",
      [](std::vector<double> mean, std::vector<double> std) {
        return py_transform{tf::normalize(std::move(mean), std::move(std))};
      },
      py::arg("mean"), py::arg("std"));
  tf_m.def(
      "RandomCrop",
      [crop_of](const std::vector<int64_t>& size, std::vector<int64_t> padding, bool pad_if_needed,
                double fill) {
        return py_transform{tf::random_crop(
            crop_of(size, "RandomCrop"),
            {.padding = std::move(padding), .pad_if_needed = pad_if_needed, .fill = fill})};
      },
      py::arg("size"), py::arg("padding") = std::vector<int64_t>{},
      py::arg("pad_if_needed") = false, py::arg("fill") = 0.0);
  tf_m.def(
      "CenterCrop",
      [crop_of](const std::vector<int64_t>& size) {
        return py_transform{tf::center_crop(crop_of(size, "CenterCrop"))};
      },
      py::arg("size"));
  tf_m.def(
      "Resize",
      [](const py::object& size, std::optional<int64_t> max_size, bool antialias) {
        const std::vector<int64_t> s = py::isinstance<py::int_>(size)
                                           ? std::vector<int64_t>{size.cast<int64_t>()}
                                           : size.cast<std::vector<int64_t>>();
        return py_transform{tf::resize(s, {.max_size = max_size, .antialias = antialias})};
      },
      py::arg("size"), py::arg("max_size") = py::none(), py::arg("antialias") = true);
  tf_m.def(
      "RandomHorizontalFlip", [](double p) { return py_transform{tf::random_horizontal_flip(p)}; },
      py::arg("p") = 0.5);
  tf_m.def(
      "Lambda",
      [](py::object fn) {
        // The slow path (Note [Python module]): Python code under the GIL, on a worker's thread.
        auto held = std::make_shared<gil_object>(std::move(fn));
        return py_transform{tf::lambda_([held](const tensor& t) {
          gil_lock gil;
          return tensor_from_dlpack(held->obj(py::cast(t)));
        })};
      },
      py::arg("fn"));
}

} // namespace actorch::python
