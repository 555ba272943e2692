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
  - two ranks on one GPU (NCCL refuses them, so actorch's group goes through host memory there,
    as torch's gloo does: Note [Ranks sharing a GPU]), "actorch" against "gloo": demo_basic,
    SyncBatchNorm (CUDA tensors only) under DDP, and the collectives of known result;
  - demo_basic on CPU tensors at world 2, "actorch" against "gloo".
One line per check, `PASS name ...` or `FAIL name ...`; the exit status is the number of FAILs.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch_programs  # noqa: E402  the seeds' programs, as the suite runs them


def register(extension_dir):
    """Registers "actorch" from the extension built in `extension_dir` (once per process)."""
    if hasattr(dist.Backend, "ACTORCH"):
        return
    sys.path.insert(0, extension_dir)
    import _torch_backend

    def creator(store, rank, size, timeout):
        return _torch_backend.ProcessGroupActorch(store, rank, size, timeout)
    dist.Backend.register_backend("actorch", creator, devices=list(_torch_backend.devices))


def cuda_collectives(dev, world):
    """Collectives on CUDA tensors of `dev` whose results are known; returns what differed."""
    wrong = []
    rank = dist.get_rank()
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
    """One rank: the seed's programs (their results in OUT/<program>.<rank>.pt), and on CUDA
    the collectives of known result; `checks` says which backend ran and what was wrong.
    `device`: "cpu", "cuda" (rank r on cuda:r) or "cuda-shared" (every rank on cuda:0)."""
    register(extension_dir)
    torch_programs.OUT = out
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world)
    gpu = {"cpu": "cpu", "cuda": rank, "cuda-shared": 0}[device]
    torch_programs.demo_basic(rank, world, gpu)
    wrong = []
    if device == "cuda":
        torch_programs.ddp_variants(rank, world, gpu)
    if device == "cuda-shared":
        torch_programs.sync_batch_norm(rank, world, gpu)
    if device != "cpu" and backend != "gloo":  # gloo has no reduce_scatter_tensor
        wrong = cuda_collectives(torch.device("cuda", gpu), world)
    torch_programs.save("checks", {"backend": dist.get_backend(), "wrong": wrong})
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world, backend, device, extension_dir, out):
    """Every rank's results, by program, of one run in its own folder of `out`."""
    folder = os.path.join(out, f"{backend}-{device}")
    os.makedirs(folder, exist_ok=True)
    mp.spawn(rank_main, args=(world, backend, device, extension_dir, free_port(), folder),
             nprocs=world, join=True)
    return [{f.split(".")[0]: torch.load(os.path.join(folder, f)) for f in os.listdir(folder)
             if f.endswith(f".{r}.pt")} for r in range(world)]


def flat(tensors):
    """The tensors of a program's result (ddp_variants': a list per variant), in order."""
    return [t for x in tensors for t in (flat(x) if isinstance(x, list) else [x])]


def compare(name, ours, theirs, peer, program):
    """One verdict: every rank's parameters after `program` over actorch against the peer's."""
    diff = max((a - b).abs().max().item()
               for o, t in zip(ours, theirs) for a, b in zip(flat(o[program]), flat(t[program])))
    wrong = sorted({w for o in ours for w in o["checks"]["wrong"]})
    backend = {o["checks"]["backend"] for o in ours}
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
        failed += compare("demo_basic cuda (seed as written)", ours, theirs, "nccl", "demo_basic")
        failed += compare("DDP find_unused/no_sync/fp16 hook cuda", ours, theirs, "nccl",
                          "ddp_variants")
    if gpus > 0:
        ours = run(2, "actorch", "cuda-shared", extension_dir, out)
        theirs = run(2, "gloo", "cuda-shared", extension_dir, out)
        failed += compare("demo_basic, 2 ranks on cuda:0", ours, theirs, "gloo", "demo_basic")
        failed += compare("SyncBatchNorm DDP, 2 ranks on cuda:0", ours, theirs, "gloo",
                          "sync_batch_norm")
    failed += compare("demo_basic cpu under torch 2.x", run(2, "actorch", "cpu", extension_dir, out),
                      run(2, "gloo", "cpu", extension_dir, out), "gloo", "demo_basic")
    sys.exit(failed)


if __name__ == "__main__":
    main()
