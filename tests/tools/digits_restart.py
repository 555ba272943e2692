"""A lost rank: `actorch launch --max-restarts 2 digits_ddp` (and PyTorch's torchrun
--max_restarts 2) with rank 1 killed by SIGKILL in the middle of training restarts the job,
which resumes from its last checkpoint on its own, and ends with the test accuracy of an
undisturbed run; actorch's launcher says which rank died, how, and which restart this is.
The same with two launchers as two nodes: both restart their ranks together, sharing an
output folder or each with its own (then only node 0 has the checkpoint, and node 1 resumes
from the bytes rank 0 sends it: Note [Restarts across nodes] in actors/trainer/job.cpp).
Usage: python3 digits_restart.py ACTORCH_BINARY DIGITS_DDP_BINARY SCRATCH_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_helpers import free_port, test_accuracy as accuracy  # noqa: E402

EPOCHS = "40"


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


def check_resumed(out, want, problems):
    """Rank 0's output says the restarted job resumed and ended at `want`; its accuracy."""
    if "resuming from" not in out:
        problems.append("the restarted job did not resume from its checkpoint")
    got = accuracy(out)
    if got != want:
        problems.append(f"test accuracy {got} after the restart, {want} undisturbed")
    return got


def kill_rank1_midway(p, metrics):
    """Waits for 3 epochs in `metrics`, then kills rank 1 (a child of process p); its pid."""
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        try:
            with open(metrics) as f:
                rows = len(f.read().splitlines()) - 1
        except OSError:
            rows = 0
        if rows >= 3:  # past a few epoch-end checkpoints, far from the end
            pid = rank_pid(p.pid, 1)
            if pid:
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.05)  # epochs take far longer; the job needs the CPU
    return None


def main():
    actorch, digits, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    calm = os.path.join(scratch, "calm")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")

    r = subprocess.run([actorch, "launch", "--nproc-per-node", "2", digits, "--epochs", EPOCHS,
                        "--out", calm], capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        sys.exit(f"undisturbed run failed:\n{r.stdout}\n{r.stderr}")
    want = accuracy(r.stdout)
    failures = []
    torchrun = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun.py")
    launchers = {
        "actorch launch": [actorch, "launch", "--nproc-per-node", "2", "--max-restarts", "2"],
        "torchrun": [sys.executable, torchrun, "--nproc_per_node", "2", "--max_restarts", "2",
                     "--master_port", str(free_port()), "--no_python"],
    }
    for name, cmd in launchers.items():
        out_dir = os.path.join(scratch, name.replace(" ", "_"))
        p = subprocess.Popen(cmd + [digits, "--epochs", EPOCHS, "--out", out_dir],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        killed = kill_rank1_midway(p, os.path.join(out_dir, "metrics.csv"))
        out, err = p.communicate(timeout=600)
        mine = []
        if killed is None:
            mine.append("never found rank 1 mid-training to kill (the job ended first?)")
        if p.returncode != 0:
            mine.append(f"the restarted job failed ({p.returncode})")
        if name == "actorch launch" and not re.search(
                r"rank 1 was killed by signal 9 \(Killed\).*restarting the job "
                r"\(restart 1 of 2\)", err):
            mine.append("the launcher did not say which rank died, how, and which restart")
        got = check_resumed(out, want, mine)
        if mine:
            failures.append(f"{name}: " + "; ".join(mine) +
                            f"\nstdout:\n{out[-2000:]}\nstderr:\n{err[-2000:]}")
        else:
            print(f"digits_restart: {name}: rank 1 killed, job restarted and resumed; "
                  f"accuracy {got} == {want}")
    failures += two_nodes(actorch, digits, scratch, env, want, shared=True)
    failures += two_nodes(actorch, digits, scratch, env, want, shared=False)
    if failures:
        sys.exit("\n".join(failures))


def two_nodes(actorch, digits, scratch, env, want, shared):
    """Two launchers as two nodes of one rank each (node 0 hosts the store): rank 1, on node 1,
    killed mid-training restarts both nodes' ranks, which resume and end as undisturbed. Without
    a shared output folder rank 1 resumed at epoch 0 beside rank 0 at its checkpoint."""
    label = "two nodes" + ("" if shared else ", an output folder each")
    out_dir = os.path.join(scratch, "two_nodes" if shared else "two_nodes_own")
    outs = [out_dir, out_dir if shared else out_dir + "_node1"]
    port = str(free_port())
    # Across nodes the launchers need one job secret (Note [Launch secrets]).
    env = dict(env, ACTORCH_JOB_TOKEN=os.urandom(16).hex())
    nodes = [subprocess.Popen([actorch, "launch", "--nnodes", "2", "--node-rank", str(n),
                               "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                               "--master-port", port, "--max-restarts", "2", digits,
                               "--epochs", EPOCHS, "--out", outs[n]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for n in (0, 1)]
    killed = kill_rank1_midway(nodes[1], os.path.join(out_dir, "metrics.csv"))
    (out0, err0), (out1, err1) = (p.communicate(timeout=600) for p in nodes)
    mine = []
    if killed is None:
        mine.append("never found rank 1 mid-training to kill (the job ended first?)")
    if nodes[0].returncode != 0 or nodes[1].returncode != 0:
        mine.append(f"a node failed ({nodes[0].returncode}, {nodes[1].returncode})")
    if not re.search(r"rank 1 was killed by signal 9 \(Killed\).*restarting the job "
                     r"\(restart 1 of 2\)", err1):
        mine.append("node 1's launcher did not say which rank died, how, and which restart")
    # Node 0 hears it from node 1's launcher, or sees its own rank fail first (the peer gone).
    if not re.search(r"(node 1: rank 1 was killed by signal 9 \(Killed\); stopped this node's "
                     r"ranks; restarting them|rank 0 .*; stopped the other ranks; restarting the "
                     r"job) \(restart 1 of 2\)", err0):
        mine.append("node 0's launcher did not say why it restarted its ranks")
    if not shared and "wrote rank 0's checkpoint" not in out1:
        mine.append("node 1 did not take rank 0's checkpoint")
    got = check_resumed(out0, want, mine)
    if mine:
        return [f"{label}: " + "; ".join(mine) + f"\nnode 0 stdout:\n{out0[-2000:]}\n"
                f"node 0 stderr:\n{err0[-2000:]}\nnode 1 stderr:\n{err1[-2000:]}"]
    print(f"digits_restart: {label}: rank 1 killed on node 1, both nodes restarted and "
          f"resumed; accuracy {got} == {want}")
    return []


if __name__ == "__main__":
    main()
