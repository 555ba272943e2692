"""actorch.save and actorch.load: torch.save's file format (a zip archive with data.pkl and one
record per tensor storage), read and written in C++. Files load in torch.load and torch's load
here: state dicts of models and optimizers, checkpoints of nested dicts, lists, tuples, numbers,
strings, None and tensors of every dtype actorch has, views sharing their storage,
nn.Parameters (with their requires_grad) and a state dict's `_metadata` (the modules' versions
load_state_dict uses), both ways. Complex and sparse tensors, which torch.load reads, are
refused with an error naming them: actorch has no such tensors.

Loading is always weights_only: the restricted unpickler builds only such values and refuses
anything else (a pickled function, a class) by name, without running it. Tensors load on the
CPU; `map_location` moves them: a device (str or torch.device), a dict {saved device: device}
(only "cpu" keys match here: actorch reads every storage to the CPU), or a function called with
each tensor (and "cpu") returning the tensor to keep.
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
    value = _C._torch_load(f, _torch is not None)
    if map_location is None:
        return value
    if callable(map_location):
        return _map(value, lambda t: map_location(t, "cpu"))
    if isinstance(map_location, dict):
        target = map_location.get("cpu")
        return value if target is None else _map(value, lambda t: t.to(target))
    return _map(value, lambda t: t.to(map_location))
