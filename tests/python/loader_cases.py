"""What the loader tests share: datasets written as PyTorch users write them, and a comparison of
batches that holds tensors to their dtype and values and containers to their type."""
import collections
import multiprocessing
import os

import numpy as np
import pytest
import torch

import actorch

Point = collections.namedtuple("Point", "x y")

# Under AddressSanitizer a forked child can deadlock in GCC 12's allocator, whose lock another
# thread of the parent (torch's among them) may hold at the fork (Note [Worker processes] in
# actors/loader/worker_process.cpp): worker processes are tested in the other presets.
processes = pytest.mark.skipif(os.environ.get("ACTORCH_SANITIZERS") == "address",
                               reason="fork under ASan: the allocator is not fork-safe")

if os.environ.get("ACTORCH_SANITIZERS") == "address":
    # The same holds for torch's own reference loaders, whose workers may be forked while the
    # queue feeder thread of another torch iterator runs (zip(loader, loader)): one run in some 80
    # under load hung with torch's main process polling for its workers' batches. Under ASan they
    # start their workers from a fork server, a process of one thread, unless a test names a
    # context.
    _torch_loader_init = torch.utils.data.DataLoader.__init__

    def _init_with_a_fork_server(self, *args, **kwargs):
        if kwargs.get("num_workers", 0) > 0 and kwargs.get("multiprocessing_context") is None:
            kwargs["multiprocessing_context"] = "forkserver"
        _torch_loader_init(self, *args, **kwargs)

    torch.utils.data.DataLoader.__init__ = _init_with_a_fork_server
    # Imported once by the server, not by each worker.
    multiprocessing.set_forkserver_preload(["numpy", "torch", "actorch", "loader_cases"])

# Where the workers run: no workers, worker processes (actorch's default for a Python dataset,
# as torch's), worker threads.
WORKERS = [pytest.param(0, None, id="no-workers"),
           pytest.param(2, None, id="processes", marks=processes),
           pytest.param(2, "thread", id="threads")]
# The same and worker processes started as new interpreters (multiprocessing_context="spawn"), for
# what depends on how a worker starts: what it sees of the dataset (a pickled copy), worker_info,
# a collate_fn or an exception that crosses pickled. Once started, a spawned worker loads and
# collates with the code a forked one runs, and each spawned worker (torch's reference loader's
# too) imports torch afresh, 2-3 s on a 2-core machine: with spawn in every comparison this file
# took 520 s of CI's 940 s Release stage, against its 600 s limit. test_loader_workers.py tests
# spawned workers' own behaviour (Note [Spawned workers]).
WORKERS_AND_SPAWN = WORKERS + [pytest.param(2, "spawn", id="spawn", marks=processes)]


class Squares(torch.utils.data.Dataset):
    """A map-style dataset of (index, index squared as float, an array, a string)."""

    def __init__(self, n=23):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i, float(i * i), np.full((2, 3), i, dtype=np.float32), f"s{i}"


class Nested(torch.utils.data.Dataset):
    """Every type default_collate takes, nested."""

    def __len__(self):
        return 9

    def __getitem__(self, i):
        return {
            "array": np.arange(4, dtype=np.int32) + i,
            "tensor": torch.full((2,), float(i), dtype=torch.float16),
            "int": i, "float": i / 4, "bool": i % 2 == 0, "str": f"n{i}",
            "np_scalar": np.float32(i) / 2,
            "point": Point(i, np.int64(2 * i)),
            "list": [i, [i + 1, f"deep{i}"]],
            "tuple": (torch.tensor([i]), i),
        }


class Stream(torch.utils.data.IterableDataset):
    """An iterable dataset that shards itself with torch's get_worker_info()."""

    def __init__(self, n=30):
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


class ActorchStream(Stream):
    """The same, through actorch.data.get_worker_info() (which worker threads answer too)."""

    def __iter__(self):
        info = actorch.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


class Encoding(collections.UserDict):
    """As transformers' BatchEncoding, what a tokenizer returns: a UserDict of lists."""

    def __init__(self, data=None):
        super().__init__(data)


class Tags(list):
    """A list of the user's."""


