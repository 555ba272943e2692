"""The memory of a Python dataset read by forked loader workers, torch's oldest open DataLoader
issue (copy-on-read): a dataset holding N small Python objects, 2 worker processes, one epoch;
then, the persistent workers still alive, the PSS (/proc/PID/smaps_rollup) summed over this
process and all its descendants, against this process's PSS before the loader was created.
STORAGE list holds a Python list of (i, "item-i") tuples; frozen holds actorch.data.frozen's
FrozenList of the same (built from a generator: no list of them ever exists).
Prints `pymem loader=L storage=S n=N workers=2 pss_total_mb=X pss_main_before_mb=Y ratio=R`,
ratio = X / Y (1 would mean the workers cost nothing), and the epoch's time on stderr.

Usage: /usr/bin/python3 bench/pyloader_memory.py torch|actorch list|frozen [N, 2000000]
actorch needs the built module: PYTHONPATH=build/<preset>/python. frozen.py is loaded from the
source tree (it is pure Python), so the torch runs need no build.
"""
import gc
import importlib.util
import os
import sys
import time

BATCH = 256
WORKERS = 2


def load_frozen():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "actorch",
                        "data", "frozen.py")
    spec = importlib.util.spec_from_file_location("actorch_data_frozen", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so that a FrozenList pickles (_rebuild is found)
    spec.loader.exec_module(module)
    return module.frozen


class Records:
    """The dataset: N small records; an item is two ints, so batches are cheap to collate and
    the reads of self.items are what the workers' memory shows."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return i, len(self.items[i][1])


def pss_kb(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError(f"no Pss line in /proc/{pid}/smaps_rollup")


def descendants(root):
    """Every live process below `root`, from the PPid of each /proc/PID/status."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("PPid:"):
                        parent[int(name)] = int(line.split()[1])
                        break
        except OSError:  # exited while we looked
            pass
    found, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("torch", "actorch") or \
            sys.argv[2] not in ("list", "frozen"):
        sys.exit(__doc__)
    loader_name, storage = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) == 4 else 2_000_000

    if loader_name == "torch":
        import torch
        make_loader = torch.utils.data.DataLoader
    else:
        import actorch
        make_loader = actorch.DataLoader
    records = ((i, f"item-{i}") for i in range(n))
    ds = Records(load_frozen()(records) if storage == "frozen" else list(records))
    gc.collect()
    before = pss_kb(os.getpid())

    loader = make_loader(ds, batch_size=BATCH, num_workers=WORKERS, persistent_workers=True)
    t0 = time.perf_counter()
    batches = sum(1 for _ in loader)
    seconds = time.perf_counter() - t0
    assert batches == (n + BATCH - 1) // BATCH, (batches, n)

    workers = descendants(os.getpid())
    assert len(workers) >= WORKERS, f"expected {WORKERS} live workers, found pids {workers}"
    total = sum(pss_kb(p) for p in [os.getpid()] + workers)
    print(f"pymem loader={loader_name} storage={storage} n={n} workers={WORKERS} "
          f"pss_total_mb={total / 1024:.1f} pss_main_before_mb={before / 1024:.1f} "
          f"ratio={total / before:.2f}", flush=True)
    print(f"# epoch {seconds:.1f} s, {batches} batches, processes {[os.getpid()] + workers}",
          file=sys.stderr)
    del loader  # stops the persistent workers


if __name__ == "__main__":
    main()
