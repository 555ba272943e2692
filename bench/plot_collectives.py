"""Bus bandwidth against message size, per collective, for the `coll` lines of
../shared/bench/peer/torch_collectives.py and `actorch bench collectives` (several backends and
worlds in one file): one panel per collective, one line per backend and world (the median of a
size's repeated lines), drawn by gnuplot (Debian's gnuplot-nox) into a PNG.

Usage: /usr/bin/python3 bench/plot_collectives.py SWEEP.txt OUT.png
"""
import collections
import os
import subprocess
import sys
import tempfile


def main(sweep, out):
    series = collections.defaultdict(list)  # (op, backend) -> [(bytes, busbw)]
    for line in open(sweep):
        if not line.startswith("coll "):
            continue
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        name = f["backend"] + (f" world {f['world']}" if "world" in f else "")
        series[(f["op"], name)].append((int(f["bytes"]), float(f["busbw_GBps"])))
    if not series:
        sys.exit(f"plot_collectives: no coll lines in {sweep}")
    ops = sorted({op for op, _ in series})
    # One color per backend and world in every panel, also where a panel lacks some of them.
    style = {name: k + 1 for k, name in enumerate(sorted({name for _, name in series}))}
    with tempfile.TemporaryDirectory() as tmp:
        script = [f"set terminal pngcairo size 1500,{420 * ((len(ops) + 2) // 3)} font ',10'",
                  f"set output '{out}'", "set logscale x 2", "set format x '2^{%L}'",
                  "set xlabel 'bytes'", "set ylabel 'busbw (GB/s)'", "set key top left",
                  "set grid", "set termoption noenhanced", f"set multiplot layout {(len(ops) + 2) // 3},3"]
        for op in ops:
            plots = []
            for (o, backend), points in sorted(series.items()):
                if o != op:
                    continue
                path = os.path.join(tmp, f"{op}-{backend}.dat".replace(" ", "_"))
                by_size = collections.defaultdict(list)  # several rounds: their median
                for b, bw in points:
                    by_size[b].append(bw)
                with open(path, "w") as f:
                    f.writelines(f"{b} {sorted(v)[len(v) // 2]}\n" for b, v in sorted(by_size.items()))
                plots.append(f"'{path}' using 1:2 with linespoints linetype {style[backend]} "
                             f"title '{backend}'")
            script += [f"set title '{op}'", "plot " + ", ".join(plots)]
        script.append("unset multiplot")
        subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
    print(f"plot_collectives: {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
