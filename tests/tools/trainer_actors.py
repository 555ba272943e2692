"""examples/trainer_actors in one process (two trainer actors) and under `actorch launch` on two
processes (four): every trainer reports each epoch to the monitor, the loss falls, every trainer
ends with the same parameters (the comm actor's all-reduces keep them so) and the model learns.
Usage: python3 trainer_actors.py ACTORCH_BINARY TRAINER_ACTORS_BINARY
"""
import subprocess
import sys

import replica_check

EPOCHS = 20


def main():
    actorch, example = sys.argv[1], sys.argv[2]
    failures = []
    for procs, argv in ((1, [example]),
                        (2, [actorch, "launch", "--nproc-per-node", "2", example])):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=240)
        if r.returncode != 0:
            sys.exit(f"{procs} process(es): exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        found, end = replica_check.judge(
            r.stdout, f"{procs} process(es)", list(range(2 * procs)),
            r"^(?:\[rank\d\]: )?trainer {r}, epoch \d+: loss ([0-9.]+)$",
            r"^(?:\[rank\d\]: )?trainer {r} accuracy ([0-9.]+), "
            r"parameters checksum ([0-9.e+]+)$",
            EPOCHS, 0.5, 0.95)
        failures += found
        print(f"{procs} process(es): accuracy and checksum {end} on every trainer")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
