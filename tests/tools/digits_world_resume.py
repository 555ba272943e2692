"""A checkpoint written mid-epoch resumes at another world size (Note [Resuming at another world
size] in actors/trainer/replica_run.cpp): `actorch launch --nproc-per-node 2 digits_ddp` stops
in the middle of epoch 1 (--max-steps, with a checkpoint at that step); a 3-rank job resumes it
(--resume) and stops again in the middle of the same epoch, in the segment it resumed; a 2-rank
job resumes that and trains to the end. Counting every rank's completed steps of the three runs
(their sample logs) gives each training sample of every epoch exactly once, repeats only as
DistributedSampler's padding makes them at each world size; every rank of a run takes as many
steps in an epoch; and the job ends at the test accuracy an undisturbed 2-rank run reaches.
Usage: python3 digits_world_resume.py ACTORCH_BINARY DIGITS_DDP_BINARY SCRATCH_DIR
"""
import collections
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_elastic import BATCH, TRAIN, read_log, report_of  # noqa: E402
from job_helpers import free_port, test_accuracy as accuracy  # noqa: E402

EPOCHS = 4
STEPS_AT_2 = math.ceil(math.ceil(TRAIN / 2) / BATCH)  # a 2-rank epoch's steps


def launch(actorch, digits, out_dir, world, *args):
    """Runs the job at `world` ranks into out_dir; its output (exit 0 checked by the caller)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    cmd = [actorch, "launch", "--nproc-per-node", str(world), "--master-port", str(free_port()),
           digits, "--out", out_dir, "--epochs", str(EPOCHS), "--batch-size", str(BATCH),
           "--plot", "0", "--sample-log", os.path.join(out_dir, "samples"), *map(str, args)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                       timeout=240)
    return p.returncode, p.stdout


def steps_taken(out_dir, world):
    """{(epoch, rank): [batch indices of each completed step]} of a run's sample logs."""
    out = collections.defaultdict(list)
    for rank in range(world):
        rows = read_log(os.path.join(out_dir, f"samples.{rank}"))
        done = {(r[1], r[2], r[3]) for r in rows if r[4]}
        for _, epoch, membership, step, is_done, idx in rows:
            if not is_done and (epoch, membership, step) in done:
                out[(epoch, rank)].append(idx)
    return out


def main():
    actorch, digits, scratch = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    problems = []
    stop_1 = STEPS_AT_2 + 10  # epoch 1, step 10
    stop_2 = stop_1 + 5  # 5 steps into the 3-rank segment of epoch 1
    runs = [("first", 2, ["--max-steps", stop_1, "--checkpoint-every", stop_1]),
            ("second", 3, ["--max-steps", stop_2, "--checkpoint-every", stop_2]),
            ("third", 2, [])]
    before = None
    taken = []
    for name, world, args in runs:
        out_dir = os.path.join(scratch, name)
        resume = ["--resume", os.path.join(before, "digits_ddp.safetensors")] if before else []
        code, out = launch(actorch, digits, out_dir, world, *args, *resume)
        if code != 0:
            problems.append(f"{name} run ({world} ranks) exited {code}:\n{report_of(out)}")
            break
        steps = steps_taken(out_dir, world)
        for epoch in sorted({e for e, _ in steps}):
            counts = {len(steps[(epoch, r)]) for r in range(world)}
            if len(counts) != 1:
                problems.append(f"{name} run: epoch {epoch}: the ranks took {counts} steps")
        taken.append((world, steps))
        before = out_dir
    if not problems:
        worlds_of = collections.defaultdict(list)  # epoch -> the worlds of its segments
        counts = collections.defaultdict(collections.Counter)
        for world, steps in taken:
            for (epoch, _), batches in steps.items():
                for idx in batches:
                    counts[epoch].update(idx)
            for epoch in sorted({e for e, _ in steps}):
                worlds_of[epoch].append(world)
        for e in range(EPOCHS):
            c = counts[e]
            missing = [i for i in range(TRAIN) if c[i] == 0]
            extra = sum(k - 1 for k in c.values() if k > 1)
            allowed = sum(w - 1 for w in worlds_of[e])
            if missing or extra > allowed:
                problems.append(f"epoch {e} (segments at worlds {worlds_of[e]}): "
                                f"{len(missing)} samples missing {missing[:10]}, {extra} repeated "
                                f"(padding allows {allowed})")
        if worlds_of[1] != [2, 3, 2]:
            problems.append(f"epoch 1 ran at worlds {worlds_of[1]}, not [2, 3, 2]")
        acc = accuracy(out)
        if acc is None or acc < 0.95:
            problems.append(f"test accuracy {acc} (want >= 0.95):\n{out[-2000:]}")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"digits_world_resume: ok (2 -> 3 -> 2 ranks in epoch 1, test accuracy {acc})")


if __name__ == "__main__":
    main()
