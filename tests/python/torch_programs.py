"""The seeds' torch.distributed programs (../shared/seeds: the distributed tutorial's
point-to-point, new_group and average_gradients training; DDP's demo_basic and demo_checkpoint;
DDP with find_unused_parameters, no_sync and the fp16 compression hook), changed only as a
CPU-only machine needs (CPU tensors, no device_ids, random tensors or the digits data instead of
a download) and given the backend as an argument. Each rank writes what it ends with to
OUT/<program>.<rank>.pt, for test_torch_backend.py to compare across backends. DDP's programs
take a device as well: "cpu" here, the seed's rank in the GPU check (tests/tools/
torch2_backend.py, which runs demo_basic and ddp_variants on CUDA tensors, and sync_batch_norm,
which needs them).

Started as the seeds start them:   torch_programs.py PROGRAM BACKEND OUT PORT [WORLD]  (mp.spawn)
or under torchrun:                  torchrun --nproc_per_node N torch_programs.py PROGRAM BACKEND OUT
"""
import os
import sys
import tempfile
from random import Random

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

OUT = None


def save(name, value):
    torch.save(value, os.path.join(OUT, f"{name}.{dist.get_rank()}.pt"))


# -- The tutorial: point-to-point, a group, average_gradients --------------------------------

def p2p(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        dist.send(tensor=tensor, dst=1)  # Send the tensor to process 1
    else:
        dist.recv(tensor=tensor, src=0)  # Receive tensor from process 0
    # ... and the non-blocking forms.
    t2 = torch.arange(4.0) * (rank + 1)
    if rank == 0:
        req = dist.isend(tensor=t2, dst=1)
    else:
        req = dist.irecv(tensor=t2, src=0)
    req.wait()
    save("p2p", [tensor, t2])


def group(rank, size):
    group = dist.new_group([0, size - 1])
    tensor = torch.ones(1) * (rank + 1)
    if rank in (0, size - 1):
        dist.all_reduce(tensor, op=dist.reduce_op.SUM, group=group)
    everyone = torch.ones(1) * (rank + 1)
    dist.all_reduce(everyone)
    save("group", [tensor, everyone])


class Partition(object):
    def __init__(self, data, index):
        self.data = data
        self.index = index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, index):
        data_idx = self.index[index]
        return self.data[data_idx]


class DataPartitioner(object):
    def __init__(self, data, sizes=[0.7, 0.2, 0.1], seed=1234):
        self.data = data
        self.partitions = []
        rng = Random()
        rng.seed(seed)
        data_len = len(data)
        indexes = [x for x in range(0, data_len)]
        rng.shuffle(indexes)
        for frac in sizes:
            part_len = int(frac * data_len)
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


def digits():
    """The UCI digits (../shared/data) in place of MNIST: (8x8 image, label) pairs."""
    import gzip

    import numpy as np
    path = os.environ["ACTORCH_DIGITS"]
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(rows[:, :64] / 16.0)
    y = torch.from_numpy(rows[:, 64].astype(np.int64))
    return list(zip(x, y))


def partition_dataset():
    dataset = digits()
    size = dist.get_world_size()
    bsz = 128 // size
    partition_sizes = [1.0 / size for _ in range(size)]
    partition = DataPartitioner(dataset, partition_sizes)
    partition = partition.use(dist.get_rank())
    train_set = torch.utils.data.DataLoader(partition, batch_size=bsz, shuffle=True)
    return train_set, bsz


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def average_gradients(model):
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.reduce_op.SUM)
        param.grad.data /= size


def train(rank, size):
    torch.manual_seed(1234)
    train_set, bsz = partition_dataset()
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    for epoch in range(2):
        for data, target in train_set:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            average_gradients(model)
            optimizer.step()
    save("train", list(model.parameters()))


# -- DDP's tutorial ---------------------------------------------------------------------------

class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size, device="cpu"):
    torch.manual_seed(rank)  # each rank its own data, as the seed's torch.randn gives
    model = ToyModel().to(device)
    ddp_model = DDP(model, device_ids=None if device == "cpu" else [device])
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5).to(device)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    save("demo_basic", list(model.parameters()))


def demo_checkpoint(rank, world_size):
    torch.manual_seed(rank)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    CHECKPOINT_PATH = os.path.join(OUT, "model.checkpoint")
    if rank == 0:
        # All processes should see same parameters as they all start from same random
        # parameters and gradients are synchronized in backward passes. Therefore, saving it
        # in one process is sufficient.
        torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)
    # Use a barrier() to make sure that process 1 loads the model after process 0 saves it.
    dist.barrier()
    ddp_model.load_state_dict(torch.load(CHECKPOINT_PATH, map_location="cpu"))
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)
    loss_fn = nn.MSELoss()
    loss_fn(outputs, labels).backward()
    optimizer.step()
    save("demo_checkpoint", list(model.parameters()))


