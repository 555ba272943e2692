// The _C module's parts, one per area, each adding its classes and functions to the module it
// is given (module.cpp calls them in order: tensors first, which the others use).
#pragma once

#include <pybind11/pybind11.h>

namespace actorch::python {

void bind_tensor(pybind11::module_& m);      // actorch.Tensor, from_dlpack, arange (tensor.cpp)
void bind_data(pybind11::module_& data);     // datasets, samplers, worker info (data.cpp)
void bind_transforms(pybind11::module_& tf); // torchvision's transforms, in C++ (transforms.cpp)
void bind_loader(pybind11::module_& m);      // the loader under actorch.DataLoader (loader.cpp)
void bind_vision(pybind11::module_& data);   // ImageFolder, ImageFiles (vision.cpp)
void bind_serialize(pybind11::module_& m);   // torch.save's format: _torch_load, _torch_save

} // namespace actorch::python
