// A transform as Python holds it: the C++ function, which runs on the loader's workers without
// the GIL (unless it is a Lambda over Python code). Made in transforms.cpp, taken by
// TransformedDataset in data.cpp.
#pragma once

#include "core/data/transforms.hpp"

namespace actorch::python {

struct py_transform {
  data::transforms::transform fn;
};

} // namespace actorch::python
