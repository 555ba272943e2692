"""torch.distributed's backend "actorch" (python/src/torch_backend.cpp): the seeds' programs
(torch_programs.py) run with backend="actorch" as the seeds start them (mp.spawn) and under the
real torchrun, ending with the same tensors as over gloo; every op of torch's ProcessGroup; a
killed rank and mismatched shapes are errors, not hangs; a torch of another version is refused
with a plain message."""
import os
import subprocess
import sys
import time

import pytest
import torch

import actorch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from job_helpers import free_port  # noqa: E402
PROGRAMS = os.path.join(HERE, "torch_programs.py")
TORCHRUN = os.path.join(HERE, "..", "tools", "torchrun.py")
DIGITS = os.path.join(HERE, "..", "..", "examples", "data", "digits.csv.gz")
ENV = dict(os.environ, OMP_NUM_THREADS="1",
           ACTORCH_DIGITS=os.environ.get("ACTORCH_DIGITS", os.path.abspath(DIGITS)))


def run(cmd, timeout=180):
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def spawned(program, backend, out, world=2):
    run([sys.executable, PROGRAMS, program, backend, str(out), str(free_port()), str(world)])


def torchrun(program, backend, out, world=2):
    run([sys.executable, TORCHRUN, "--nproc_per_node", str(world), "--master_port",
         str(free_port()), PROGRAMS, program, backend, str(out)])


def results(out, program, world):
    return [torch.load(os.path.join(out, f"{program}.{r}.pt")) for r in range(world)]


def same(a, b, where):
    if a is None or b is None:
        assert a is b, where
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=where)
    else:
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")


@pytest.mark.parametrize("program,world", [("p2p", 2), ("group", 3), ("train", 2),
                                           ("demo_basic", 2), ("demo_checkpoint", 2),
                                           ("ddp_variants", 2), ("ddp_large", 2)])
def test_a_seed_program_ends_as_over_gloo_started_by_mp_spawn(tmp_path, program, world):
    for backend in ("gloo", "actorch"):
        os.makedirs(tmp_path / backend)
        spawned(program, backend, tmp_path / backend, world)
    want, got = (results(tmp_path / b, program, world) for b in ("gloo", "actorch"))
    same(got, want, program)
    if program in ("demo_basic", "demo_checkpoint", "train", "ddp_variants", "ddp_large"):
        same(got[1], got[0], f"{program}: the ranks' parameters agree")


def test_ddps_large_buckets_are_the_groups_shared_blocks_unless_turned_off(tmp_path):
    """Over actorch, DDP's buckets past the small all-reduce's size are the group's shared blocks
    (Note [DDP's buckets in shared memory]), as written, as bucket views and under Join (whose
    joined rank all-reduces private zeros against the others' blocks), with the same bits as in
    private memory; ACTORCH_DDP_SHARED_BUCKETS=0 keeps them private."""
    for name, value in (("shared", "1"), ("private", "0")):
        os.makedirs(tmp_path / name)
        ENV["ACTORCH_DDP_SHARED_BUCKETS"] = value
        try:
            spawned("ddp_large", "actorch", tmp_path / name)
        finally:
            del ENV["ACTORCH_DDP_SHARED_BUCKETS"]
    blocks = {name: [t.tolist() for t in results(tmp_path / name, "ddp_large_blocks", 2)]
              for name in ("shared", "private")}
    assert all(n >= 1 for rank in blocks["shared"] for n in rank), blocks
    assert blocks["private"] == [[0, 0, 0], [0, 0, 0]], blocks
    got, want = (results(tmp_path / name, "ddp_large", 2) for name in ("shared", "private"))
    for rank in range(2):
        for variant, (a, b) in enumerate(zip(got[rank], want[rank])):
            for p, q in zip(a, b):
                assert torch.equal(p, q), f"rank {rank}, variant {variant}"


# torchrun itself takes ~10 s to start and stop its agent: once, outside the ASan preset, suffices.
@pytest.mark.parametrize("launcher", [
    pytest.param("torchrun", marks=pytest.mark.skipif(
        os.environ.get("ACTORCH_SANITIZERS") == "address", reason="run in the other presets")),
    "actorch launch"])
