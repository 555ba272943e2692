"""The tutorial's distributed SGD (examples/distributed_sgd), or examples/ddp_loop (the same
output over DistributedDataParallel), under `actorch launch` on 2 and 3 ranks: every rank prints a loss per epoch as the tutorial does, the loss falls, the replicas end
with equal parameters (average_gradients keeps them so) and the model learns the digits.
Usage: python3 distributed_sgd.py ACTORCH_BINARY EXAMPLE_BINARY [EPOCHS]

With fewer than the 60 epochs the tutorial's learning rate needs (the sanitizer presets give 8:
there the run is for memory errors and races, at 5-6x the Release run's time), the loss need
only fall, and the accuracy is not judged; the replicas must still end equal.
"""
import subprocess
import sys

import replica_check

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
        found, end = replica_check.judge(
            r.stdout, f"world {world}", list(range(world)),
            r"^\[rank{r}\]: Rank {r}, epoch \d+: ([0-9.]+)$",
            r"^\[rank{r}\]: Rank {r} accuracy ([0-9.]+) on all 1797 digits, "
            r"parameters checksum ([0-9.e+]+)$",
            epochs, 0.7 if learns else 1.0, 0.85 if learns else None)
        failures += found
        print(f"world {world}: accuracy and checksum {end} on every rank")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
