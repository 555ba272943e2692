"""The seed tutorial (examples/distributed_tutorial, PyTorch's "Writing Distributed Applications")
under `actorch launch`: each rank prints exactly the lines PyTorch's tutorial prints, in order,
for a world of 2 and of 3 (rank 2 is outside the send/recv pair and the [0, 1] group, so its
tensors keep their values); started alone, it exits with status 1 and the reason.
Usage: python3 distributed_tutorial.py ACTORCH_BINARY TUTORIAL_BINARY
"""
import re
import subprocess
import sys


def expected(rank):
    if rank == 0:
        return ["Rank 0 has data tensor(1.) (blocking)", "Rank 0 started sending",
                "Rank 0 has data tensor(2.) (non-blocking)",
                "Rank 0 has data tensor(2.) (all_reduce in group [0, 1])"]
    if rank == 1:
        return ["Rank 1 has data tensor(1.) (blocking)", "Rank 1 started receiving",
                "Rank 1 has data tensor(2.) (non-blocking)",
                "Rank 1 has data tensor(2.) (all_reduce in group [0, 1])"]
    return [f"Rank {rank} has data tensor(0.) (blocking)",
            f"Rank {rank} has data tensor(0.) (non-blocking)",
            f"Rank {rank} has data tensor(1.) (all_reduce in group [0, 1])"]


def main():
    actorch, tutorial = sys.argv[1], sys.argv[2]
    failures = []
    for world in (2, 3):
        r = subprocess.run([actorch, "launch", "--nproc-per-node", str(world), tutorial],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            failures.append(f"world {world}: exit status {r.returncode}\n{r.stdout}\n{r.stderr}")
            continue
        by_rank = {}
        for line in r.stdout.splitlines():
            m = re.match(r"\[rank(\d+)\]: (.*)$", line)
            if m:
                by_rank.setdefault(int(m.group(1)), []).append(m.group(2))
        for rank in range(world):
            if by_rank.get(rank) != expected(rank):
                failures.append(f"world {world}, rank {rank}: printed {by_rank.get(rank)}, "
                                f"expected {expected(rank)}")
    alone = subprocess.run([tutorial], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin"})
    if alone.returncode != 1 or "the world size is unknown" not in alone.stderr:
        failures.append(f"alone: status {alone.returncode}, stderr {alone.stderr!r}")
    if failures:
        sys.exit("\n".join(failures))
    print("distributed_tutorial: worlds 2 and 3 print the tutorial's lines; alone it says why")


if __name__ == "__main__":
    main()
