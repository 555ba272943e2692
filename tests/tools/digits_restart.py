"""A lost rank: `actorch launch --max-restarts 2 digits_ddp` with rank 1 killed by SIGKILL in the
middle of training restarts the job, which resumes from its last checkpoint on its own, and ends
with the test accuracy of an undisturbed run; the launcher says which rank died, how, and which
restart this is.
Usage: python3 digits_restart.py ACTORCH_BINARY DIGITS_DDP_BINARY SCRATCH_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

EPOCHS = "40"


def accuracy(text):
    m = re.search(r"test accuracy ([0-9.]+)", text)
    return float(m.group(1)) if m else None


def rank_pid(launcher_pid, rank):
    """The pid of the launcher's child running `rank` (read from its environment)."""
    for task in os.listdir(f"/proc/{launcher_pid}/task"):
        with open(f"/proc/{launcher_pid}/task/{task}/children") as f:
            for pid in f.read().split():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as e:
                        env = e.read().split(b"\0")
                except OSError:
                    continue
                if f"RANK={rank}".encode() in env:
                    return int(pid)
    return None


def main():
    actorch, digits, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    calm, hit = os.path.join(scratch, "calm"), os.path.join(scratch, "hit")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")

    r = subprocess.run([actorch, "launch", "--nproc-per-node", "2", digits, "--epochs", EPOCHS,
                        "--out", calm], capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        sys.exit(f"undisturbed run failed:\n{r.stdout}\n{r.stderr}")
    want = accuracy(r.stdout)

    p = subprocess.Popen([actorch, "launch", "--nproc-per-node", "2", "--max-restarts", "2",
                          digits, "--epochs", EPOCHS, "--out", hit],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    metrics = os.path.join(hit, "metrics.csv")
    deadline = time.time() + 300
    killed = None
    while time.time() < deadline and p.poll() is None:
        try:
            with open(metrics) as f:
                rows = len(f.read().splitlines()) - 1
        except OSError:
            rows = 0
        if rows >= 3:  # past a few epoch-end checkpoints, far from the end
            killed = rank_pid(p.pid, 1)
            if killed:
                os.kill(killed, signal.SIGKILL)
                break
        time.sleep(0.002)
    out, err = p.communicate(timeout=600)
    failures = []
    if killed is None:
        failures.append("never found rank 1 mid-training to kill (the job ended first?)")
    if p.returncode != 0:
        failures.append(f"the restarted job failed ({p.returncode})")
    if not re.search(r"rank 1 was killed by signal 9 \(Killed\).*restarting the job "
                     r"\(restart 1 of 2\)", err):
        failures.append("the launcher did not say which rank died, how, and which restart")
    if "resuming from" not in out:
        failures.append("the restarted job did not resume from its checkpoint")
    got = accuracy(out)
    if got != want:
        failures.append(f"test accuracy {got} after the restart, {want} undisturbed")
    if failures:
        sys.exit("\n".join(failures) + f"\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}")
    print(f"digits_restart: rank 1 killed, job restarted and resumed; accuracy {got} == {want}")


if __name__ == "__main__":
    main()
