#!/usr/bin/python3
"""Writes a seed corpus for each fuzz target of tests/fuzz into DIR/<target>/: valid files of
each kind (numpy's own .npy files, safetensors files as the format's spec lays them out, lines
of the digits CSV), which libFuzzer then mutates. Needs Debian's python3 with numpy.

Usage: tests/fuzz/make_seeds.py DIR
"""
import gzip
import json
import os
import struct
import sys

import numpy as np


def npy_seeds(out):
    arrays = [
        np.arange(12, dtype="<f4").reshape(3, 4),
        np.array(3.5, dtype="<f8"),
        np.zeros((0, 5), dtype="<i8"),
        np.array([True, False, True]),
        np.arange(-4, 4, dtype="i1"),
        np.arange(6, dtype="u1").reshape(1, 2, 3),
        np.arange(5, dtype="<i4"),
        np.linspace(0, 1, 7).astype("<f2"),
    ]
    for i, a in enumerate(arrays):
        with open(os.path.join(out, f"seed{i}.npy"), "wb") as f:
            np.save(f, a)
    with open(os.path.join(out, "v2.npy"), "wb") as f:  # version 2.0 header
        np.lib.format.write_array(f, arrays[0], version=(2, 0))


def safetensors_bytes(tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name, a in tensors:
        raw = a.tobytes()
        dtype = {"<f4": "F32", "<f8": "F64", "<f2": "F16", "|i1": "I8", "|u1": "U8",
                 "<i4": "I32", "<i8": "I64", "|b1": "BOOL"}[a.dtype.str]
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def safetensors_seeds(out):
    files = [
        [("w", np.ones((2, 3), dtype="<f4")), ("b", np.arange(3, dtype="<i8"))],
        [("x", np.array(1.5, dtype="<f8"))],
        [("empty", np.zeros((0,), dtype="<f2")), ("flags", np.array([True, False]))],
        [],
    ]
    for i, tensors in enumerate(files):
        meta = {"format": "pt"} if i == 0 else None
        with open(os.path.join(out, f"seed{i}.safetensors"), "wb") as f:
            f.write(safetensors_bytes(tensors, meta))


def digits_seeds(out, csv_gz):
    with gzip.open(csv_gz, "rb") as f:
        lines = f.read().splitlines(keepends=True)[:4]
    text = b"".join(lines)
    with open(os.path.join(out, "plain.csv"), "wb") as f:
        f.write(text)
    with open(os.path.join(out, "one.csv"), "wb") as f:
        f.write(lines[0])
    with open(os.path.join(out, "gz.csv.gz"), "wb") as f:
        f.write(gzip.compress(text))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    root = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    csv_gz = os.path.join(here, "..", "..", "examples", "data", "digits.csv.gz")
    for target, make in (("npy", npy_seeds), ("safetensors", safetensors_seeds),
                         ("digits", lambda out: digits_seeds(out, csv_gz))):
        out = os.path.join(root, target)
        os.makedirs(out, exist_ok=True)
        make(out)


if __name__ == "__main__":
    main()
