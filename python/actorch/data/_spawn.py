"""A spawned DataLoader worker process: multiprocessing_context="spawn" (or "forkserver", which
starts its workers the same way). The worker's thread in the loader's process starts this
module in a new interpreter with the worker's socket on file descriptor 3 and its shared batch
file on 4 (Note [Spawned workers] in actors/loader/worker_process.cpp). Its first frame holds
the worker's numbers and a payload: multiprocessing's preparation data (sys.path, the main
module to import as __mp_main__, as multiprocessing's spawn does, so that classes defined in the
user's script unpickle), then the pickled dataset, collate_fn and worker_init_fn. Then it
serves tasks as a forked worker does: the loads, the collation into shared memory and the
errors are the same code.
"""
import os
import pickle
import signal
import struct
import sys
import traceback


def _read_exactly(fd, n):
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            sys.exit(0)  # the worker is gone before it sent anything
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def command(dataset, iterable, collate_fn, worker_init_fn, unbatched):
    """(argv, payload) for _C._Loader's spawn argument: this interpreter running this module,
    and what it needs to rebuild the worker. Raises what pickling raises (a lambda, a local
    class: torch's workers fail on the same objects)."""
    import multiprocessing.spawn
    prep = multiprocessing.spawn.get_preparation_data("DataLoader worker")
    if "authkey" in prep:  # an AuthenticationString refuses plain pickling
        prep["authkey"] = bytes(prep["authkey"])
    objects = pickle.dumps((dataset, iterable, collate_fn, worker_init_fn, unbatched),
                           protocol=pickle.HIGHEST_PROTOCOL)
    payload = pickle.dumps((prep, objects), protocol=pickle.HIGHEST_PROTOCOL)
    import subprocess
    # The interpreter and its flags (-O, -B, ...) as multiprocessing's spawn starts its children.
    executable = os.fsdecode(multiprocessing.spawn.get_executable() or b"")
    if not executable:
        raise ValueError("multiprocessing_context='spawn' starts each worker with this "
                         "interpreter, and sys.executable is empty (an embedded Python); use "
                         "'fork' or 'thread'")
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    boot = (f"import sys; sys.path.insert(0, {package_root!r}); "
            "from actorch.data._spawn import main; main()")
    flags = subprocess._args_from_interpreter_flags()
    return [executable, *flags, "-c", boot, str(os.getpid())], payload


def main():
    parent = int(sys.argv[1])
    import faulthandler  # a slow load's report asks for the stack with SIGUSR1
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    from actorch import _C
    (length,) = struct.unpack("=Q", _read_exactly(3, 8))
    *numbers, payload = _C._parse_spawn_frame(_read_exactly(3, length))
    dataset = collate_fn = worker_init_fn = None
    iterable = unbatched = False
    error = ""
    try:
        import multiprocessing.spawn
        prep, objects = pickle.loads(payload)
        multiprocessing.spawn.prepare(prep)
        dataset, iterable, collate_fn, user_init, unbatched = pickle.loads(objects)
        from functools import partial
        from actorch.data.dataloader import _worker_setup
        worker_init_fn = partial(_worker_setup, user_fn=user_init, processes=True)
    except BaseException:
        error = ("could not rebuild the dataset, collate_fn or worker_init_fn in the spawned "
                 "process:\n" + traceback.format_exc())
    del payload
    _C._serve_spawned_worker(3, 4, parent, tuple(numbers), dataset, iterable, collate_fn,
                             worker_init_fn, unbatched, error)
