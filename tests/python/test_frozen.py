"""actorch.data.frozen (python/actorch/data/frozen.py): a read-only list pickled into one shared
mapping. Its sequence behaviour and errors, pickling for spawned workers, a forked child's reads,
torch's DataLoader over it, and the point of it: the PSS summed over a parent and two forked
children that read every item stays near one copy, where a plain list's is un-shared."""
import ast
import copy
import gc
import inspect
import os
import pickle

import numpy as np
import pytest

import torch  # the test command always has it (scripts/setup.sh test): none is skipped

from actorch.data.frozen import frozen

ITEMS = [(0, "zero"), None, {"a": [1, 2]}, "text", 3.5, b"\x00\xff", np.arange(4), (1, (2, 3))]


def same(a, b):
    return pickle.dumps(a, protocol=5) == pickle.dumps(b, protocol=5)


def test_items_come_back_by_index_and_by_iteration():
    f = frozen(ITEMS)
    assert len(f) == len(ITEMS)
    assert all(same(f[i], x) for i, x in enumerate(ITEMS))
    assert all(same(a, b) for a, b in zip(f, ITEMS, strict=True))
    g = frozen(["a", None, (1, (2, 3)), None])  # Sequence's in, index and count come along
    assert (1, (2, 3)) in g and "b" not in g and g.index(None) == 1 and g.count(None) == 2


def test_a_generator_is_read_once_and_an_empty_input_gives_an_empty_list():
    f = frozen((i, str(i)) for i in range(1000))
    assert list(f) == [(i, str(i)) for i in range(1000)]
    e = frozen([])
    assert len(e) == 0 and list(e) == [] and e[:] == []
    with pytest.raises(IndexError, match="index 0 out of range for length 0"):
        e[0]


def test_negative_indices_and_slices_as_a_list_has_them():
    items = list(range(10))
    f = frozen(items)
    assert f[-1] == 9 and f[-10] == 0
    for s in (slice(None), slice(2, 5), slice(None, None, 3), slice(8, 1, -2), slice(-3, None),
              slice(5, 2), slice(-100, 100)):
        assert f[s] == items[s], s
    assert isinstance(f[1:3], list)
    assert f[np.int64(4)] == 4  # anything with __index__, as a list takes


def test_an_index_out_of_range_names_the_index_and_the_length():
    f = frozen(range(3))
    with pytest.raises(IndexError, match="index 3 out of range for length 3"):
        f[3]
    with pytest.raises(IndexError, match="index -4 out of range for length 3"):
        f[-4]


def test_an_index_that_is_not_an_integer_names_its_type():
    f = frozen(range(3))
    with pytest.raises(TypeError, match="not str"):
        f["1"]
    with pytest.raises(TypeError, match="not float"):
        f[1.0]


def test_it_cannot_be_changed_and_says_what_to_do_instead():
    f = frozen([1, 2, 3])
    for change in (lambda: f.__setitem__(0, 5), lambda: f.__delitem__(0), lambda: f.append(4),
                   lambda: f.extend([4]), lambda: f.insert(0, 4), lambda: f.pop(),
                   lambda: f.sort()):
        with pytest.raises(TypeError, match=r"cannot be changed .* frozen\(list\(f\) \+ \[x\]\)"):
            change()
    with pytest.raises(TypeError, match="cannot be changed"):
        f[0] = 5
    with pytest.raises(TypeError, match="cannot be changed"):
        del f[0]
    with pytest.raises(TypeError, match="cannot be changed"):
        f += [4]
    with pytest.raises(AttributeError):
        f.extra = 1  # __slots__: no attribute can be added either
    assert list(f) == [1, 2, 3]


def test_each_access_unpickles_a_new_object_so_mutating_it_changes_nothing():
    f = frozen([{"k": [1]}])
    got = f[0]
    got["k"].append(2)
    assert f[0] == {"k": [1]}
    assert f[0] is not f[0]


def test_repr_and_nbytes_give_the_count_and_the_mapping_size():
    f = frozen([(1, "a"), (2, "b")])
    pickles = sum(len(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)) for x in f)
    assert f.nbytes == (pickles + 7) // 8 * 8 + 8 * 3  # the pickles, aligned, and 3 offsets
    assert repr(f) == f"frozen([...] 2 items, {f.nbytes} bytes)"


def test_an_item_that_cannot_be_pickled_is_named_by_index_and_type():
    with pytest.raises(TypeError, match=r"item 2 \(function\) cannot be pickled"):
        frozen([1, 2, lambda: 3])


def test_pickling_copies_the_bytes_for_spawned_workers():
    f = frozen((i, str(i)) for i in range(1000))
    for protocol in (2, 4, pickle.HIGHEST_PROTOCOL):  # multiprocessing's spawn uses 4
        g = pickle.loads(pickle.dumps(f, protocol=protocol))
        assert type(g) is type(f) and g.nbytes == f.nbytes and list(g) == list(f)
    assert list(copy.deepcopy(f)) == list(f)


