"""actorch's process groups as the torch.distributed backend "actorch".

`import actorch` registers it: `dist.init_process_group("actorch", ...)` then runs every op of
torch's ProcessGroup on actorch's Gloo group (shared memory between the ranks of a host, Gloo's
TCP across hosts) over the torch tensors' memory, so PyTorch's DDP, its comm hooks and
torch.distributed's functions use it unchanged. Rendezvous goes through the store torch makes
(env:// under torchrun or mp.spawn, tcp://, file://). CPU tensors only in this build. DDP's
gradient buckets over this backend are the group's shared blocks where they can be
(_share_ddp_buckets; ACTORCH_DDP_SHARED_BUCKETS=0 keeps them private).

The extension (actorch._torch_backend) is built against the torch of the build machine; under
another torch it is not loaded, and creating a group says why (the recorded version is in
actorch._build_info).
"""
import functools
import os
import weakref

try:
    import torch
    import torch.distributed as _dist
except ImportError:  # no torch: nothing to register
    torch = None

BACKEND = "actorch"


def check_torch_version(built, running):
    """Raises RuntimeError when the torch running is not the one the backend was built with."""
    if built != running:
        raise RuntimeError(
            f"actorch's torch.distributed backend was built against torch {built}, but this "
            f"Python runs torch {running}: rebuild actorch against this torch (its C++ "
            "extension cannot be loaded under another version)")


def _creator(store, rank, size, timeout):
    from . import _torch_backend
    return _torch_backend.ProcessGroupActorch(store, rank, size, timeout)


def _refusing(reason):
    def creator(store, rank, size, timeout):
        raise RuntimeError(reason)
    return creator


def register():
    """Registers the backend "actorch" with torch.distributed (idempotent). Returns whether the
    backend can create groups; when it cannot, creating one raises an error that says why."""
    if torch is None or not _dist.is_available() or hasattr(_dist.Backend, BACKEND.upper()):
        return False
    try:
        from . import _build_info
    except ImportError:
        _dist.Backend.register_backend(BACKEND, _refusing(
            "actorch was built without torch's C++ headers (libtorch-dev), so its "
            "torch.distributed backend is not there: install them and rebuild"))
        return False
    try:
        check_torch_version(_build_info.TORCH_VERSION, torch.__version__)
    except RuntimeError as e:
        _dist.Backend.register_backend(BACKEND, _refusing(str(e)))
        return False
    _dist.Backend.register_backend(BACKEND, _creator)
    _share_ddp_buckets()
    _allow_monitored_barrier()
    return True


def _allow_monitored_barrier():
    """Note [Monitored barrier]: torch 1.13's dist.monitored_barrier refuses every backend but
    gloo in Python, before it reaches the group, whose monitoredBarrier actorch's implements
    (through the store, naming the ranks that did not arrive). For a group of actorch's, this
    calls the group as torch's would; for any other, torch's function as it is."""
    c10d = _dist.distributed_c10d
    original = c10d.monitored_barrier
    if getattr(original, "_actorch", False):
        return

    @functools.wraps(original)
    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        if c10d._rank_not_in_group(group) or _dist.get_backend(group) != BACKEND:
            return original(group, timeout, wait_all_ranks)
        group_to_use = c10d._get_default_group() if group is None else group
        return group_to_use.monitored_barrier(
            c10d.default_pg_timeout if timeout is None else timeout,
            wait_all_ranks=wait_all_ranks)

    monitored_barrier._actorch = True
    c10d.monitored_barrier = monitored_barrier
    _dist.monitored_barrier = monitored_barrier


# DDP's Reducers whose group is actorch's: id(reducer) -> weakref to its DDP module.
_ddp_of_reducer = {}


def _bucket_window(group):
    """The group's _with_shared_buckets when DDP's buckets may be its shared blocks, else None."""
    if os.environ.get("ACTORCH_DDP_SHARED_BUCKETS", "1") == "0":
        return None
    return getattr(group, "_with_shared_buckets", None)


def _share_ddp_buckets():
    """Makes DDP's gradient buckets shared blocks of an actorch group (Note [DDP's buckets in
    shared memory] in python/src/torch_backend.cpp): its Reducer's construction and its one
    rebuild allocate them inside the group's window. Nothing changes for other backends."""
    from torch.nn.parallel import DistributedDataParallel as ddp_class
    if getattr(ddp_class, "_actorch_shares_buckets", False):
        return
    init_helper = ddp_class._ddp_init_helper
    reducer_class = _dist.Reducer
    rebuild = reducer_class._rebuild_buckets

    @functools.wraps(init_helper)
    def _ddp_init_helper(self, *args, **kwargs):
        window = _bucket_window(self.process_group)
        if window is None:
            return init_helper(self, *args, **kwargs)
        out = window(lambda: init_helper(self, *args, **kwargs))
        key = id(self.reducer)

        def forget(ref):  # unless a later DDP's reducer has taken the id since
            if _ddp_of_reducer.get(key) is ref:
                del _ddp_of_reducer[key]
        _ddp_of_reducer[key] = weakref.ref(self, forget)
        return out

    @functools.wraps(rebuild)
    def _rebuild_buckets(self):
        ref = _ddp_of_reducer.get(id(self))
        ddp = ref() if ref is not None else None
        mine = ddp is not None and ddp.reducer is self
        window = _bucket_window(ddp.process_group) if mine else None
        if window is None:
            return rebuild(self)
        return window(lambda: rebuild(self))

    ddp_class._ddp_init_helper = _ddp_init_helper
    reducer_class._rebuild_buckets = _rebuild_buckets
    ddp_class._actorch_shares_buckets = True
