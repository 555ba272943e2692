"""actorch.DataLoader: torch.utils.data.DataLoader's arguments, defaults and errors, over
actorch's C++ loader (actorch._C._Loader).

Where the workers run (num_workers > 0):
- a Python dataset (or a C++ one with Python code in it) loads in worker processes by default, as
  torch's does on Linux: each is forked from its worker's thread on its first batch, collates its
  samples in C++ straight into a shared-memory file, and no tensor is pickled. A worker that dies
  is replaced and its batch loaded again, up to 3 attempts, then the epoch fails naming the
  signal and the batch. One that passes `timeout` is killed and the epoch fails with torch's
  error ("DataLoader timed out after N seconds", then which worker and batch); with
  retry_timeouts=True (beyond torch) it is replaced and its batch loaded again, as a dead one.
- multiprocessing_context="thread" runs them as threads of this process instead: no fork, no
  copy of the batch, but the GIL serialises the Python code. It pays when __getitem__ spends its
  time in code that releases the GIL (numpy on large arrays, file reads, decoding).
- actorch's C++ datasets (NpyDataset, TransformedDataset, ...) load on threads by default,
  without the GIL; "fork" puts them in processes.
- multiprocessing_context="spawn" (or "forkserver", which actorch starts the same way) runs each
  worker process as a new interpreter that rebuilds the dataset, collate_fn and worker_init_fn
  from their pickles (made at each iter(), as torch's, so that workers see the dataset as it is
  then; and once when the DataLoader is made, so an unpicklable one fails there) and
  imports the main module as multiprocessing's spawn does: for a program whose parent must not
  be forked (threads holding locks, a CUDA context). The batches travel as with "fork".

Seeding, as torch's: each iter() draws the epoch's base seed from `generator` (or torch's
default generator), so torch.manual_seed before it repeats the epoch's shuffle and worker
seeds. Worker i's seed is base_seed + i, torch's own value; each worker process seeds
`random`, torch and numpy's global generator from it before worker_init_fn runs, as torch's
worker loop does. shuffle=True samples with torch's own RandomSampler (loader.sampler), iterated
when iter() plans the epoch, after the base seed: the same draws as torch's, so the same seed
gives torch's order, batch for batch. With `seed=` (beyond torch), the loader's own generator
runs from it instead, epoch after epoch, and shuffles in C++.

State, as torchdata's StatefulDataLoader: state_dict() is where the loader stands (the batches
of the epoch delivered so far, or between epochs), a plain dict torch.save holds;
load_state_dict() on a loader built the same way, in another process, resumes there: the rest of
the epoch is the batches the first run would have given. Beyond torchdata, another num_workers
resumes exactly where a batch does not depend on its worker (C++ datasets; a Python dataset
built with per_worker_rng=False), and torch's DistributedSampler at another world size resumes
from the list of every rank's states. Note [Loader state from Python] in _state.py.
"""
import collections
import functools
import math
import random
import re
import weakref

from .. import _C
from . import _state
from . import get_worker_info as _get_worker_info

try:
    import torch as _torch
except ImportError:  # actorch's loader works without torch; batches are then actorch.Tensor
    _torch = None


def _is_iterable(dataset):
    """torch's rule (an IterableDataset), and for any other object: iterable without
    __getitem__ (a generator, a stream class of the user's)."""
    if _torch is not None and isinstance(dataset, _torch.utils.data.IterableDataset):
        return True
    if isinstance(dataset, _C.data.Dataset):
        return False
    return hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__")


def _start_method(context):
    if context is None or isinstance(context, str):
        return context
    if hasattr(context, "get_start_method"):  # a multiprocessing context object
        return context.get_start_method()
    raise TypeError("multiprocessing_context option should be a valid context object or a "
                    f"string specifying the start method, but got multiprocessing_context={context}")


