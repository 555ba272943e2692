"""Every number read from a flag or a checkpoint's metadata is refused unless the whole string is
a number in range (std::stoll read "5x" as 5 and "2x1" as 2).
Usage: strict_numbers.py ACTORCH DIGITS_MLP DIGITS_ACTORS SCRATCH_DIR"""
import json
import os
import struct
import subprocess
import sys


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def set_metadata(src, dst, key, value):
    """Copies the safetensors file src to dst with one __metadata__ value replaced."""
    data = open(src, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["__metadata__"][key] = value
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])


def main():
    actorch, mlp, actors, scratch = sys.argv[1:5]
    os.makedirs(scratch, exist_ok=True)
    failures = []

    def refused(cmd, expected):
        rc, out = run(cmd)
        if rc != 1 or expected not in out:
            failures.append(f"{' '.join(cmd[1:])}: rc={rc}, wanted {expected!r} in {out[-400:]!r}")

    refused([mlp, "--epochs", "5x"], "--epochs must be an integer, but got '5x'")
    refused([mlp, "--epochs", "0"], "--epochs is out of range: got '0'")
    refused([mlp, "--stop-after", "-1"], "--stop-after must not be negative, but got '-1'")
    refused([actors, "--epochs", "5x"], "--epochs must be an integer, but got '5x'")
    refused([actors, "--actors", " 2"], "--actors must be an integer, but got ' 2'")
    refused([actors, "--lr", "0.1x"], "--lr must be a number, but got '0.1x'")
    refused([actors, "--lr", "nan"], "--lr must be a finite number, but got 'nan'")
    rc, out = run([actorch, "bench", "loader", "--n", "5x"])
    if rc == 0:
        failures.append(f"actorch bench loader --n 5x: rc=0: {out[-200:]!r}")

    ckpt = os.path.join(scratch, "mlp.safetensors")
    rc, out = run([mlp, "--epochs", "2", "--stop-after", "1", "--checkpoint", ckpt])
    if rc != 0:
        failures.append(f"digits_mlp --stop-after 1: rc={rc} {out[-400:]!r}")
    else:
        bad = os.path.join(scratch, "mlp_2x1.safetensors")
        set_metadata(ckpt, bad, "epoch", "2x1")
        refused([mlp, "--epochs", "3", "--resume", bad, "--checkpoint", ckpt],
                ": metadata \"epoch\" must be an integer, but got '2x1'")
    for f in failures:
        print("FAIL", f)
    print(f"strict numbers: {'all refused' if not failures else str(len(failures)) + ' accepted'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
