"""The Python package (python/actorch, python/src) against numpy and PyTorch:
DLPack both ways without copies (values, strides, lifetimes), the data loader's batches, a
Python collate_fn and worker_init_fn, and a PyTorch training loop fed by actorch.DataLoader."""
import gc
import os

import numpy as np
import pytest

import torch  # the test command always has it (scripts/setup.sh test): none is skipped

import actorch
from loader_cases import processes

DIGITS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "digits.csv.gz")


def test_numpy_takes_an_actorch_tensor_without_a_copy_and_keeps_it_alive():
    t = actorch.from_dlpack(np.arange(12, dtype=np.float32).reshape(3, 4))
    a = np.from_dlpack(t)
    assert a.shape == (3, 4) and a.dtype == np.float32
    assert a.tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
    del t
    gc.collect()
    assert a.sum() == 66  # still valid: the capsule holds the memory (ASan would see a free)


def test_actorch_takes_numpy_memory_without_a_copy_strides_included():
    base = np.arange(12, dtype=np.int64).reshape(3, 4)
    view = base.T[1:3]  # strides (8, 32) in bytes: a transposed, offset view
    t = actorch.from_dlpack(view)
    assert t.shape == (2, 3)
    back = np.from_dlpack(t)
    assert back.tolist() == view.tolist()
    assert back.strides == view.strides
    base[1, 2] = -5  # view[1, 1]: the same memory all along
    assert back[1, 1] == -5
    del base, view
    gc.collect()
    assert back[1, 1] == -5


def test_views_reach_torch_at_their_own_first_element():
    # An unbatched C++ dataset's samples are views into the whole array (offsets 0, 3, 6, ...):
    # torch's DLPack import ignores byte_offset, so each once came back as row 0.
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    rows = list(actorch.DataLoader(actorch.data.TensorDataset(x), batch_size=None))
    assert [r[0].tolist() for r in rows] == x.tolist()
    assert all(isinstance(r[0], torch.Tensor) for r in rows)


def test_dtypes_and_the_clear_errors():
    for dt in (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.int32,
               np.int64):
        a = np.arange(5).astype(dt)
        assert np.from_dlpack(actorch.from_dlpack(a)).tolist() == a.tolist()
    with pytest.raises(actorch.Error, match="has no actorch dtype"):
        actorch.from_dlpack(np.zeros(3, dtype=np.complex64))
    with pytest.raises(Exception):  # numpy 1.24 refuses it, or actorch does (DLPack 0.6: no bool)
        actorch.from_dlpack(np.zeros(3, dtype=np.bool_))


def test_dtype_shortcuts_as_torch_names_them():
    t = actorch.from_dlpack(np.array([1.7, -2.7], dtype=np.float32))
    assert t.double().dtype == "float64" and t.float().dtype == "float32"
    assert t.half().dtype == "float16" and t.int().dtype == "int32"
    assert t.long().dtype == "int64"
    s = t.short()
    assert s.dtype == "int16"
    assert np.from_dlpack(s).tolist() == [1, -2]  # truncated toward zero, as torch's


def test_torch_round_trips_without_a_copy():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    t = actorch.from_dlpack(x)
    y = torch.from_dlpack(t)
    assert y.stride() == x.stride() and torch.equal(x, y)
    x[0, 0] = 42
    assert y[0, 0] == 42
    del x, t
    gc.collect()
    assert y[0, 0] == 42


def make_arrays(n=40):
    return np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n, dtype=np.int64)


def test_loader_batches_in_order_and_shuffled_by_seed():
    x, y = make_arrays()
    ds = actorch.data.TensorDataset(x, y)
    assert len(ds) == 40
    loader = actorch.DataLoader(ds, batch_size=8, num_workers=2)
    assert len(loader) == 5
    labels = [np.from_dlpack(b[1]).tolist() for b in loader.__iter__(as_torch=False)]
    assert labels == [list(range(k, k + 8)) for k in range(0, 40, 8)]
    order = [np.from_dlpack(b[1]).tolist()
             for b in actorch.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2,
                                         seed=3).__iter__(as_torch=False)]
    again = [np.from_dlpack(b[1]).tolist()
             for b in actorch.DataLoader(ds, batch_size=8, shuffle=True, num_workers=0,
                                         seed=3).__iter__(as_torch=False)]
    assert order == again and sorted(sum(order, [])) == list(range(40))


def test_a_batch_held_past_the_next_iteration_stays_valid():
    x, y = make_arrays(64)
    loader = actorch.DataLoader(actorch.data.TensorDataset(x, y), batch_size=4, num_workers=2)
    kept = [np.from_dlpack(b[0]) for b in loader.__iter__(as_torch=False)]
    gc.collect()
    assert np.concatenate(kept).tolist() == x.tolist()  # the pool recycled none of them


def test_python_collate_fn_and_worker_init_fn():
    x, y = make_arrays(12)
    seen = []

    def collate(samples):
        return sum(int(s[1]) for s in samples)

    loader = actorch.DataLoader(actorch.data.TensorDataset(x, y), batch_size=4, num_workers=2,
                                collate_fn=collate, worker_init_fn=seen.append)
    assert list(loader) == [0 + 1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9 + 10 + 11]
    assert sorted(seen) == [0, 1]


def test_dataset_errors_reach_python():
    with pytest.raises(actorch.Error, match="No such file or directory"):
        actorch.data.DigitsDataset("/nonexistent.csv.gz")


