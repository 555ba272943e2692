"""The tutorial's distributed SGD (examples/distributed_sgd), or examples/ddp_loop (the same
output over DistributedDataParallel), under `actorch launch` on 2 and 3 ranks: every rank prints a loss per epoch as the tutorial does, the loss falls, the replicas end
with equal parameters (average_gradients keeps them so) and the model learns the digits.
Usage: python3 distributed_sgd.py ACTORCH_BINARY EXAMPLE_BINARY [EPOCHS]

With fewer than the 60 epochs the tutorial's learning rate needs (the sanitizer presets give 8:
there the run is for memory errors and races, at 5-6x the Release run's time), the loss need
only fall, and the accuracy is not judged; the replicas must still end equal.
"""
import re
import subprocess
import sys

FULL_EPOCHS = 60


def main():
    actorch, example = sys.argv[1], sys.argv[2]
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else FULL_EPOCHS
    learns = epochs >= FULL_EPOCHS
    failures = []
    for world in (2, 3):
        r = subprocess.run([actorch, "launch", "--nproc-per-node", str(world), example,
                            "--epochs", str(epochs)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"world {world}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        ends = {}
        for rank in range(world):
            losses = [float(x) for x in re.findall(
                rf"^\[rank{rank}\]: Rank {rank}, epoch \d+: ([0-9.]+)$", r.stdout, re.M)]
            if len(losses) != epochs:
                failures.append(f"world {world} rank {rank}: {len(losses)} epoch lines")
                continue
            if not losses[-1] < (0.7 if learns else 1.0) * losses[0]:
                failures.append(f"world {world} rank {rank}: loss {losses[0]} -> {losses[-1]}")
            m = re.search(rf"^\[rank{rank}\]: Rank {rank} accuracy ([0-9.]+) on all 1797 digits, "
                          r"parameters checksum ([0-9.e+]+)$", r.stdout, re.M)
            if not m:
                failures.append(f"world {world} rank {rank}: no closing line")
                continue
            ends[rank] = (float(m.group(1)), m.group(2))
        if len(set(ends.values())) != 1:
            failures.append(f"world {world}: the replicas differ at the end: {ends}")
        elif learns and ends and ends[0][0] < 0.85:
            failures.append(f"world {world}: accuracy {ends[0][0]} < 0.85 after {epochs} epochs")
        print(f"world {world}: accuracy and checksum {ends.get(0)} on every rank")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
