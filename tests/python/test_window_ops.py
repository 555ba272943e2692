"""actorch's convolutions, pooling, unfold and fold against torch's: on random shapes and
arguments, torch computes the output and the gradients of its inputs for a random grad_out,
tests/tools/window_check runs the same op forward and backward on the same tensors (read and
written in torch's .pt format), and the two must agree; wrong arguments must fail in both."""
import os
import random
import subprocess

import pytest
import torch
import torch.nn.functional as F

TOOL = os.environ.get("ACTORCH_WINDOW_CHECK")
pytestmark = pytest.mark.skipif(not TOOL, reason="run through ctest, which names window_check")


def arg(v):
    if isinstance(v, (tuple, list)):
        return ",".join(str(int(x)) for x in v)
    if isinstance(v, bool):
        return str(int(v))
    return str(v)


def run(tmp_path, op, tensors, **kw):
    """window_check on `tensors`; its result dict, or the error text (exit 3)."""
    src, dst = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save(tensors, src)
    cmd = [TOOL, op, str(src), str(dst)] + [f"{k}={arg(v)}" for k, v in kw.items()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode == 3:
        return p.stderr
    assert p.returncode == 0, p.stderr
    return torch.load(dst)


def tolerance(dtype):
    return {torch.float64: (1e-10, 1e-10), torch.float32: (2e-5, 2e-5)}[dtype]


def check(tmp_path, op, fn, inputs, **kw):
    """fn(**leaves) in torch against window_check `op` on the same tensors and grad_out."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    out = fn(**leaves)
    indices = None
    if isinstance(out, tuple):
        out, indices = out
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    got = run(tmp_path, op, dict(inputs, grad_out=grad_out), **kw)
    assert isinstance(got, dict), got
    rtol, atol = tolerance(out.dtype)
    torch.testing.assert_close(got["output"], out.detach(), rtol=rtol, atol=atol)
    if indices is not None:
        assert torch.equal(got["indices"], indices)
    for k, v in leaves.items():
        torch.testing.assert_close(got["grad_" + k], v.grad, rtol=rtol, atol=atol,
                                   msg=lambda m, k=k: f"grad of {k}: {m}")


DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("seed", range(24))
def test_conv2d_random(tmp_path, seed):
    r = random.Random(seed)
    dtype = DTYPES[seed % 2]
    groups = r.choice([1, 1, 2, 3])
    c_in, c_out = groups * r.randint(1, 3), groups * r.randint(1, 3)
    kh, kw = r.randint(1, 4), r.randint(1, 4)
    dh, dw = r.randint(1, 2), r.randint(1, 2)
    same = seed % 6 == 5
    sh, sw = (1, 1) if same else (r.randint(1, 3), r.randint(1, 3))
    ph, pw = (0, 0) if same else (r.randint(0, 2), r.randint(0, 2))
    h = r.randint(max(1, dh * (kh - 1) + 1 - 2 * ph), 11)
    w = r.randint(max(1, dw * (kw - 1) + 1 - 2 * pw), 11)
    n = r.randint(1, 3)
    bias = seed % 4 != 3
    g = torch.Generator().manual_seed(seed)
    inputs = {"input": torch.randn(n, c_in, h, w, generator=g, dtype=dtype),
              "weight": torch.randn(c_out, c_in // groups, kh, kw, generator=g, dtype=dtype)}
    if bias:
        inputs["bias"] = torch.randn(c_out, generator=g, dtype=dtype)
    padding = "same" if same else (ph, pw)
    check(tmp_path, "conv2d",
          lambda input, weight, bias=None: F.conv2d(input, weight, bias, (sh, sw), padding,
                                                    (dh, dw), groups),
          inputs, stride=(sh, sw), padding=padding, dilation=(dh, dw), groups=groups)


@pytest.mark.parametrize("seed", range(10))
def test_conv1d_random(tmp_path, seed):
    r = random.Random(100 + seed)
    dtype = DTYPES[seed % 2]
    groups = r.choice([1, 2])
    c_in, c_out = groups * r.randint(1, 3), groups * r.randint(1, 3)
    k, d = r.randint(1, 5), r.randint(1, 2)
    same = seed % 3 == 2
    s = 1 if same else r.randint(1, 3)
    p = 0 if same else r.randint(0, 2)
    length = r.randint(max(1, d * (k - 1) + 1 - 2 * p), 20)
    g = torch.Generator().manual_seed(seed)
    inputs = {"input": torch.randn(r.randint(1, 3), c_in, length, generator=g, dtype=dtype),
              "weight": torch.randn(c_out, c_in // groups, k, generator=g, dtype=dtype),
              "bias": torch.randn(c_out, generator=g, dtype=dtype)}
    padding = "same" if same else p
    check(tmp_path, "conv1d",
          lambda input, weight, bias: F.conv1d(input, weight, bias, s, padding, d, groups),
          inputs, stride=s, padding=padding, dilation=d, groups=groups)


def test_conv2d_unbatched(tmp_path):
    g = torch.Generator().manual_seed(7)
    inputs = {"input": torch.randn(3, 6, 5, generator=g), "weight": torch.randn(4, 3, 3, 2, generator=g)}
    check(tmp_path, "conv2d", lambda input, weight: F.conv2d(input, weight, padding=1), inputs,
          padding=1)


@pytest.mark.parametrize("seed", range(16))
def test_max_pool2d_random(tmp_path, seed):
    r = random.Random(200 + seed)
    kh, kw = r.randint(1, 4), r.randint(1, 4)
    sh, sw = r.randint(1, 3), r.randint(1, 3)
    ph, pw = r.randint(0, kh // 2), r.randint(0, kw // 2)
    dh, dw = r.randint(1, 2), r.randint(1, 2)
    ceil = seed % 2 == 1
    h, w = r.randint(dh * (kh - 1) + 1, 12), r.randint(dw * (kw - 1) + 1, 12)
    # Distinct values, so that the maximum (and so the index) is unique.
    x = torch.randperm(2 * 3 * h * w, generator=torch.Generator().manual_seed(seed))
    x = x.to(DTYPES[seed % 2]).reshape(2, 3, h, w)
    check(tmp_path, "max_pool2d",
          lambda input: F.max_pool2d(input, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil, True),
          {"input": x}, kernel=(kh, kw), stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw),
          ceil_mode=ceil)


def test_max_pool2d_nan_and_default_stride(tmp_path):
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    x[0, 0, 1, 1] = float("nan")
    out, idx = F.max_pool2d(x, 3, return_indices=True)
    got = run(tmp_path, "max_pool2d", {"input": x}, kernel=3)
    torch.testing.assert_close(got["output"], out, equal_nan=True)
    assert torch.equal(got["indices"], idx)


@pytest.mark.parametrize("seed", range(16))
def test_avg_pool2d_random(tmp_path, seed):
    r = random.Random(300 + seed)
    kh, kw = r.randint(1, 4), r.randint(1, 4)
    sh, sw = r.randint(1, 3), r.randint(1, 3)
    ph, pw = r.randint(0, kh // 2), r.randint(0, kw // 2)
    ceil, include = r.random() < 0.5, r.random() < 0.5
    divisor = r.choice([None, None, 3])
    h, w = r.randint(kh, 12), r.randint(kw, 12)
    x = torch.randn(2, 2, h, w, dtype=DTYPES[seed % 2],
                    generator=torch.Generator().manual_seed(seed))
    kw_args = dict(kernel=(kh, kw), stride=(sh, sw), padding=(ph, pw), ceil_mode=ceil,
                   count_include_pad=include)
    if divisor:
        kw_args["divisor_override"] = divisor
    check(tmp_path, "avg_pool2d",
          lambda input: F.avg_pool2d(input, (kh, kw), (sh, sw), (ph, pw), ceil, include, divisor),
          {"input": x}, **kw_args)


@pytest.mark.parametrize("op", ["adaptive_avg_pool2d", "adaptive_max_pool2d"])
@pytest.mark.parametrize("shape,out", [((2, 3, 7, 9), (3, 4)), ((1, 2, 5, 5), (5, 5)),
                                       ((1, 1, 4, 6), (7, 3)), ((3, 8, 8), (1, 1)),
                                       ((2, 2, 13, 6), (4, 6))])
def test_adaptive_pools(tmp_path, op, shape, out):
    n = 1
    for s in shape:
        n *= s
    x = torch.randperm(n, generator=torch.Generator().manual_seed(n)).to(torch.float64)
    fn = getattr(F, op)
    check(tmp_path, op, lambda input: fn(input.reshape(shape), out), {"input": x.reshape(shape)},
          output=out)


@pytest.mark.parametrize("seed", range(8))
def test_unfold_fold_random(tmp_path, seed):
    r = random.Random(400 + seed)
    k = (r.randint(1, 3), r.randint(1, 3))
    d = (r.randint(1, 2), r.randint(1, 2))
    p = (r.randint(0, 2), r.randint(0, 2))
    s = (r.randint(1, 2), r.randint(1, 2))
    size = (r.randint(d[0] * (k[0] - 1) + 1, 9), r.randint(d[1] * (k[1] - 1) + 1, 9))
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    geo = dict(kernel=k, dilation=d, padding=p, stride=s)
    check(tmp_path, "unfold", lambda input: F.unfold(input, k, d, p, s), {"input": x}, **geo)
    cols = F.unfold(x, k, d, p, s)
    check(tmp_path, "fold", lambda input: F.fold(input, size, k, d, p, s), {"input": cols},
          output=size, **geo)


@pytest.mark.parametrize("op,tensors,kw,needles", [
    ("conv2d", {"input": torch.randn(2, 4, 8, 8), "weight": torch.randn(5, 3, 3, 3)}, {},
     ["expected input", "to have 3 channels, but got 4 channels instead"]),
    ("conv2d", {"input": torch.randn(1, 3, 2, 2), "weight": torch.randn(5, 3, 3, 3)}, {},
     ["Kernel size can't be greater than actual input size"]),
    ("conv2d", {"input": torch.randn(1, 3, 6, 6), "weight": torch.randn(5, 3, 3, 3)},
     {"stride": 2, "padding": "same"}, ["padding='same' is not supported for strided convolutions"]),
    ("conv2d", {"input": torch.randn(3, 6), "weight": torch.randn(5, 3, 3, 3)}, {},
     ["Expected 3D (unbatched) or 4D (batched) input to conv2d"]),
    ("conv2d", {"input": torch.randn(1, 3, 6, 6), "weight": torch.randn(5, 3, 3, 3).double()}, {},
     ["input type (float32) and weight type (float64) should be the same"]),
    ("max_pool2d", {"input": torch.randn(1, 1, 6, 6)}, {"kernel": 2, "padding": 2},
     ["pad should be at most half of effective kernel size"]),
    ("max_pool2d", {"input": torch.randn(1, 1, 2, 2)}, {"kernel": 3},
     ["output size", "too small"]),
    ("max_pool2d", {"input": torch.arange(16).reshape(1, 1, 4, 4)}, {"kernel": 2},
     ["max_pool2d: expected a floating point input but got int64"]),
    ("avg_pool2d", {"input": torch.randn(1, 1, 4, 4)}, {"kernel": 2, "divisor_override": 0},
     ["divisor must be not zero"]),
    ("fold", {"input": torch.randn(1, 12, 5)}, {"output": (4, 4), "kernel": 2},
     ["expected size of input's dimension 2 to match the calculated number of sliding blocks"]),
])
def test_bad_arguments_fail_as_in_torch(tmp_path, op, tensors, kw, needles):
    got = run(tmp_path, op, tensors, **kw)
    assert isinstance(got, str), f"{op} {kw} did not fail"
    for needle in needles:
        assert needle in got, got
