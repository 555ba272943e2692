"""A Python object leaving a loader worker process, as torch's workers send a batch: pickled,
with its tensors and numpy arrays taken out of the pickle, so that they travel through the
shared batch file instead of the pickle's bytes (see Note [Python objects across processes] in
python/src/convert.cpp, which calls these)."""
import io
import pickle

try:
    import numpy as _np
except ImportError:
    _np = None
try:
    import torch as _torch
except ImportError:
    _torch = None

# The dtypes actorch's tensors have; others (complex, uint16 ...) are pickled as they are.
_TORCH_DTYPES = frozenset() if _torch is None else frozenset({
    _torch.float32, _torch.float64, _torch.float16, _torch.bfloat16, _torch.int8, _torch.uint8,
    _torch.int16, _torch.int32, _torch.int64, _torch.bool})
_NUMPY_DTYPES = frozenset() if _np is None else frozenset(_np.dtype(n) for n in (
    "float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"))


def _kind(obj):
    """"torch" or "numpy" for an array that travels beside the pickle; None for the rest."""
    if _torch is not None and type(obj) is _torch.Tensor:  # a subclass pickles as it says
        if (obj.layout == _torch.strided and obj.device.type == "cpu" and
                obj.dtype in _TORCH_DTYPES and not obj.is_conj() and not obj.is_neg()):
            return "torch"
        return None
    if _np is not None and type(obj) is _np.ndarray and obj.dtype in _NUMPY_DTYPES:
        return "numpy"
    return None


class _Pickler(pickle.Pickler):
    def __init__(self, file, arrays):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self._arrays = arrays
        self._ids = {}  # id(array) -> its persistent id: one array held twice travels once

    def persistent_id(self, obj):
        pid = self._ids.get(id(obj))
        if pid is not None:
            return pid
        kind = _kind(obj)
        if kind is None:
            return None
        pid = (len(self._arrays), kind, kind == "torch" and obj.requires_grad)
        self._arrays.append(obj)
        self._ids[id(obj)] = pid
        return pid


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, arrays, convert):
        super().__init__(file)
        self._arrays = arrays
        self._convert = convert
        self._made = {}

    def persistent_load(self, pid):
        index, kind, requires_grad = pid
        made = self._made.get(index)
        if made is None:
            made = self._convert(self._arrays[index], kind)
            if requires_grad:
                made.requires_grad_(True)
            self._made[index] = made
        return made


def dumps(obj, arrays):
    """obj's pickle; its arrays appended to `arrays` in the order the pickle numbers them."""
    out = io.BytesIO()
    _Pickler(out, arrays).dump(obj)
    return out.getvalue()


def loads(data, arrays, convert):
    """The object `dumps` pickled; convert(arrays[i], kind) makes its i-th array."""
    return _Unpickler(io.BytesIO(data), arrays, convert).load()
