"""examples/trainer_actors in one process (two trainer actors) and under `actorch launch` on two
processes (four): every trainer reports each epoch to the monitor, the loss falls, every trainer
ends with the same parameters (the comm actor's all-reduces keep them so) and the model learns.
Usage: python3 trainer_actors.py ACTORCH_BINARY TRAINER_ACTORS_BINARY
"""
import re
import subprocess
import sys

EPOCHS = 20


def main():
    actorch, example = sys.argv[1], sys.argv[2]
    failures = []
    for procs, argv in ((1, [example]),
                        (2, [actorch, "launch", "--nproc-per-node", "2", example])):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=240)
        if r.returncode != 0:
            sys.exit(f"{procs} process(es): exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        trainers = 2 * procs
        ends = {}
        for t in range(trainers):
            losses = [float(x) for x in re.findall(
                rf"^(?:\[rank\d\]: )?trainer {t}, epoch \d+: loss ([0-9.]+)$", r.stdout, re.M)]
            if len(losses) != EPOCHS or not losses[-1] < 0.5 * losses[0]:
                failures.append(f"{procs} process(es), trainer {t}: losses {losses}")
            m = re.search(rf"^(?:\[rank\d\]: )?trainer {t} accuracy ([0-9.]+), parameters "
                          r"checksum ([0-9.e+]+)$", r.stdout, re.M)
            if m:
                ends[t] = (float(m.group(1)), m.group(2))
        if len(ends) != trainers or len(set(ends.values())) != 1:
            failures.append(f"{procs} process(es): the trainers' ends differ: {ends}")
        elif ends[0][0] < 0.95:
            failures.append(f"{procs} process(es): accuracy {ends[0][0]} < 0.95")
        print(f"{procs} process(es): accuracy and checksum {ends.get(0)} on every trainer")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
