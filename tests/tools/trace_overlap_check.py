"""scripts/trace_overlap.py (gpu-check.sh's prefetch verdict) on traces made for it, one where
every next batch's copy starts while the step before it runs and one where each waits for the
step, and on the trace of a real CPU run of the digits job, which has no GPU lanes to judge.
Usage: python3 trace_overlap_check.py SOURCE_DIR DIGITS_ACTORS_BINARY SCRATCH_DIR
"""
import json
import os
import shutil
import subprocess
import sys


def write_trace(path, copies, steps):
    """A trace as core/trace.cpp writes it: lane names, then spans (begin, end) in us."""
    events = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "p"}},
              {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1,
               "args": {"name": "loader copy stream (cuda:0)"}},
              {"ph": "M", "name": "thread_name", "pid": 0, "tid": 2,
               "args": {"name": "trainer 0 (cuda:0)"}},
              {"ph": "M", "name": "thread_name", "pid": 0, "tid": 3, "args": {"name": "loader"}}]
    for k, (b, e) in enumerate(copies):
        events.append({"ph": "X", "pid": 0, "tid": 1, "name": f"copy batch {k}", "ts": b,
                       "dur": e - b})
        # The host's span of the same copy: another lane, not judged.
        events.append({"ph": "X", "pid": 0, "tid": 3, "name": "copy batch to GPU", "ts": 0,
                       "dur": 1})
    for k, (b, e) in enumerate(steps):
        events.append({"ph": "X", "pid": 0, "tid": 2, "name": f"step {k}", "ts": b, "dur": e - b})
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)


def run(script, *args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          timeout=120)


def main():
    source, digits, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    script = os.path.join(source, "scripts", "trace_overlap.py")

    # Steps of 100 us every 120 us; copies of 10 us. Prefetched: copy k+1 runs during step k.
    steps = [(120 * k, 120 * k + 100) for k in range(10)]
    ahead = [(0, 10)] + [(120 * k + 20, 120 * k + 30) for k in range(9)]
    path = os.path.join(scratch, "ahead.json")
    write_trace(path, ahead, steps)
    r = run(script, path)
    if r.returncode != 0 or "device=cuda:0 steps=10 copies=10 prefetched=9 fraction=1.000" \
            not in r.stdout:
        sys.exit(f"prefetching trace: rc {r.returncode}\n{r.stdout}{r.stderr}")

    # Serialized: each copy starts only after the step before it ended.
    behind = [(0, 10)] + [(120 * k + 105, 120 * k + 115) for k in range(9)]
    path = os.path.join(scratch, "behind.json")
    write_trace(path, behind, steps)
    r = run(script, path)
    if r.returncode != 1 or "prefetched=0 fraction=0.000" not in r.stdout:
        sys.exit(f"serialized trace: rc {r.returncode}\n{r.stdout}{r.stderr}")
    # Two of nine prefetched: below the default 0.8, above a given 0.2.
    mixed = behind[:8] + ahead[8:]
    write_trace(path, mixed, steps)
    if run(script, path).returncode != 1 or run(script, path, "0.2").returncode != 0:
        sys.exit("a fraction of 2/9 is judged against MIN_FRACTION")

    # A real run on the CPU: its trace has trainer and loader lanes, but none of a GPU.
    trace = os.path.join(scratch, "cpu.json")
    job = subprocess.run([digits, "--epochs", "1", "--plot", "0", "--trace", trace,
                          "--data", os.path.join(source, "examples", "data", "digits.csv.gz"),
                          "--out", os.path.join(scratch, "digits")],
                         capture_output=True, text=True, timeout=300)
    if job.returncode != 0:
        sys.exit(f"digits_actors failed ({job.returncode}):\n{job.stdout}{job.stderr}")
    r = run(script, trace)
    if r.returncode != 2 or "has no GPU copy and step lanes" not in r.stderr:
        sys.exit(f"CPU trace: rc {r.returncode}\n{r.stdout}{r.stderr}")
    print("ok")


if __name__ == "__main__":
    main()
