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
BatchSampler = _C.data.BatchSampler


# Note [Samplers with a torch.Generator]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# actorch's random samplers draw from a generator of their own, seeded by `seed=` (beyond
# torch), in C++, so the C++ loader iterates them without the GIL. torch's take `generator=`, a
# torch.Generator whose draws (torch.randperm, torch.multinomial) a user may have matched against
# a torch run. Given one, the class returns torch's own sampler over it, which the loader takes
# as any Python sampler: the same indices as torch's, epoch for epoch, at the cost of iterating
# it under the GIL. Both at once is an error: they are two answers to one question.
def _torch_sampler(name, generator, seed, make):
    if generator is None:
        return None
    if seed is not None:
        raise ValueError(f"{name}: pass seed= (actorch's generator) or generator= (a "
                         "torch.Generator, for torch's order), not both")
    try:
        import torch.utils.data as torch_data
    except ImportError:
        raise ValueError(f"{name}: generator= is a torch.Generator, and torch is not installed; "
                         "pass seed= instead") from None
    return make(torch_data)


class RandomSampler(_C.data.RandomSampler):
    """torch.utils.data.RandomSampler's arguments; seed= (beyond torch) seeds actorch's own
    generator, generator= gives torch's sampler (Note [Samplers with a torch.Generator])."""

    def __new__(cls, data_source, replacement=False, num_samples=None, generator=None, *,
                seed=None):
        theirs = _torch_sampler("RandomSampler", generator, seed, lambda t: t.RandomSampler(
            data_source, replacement, num_samples, generator))
        return super().__new__(cls) if theirs is None else theirs

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None, *,
                 seed=None):
        _C.data.RandomSampler.__init__(self, data_source, replacement, num_samples, seed)


class SubsetRandomSampler(_C.data.SubsetRandomSampler):
    """torch.utils.data.SubsetRandomSampler's arguments, with seed= as RandomSampler's."""

    def __new__(cls, indices, generator=None, *, seed=None):
        theirs = _torch_sampler("SubsetRandomSampler", generator, seed,
                                lambda t: t.SubsetRandomSampler(indices, generator))
        return super().__new__(cls) if theirs is None else theirs

    def __init__(self, indices, generator=None, *, seed=None):
        _C.data.SubsetRandomSampler.__init__(self, list(indices), seed)


class WeightedRandomSampler(_C.data.WeightedRandomSampler):
    """torch.utils.data.WeightedRandomSampler's arguments, with seed= as RandomSampler's."""

    def __new__(cls, weights, num_samples, replacement=True, generator=None, *, seed=None):
        theirs = _torch_sampler("WeightedRandomSampler", generator, seed,
                                lambda t: t.WeightedRandomSampler(weights, num_samples,
                                                                  replacement, generator))
        return super().__new__(cls) if theirs is None else theirs

    def __init__(self, weights, num_samples, replacement=True, generator=None, *, seed=None):
        _C.data.WeightedRandomSampler.__init__(self, [float(w) for w in weights], num_samples,
                                               replacement, seed)


def _default_group():
    """torch.distributed's default group's (world size, rank) when one is initialized, whichever
    backend made it ("actorch", "gloo", "nccl"), else None (then actorch's C++ default group, or
    an error naming what to pass)."""
    import sys
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_world_size(), dist.get_rank()


class DistributedSampler(_C.data.DistributedSampler):
    """torch.utils.data.DistributedSampler: num_replicas and rank default to torch.distributed's
    default group, whichever backend made it, as torch's do (or to actorch's C++ group)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            group = _default_group()
            if group is not None:
                num_replicas = group[0] if num_replicas is None else num_replicas
                rank = group[1] if rank is None else rank
        if num_replicas is not None and rank is not None and not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        _C.data.DistributedSampler.__init__(self, dataset, num_replicas, rank, shuffle, seed,
                                            drop_last)


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
