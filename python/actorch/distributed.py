"""actorch's process groups as the torch.distributed backend "actorch".

`import actorch` registers it: `dist.init_process_group("actorch", ...)` then runs every op of
torch's ProcessGroup on actorch's Gloo group (shared memory between the ranks of a host, Gloo's
TCP across hosts) over the torch tensors' memory, so PyTorch's DDP, its comm hooks and
torch.distributed's functions use it unchanged. Rendezvous goes through the store torch makes
(env:// under torchrun or mp.spawn, tcp://, file://). CPU tensors only in this build.

The extension (actorch._torch_backend) is built against the torch of the build machine; under
another torch it is not loaded, and creating a group says why (the recorded version is in
actorch._build_info).
"""
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
    return True
