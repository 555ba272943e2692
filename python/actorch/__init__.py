"""actorch for PyTorch users: actorch's data loader and tensors from Python.

`actorch.DataLoader` takes what `torch.utils.data.DataLoader` takes (your own Python datasets,
samplers and collate functions, or actorch's C++ datasets) and yields torch tensors; its workers
are processes or threads (see actorch.data.dataloader). The compiled half is actorch._C.
"""
from . import _C
from ._C import Error, Tensor, arange, from_dlpack, manual_seed
from . import data, distributed, transforms
from .data.dataloader import DataLoader
from .serialization import load, save

distributed.register()  # torch.distributed's backend "actorch", where torch is

__all__ = ["DataLoader", "Error", "Tensor", "arange", "data", "distributed", "from_dlpack",
           "load", "manual_seed", "save", "transforms"]
