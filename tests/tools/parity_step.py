"""Parity test of `actorch step` against an independent reference: the same MLP training
steps written out in numpy (forward, backward, cross-entropy / MSE, SGD and Adam in PyTorch's
update form), with safetensors read and written by hand from the format's spec. Nothing here
uses actorch's code, so a bug there cannot hide in the expectation.

Usage: python3 parity_step.py ACTORCH_BINARY SCRATCH_DIR
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

DT = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
NAME = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        header[name] = {"dtype": NAME[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=DT[meta["dtype"]]).reshape(meta["shape"])
    return out


def reference(params, x, y, loss, opt, steps, hp):
    """params: list of (W, b) in float64. Returns final params, last grads, losses."""
    params = [(w.astype(np.float64).copy(), b.astype(np.float64).copy()) for w, b in params]
    x = x.astype(np.float64)
    state = {}
    losses = []
    for t in range(1, steps + 1):
        # forward, keeping activations
        acts, h = [x], x
        for i, (w, b) in enumerate(params):
            h = h @ w.T + b
            if i < len(params) - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        out = acts[-1]
        n = out.shape[0]
        if loss == "cross_entropy":
            z = out - out.max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            losses.append(-logp[np.arange(n), y].mean())
            g = np.exp(logp)
            g[np.arange(n), y] -= 1
            g /= n
        else:
            d = out - y
            losses.append((d * d).mean())
            g = 2 * d / d.size
        # backward
        grads = [None] * len(params)
        for i in range(len(params) - 1, -1, -1):
            w, b = params[i]
            grads[i] = (g.T @ acts[i], g.sum(axis=0))
            if i > 0:
                g = (g @ w) * (acts[i] > 0)
        # optimizer step, parameter by parameter in registration order (w, b per layer)
        new = []
        for i, ((w, b), (gw, gb)) in enumerate(zip(params, grads)):
            pair = []
            for j, (p, gp) in enumerate(((w, gw), (b, gb))):
                key = (i, j)
                gp = gp + hp["weight_decay"] * p
                if opt == "sgd":
                    if hp["momentum"]:
                        buf = gp.copy() if key not in state else hp["momentum"] * state[key] + gp
                        state[key] = buf
                        gp = gp + hp["momentum"] * buf if hp.get("nesterov") else buf
                    p = p - hp["lr"] * gp
                else:
                    m, v = state.get(key, (np.zeros_like(p), np.zeros_like(p)))
                    m = 0.9 * m + 0.1 * gp
                    v = 0.999 * v + 0.001 * gp * gp
                    state[key] = (m, v)
                    denom = np.sqrt(v) / np.sqrt(1 - 0.999 ** t) + 1e-8
                    p = p - hp["lr"] / (1 - 0.9 ** t) * m / denom
                pair.append(p)
            new.append(tuple(pair))
        params = new
    return params, grads, np.array(losses)


def run_case(binary, scratch, name, sizes, loss, opt, hp, dtype, steps=5):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    params = []
    for i in range(len(sizes) - 1):
        bound = 1 / np.sqrt(sizes[i])
        params.append((rng.uniform(-bound, bound, (sizes[i + 1], sizes[i])).astype(dtype),
                       rng.uniform(-bound, bound, sizes[i + 1]).astype(dtype)))
    n = 16
    x = rng.normal(size=(n, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], n).astype(np.int64) if loss == "cross_entropy" \
        else rng.normal(size=(n, sizes[-1])).astype(np.float32)
    w_path, x_path, y_path, out_path = (os.path.join(scratch, f"{name}.{s}") for s in
                                        ("weights.safetensors", "x.npy", "y.npy", "out.safetensors"))
    write_safetensors(w_path, {f"{2 * i}.{k}": a for i, (w, b) in enumerate(params)
                               for k, a in (("weight", w), ("bias", b))})
    np.save(x_path, x)
    np.save(y_path, y)
    cmd = [binary, "step", "--weights", w_path, "--inputs", x_path, "--targets", y_path,
           "--out", out_path, "--steps", str(steps), "--loss", loss, "--optimizer", opt,
           "--lr", str(hp["lr"]), "--weight-decay", str(hp["weight_decay"])]
    if opt == "sgd":
        cmd += ["--momentum", str(hp["momentum"])] + (["--nesterov"] if hp.get("nesterov") else [])
    subprocess.run(cmd, check=True, capture_output=True)
    got = read_safetensors(out_path)
    want_params, want_grads, want_losses = reference(params, x, y, loss, opt, steps, hp)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    failures = []

    def check(key, actual, expected):
        if not np.allclose(actual, expected, rtol=tol, atol=tol):
            failures.append(f"{name}: {key} differs by {np.abs(actual - expected).max():.3g}")

    check("losses", got["losses"], want_losses)
    for i, ((w, b), (gw, gb)) in enumerate(zip(want_params, want_grads)):
        check(f"{2 * i}.weight", got[f"{2 * i}.weight"], w)
        check(f"{2 * i}.bias", got[f"{2 * i}.bias"], b)
        check(f"{2 * i}.weight.grad", got[f"{2 * i}.weight.grad"], gw)
        check(f"{2 * i}.bias.grad", got[f"{2 * i}.bias.grad"], gb)
    return failures


def main():
    binary, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    cases = [
        ("ce_sgd_momentum", [8, 16, 4], "cross_entropy", "sgd",
         {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}, np.float32),
        ("ce_sgd_nesterov_3layers", [6, 10, 8, 3], "cross_entropy", "sgd",
         {"lr": 0.05, "momentum": 0.8, "weight_decay": 0.0, "nesterov": True}, np.float32),
        ("mse_adam", [5, 7, 2], "mse", "adam", {"lr": 0.01, "weight_decay": 0.001}, np.float32),
        ("ce_adam_float64", [4, 6, 3], "cross_entropy", "adam",
         {"lr": 0.02, "weight_decay": 0.0}, np.float64),
        ("mse_plain_sgd", [3, 4], "mse", "sgd", {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
         np.float32),
    ]
    failures = []
    for case in cases:
        failures += run_case(binary, scratch, *case)

    # A weights file that is not an MLP: a clear error naming the key, non-zero exit.
    bad = os.path.join(scratch, "bad.safetensors")
    write_safetensors(bad, {"0.weight": np.zeros((2, 2), np.float32),
                            "1.weight": np.zeros((2, 2), np.float32)})
    np.save(os.path.join(scratch, "bx.npy"), np.zeros((1, 2), np.float32))
    np.save(os.path.join(scratch, "by.npy"), np.zeros(1, np.int64))
    r = subprocess.run([binary, "step", "--weights", bad, "--inputs", os.path.join(scratch, "bx.npy"),
                        "--targets", os.path.join(scratch, "by.npy"),
                        "--out", os.path.join(scratch, "bo.safetensors")], capture_output=True, text=True)
    if r.returncode == 0 or 'layer "1" found where "2" was expected' not in r.stderr:
        failures.append(f"bad weights: rc={r.returncode} stderr={r.stderr!r}")

    for f in failures:
        print("FAIL", f)
    print(f"parity: {len(cases) - len({f.split(':')[0] for f in failures})} of {len(cases)} cases agree")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
