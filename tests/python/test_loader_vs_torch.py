"""actorch.DataLoader against torch.utils.data.DataLoader on the same Python datasets: the same
batches in the same order where nothing is random (sequential order, given samplers and batch
samplers, drop_last and len(), batch_size=None, every collate type nested), the same multiset of
samples where something is (shuffle, iterable datasets sharded by worker info), with no workers,
with worker processes and with worker threads, and with spawned worker processes where how a
worker starts matters (loader_cases.WORKERS_AND_SPAWN)."""
import sys
import threading

import numpy as np
import pytest
import torch

import actorch
from loader_cases import (WORKERS, WORKERS_AND_SPAWN, processes, ActorchStream, Containers,
                          Encoding, Growing, Mosaic, Nested, Point, Records, Rows, RowsOptedOut,
                          Shifted, Squares, Stream, assert_same, both, flatten)


@pytest.mark.parametrize("workers,context", WORKERS)
@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (4, False), (4, True), (23, False),
                                                  (50, True)])
def test_sequential_batches_and_len(workers, context, batch_size, drop_last):
    kw = dict(batch_size=batch_size, drop_last=drop_last, num_workers=workers,
              multiprocessing_context=context)
    want, got = both(Squares(), **kw)
    assert_same(got, want)
    assert len(actorch.DataLoader(Squares(), **kw)) == len(
        torch.utils.data.DataLoader(Squares(), batch_size=batch_size, drop_last=drop_last))


@pytest.mark.parametrize("workers,context", WORKERS)
def test_every_collate_type_nested(workers, context):
    want, got = both(Nested(), batch_size=4, num_workers=workers, multiprocessing_context=context)
    assert_same(got, want)
    assert type(got[0]["point"]) is Point


@pytest.mark.parametrize("workers,context", WORKERS)
def test_container_types_are_kept_as_torch_keeps_them(workers, context):
    # A tokenizer's BatchEncoding (a UserDict), OrderedDict, a list subclass, UserList: their
    # type, called on the collated contents; defaultdict and range: a dict and a list.
    for batch_size in (3, None):
        want, got = both(Containers(), batch_size=batch_size, num_workers=workers,
                         multiprocessing_context=context)
        assert_same(got, want)
    assert type(got[0]["encoding"]) is Encoding


class Leaves(torch.utils.data.Dataset):
    """Torch tensors of every kind a sample's fast path meets: a leaf that requires grad, a bool
    mask, a non-contiguous view, a 0-dim tensor, a float16 one."""

    def __init__(self):
        self.table = torch.arange(40, dtype=torch.float32).reshape(4, 10)

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return (torch.full((2,), float(i), requires_grad=True), torch.tensor([i % 2 == 0, True]),
                self.table[:, i], torch.tensor(i), torch.full((3,), i / 4, dtype=torch.float16))


@pytest.mark.parametrize("workers,context", WORKERS)
def test_torch_tensors_collate_as_torchs(workers, context):
    # torch's worker processes cannot send a batch that requires grad: the values only there
    kw = dict(batch_size=4, num_workers=workers, multiprocessing_context=context)
    got = list(actorch.DataLoader(Leaves(), **kw))
    want = [[t.detach() for t in b] for b in torch.utils.data.DataLoader(Leaves(), batch_size=4)]
    assert_same(got, want)


@pytest.mark.parametrize("workers,context", WORKERS_AND_SPAWN)
def test_torchs_tensor_dataset_loads_natively_to_torchs_batches(workers, context):
    x = torch.arange(60, dtype=torch.float32).reshape(20, 3)
    data = torch.utils.data.TensorDataset(x, torch.arange(20), x.t().contiguous().t()[:, 1],
                                          torch.arange(40, dtype=torch.uint8)[::2])
    kw = dict(num_workers=workers, multiprocessing_context=context)
    for more in (dict(batch_size=6), dict(batch_size=6, drop_last=True), dict(batch_size=None)):
        want, got = both(data, **kw, **more)
        assert_same(got, want)
    loader = actorch.DataLoader(data, batch_size=5, **kw)
    native = isinstance(loader._make_loader.args[0], actorch.data.TensorDataset)
    assert native == (context != "spawn")  # spawn unpickles the dataset: torch's own
    x[:, 0] = -1  # the tensors' own memory, as torch's TensorDataset reads it
    assert [b[0][:, 0].tolist() for b in loader] == [[-1.0] * 5] * 4
    shuffled = actorch.DataLoader(data, batch_size=4, shuffle=True, **kw)
    assert sorted(v for b in shuffled for v in b[1].tolist()) == list(range(20))


