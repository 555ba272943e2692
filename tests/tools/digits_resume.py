"""The digits example reaches >= 95% test accuracy, and a run stopped after 10 epochs and
resumed from its checkpoint ends with exactly (bit for bit) the weights of an uninterrupted
run. Usage: python3 digits_resume.py DIGITS_MLP_BINARY SCRATCH_DIR
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from job_helpers import test_accuracy  # noqa: E402
from parity_step import read_safetensors  # noqa: E402


def run(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} failed: {r.stderr}")
    return r.stdout


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    full, part, resumed = (os.path.join(scratch, n) for n in
                           ("full.safetensors", "part.safetensors", "resumed.safetensors"))
    out = run(binary, "--epochs", "30", "--checkpoint", full)
    acc = test_accuracy(out)
    run(binary, "--epochs", "30", "--checkpoint", part, "--stop-after", "10")
    out2 = run(binary, "--epochs", "30", "--checkpoint", resumed, "--resume", part)
    acc2 = test_accuracy(out2)

    a, b = read_safetensors(full), read_safetensors(resumed)
    failures = []
    if acc < 0.95:
        failures.append(f"test accuracy {acc} < 0.95")
    if acc2 != acc:
        failures.append(f"resumed accuracy {acc2} != uninterrupted {acc}")
    if sorted(a) != sorted(b):
        failures.append(f"checkpoint keys differ: {sorted(a)} vs {sorted(b)}")
    for k in a:
        if k in b and a[k].tobytes() != b[k].tobytes():
            failures.append(f"{k} differs after resume")
    for f in failures:
        print("FAIL", f)
    print(f"digits: test accuracy {acc:.4f}; resumed run identical: {not failures}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