@pytest.mark.parametrize("program", ["p2p", "demo_basic"])
def test_a_seed_program_runs_under_the_real_torchrun_and_actorch_launch(tmp_path, program,
                                                                       launcher):
    for backend in ("gloo", "actorch"):
        os.makedirs(tmp_path / backend)
        if launcher == "torchrun":
            torchrun(program, backend, tmp_path / backend)
        else:  # a job secret in the ranks' environment: the pairs prove it (docs/reliability.md)
            run([os.environ["ACTORCH_CLI"], "launch", "--nproc-per-node", "2", sys.executable,
                 PROGRAMS, program, backend, str(tmp_path / backend)])
    same(results(tmp_path / "actorch", program, 2), results(tmp_path / "gloo", program, 2),
         program)


OPS = r"""
import os, sys, torch, torch.distributed as dist
import actorch
dist.init_process_group("actorch", init_method=sys.argv[1], rank=int(sys.argv[2]), world_size=2)
r, n = dist.get_rank(), 2
gloo = sys.argv[4] == "gloo"  # 1.13's gloo: no AVG, reduce_scatter, _allgather_base, all_to_all
out = {}
for op in ("SUM", "PRODUCT", "MIN", "MAX") + (() if gloo else ("AVG",)):
    t = torch.tensor([1.0, 2.0]) * (r + 2)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op)); out[f"all_reduce {op}"] = t
for op in ("BAND", "BOR", "BXOR"):
    t = torch.tensor([6, 3], dtype=torch.int32) + r
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op)); out[f"all_reduce {op}"] = t
ts = [torch.ones(2) * (r + 1), torch.ones(3) * (r + 1)]
dist.all_reduce_coalesced(ts); out["coalesced"] = ts
outs = [[torch.zeros(2, 2), torch.zeros(0), torch.zeros(3, dtype=torch.float32)] for _ in range(n)]
dist.all_gather_coalesced(outs, [torch.full((2, 2), r + 1.0), torch.zeros(0), torch.arange(3.0) * r])
out["all_gather_coalesced"] = outs
t = torch.arange(3.0) * (r + 1); dist.reduce(t, dst=1); out["reduce"] = t
t = torch.arange(3.0) + r; dist.broadcast(t, src=1); out["broadcast"] = t
outs = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
dist.all_gather(outs, torch.tensor([r, 10 * r])); out["all_gather"] = outs
if not gloo:
    base = torch.zeros(2 * n); dist._all_gather_base(base, torch.ones(2) * r); out["_allgather_base"] = base
g = [torch.zeros(2) for _ in range(n)] if r == 0 else None
dist.gather(torch.ones(2) * (r + 5), g, dst=0); out["gather"] = g
s = torch.zeros(2); dist.scatter(s, [torch.ones(2) * i for i in range(n)] if r == 0 else None, src=0)
out["scatter"] = s
if not gloo:
    o = torch.zeros(3)
    dist.reduce_scatter(o, [torch.ones(3) * (r + i) for i in range(n)]); out["reduce_scatter"] = o
    o = torch.zeros(2, 2)  # the parts back to back in one tensor (_reduce_scatter_base)
    dist.reduce_scatter_tensor(o, torch.arange(8.0).reshape(4, 2) * (r + 1))
    out["reduce_scatter_tensor"] = o
a = torch.zeros(2 * n); dist.all_to_all_single(a, torch.arange(2.0 * n) + 10 * r); out["all_to_all_single"] = a
u = torch.zeros(3, 2)  # uneven: rank r sends 1 + r rows to rank 0 and 2 - r to rank 1
dist.all_to_all_single(u, torch.arange(6.0).reshape(3, 2) + 10 * r,
                       output_split_sizes=[1, 2] if r == 0 else [2, 1],
                       input_split_sizes=[1 + r, 2 - r])
out["all_to_all_single uneven"] = u
if not gloo:
    lst = [torch.zeros(2) for _ in range(n)]
    dist.all_to_all(lst, [torch.ones(2) * (10 * r + i) for i in range(n)]); out["all_to_all"] = lst
# *_multigpu with two CPU tensors per rank standing for two devices (gloo takes them too).
ml = [torch.ones(2) * (r + 1), torch.ones(2) * (r + 3)]
dist.all_reduce_multigpu(ml); out["all_reduce_multigpu"] = ml
bl = [torch.ones(2) * (r + 1), torch.ones(2) * (r + 7)]
dist.broadcast_multigpu(bl, src=1, src_tensor=1); out["broadcast_multigpu"] = bl
go = [[torch.zeros(2) for _ in range(2 * n)] for _ in range(2)]
dist.all_gather_multigpu(go, [torch.ones(2) * r, torch.ones(2) * (r + 10)])
out["all_gather_multigpu"] = go
if not gloo:
    rl = [torch.ones(2) * (r + 1), torch.ones(2) * (r + 3)]
    dist.reduce_multigpu(rl, dst=1, dst_tensor=1); out["reduce_multigpu"] = rl
    so = [torch.zeros(2), torch.zeros(2)]
    dist.reduce_scatter_multigpu(so, [[torch.ones(2) * (100 * r + 10 * i + p) for p in range(2 * n)]
                                      for i in range(2)])
    out["reduce_scatter_multigpu"] = so
dist.barrier()
if r == 0:
    dist.send(torch.tensor([7.0]), dst=1)
else:
    x = torch.zeros(1); dist.recv(x); out["recv_anysource"] = x
w = dist.all_reduce(torch.ones(2), async_op=True)
fut = w.get_future(); fut.wait(); out["future"] = fut.value()
torch.save(out, sys.argv[3] + f".{r}.pt")
dist.destroy_process_group()
"""