class Branchy(nn.Module):
    """A model one of whose layers a step may not use (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 10)
        self.b = nn.Linear(10, 10)
        self.out = nn.Linear(10, 5)

    def forward(self, x, use_b):
        h = F.relu(self.a(x))
        if use_b:
            h = F.relu(self.b(h))
        return self.out(h)


def ddp_variants(rank, world_size, device="cpu"):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    results = []
    for variant in ("find_unused", "no_sync", "fp16_hook"):
        torch.manual_seed(0)
        model = Branchy().to(device)
        ddp = DDP(model, device_ids=None if device == "cpu" else [device],
                  find_unused_parameters=variant == "find_unused")
        if variant == "fp16_hook":
            ddp.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
        optimizer = optim.SGD(ddp.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(100 + rank)
        for step in range(4):
            x = torch.randn(8, 10, generator=gen).to(device)
            optimizer.zero_grad()
            if variant == "no_sync" and step % 2 == 0:
                with ddp.no_sync():  # accumulate locally, synchronise on the next step
                    ddp(x, True).sum().backward()
                x = torch.randn(8, 10, generator=gen).to(device)
            ddp(x, variant != "find_unused" or step % 2 == 1).sum().backward()
            optimizer.step()
        results.append([p.detach().clone() for p in model.parameters()])
    save("ddp_variants", results)


def ddp_large(rank, world_size, device="cpu"):
    """DDP over an MLP whose gradient buckets pass the small all-reduce's 256 KiB (over actorch
    they are the group's shared blocks: Note [DDP's buckets in shared memory]): as written,
    with gradient_as_bucket_view, and under Join with uneven inputs (rank r has 3 + 2r batches,
    and Join's hook rebuilds the buckets of a rank that has run out). Each variant also saves how
    many shared blocks the group holds after it, to ddp_large_blocks (-1 where the group has no
    such count, as gloo's)."""
    from torch.distributed.algorithms.join import Join
    results, blocks = [], []
    for variant in ("as_written", "bucket_view", "join"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                              nn.Linear(256, 10)).to(device)
        ddp = DDP(model, device_ids=None if device == "cpu" else [device], bucket_cap_mb=0.5,
                  gradient_as_bucket_view=variant == "bucket_view")
        optimizer = optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        gen = torch.Generator().manual_seed(300 + rank)
        batches = 3 + 2 * rank if variant == "join" else 4
        with Join([ddp], enable=variant == "join"):
            for _ in range(batches):
                x = torch.randn(32, 256, generator=gen).to(device)
                y = torch.randint(0, 10, (32,), generator=gen).to(device)
                optimizer.zero_grad()
                F.cross_entropy(ddp(x), y).backward()
                optimizer.step()
        results.append([p.detach().clone() for p in model.parameters()])
        blocks.append(getattr(dist.group.WORLD, "_shared_blocks", lambda: -1)())
        del ddp, optimizer
    save("ddp_large", results)
    save("ddp_large_blocks", torch.tensor(blocks))


def sync_batch_norm(rank, world_size, device):
    """DDP over a small CNN whose BatchNorm layers became SyncBatchNorm (convert_sync_batchnorm):
    each step normalises with the statistics of every rank's batch together (an all_gather of
    mean, invstd and count forward, an all_reduce backward). torch's SyncBatchNorm takes CUDA
    tensors only, so this runs in the GPU check (tests/tools/torch2_backend.py)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)
    ddp = DDP(model, device_ids=[device])
    optimizer = optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(200 + rank)
    for _ in range(3):
        # The ranks' batches differ in scale, so statistics of one rank's batch would not do.
        x = (torch.randn(6, 3, 8, 8, generator=gen) * (rank + 1)).to(device)
        y = torch.randint(0, 4, (6,), generator=gen).to(device)
        optimizer.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        optimizer.step()
    save("sync_batch_norm", [t.detach().clone() for t in [*model.parameters(), *model.buffers()]])


PROGRAMS = {"p2p": p2p, "group": group, "train": train, "demo_basic": demo_basic,
            "demo_checkpoint": demo_checkpoint, "ddp_variants": ddp_variants,
            "ddp_large": ddp_large}


def init_process(rank, size, fn, backend, out, port):
    """The tutorial's init_process: the environment, then the group."""
    global OUT
    OUT = out
    import actorch  # noqa: F401  registers the backend "actorch" (imported here, not at the top,
    # so that the GPU check's tests/tools/torch2_backend.py can run the programs under torch 2.x)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)
    dist.destroy_process_group()


if __name__ == "__main__":
    program, backend, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)
    if "LOCAL_RANK" in os.environ:  # under torchrun: env:// from its variables
        import actorch  # noqa: F401  registers the backend "actorch"
        dist.init_process_group(backend)
        PROGRAMS[program](dist.get_rank(), dist.get_world_size())
        dist.destroy_process_group()
    else:
        port, world = int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 2
        mp.spawn(init_process, args=(world, PROGRAMS[program], backend, OUT, port),
                 nprocs=world, join=True)