@pytest.mark.parametrize("more", [dict(sampler=[3, -1, 0]), dict(collate_fn=lambda b: b),
                                  dict(worker_init_fn=lambda w: None)],
                         ids=["sampler", "collate_fn", "worker_init_fn"])
def test_torchs_tensor_dataset_with_what_could_tell_keeps_its_getitem(more):
    data = torch.utils.data.TensorDataset(torch.arange(10.0), torch.arange(10) % 2 == 0)
    loader = actorch.DataLoader(data, batch_size=3, **more)
    assert not isinstance(loader._make_loader.args[0], actorch.data.TensorDataset)
    want = list(torch.utils.data.DataLoader(data, batch_size=3, **more))
    assert_same(list(loader), want)


@pytest.mark.parametrize("workers,context", WORKERS_AND_SPAWN)
@pytest.mark.parametrize("persistent", [False, True], ids=["", "persistent"])
def test_a_dataset_changed_between_epochs_as_torchs_workers_see_it(workers, context, persistent):
    # torch's workers get the dataset as it is when they start: each epoch's, or the first's
    # when they persist; spawned ones from a pickle made then. Worker threads (actorch's own)
    # read the program's dataset itself, as torch's loader without workers does.
    if persistent and workers == 0:
        pytest.skip("persistent_workers needs workers")
    kw = dict(batch_size=3, num_workers=workers, multiprocessing_context=context,
              persistent_workers=persistent)
    want_data, got_data = Shifted(), Shifted()
    want_loader = torch.utils.data.DataLoader(
        want_data, batch_size=3, **(dict(num_workers=workers, multiprocessing_context=context,
                                         persistent_workers=persistent)
                                    if context != "thread" else {}))
    got_loader = actorch.DataLoader(got_data, **kw)
    for shift in (0, 100, 1000):
        want_data.shift = got_data.shift = shift
        assert_same(list(got_loader), list(want_loader), f"shift {shift}")


@pytest.mark.parametrize("workers,context", WORKERS)
def test_a_dataset_whose_length_changes_is_read_at_each_epoch_as_torchs(workers, context):
    kw = dict(batch_size=3, num_workers=workers, multiprocessing_context=context)
    want_data, got_data = Growing(), Growing()
    want_loader = torch.utils.data.DataLoader(
        want_data, **{**kw, "multiprocessing_context": None if context == "thread" else context})
    got_loader = actorch.DataLoader(got_data, **kw)
    for more in ([], [10, 11, 12], []):
        want_data.items += more
        got_data.items += more
        assert len(got_loader) == len(want_loader)
        assert_same(list(got_loader), list(want_loader), f"{len(got_data)} items")
    del got_data.items[1:]
    assert len(got_loader) == 1 and [b.tolist() for b in got_loader] == [[0]]


@pytest.mark.parametrize("workers,context", WORKERS)
def test_no_batching_converts_as_torch(workers, context):
    want, got = both(Nested(), batch_size=None, num_workers=workers,
                     multiprocessing_context=context)
    assert_same(got, want)
    want, got = both(Squares(5), batch_size=None)
    assert_same(got, want)


@processes
def test_plain_lists_are_datasets():
    data = [(i, np.float64(i) / 3) for i in range(10)]
    want, got = both(data, batch_size=3)
    assert_same(got, want)
    want, got = both(list(range(7)), batch_size=2, num_workers=2)
    assert_same(got, want)


@pytest.mark.parametrize("workers,context", WORKERS)
def test_given_samplers_and_batch_samplers(workers, context):
    kw = dict(num_workers=workers, multiprocessing_context=context)
    order = [5, 3, 3, 0, 22, 7, 1]
    want, got = both(Squares(), sampler=order, batch_size=3, **kw)  # any iterable of indices
    assert_same(got, want)
    sampler = torch.utils.data.SequentialSampler(range(11))
    want, got = both(Squares(), sampler=sampler, batch_size=4, drop_last=True, **kw)
    assert_same(got, want)
    batches = [[1, 2], [9], [4, 4, 0]]  # any iterable of index lists
    want, got = both(Squares(), batch_sampler=batches, **kw)
    assert_same(got, want)
    batch_sampler = torch.utils.data.BatchSampler(sampler, batch_size=5, drop_last=False)
    want, got = both(Squares(), batch_sampler=batch_sampler, **kw)
    assert_same(got, want)
    assert len(actorch.DataLoader(Squares(), batch_sampler=batch_sampler, **kw)) == 3


