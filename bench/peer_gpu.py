# PyTorch's side of the GPU workloads of WORKLOADS.md, run on the same GPU as actorch's
# (scripts/gpu-check.sh): h2d (pinned non_blocking and pageable copies of one loader batch and
# of 64 MiB) and gpu-step (the ddp-mlp model's training step at world 1, eager mode). Prints
# `name key=value ...` lines as actorch's benchmarks do.
import sys, time, torch, torch.nn as nn

def gb_per_s(copy, nbytes, per_round, min_seconds=0.5):
    def round_():
        for _ in range(per_round):
            copy()
        torch.cuda.synchronize()
    round_()
    calls, t0 = 0, time.perf_counter()
    while True:
        round_(); calls += per_round
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return nbytes * calls / elapsed / 1e9

def h2d(dev):
    for name, shape in (("batch", (64, 3, 32, 32)), ("64MiB", (16 << 20,))):
        pinned = torch.randn(shape).pin_memory(); pageable = pinned.clone()
        on_gpu = torch.empty(shape, device=dev)
        nbytes = pinned.numel() * 4; per_round = 64 if nbytes < (1 << 20) else 4
        for source, src in (("pinned", pinned), ("pageable", pageable)):
            r = gb_per_s(lambda: on_gpu.copy_(src, non_blocking=True), nbytes, per_round)
            print(f"torch-h2d source={source} size={name} bytes={nbytes} GB_per_s={r:.3f}", flush=True)

def gpu_step(dev, steps=50, warmup=5, batch=64):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()
    x = torch.randn(batch, 784, device=dev); y = torch.randint(0, 10, (batch,), device=dev)
    def step():
        opt.zero_grad(); loss = lossf(model(x), y); loss.backward(); opt.step(); return loss
    for _ in range(warmup): loss = step()
    float(loss)
    t0 = time.perf_counter()
    for _ in range(steps): loss = step()
    last = float(loss)
    dt = (time.perf_counter() - t0) / steps
    print(f"torch-gpu-step batch={batch} ms_per_step={dt*1e3:.4f} samples_per_s={batch/dt:.0f} loss={last:.4f}", flush=True)

if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("peer_gpu.py: PyTorch sees no GPU")
    dev = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cuda:0")
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    warmup = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    h2d(dev)
    gpu_step(dev, steps, warmup)