def over_gloo_and_actorch(tmp_path, name, script, timeout):
    """Runs `script` (argv: init method, rank, output prefix, backend) as 2 ranks over each
    backend; what each rank saved, by backend. A rank that has not ended within `timeout`
    fails the test (and is killed), instead of hanging it."""
    (tmp_path / name).write_text(script)
    got = {}
    for backend in ("gloo", "actorch"):
        init = f"file://{tmp_path}/{backend}.rendezvous"
        procs = [subprocess.Popen([sys.executable, str(tmp_path / name), init, str(r),
                                   str(tmp_path / backend), backend], env=ENV,
                                  stderr=subprocess.PIPE, text=True) for r in range(2)]
        try:
            for p in procs:
                _, err = p.communicate(timeout=timeout)
                assert p.returncode == 0, err[-3000:]
        finally:
            for p in procs:
                p.kill()
        got[backend] = [torch.load(f"{tmp_path / backend}.{r}.pt") for r in range(2)]
    return got


def test_every_op_of_torchs_process_group_as_gloo_computes_it(tmp_path):
    got = over_gloo_and_actorch(tmp_path, "ops.py", OPS.replace('"actorch"', "sys.argv[4]"), 120)
    for r in range(2):
        want = got["gloo"][r]
        # What torch 1.13's gloo lacks, against arithmetic.
        assert set(want) | {"reduce_scatter", "reduce_scatter_tensor", "all_reduce AVG",
                            "_allgather_base", "all_to_all", "reduce_multigpu",
                            "reduce_scatter_multigpu"} == set(got["actorch"][r])
        for key, value in got["actorch"][r].items():
            # reduce's tensor off the root is undefined in torch (gloo leaves a partial sum)
            if key in want and not (key == "reduce" and r != 1):
                same(value, want[key], f"rank {r} {key}")
        assert got["actorch"][r]["reduce_scatter"].tolist() == [1.0 * (0 + r) + (1 + r)] * 3
        # Rank r gets rows 2r and 2r + 1 of arange(8).reshape(4, 2), times 1 + 2.
        assert got["actorch"][r]["reduce_scatter_tensor"].tolist() == (
            (torch.arange(8.0).reshape(4, 2)[2 * r:2 * r + 2] * 3).tolist())
        assert got["actorch"][r]["all_reduce AVG"].tolist() == [2.5, 5.0]
        # reduce_multigpu: 1 + 3 + 2 + 4 into rank 1's tensor 1 only.
        assert [t.tolist() for t in got["actorch"][r]["reduce_multigpu"]] == (
            [[1.0 + r] * 2, [3.0 + r] * 2] if r == 0 else [[2.0] * 2, [10.0] * 2])
        # Output j of rank r: sum over ranks q and lists i of 100 q + 10 i + (2 r + j).
        assert [t.tolist() for t in got["actorch"][r]["reduce_scatter_multigpu"]] == [
            [200.0 + 20 + 4 * (2 * r + j)] * 2 for j in range(2)]
        assert got["actorch"][r]["_allgather_base"].tolist() == [0.0, 0.0, 1.0, 1.0]
        assert [t.tolist() for t in got["actorch"][r]["all_to_all"]] == [[0.0 + r] * 2,
                                                                         [10.0 + r] * 2]


