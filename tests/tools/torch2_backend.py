"""The torch.distributed backend "actorch" under a torch 2.x, on the GPU machine (issue 41).

scripts/gpu-check.sh builds actorch's extension (python/src/torch_backend.cpp) there against
that machine's torch, with CUDA tensors going to actorch's NCCL group, and runs this:

    torch2_backend.py EXTENSION_DIR OUT

Only the extension is built there, not the rest of actorch's Python package (its loader is built
against Debian's Python), so this registers the backend itself, as actorch.distributed does under
torch 1.13, passing the devices the extension takes. Then, each next to the same program over
torch's own backend, parameters compared:
  - DDP's demo_basic as the seed writes it (the model on cuda:rank, device_ids=[rank], labels
    moved with .to(rank)), on every GPU there is (one here: NCCL takes one rank per GPU), over
    "actorch" against "nccl"; DDP with find_unused_parameters, no_sync and the fp16 compression
    hook there too; and collectives on CUDA tensors whose results are known (all_reduce
    of a tensor a kernel on a side stream wrote, async with wait(), broadcast, all_gather_into_
    tensor, reduce_scatter_tensor);
  - demo_basic on CPU tensors at world 2, "actorch" against "gloo".
One line per check, `PASS name ...` or `FAIL name ...`; the exit status is the number of FAILs.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from torch_programs import Branchy, ToyModel  # noqa: E402  the seeds' models, as the suite has them


def register(extension_dir):
    """Registers "actorch" from the extension built in `extension_dir` (once per process)."""
    if hasattr(dist.Backend, "ACTORCH"):
        return
    sys.path.insert(0, extension_dir)
    import _torch_backend

    def creator(store, rank, size, timeout):
        return _torch_backend.ProcessGroupActorch(store, rank, size, timeout)
    dist.Backend.register_backend("actorch", creator, devices=list(_torch_backend.devices))


def demo_basic(rank, device):
    """The seed's demo_basic after setup(); `device` is rank (the seed's) or "cpu"."""
    torch.manual_seed(rank)  # each rank its own data, as the seed's torch.randn gives
    model = ToyModel().to(device)
    ddp_model = DDP(model, device_ids=[rank] if device != "cpu" else None)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5).to(device)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    return [p.detach().cpu() for p in model.parameters()]


def ddp_variants(rank):
    """DDP with find_unused_parameters, no_sync and the fp16 compression hook (whose Future's
    then() runs on CUDA tensors) on cuda:rank, four steps each."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    results = []
    for variant in ("find_unused", "no_sync", "fp16_hook"):
        torch.manual_seed(0)
        model = Branchy().to(rank)
        ddp = DDP(model, device_ids=[rank], find_unused_parameters=variant == "find_unused")
        if variant == "fp16_hook":
            ddp.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
        optimizer = optim.SGD(ddp.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(100 + rank)
        for step in range(4):
            x = torch.randn(8, 10, generator=gen).to(rank)
            optimizer.zero_grad()
            if variant == "no_sync" and step % 2 == 0:
                with ddp.no_sync():  # accumulate locally, synchronise on the next step
                    ddp(x, True).sum().backward()
                x = torch.randn(8, 10, generator=gen).to(rank)
            ddp(x, variant != "find_unused" or step % 2 == 1).sum().backward()
            optimizer.step()
        results += [p.detach().cpu() for p in model.parameters()]
    return results


def cuda_collectives(rank, world):
    """Collectives on CUDA tensors whose results are known; returns what differed."""
    wrong = []
    dev = torch.device("cuda", rank)
    side = torch.cuda.Stream(dev)
    with torch.cuda.stream(side):  # written on a side stream, reduced on the current one
        x = torch.full((1 << 20,), float(rank + 1), device=dev)
    torch.cuda.current_stream(dev).wait_stream(side)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    if not torch.equal(x, torch.full_like(x, world * (world + 1) / 2)):
        wrong.append("all_reduce")
    b = torch.arange(1000, dtype=torch.float32, device=dev) * (rank + 1)
    dist.broadcast(b, src=0)
    if not torch.equal(b, torch.arange(1000, dtype=torch.float32, device=dev)):
        wrong.append("broadcast")
    g = torch.empty(world * 3, device=dev)
    dist.all_gather_into_tensor(g, torch.full((3,), float(rank), device=dev))
    if not torch.equal(g, torch.arange(world, device=dev).repeat_interleave(3).float()):
        wrong.append("all_gather_into_tensor")
    r = torch.empty(4, device=dev)
    dist.reduce_scatter_tensor(r, torch.ones(world * 4, device=dev))
    if not torch.equal(r, torch.full_like(r, float(world))):
        wrong.append("reduce_scatter_tensor")
    return wrong


def rank_main(rank, world, backend, device, extension_dir, port, out):
    register(extension_dir)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world)
    result = {"backend": dist.get_backend(), "params": demo_basic(rank, rank if device == "cuda"
                                                                  else "cpu")}
    if device == "cuda":
        result["wrong"] = cuda_collectives(rank, world)
        result["variants"] = ddp_variants(rank)
    torch.save(result, os.path.join(out, f"{backend}-{device}.{rank}.pt"))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world, backend, device, extension_dir, out):
    mp.spawn(rank_main, args=(world, backend, device, extension_dir, free_port(), out),
             nprocs=world, join=True)
    return [torch.load(os.path.join(out, f"{backend}-{device}.{r}.pt")) for r in range(world)]


def compare(name, ours, theirs, peer, key="params"):
    """One verdict: every rank's parameters over actorch against the peer backend's."""
    diff = max((a - b).abs().max().item()
               for o, t in zip(ours, theirs) for a, b in zip(o[key], t[key]))
    wrong = sorted({w for o in ours for w in o.get("wrong", [])})
    backend = {o["backend"] for o in ours}
    ok = diff <= 1e-6 and not wrong and backend == {"actorch"}
    print(f"{'PASS' if ok else 'FAIL'} {name} world={len(ours)} max_abs_diff_vs_{peer}={diff:.3g}"
          f" backend={','.join(sorted(backend))}"
          + (f" wrong_collectives={','.join(wrong)}" if wrong else ""), flush=True)
    return 0 if ok else 1


def main():
    extension_dir, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(out, exist_ok=True)
    register(extension_dir)
    import _torch_backend
    print(f"torch {torch.__version__}, extension built with {_torch_backend.built_with_torch}, "
          f"devices {list(_torch_backend.devices)}", flush=True)
    failed = 0
    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("FAIL demo_basic cuda: no GPU", flush=True)
        failed += 1
    else:
        ours = run(gpus, "actorch", "cuda", extension_dir, out)
        theirs = run(gpus, "nccl", "cuda", extension_dir, out)
        failed += compare("demo_basic cuda (seed as written)", ours, theirs, "nccl")
        failed += compare("DDP find_unused/no_sync/fp16 hook cuda", ours, theirs, "nccl",
                          "variants")
    failed += compare("demo_basic cpu under torch 2.x", run(2, "actorch", "cpu", extension_dir, out),
                      run(2, "gloo", "cpu", extension_dir, out), "gloo")
    sys.exit(failed)


if __name__ == "__main__":
    main()
