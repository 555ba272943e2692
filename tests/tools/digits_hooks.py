"""The digits job with each DDP communication hook: 2 processes under `actorch launch`, and 2
trainer actors in one process (digits_actors), each reaching 95% test accuracy.
Usage: python3 digits_hooks.py ACTORCH_BINARY DIGITS_DDP_BINARY DIGITS_ACTORS_BINARY SCRATCH_DIR
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from job_helpers import test_accuracy  # noqa: E402


def main():
    actorch, ddp, actors, scratch = sys.argv[1:5]
    shutil.rmtree(scratch, ignore_errors=True)
    failures = []
    for hook in ("allreduce", "fp16", "bf16", "powersgd"):
        for how, cmd in (("2 processes", [actorch, "launch", "--nproc-per-node", "2", ddp]),
                         ("2 trainer actors", [actors, "--actors", "2"])):
            out = os.path.join(scratch, f"{hook}-{how.split()[1]}")
            r = subprocess.run(cmd + ["--comm-hook", hook, "--epochs", "12", "--plot", "0",
                                      "--out", out], capture_output=True, text=True, timeout=300)
            acc = test_accuracy(r.stdout)
            print(f"{hook:9} {how}: exit {r.returncode}, test accuracy {acc}")
            if r.returncode != 0 or acc is None or acc < 0.95:
                failures.append(f"{hook} on {how}: exit {r.returncode}, accuracy {acc}\n"
                                f"{r.stdout[-1500:]}{r.stderr[-1500:]}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
