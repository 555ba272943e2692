"""`actorch bench loader --trace FILE` prints the workload line and writes a Chrome trace of the
epoch: the consumer's epoch span, and inside it the loop's start of the epoch (plan, workers,
first tasks) and each worker's load (collating as it loads) of every batch.
Usage: python3 bench_loader_trace.py ACTORCH_BINARY SCRATCH_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys


def main():
    actorch, scratch = sys.argv[1], sys.argv[2]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    trace = os.path.join(scratch, "loader.json")
    # 700 samples in batches of 64: 10 full batches and one of 60.
    r = subprocess.run([actorch, "bench", "loader", "--workers", "2", "--passes", "1", "--n", "700",
                        "--trace", trace], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"bench loader failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    if not re.search(r"^loader workers=2 passes=1 n=700 samples=700 time_s=\S+ samples_per_s=\d+$",
                     r.stdout, re.M):
        sys.exit(f"unexpected output:\n{r.stdout}")
    events = json.load(open(trace))["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    epoch = [e for e in spans if lanes.get(e["tid"]) == "consumer" and e["name"] == "epoch"]
    if len(epoch) != 1:
        sys.exit(f"expected one epoch span on the consumer lane, got {len(epoch)}")
    begin, end = epoch[0]["ts"], epoch[0]["ts"] + epoch[0]["dur"]
    loaded = {}
    for e in spans:
        # With the default collate_fn a worker collates as it loads (Note [Streaming collate]).
        m = re.fullmatch(r"load \+ collate batch (\d+)", e["name"])
        if m:
            loaded.setdefault(int(m.group(1)), []).append(lanes.get(e["tid"]))
            if not begin <= e["ts"] <= end:
                sys.exit(f"{e['name']} at {e['ts']} lies outside the epoch [{begin}, {end}]")
    if sorted(loaded) != list(range(11)) or any(len(v) != 1 for v in loaded.values()):
        sys.exit(f"expected batches 0..10 loaded once each, got {loaded}")
    workers = {lane for v in loaded.values() for lane in v}
    if not workers <= {"DataLoader worker 0", "DataLoader worker 1"}:
        sys.exit(f"loads on unexpected lanes: {workers}")
    # The epoch's start on the loop's thread: the plan, the workers' start, the first tasks.
    start = [e for e in spans if lanes.get(e["tid"]) == "coordinator" and
             e["name"] in ("plan epoch", "start workers", "send tasks")]
    if [e["name"] for e in sorted(start, key=lambda e: e["ts"])] != \
            ["plan epoch", "start workers", "send tasks"]:
        sys.exit(f"expected the epoch's start steps in order, got {[e['name'] for e in start]}")
    if not all(begin <= e["ts"] and e["ts"] + e["dur"] <= end for e in start):
        sys.exit("the epoch's start steps lie outside the epoch")
    apart = [e["name"] for e in spans if e["name"] in ("collate", "collate + pin")]
    if apart:
        sys.exit(f"default collate_fn, yet {len(apart)} separate collate spans")
    print(f"trace: epoch {epoch[0]['dur']:.0f} us, 11 batches on {sorted(workers)}")


if __name__ == "__main__":
    main()
