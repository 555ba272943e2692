#!/usr/bin/env python3
"""The loader's efficiency target, measured the only way this shared machine allows: in rounds.

Each round runs, one after another in a rotating order, `actorch bench loader-raw` (the plain
single-threaded loop), `loader-raw --threads W` (the same loop's batches shared among W threads,
each taking the next one from a counter, nothing else passing between them), the same with
`--pin-threads 1` (thread t pinned to the t-th usable CPU), `loader --workers W` (the default
options) and `loader --workers W --pin-workers 1` (worker i pinned to the i-th usable CPU, the
loader's worker_cpus option). Per round it prints

  loader-efficiency round=i raw=R raw_threads=T raw_threads_pinned=TP loader=L loader_pinned=P
                    efficiency=E efficiency_pinned=EP scaling=S scaling_pinned=SP pipeline=Q
                    pipeline_pinned=QP

with E = L / (min(W, cores) * R), the target of issue 4 (the ideal W-worker pipeline on C cores
is min(W, C) times loader-raw, ../shared/bench/WORKLOADS.md), EP the same for P; S = T /
(min(W, cores) * R), what the machine itself gives for the same work shared among W threads,
SP the same for TP; and Q = L / T, QP = P / TP, the pipeline against that loop, unpinned and
pinned. A summary line gives each one's median and quartiles over the rounds. Only ratios within a round mean anything: these VMs are
shared and their speed drifts.

Usage: bench/loader_efficiency.py [--bin build/release/tools/actorch] [--rounds 20]
                                  [--workers 2] [--passes 20] [--n 10000]
"""
import argparse
import os
import statistics
import subprocess
import sys


def rate(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split()[1:] if "=" in kv)
    if "samples_per_s" not in fields:
        sys.exit(f"loader_efficiency: no samples_per_s in the output of {' '.join(cmd)}: {out!r}")
    return float(fields["samples_per_s"])


def summary(name, xs):
    if len(xs) < 2:
        return f"{name}_median={statistics.median(xs):.3f}"
    q1, q2, q3 = statistics.quantiles(xs, n=4)
    return f"{name}_median={q2:.3f} {name}_q1={q1:.3f} {name}_q3={q3:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/release/tools/actorch")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--n", type=int, default=10000)
    a = ap.parse_args()
    if a.rounds < 1 or a.workers < 1 or a.passes < 0 or a.n < 1:
        sys.exit("loader_efficiency: --rounds, --workers and --n must be positive, --passes >= 0")
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"loader_efficiency: {a.bin} is not an executable (build the release preset)")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    ideal = min(a.workers, os.cpu_count() or 1)
    common = ["--passes", str(a.passes), "--n", str(a.n)]
    runs = {
        "raw": [a.bin, "bench", "loader-raw"] + common,
        "raw_threads": [a.bin, "bench", "loader-raw", "--threads", str(a.workers)] + common,
        "raw_threads_pinned": [a.bin, "bench", "loader-raw", "--threads", str(a.workers),
                               "--pin-threads", "1"] + common,
        "loader": [a.bin, "bench", "loader", "--workers", str(a.workers)] + common,
        "loader_pinned": [a.bin, "bench", "loader", "--workers", str(a.workers),
                          "--pin-workers", "1"] + common,
    }
    names = list(runs)
    eff, eff_pinned, scaling, scaling_pinned, pipeline, pipeline_pinned = [], [], [], [], [], []
    for i in range(a.rounds):
        r = {}
        for k in range(len(names)):  # rotate the order: no run always follows the same one
            name = names[(i + k) % len(names)]
            r[name] = rate(runs[name], env)
        eff.append(r["loader"] / (ideal * r["raw"]))
        eff_pinned.append(r["loader_pinned"] / (ideal * r["raw"]))
        scaling.append(r["raw_threads"] / (ideal * r["raw"]))
        scaling_pinned.append(r["raw_threads_pinned"] / (ideal * r["raw"]))
        pipeline.append(r["loader"] / r["raw_threads"])
        pipeline_pinned.append(r["loader_pinned"] / r["raw_threads_pinned"])
        print(f"loader-efficiency round={i} workers={a.workers} passes={a.passes} n={a.n} "
              f"raw={r['raw']:.0f} raw_threads={r['raw_threads']:.0f} "
              f"raw_threads_pinned={r['raw_threads_pinned']:.0f} loader={r['loader']:.0f} "
              f"loader_pinned={r['loader_pinned']:.0f} efficiency={eff[-1]:.3f} "
              f"efficiency_pinned={eff_pinned[-1]:.3f} scaling={scaling[-1]:.3f} "
              f"scaling_pinned={scaling_pinned[-1]:.3f} pipeline={pipeline[-1]:.3f} "
              f"pipeline_pinned={pipeline_pinned[-1]:.3f}",
              flush=True)
    print(f"loader-efficiency rounds={a.rounds} workers={a.workers} passes={a.passes} n={a.n} "
          f"ideal={ideal} {summary('efficiency', eff)} {summary('efficiency_pinned', eff_pinned)} "
          f"{summary('scaling', scaling)} {summary('scaling_pinned', scaling_pinned)} "
          f"{summary('pipeline', pipeline)} "
          f"{summary('pipeline_pinned', pipeline_pinned)}")


if __name__ == "__main__":
    main()