@pytest.mark.parametrize("workers,context", WORKERS)
def test_samplers_yield_keys_of_any_type_as_torchs(workers, context):
    # torch hands __getitem__ whatever its sampler yields: names, YOLOX's (mosaic, index)
    # tuples, negative or other ints a list or the user's class takes.
    kw = dict(num_workers=workers, multiprocessing_context=context)
    names = ["r03", "r00", "r11", "r07", "r03"]
    want, got = both(Records(), sampler=names, batch_size=2, **kw)
    assert_same(got, want)
    want, got = both(Records(), sampler=names, batch_size=None, **kw)
    assert_same(got, want)
    batches = [[(True, 0), (False, 1), 2], [-1, (True, -2)], [(False, 9)]]
    want, got = both(Mosaic(), batch_sampler=batches, **kw)
    assert_same(got, want)
    want, got = both(Mosaic(), sampler=[4, -3, 10 ** 20 % 7, -10], batch_size=3, **kw)
    assert_same(got, want)
    # Past the end, from a sampler of torch's and of actorch's: the dataset's own error.
    for sampler in ([3, 10], actorch.data.SubsetRandomSampler([10])):
        with pytest.raises(IndexError, match="list index out of range"):
            list(actorch.DataLoader(Mosaic(), sampler=sampler, batch_size=2, **kw))


@pytest.mark.parametrize("workers,context", WORKERS)
def test_getitems_fetches_each_batch_in_one_call_as_torchs(workers, context):
    kw = dict(num_workers=workers, multiprocessing_context=context)
    for dataset in (Rows(), RowsOptedOut()):
        want, got = both(dataset, batch_size=4, **kw)
        assert_same(got, want)
        want, got = both(dataset, batch_sampler=[[3, 5, 9], [10, 11]], **kw)
        assert_same(got, want)
        want, got = both(dataset, batch_size=None, **kw)  # unbatched: __getitem__
        assert_same(got, want)
    batched = list(actorch.DataLoader(Rows(), batch_size=4, **kw))
    assert [len(b[1]) for b in batched] == [3, 3, 3, 3, 1]  # 0, 5, 10 and 15 dropped
    assert {s for b in batched for s in b[1]} == {"many"}


@pytest.mark.parametrize("workers,context", WORKERS_AND_SPAWN)
def test_keys_are_new_each_epoch_for_persistent_workers(workers, context):
    # A sampler yielding other keys each epoch: workers kept across epochs (in processes:
    # forked or spawned before the later keys existed) load each epoch's own.
    class Rotating:
        def __init__(self):
            self.epoch = 0

        def __iter__(self):
            self.epoch += 1
            return iter([f"r{(self.epoch * 5 + i) % 12:02d}" for i in range(6)])

        def __len__(self):
            return 6

    kw = dict(batch_size=4, num_workers=workers, multiprocessing_context=context,
              persistent_workers=workers > 0)
    want_loader = torch.utils.data.DataLoader(
        Records(), sampler=Rotating(), **{**kw, "multiprocessing_context": None})
    got_loader = actorch.DataLoader(Records(), sampler=Rotating(), **kw)
    for epoch in range(3):
        assert_same(list(got_loader), list(want_loader), f"epoch {epoch}")


@pytest.mark.parametrize("workers,context", WORKERS)
def test_a_missing_key_is_the_datasets_key_error(workers, context):
    loader = actorch.DataLoader(Records(), sampler=["r01", "nope"], batch_size=2,
                                num_workers=workers, multiprocessing_context=context)
    with pytest.raises(KeyError, match="nope"):
        list(loader)


@processes
def test_a_key_a_worker_process_cannot_get_is_picklings_error_naming_the_batch():
    loader = actorch.DataLoader(Records(), sampler=[threading.Lock()], batch_size=1,
                                num_workers=1)
    with pytest.raises(TypeError, match="worker 0 cannot hand batch 0 to its process: cannot "
                       "pickle the sampler's keys .*cannot pickle '_thread.lock' object"):
        list(loader)


def test_a_cxx_dataset_refuses_keys_naming_them():
    data = actorch.data.TensorDataset(np.arange(6, dtype=np.float32))
    with pytest.raises(actorch.Error, match=r"yielded a <class 'str'> \('a'\); indices are ints"):
        list(actorch.DataLoader(data, sampler=["a"], batch_size=2))
    with pytest.raises(actorch.Error, match="yielded index -1 .* out of range for a dataset of 6"):
        list(actorch.DataLoader(data, sampler=[-1], batch_size=2))


