"""What the data-parallel examples' checkers judge in a run's output: every replica printed a loss
per epoch and the loss fell, every replica ends with the same accuracy and parameters checksum
(the gradient exchange keeps the replicas equal), and the model learned. Used by
distributed_sgd.py (examples/distributed_sgd, examples/ddp_loop) and trainer_actors.py."""
import re


def judge(stdout, label, replicas, loss_line, end_line, epochs, loss_ratio, min_accuracy=None):
    """Failures (a list of lines) and the first replica's (accuracy, checksum).

    `loss_line` and `end_line` are regular expressions with "{r}" for the replica's number:
    loss_line captures an epoch's loss, end_line the accuracy and the checksum. The last loss
    must be under `loss_ratio` times the first; `min_accuracy` (None: not judged) bounds the
    final accuracy."""
    failures, ends = [], {}
    for r in replicas:
        losses = [float(x) for x in re.findall(loss_line.replace("{r}", str(r)), stdout, re.M)]
        if len(losses) != epochs:
            failures.append(f"{label}, replica {r}: {len(losses)} epoch lines, not {epochs}")
            continue
        if not losses[-1] < loss_ratio * losses[0]:
            failures.append(f"{label}, replica {r}: loss {losses[0]} -> {losses[-1]}")
        m = re.search(end_line.replace("{r}", str(r)), stdout, re.M)
        if not m:
            failures.append(f"{label}, replica {r}: no closing line")
            continue
        ends[r] = (float(m.group(1)), m.group(2))
    if len(ends) != len(replicas) or len(set(ends.values())) != 1:
        failures.append(f"{label}: the replicas differ at the end: {ends}")
    elif min_accuracy is not None and ends[replicas[0]][0] < min_accuracy:
        failures.append(f"{label}: accuracy {ends[replicas[0]][0]} < {min_accuracy} after "
                        f"{epochs} epochs")
    return failures, ends.get(replicas[0])