SAMPLER = r"""
import sys, torch, torch.distributed as dist, actorch
dist.init_process_group(sys.argv[4], init_method=sys.argv[1], rank=int(sys.argv[2]), world_size=2)
ds = list(range(11))
out = {"actorch": list(actorch.data.DistributedSampler(ds, shuffle=False)),
       "torch": list(torch.utils.data.DistributedSampler(ds, shuffle=False)),
       "shuffled": list(actorch.data.DistributedSampler(ds, seed=3)),
       "rank given": list(actorch.data.DistributedSampler(ds, rank=0, shuffle=False))}
torch.save(out, sys.argv[3] + f".{dist.get_rank()}.pt")
dist.destroy_process_group()
"""


def test_actorchs_distributed_sampler_takes_the_default_group_of_any_backend(tmp_path):
    # It asked only actorch's C++ group, so inside init_process_group("actorch") (or "gloo") it
    # failed as if no group existed; torch's takes whichever group torch.distributed has.
    got = over_gloo_and_actorch(tmp_path, "sampler.py", SAMPLER, 60)
    for backend in ("gloo", "actorch"):
        ranks = got[backend]
        for r in range(2):
            padded = list(range(11)) + [0]  # DistributedSampler's padding repeats the start
            assert ranks[r]["actorch"] == ranks[r]["torch"] == padded[r::2], backend
            assert ranks[r]["rank given"] == ranks[0]["torch"]
        both = ranks[0]["shuffled"] + ranks[1]["shuffled"]
        assert len(both) == 12 and set(both) == set(range(11))


