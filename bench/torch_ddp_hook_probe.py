"""Where torch DDP's step goes: the peer's MLP step (../shared/bench/peer/torch_ddp_mlp.py, width
1024, world 2) over BACKEND, as it is (mode normal) or with a no-op comm hook (mode noop: DDP's
machinery without communication).

Usage: /usr/bin/python3 bench/torch_ddp_hook_probe.py gloo|actorch normal|noop
       (actorch from PYTHONPATH=build/release/python)
Prints: probe backend=B mode=M ms_per_step=T
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def run(rank, world, steps, backend, mode):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if backend != "gloo":
        import actorch  # noqa: F401  registers the backend
    dist.init_process_group(backend, rank=rank, world_size=world)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    ddp = DDP(model)
    if mode == "noop":
        def hook(state, bucket):
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    g = torch.Generator()
    g.manual_seed(rank)
    xs = torch.randn(64, 784, generator=g)
    ys = torch.randint(0, 10, (64,), generator=g)

    def step():
        opt.zero_grad()
        lossf(ddp(xs), ys).backward()
        opt.step()

    for _ in range(5):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = (time.perf_counter() - t0) / steps
    if rank == 0:
        print(f"probe backend={backend} mode={mode} ms_per_step={dt * 1e3:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2, 60, sys.argv[1], sys.argv[2]), nprocs=2, join=True)