def test_a_torch_training_loop_on_digits_fed_by_actorch():
    torch.manual_seed(0)
    digits = actorch.data.DigitsDataset(DIGITS)
    loader = actorch.DataLoader(digits, batch_size=64, shuffle=True, num_workers=2, seed=0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(8):
        for images, labels in loader:  # torch tensors, zero-copy
            assert isinstance(images, torch.Tensor)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images.float() / 16), labels)
            loss.backward()
            opt.step()
    correct = total = 0
    with torch.no_grad():
        for images, labels in actorch.DataLoader(digits, batch_size=256):
            correct += (model(images.float() / 16).argmax(1) == labels).sum().item()
            total += len(labels)
    assert total == 1797 and correct / total > 0.95


def test_samplers_as_pytorch_names_them():
    ds = actorch.data.TensorDataset(*make_arrays(10))
    assert list(actorch.data.SequentialSampler(ds)) == list(range(10))
    r = actorch.data.RandomSampler(ds, seed=1)
    assert sorted(r) == list(range(10)) and len(r) == 10
    assert list(actorch.data.RandomSampler(ds, seed=1)) == list(actorch.data.RandomSampler(ds, seed=1))
    assert sorted(actorch.data.SubsetRandomSampler([7, 3, 5], seed=0)) == [3, 5, 7]
    w = list(actorch.data.WeightedRandomSampler([0.0, 1.0, 0.0], 5, seed=0))
    assert w == [1] * 5
    shards = [list(actorch.data.DistributedSampler(ds, num_replicas=3, rank=r, shuffle=False))
              for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]  # padded as PyTorch pads
    b = actorch.data.BatchSampler(actorch.data.SequentialSampler(ds), 4, False)
    assert list(b) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and len(b) == 3
    loader = actorch.DataLoader(ds, batch_sampler=b)
    assert [np.from_dlpack(y).tolist() for _, y in loader.__iter__(as_torch=False)] == list(b)
    loader = actorch.DataLoader(ds, batch_size=5,
                                sampler=actorch.data.SubsetRandomSampler([1, 2, 3], seed=0))
    assert sorted(np.from_dlpack(list(loader.__iter__(as_torch=False))[0][1]).tolist()) == [1, 2, 3]


def test_transforms_run_in_the_workers_and_a_python_lambda_too():
    images = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    norm = actorch.transforms.Normalize([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    out = np.from_dlpack(norm(images[0]))
    assert np.allclose(out, (images[0] - np.array([1, 2, 3]).reshape(3, 1, 1)) / 2)
    crop = actorch.transforms.CenterCrop([2])
    assert np.from_dlpack(crop(images[0])).tolist() == images[0][:, 1:3, 1:3].tolist()
    pipeline = actorch.transforms.Compose([
        actorch.transforms.Lambda(lambda t: np.from_dlpack(t) * 2),  # Python: under the GIL
        actorch.transforms.RandomCrop([4], padding=[1]),
        actorch.transforms.RandomHorizontalFlip(0.0),
    ])
    ds = actorch.data.TransformedDataset(actorch.data.TensorDataset(images, np.arange(2)),
                                         pipeline)
    batches = list(actorch.DataLoader(ds, batch_size=2, num_workers=2).__iter__(as_torch=False))
    assert np.from_dlpack(batches[0][0]).shape == (2, 3, 4, 4)
    assert np.from_dlpack(batches[0][0]).max() <= 2 * images.max()


@processes
def test_a_python_dataset_over_sqlite_in_worker_processes(tmp_path):
    # What the C++ example's source actor does (examples/sqlite_source.cpp), as a Python user
    # writes it: each worker process opens its own connection (worker_init_fn), as sqlite3 needs.
    import sqlite3
    path = str(tmp_path / "samples.db")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE samples(id INTEGER PRIMARY KEY, label INTEGER, features BLOB)")
    for i in range(10):
        db.execute("INSERT INTO samples VALUES (?, ?, ?)",
                   (i, i % 3, np.full(4, i, dtype=np.float32).tobytes()))
    db.commit()
    db.close()

    class Samples(torch.utils.data.Dataset):
        def __init__(self, path):
            self.path, self.db = path, None

        def __len__(self):
            return 10

        def __getitem__(self, i):
            label, blob = self.db.execute("SELECT label, features FROM samples WHERE id = ?",
                                          (i,)).fetchone()
            return np.frombuffer(blob, dtype=np.float32).copy(), label

    def connect(worker_id):
        ds = actorch.data.get_worker_info().dataset
        ds.db = sqlite3.connect(ds.path)

    loader = actorch.DataLoader(Samples(path), batch_size=4, shuffle=True, num_workers=2,
                                worker_init_fn=connect, seed=0)
    seen = []
    for x, y in loader:
        assert x.shape[1] == 4 and ((x[:, 0].long() % 3) == y).all()
        seen += x[:, 0].long().tolist()
    assert sorted(seen) == list(range(10))


def test_resize_matches_torch_interpolate():
    import torch.nn.functional as F
    rng = np.random.default_rng(5)
    for shape, size in (((3, 13, 17), (5, 9)), ((1, 6, 4), (11, 7)), ((2, 9, 9), (9, 4))):
        img = rng.normal(size=shape).astype(np.float32)
        for aa in (True, False):
            got = np.from_dlpack(actorch.transforms.Resize(list(size), antialias=aa)(img))
            want = F.interpolate(torch.from_numpy(img)[None], size=size, mode="bilinear",
                                 align_corners=False, antialias=aa)[0].numpy()
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # An int size is the shorter edge (torchvision's rule): 13 x 17 -> 5 x int(5 * 17 / 13).
    out = actorch.transforms.Resize(5)(rng.normal(size=(3, 13, 17)).astype(np.float32))
    assert out.shape == (3, 5, 6)
