"""actorch.DataLoader.state_dict()/load_state_dict() as torchdata's StatefulDataLoader's: break at
batch k, save, build the loader again in a fresh process, load: the rest of the epoch is what
torch's DataLoader gives after k (Note [Loader state from Python] in
python/actorch/data/_state.py); then at another num_workers, and torch's DistributedSampler
at another world size."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import actorch
from loader_cases import processes

N, B = 50, 4

CASE = textwrap.dedent("""
    import sys
    import torch
    import actorch

    class Numbers(torch.utils.data.Dataset):
        def __len__(self):
            return %(n)d

        def __getitem__(self, i):
            return torch.tensor([float(i)]), i

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            w, k = (0, 1) if info is None else (info.id, info.num_workers)
            return iter([(torch.tensor([float(i)]), i) for i in range(w, %(n)d, k)])

    def loader(kind, workers, per_worker_rng=True):
        context = None if kind in ("fork", "default") else kind
        if workers == 0:
            context = None
        if kind == "iterable":
            return actorch.DataLoader(Stream(), batch_size=%(b)d, num_workers=workers)
        if kind == "seeded":
            return actorch.DataLoader(Numbers(), batch_size=%(b)d, shuffle=True, seed=7,
                                      num_workers=workers)
        if kind == "native":
            data = torch.utils.data.TensorDataset(torch.arange(%(n)d.0).view(-1, 1),
                                                  torch.arange(%(n)d))
            return actorch.DataLoader(data, batch_size=%(b)d, shuffle=True, num_workers=workers)
        return actorch.DataLoader(Numbers(), batch_size=%(b)d, shuffle=True, num_workers=workers,
                                  multiprocessing_context=context, per_worker_rng=per_worker_rng)

    if __name__ == "__main__":
        phase, kind, workers, k, path = sys.argv[1:6]
        per_worker_rng = len(sys.argv) < 7
        torch.manual_seed(1234)
        ld = loader(kind, int(workers), per_worker_rng)
        if phase == "save":
            it = iter(ld)
            seen = [next(it)[1].tolist() for _ in range(int(k))]
            torch.save(ld.state_dict(), path)
            print(seen)
            del it, ld  # the epoch's workers end here, not in the interpreter's finalisation
        else:
            torch.manual_seed(99)  # a fresh process's generator: the state must not need 1234
            try:
                ld.load_state_dict(torch.load(path))
            except ValueError as e:
                print("ValueError:", e)
                sys.exit(3)
            print([y.tolist() for _, y in ld])
            print([y.tolist() for _, y in ld])  # the next epoch, whole