def _draw_seed(generator):
    """A 63-bit seed from `generator` (a torch.Generator) or torch's default generator, as torch's
    loader draws its base seed, so torch.manual_seed makes a run repeat."""
    if _torch is None:
        if generator is not None:
            raise ValueError("DataLoader: generator needs torch")
        return random.getrandbits(63)
    return int(_torch.empty((), dtype=_torch.int64).random_(generator=generator).item())


def _worker_setup(worker_id, user_fn, processes):
    """worker_init_fn as actorch's loader runs it in each worker: in a worker process, first
    what torch's worker loop does (seeds, one intra-op thread, torch's worker info)."""
    if processes:
        info = _get_worker_info()
        random.seed(info.seed)
        if _torch is not None:
            _torch.set_num_threads(1)
            _torch.manual_seed(info.seed)
            worker = _torch.utils.data._utils.worker
            worker._worker_info = worker.WorkerInfo(id=info.id, num_workers=info.num_workers,
                                                    seed=info.seed, dataset=info.dataset)
            try:
                import numpy as np
                np.random.seed(worker._generate_state(info.seed - info.id, info.id))
            except ImportError:
                pass
    if user_fn is not None:
        user_fn(worker_id)


def _native_tensor_dataset(dataset, sampler, batch_sampler, collate_fn, worker_init_fn,
                           spawned):
    """torch's TensorDataset as actorch's C++ TensorDataset over the same memory, or None: its
    samples are the same tuple of rows, loaded and collated without Python (4x torch's loader at
    num_workers=0 where the Python dataset was 0.6x: docs/performance.md). Only where nothing
    could tell the two apart: the default sampler and collate (a sampler of the user's may yield
    indices only __getitem__ takes, such as negative ones), no worker_init_fn (it could read
    get_worker_info().dataset), no new interpreters (they unpickle the dataset), and CPU tensors
    that need no autograd and no copy (bool crosses DLPack as a copy)."""
    if (_torch is None or type(dataset) is not _torch.utils.data.TensorDataset or
            sampler is not None or batch_sampler is not None or collate_fn is not None or
            worker_init_fn is not None or spawned):
        return None
    tensors = dataset.tensors
    if not tensors or any(not isinstance(t, _torch.Tensor) or t.device.type != "cpu" or
                          t.requires_grad or t.dtype == _torch.bool or t.layout != _torch.strided
                          for t in tensors):
        return None
    try:
        return _C.data.TensorDataset(*tensors)
    except _C.Error:  # a dtype actorch does not have: the dataset's own __getitem__
        return None


def _as_torch_shows(dataset, iterable, batch_size, drop_last, shuffle, sampler, batch_sampler,
                    collate_fn, generator):
    """loader.sampler, .batch_sampler and .collate_fn as torch's DataLoader sets them when they
    are not given (its SequentialSampler or RandomSampler, BatchSampler, default_collate or
    default_convert), for code that reads them (len(loader.sampler)). actorch's loader does not
    run them: it samples and collates in C++, to the same batches. Without torch, what was given
    (None for the rest)."""
    if _torch is None:
        return sampler, batch_sampler, collate_fn
    data = _torch.utils.data
    if sampler is None:
        sampler = (data.dataloader._InfiniteConstantSampler() if iterable else
                   data.RandomSampler(dataset, generator=generator) if shuffle else
                   data.SequentialSampler(dataset))
    if batch_size is not None and batch_sampler is None:
        batch_sampler = data.BatchSampler(sampler, batch_size, drop_last)
    if collate_fn is None:
        collate = data._utils.collate
        collate_fn = collate.default_collate if batch_sampler is not None else (
            collate.default_convert)
    return sampler, batch_sampler, collate_fn


_PY_EXCEPTION = re.compile(
    r"\(Python exception type ([\w.]+):([\w.]+); the worker's traceback follows\)")


# What actorch's C++ default_collate says where torch's raises TypeError (a sample of a type it
# cannot batch, or of another kind than sample 0's) or KeyError (a key of sample 0's missing
# from another sample); its other errors are RuntimeErrors there too (torch.stack's).
_COLLATE_TYPE_ERROR = re.compile(r"default_collate: [^\n]*: (batch must contain |sample 0 is a )")
_COLLATE_KEY_ERROR = re.compile(r"default_collate: [^\n]*: key '[^\n]*' of sample 0 is missing")


