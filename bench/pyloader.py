"""The pyloader workload of ../shared/bench/WORKLOADS.md: DataLoader over datasets written in
Python (`work`: numpy work per sample; `tiny`: (i, i % 10), the loader's own cost), torch's
DataLoader (the peer script, ../shared/bench/peer/torch_python_dataset.py) against
actorch.DataLoader on the same dataset classes, each run a fresh process, in one session.

actorch's runs mirror the peer's measurement exactly (batch 64, no shuffle, best of 2 passes, the
first batch's wait in the first pass, rss_mb = the main process's peak RSS plus its largest
worker's), with mode=process (the default for a Python dataset) or mode=thread.
Prints the peer's lines prefixed `impl=torch`, actorch's as
  pyloader impl=actorch mode=M dataset=D workers=W n=N rate=R first_batch_s=F rss_mb=M
then, per dataset, `pyloader-ratio` lines: actorch at W against torch at its best worker count.

Usage: /usr/bin/python3 bench/pyloader.py --module-dir build/release/python
       [--peer ../shared/bench/peer/torch_python_dataset.py] [--tiny-n 200000] [--work-n 4000]
Internal: pyloader.py --one KIND W N MODE (one actorch run; needs actorch on PYTHONPATH).
"""
import argparse
import os
import re
import subprocess
import sys


def one(kind, workers, n, mode):
    import resource
    import time

    import numpy as np
    import torch

    import actorch
    torch.set_num_threads(1)

    class Work(torch.utils.data.Dataset):  # the peer's, line for line
        def __init__(self, n):
            self.n = n
            self.base = np.random.default_rng(0).random((3, 64, 64), dtype=np.float32)

        def __getitem__(self, i):
            a = np.roll(self.base, i % 17, axis=2)
            a = (a - a.mean()) / (a.std() + 1e-6)
            return a[:, 4:60, 4:60].copy(), i % 10

        def __len__(self):
            return self.n

    class Tiny(torch.utils.data.Dataset):
        def __init__(self, n):
            self.n = n

        def __getitem__(self, i):
            return i, i % 10

        def __len__(self):
            return self.n

    ds = Work(n) if kind == "work" else Tiny(n)
    context = "thread" if mode == "thread" and workers > 0 else None
    loader = actorch.DataLoader(ds, batch_size=64, num_workers=workers,
                                multiprocessing_context=context)
    best, first = 0.0, None
    for _ in range(2):
        t = time.perf_counter()
        k = 0
        for x, y in loader:
            if first is None:
                first = time.perf_counter() - t
            k += len(y)
        best = max(best, k / (time.perf_counter() - t))
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss +
           resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    del loader  # the worker processes end (and count in RUSAGE_CHILDREN once reaped)
    rss = max(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss +
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(f"pyloader impl=actorch mode={mode} dataset={kind} workers={workers} n={n} "
          f"rate={best:.0f} first_batch_s={first:.3f} rss_mb={rss / 1024:.0f}", flush=True)


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--module-dir", default=os.path.join(here, "..", "build", "release", "python"))
    ap.add_argument("--peer", default=os.path.join(here, "..", "..", "shared", "bench", "peer",
                                                   "torch_python_dataset.py"))
    ap.add_argument("--tiny-n", type=int, default=200000)
    ap.add_argument("--work-n", type=int, default=4000)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.module_dir), OMP_NUM_THREADS="1")
    results = []

    def run(cmd, prefix=""):
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            sys.exit(f"pyloader: {' '.join(cmd)} failed:\n{out.stderr}")
        for line in out.stdout.splitlines():
            if line.startswith("pyloader "):
                line = line.replace("pyloader ", "pyloader " + prefix, 1)
                print(line, flush=True)
                results.append(fields(line))

    for kind, n in (("tiny", args.tiny_n), ("work", args.work_n)):
        for w in (0, 1, 2):
            run([sys.executable, args.peer, kind, str(w), str(n)], "impl=torch ")
            run([sys.executable, __file__, "--one", kind, str(w), str(n), "process"])
        run([sys.executable, __file__, "--one", kind, "2", str(n), "thread"])

    for kind in ("tiny", "work"):
        torch_runs = [r for r in results if r["impl"] == "torch" and r["dataset"] == kind]
        best = max(torch_runs, key=lambda r: float(r["rate"]))
        torch_w2 = next(r for r in torch_runs if r["workers"] == "2")
        for r in results:
            if r["impl"] != "actorch" or r["dataset"] != kind:
                continue
            print(f"pyloader-ratio dataset={kind} mode={r['mode']} workers={r['workers']} "
                  f"rate={r['rate']} torch_best_rate={best['rate']} "
                  f"torch_best_workers={best['workers']} "
                  f"rate_ratio={float(r['rate']) / float(best['rate']):.2f} "
                  f"first_batch_ratio_vs_torch_w2="
                  f"{float(r['first_batch_s']) / max(float(torch_w2['first_batch_s']), 1e-6):.2f} "
                  f"rss_ratio_vs_torch_w2={float(r['rss_mb']) / float(torch_w2['rss_mb']):.2f}",
                  flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        one(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
