"""actorch.save and actorch.load: torch.save's file format (a zip archive with data.pkl and one
record per tensor storage), read and written in C++. Files load in torch.load and torch's load
here: state dicts of models and optimizers, checkpoints of nested dicts, lists, tuples, numbers,
strings, None and tensors of every dtype actorch has, views sharing their storage,
nn.Parameters (with their requires_grad) and a state dict's `_metadata` (the modules' versions
load_state_dict uses), both ways. Complex and sparse tensors, which torch.load reads, are
refused with an error naming them: actorch has no such tensors.

Loading is always weights_only: the restricted unpickler builds only such values and refuses
anything else (a pickled function, a class) by name, without running it. Tensors load on the
CPU (torch puts them back where they were saved); `map_location` moves them, as torch's: a
device (str or torch.device), a dict {saved location: location} (a tensor saved on "cuda:1" with
{"cuda:1": "cuda:0"} goes to cuda:0; a location that is no key stays on the CPU), or a function
called with each tensor (on the CPU, where torch gives a storage) and its saved location,
returning the tensor to keep, or None for the CPU tensor.
"""
import collections

from . import _C

try:
    import torch as _torch
except ImportError:  # pragma: no cover - the test command always has torch
    _torch = None


def save(obj, f):
    """torch.save(obj, f): `f` a path (str or os.PathLike) or a binary file object."""
    _C._torch_save(obj, f)


def _map(value, fn):
    if isinstance(value, dict):
        out = collections.OrderedDict() if isinstance(value, collections.OrderedDict) else {}
        for k, v in value.items():
            out[k] = _map(v, fn)
        return out
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_map(v, fn) for v in value)
    if _torch is not None and isinstance(value, _torch.Tensor):
        return fn(value)
    return value


def load(f, map_location=None, weights_only=True):
    """torch.load(f, map_location, weights_only=True): tensors as torch tensors (actorch.Tensor
    without torch). weights_only=False is refused: actorch never unpickles code."""
    if not weights_only:
        raise ValueError("actorch.load reads only what torch.load(weights_only=True) reads (state "
                         "dicts and checkpoints of tensors, numbers, strings and containers); "
                         "it never runs pickled code, so weights_only=False is not offered")
    value, where = _C._torch_load(f, _torch is not None, map_location is not None)
    if map_location is None:
        return value

    def saved_at(t):  # by the address of its storage's first element
        return where.get(t.data_ptr() - t.storage_offset() * t.element_size(), "cpu")

    if callable(map_location):
        def call(t):
            got = map_location(t, saved_at(t))
            return t if got is None else got
        return _map(value, call)
    if isinstance(map_location, dict):
        def move(t):
            target = map_location.get(saved_at(t))
            if target is None:
                return t
            return t.to(target)
        return _map(value, move)
    return _map(value, lambda t: t.to(map_location))
