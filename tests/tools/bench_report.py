"""`actorch bench report --quick` against stand-in peers whose figures are fixed, so that the
table's medians and ratios can be checked exactly; then with no peers at all.

Usage: bench_report.py ACTORCH WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

actorch, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
peers = os.path.join(work, "peers")
os.makedirs(peers)
# Stand-ins printing what the real peer scripts print, with fixed figures.
with open(os.path.join(peers, "torch_ddp_mlp.py"), "w") as f:  # over actorch: half gloo's step
    f.write("import sys\nw = int(sys.argv[1])\n"
            "b = sys.argv[3] if len(sys.argv) > 3 else 'gloo'\n"
            "t = 10.0 * w * (0.5 if b == 'actorch' else 1)\n"
            "print(f'torch-ddp-mlp backend={b} width=1024 world={w} batch=64 ms_per_step={t:.2f} "
            "samples_per_s=1 loss=0.1')\n")
with open(os.path.join(peers, "peer_tensor.py"), "w") as f:
    f.write("print('torch-tensor op=gemm dtype=float32 m=1024 n=1024 k=1024 blas_threads=1 "
            "time_ms=20 gflops=100.0')\n"
            "print('torch-tensor op=add_ dtype=float32 mib=64 time_ms=3 gbps=50.0')\n")
with open(os.path.join(peers, "torch_loader.py"), "w") as f:
    f.write("import sys\nw, p, n = sys.argv[1:4]\n"
            "print(f'torch-loader workers={w} passes={p} n={n} samples={n} time_s=1 "
            "samples_per_s={6000 if int(w) == 0 else 1000 * (int(w) + 1)}')\n")

with open(os.path.join(peers, "torch_images.py"), "w") as f:
    f.write("import sys\nroot, w = sys.argv[1:3]\n"
            "print(f'images which=torch workers={w} images=128 rate={100 * (int(w) + 1)}.0 "
            "first_batch_s=0.400 cpu_s_per_image=0.00250 rss_mb=500')\n")

with open(os.path.join(peers, "torch_collectives.py"), "w") as f:  # over actorch: 3x gloo's busbw
    f.write("import sys\nw = sys.argv[1]\nb = sys.argv[2] if len(sys.argv) > 2 else 'gloo'\n"
            "bw = 0.123 if b == 'actorch' else 0.041\n"
            "for op in ('all_reduce', 'all_gather', 'broadcast'):\n"
            "    print(f'coll op={op} backend={b} world={w} bytes=8192 time_us=100.0 p99_us=200.0 "
            "algbw_GBps=0.082 busbw_GBps={bw} check=ok')\n")
# The report runs the peers over actorch's torch.distributed backend where this build made it.
build_python = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(actorch))), "python")
torch_backend = subprocess.run(
    [sys.executable, "-c",
     "import actorch, torch.distributed as d; assert hasattr(d.Backend, 'ACTORCH')"],
    env=dict(os.environ, PYTHONPATH=build_python), capture_output=True).returncode == 0


def report(out, peer_dir, rounds):
    r = subprocess.run([actorch, "bench", "report", "--quick", "--rounds", str(rounds), "--out",
                        out, "--peer-dir", peer_dir, "--python", sys.executable],
                       capture_output=True, text=True, timeout=600)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.returncode
    with open(os.path.join(out, "report.md")) as f:
        md = f.read()
    with open(os.path.join(out, "report.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", "report.png is not a PNG"
    with open(os.path.join(out, "raw.txt")) as f:
        raw = f.read()
    return md, raw


def row(md, what):
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == what:
            return cells
    raise AssertionError(f"no row {what!r} in:\n{md}")


md, raw = report(os.path.join(work, "with-peers"), peers, 2)
# ddp-mlp world 2, actors: the peer's 20 ms against our median; the ratio is theirs / ours.
ours, theirs, ratio = row(md, "ddp-mlp world 2, actors")[1:4]
assert theirs == "20.00", theirs
assert abs(float(ratio.rstrip("x")) - round(20.0 / float(ours), 2)) <= 0.011, (ours, ratio)
# Our world-1 step against our world-2 step: world 2 / world 1.
w2, w1, r = row(md, "ddp-mlp world 2, actors vs actorch world 1")[1:4]
assert w1.endswith("(world 1)") and abs(float(r) - float(w2) / float(w1.split()[0])) <= 0.011
# Loader rates: ours / theirs at W=2 (3000); PyTorch's best worker count is its highest rate,
# here W=0's 6000, not W=2's.
ours, theirs, ratio = row(md, "loader W=2 P=1")[1:4]
assert theirs == "3000.00" and abs(float(ratio.rstrip("x")) - round(float(ours) / 3000, 2)) <= 0.011
assert row(md, "loader W=2 P=1 vs PyTorch's best worker count")[2] == "6000.00"
# The peer directory's own peer_tensor.py stands in for bench/peer_tensor.py.
assert row(md, "GEMM 1024, float32, 1 thread")[2] == "100.00"
assert row(md, "add_ 64 MiB")[2] == "50.00"
# Images, on the set the report wrote: rates ours / theirs, torch's best W being W=2's 300;
# first batch, CPU and RSS: theirs / ours.
ours, theirs, ratio = row(md, "images W=2 (JPEG, RandomResizedCrop 224)")[1:4]
assert theirs == "300.00" and abs(float(ratio.rstrip("x")) - round(float(ours) / 300, 2)) <= 0.011
assert row(md, "images, best W vs torchvision's best W")[2] == "300.00"
ours, theirs, ratio = row(md, "images W=2 first batch")[1:4]
assert theirs == "0.40" and float(ours) > 0, (ours, theirs)
assert row(md, "images W=2 peak RSS")[2] == "500.00"
assert len(os.listdir(os.path.join(work, "with-peers", "images"))) == 10  # the classes
# Two rounds, ours and the peer alternating which goes first.
runs = re.findall(r"^# round (\d): (.*)$", raw, re.M)
ddp = [(rnd, "peers" in cmd) for rnd, cmd in runs  # the gloo peer's world-2 runs, not actorch's
       if "--mode actors" in cmd
       or ("torch_ddp_mlp.py' 2" in cmd and not cmd.endswith(" actorch"))]
assert ddp == [("1", False), ("1", True), ("2", True), ("2", False)], ddp

# Collectives: our bus bandwidth over the peer's, each of our lines checked; a panel per op.
ours, theirs, ratio = row(md, "coll all_reduce 8192 B, world 2 bus bandwidth")[1:4]
assert theirs == "0.04" and float(ours) > 0, (ours, theirs)
assert row(md, "coll reduce_scatter 8192 B, world 2 bus bandwidth")[2] == "n/a"  # no peer row
assert re.search(r"^coll op=send_recv backend=actorch world=2 bytes=8 .* check=ok$", raw, re.M)
assert "check=FAIL" not in raw
with open(os.path.join(work, "with-peers", "collectives.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "collectives.png is not a PNG"

# torch's programs over the backend "actorch": the DDP step against gloo's (20 / 10 ms), and the
# sweep's lines filed as torch-actorch, apart from our own collectives' actorch lines.
if torch_backend:
    ours, theirs, ratio = row(
        md, "torch's DDP world 2 over the backend actorch (vs over gloo)")[1:4]
    assert (ours, theirs, ratio) == ("10.00", "20.00", "2.00x"), (ours, theirs, ratio)
    ours, theirs, ratio = row(
        md, "coll all_reduce 8192 B, world 2 through torch.distributed, backend actorch")[1:4]
    assert (ours, theirs, ratio) == ("0.12", "0.04", "3.00x"), (ours, theirs, ratio)
    assert re.search(r"^coll op=all_gather backend=torch-actorch world=2 bytes=8192 ", raw, re.M)
    assert float(row(md, "coll all_reduce 8192 B, world 2 bus bandwidth")[1]) != 0.123
    with open(os.path.join(work, "with-peers", "collectives.txt")) as f:
        assert "backend=torch-actorch" in f.read()
else:
    print("bench report: no torch backend in this build; its rows are not checked")

md, _ = report(os.path.join(work, "no-peers"), os.path.join(work, "nowhere"), 1)
assert "no peer scripts found" in md
assert row(md, "ddp-mlp world 2, actors")[2] == "n/a"
print("bench report: medians, ratios, alternation and the plot check out")
