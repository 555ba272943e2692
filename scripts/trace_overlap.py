"""Whether a GPU training run prefetched its batches: in a Chrome trace written with --device cuda
and --trace, the copy of the batch after step k (on the loader's copy stream) started on the
GPU before step k ended on the trainer's stream, instead of queueing behind it (issue 25's
third target; Note [Device prefetch]).

Usage: python3 trace_overlap.py TRACE [MIN_FRACTION]

Reads the GPU lanes the trace has for each device: "loader copy stream (cuda:N)" with spans
"copy batch K" and "trainer R (cuda:N)" with spans "step S" (cuda::stream_timeline, in GPU
time). The copies and steps of a device pair up in time order, one batch per step; a pair
(step k, copy k + 1) prefetched when the copy began before the step ended. Prints
`trace-overlap device=cuda:N steps=S copies=C prefetched=P fraction=F` per device and exits 1
when some device's fraction is below MIN_FRACTION (default 0.8: the first batch of each epoch
is copied only once the epoch starts), 2 when the trace has no such lanes.
"""
import json
import re
import sys


def lanes_of(events):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}


def spans_by_device(events, lanes, lane_pattern, span_pattern):
    """{device: [(begin, end), ...] in begin order} of the spans named like span_pattern on the
    lanes named like lane_pattern (whose group 1 is the device)."""
    out = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        lane = re.fullmatch(lane_pattern, lanes.get((e["pid"], e["tid"]), ""))
        if lane and re.fullmatch(span_pattern, e["name"]):
            out.setdefault(lane.group(1), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in out.values():
        spans.sort()
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    path = sys.argv[1]
    min_fraction = float(sys.argv[2]) if len(sys.argv) == 3 else 0.8
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    lanes = lanes_of(events)
    copies = spans_by_device(events, lanes, r"loader copy stream \((cuda:\d+)\)",
                             r"copy batch \d+")
    steps = spans_by_device(events, lanes, r"trainer \d+ \((cuda:\d+)\)", r"step \d+")
    devices = sorted(set(copies) & set(steps))
    if not devices:
        print(f"trace_overlap: {path} has no GPU copy and step lanes of one device (copy lanes: "
              f"{sorted(copies) or 'none'}, step lanes: {sorted(steps) or 'none'}); run the job "
              "with --device cuda and --trace", file=sys.stderr)
        sys.exit(2)
    worst = 1.0
    for d in devices:
        c, s = copies[d], steps[d]
        pairs = min(len(s), len(c) - 1)
        prefetched = sum(1 for k in range(pairs) if c[k + 1][0] < s[k][1])
        fraction = prefetched / pairs if pairs > 0 else 0.0
        worst = min(worst, fraction)
        print(f"trace-overlap device={d} steps={len(s)} copies={len(c)} prefetched={prefetched} "
              f"fraction={fraction:.3f}")
    sys.exit(0 if worst >= min_fraction else 1)


if __name__ == "__main__":
    main()