@pytest.mark.parametrize("workers,context", WORKERS)
def test_shuffle_gives_the_same_samples_and_a_seed_repeats(workers, context):
    kw = dict(batch_size=4, shuffle=True, num_workers=workers, multiprocessing_context=context)
    want, got = both(list(range(40)), **kw)
    assert flatten(got) == flatten(want) == list(range(40))
    runs = [[b.tolist() for b in actorch.DataLoader(
        list(range(40)), generator=torch.Generator().manual_seed(7), **kw)] for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0] != [list(range(i, i + 4)) for i in range(0, 40, 4)]
    torch.manual_seed(3)
    first = [b.tolist() for b in actorch.DataLoader(list(range(40)), **kw)]
    torch.manual_seed(3)
    assert [b.tolist() for b in actorch.DataLoader(list(range(40)), **kw)] == first
    # As torch's, each iter() draws its epoch from torch's generator: the seed set between
    # making the loader and iterating it decides the order, not the one before.
    loader = actorch.DataLoader(list(range(40)), **kw)
    orders = {}
    for seed in (1, 2, 1):
        torch.manual_seed(seed)
        orders.setdefault(seed, []).append([b.tolist() for b in loader])
    assert orders[1][0] == orders[1][1] != orders[2][0]


@pytest.mark.parametrize("workers,context", WORKERS)
def test_shuffle_gives_torchs_order_for_the_same_seed(workers, context):
    """A port checked against torch's run, or resuming a torch run's epoch, sees torch's batches:
    the same draws from the same generators, and the default generator left where torch's is."""
    kw = dict(batch_size=4, shuffle=True, num_workers=workers, multiprocessing_context=context)
    torch_kw = dict(kw, multiprocessing_context=None)

    def epochs(make, n=2):
        loader = make()
        return [[b.tolist() for b in loader] for _ in range(n)], torch.rand(1).item()

    for seed in (0, 5):
        torch.manual_seed(seed)
        want = epochs(lambda: torch.utils.data.DataLoader(list(range(37)), **torch_kw))
        torch.manual_seed(seed)
        assert epochs(lambda: actorch.DataLoader(list(range(37)), **kw)) == want
    want = epochs(lambda: torch.utils.data.DataLoader(
        list(range(37)), generator=torch.Generator().manual_seed(7), drop_last=True, **torch_kw))
    assert epochs(lambda: actorch.DataLoader(
        list(range(37)), generator=torch.Generator().manual_seed(7), drop_last=True, **kw))[0] == (
        want[0])
    data = np.arange(30, dtype=np.int64)  # actorch's C++ dataset shuffles in torch's order too
    torch.manual_seed(2)
    want = [b.tolist() for b in torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)]
    torch.manual_seed(2)
    assert [b.tolist() for b, in actorch.DataLoader(actorch.data.TensorDataset(data), batch_size=4,
                                                    shuffle=True)] == want


def test_actorchs_samplers_take_torchs_generator_and_give_torchs_order():
    # They took seed= only, and refused generator=, the argument torch's samplers take.
    def pair(name, *args):
        mine = getattr(actorch.data, name)(*args, generator=torch.Generator().manual_seed(4))
        theirs = getattr(torch.utils.data, name)(*args, generator=torch.Generator().manual_seed(4))
        return [list(mine) for _ in range(2)], [list(theirs) for _ in range(2)]

    for name, args in [("RandomSampler", (list(range(23)),)),
                       ("RandomSampler", (list(range(5)), True, 9)),
                       ("SubsetRandomSampler", ([4, 8, 15, 16, 23, 42],)),
                       ("WeightedRandomSampler", ([0.1, 0.5, 0.0, 2.0], 12))]:
        mine, theirs = pair(name, *args)
        assert mine == theirs, name
    loader = actorch.DataLoader(list(range(10)), batch_size=3, sampler=actorch.data.RandomSampler(
        list(range(10)), generator=torch.Generator().manual_seed(1)))
    want = torch.utils.data.DataLoader(list(range(10)), batch_size=3, sampler=(
        torch.utils.data.RandomSampler(list(range(10)), generator=torch.Generator().manual_seed(1))))
    assert [b.tolist() for b in loader] == [b.tolist() for b in want]
    assert isinstance(actorch.data.RandomSampler(list(range(3)), seed=1), actorch.data.Sampler)
    with pytest.raises(ValueError, match="seed= .* or generator= .*not both"):
        actorch.data.RandomSampler(list(range(3)), generator=torch.Generator(), seed=1)


@pytest.mark.parametrize("workers,context", [(0, None), pytest.param(2, None, marks=processes),
                                             pytest.param(3, None, marks=processes)])
def test_an_iterable_dataset_sharded_by_torch_worker_info(workers, context):
    want, got = both(Stream(), batch_size=4, num_workers=workers, multiprocessing_context=context)
    assert flatten(got) == flatten(want) == list(range(30))
    assert len(got) == len(want)


