// A transform as Python holds it: the C++ function for tensors, which runs on the loader's
// workers without the GIL (unless it is a Lambda over Python code), and the same transform as
// steps on decoded images (torchvision's PIL path), where it has that form. Made in
// transforms.cpp, taken by TransformedDataset in data.cpp and ImageFolder in vision.cpp.
#pragma once

#include <optional>
#include <vector>

#include <pybind11/pybind11.h>

#include "core/data/transforms.hpp"
#include "core/data/vision/transforms.hpp"

namespace actorch::python {

struct py_transform {
  data::transforms::transform fn;
  /// The transform on images; nullopt for one that takes tensors only.
  std::optional<std::vector<data::vision::step>> steps;
};

/// A PIL image (converted to RGB unless it is RGB or L) as a decoded image. @pre the GIL.
data::vision::image image_from_pil(const pybind11::handle& pil);
/// A decoded image as a PIL image (mode RGB or L). @pre the GIL.
pybind11::object image_to_pil(const data::vision::image& img);
/// Whether `obj` is a PIL image (False when PIL is not installed). @pre the GIL.
bool is_pil_image(const pybind11::handle& obj);

} // namespace actorch::python
