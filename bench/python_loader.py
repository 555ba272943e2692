"""The loader workload of ../shared/bench/WORKLOADS.md over .npy files, driven from Python:
actorch.DataLoader over actorch.data.NpyDataset against PyTorch's DataLoader over the same
files (a Dataset over np.load'ed arrays, as a PyTorch user writes it), in alternating rounds.
The files hold the workload's samples after its P normalisation passes, so both loaders only
load, batch (64, shuffled with seed 0) and hand over; the consumer touches every batch.
Prints `python-loader impl=I workers=W n=N samples=S time_s=T samples_per_s=R` per run.

With --bin (the actorch CLI), the same loader driven from C++ over the same files runs too
(`actorch bench loader --npy x.npy,y.npy`, printed as impl=cpp).

Usage: /usr/bin/python3 bench/python_loader.py --module-dir build/release/python
       [--bin build/release/tools/actorch] [--n 20000] [--passes 1] [--rounds 3] [--workers 0 2]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_dataset(folder, n, passes):
    j = np.arange(3072, dtype=np.float32)
    x = np.empty((n, 3, 32, 32), dtype=np.float32)
    for i in range(n):
        v = ((j + i) % 251) / 251
        for _ in range(passes):
            v = (v - 0.5) / 0.25
        x[i] = v.reshape(3, 32, 32)
    y = np.arange(n, dtype=np.int64) % 10
    paths = [os.path.join(folder, "x.npy"), os.path.join(folder, "y.npy")]
    np.save(paths[0], x)
    np.save(paths[1], y)
    return paths


def run_actorch(actorch, paths, workers):
    ds = actorch.data.NpyDataset(paths)
    loader = actorch.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers, seed=0)
    t0 = time.perf_counter()
    seen, chk = 0, 0.0
    for x, _ in loader.__iter__(as_torch=False):
        a = np.from_dlpack(x)  # zero-copy view of the batch
        seen += a.shape[0]
        chk += float(a[0, 0, 0, 0])
    return seen, time.perf_counter() - t0


def run_torch(torch, paths, workers):
    x, y = np.load(paths[0]), np.load(paths[1])

    class Npy(torch.utils.data.Dataset):
        def __len__(self):
            return len(y)

        def __getitem__(self, i):
            return torch.from_numpy(x[i]), int(y[i])

    g = torch.Generator()
    g.manual_seed(0)
    loader = torch.utils.data.DataLoader(Npy(), batch_size=64, shuffle=True, num_workers=workers,
                                         generator=g)
    t0 = time.perf_counter()
    seen, chk = 0, 0.0
    for xb, _ in loader:
        seen += xb.shape[0]
        chk += float(xb[0, 0, 0, 0])
    return seen, time.perf_counter() - t0


def run_cpp(binary, paths, workers):
    out = subprocess.run([binary, "bench", "loader", "--workers", str(workers), "--npy",
                          ",".join(paths)], capture_output=True, text=True, check=True).stdout
    fields = dict(re.findall(r"(\w+)=(\S+)", out.strip().splitlines()[-1]))
    return int(fields["samples"]), int(fields["samples"]) / float(fields["samples_per_s"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module-dir", required=True)
    ap.add_argument("--bin")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = ap.parse_args()
    sys.path.insert(0, args.module_dir)
    import actorch
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
        print("python-loader: PyTorch is not installed; only actorch runs", file=sys.stderr)
    with tempfile.TemporaryDirectory() as folder:
        paths = write_dataset(folder, args.n, args.passes)
        for _ in range(args.rounds):
            for w in args.workers:
                impls = [("actorch", lambda: run_actorch(actorch, paths, w))]
                if args.bin:
                    impls.append(("cpp", lambda: run_cpp(args.bin, paths, w)))
                if torch is not None:
                    impls.append(("torch", lambda: run_torch(torch, paths, w)))
                for name, fn in impls:
                    seen, dt = fn()
                    assert seen == args.n, (name, seen)
                    print(f"python-loader impl={name} workers={w} passes={args.passes} "
                          f"n={args.n} samples={seen} time_s={dt:.3f} "
                          f"samples_per_s={seen / dt:.0f}", flush=True)


if __name__ == "__main__":
    main()
