# Peer of `actorch bench loader --transforms 1`: PyTorch's DataLoader on the loader workload
# (../shared/bench/peer/torch_loader.py) plus, per sample, Normalize + RandomCrop(32, padding=4)
# + RandomHorizontalFlip written with plain torch ops (no torchvision), as torchvision does them.
# Usage: /usr/bin/python3 bench/peer_loader_transforms.py [num_workers] [work_passes] [n]
import sys, time, torch
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)

def normalize(x):  # torchvision.transforms.Normalize(MEAN, STD)
    return (x - MEAN) / STD

def random_crop(x, size=32, padding=4):  # RandomCrop(32, padding=4)
    x = F.pad(x, (padding, padding, padding, padding))
    h, w = x.shape[-2:]
    i = torch.randint(0, h - size + 1, size=(1,)).item()
    j = torch.randint(0, w - size + 1, size=(1,)).item()
    return x[..., i:i + size, j:j + size]

def random_horizontal_flip(x, p=0.5):  # RandomHorizontalFlip()
    return x.flip(-1) if torch.rand(1) < p else x

class Synthetic(Dataset):
    """Sample i: float32 [3,32,32] deterministic image + label i%10; `passes` normalisation
    passes of CPU work, then the three transforms."""
    def __init__(self, n, passes):
        self.n, self.passes = n, passes
        self.mean, self.std = 0.5, 0.25
    def __len__(self): return self.n
    def __getitem__(self, i):
        x = torch.arange(3072, dtype=torch.float32).add_(i).remainder_(251.0).div_(251.0).view(3, 32, 32)
        for _ in range(self.passes):
            x = (x - self.mean) / self.std
        x = random_horizontal_flip(random_crop(normalize(x)))
        return x, i % 10

def main():
    nw = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
    torch.set_num_threads(1)
    g = torch.Generator(); g.manual_seed(0)
    dl = DataLoader(Synthetic(n, passes), batch_size=64, shuffle=True, num_workers=nw, generator=g,
                    persistent_workers=False)
    t0 = time.perf_counter(); seen = 0; chk = 0.0
    for x, y in dl:
        seen += x.shape[0]; chk += float(x[0, 0, 0, 0])
    dt = time.perf_counter() - t0
    print(f"torch-loader-transforms workers={nw} passes={passes} n={n} samples={seen} "
          f"time_s={dt:.3f} samples_per_s={seen/dt:.0f}")

if __name__ == "__main__":
    main()
