"""Writes an ImageFolder tree of photo-like JPEGs for the `images` workload and the image tests:
smooth colour fields (a few random low-resolution colour grids upsampled bicubically), soft
ellipses, and sensor-like noise, 300-500 px a side, quality 90 (PIL's default 4:2:0 chroma
subsampling), spread over CLASSES folders. Deterministic for a given seed.

Usage: /usr/bin/python3 bench/make_images.py OUT_DIR [--n 3000] [--classes 10] [--seed 0]
       [--min-size 300] [--max-size 500] [--png-every 0]
"""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def photo(rng, w, h):
    base = rng.integers(0, 256, (rng.integers(2, 6), rng.integers(2, 6), 3), dtype=np.uint8)
    img = Image.fromarray(base, "RGB").resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(rng.integers(3, 9)):
        x0, y0 = int(rng.integers(-w // 4, w)), int(rng.integers(-h // 4, h))
        x1, y1 = x0 + int(rng.integers(w // 8, w // 2)), y0 + int(rng.integers(h // 8, h // 2))
        draw.ellipse((x0, y0, x1, y1), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 2.5))))
    a = np.asarray(img, dtype=np.int16) + rng.normal(0, 6, (h, w, 3)).astype(np.int16)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-size", type=int, default=300)
    p.add_argument("--max-size", type=int, default=500)
    p.add_argument("--png-every", type=int, default=0, help="every k-th image as PNG (0: none)")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, f"class_{c:02d}"), exist_ok=True)
    for i in range(a.n):
        w, h = (int(v) for v in rng.integers(a.min_size, a.max_size + 1, 2))
        img = photo(rng, w, h)
        folder = os.path.join(a.out, f"class_{i % a.classes:02d}")
        if a.png_every and i % a.png_every == a.png_every - 1:
            img.save(os.path.join(folder, f"img_{i:05d}.png"))
        else:
            img.save(os.path.join(folder, f"img_{i:05d}.jpg"), quality=90)


if __name__ == "__main__":
    main()