NESTED = r"""
import datetime, sys, torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
import actorch
dist.init_process_group(sys.argv[4], init_method=sys.argv[1], rank=int(sys.argv[2]),
                        world_size=2, timeout=datetime.timedelta(seconds=20))
torch.set_num_threads(1)
r = dist.get_rank()
# A Future's callback that runs a collective of the same group and waits for it.
def then(fut):
    u = torch.ones(2) * 10 * (r + 1)
    dist.all_reduce(u)
    return fut.value()[0] + u
chained = dist.all_reduce(torch.ones(2) * (r + 1), async_op=True).get_future().then(then)
out = {"nested": chained.wait()}
# torch's PowerSGD hook, whose callbacks do the same (all-reduces of P, then of Q).
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
ddp = DDP(model)
state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                               start_powerSGD_iter=2)
ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(10 + r)
for _ in range(5):
    opt.zero_grad()
    ddp(torch.randn(8, 16, generator=g)).sum().backward()
    opt.step()
out["powersgd"] = [p.detach().clone() for p in model.parameters()]
# A sparse all_reduce (rank r holds r + 1 entries), and DDP over nn.Embedding(sparse=True),
# whose gradients are sparse.
sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2][:r + 1]]), torch.ones(r + 1, 2) * (r + 1),
                                 (4, 2))
dist.all_reduce(sparse)
out["sparse"] = sparse.to_dense()
# Views that are not contiguous: a transpose and a column.
m = torch.arange(6.0).reshape(2, 3) * (r + 1)
dist.all_reduce(m.t())
dist.all_reduce(m[:, 1])
out["noncontiguous"] = m
# Views as the other ops' tensors, results and inputs: transposes and columns.
b = (torch.arange(6.0).reshape(2, 3) * (r + 1)).t()
dist.broadcast(b, 1)
cols = torch.zeros(3, 2)
dist.all_gather([cols[:, 0], cols[:, 1]], (torch.arange(6.0) * (r + 1))[::2])
v = (torch.arange(6.0).reshape(2, 3) * (r + 1)).t()
dist.reduce(v, 0)
s = torch.zeros(3, 2)
dist.scatter(s[:, 1], [torch.full((3,), 5.0), torch.full((3,), 7.0)] if r == 0 else None, 0)
out["views"] = {"broadcast": b, "all_gather": cols, "reduce": v, "scatter": s}
if sys.argv[4] == "actorch":  # torch 1.13's gloo has no all_to_all and refuses views to send
    z = torch.zeros(3, 2)
    if r == 0:
        dist.send(torch.arange(6.0).reshape(3, 2).t()[0], 1)
    else:
        dist.recv(z[:, 1], 0)
    out["views"]["recv"] = z
    a2a_in, a2a_out = torch.arange(6.0).reshape(3, 2) + 10 * r, torch.zeros(3, 2)
    dist.all_to_all([a2a_out[:, 0], a2a_out[:, 1]], [a2a_in[:, 0], a2a_in[:, 1]])
    out["views"]["all_to_all"] = a2a_out
try:
    dist.broadcast(sparse, 0)
except RuntimeError as e:
    out["sparse broadcast"] = str(e)
torch.manual_seed(0)
embedding = nn.Embedding(10, 3, sparse=True)
ddp = DDP(embedding)
opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
for step in range(3):
    opt.zero_grad()
    ddp(torch.tensor([r, step, 7])).sum().backward()
    opt.step()
out["embedding"] = embedding.weight.detach().clone()
torch.save(out, sys.argv[3] + f".{r}.pt")
dist.destroy_process_group()
"""


def test_a_futures_callback_may_run_collectives_and_wait_as_powersgd_does_sparse_and_views(
        tmp_path):
    got = over_gloo_and_actorch(tmp_path, "nested.py", NESTED, 90)
    for r in range(2):
        assert got["actorch"][r]["nested"].tolist() == [33.0, 33.0]  # 1 + 2, then 10 + 20
        same(got["actorch"][r]["powersgd"], got["gloo"][r]["powersgd"], f"rank {r} PowerSGD")
        assert got["actorch"][r]["sparse"].tolist() == [[3.0, 3.0], [0.0, 0.0], [2.0, 2.0],
                                                        [0.0, 0.0]]
        same(got["actorch"][r]["embedding"], got["gloo"][r]["embedding"], f"rank {r} embedding")
        # 1 + 2 times arange; the middle column, equal on both ranks, reduced again: doubled.
        assert got["actorch"][r]["noncontiguous"].tolist() == [[0.0, 6.0, 6.0], [9.0, 24.0, 15.0]]
        # Not against gloo: torch 1.13's gloo sums a column's first elements of memory, not the
        # column ([[0, 6, 12], [9, 12, 15]] here).
        views = {k: t.tolist() for k, t in got["actorch"][r]["views"].items()}
        assert views["broadcast"] == [[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]
        assert views["all_gather"] == [[0.0, 0.0], [2.0, 4.0], [4.0, 8.0]]
        assert views["recv"] == ([[0.0] * 2] * 3 if r == 0 else [[0.0, 0.0], [0.0, 2.0],
                                                                  [0.0, 4.0]])
        if r == 0:  # reduce's tensor off the root is undefined
            assert views["reduce"] == [[0.0, 9.0], [3.0, 12.0], [6.0, 15.0]]
        assert views["scatter"] == [[0.0, 5.0 + 2 * r]] * 3
        assert views["all_to_all"] == [[r, r + 10.0], [2.0 + r, 12.0 + r], [4.0 + r, 14.0 + r]]
        assert "takes dense tensors (got a Sparse one" in got["actorch"][r]["sparse broadcast"]
    same(got["actorch"][1]["powersgd"], got["actorch"][0]["powersgd"], "the ranks agree")


KILLED = r"""
import datetime, os, signal, sys, torch, torch.distributed as dist
import actorch
dist.init_process_group("actorch", init_method=sys.argv[1], rank=int(sys.argv[2]),
                        world_size=2, timeout=datetime.timedelta(seconds=6))
t = torch.ones(4)
dist.all_reduce(t)
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[3] == "shapes":
    t = torch.ones(4 + dist.get_rank())
try:
    dist.all_reduce(t)
except RuntimeError as e:
    print("ERROR:", e, flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("case", ["killed", "shapes"])
def test_a_killed_rank_or_mismatched_shapes_fail_the_others_naming_them(tmp_path, case):
    script = KILLED if case == "killed" else KILLED.replace(
        "if dist.get_rank() == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\n", "")
    (tmp_path / "k.py").write_text(script)
    init = f"file://{tmp_path}/rendezvous"
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "k.py"), init, str(r), case],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert time.monotonic() - start < 6 * 1.5 + 10
    out0 = outs[0][0]
    assert procs[0].returncode == 3, (outs[0][0][-2000:], outs[0][1][-4000:])
    if case == "killed":
        assert "all_reduce failed on rank 0 of group [0, 1]" in out0 and "peers [1]" in out0, out0
    else:
        assert procs[1].returncode == 3, (outs[1][0][-2000:], outs[1][1][-4000:])
        assert "rank 0" in out0 and "rank 1" in out0 and "[4]" in out0 and "[5]" in out0, out0


MONITORED = r"""
import datetime, sys, time, torch, torch.distributed as dist
import actorch
dist.init_process_group(sys.argv[4], init_method=sys.argv[1], rank=int(sys.argv[2]),
                        world_size=2, timeout=datetime.timedelta(seconds=20))
out = {}
dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))
out["all arrived"] = True
if dist.get_rank() == 0:  # rank 1 never comes to the second one
    start = time.monotonic()
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=1), wait_all_ranks=True)
    except RuntimeError as e:
        out["error"] = str(e)
    out["waited"] = time.monotonic() - start
