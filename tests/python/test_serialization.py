"""actorch.save / actorch.load against torch.save / torch.load on the seeds' checkpoints: a
model's state dict, a DDP model's (the module. prefix), SGD's and Adam's optimizer state dicts,
a nested training checkpoint; torch writes and actorch reads, and the reverse; a pickled
function refused without running; the legacy format refused by name."""
import collections
import io
import os
import pickle
import subprocess
import sys
import zipfile

import pytest
import torch

import actorch


def model_and_optimizers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)
    for opt in (sgd, adam):
        opt.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
    return model, sgd, adam


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return (isinstance(b, dict) and list(a) == list(b) and
                isinstance(a, collections.OrderedDict) == isinstance(b, collections.OrderedDict)
                and all(same(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)):
        return type(a) == type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b and type(a) == type(b)


def cases():
    model, sgd, adam = model_and_optimizers()
    ddp = collections.OrderedDict(("module." + k, v) for k, v in model.state_dict().items())
    dtypes = {str(d): torch.arange(6).to(d) for d in
              (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
               torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}
    return {"state_dict": model.state_dict(), "ddp": ddp, "sgd": sgd.state_dict(),
            "adam": adam.state_dict(), "dtypes": dtypes,
            "checkpoint": {"epoch": 3, "model": model.state_dict(), "optimizer": sgd.state_dict(),
                           "best": 0.97, "tag": "run-1", "none": None,
                           "history": [0.5, 0.25], "shape": (2, 3)}}


@pytest.mark.parametrize("name", ["state_dict", "ddp", "sgd", "adam", "dtypes", "checkpoint"])
def test_torch_writes_actorch_reads(tmp_path, name):
    value = cases()[name]
    path = tmp_path / f"{name}.pt"
    torch.save(value, path)
    assert same(value, actorch.load(path))


@pytest.mark.parametrize("name", ["state_dict", "ddp", "sgd", "adam", "dtypes", "checkpoint"])
def test_actorch_writes_torch_reads(tmp_path, name):
    value = cases()[name]
    path = tmp_path / f"{name}.pth"
    actorch.save(value, str(path))
    assert same(value, torch.load(path))
    if name in ("state_dict", "ddp", "dtypes"):  # torch 1.13's weights_only has no floats
        assert same(value, torch.load(path, weights_only=True))


def test_a_state_dict_loads_into_torchs_model_as_the_seeds_do(tmp_path):
    model, _, _ = model_and_optimizers()
    actorch.save(model.state_dict(), tmp_path / "m.pt")
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    fresh.load_state_dict(actorch.load(tmp_path / "m.pt", map_location="cpu"))
    x = torch.randn(3, 4)
    fresh.eval()
    model.eval()
    assert torch.equal(fresh(x), model(x))


def test_views_share_their_storage_both_ways(tmp_path):
    base = torch.arange(12.0)
    value = {"t": base.view(3, 4).t(), "s": base[2:5]}
    actorch.save(value, tmp_path / "v.pt")
    back = torch.load(tmp_path / "v.pt")
    assert back["t"].stride() == (1, 4)
    assert back["t"].storage().data_ptr() == back["s"].storage().data_ptr()
    torch.save(value, tmp_path / "w.pt")
    mine = actorch.load(tmp_path / "w.pt")
    assert mine["t"].storage().data_ptr() == mine["s"].storage().data_ptr()
    # Their own values: a view at an offset once came back at its storage's first element.
    assert torch.equal(mine["s"], base[2:5]) and torch.equal(mine["t"], value["t"])
    assert mine["t"].stride() == (1, 4) and mine["s"].storage_offset() == 2


def test_file_objects_and_map_location(tmp_path):
    buf = io.BytesIO()
    actorch.save({"w": torch.ones(2)}, buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf)["w"], torch.ones(2))
    buf.seek(0)
    seen = []
    out = actorch.load(buf, map_location=lambda t, loc: (seen.append(loc), t * 2)[1])
    assert seen == ["cpu"] and torch.equal(out["w"], torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="never runs pickled code"):
        actorch.load(buf, weights_only=False)


SAVED_ON_CUDA1 = r"""
import sys, torch, actorch
# torch tags each storage with where it lives; a tagger of the test's says "cuda:1" for one
# storage (20 bytes), as a GPU machine's torch.save would.
torch.serialization.register_package(0, lambda s: "cuda:1" if s.nbytes() == 20 else None,
                                     lambda s, loc: s if loc == "cuda:1" else None)
a = torch.arange(5.0)
torch.save({"a": a, "b": torch.ones(3), "view": a[1:3]}, sys.argv[1])
seen = []
torch.load(sys.argv[1], map_location=lambda s, loc: seen.append(loc) or s)
mine = []
actorch.load(sys.argv[1], map_location=lambda t, loc: mine.append(loc) or None)
moved = actorch.load(sys.argv[1], map_location={"cuda:1": "meta", "cuda:0": "cpu"})
print((sorted(set(seen)), sorted(mine), {k: str(t.device) for k, t in sorted(moved.items())}))
"""


def test_map_location_sees_and_maps_where_each_storage_was_saved(tmp_path):
    # A dict matched only "cpu" and a function was told "cpu" for every tensor, so a GPU
    # checkpoint's {"cuda:1": "cuda:0"} did nothing. (In a process of its own: the tagger stays.)
    out = subprocess.run([sys.executable, "-c", SAVED_ON_CUDA1, str(tmp_path / "gpu.pt")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str((["cpu", "cuda:1"], ["cpu", "cuda:1", "cuda:1"],
                                      {"a": "meta", "b": "cpu", "view": "meta"}))


def test_pickled_code_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": Evil()}, protocol=2))
        z.writestr("archive/version", "3\n")
    with pytest.raises(actorch.Error, match="refused the global 'posix.system'"):
        actorch.load(tmp_path / "evil.pt")
    assert not marker.exists()
    torch.save({"w": torch.ones(1)}, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(actorch.Error, match="legacy checkpoint format"):
        actorch.load(tmp_path / "old.pt")
    with pytest.raises(actorch.Error, match="cannot save a builtin_function_or_method"):
        actorch.save({"f": len}, tmp_path / "f.pt")


def test_parameters_and_a_state_dicts_metadata_both_ways(tmp_path):
    # An nn.Parameter came back a plain tensor without requires_grad, and a state dict lost its
    # _metadata (the modules' versions, which load_state_dict hands to each module).
    model, _, _ = model_and_optimizers()
    sd = model.state_dict()
    value = {"sd": sd, "params": list(model.parameters()),
             "frozen": torch.nn.Parameter(torch.ones(2), requires_grad=False)}
    ways = [(torch.save, actorch.load), (actorch.save, torch.load), (actorch.save, actorch.load)]
    for i, (write, read) in enumerate(ways):
        path = tmp_path / f"p{i}.pt"
        write(value, path)
        back = read(path)
        assert back["sd"]._metadata == sd._metadata, (write, read)
        assert same(dict(back["sd"]), dict(sd))
        for got, want in zip(back["params"], model.parameters()):
            assert type(got) is torch.nn.Parameter and got.requires_grad
            assert torch.equal(got, want)
        assert type(back["frozen"]) is torch.nn.Parameter and not back["frozen"].requires_grad
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    fresh.load_state_dict(actorch.load(tmp_path / "p0.pt")["sd"])


def test_what_actorch_cannot_hold_is_named_without_blaming_torch(tmp_path):
    torch.save({"z": torch.ones(2, dtype=torch.complex64)}, tmp_path / "c.pt")
    with pytest.raises(actorch.Error, match="torch.ComplexFloatStorage, a dtype actorch does not "
                       "have .*torch.load reads it") as error:
        actorch.load(tmp_path / "c.pt")
    assert "refuses it too" not in str(error.value)
    torch.save({"s": torch.eye(3).to_sparse()}, tmp_path / "s.pt")
    with pytest.raises(actorch.Error, match=r"a sparse tensor \(torch._utils._rebuild_sparse_tensor"
                       r"\): actorch.load reads strided tensors only"):
        actorch.load(tmp_path / "s.pt")