def test_it_imports_nothing_from_actorch_so_torch_users_can_take_it_alone():
    tree = ast.parse(open(inspect.getsourcefile(frozen)).read())  # actorch.data.frozen's file
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert names and not [m for m in names if m.split(".")[0] == "actorch"], names


def test_a_forked_child_reads_every_item():
    f = frozen((i, f"item-{i}") for i in range(10000))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = all(f[i] == (i, f"item-{i}") for i in range(len(f))) and f[-1][0] == 9999
            code = 0 if ok else 2
        finally:
            os._exit(code)  # never back into pytest from the child
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class Records(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return i, len(self.items[i][1])


def test_torchs_dataloader_with_forked_workers_reads_a_frozen_dataset():
    n = 5000
    ds = Records(frozen((i, "x" * (i % 7)) for i in range(n)))
    loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2,
                                         multiprocessing_context="fork")
    index, length = (torch.cat(t).tolist() for t in zip(*loader))
    assert index == list(range(n)) and length == [i % 7 for i in range(n)]


# Note [Summed PSS]
# PSS (proportional set size) charges each page 1/k to each of the k processes that map it, so
# fork() alone leaves the sum over parent and children where the parent's was; only pages that
# become private (written: a reference count, a gc header) raise it. The children first read a
# few items (the interpreter's own writes after fork: freed and reused blocks, gc counters) and
# the sum then is the baseline; the allowance is what that baseline adds to the parent's PSS
# before forking. Then each child reads every item, and the sum is measured again while the
# children are alive (each waits on a pipe before exiting).

N_SHARED = 2_000_000  # about 3 s in all: 2 s to build, 0.5 s per child to read


def pss_kb(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise AssertionError(f"no Pss line in /proc/{pid}/smaps_rollup")


def summed_pss_of_two_readers(items, expected):
    """See Note [Summed PSS]. Returns (the parent's PSS before fork, the allowance, the sum
    after every item was read), in kB."""
    gc.collect()
    before = pss_kb(os.getpid())
    children = []  # (pid, the pipe the child answers on, the pipe it waits on)
    try:
        for _ in range(2):
            up_r, up_w = os.pipe()
            down_r, down_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.close(up_r)
                    os.close(down_w)
                    sum(len(items[i][1]) for i in range(1000))
                    os.write(up_w, b"r")  # baseline reached
                    os.read(down_r, 1)
                    total = sum(len(items[i][1]) for i in range(len(items)))
                    os.write(up_w, b"d" if total == expected else b"x")  # all read
                    os.read(down_r, 1)  # measured: exit
                    code = 0
                finally:
                    os._exit(code)
            os.close(up_w)
            os.close(down_r)
            children.append((pid, up_r, down_w))
        pids = [os.getpid()] + [pid for pid, _, _ in children]

        assert [os.read(up, 1) for _, up, _ in children] == [b"r", b"r"]
        allowance = sum(pss_kb(p) for p in pids) - before
        for _, _, down in children:
            os.write(down, b"g")
        assert [os.read(up, 1) for _, up, _ in children] == [b"d", b"d"]
        after = sum(pss_kb(p) for p in pids)
        for _, _, down in children:
            os.write(down, b"e")
    finally:
        # All pipes first: the second child holds a copy of the first one's, so the first sees
        # EOF (and exits, should the test have failed before "e") only once both are closed.
        for _, up, down in children:
            os.close(up)
            os.close(down)
        for pid, _, _ in children:
            os.waitpid(pid, 0)
    return before, allowance, after


def test_forked_readers_of_2_million_items_share_them_summed_pss_near_one_copy():
    f = frozen((i, str(i)) for i in range(N_SHARED))
    expected = sum(len(str(i)) for i in range(N_SHARED))
    before, allowance, after = summed_pss_of_two_readers(f, expected)
    print(f"frozen: before {before} kB, allowance {allowance} kB, after {after} kB, "
          f"mapping {f.nbytes // 1024} kB")
    assert after < 1.2 * before + allowance
    # (A tighter bound, a fraction of the mapping, held on this machine but not in CI's fresh
    # root, where the children's own allocator pages grew 15 MB: the 1.2x above is the rule.)


def test_a_plain_list_is_unshared_by_the_same_reads_so_the_measurement_can_tell():
    items = [(i, str(i)) for i in range(N_SHARED)]
    expected = sum(len(s) for _, s in items)
    before, allowance, after = summed_pss_of_two_readers(items, expected)
    print(f"list: before {before} kB, allowance {allowance} kB, after {after} kB")
    assert after > 1.2 * before + allowance