else:
    time.sleep(4)  # alive while rank 0 waits (a closed peer is another error)
torch.save(out, sys.argv[3] + f".{dist.get_rank()}.pt")
"""


def test_monitored_barrier_passes_and_names_the_rank_that_did_not_come_as_gloos(tmp_path):
    # torch 1.13 refuses it for any backend but gloo unless import actorch lets it through.
    got = over_gloo_and_actorch(tmp_path, "monitored.py", MONITORED, 60)
    for backend, ranks in got.items():
        assert all(r["all arrived"] for r in ranks), backend
        zero = ranks[0]
        assert "error" in zero, backend
        assert 0.9 < zero["waited"] < 3.5, (backend, zero["waited"])
    assert "Ranks 1 failed to pass monitoredBarrier in 1000 ms" in got["gloo"][0]["error"]
    # torch's words first (Note [Monitored barrier]), actorch's detail after them.
    assert got["actorch"][0]["error"].startswith(
        "[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 1000 ms")
    assert "ranks [1] of group [0, 1] did not arrive within 1000 ms" in got["actorch"][0]["error"]


def test_a_torch_of_another_version_is_refused_plainly():
    with pytest.raises(RuntimeError, match="built against torch 0.0.1, but this Python runs torch "):
        actorch.distributed.check_torch_version("0.0.1", torch.__version__)
    # What a user meets: creating the group says so (the recorded version faked).
    script = r"""
import sys, types, torch.distributed as dist
sys.modules["actorch._build_info"] = types.SimpleNamespace(TORCH_VERSION="0.0.1")
import actorch
try:
    dist.init_process_group("actorch", init_method=sys.argv[1], rank=0, world_size=1)
except RuntimeError as e:
    print("REFUSED:", e)
"""
    out = subprocess.run([sys.executable, "-c", script, f"tcp://127.0.0.1:{free_port()}"],
                         env=ENV, capture_output=True, text=True, timeout=60)
    assert "REFUSED: actorch's torch.distributed backend was built against torch 0.0.1" in \
        out.stdout, out.stdout + out.stderr
