// actorch.data's image datasets: ImageFolder and ImageFiles over core/data/vision. With
// actorch's transforms they read, decode and transform in the loader's workers without the GIL;
// a Python transform (torchvision's, on PIL images), loader or target_transform runs under the
// GIL, and actorch.DataLoader then loads in worker processes, as for a Python dataset.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "core/data/vision/image_folder.hpp"
#include "core/ops/factory.hpp"
#include "python/src/bindings.hpp"
#include "python/src/convert.hpp"
#include "python/src/transform.hpp"

namespace actorch::python {

namespace {

namespace vs = data::vision;

/// A Python transform, loader or target_transform as the options' functions: each call takes
/// the GIL (keeping the worker thread's state, Note [Worker thread states]).
vs::image_dataset_options options_of(const py::object& transform,
                                     const py::object& target_transform, const py::object& loader,
                                     bool skip, bool fuse) {
  vs::image_dataset_options o;
  o.skip_bad_files = skip;
  o.fuse = fuse;
  if (!transform.is_none()) {
    const auto* t =
        py::isinstance<py_transform>(transform) ? &transform.cast<const py_transform&>() : nullptr;
    if (t != nullptr && t->steps) {
      o.transform = *t->steps;
    } else {
      auto fn = std::make_shared<gil_object>(transform);
      o.image_transform = [fn](vs::image img) {
        gil_lock gil;
        py::object r = fn->obj(image_to_pil(img));
        if (is_pil_image(r))
          r = py::module_::import("numpy").attr("asarray")(r);
        return from_python(r);
      };
    }
  }
  if (!target_transform.is_none()) {
    if (py::isinstance<py_transform>(target_transform)) {
      o.target_transform = target_transform.cast<const py_transform&>().fn;
    } else {
      auto fn = std::make_shared<gil_object>(target_transform);
      o.target_transform = [fn](const tensor& label) {
        gil_lock gil;
        const py::object r = fn->obj(py::int_(label.item<int64_t>()));
        if (py::isinstance<py::bool_>(r) || py::isinstance<py::int_>(r))
          return scalar_tensor(r.cast<int64_t>());
        if (py::isinstance<py::float_>(r))
          return scalar_tensor(r.cast<double>());
        return tensor_from_dlpack(r);
      };
    }
  }
  if (!loader.is_none()) {
    auto fn = std::make_shared<gil_object>(loader);
    o.loader = [fn](const std::string& path) {
      gil_lock gil;
      const py::object r = fn->obj(py::str(path));
      if (is_pil_image(r))
        return image_from_pil(r);
      return vs::image_from_tensor(tensor_from_dlpack(r), "ImageFolder's loader");
    };
  }
  return o;
}

py::list samples_of(const vs::image_files& d) {
  py::list out;
  for (size_t i = 0; i < d.paths().size(); ++i)
    out.append(py::make_tuple(d.paths()[i], d.labels().empty()
                                                ? py::object(py::none())
                                                : py::object(py::int_(d.labels()[i]))));
  return out;
}

} // namespace

void bind_vision(py::module_& data_m) {
  py::class_<vs::image_files, data::dataset, std::shared_ptr<vs::image_files>>(data_m, "ImageFiles")
      .def(py::init([](std::vector<std::string> files, std::optional<std::vector<int64_t>> labels,
                       const py::object& transform, const py::object& target_transform,
                       const py::object& loader, bool skip_bad_files, bool fuse) {
             return std::make_shared<vs::image_files>(
                 std::move(files), labels.value_or(std::vector<int64_t>{}),
                 options_of(transform, target_transform, loader, skip_bad_files, fuse));
           }),
           py::arg("files"), py::arg("labels") = py::none(), py::arg("transform") = py::none(),
           py::arg("target_transform") = py::none(), py::arg("loader") = py::none(), py::kw_only(),
           py::arg("skip_bad_files") = false, py::arg("fuse") = true)
      // torchvision's (image, label) with the label a Python int, so that `label == 0` holds;
      // a target_transform's result stays as it made it. Batches are collated in C++ as before.
      .def("__getitem__",
           [](const vs::image_files& d, int64_t i) {
             py::object s = to_python(d.get(i), {});
             if (d.labels().empty() || d.options().target_transform ||
                 !py::isinstance<py::tuple>(s))
               return s;
             py::tuple t = s;
             if (t.size() != 2)
               return s;
             // The sample's own label: skip_bad_files may have given the next good file's.
             return py::object(py::make_tuple(t[0], t[1].attr("item")()));
           })
      .def_property_readonly("files", &vs::image_files::paths)
      .def_property_readonly("samples", &samples_of)
      .def_property_readonly("bad_files", &vs::image_files::bad_files)
      .def_property_readonly("_python_code", [](const vs::image_files& d) {
        const auto& o = d.options();
        return bool(o.image_transform) || bool(o.loader);
      });
  py::class_<vs::image_folder, vs::image_files, std::shared_ptr<vs::image_folder>>(data_m,
                                                                                   "ImageFolder")
      .def(py::init([](const std::string& root, const py::object& transform,
                       const py::object& target_transform, const py::object& loader,
                       const py::object& is_valid_file, bool skip_bad_files, bool fuse,
                       std::optional<std::vector<std::string>> extensions) {
             std::function<bool(const std::string&)> valid;
             if (!is_valid_file.is_none()) {
               ACTORCH_CHECK(!extensions, "ImageFolder: Both extensions and is_valid_file cannot "
                                          "be None or not None at the same time");
               valid = [&](const std::string& p) { return is_valid_file(p).cast<bool>(); };
             }
             return std::make_shared<vs::image_folder>(
                 root, options_of(transform, target_transform, loader, skip_bad_files, fuse),
                 extensions.value_or(vs::image_extensions()), valid);
           }),
           py::arg("root"), py::arg("transform") = py::none(),
           py::arg("target_transform") = py::none(), py::arg("loader") = py::none(),
           py::arg("is_valid_file") = py::none(), py::kw_only(), py::arg("skip_bad_files") = false,
           py::arg("fuse") = true, py::arg("extensions") = py::none())
      .def_property_readonly("root", &vs::image_folder::root)
      .def_property_readonly("classes", &vs::image_folder::classes)
      .def_property_readonly("class_to_idx", &vs::image_folder::class_to_idx)
      .def_property_readonly("targets", &vs::image_files::labels)
      .def_property_readonly("imgs", &samples_of);
}

} // namespace actorch::python
