"""`actorch step` with PyTorch's own files: weights that torch.save wrote (.pt), read by actorch,
three SGD steps, the result written as .pt and read back by torch.load(weights_only=True),
against the same steps in PyTorch.

Usage: /usr/bin/python3 step_pt.py ACTORCH_BINARY SCRATCH_DIR
"""
import os
import subprocess
import sys

import numpy as np
import torch

binary, scratch = sys.argv[1], sys.argv[2]
os.makedirs(scratch, exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
torch.save(model.state_dict(), os.path.join(scratch, "w.pt"))
x = torch.randn(16, 4)
y = torch.randint(0, 3, (16,))
np.save(os.path.join(scratch, "x.npy"), x.numpy())
np.save(os.path.join(scratch, "y.npy"), y.numpy())
out = os.path.join(scratch, "out.pt")
subprocess.run([binary, "step", "--weights", os.path.join(scratch, "w.pt"),
                "--inputs", os.path.join(scratch, "x.npy"),
                "--targets", os.path.join(scratch, "y.npy"), "--out", out, "--steps", "3",
                "--loss", "cross_entropy", "--optimizer", "sgd", "--lr", "0.1"], check=True)

opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for _ in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    losses.append(loss.item())
    opt.step()
got = torch.load(out, weights_only=True)
for name, p in model.named_parameters():
    assert torch.allclose(got[name], p.detach(), atol=1e-5), (name, got[name], p)
assert np.allclose(got["losses"].numpy(), losses, atol=1e-5), (got["losses"], losses)
print("step_pt: torch's .pt weights in, three SGD steps, .pt out as torch computes them")
