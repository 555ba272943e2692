"""A lost rank heals without a restart: `actorch launch --elastic --nproc-per-node 3 digits_ddp`
with rank 1 (then, in a second run, rank 0) killed by SIGKILL in the middle of an epoch. The
job finishes with exit status 0; the survivors are the processes that started (their pids never
change: nothing restarted); counting the sample ids of every completed step of every epoch (a
step a survivor finished, every rank's batch of it) gives each training sample exactly once
(repeats only as DistributedSampler's padding makes them); the test accuracy reaches 0.97; and
the launcher and the survivors say who was lost and how they regrouped. A third run kills two
ranks one after the other (rank 2, then rank 0), leaving one. A fourth and a fifth, with
--max-restarts 1, have the launcher replace the killed rank (1, then 0): the replacement joins
the survivors' regrouping, takes their live state and position, and the world is back at 3
(the other two still the first processes).
Usage: python3 digits_elastic.py ACTORCH_BINARY DIGITS_DDP_BINARY SCRATCH_DIR
"""
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_helpers import free_port, test_accuracy as accuracy  # noqa: E402

TRAIN = 1437  # digits' training split (80% of 1797)
BATCH = 32
EPOCHS = 15


def read_log(path):
    """[(pid, epoch, membership, step, done, [index, ...])] of a rank's sample log (a line per
    batch taken, and one when the step's gradients were reduced); a line cut by a kill is
    dropped."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                pid, epoch, membership, step, what, *idx = line.split()
                rows.append((int(pid), int(epoch), int(membership), int(step), what == "done",
                             [int(i) for i in idx[0].split(",")] if idx else []))
    except OSError:
        pass
    return rows


def wait_for_steps(log, epoch, steps, p, deadline):
    """Waits until `log` has `steps` steps done in `epoch` (mid-epoch); its process's pid."""
    while time.time() < deadline and p.poll() is None:
        rows = read_log(log)
        if sum(1 for r in rows if r[1] == epoch and r[4]) >= steps:
            return rows[-1][0]
        time.sleep(0.005)
    return None


def padding_allowance(worlds):
    """Repeats DistributedSampler's padding may add to an epoch split into segments of these
    world sizes: at most world - 1 each."""
    return sum(w - 1 for w in worlds)


def report_of(out):
    """A sanitizer's report in the job's output whole (from where it begins), else the output's
    tail."""
    at = out.find("WARNING: ThreadSanitizer")
    at = out.find("ERROR: AddressSanitizer") if at < 0 else at
    return out[max(0, out.rfind("\n", 0, at)):] if at >= 0 else out[-3000:]