def _reraise(error, processes=False):
    """An actorch.Error from the loader as the exception the user's code raised: its type where
    it can be rebuilt from a message, RuntimeError otherwise (as torch's ExceptionWrapper). From
    a worker process, a SystemExit or KeyboardInterrupt (no Exception) is a RuntimeError: it
    ended that worker, as under torch, where the loop learns that the worker exited. The C++
    default_collate's errors take the types torch's default_collate raises."""
    message = str(error)
    match = _PY_EXCEPTION.search(message)
    if match is None:
        if _COLLATE_TYPE_ERROR.search(message):
            raise TypeError(message) from None
        if _COLLATE_KEY_ERROR.search(message):
            raise KeyError(_torch._utils.KeyErrorMessage(message) if _torch is not None
                           else message) from None
        raise error
    module, qualname = match.groups()
    try:
        cls = __import__(module, fromlist=["_"])
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError):
        cls = None
    if processes and isinstance(cls, type) and not issubclass(cls, Exception):
        cls = None
    if cls is KeyError and _torch is not None:  # keep the newlines in str(), as torch does
        message = _torch._utils.KeyErrorMessage(message)
    try:
        exc = cls(message) if isinstance(cls, type) and issubclass(cls, BaseException) else None
    except Exception:
        exc = None
    raise (exc if exc is not None else RuntimeError(message)) from None


class _Iterator:
    """One epoch of a DataLoader: torch's batches, errors as the dataset raised them. `done`
    once the epoch has ended."""
    __slots__ = ("_it", "_processes", "done", "__weakref__")

    def __init__(self, it, processes):
        self._it = it
        self._processes = processes
        self.done = False

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return self._it.__next__()
        except StopIteration:
            self.done = True
            raise
        except _C.Error as e:
            _reraise(e, self._processes)


LoaderTiming = collections.namedtuple(
    "LoaderTiming", ["first_batch_s", "wait_s", "work_s", "batches", "starvation"])