class Containers(torch.utils.data.Dataset):
    """Container types default_collate keeps by calling them on the collated contents, or
    replaces by a dict or list where they refuse that (defaultdict, range)."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return {
            "encoding": Encoding({"input_ids": [101, i, 102], "attention_mask": [1, 1, i % 2]}),
            "ordered": collections.OrderedDict([("z", i), ("a", f"s{i}")]),
            "default": collections.defaultdict(list, {"x": float(i)}),
            "tags": Tags([f"t{i}", i]),
            "user_list": collections.UserList([np.float32(i), [i]]),
            "range": range(i, i + 2),
            "size": torch.Size([i, 2]),
            "nested": [collections.OrderedDict(k=Tags([i]))],
        }


class Rows(torch.utils.data.Dataset):
    """A dataset with __getitems__, as Hugging Face's: torch's loader fetches a batch with one
    call, which here reads a slice of a table, says it was batched, and drops rows whose index
    is a multiple of 5 (as a dataset skipping corrupt records may)."""

    def __init__(self, n=17):
        self.table = np.arange(n * 2, dtype=np.float32).reshape(n, 2)

    def __len__(self):
        return len(self.table)

    def __getitem__(self, i):
        return self.table[i], "one"

    def __getitems__(self, indices):
        rows = self.table[np.asarray(indices)]
        return [(row, "many") for i, row in zip(indices, rows) if i % 5 != 0]


class RowsOptedOut(Rows):
    __getitems__ = None  # torch then fetches with __getitem__


class Shifted(torch.utils.data.Dataset):
    """i + shift: a dataset the program changes between epochs (a curriculum's difficulty)."""

    def __init__(self, n=6):
        self.n, self.shift = n, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i + self.shift


class Growing(torch.utils.data.Dataset):
    """A list that grows between epochs (active learning adds what it labelled)."""

    def __init__(self):
        self.items = list(range(4))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Records(torch.utils.data.Dataset):
    """A dataset keyed by name, as a dict of records or a key-value store is: __getitem__ takes
    the keys its sampler yields (str), and a missing one raises KeyError."""

    def __init__(self, n=12):
        self.records = {f"r{i:02d}": (i, np.full(3, i, dtype=np.int64)) for i in range(n)}

    def __len__(self):
        return len(self.records)

    def __getitem__(self, key):
        return self.records[key]


class Mosaic(torch.utils.data.Dataset):
    """YOLOX's pattern: its batch sampler yields (mosaic, index) tuples, __getitem__ takes an int
    or such a tuple; and Python's negative indices, which a list's __getitem__ takes."""

    def __init__(self, n=10):
        self.items = [np.arange(4, dtype=np.float32) + i for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, key):
        mosaic, i = key if isinstance(key, tuple) else (False, key)
        return self.items[i] * (-1 if mosaic else 1), i


def assert_same(got, want, where="batch"):
    """got (actorch's) equals want (torch's): the same container types, tensors of the same
    dtype, shape and values, the same numbers and strings."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got)} instead of a tensor"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} vs {want.dtype}"
        assert got.shape == want.shape, f"{where}: shape {got.shape} vs {want.shape}"
        assert torch.equal(got, want), f"{where}: {got} vs {want}"
        return
    assert type(got) is type(want), f"{where}: {type(got)} vs {type(want)}"
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} vs {want.dtype}"
        assert np.array_equal(got, want), f"{where}: {got} vs {want}"
        assert got.flags.writeable == want.flags.writeable, f"{where}: writeable"
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} vs {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{where}: {len(got)} vs {len(want)} items"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif hasattr(want, "__dict__"):  # a class of the user's: its attributes
        assert_same(vars(got), vars(want), f"{where}.__dict__")
    else:
        assert got == want, f"{where}: {got!r} vs {want!r}"


def both(dataset, **kwargs):
    """The batches of torch's DataLoader and of actorch's, given the same arguments (actorch's
    multiprocessing_context may be 'thread', which torch's gets as None)."""
    torch_kwargs = dict(kwargs)
    if torch_kwargs.get("multiprocessing_context") == "thread":
        torch_kwargs["multiprocessing_context"] = None
    return (list(torch.utils.data.DataLoader(dataset, **torch_kwargs)),
            list(actorch.DataLoader(dataset, **kwargs)))


def flatten(batches):
    """The samples of a list of index batches (tensors), for a multiset comparison."""
    return sorted(v for b in batches for v in (b.tolist() if isinstance(b, torch.Tensor) else b))


def pid_of_worker(_):
    return os.getpid()