def run(actorch, digits, scratch, kills, problems, restarts=0):
    """Starts the job, kills ranks at (rank, epoch, steps into it), checks the outcome; with
    `restarts`, the launcher replaces that many of them."""
    name = "kill_" + "_".join(str(r) for r, _, _ in kills) + ("_replaced" if restarts else "")
    out_dir = os.path.join(scratch, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    log = os.path.join(out_dir, "samples")
    cmd = [actorch, "launch", "--elastic", "--max-restarts", str(restarts), "--nproc-per-node", "3",
           "--master-port", str(free_port()), digits, "--out", out_dir, "--epochs", str(EPOCHS),
           "--batch-size", str(BATCH), "--plot", "0", "--sample-log", log]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    started = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 240
    killed = {}  # pid -> rank
    killed_ranks = set()
    resumed_ms = []
    for rank, epoch, steps in kills:
        pid = wait_for_steps(f"{log}.{rank}", epoch, steps, p, deadline)
        if pid is None:
            ended = p.poll()
            p.kill()
            out, _ = p.communicate()
            why = (f"the launcher exited {ended} first" if ended is not None
                   else "not within 240 s")
            problems.append(f"{name}: rank {rank} never reached step {steps} of epoch {epoch} "
                            f"({why}):\n{report_of(out)}")
            return
        others = [r for r in range(3) if r != rank and (restarts or r not in killed_ranks)]
        lines = {r: len(read_log(f"{log}.{r}")) for r in others}
        os.kill(pid, signal.SIGKILL)
        killed[pid] = rank
        killed_ranks.add(rank)
        # Kill to the survivors' next completed step (the sample log's next line).
        t0 = time.time()
        while time.time() < deadline and p.poll() is None and all(
                len(read_log(f"{log}.{r}")) == lines[r] for r in others):
            time.sleep(0.002)
        resumed_ms.append(round((time.time() - t0) * 1000))
    try:
        out, _ = p.communicate(timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        problems.append(f"{name}: the job did not end within 240 s:\n{out[-3000:]}")
        return
    seconds = time.time() - started
    if p.returncode != 0:
        problems.append(f"{name}: the launcher exited {p.returncode}:\n{report_of(out)}")
        return
    for rank in killed_ranks:
        if restarts and f"rank {rank} replaced: replacement" not in out:
            problems.append(f"{name}: the launcher did not replace rank {rank}:\n{out[-2000:]}")
        if f"rank {rank} was killed by signal 9" not in out:
            problems.append(f"{name}: the launcher did not name rank {rank} as killed:\n{out[-2000:]}")
    regroups = re.findall(r"launch rank (\d+) regrouped as rank (\d+) of (\d+) \(membership (\d+)"
                          r": ranks ([\d,]+)\) (\d+) ms after", out)
    if not regroups:
        problems.append(f"{name}: no survivor said it regrouped:\n{out[-3000:]}")
    # The survivors never restarted: one pid per rank's log, the first one's; a replaced rank
    # two, the killed one's and its replacement's.
    logs = {r: read_log(f"{log}.{r}") for r in range(3)}
    for r, rows in logs.items():
        pids = {row[0] for row in rows}
        want = 2 if restarts and r in killed_ranks else 1
        if len(pids) != want:
            problems.append(f"{name}: rank {r} ran as {len(pids)} processes {sorted(pids)}, "
                            f"not {want}")
    if restarts and not any(g[4] == "0,1,2" for g in regroups):
        problems.append(f"{name}: the world did not grow back to ranks 0,1,2: {regroups}\n"
                        f"{out[-3000:]}")
    # The steps that happened: those a survivor finished (its model is the job's). A lost
    # rank's batch of such a step counts even when it died before finishing it itself (its
    # gradient reached the survivors); a step no survivor finished was done again.
    finished = {(row[1], row[2], row[3]) for rows in logs.values() for row in rows
                if row[4] and row[0] not in killed}
    # Every sample of every epoch exactly once, padding aside.
    for e in range(EPOCHS):
        counts = collections.Counter()
        for rows in logs.values():
            for _, epoch, membership, step, done, idx in rows:
                if epoch == e and not done and (epoch, membership, step) in finished:
                    counts.update(idx)
        missing = [i for i in range(TRAIN) if counts[i] == 0]
        extra = sum(c - 1 for c in counts.values() if c > 1)
        stray = [i for i in counts if not 0 <= i < TRAIN]
        # The epoch's segments: the world it began with, and one fewer after each kill in it.
        lost = 0 if restarts else 1
        world = 3 - lost * sum(1 for _, ke, _ in kills if ke < e)
        segments = [world - lost * j for j in range(1 + sum(1 for _, ke, _ in kills if ke == e))]
        allowed = padding_allowance(segments)
        if missing or stray or extra > allowed:
            problems.append(f"{name}: epoch {e}: {len(missing)} samples missing {missing[:10]}, "
                            f"{extra} repeated (padding allows {allowed}), strays {stray[:5]}")
    acc = accuracy(out)
    if acc is None or acc < 0.97:
        problems.append(f"{name}: test accuracy {acc} (want >= 0.97):\n{out[-2000:]}")
    # Time from each kill to the survivors' next step, from the logs' modification order is
    # not kept; the regroup lines say how long each survivor took from its failed collective.
    healed_ms = [int(g[5]) for g in regroups]
    print(f"{name}: exit 0 in {seconds:.1f} s, test accuracy {acc}, regrouped "
          f"{len(regroups)} time(s) in {min(healed_ms) if healed_ms else '-'}-"
          f"{max(healed_ms) if healed_ms else '-'} ms after the failed collective; "
          f"from each kill to the survivors' next step {resumed_ms} ms; "
          f"memberships {sorted({(g[3], g[4]) for g in regroups})}")


def main():
    actorch, digits, scratch = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    problems = []
    run(actorch, digits, scratch, [(1, 2, 10)], problems)
    run(actorch, digits, scratch, [(0, 2, 10)], problems)
    run(actorch, digits, scratch, [(2, 2, 5), (0, 4, 7)], problems)
    run(actorch, digits, scratch, [(1, 2, 10)], problems, restarts=1)
    run(actorch, digits, scratch, [(0, 3, 4)], problems, restarts=1)
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print("digits_elastic: ok")


if __name__ == "__main__":
    main()
