"""A small torch CNN trained for an epoch on an ImageFolder tree of JPEGs, its batches loaded by
actorch.DataLoader: actorch's ImageFolder decodes and transforms in the loader's workers without
the GIL (torchvision's RandomResizedCrop, RandomHorizontalFlip, ToTensor and Normalize, in C++),
and the model is plain PyTorch. Prints the loss as it goes, then images/s and the starvation
figure (the share of each step spent waiting for the next batch).

Usage: /usr/bin/python3 examples/python/image_folder_cnn.py ROOT [--epochs 1] [--workers 2]
       [--batch-size 32] [--size 64]
(bench/make_images.py ROOT writes a tree of photo-like JPEGs.)
"""
import argparse
import time

import torch
from torch import nn

import actorch
import actorch.transforms as T


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--size", type=int, default=64, help="the crops' side in pixels")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    dataset = actorch.data.ImageFolder(a.root, transform=T.Compose([
        T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    loader = actorch.DataLoader(dataset, batch_size=a.batch_size, shuffle=True,
                                num_workers=a.workers, seed=0)
    print(f"{len(dataset)} images in {len(dataset.classes)} classes, {len(loader)} batches "
          f"an epoch")

    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, len(dataset.classes)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for epoch in range(a.epochs):
        start, seen = time.perf_counter(), 0
        for step, (images, labels) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(labels)
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        elapsed = time.perf_counter() - start
        t = loader.timing()
        print(f"epoch {epoch}: {seen} images in {elapsed:.2f} s, {seen / elapsed:.1f} images/s, "
              f"first batch {t.first_batch_s:.3f} s, starvation {t.starvation:.3f}")


if __name__ == "__main__":
    main()