@pytest.mark.parametrize("workers,context", WORKERS_AND_SPAWN)
def test_an_iterable_dataset_sharded_by_actorch_worker_info(workers, context):
    got = list(actorch.DataLoader(ActorchStream(), batch_size=4, num_workers=workers,
                                  multiprocessing_context=context))
    assert flatten(got) == list(range(30))


def test_any_iterable_object_is_an_iterable_dataset():
    class Numbers(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from ({"i": i, "half": i / 2} for i in range(7))

    want, got = both(Numbers(), batch_size=3)
    assert_same(got, want)

    class Plain:  # torch would take it for a map-style dataset and fail on len()
        def __iter__(self):
            yield from ({"i": i, "half": i / 2} for i in range(7))

    assert_same(list(actorch.DataLoader(Plain(), batch_size=3)), want)


# At module level, so that spawned workers can unpickle them.
class Opaque:
    def __init__(self, i):
        self.i = i


class Objects(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return Opaque(i), np.array([i])


def collate(samples):
    assert all(isinstance(o, Opaque) and isinstance(a, np.ndarray) for o, a in samples)
    return torch.tensor([o.i for o, _ in samples]), np.concatenate([a for _, a in samples])


@pytest.mark.parametrize("workers,context", WORKERS_AND_SPAWN)
def test_a_python_collate_fn_gets_the_samples_as_returned(workers, context):
    want, got = both(Objects(), batch_size=4, collate_fn=collate, num_workers=workers,
                     multiprocessing_context=context)
    assert [[x.tolist(), y.tolist()] for x, y in got] == [[x.tolist(), y.tolist()]
                                                          for x, y in want]


class Batch:
    """A batch class of the user's, as torch's docs suggest for custom batches."""

    def __init__(self, samples):
        self.index = torch.tensor([s[0] for s in samples])
        self.grid = np.stack([s[2] for s in samples])  # stays a numpy array
        self.names = [s[3] for s in samples]             # stays a list
        self.tags = {s[3][:1] for s in samples}          # a set
        self.scaled = torch.tensor([s[1] for s in samples]).t().requires_grad_()
        self.same = (self.index, self.index)             # one tensor held twice


def rich_collate(samples):
    batch = Batch(samples)
    return [batch, {"grid_t": torch.from_numpy(batch.grid).transpose(1, 2),  # a strided view
                    "flags": torch.tensor([s[0] % 2 == 0 for s in samples]),
                    "n": np.int64(len(samples)), "half": torch.ones(2, dtype=torch.bfloat16),
                    "complex": torch.ones(2, dtype=torch.complex64)}]


@pytest.mark.parametrize("workers,context", WORKERS)
def test_a_collate_fns_batch_comes_back_as_built(workers, context):
    """torch pickles a worker's batch: lists stay lists, numpy arrays stay arrays, sets and
    classes of the user's come back; so do they from actorch's worker processes."""
    want, got = both(Squares(10), batch_size=4, collate_fn=rich_collate, num_workers=workers,
                     multiprocessing_context=context)
    assert_same(got, want)
    assert len(got) == 3
    for batch, extra in got:
        assert type(batch) is Batch and type(batch.names) is list and type(batch.tags) is set
        assert batch.scaled.requires_grad and batch.same[0] is batch.same[1]
        batch.grid[0, 0, 0] = -1  # writable, as torch's
        assert extra["grid_t"].shape == (len(batch.names), 3, 2)


@pytest.mark.parametrize("workers,context", WORKERS)
def test_without_batching_objects_of_the_users_come_back(workers, context):
    want, got = both(Objects(), batch_size=None, num_workers=workers,
                     multiprocessing_context=context)
    assert_same(got, want)
    assert type(got[0][0]) is Opaque


class Unpicklable:
    def __init__(self):
        self.fn = lambda: None


@processes
def test_a_batch_that_pickle_refuses_fails_in_the_worker_naming_it():
    loader = actorch.DataLoader(Squares(4), batch_size=2, num_workers=1,
                                collate_fn=lambda s: Unpicklable())
    with pytest.raises(Exception, match="cannot leave its worker process.*lambda"):
        next(iter(loader))


def pair(sample):  # torch calls it with the sample, not a list of one
    assert isinstance(sample, tuple) and len(sample) == 2, sample
    return sample[0].i * 10 + int(sample[1][0])


@pytest.mark.parametrize("workers,context", WORKERS)
def test_without_batching_a_collate_fn_gets_each_sample_itself(workers, context):
    want, got = both(Objects(), batch_size=None, collate_fn=pair, num_workers=workers,
                     multiprocessing_context=context)
    assert got == want == [11 * i for i in range(len(Objects()))]


class Encoded(torch.utils.data.Dataset):
    """Encoded images as a pipeline that decodes on the GPU keeps them: bytes, beside a label and
    in a dict."""

    def __len__(self):
        return 6

    def __getitem__(self, k):
        return bytes([k]) * (k + 1), k, {"jpeg": b"\xff\xd8" + bytes([k])}


@pytest.mark.parametrize("workers,context", WORKERS)
def test_bytes_collate_as_torchs(workers, context):
    """torch's default_collate returns a batch of bytes as the sequence it was; actorch's refused
    them as a type of the user's."""
    for data in (Encoded(), [b"a", b"bc", b"d"]):
        want, got = both(data, batch_size=2, num_workers=workers, multiprocessing_context=context)
        assert_same(got, want)


class Masks(torch.utils.data.Dataset):
    """Attention masks and names, as a text dataset returns them: a torch bool tensor, a numpy
    bool array, a numpy bool scalar and a numpy string (np.str_, as an item of a numpy array of
    names is)."""
    names = np.array(["a", "bb", "ccc"])

    def __len__(self):
        return 6

    def __getitem__(self, k):
        return {"ids": torch.arange(4) + k, "mask": torch.arange(4) < k, "np_mask": np.arange(3) < k,
                "flag": np.bool_(k % 2), "name": self.names[k % 3]}


@pytest.mark.parametrize("workers,context", WORKERS)
def test_bool_tensors_and_numpy_strings_collate_as_torch(workers, context):
    for batch_size in (2, None):
        want, got = both(Masks(), batch_size=batch_size, num_workers=workers,
                         multiprocessing_context=context)
        for g, w in zip(got, want):
            names = (g.pop("name"), w.pop("name"))  # np.str_ items in torch's, str in actorch's
            assert [str(n) for n in names[0]] == [str(n) for n in names[1]] if batch_size else (
                str(names[0]) == str(names[1]))
            if batch_size is None:  # default_convert keeps numpy's bool scalar; actorch a bool
                assert bool(g.pop("flag")) == bool(w.pop("flag"))
            assert_same(g, w)
        assert len(got) == len(want)


class FailsAtFive(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 5:
            raise KeyError(f"no sample {i}")
        return i


def outcomes(loader):
    """What a loop that catches a batch's error and goes on sees, as torch's users write it."""
    seen, it = [], iter(loader)
    while True:
        try:
            seen.append(next(it).tolist())
        except StopIteration:
            return seen
        except KeyError:
            seen.append("KeyError")


@pytest.mark.parametrize("workers,context", WORKERS_AND_SPAWN)
def test_a_batchs_exception_leaves_the_rest_of_the_epoch_as_torch(workers, context):
    for first in (False, True):  # the failing batch in the middle, or the first
        sampler = [5, 0, 1, 2, 3, 4, 6, 7, 8, 9] if first else None
        kw = dict(batch_size=2, sampler=sampler, num_workers=workers)
        want = outcomes(torch.utils.data.DataLoader(FailsAtFive(), **kw))
        got = outcomes(actorch.DataLoader(FailsAtFive(), multiprocessing_context=context, **kw))
        assert got == want
        assert "KeyError" in got and len(got) == 5


def test_arguments_refused_as_torch_refuses_them():
    cases = [dict(shuffle=True, sampler=[0]), dict(batch_sampler=[[0]], batch_size=2),
             dict(batch_size=None, drop_last=True), dict(num_workers=-1), dict(timeout=-1),
             dict(persistent_workers=True), dict(prefetch_factor=4),
             dict(multiprocessing_context="fork"), dict(batch_size=0), dict(batch_size=-2),
             dict(batch_size=2.5), dict(batch_size=True), dict(drop_last="yes")]
    for kw in cases:
        with pytest.raises(ValueError) as want:
            torch.utils.data.DataLoader(Squares(), **kw)
        with pytest.raises(ValueError) as got:
            actorch.DataLoader(Squares(), **kw)
        assert str(got.value) == str(want.value), kw
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        actorch.DataLoader(Stream(), shuffle=True)
    with pytest.raises(ValueError, match="multiprocessing_context='spawn' rebuilds the dataset "
                                         "from its pickle"):
        actorch.DataLoader(actorch.data.TensorDataset(np.zeros(4, dtype=np.float32)), num_workers=1,
                           multiprocessing_context="spawn")
    with pytest.raises(ValueError, match="valid start method"):
        actorch.DataLoader(Squares(), num_workers=1, multiprocessing_context="vfork")
    with pytest.raises(TypeError, match="neither __getitem__"):
        actorch.DataLoader(42)


@pytest.mark.parametrize("workers,context", WORKERS)
def test_iterators_of_one_loader_are_independent_as_torchs(workers, context):
    """A peek at a batch inside the loop, zip(loader, loader), nested loops: each iterator has
    an epoch of its own (it used to restart the running one, repeating its data)."""
    def runs(make):
        loader = make(list(range(12)), batch_size=3, num_workers=workers)
        out = {"zip": [(a.tolist(), b.tolist()) for a, b in zip(loader, loader)],
               "nested": [(a.tolist(), [b.tolist() for b in loader]) for a in loader]}
        seen, peeks = [], []
        for step, batch in enumerate(loader):
            seen += batch.tolist()
            if step == 1:
                peeks.append(next(iter(loader)).tolist())
        out["peek"] = (seen, peeks)
        return out
    torch_kw = {} if context in (None, "thread") else {"multiprocessing_context": context}
    want = runs(lambda d, **kw: torch.utils.data.DataLoader(d, **kw, **torch_kw))
    got = runs(lambda d, **kw: actorch.DataLoader(d, multiprocessing_context=context, **kw))
    assert got == want
    assert got["peek"][0] == list(range(12))


@pytest.mark.parametrize("workers,context", WORKERS)
def test_numbers_of_mixed_kinds_collate_as_torchs(workers, context):
    """A target that is 0 in one sample and 0.5 in the next, a flag that is a bool or an int."""
    data = [(0, True), (0.5, 2), (1, False), (2.5, 3.5)]
    for batch_size in (2, 4):
        want, got = both(data, batch_size=batch_size, num_workers=workers,
                         multiprocessing_context=context)
        assert_same(got, want)


class NotBatchable:
    """A type of the user's that default_collate cannot batch."""


# Samples of mixed types as datasets return them: each list is one batch.
MIXED = {
    # torch returns a batch whose sample 0 is a string (or bytes) as it is, whatever follows
    "string first": ["a", 1, b"c", 2.5],
    "string first, nested": [("a", 1), (None, 2), (3.5, 3)],
    # only sample 0's keys are batched
    "more keys later": [{"a": 1}, {"a": 2, "b": np.zeros(3)}],
    # torch.stack promotes: wider later, narrower later, three dtypes
    "float32 then float64": [np.zeros(2, np.float32), np.full(2, 0.1, np.float64)],
    "float64 then float32": [np.full(2, 0.1, np.float64), np.ones(2, np.float32)],
    "int32, float32, int64": [torch.arange(3, dtype=torch.int32), torch.ones(3),
                              torch.full((3,), 2**40)],
    "bool then float": [torch.tensor([True, False]), torch.tensor([0.5, 1.5])],
}

MIXED_ERRORS = {
    "None": ([None, None], TypeError),
    "a type of the user's": ([NotBatchable(), NotBatchable()], TypeError),
    "a number, then a string": ([1, "a"], TypeError),
    "a tuple, then a dict": ([(1,), {"a": 1}], TypeError),
    "a dict, then a tuple": ([{"a": 1}, (1,)], TypeError),
    "numpy strings": ([np.array(["a"]), np.array(["b"])], TypeError),
    "a key missing": ([{"a": 1}, {"b": 1}], KeyError),
    "tensors of two shapes": ([np.zeros(2), np.zeros(3)], RuntimeError),
    "sequences of two lengths": ([(1, 2), (1, 2, 3)], RuntimeError),
}


def batches_or_error(make, samples, **kw):
    try:
        return list(make(samples, batch_size=len(samples), **kw))
    except Exception as e:
        return type(e)


@pytest.mark.parametrize("workers,context", [WORKERS[0], WORKERS[1]])
def test_samples_of_mixed_types_collate_as_torchs(workers, context):
    # (torch stacks tensors of mixed dtypes in workers into sample 0's: its batches differ.)
    for name, samples in MIXED.items():
        want = batches_or_error(torch.utils.data.DataLoader, samples, num_workers=workers)
        got = batches_or_error(actorch.DataLoader, samples, num_workers=workers,
                               multiprocessing_context=context)
        if isinstance(want, type):
            assert isinstance(got, type) and issubclass(got, want), (name, got, want)
        else:
            assert_same(got, want, name)
    for name, (samples, error) in MIXED_ERRORS.items():
        with pytest.raises(error):
            list(torch.utils.data.DataLoader(samples, batch_size=2))
        with pytest.raises(error, match="default_collate"):
            list(actorch.DataLoader(samples, batch_size=2, num_workers=workers,
                                    multiprocessing_context=context))


class Seeds(torch.utils.data.Dataset):
    """What a worker's generators give, as random augmentations draw them."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        import random
        info = torch.utils.data.get_worker_info()
        return (str(info.seed if info else -1), str(torch.initial_seed()),
                float(torch.rand(())), float(np.random.rand()), random.random())


@processes
def test_worker_seeds_and_the_default_generator_follow_torchs():
    """After torch.manual_seed, worker i's seed is torch's (base_seed + i, within int64), its
    torch, numpy and random generators draw what torch's draw, and a shuffled epoch leaves the
    default generator where torch's leaves it."""
    runs = []
    for make in (torch.utils.data.DataLoader, actorch.DataLoader):
        torch.manual_seed(0)
        batches = [b for b in make(Seeds(), batch_size=2, num_workers=2)]
        list(make(list(range(10)), batch_size=3, shuffle=True))
        runs.append((batches, float(torch.rand(()))))
    (want, want_next), (got, got_next) = runs
    assert_same(got, want)
    assert got_next == want_next
    assert all(int(s) < 2**63 for b in got for s in b[0])


class ExitsAtFive(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            sys.exit(3)
        return i


@processes
def test_sys_exit_in_a_worker_process_is_a_runtime_error_as_torchs():
    """It ends that worker; the loop gets a RuntimeError it may catch, not a SystemExit (torch's
    side is not run here: its SIGCHLD handler raises into whatever runs next, pytest's code)."""
    with pytest.raises(RuntimeError, match="SystemExit: 3"):
        list(actorch.DataLoader(ExitsAtFive(), batch_size=2, num_workers=2, timeout=30))


class Unsized(torch.utils.data.Sampler):
    """A streaming sampler, or batch sampler, with no __len__."""

    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


@pytest.mark.parametrize("kw", [dict(sampler=Unsized([4, 2, 0, 1]), batch_size=2),
                                dict(batch_sampler=Unsized([[0, 1], [2]]))],
                         ids=["sampler", "batch_sampler"])
def test_a_sampler_without_len_makes_len_a_type_error_and_still_iterates(kw):
    """As torch's: list() and tqdm take the TypeError for 'length unknown'."""
    want, got = torch.utils.data.DataLoader(Squares(), **kw), actorch.DataLoader(Squares(), **kw)
    for loader in (want, got):
        with pytest.raises(TypeError, match="has no len"):
            len(loader)
    assert_same(list(got), list(want))


@pytest.mark.parametrize("kw", [dict(), dict(shuffle=True), dict(batch_size=None),
                                dict(batch_size=4, drop_last=True, sampler=[3, 1, 2]),
                                dict(batch_sampler=[[0, 1], [2]]), dict(collate_fn=collate)],
                         ids=["default", "shuffle", "unbatched", "sampler", "batch_sampler",
                              "collate_fn"])
def test_sampler_batch_sampler_and_collate_fn_read_as_torchs(kw):
    """What torch's DataLoader sets when they are not given, for code that reads them."""
    want, got = torch.utils.data.DataLoader(Squares(), **kw), actorch.DataLoader(Squares(), **kw)
    for name in ("sampler", "batch_sampler"):
        w, g = getattr(want, name), getattr(got, name)
        assert type(g) is type(w), name
        if w is not None:
            assert len(g) == len(w), name
    if want.batch_sampler is not None and not isinstance(want.batch_sampler, list):
        assert (got.batch_sampler.batch_size, got.batch_sampler.drop_last) == (
            want.batch_sampler.batch_size, want.batch_sampler.drop_last)
    assert got.collate_fn is want.collate_fn
    assert (got.batch_size, got.drop_last) == (want.batch_size, want.drop_last)
    stream = (torch.utils.data.DataLoader(Stream()), actorch.DataLoader(Stream()))
    assert type(stream[1].sampler) is type(stream[0].sampler)


def test_unbatchable_samples_name_their_type():
    with pytest.raises(TypeError, match="object"):  # torch's type for it
        list(actorch.DataLoader([object(), object()], batch_size=2))
    with pytest.raises(actorch.Error, match="key of type <class 'int'>"):
        list(actorch.DataLoader([{1: 2}], batch_size=1))
    with pytest.raises(actorch.Error, match="the int 9223372036854775808, outside int64's range"):
        list(actorch.DataLoader([2**63, 1], batch_size=2))
    assert next(iter(actorch.DataLoader([-2**63], batch_size=1))).tolist() == [-2**63]
