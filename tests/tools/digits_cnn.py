"""The digits CNN (digits_ddp --model cnn: Conv2d, MaxPool2d, Dropout2d, Flatten, Linear) trains
data-parallel on 2 processes under `actorch launch` as the main job does, beside the MLP on the
same split and epochs; both accuracies are printed, the CNN's must reach 0.97, and PyTorch loads
the CNN's model.safetensors strictly into the same torch.nn.Sequential and gets its accuracy.
Usage: python3 digits_cnn.py ACTORCH_BINARY DIGITS_DDP_BINARY SCRATCH_DIR
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from digits_ddp import torch_check  # noqa: E402
from job_helpers import test_accuracy  # noqa: E402

EPOCHS = "15"


def train(actorch, digits, out_dir, model):
    r = subprocess.run([actorch, "launch", "--nproc-per-node", "2", digits, "--model", model,
                        "--out", out_dir, "--epochs", EPOCHS, "--plot", "0"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"digits_ddp --model {model} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    acc = test_accuracy(r.stdout)
    if acc is None:
        sys.exit(f"digits_ddp --model {model} printed no test accuracy:\n{r.stdout}")
    return acc


def main():
    import torch
    actorch, digits, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(scratch, ignore_errors=True)
    cnn_dir, mlp_dir = os.path.join(scratch, "cnn"), os.path.join(scratch, "mlp")
    cnn = train(actorch, digits, cnn_dir, "cnn")
    mlp = train(actorch, digits, mlp_dir, "mlp")
    print(f"digits, {EPOCHS} epochs on 2 processes: test accuracy CNN {cnn:.4f}, MLP {mlp:.4f}")
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Dropout2d(0.25), nn.Flatten(), nn.Linear(512, 128), nn.ReLU(),
                          nn.Dropout(0.5), nn.Linear(128, 10))
    failures = torch_check(cnn_dir, cnn, model, images=True)
    if cnn < 0.97:
        failures.append(f"the CNN's test accuracy {cnn} < 0.97")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
