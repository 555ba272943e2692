# Peer for `actorch bench tensor`: the same measurements through PyTorch, printing lines of the
# same shape. Usage: /usr/bin/python3 bench/peer_tensor.py  (Debian's python3-torch)
import os, time, torch

def per_call(fn, min_seconds=0.5):
    fn(); fn()
    samples, start = [], time.perf_counter()
    while len(samples) < 5 or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter(); fn(); samples.append(time.perf_counter() - t0)
        if len(samples) >= 1000: break
    samples.sort()
    return samples[len(samples) // 2]

threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
if threads != "default":
    torch.set_num_threads(int(threads))
g = torch.Generator(); g.manual_seed(0)
n = 1024
a, b = torch.rand(n, n, generator=g), torch.rand(n, n, generator=g)
s = per_call(lambda: torch.mm(a, b))
print(f"torch-tensor op=gemm dtype=float32 m={n} n={n} k={n} blas_threads={threads} "
      f"time_ms={s*1e3:.3f} gflops={2*n**3/s/1e9:.1f}")
nbytes = 64 << 20
x, y = torch.rand(nbytes // 4, generator=g), torch.rand(nbytes // 4, generator=g)
s = per_call(lambda: x.add_(y))
print(f"torch-tensor op=add_ dtype=float32 mib=64 time_ms={s*1e3:.3f} gbps={3*nbytes/s/1e9:.2f}")
s = per_call(lambda: x + y)
print(f"torch-tensor op=add dtype=float32 mib=64 time_ms={s*1e3:.3f} gbps={3*nbytes/s/1e9:.2f}")
