"""actorch.DataLoader's workers as a PyTorch user meets them: exceptions from __getitem__ with
their type, message, worker, index and traceback; a worker process killed by a signal; a stuck
__getitem__ and `timeout`; worker_init_fn and get_worker_info() (actorch's and torch's); seeds
as torch's workers get them; persistent workers; breaking out of an epoch and starting again."""
import gc
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import actorch
from loader_cases import WORKERS, processes


class BadIndex(Exception):
    """A user's own exception type, raised from __getitem__."""


class Failing(torch.utils.data.Dataset):
    def __init__(self, exc):
        self.exc = exc

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 6:
            raise self.exc(f"no sample {i}")
        return i


@pytest.mark.parametrize("workers,context", WORKERS)
@pytest.mark.parametrize("exc", [ValueError, KeyError, BadIndex, ZeroDivisionError])
def test_getitem_exceptions_keep_their_type_and_say_where(workers, context, exc):
    # torch's without workers: with them it takes 10 s to shut its workers down after the error.
    with pytest.raises(exc) as want:
        list(torch.utils.data.DataLoader(Failing(exc), batch_size=4))
    with pytest.raises(exc) as got:
        list(actorch.DataLoader(Failing(exc), batch_size=4, num_workers=workers,
                                multiprocessing_context=context))
    text = str(got.value)
    assert "no sample 6" in str(want.value) and "no sample 6" in text
    assert "sample index 6" in text and "batch 1" in text
    assert "Traceback (most recent call last)" in text and "in __getitem__" in text
    if workers:
        assert "DataLoader worker" in text


