"""The images workload of ../shared/bench/WORKLOADS.md side by side: torchvision's ImageFolder
and torch's DataLoader (the peer, ../shared/bench/peer/torch_images.py, at W = 0, 1, 2) against
`actorch bench images` (the C++ loader) and actorch.DataLoader over actorch.data.ImageFolder from
Python (which=actorch-python), on the same files, each run a fresh process, in one session, in
interleaved rounds. Writes the image set first when ROOT is missing (bench/make_images.py).

Prints each run's `images ...` line, then `images-ratio` lines: each actorch run against the
peer's best rate (of W = 0, 1, 2) and against the peer at the same W; the targets of issue 42
are rate_ratio >= 2.5, cpu and rss below the peer's, first batch at most 0.25x torch's at W=2.

Usage: /usr/bin/python3 bench/images.py [--root /tmp/actorch-images] [--n 3000]
       [--cli build/release/tools/actorch] [--module-dir build/release/python] [--rounds 1]
       [--step-ms 40]
Internal: images.py --python ROOT W (one actorch.DataLoader run).
"""
import argparse
import os
import subprocess
import sys


def python_run(root, workers):
    import resource
    import time

    import torch

    import actorch
    import actorch.transforms as T
    torch.set_num_threads(1)
    ds = actorch.data.ImageFolder(root, T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    loader = actorch.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers)

    def cpu():
        a = resource.getrusage(resource.RUSAGE_SELF)
        b = resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
    best, first = 0.0, None
    c0 = cpu()
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
    print(f"images which=actorch-python workers={workers} images={len(ds)} rate={best:.1f} "
          f"first_batch_s={first:.3f} cpu_s_per_image={(cpu() - c0) / (2 * len(ds)):.5f} "
          f"rss_mb={rss / 1024:.0f}", flush=True)


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/actorch-images")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--cli", default=os.path.join(here, "..", "build", "release", "tools",
                                                  "actorch"))
    ap.add_argument("--module-dir", default=os.path.join(here, "..", "build", "release", "python"))
    ap.add_argument("--peer", default=os.path.join(here, "..", "..", "shared", "bench", "peer",
                                                   "torch_images.py"))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--step-ms", type=float, default=40.0)
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        subprocess.run([sys.executable, os.path.join(here, "make_images.py"), args.root,
                        "--n", str(args.n)], check=True)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.module_dir), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    results = []

    def run(cmd):
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            sys.exit(f"images: {' '.join(cmd)} failed:\n{out.stderr}")
        for line in out.stdout.splitlines():
            if line.startswith("images"):
                print(line, flush=True)
                if line.startswith("images "):
                    results.append(fields(line))

    for r in range(args.rounds):
        for w in (0, 1, 2):
            cmds = [[sys.executable, args.peer, args.root, str(w)],
                    [args.cli, "bench", "images", "--root", args.root, "--workers", str(w)]
                    + (["--step-ms", str(args.step_ms)] if w == 2 else []),
                    [sys.executable, __file__, "--python", args.root, str(w)]]
            for cmd in (cmds if r % 2 == 0 else cmds[::-1]):
                run(cmd)

    def median(rows, key):
        v = sorted(float(x[key]) for x in rows)
        return v[len(v) // 2]

    groups = {}
    for x in results:
        groups.setdefault((x["which"], x["workers"]), []).append(x)
    stats = {k: {key: median(v, key) for key in ("rate", "first_batch_s", "cpu_s_per_image",
                                                  "rss_mb")} for k, v in groups.items()}
    torch_best_w = max((k for k in stats if k[0] == "torch"), key=lambda k: stats[k]["rate"])[1]
    tb = stats[("torch", torch_best_w)]
    t2 = stats.get(("torch", "2"), tb)
    for (which, w), s in sorted(stats.items()):
        if which == "torch":
            continue
        same = stats.get(("torch", w), tb)
        print(f"images-ratio which={which} workers={w} rate={s['rate']:.1f} "
              f"torch_best_rate={tb['rate']:.1f} torch_best_workers={torch_best_w} "
              f"rate_ratio={s['rate'] / tb['rate']:.2f} "
              f"cpu_ratio_vs_torch_same_w={s['cpu_s_per_image'] / same['cpu_s_per_image']:.2f} "
              f"rss_ratio_vs_torch_same_w={s['rss_mb'] / same['rss_mb']:.2f} "
              f"first_batch_ratio_vs_torch_w2={s['first_batch_s'] / t2['first_batch_s']:.2f}",
              flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--python":
        python_run(sys.argv[2], int(sys.argv[3]))
    else:
        main()
