"""frozen(items): a read-only list whose items lie pickled in one shared anonymous mapping, for
the dataset that loader workers read in __getitem__ (actorch's DataLoader or torch's). A plain
list of N small objects is un-shared page by page in every forked worker, because reading an
item writes its reference count (copy-on-read, torch's oldest open DataLoader issue); a
FrozenList holds no Python object per item, so reading it writes nothing and its pages stay
shared. Pure Python (pickle, mmap): it imports nothing from actorch.

Contract
- What it holds: any picklable objects, each pickled on its own with pickle.HIGHEST_PROTOCOL
  (5 on Python 3.8+). frozen() takes any iterable, a generator included (read once). Dicts are
  not taken: freeze the values as a list and map keys to indices with something that holds no
  Python object per key (for integer keys, a sorted numpy int64 array and np.searchsorted);
  a shared hash table for keys of any type is out of scope.
- It cannot be changed: item assignment, del and list's mutators (append, extend, ...) raise
  TypeError. Each access unpickles a new object, so mutating what you got back changes nothing
  in the container, and `f[i] is f[i]` is False.
- Memory: the pickles and an int64 offsets table lie in one MAP_SHARED anonymous mapping
  (mmap.mmap(-1, n)), which fork() shares with the children instead of copying, and which
  reading never writes: the PSS (/proc/PID/smaps_rollup) summed over a process and its forked
  workers stays near one copy. Pickling a FrozenList (spawned workers, forkserver) copies its
  bytes: once per spawned worker, a fresh shared mapping in each.
- Cost: one pickle.loads per access: about 0.35 us for a small tuple such as (i, str(i)),
  against 0.01 us for a list's item (Python 3.11, a 2-core Xeon VM, 2 million items). Space:
  about 36 bytes per such item (a 28-byte pickle, 11 of them pickle's header, and an 8-byte
  offset) against about 150 for a list's pointer, tuple, int and str. Building 2 million
  takes about 1 s.
- Use it for large lists of small Python objects (records, file names, labels, (path, label)
  pairs) that a Dataset reads in __getitem__. Numbers in one numpy array need none of this:
  an array's data is one buffer that no reference count touches, already shared after fork.

Build: one pass over the items; pickles go into private 16 MiB chunks, then each chunk is copied
into the shared mapping and unmapped at once. The peak is one copy of the pickles plus one chunk
(and the offsets), never one Python bytes object per item; the cost is one memcpy of the whole.
"""
import mmap
import operator
import pickle
from array import array
from collections.abc import Sequence

_CHUNK_BYTES = 16 << 20


class FrozenList(Sequence):
    """A read-only sequence of pickled items in one shared mapping; build it with frozen().

    Layout of the mapping: the pickles back to back from byte 0, then (8-byte aligned at
    `table`) n + 1 int64 offsets: item i is the pickle at [offsets[i], offsets[i + 1]).
    """

    __slots__ = ("_buf", "_n", "_table", "_offsets")

    def __init__(self, buf, n, table):
        self._buf = buf  # the mmap: pickles, then the offsets table
        self._n = n
        self._table = table  # where the offsets table starts
        self._offsets = memoryview(buf)[table:table + 8 * (n + 1)].cast("q")

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._load(i) for i in range(*index.indices(self._n))]
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError("frozen list indices must be integers or slices, not "
                            f"{type(index).__name__}") from None
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"frozen list index {index} out of range for length {self._n}")
        return self._load(i)

    def __iter__(self):
        for i in range(self._n):
            yield self._load(i)

    def __repr__(self):
        return f"frozen([...] {self._n} items, {self.nbytes} bytes)"

    @property
    def nbytes(self):
        """Bytes of the shared mapping: the pickles and the offsets table."""
        return len(self._buf)

    def __reduce__(self):
        # Spawned workers get the bytes once each, in a fresh shared mapping.
        return _rebuild, (self._n, self._table, self._buf[:])

    def _load(self, i):
        o = self._offsets
        return pickle.loads(self._buf[o[i]:o[i + 1]])


def _refuse(op):
    def refused(self, *args, **kwargs):
        raise TypeError(f"a frozen list cannot be changed ({op}): build a new one, e.g. "
                        "frozen(list(f) + [x]), or keep a plain list for data that changes")
    refused.__name__ = op
    return refused


for _op in ("__setitem__", "__delitem__", "__iadd__", "append", "extend", "insert", "pop",
            "remove", "clear", "sort", "reverse"):
    setattr(FrozenList, _op, _refuse(_op))
del _op


def frozen(items):
    """Pickles every item of `items` (any iterable) into one shared anonymous mapping.

    @post `list(frozen(items)) == list(items)` for items whose pickles round-trip; the result
          cannot be changed, and forked processes share its memory.
    Raises TypeError, naming the item's index and type, for an item that cannot be pickled.
    """
    # Pass 1: pickles into private chunks (MAP_PRIVATE: unmapped, not kept by malloc, on close).
    chunks, chunk = [], None
    starts = array("q")
    pos = 0
    for item in items:
        try:
            p = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise TypeError(f"frozen: item {len(starts)} ({type(item).__name__}) cannot be "
                            f"pickled: {e}") from e
        if chunk is None or chunk.tell() + len(p) > len(chunk):
            chunk = mmap.mmap(-1, max(_CHUNK_BYTES, len(p)), flags=mmap.MAP_PRIVATE)
            chunks.append(chunk)
        chunk.write(p)
        starts.append(pos)
        pos += len(p)
    starts.append(pos)

    # Pass 2: one shared mapping (MAP_SHARED is mmap's default), filled chunk by chunk, each
    # chunk unmapped as soon as it is copied, then the offsets table.
    table = (pos + 7) // 8 * 8
    buf = mmap.mmap(-1, table + 8 * len(starts))
    for c in chunks:
        buf.write(memoryview(c)[:c.tell()])
        c.close()
    buf.seek(table)
    buf.write(starts)
    return FrozenList(buf, len(starts) - 1, table)


def _rebuild(n, table, data):
    buf = mmap.mmap(-1, len(data))
    buf.write(data)
    return FrozenList(buf, n, table)
