"""actorch for PyTorch users: actorch's data loader and tensors from Python.

`actorch.DataLoader` takes what `torch.utils.data.DataLoader` takes (your own Python datasets,
samplers and collate functions, or actorch's C++ datasets) and yields torch tensors; its workers
are processes or threads (see actorch.data.dataloader). The compiled half is actorch._C.
"""
from . import _C
from ._C import Error, Tensor, arange, from_dlpack
from . import data, transforms
from .data.dataloader import DataLoader

__all__ = ["DataLoader", "Error", "Tensor", "arange", "data", "from_dlpack", "transforms"]
