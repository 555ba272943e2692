"""actorch.data: what torch.utils.data offers, over actorch's C++ loader.

DataLoader takes your own Python datasets (map-style or iterable), samplers and collate_fn, or
the C++ datasets here (NpyDataset, DigitsDataset, TensorDataset, TransformedDataset, and the
image datasets ImageFolder and ImageFiles, which decode JPEG and PNG files), which load without
the GIL. get_worker_info() answers inside a worker as torch's does; frozen() holds a large
list of small Python objects in memory that forked workers share instead of copying.
"""
from .. import _C

Dataset = _C.data.Dataset
NpyDataset = _C.data.NpyDataset
DigitsDataset = _C.data.DigitsDataset
TensorDataset = _C.data.TensorDataset
TransformedDataset = _C.data.TransformedDataset
ImageFolder = _C.data.ImageFolder
ImageFiles = _C.data.ImageFiles
Sampler = _C.data.Sampler
SequentialSampler = _C.data.SequentialSampler
RandomSampler = _C.data.RandomSampler
SubsetRandomSampler = _C.data.SubsetRandomSampler
WeightedRandomSampler = _C.data.WeightedRandomSampler
DistributedSampler = _C.data.DistributedSampler
BatchSampler = _C.data.BatchSampler


class WorkerInfo:
    """What get_worker_info() returns inside a loader worker, as torch's WorkerInfo: `id`
    (0..num_workers-1), `num_workers`, `seed` (the worker's: base seed + id) and `dataset` (the
    loader's dataset object: in a worker process, that process's copy)."""
    __slots__ = ("id", "num_workers", "seed", "dataset")

    def __init__(self, id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return (f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed}, "
                f"dataset={type(self.dataset).__name__})")


def get_worker_info():
    """The worker this code runs in (WorkerInfo), or None outside a loader worker (and with
    num_workers=0, as torch's). Works in worker processes and worker threads alike; torch's own
    torch.utils.data.get_worker_info() answers the same in worker processes only (its answer is
    one per process)."""
    info = _C.data._worker_info()
    return None if info is None else WorkerInfo(*info)


from .frozen import frozen  # noqa: E402
from .dataloader import DataLoader  # noqa: E402

__all__ = ["BatchSampler", "DataLoader", "Dataset", "DigitsDataset", "DistributedSampler",
           "ImageFiles", "ImageFolder", "NpyDataset", "RandomSampler", "Sampler", "SequentialSampler", "SubsetRandomSampler",
           "TensorDataset", "TransformedDataset", "WeightedRandomSampler", "WorkerInfo", "frozen",
           "get_worker_info"]
