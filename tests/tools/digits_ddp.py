"""The main job end to end: `actorch launch --nproc-per-node 2 digits_ddp` reaches >= 95% test
accuracy, prints a progress line per epoch, and writes a loadable checkpoint, a metrics file
whose rows match the printed epochs, a PNG plot, and a Chrome trace with both ranks' trainer
spans (forward, backward, the sharded step's gradients), all_reduce spans and the loader's
stages. Then PyTorch (where installed) loads the
job's model.safetensors, read here without actorch, into the equivalent torch.nn.Sequential as
it is (strict) and gets the job's test accuracy on the job's test split.
Usage: python3 digits_ddp.py ACTORCH_BINARY DIGITS_DDP_BINARY SCRATCH_DIR
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from job_helpers import test_accuracy  # noqa: E402
from parity_step import read_safetensors  # noqa: E402


def torch_check(out_dir, acc, model=None, images=False):
    """PyTorch loads the job's model.safetensors into `model` (the MLP's torch.nn.Sequential by
    default) strictly and must get the job's test accuracy on its test split; `images` feeds
    (N, 1, 8, 8) images instead of 64-vectors."""
    import torch  # the test command always has it (scripts/setup.sh test)
    import gzip
    import numpy as np
    state = {k: torch.from_numpy(v.copy())
             for k, v in read_safetensors(os.path.join(out_dir, "model.safetensors")).items()}
    if model is None:
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10))
    model.load_state_dict(state, strict=True)  # the keys and shapes as they are
    model.eval()
    data = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "digits.csv.gz")
    with gzip.open(data, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    test = np.load(os.path.join(out_dir, "test_indices.npy"))
    # The job's per-sample transform: pixels to [0, 1], then Normalize((0.3053,), (0.3760,)).
    x = torch.from_numpy((rows[test, :64] / 16.0 - 0.3053) / 0.3760)
    if images:
        x = x.reshape(-1, 1, 8, 8)
    y = torch.from_numpy(rows[test, 64].astype(np.int64))
    with torch.no_grad():
        torch_acc = (model(x).argmax(1) == y).double().mean().item()
    print(f"digits_ddp: PyTorch's test accuracy on the job's model {torch_acc:.4f}, the job's {acc:.4f}")
    # Float rounding may flip a near tie: allow one sample of the split.
    if abs(torch_acc - acc) > 1.0 / len(test) + 1e-4:
        return [f"PyTorch's accuracy {torch_acc} on model.safetensors differs from the job's {acc}"]
    return []


def main():
    actorch, digits, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(scratch, ignore_errors=True)
    out_dir, trace = os.path.join(scratch, "run"), os.path.join(scratch, "trace.json")
    os.makedirs(scratch)
    r = subprocess.run([actorch, "launch", "--nproc-per-node", "2", digits, "--out", out_dir,
                        "--epochs", "12", "--num-workers", "1", "--trace", trace],
                       capture_output=True, text=True, timeout=600)
    failures = []
    if r.returncode != 0:
        sys.exit(f"digits_ddp failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    epochs = re.findall(r"\[rank0\]: epoch +(\d+)/12 .* test acc +([0-9.]+)%", r.stdout)
    if [int(e) for e, _ in epochs] != list(range(1, 13)):
        failures.append(f"expected progress lines for epochs 1..12, got {epochs}")
    acc = test_accuracy(r.stdout)
    if acc < 0.95:
        failures.append(f"test accuracy {acc} < 0.95")

    with open(os.path.join(out_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 12 or abs(float(rows[-1]["test_accuracy"]) - acc) > 1e-4:
        failures.append(f"metrics.csv has {len(rows)} rows, last {rows[-1] if rows else None}")
    with open(os.path.join(out_dir, "curves.png"), "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            failures.append("curves.png is not a PNG")
    ckpt = read_safetensors(os.path.join(out_dir, "digits_ddp.safetensors"))
    if "model.0.weight" not in ckpt or ckpt["model.0.weight"].shape != (128, 64):
        failures.append(f"checkpoint keys {sorted(ckpt)}")

    failures += torch_check(out_dir, acc)

    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = {(e["pid"], lanes.get((e["pid"], e["tid"]), "?"), e["name"].split(" ")[0])
             for e in events if e["ph"] == "X"}
    # One CPU actor per process on one host: the sharded step (Note [Sharded step across
    # processes]) instead of DDP's buckets; the epochs' sums still go through the comm actor.
    if "(optimizer step sharded over the replicas)" not in r.stdout:
        failures.append("the job did not shard its optimizer step")
    for pid in (0, 1):
        for lane, name in ((f"trainer {pid}", "forward"), (f"trainer {pid}", "backward"),
                           (f"trainer {pid}", "shard's"), ("comm", "all_reduce")):
            if (pid, lane, name) not in spans:
                failures.append(f"trace: no '{name}' span on lane '{lane}' of process {pid}")
    loader = {name for (_, lane, name) in spans if "worker" in lane or lane == "coordinator"}
    if not loader:
        failures.append(f"trace: no loader stage spans (lanes: {sorted(set(lanes.values()))})")
    if failures:
        sys.exit("\n".join(failures) + "\n" + r.stdout[-3000:])
    print(f"digits_ddp: test accuracy {acc}, {len(events)} trace events")


if __name__ == "__main__":
    main()
