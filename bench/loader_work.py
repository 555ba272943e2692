#!/usr/bin/env python3
"""The loader's own work, counted rather than timed: what the pipeline adds to the plain loop.

bench/loader_efficiency.py times the loader against `loader-raw`, and on a shared 2-core VM its
figures move with the machine. This counts instead, for one epoch of each of `loader-raw` (the
plain single-threaded loop), `loader-raw --threads W` (its batches shared by W threads, nothing
else between them) and `loader --workers W`:

  - instructions executed in user space, under valgrind's callgrind (the same count for the
    same binary and inputs, whatever else the machine does; threads run one at a time there);
  - context switches, voluntary (a thread blocked) and involuntary (a thread was preempted),
    from the kernel's rusage of a plain run, median of --repeats runs.

Each count is that of an epoch of 2N samples minus that of an epoch of N, so that what a run
does once (process start, the actor system, the first buffers) cancels. One line per run:

  loader-work run=R workers=W passes=P n=N instructions=I voluntary_switches=V
              involuntary_switches=S

then a summary, `loader-work ... extra_instructions=X`, X being the loader's instructions over
the plain loop's, minus one.

Usage: bench/loader_work.py [--bin build/release/tools/actorch] [--workers 2] [--passes 20]
                            [--n 10000] [--repeats 5]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile


def instructions(cmd, env):
    """User-space instructions of `cmd`, counted by callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"loader_work: {' '.join(cmd)} failed under callgrind:\n{p.stderr[-2000:]}")
        m = re.search(r"Collected : (\d+)", p.stderr)
        if not m:
            sys.exit(f"loader_work: no instruction count from callgrind for {' '.join(cmd)}")
        return int(m.group(1))


def rusage(cmd, env):
    """(voluntary, involuntary) context switches of one plain run of `cmd`, all threads."""
    # stderr goes to a file: a pipe read only after wait4 could fill up and stall the child.
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            text = err.read().decode(errors="replace")
            sys.exit(f"loader_work: {' '.join(cmd)} failed:\n{text[-2000:]}")
    return ru.ru_nvcsw, ru.ru_nivcsw


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/release/tools/actorch")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    if a.workers < 1 or a.passes < 0 or a.n < 1 or a.repeats < 1:
        sys.exit("loader_work: --workers, --n and --repeats must be positive, --passes >= 0")
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"loader_work: {a.bin} is not an executable (build the release preset)")
    if shutil.which("valgrind") is None:
        sys.exit("loader_work: needs valgrind (bash scripts/setup.sh bench installs it)")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    runs = {
        "raw": ["loader-raw"],
        "raw_threads": ["loader-raw", "--threads", str(a.workers)],
        "loader": ["loader", "--workers", str(a.workers)],
    }
    counted = {}
    for name, args in runs.items():
        def cmd(n):
            return [a.bin, "bench"] + args + ["--passes", str(a.passes), "--n", str(n)]

        instr = instructions(cmd(2 * a.n), env) - instructions(cmd(a.n), env)
        per_n = []
        for n in (a.n, 2 * a.n):
            samples = [rusage(cmd(n), env) for _ in range(a.repeats)]
            per_n.append([statistics.median(s[i] for s in samples) for i in range(2)])
        vol, invol = (per_n[1][i] - per_n[0][i] for i in range(2))
        counted[name] = instr
        print(f"loader-work run={name} workers={a.workers} passes={a.passes} n={a.n} "
              f"instructions={instr} voluntary_switches={vol:.0f} "
              f"involuntary_switches={invol:.0f}", flush=True)
    print(f"loader-work workers={a.workers} passes={a.passes} n={a.n} "
          f"extra_instructions={counted['loader'] / counted['raw'] - 1:.4f} "
          f"extra_instructions_threads={counted['raw_threads'] / counted['raw'] - 1:.4f}")


if __name__ == "__main__":
    main()