@processes
def test_an_exception_that_cannot_be_rebuilt_is_a_runtime_error():
    class Two(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)

    class Raising(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise Two(1, 2)

    with pytest.raises(RuntimeError, match="Two"):
        list(actorch.DataLoader(Raising(), num_workers=1))


class Killing(torch.utils.data.Dataset):
    """Kills its own worker process on sample 9 (and only in a worker)."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 9 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


@processes
def test_a_killed_worker_process_names_its_signal_and_batch():
    start = time.monotonic()
    with pytest.raises(RuntimeError) as got:
        list(actorch.DataLoader(Killing(), batch_size=4, num_workers=2))
    text = str(got.value)
    assert "signal 9" in text and "batch 2" in text and "[8, 9, 10, 11]" in text, text
    assert time.monotonic() - start < 30


@processes
def test_a_worker_killed_from_outside_is_replaced():
    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            time.sleep(0.02)
            return os.getpid()

    loader = actorch.DataLoader(Slow(), batch_size=2, num_workers=2, persistent_workers=True)
    it = iter(loader)
    first = next(it)
    os.kill(int(first[0]), signal.SIGKILL)  # the real signal, from outside the worker
    rest = list(it)
    assert len(rest) == 5  # the batch the dead worker held is loaded again by its replacement


class Stuck(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 13 and actorch.data.get_worker_info() is not None:
            # Never returns: an abandoned worker thread whose call came back while the interpreter
            # finalizes would be ended by Python 3.11 with pthread_exit inside the loader's frames.
            threading.Event().wait()
        return i


@pytest.mark.parametrize("context", [pytest.param(None, id="processes", marks=processes),
                                     pytest.param("thread", id="threads")])
def test_a_stuck_getitem_fails_when_timeout_passes(context, capfd):
    # torch's error, once the batches before it are in, and no attempt again (torch makes none).
    start = time.monotonic()
    got = []
    with pytest.raises(RuntimeError, match=r"^DataLoader timed out after 0.5 seconds\b") as error:
        for batch in actorch.DataLoader(Stuck(), batch_size=4, num_workers=2, timeout=0.5,
                                        multiprocessing_context=context):
            got.append(batch.tolist())
    assert "batch 3 (sample indices [12, 13, 14, 15])" in str(error.value)
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert "replaced" not in capfd.readouterr().err
    assert time.monotonic() - start < 10


@processes
def test_retry_timeouts_replaces_a_stuck_worker_process(capfd):
    with pytest.raises(RuntimeError, match="died 3 times while loading batch 3") as error:
        list(actorch.DataLoader(Stuck(), batch_size=4, num_workers=2, timeout=0.3,
                                retry_timeouts=True))
    assert "did not finish within the timeout of 0.3 seconds" in str(error.value)
    assert capfd.readouterr().err.count("the worker is replaced and the batch loaded again") == 3


@processes
def test_a_slow_worker_process_is_named_with_its_indices_and_python_stack(capfd):
    # Past report_delay the parent names the worker and batch on stderr and the child prints its
    # Python stack (faulthandler on SIGUSR1); the load goes on until `timeout` ends it.
    with pytest.raises(RuntimeError, match="batch 3"):
        list(actorch.DataLoader(Stuck(), batch_size=4, num_workers=2, timeout=1.5,
                                report_delay=0.3))
    err = capfd.readouterr().err
    assert "has been loading batch 3 (sample indices [12, 13, 14, 15]) for 0." in err, err
    assert "its stack follows" in err and "in __getitem__" in err, err


def test_a_slow_worker_thread_is_named_with_its_sample_index(capfd):
    # A worker thread cannot be killed or asked for its stack, but past report_delay the loader
    # names it with the sample it sits in, once, while `timeout` has not yet ended the load.
    with pytest.raises(RuntimeError, match="batch 3"):
        list(actorch.DataLoader(Stuck(), batch_size=4, num_workers=2, timeout=1.5,
                                report_delay=0.3, multiprocessing_context="thread"))
    err = capfd.readouterr().err
    assert re.search(r"DataLoader worker \d has been in sample index 13 \(batch 3\) for 0\.\d s", err), err
    assert err.count("sample index 13") == 1, err


@processes
def test_a_worker_process_never_destroys_the_parents_garbage_loader():
    # A loader that was garbage in the parent at the fork is the child's too: the child's
    # collector must not destroy it, since its threads do not exist there (a child hung in CI's
    # fresh root so). Here a loader in a reference cycle, a fork, and gc.collect() in the child.
    class Collecting(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            gc.collect()
            return i

    gc.disable()
    try:
        old = actorch.DataLoader(list(range(8)), batch_size=2, num_workers=1,
                                 persistent_workers=True)
        next(iter(old))
        cycle = {"loader": old}
        cycle["self"] = cycle  # only the collector frees it
        del old, cycle
        got = [b.tolist() for b in actorch.DataLoader(Collecting(), batch_size=2, num_workers=1,
                                                       timeout=3)]
        assert got == [[0, 1], [2, 3]]
    finally:
        gc.enable()
        gc.collect()


FREED_ON_ANOTHER_THREAD = """
import threading, actorch
box, iterated, done = {}, threading.Event(), threading.Event()
def consumer():
    loader = actorch.DataLoader(list(range(8)), batch_size=2, num_workers=2,
                                multiprocessing_context=CONTEXT)
    box["batches"] = [b.tolist() for b in loader]
    box["loader"] = loader
    del loader
    iterated.set()
    done.wait()  # the consumer's thread lives on while the loader is freed
consumer_thread = threading.Thread(target=consumer)
consumer_thread.start()
iterated.wait()
del box["loader"]
done.set()
consumer_thread.join()
print(box["batches"])
"""


@pytest.mark.parametrize("context", [pytest.param("fork", marks=processes), "thread"])
def test_a_loader_freed_on_another_thread_than_its_consumers(context):
    # The garbage collector frees a loader on whichever thread allocates; freed on one thread
    # while the thread that iterated it lived on, it waited without end inside CAF, holding the
    # GIL (Note [CAF's per-thread logger] in actors/thread_scope.hpp). In a child process, so
    # that the old hang fails this test instead of stopping the suite.
    code = FREED_ON_ANOTHER_THREAD.replace("CONTEXT", repr(context))
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("freeing the loader on the main thread hung for 60 s")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[[0, 1], [2, 3], [4, 5], [6, 7]]"


class WhoLoads(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        a, t = actorch.data.get_worker_info(), torch.utils.data.get_worker_info()
        return {"i": i, "pid": os.getpid(), "worker": -1 if a is None else a.id,
                "torch_worker": -1 if t is None else t.id, "tag": getattr(self, "tag", -1)}


@processes
def test_worker_init_fn_and_worker_info_in_processes():
    def init(worker_id):
        info = torch.utils.data.get_worker_info()
        assert info.id == worker_id and info.num_workers == 3
        info.dataset.tag = 100 + worker_id  # the worker's own copy of the dataset

    batches = list(actorch.DataLoader(WhoLoads(), batch_size=4, num_workers=3,
                                      worker_init_fn=init))
    workers = {w for b in batches for w in b["worker"].tolist()}
    assert workers == {0, 1, 2}
    for b in batches:
        assert b["torch_worker"].tolist() == b["worker"].tolist()
        assert (b["tag"] == 100 + b["worker"]).all()
        assert len(set(b["pid"].tolist()) | {os.getpid()}) == 2  # one worker process per batch
    assert actorch.data.get_worker_info() is None


def test_worker_info_in_threads():
    batches = list(actorch.DataLoader(WhoLoads(), batch_size=4, num_workers=2,
                                      multiprocessing_context="thread"))
    assert {w for b in batches for w in b["worker"].tolist()} == {0, 1}
    assert all(p == os.getpid() for b in batches for p in b["pid"].tolist())


class Draws(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return {"random": random.random(), "numpy": float(np.random.rand()),
                "torch": float(torch.rand(())), "worker": torch.utils.data.get_worker_info().id}


def draws(seed):
    loader = actorch.DataLoader(Draws(), batch_size=2, num_workers=2,
                                generator=torch.Generator().manual_seed(seed))
    return [{k: v.tolist() for k, v in b.items()} for b in loader]


@processes
def test_workers_are_seeded_as_torch_seeds_them():
    first, again, other = draws(5), draws(5), draws(6)
    assert first == again and first != other
    # Each worker draws differently from the others, from every generator (numpy included).
    for key in ("random", "numpy", "torch"):
        per_worker = {}
        for b in first:
            for w, v in zip(b["worker"], b[key]):
                per_worker.setdefault(w, []).append(v)
        assert per_worker[0] != per_worker[1], key


@processes
@pytest.mark.parametrize("persistent", [True, False])
def test_persistent_workers_live_across_epochs(persistent):
    loader = actorch.DataLoader(WhoLoads(), batch_size=4, num_workers=2,
                                persistent_workers=persistent)
    pids = [{p for b in loader for p in b["pid"].tolist()} for _ in range(2)]
    assert len(pids[0]) == 2
    assert (pids[0] == pids[1]) == persistent


@pytest.mark.parametrize("workers,context", WORKERS)
def test_breaking_out_mid_epoch_and_iterating_again(workers, context):
    loader = actorch.DataLoader(list(range(40)), batch_size=4, num_workers=workers,
                                multiprocessing_context=context)
    for k, _ in enumerate(loader):
        if k == 2:
            break
    assert [b.tolist() for b in loader] == [list(range(i, i + 4)) for i in range(0, 40, 4)]
    it = iter(loader)
    next(it)
    assert [b.tolist() for b in loader][-1] == [36, 37, 38, 39]


def worker_processes():
    """This process's children (its worker processes), zombies included: a worker that ended
    but was not waited for still counts."""
    pids = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            pids.update(int(p) for p in f.read().split())
    return pids


def eventually(condition, within=20.0):
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("workers,context", [w for w in WORKERS if w.values[0] > 0])
def test_an_iterator_dropped_mid_epoch_stops_its_workers(workers, context):
    # torch's iterator shuts its workers down when it is collected; actorch's workers used to
    # wait for the next iter(), with their prefetched batches.
    loader = actorch.DataLoader(WhoLoads(), batch_size=2, num_workers=workers,
                                multiprocessing_context=context)
    before_children = worker_processes()
    it = iter(loader)
    assert next(it)["i"].tolist() == [0, 1]
    started = worker_processes() - before_children
    assert bool(started) == (context != "thread")
    del it
    gc.collect()
    # (Worker threads end too, but CAF may keep an ended actor's thread: no count to check.)
    assert eventually(lambda: not (worker_processes() & started)), "worker processes outlived it"
    assert [b["i"].tolist() for b in loader][-1] == [22, 23]  # the next epoch, whole


@processes
def test_a_dropped_iterator_leaves_persistent_workers_to_the_next_epoch():
    loader = actorch.DataLoader(WhoLoads(), batch_size=2, num_workers=2, persistent_workers=True)
    first = {p for b in loader for p in b["pid"].tolist()}
    it = iter(loader)
    next(it)
    del it
    gc.collect()
    assert worker_processes() >= first
    assert {p for b in loader for p in b["pid"].tolist()} == first


class Rows(torch.utils.data.Dataset):
    """Sample i: a row of 256 floats i, and i."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return np.full(256, i, dtype=np.float32), i


def mapping_of(address):
    """The name of this process's mapping that holds `address` (/proc/self/maps)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            lo, hi = (int(a, 16) for a in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5].strip() if len(fields) > 5 else ""
    return None


@processes
@pytest.mark.parametrize("context", [None, "spawn"])
@pytest.mark.parametrize("persistent", [False, True])
def test_batches_of_worker_processes_are_lent_where_they_were_collated(context, persistent):
    # Note [Lent batches]: no copy in this process; held for two epochs, changed in place and
    # kept past the loader (and its workers), each batch stays what it was handed out as while
    # the workers go on collating others.
    loader = actorch.DataLoader(Rows(), batch_size=8, num_workers=2,
                                multiprocessing_context=context, persistent_workers=persistent)
    held = [b for _ in range(2) for b in loader]
    assert mapping_of(held[0][0].data_ptr()).startswith("/memfd:actorch DataLoader worker")
    for k, (x, y) in enumerate(held):
        first = 8 * (k % 8)
        assert y.tolist() == list(range(first, first + 8))
        assert torch.equal(x, torch.arange(first, first + 8.0)[:, None].expand(8, 256))
    held[0][0].add_(1)  # writable, as torch's batches are
    assert held[0][0][0, 0].item() == 1.0 and held[8][0][0, 0].item() == 0.0
    del loader
    gc.collect()
    assert held[5][0][3, 255].item() == 43.0


# Spawned workers (multiprocessing_context="spawn"/"forkserver", Note [Spawned workers]).
MARK = "as imported"  # the parent changes it; a forked worker would see the change


class Marks(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return {"i": i, "pid": os.getpid(), "worker": info.id, "tag": getattr(self, "tag", -1),
                "mark": MARK}


def tag_worker(worker_id):
    torch.utils.data.get_worker_info().dataset.tag = 100 + worker_id


@processes
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawned_workers_start_afresh_from_the_pickled_dataset(context):
    global MARK
    MARK = "changed in the parent"
    try:
        loader = actorch.DataLoader(Marks(), batch_size=2, num_workers=2,
                                    worker_init_fn=tag_worker, multiprocessing_context=context)
        batches = list(loader)
        forked = list(actorch.DataLoader(Marks(), batch_size=2, num_workers=2,
                                         worker_init_fn=tag_worker))
    finally:
        MARK = "as imported"
    assert [b["i"].tolist() for b in batches] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # A new interpreter: the module as imported, not the parent's memory (a fork's is).
    assert {m for b in batches for m in b["mark"]} == {"as imported"}
    assert {m for b in forked for m in b["mark"]} == {"changed in the parent"}
    assert {w for b in batches for w in b["worker"].tolist()} == {0, 1}
    for b in batches:
        assert (b["tag"] == 100 + b["worker"]).all()
        assert os.getpid() not in b["pid"].tolist()


class HoldsALambda(torch.utils.data.Dataset):
    def __init__(self):
        self.f = lambda i: i

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.f(i)


class BreaksOnUnpickling(torch.utils.data.Dataset):
    def __init__(self):
        self.state = "some"  # pickled, so that unpickling calls __setstate__

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i

    def __setstate__(self, state):
        raise ValueError("this dataset cannot be rebuilt")


@processes
def test_spawn_errors_an_unpicklable_dataset_and_one_that_cannot_be_rebuilt():
    with pytest.raises((AttributeError, pickle.PicklingError), match="lambda"):
        actorch.DataLoader(HoldsALambda(), num_workers=1, multiprocessing_context="spawn")
    with pytest.raises(RuntimeError) as got:
        list(actorch.DataLoader(BreaksOnUnpickling(), num_workers=1,
                                multiprocessing_context="spawn"))
    text = str(got.value)
    assert "could not rebuild the dataset" in text and "this dataset cannot be rebuilt" in text
    assert "DataLoader worker 0" in text and "__setstate__" in text


@processes
def test_a_killed_spawned_worker_names_its_signal_and_batch():
    with pytest.raises(RuntimeError) as got:
        list(actorch.DataLoader(Killing(), batch_size=4, num_workers=2,
                                multiprocessing_context="spawn"))
    text = str(got.value)
    assert "signal 9" in text and "batch 2" in text and "[8, 9, 10, 11]" in text, text


@processes
def test_spawned_workers_run_with_the_interpreters_flags(tmp_path):
    # As multiprocessing's spawn: a parent started with -O has workers without __debug__.
    script = tmp_path / "flags.py"
    script.write_text(
        "import actorch, torch\n"
        "class Debug(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 2\n"
        "    def __getitem__(self, i): return int(__debug__)\n"
        "if __name__ == '__main__':\n"
        "    loader = actorch.DataLoader(Debug(), batch_size=2, num_workers=1,\n"
        "                                multiprocessing_context='spawn')\n"
        "    print('debug', int(__debug__), [b.tolist() for b in loader])\n")
    for flags, want in (([], "debug 1 [[1, 1]]"), (["-O"], "debug 0 [[0, 0]]")):
        out = subprocess.run([sys.executable, *flags, str(script)], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == want, (flags, out.stdout, out.stderr)


class DiesOn(torch.utils.data.Dataset):
    """Kills its worker process at every load of sample `fatal` (and only in a worker)."""

    def __init__(self, fatal):
        self.fatal = fatal

    def __len__(self):
        return 12

    def __getitem__(self, i):
        if i == self.fatal and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


@processes
@pytest.mark.parametrize("fatal,before", [(0, 0), (9, 4)])
def test_after_a_fatal_error_the_iterator_stops_as_torchs(fatal, before):
    # The error once, saying what the epoch lost, then StopIteration (it retried batch 0 for ever
    # when that was the one, and dropped the rest of the epoch silently when it was a later one).
    it = iter(actorch.DataLoader(DiesOn(fatal), batch_size=2, num_workers=2))
    got = []
    with pytest.raises(RuntimeError, match="died 3 times") as error:
        for _ in range(10):
            got.append(next(it).tolist())
    assert len(got) == before
    assert (f"The epoch ends with this error after {before} batches of its 6: the other "
            f"{6 - before} are not delivered") in str(error.value)
    with pytest.raises(StopIteration):
        next(it)


CTRL_C = """
import os, sys, time, torch, actorch
class Hangs(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        if i == 4:
            time.sleep(600)
        return i
shm = set(os.listdir("/dev/shm"))
it = iter(actorch.DataLoader(Hangs(), batch_size=2, num_workers=2, multiprocessing_context=CONTEXT))
print(next(it).tolist(), flush=True)
pids = [str(os.getpid())] + open(f"/proc/self/task/{os.getpid()}/children").read().split()
try:
    for batch in it:
        print(batch.tolist(), flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
del it
children = open(f"/proc/self/task/{os.getpid()}/children").read().split()
# Other tests run beside this one and make files of their own in /dev/shm: only a name that
# carries this process's pid or a worker's ("torch_<pid>_...", "actorch_<pid>_...") is a leak.
left = [f for f in set(os.listdir("/dev/shm")) - shm if any(f"_{p}_" in f for p in pids)]
print("children", children, "shm", left == [], flush=True)
"""


@pytest.mark.parametrize("context", [pytest.param("fork", marks=processes), "thread"])
def test_ctrl_c_reaches_a_loop_waiting_on_a_hung_worker(context):
    # torch's loader raises KeyboardInterrupt at once; actorch's waited on in C++ until SIGKILL.
    p = subprocess.Popen([sys.executable, "-c", CTRL_C.replace("CONTEXT", repr(context))],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "[0, 1]"
        assert p.stdout.readline().strip() == "[2, 3]"
        time.sleep(0.5)  # the loop waits for batch 2, which a worker never finishes
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("SIGINT did not end the loop within 30 s")
    assert out.splitlines()[0] == "interrupted", (out, err)
    if context == "fork":  # a thread inside __getitem__ cannot be stopped, only abandoned
        assert out.splitlines()[1] == "children [] shm True", (out, err)
    assert p.returncode == 0, err


class LongText(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return {"text": chr(ord("a") + i) * ((65 << 20) + i), "short": "é" * 5000, "i": i}


@processes
def test_a_str_longer_than_a_frame_leaves_a_worker_process():
    # Its bytes go through the shared file, as a tensor's or a bytes object's do; it was refused
    # at the 64 MiB bound of the frame, as a reply too long, 3 times.
    got = list(actorch.DataLoader(LongText(), batch_size=None, num_workers=1))
    assert [len(s["text"]) for s in got] == [65 << 20, (65 << 20) + 1]
    assert got[1]["text"] == "b" * ((65 << 20) + 1) and got[0]["short"] == "é" * 5000
    assert [int(s["i"]) for s in got] == [0, 1]


def sleeps_in_init(worker_id):
    time.sleep(60)


@processes
def test_a_worker_stuck_in_worker_init_fn_is_named_as_starting(capfd):
    # It was reported as "loading batch 0", where no sample of batch 0 had been asked for.
    with pytest.raises(RuntimeError, match="DataLoader timed out after 1.5 seconds") as error:
        list(actorch.DataLoader(list(range(8)), batch_size=2, num_workers=1, timeout=1.5,
                                report_delay=0.3, worker_init_fn=sleeps_in_init))
    assert "was still starting (worker_init_fn had not returned" in str(error.value)
    assert "before batch 0 (sample indices [0, 1])" in str(error.value)
    err = capfd.readouterr().err
    assert "has been starting (worker_init_fn had not returned" in err, err
    assert "has been loading" not in err and "in sleeps_in_init" in err, err