class DataLoader:
    """torch.utils.data.DataLoader over actorch's loader: the same arguments and defaults, and
    batches of torch tensors (zero-copy over actorch's buffers; actorch.Tensor without torch).
    Beyond torch: `seed` (the loader's own generator, instead of drawing from `generator`),
    `in_order=False` (batches as they are ready) and `report_delay` (a worker process still on
    one batch after this many seconds is named on stderr with the batch's indices and its
    Python stack, once, while it goes on; 0, the default for now: never) and `retry_timeouts`
    (a worker process past `timeout` is replaced and its batch loaded again, up to 3 attempts,
    instead of the timeout error) and `per_worker_rng` (False: the dataset draws nothing from
    the per-worker generators, so a state resumes exactly at another num_workers). See the
    module's docstring for where workers run, and state_dict()/load_state_dict() for resuming.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=2, persistent_workers=False, pin_memory_device="", seed=None,
                 in_order=True, report_delay=0, retry_timeouts=False, per_worker_rng=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; "
                             "use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor != 2:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing.")
        if prefetch_factor is not None and prefetch_factor <= 0:
            raise ValueError(f"prefetch_factor option should be positive (got {prefetch_factor})")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if pin_memory_device:
            raise ValueError("pin_memory_device: actorch pins for the current CUDA device only; "
                             f"got {pin_memory_device!r}")
        iterable = _is_iterable(dataset)
        if iterable:
            if shuffle not in {False, None}:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                                 f"option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        elif not (isinstance(dataset, _C.data.Dataset) or hasattr(dataset, "__getitem__")):
            raise TypeError(f"DataLoader: the dataset ({type(dataset).__name__}) has neither "
                            "__getitem__ and __len__ (a map-style dataset) nor __iter__ (an "
                            "iterable one)")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        elif batch_size is not None and (not isinstance(batch_size, int) or
                                         isinstance(batch_size, bool) or batch_size <= 0):
            raise ValueError("batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        if not isinstance(per_worker_rng, bool):
            raise ValueError("per_worker_rng should be a boolean value, but got "
                             f"per_worker_rng={per_worker_rng!r}")

        method = _start_method(multiprocessing_context)
        if method is not None and num_workers == 0:
            raise ValueError("multiprocessing_context can only be used with multi-process "
                             f"loading (num_workers > 0), but got num_workers={num_workers}")
        if method not in (None, "fork", "spawn", "forkserver", "thread"):
            raise ValueError("multiprocessing_context option should specify a valid start method "
                             "in ['fork', 'spawn', 'forkserver', 'thread'] (actorch's), but got "
                             f"multiprocessing_context={method!r}")
        spawned = method in ("spawn", "forkserver")
        loaded = _native_tensor_dataset(dataset, sampler, batch_sampler, collate_fn,
                                        worker_init_fn, spawned)
        if loaded is None:
            loaded = dataset
        # A C++ dataset that calls Python code (an ImageFolder with torchvision's transforms)
        # loads in processes, as a Python dataset does: under one GIL, threads would take turns.
        cxx = isinstance(loaded, _C.data.Dataset) and not getattr(loaded, "_python_code", False)
        if spawned and isinstance(dataset, _C.data.Dataset):
            raise ValueError(f"multiprocessing_context={method!r} rebuilds the dataset from its "
                             f"pickle in a new interpreter, and actorch's C++ datasets "
                             f"({type(dataset).__name__}) do not pickle; use 'fork' or the "
                             "default (threads)")
        processes = num_workers > 0 and (method in ("fork", "spawn", "forkserver") or
                                         (method is None and not cxx))

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler, self.batch_sampler, self.collate_fn = _as_torch_shows(
            dataset, iterable, batch_size, drop_last, shuffle, sampler, batch_sampler, collate_fn,
            generator)
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self._iterable = iterable
        # The containers torch's default_collate or default_convert would make of a batch; a
        # collate_fn's batch comes back as it returned it (from a worker process, rebuilt).
        self._form = ("sample" if collate_fn is not None else
                      "collated" if batch_size is not None or batch_sampler is not None else
                      "converted")
        self._as_torch = _torch is not None
        self._processes = processes
        # torch's RandomSampler shuffles (its draws, its order); without torch, or with seed=,
        # the C++ loader does, and without torch a second seed is drawn as torch's sampler would.
        torch_shuffle = shuffle and sampler is None and _torch is not None and seed is None
        self._own_shuffle_seed = shuffle and _torch is None and seed is None
        self._seed = seed
        # What Note [Loader state from Python] draws again on resume: the Python sampler (or
        # batch sampler) the C++ loader lists at each iter(), and whether batches may depend on
        # the worker that loads them.
        self._py_sampler = (self.sampler if torch_shuffle else
                            sampler if sampler is not None and
                            not isinstance(sampler, _C.data.Sampler) else None)
        self._py_batch_sampler = (batch_sampler if batch_sampler is not None and
                                  not isinstance(batch_sampler, _C.data.BatchSampler) else None)
        self._per_worker_rng = per_worker_rng and not cxx
        self._resume = None  # what load_state_dict() checked, for the next iter()

        init = worker_init_fn
        spawn = None
        self._spawn_parts = None
        if spawned:  # the new interpreter wraps worker_init_fn itself (actorch.data._spawn)
            from . import _spawn
            self._spawn_parts = (dataset, iterable, collate_fn, worker_init_fn,
                                 batch_size is None and batch_sampler is None)
            spawn = _spawn.command(*self._spawn_parts)  # pickled now: an error shows here
            init = None
        elif num_workers > 0 and (processes or worker_init_fn is not None):
            def init(worker_id, user_fn=worker_init_fn, processes=processes):
                _worker_setup(worker_id, user_fn, processes)
        self._make_loader = functools.partial(
            _C._Loader, loaded, iterable=iterable,
            batch_size=1 if batch_sampler is not None else batch_size,
            shuffle=shuffle and not torch_shuffle,
            sampler=self.sampler if torch_shuffle else sampler,
            batch_sampler=batch_sampler, num_workers=num_workers, collate_fn=collate_fn,
            pin_memory=pin_memory, drop_last=drop_last, timeout=float(timeout),
            retry_timeouts=bool(retry_timeouts), worker_init_fn=init, processes=processes,
            seed=seed,
            prefetch_factor=prefetch_factor if num_workers > 0 else None,
            persistent_workers=persistent_workers, in_order=in_order,
            # torch's order of batches to workers: Python code draws from per-worker generators
            round_robin=not cxx, report_delay=float(report_delay), spawn=spawn)
        self._loader = self._make_loader()
        self._epoch = None  # the last iter()'s _state.EpochRecord
        # A Python map-style dataset's length when _loader was made: torch's samplers read
        # len(dataset) at each epoch, so a dataset that grew (or shrank) gets a new _loader.
        self._length = (len(dataset) if not iterable and not isinstance(loaded, _C.data.Dataset)
                        else None)

    def _current_loader(self):
        """_loader, made again when the dataset's length changed since (see _length)."""
        if self._length is not None:
            n = len(self.dataset)
            if n != self._length:
                self._loader, self._length, self._epoch = self._make_loader(), n, None
        return self._loader

    def _length_or_none(self):
        """len(self) for a map-style dataset whose sampler has a length, else None."""
        if self._iterable:
            return None
        try:
            return len(self)
        except TypeError:
            return None

    def __iter__(self, as_torch=None):
        """One epoch's batches; as_torch=False gives actorch.Tensor objects instead of torch
        tensors. Iterators are independent, as torch's are: one made while another is in the
        middle of its epoch (next(iter(loader)) inside the loop) runs on workers of its own, which
        end with it; with persistent_workers the new one takes over the workers and restarts the
        epoch, as torch's does."""
        loader = self._current_loader()
        record, resume = self._epoch, self._resume
        self._resume = None
        if record is not None and record.resumed and record.loader is not loader:
            # The resumed epoch's one-off loader hands on its place in the epochs.
            record.loader._end_epoch()
            epoch, _, streams, gen, sampler_gen = record.loader._state()
            loader._load_state(epoch, [], streams, gen, sampler_gen)
            record = None
        running = record.iterator() if record is not None else None
        if running is not None and not running.done and not self.persistent_workers:
            loader = self._make_loader()
        new = _state.EpochRecord()
        if resume is not None and resume["mid_epoch"]:
            loader, new = self._resumed_loader(loader, resume)
        elif resume is not None:
            loader._load_state(*resume["first"]["cxx"])
            _state.set_generators(self, resume["first"]["generators"])
        if self._spawn_parts is not None:  # the dataset as it is now, as torch's workers get it
            from . import _spawn
            loader._set_spawn_payload(_spawn.command(*self._spawn_parts)[1])
        if self._seed is None and new.base_seed is not None:  # the resumed epoch's seeds
            loader._seed_next_epoch(new.base_seed)
        elif self._seed is None:  # the epoch's seeds, drawn now as torch's are
            new.base_seed = _draw_seed(self.generator)
            loader._seed_next_epoch(new.base_seed)  # worker i's seed: base_seed + i, torch's
            loader._manual_seed(_draw_seed(None) if self._own_shuffle_seed else new.base_seed)
        if new.generators is None:  # what the sampler is about to draw from
            new.generators = _state.generator_states(self)
            new.sampler_states = _state.sampler_states(self)
        if new.sampler_epoch is None and _state.is_distributed(self.sampler):
            new.sampler_epoch = self.sampler.epoch
        it = _Iterator(loader._iter(self._as_torch if as_torch is None else as_torch, self._form),
                       self._processes)
        if loader is self._loader or new.resumed:
            new.loader, new.iterator = loader, weakref.ref(it)
            self._epoch = new
        return it

    def _resumed_loader(self, loader, resume):
        """The loader that gives the rest of the saved epoch (Note [Loader state from Python]),
        and the epoch's record: a one-off loader over the epoch's order drawn again where a
        Python sampler lists it, else `loader` itself."""
        first = resume["first"]
        epoch, delivered, streams, gen, sampler_gen = first["cxx"]
        record = _state.EpochRecord()
        record.base_seed, record.generators = first["base_seed"], first["generators"]
        record.sampler_states = first["sampler_states"]
        if _state.is_distributed(self.sampler):
            record.share, record.prior = _state.distributed_share(self.sampler, resume)
            record.sampler_epoch = first["distributed"]["epoch"]
            order = _state.epoch_order(self.sampler, record.sampler_epoch)
            loader = self._make_loader(sampler=[order[p % len(order)] for p in record.share])
            delivered = []  # the share is the rest of the epoch
            record.resumed = True
        elif self._py_sampler is not None or self._py_batch_sampler is not None:
            order = _state.redraw(self, first)
            kind = "batch_sampler" if self._py_batch_sampler is not None else "sampler"
            loader = self._make_loader(**{kind: order})
            record.resumed = True
        loader._load_state(epoch, delivered, streams, gen, sampler_gen)
        return loader, record

    def state_dict(self):
        """Where the loader stands, as torchdata's StatefulDataLoader.state_dict(): in the middle
        of an epoch, the batches of it delivered so far (the next iter() of a loader given it
        by load_state_dict() gives the rest); else the next epoch. A plain dict of numbers,
        lists and torch generator states, for torch.save; the dataset's own state_dict() is
        in it where the dataset has one."""
        if self._resume is not None:  # loaded, not yet begun: what it will resume
            return self._resume["state"]
        record = self._epoch
        it = record.iterator() if record is not None else None
        in_epoch = it is not None and not it.done
        if record is not None and not in_epoch:
            record.loader._end_epoch()
        cxx = (record.loader if record is not None else self._loader)._state()
        state = {
            _state.MARKER: 1,
            "iterable": self._iterable,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "per_worker_rng": self._per_worker_rng,
            "length": self._length_or_none(),
            "in_epoch": in_epoch,
            "cxx": cxx,
            "base_seed": record.base_seed if in_epoch else None,
            "generators": record.generators if in_epoch else _state.generator_states(self),
            "sampler_states": (record.sampler_states if in_epoch else
                               _state.sampler_states(self)),
            "distributed": None,
            "dataset_state": (self.dataset.state_dict()
                              if callable(getattr(self.dataset, "state_dict", None)) else None),
        }
        if _state.is_distributed(self.sampler):
            state["distributed"] = _state.distributed_part(
                self.sampler, record if in_epoch else None, cxx[1], self.batch_size)
        return state

    def load_state_dict(self, state_dict):
        """Resumes at the next iter() from `state_dict`, what state_dict() returned (for torch's
        DistributedSampler at another world size or rank: the list of every rank's states, in
        any order). ValueError naming what does not match this loader."""
        resume = _state.check(self, state_dict)
        saved = resume["first"].get("dataset_state")
        if saved is not None and callable(getattr(self.dataset, "load_state_dict", None)):
            self.dataset.load_state_dict(saved)
        self._resume = resume

    def timing(self):
        """The current (or last) epoch as this consumer saw it: a LoaderTiming with
        `first_batch_s`, `wait_s` (waiting for the batches after the first), `work_s` (the
        consumer's own time between batches), `batches`, and `starvation`, the fraction of the
        consumer's step time spent waiting for the next batch (wait / (wait + work))."""
        return LoaderTiming(*self._loader._timing())

    def __len__(self):
        if not self._iterable:
            try:  # a sampler without __len__: its TypeError, as torch's (list() then iterates)
                return len(self._current_loader())
            except _C.Error as e:
                _reraise(e)
        n = len(self.dataset)  # torch's: the dataset's length, as batches (TypeError without)
        if self.batch_size is not None:
            n = n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        return n