""") % {"n": N, "b": B}


def run(tmp_path, *args):
    script = tmp_path / "case.py"
    script.write_text(CASE)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    p = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                       text=True, env=env, timeout=120)
    return p


def lines(p):
    assert p.returncode == 0, p.stdout + p.stderr
    return [eval(line) for line in p.stdout.splitlines() if line.startswith("[")]


def torch_epoch(shuffle=True):
    torch.manual_seed(1234)
    data = torch.utils.data.TensorDataset(torch.arange(N))
    return [b[0].tolist() for b in torch.utils.data.DataLoader(data, batch_size=B,
                                                                 shuffle=shuffle)]


@pytest.mark.parametrize("kind,workers", [
    ("default", 0),
    ("thread", 2),
    pytest.param("fork", 2, marks=processes),
    pytest.param("spawn", 2, marks=processes),
    ("native", 2)])
def test_the_rest_of_the_epoch_is_torchs_after_a_fresh_process_loads_the_state(
        tmp_path, kind, workers):
    expected = torch_epoch()
    path = tmp_path / "state.pt"
    (seen,) = lines(run(tmp_path, "save", kind, workers, 5, path))
    assert seen == expected[:5]
    rest, after = lines(run(tmp_path, "resume", kind, workers, 0, path))
    assert rest == expected[5:]
    assert sorted(sum(after, [])) == list(range(N)) and after != expected


@processes  # a Python dataset with workers: worker processes
def test_a_seeded_loader_and_an_iterable_dataset_resume_where_they_stood(tmp_path):
    path = tmp_path / "state.pt"
    for kind, batches in (("seeded", 13), ("iterable", 14)):  # 2 streams of 25: 7 batches each
        whole = lines(run(tmp_path, "save", kind, 2, batches, path))[0]
        (seen,) = lines(run(tmp_path, "save", kind, 2, 6, path))
        rest, after = lines(run(tmp_path, "resume", kind, 2, 0, path))
        assert seen + rest == whole, kind
        assert sorted(sum(after, [])) == list(range(N)), kind


def test_another_num_workers_resumes_where_batches_do_not_depend_on_the_worker(tmp_path):
    expected = torch_epoch()
    path = tmp_path / "state.pt"
    lines(run(tmp_path, "save", "thread", 2, 3, path))
    refused = run(tmp_path, "resume", "thread", 3, 0, path)
    assert refused.returncode == 3 and "per-worker generators" in refused.stdout
    lines(run(tmp_path, "save", "thread", 2, 3, path, "no-rng"))
    rest, _ = lines(run(tmp_path, "resume", "thread", 3, 0, path, "no-rng"))
    assert rest == expected[3:]
    lines(run(tmp_path, "save", "native", 1, 4, path))  # a C++ dataset: per batch, always
    rest, _ = lines(run(tmp_path, "resume", "native", 3, 0, path))
    assert rest == expected[4:]


@processes  # an IterableDataset with workers: worker processes
def test_an_iterable_dataset_needs_its_num_workers_to_resume_mid_epoch(tmp_path):
    path = tmp_path / "state.pt"
    lines(run(tmp_path, "save", "iterable", 2, 3, path))
    refused = run(tmp_path, "resume", "iterable", 1, 0, path)
    assert refused.returncode == 3 and "its own stream" in refused.stdout


def test_a_state_after_the_epoch_ended_resumes_at_the_next_epoch():
    data = torch.utils.data.TensorDataset(torch.arange(N))
    ld = actorch.DataLoader(data, batch_size=B, shuffle=True)
    assert len(list(ld)) == 13
    state = ld.state_dict()
    again = actorch.DataLoader(data, batch_size=B, shuffle=True)
    again.load_state_dict(state)
    assert len(list(again)) == 13


def test_bad_states_name_what_was_wrong():
    data = torch.utils.data.TensorDataset(torch.arange(N))
    ld = actorch.DataLoader(data, batch_size=B)
    with pytest.raises(ValueError, match="not a state of actorch.DataLoader"):
        ld.load_state_dict({"epoch": 3})
    other = actorch.DataLoader(data, batch_size=B + 1)
    it = iter(other)
    next(it)
    with pytest.raises(ValueError, match="batch_size=5, this one has batch_size=4"):
        ld.load_state_dict(other.state_dict())
    with pytest.raises(ValueError, match="empty list"):
        ld.load_state_dict([])


def dist_loaders(world, drop_last=False):
    data = torch.utils.data.TensorDataset(torch.arange(N))
    out = []
    for rank in range(world):
        s = torch.utils.data.DistributedSampler(data, num_replicas=world, rank=rank, seed=3,
                                                drop_last=drop_last)
        s.set_epoch(2)
        out.append(actorch.DataLoader(data, batch_size=B, sampler=s))
    return out


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2), (2, 2)])
def test_distributed_states_resume_at_another_world_size_with_every_sample_once(before, after):
    seen = []
    states = []
    for ld in dist_loaders(before):
        it = iter(ld)
        seen += sum((next(it)[0].tolist() for _ in range(2)), [])
        states.append(ld.state_dict())
    states = torch.load(_round_trip(states))
    rest = []
    lengths = set()
    for ld in dist_loaders(after):
        ld.load_state_dict(states)
        batches = [b[0].tolist() for b in ld]
        lengths.add(len(batches))
        rest += sum(batches, [])
    assert len(lengths) == 1  # equal shares: DDP's ranks take as many steps
    every = seen + rest
    assert set(every) == set(range(N))
    padding = (-N % before) + (-(N - len(seen)) % after)
    assert len(every) - N <= padding
    # a rank's own state at the same world size resumes its own share
    if before == after:
        lds = dist_loaders(after)
        lds[1].load_state_dict(states[1])
        mine = sum((b[0].tolist() for b in lds[1]), [])
        whole = sum((b[0].tolist() for b in dist_loaders(after)[1]), [])
        assert mine == whole[2 * B:]


def test_distributed_states_must_be_of_one_world():
    lds = dist_loaders(2)
    states = []
    for ld in lds:
        it = iter(ld)
        next(it)
        states.append(ld.state_dict())
    target = dist_loaders(3)[0]
    with pytest.raises(ValueError, match="pass the list of every rank's states"):
        target.load_state_dict(states[0])
    with pytest.raises(ValueError, match=r"expected the states of ranks 0..1"):
        target.load_state_dict([states[0], states[0]])
    plain = actorch.DataLoader(torch.utils.data.TensorDataset(torch.arange(N)), batch_size=B)
    with pytest.raises(ValueError, match="torch's DistributedSampler"):
        plain.load_state_dict(states)


def _round_trip(obj):
    import io
    f = io.BytesIO()
    torch.save(obj, f)
    f.seek(0)
    return f


def test_the_epochs_after_a_resumed_one_are_the_first_runs_with_the_loaders_own_generator():
    data = torch.utils.data.TensorDataset(torch.arange(N))

    def make(seed):
        return actorch.DataLoader(data, batch_size=B, shuffle=True,
                                  generator=torch.Generator().manual_seed(seed))

    first = make(5)
    whole = [[b[0].tolist() for b in first] for _ in range(3)]
    ld = make(5)
    it = iter(ld)
    head = [next(it)[0].tolist() for _ in range(3)]
    state = ld.state_dict()
    del it
    again = make(77)  # another generator: the state's must replace it
    again.load_state_dict(state)
    resumed = [[b[0].tolist() for b in again] for _ in range(3)]
    assert head + resumed[0] == whole[0]
    assert resumed[1:] == whole[1:]
    between = make(77)
    between.load_state_dict(_after_epochs(make(5), 1))
    assert [b[0].tolist() for b in between] == whole[1]


def _after_epochs(ld, k):
    for _ in range(k):
        list(ld)
    return ld.state_dict()


def test_a_datasets_own_state_dict_travels_with_the_loaders():
    class Counted(torch.utils.data.Dataset):
        def __init__(self):
            self.calls = 0

        def __len__(self):
            return N

        def __getitem__(self, i):
            return i

        def state_dict(self):
            return {"calls": 41}

        def load_state_dict(self, s):
            self.calls = s["calls"]

    ld = actorch.DataLoader(Counted(), batch_size=B)
    state = torch.load(_round_trip(ld.state_dict()))
    target = Counted()
    actorch.DataLoader(target, batch_size=B).load_state_dict(state)
    assert target.calls == 41


RANKS = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    import actorch

    phase, path, out = sys.argv[1:4]
    dist.init_process_group("actorch")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = torch.utils.data.TensorDataset(torch.arange(%(n)d))
    sampler = torch.utils.data.DistributedSampler(data, seed=3)  # the default group's world
    sampler.set_epoch(1)
    ld = actorch.DataLoader(data, batch_size=%(b)d, sampler=sampler)
    seen = []
    if phase == "save":
        it = iter(ld)
        for _ in range(3):
            seen += next(it)[0].tolist()
        states = [None] * world
        dist.all_gather_object(states, ld.state_dict())  # every rank's, gathered
        if rank == 0:
            torch.save(states, path)
        del it
    else:
        ld.load_state_dict(torch.load(path))
        steps = 0
        for batch in ld:
            seen += batch[0].tolist()
            steps += 1
        counts = [None] * world
        dist.all_gather_object(counts, steps)
        assert len(set(counts)) == 1, counts  # as many steps on every rank, as DDP needs
    with open(f"{out}.{rank}", "w") as f:
        f.write(repr(seen))
    dist.destroy_process_group()
""") % {"n": N, "b": B}


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2)])
def test_ranks_under_actorch_launch_resume_at_another_world_size(tmp_path, before, after):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    state = tmp_path / "states.pt"
    seen = []
    for phase, world in (("save", before), ("resume", after)):
        out = tmp_path / phase
        p = subprocess.run([os.environ["ACTORCH_CLI"], "launch", "--nproc-per-node", str(world),
                            sys.executable, str(script), phase, str(state), str(out)],
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        for rank in range(world):
            seen += eval((tmp_path / f"{phase}.{rank}").read_text())
    assert set(seen) == set(range(N))
    assert len(seen) - N <= (-N % before) + (-(N - 3 * B * before) % after)
