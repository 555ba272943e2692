"""Two hosts on one machine: network namespaces joined by a veth pair, each with a host name and
a /dev/shm of its own (so the ranks cannot take the shared-memory path and really cross the
link), no GLOO_SOCKET_IFNAME. Across them: the seed tutorial, a DDP training (the digits job),
then a link cut mid-collective and a rank stopped with SIGSTOP, each reported by the other side
within the timeout, naming the peer; last, an elastic digits job under two launchers whose link
is cut mid-training: the side holding the launchers' store goes on alone and ends well, the other
side stops saying it lost the store. Skips (status 77), saying why, where namespaces cannot be
made. Usage: python3 two_hosts.py TUTORIAL DIGITS_DDP COLLECTIVE_LOOP SCRATCH_DIR ACTORCH
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

NS = ("actorch_ha", "actorch_hb")
ADDR = ("10.231.0.1", "10.231.0.2")


def tail(text, n):
    """The end of a process's output for a failure's message; a sanitizer's report whole (its
    first lines name the two accesses, which the end alone would cut off: CI once showed only a
    report's last stack)."""
    start = text.find("WARNING: ThreadSanitizer")
    if start < 0:
        start = text.find("ERROR: AddressSanitizer")
    if start >= 0:
        return text[max(0, start - 200):start + 30000]
    return text[-n:]


def sh(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check)


def setup():
    teardown()
    for ns in NS:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", "actorch_va", "netns", NS[0], "type", "veth", "peer", "name",
       "actorch_vb", "netns", NS[1])
    for ns, dev, addr in zip(NS, ("actorch_va", "actorch_vb"), ADDR):
        sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")


def teardown():
    for ns in NS:
        sh("ip", "netns", "del", ns, check=False)


def on_host(i, argv, env, **kw):
    """Runs argv as host i: its network namespace, its own host name and /dev/shm."""
    script = (f"hostname actorch-host{i} && mount -t tmpfs tmpfs /dev/shm && "
              f"exec \"$@\"")
    return subprocess.Popen(["ip", "netns", "exec", NS[i], "unshare", "--uts", "--mount",
                             "sh", "-c", script, "sh"] + argv, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def rank_env(rank, port, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOO_", "MASTER_"))}
    env.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR=ADDR[0], MASTER_PORT=str(port),
               OPENBLAS_NUM_THREADS="1")
    env.update(extra or {})
    return env


def both(argv_of, port, timeout, extra=None):
    procs = [on_host(r, argv_of(r), rank_env(r, port, extra)) for r in range(2)]
    return [p.communicate(timeout=timeout) + (p.returncode,) for p in procs]


def elastic_cut(actorch, digits, scratch):
    """Two launchers, --elastic, a rank each; the link cut mid-training (Note [Elastic
    membership])."""
    failures = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOO_", "MASTER_"))}
    env.update(OPENBLAS_NUM_THREADS="1")
    log = os.path.join(scratch, "elastic_samples")
    procs = [on_host(n, [actorch, "launch", "--elastic", "--insecure", "--nnodes", "2",
                         "--node-rank", str(n), "--nproc-per-node", "1", "--master-addr", ADDR[0],
                         "--master-port", "29615", "--rdzv-timeout", "3", digits, "--epochs", "15",
                         "--plot", "0", "--out", os.path.join(scratch, f"elastic{n}"),
                         "--sample-log", log], env) for n in range(2)]
    deadline = time.time() + 120
    while time.time() < deadline and all(p.poll() is None for p in procs):
        try:
            with open(log + ".1") as f:
                if sum(1 for line in f if " 2 0 " in line and "done" in line) >= 5:
                    break  # rank 1 is in epoch 2
        except OSError:
            pass
        time.sleep(0.01)
    t0 = time.time()
    sh("ip", "-n", NS[0], "link", "set", "actorch_va", "down")
    outs, ended = [], []
    for n, p in enumerate(procs):
        try:
            outs.append(p.communicate(timeout=90) + (p.returncode,))
            ended.append(time.time() - t0)
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate() + (None,))
            failures.append(f"elastic cut: node {n}'s launcher did not end within 90 s")
    sh("ip", "-n", NS[0], "link", "set", "actorch_va", "up")
    (o0, e0, rc0), (o1, e1, rc1) = outs
    if rc0 != 0 or "without rank 1" not in e0 or "regrouped as rank 0 of 1" not in o0:
        failures.append(f"elastic cut: node 0 (the store's side) status {rc0}:\n{tail(o0, 2000)}\n"
                        f"{tail(e0, 2000)}")
    else:
        acc = re.search(r"test accuracy ([0-9.]+)", o0)
        took = re.search(r"regrouped as rank 0 of 1 .*?\) (\d+) ms after", o0)
        print(f"two_hosts: elastic cut: node 0 went on alone, test accuracy "
              f"{acc.group(1) if acc else None}, regrouped {took.group(1) if took else '?'} ms "
              f"after its collective failed; node 1 status {rc1}; the launchers ended "
              f"{', '.join(f'{t:.1f}' for t in ended)} s after the cut")
        if not acc or float(acc.group(1)) < 0.95:
            failures.append(f"elastic cut: node 0's test accuracy {acc and acc.group(1)}")
    if rc1 == 0 or "lost the link to node 0" not in e1:
        failures.append(f"elastic cut: node 1 (cut off) status {rc1}:\n{tail(o1, 1500)}\n"
                        f"{tail(e1, 1500)}")
    return failures


def launch_cut(actorch, loop):
    """Two launchers without --elastic, a rank each, the link cut while the ranks loop: the ranks
    notice first (their collectives' timeout, 2 s, is shorter than the launchers', 10 s), and the
    cut-off node's launcher ends within the launchers' timeout of the cut and 2 s to stop (a
    sanitizer's build needs about one of them), saying that the link to node 0 was lost (Note
    [Supervision off the network]), rather than waiting another timeout to move the job's
    generation and ending on a bare store error."""
    failures = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOO_", "MASTER_"))}
    env.update(OPENBLAS_NUM_THREADS="1", ACTORCH_TEST_TIMEOUT_MS="2000")
    procs = [on_host(n, [actorch, "launch", "--insecure", "--nnodes", "2", "--node-rank", str(n),
                         "--nproc-per-node", "1", "--master-addr", ADDR[0], "--master-port",
                         "29616", "--rdzv-timeout", "10", loop], env) for n in range(2)]
    lines = [p.stdout.readline() for p in procs]
    if not all("looping" in line for line in lines):
        for p in procs:
            p.kill()
        return [f"launch cut: the ranks did not start looping: {lines}"]
    t0 = time.time()
    sh("ip", "-n", NS[0], "link", "set", "actorch_va", "down")
    try:
        _, e1 = procs[1].communicate(timeout=60)
        took = time.time() - t0
    except subprocess.TimeoutExpired:
        procs[1].kill()
        e1, took = procs[1].communicate()[1], None
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()
    sh("ip", "-n", NS[0], "link", "set", "actorch_va", "up")
    if took is None or procs[1].returncode == 0 or "lost the link to node 0" not in e1:
        failures.append(f"launch cut: node 1's launcher status {procs[1].returncode} after "
                        f"{took} s:\n{tail(e1, 2000)}")
    elif took > 10 + 2:
        failures.append(f"launch cut: node 1's launcher ended {took:.1f} s after the cut "
                        f"(--rdzv-timeout 10):\n{tail(e1, 2000)}")
    else:
        print(f"two_hosts: launch cut: node 1's launcher ended {took:.1f} s after the cut: "
              f"{e1.strip().splitlines()[-1][:240]}")
    return failures


def main():
    tutorial, digits, loop, scratch, actorch = sys.argv[1:6]
    try:
        setup()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        err = e.stderr if isinstance(e, subprocess.CalledProcessError) else str(e)
        print(f"two_hosts: skipped: cannot make network namespaces here ({err.strip()})")
        sys.exit(77)
    failures = []
    try:
        out = both(lambda r: [tutorial], 29611, 60)
        for r, (o, e, rc) in enumerate(out):
            if rc != 0 or f"Rank {r} has data tensor(2.) (all_reduce in group [0, 1])" not in o:
                failures.append(f"tutorial rank {r}: status {rc}\n{o}\n{e}")

        shutil.rmtree(scratch, ignore_errors=True)
        out = both(lambda r: [digits, "--epochs", "3", "--out", os.path.join(scratch, f"h{r}")],
                   29612, 300)
        for r, (o, e, rc) in enumerate(out):
            if rc != 0:
                failures.append(f"digits rank {r}: status {rc}\n{tail(o, 2000)}\n{tail(e, 2000)}")
        if "test accuracy" not in out[0][0]:
            failures.append("digits across the hosts printed no test accuracy")

        # The link cut mid-collective, then a rank stopped: the other side reports in time.
        for case in ("cut", "stop"):
            port = 29613 if case == "cut" else 29614
            procs = [on_host(r, [loop], rank_env(r, port, {"ACTORCH_TEST_TIMEOUT_MS": "3000"}))
                     for r in range(2)]
            lines = [p.stdout.readline() for p in procs]
            if not all("looping" in l for l in lines):
                failures.append(f"{case}: the ranks did not start looping: {lines}")
                for p in procs:
                    p.kill()
                continue
            t0 = time.time()
            if case == "cut":
                sh("ip", "-n", NS[0], "link", "set", "actorch_va", "down")
                watch = procs
            else:
                # ip netns exec, unshare and sh exec in place: the pid is the rank's own.
                os.kill(procs[1].pid, signal.SIGSTOP)
                watch = procs[:1]
            for r, p in enumerate(watch):
                try:
                    _, e = p.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    failures.append(f"{case}: rank {r} did not fail within 20 s")
                    continue
                took = time.time() - t0
                if p.returncode == 0 or "failed" not in e or "peers [" not in e:
                    failures.append(f"{case}: rank {r}: status {p.returncode}, stderr {e!r}")
                elif took > 3.0 * 3:  # the group's timeout is 3 s
                    failures.append(f"{case}: rank {r} reported after {took:.1f} s")
                else:
                    print(f"two_hosts: {case}: rank {r} failed after {took:.1f} s: "
                          f"{e.strip().splitlines()[-1][:200]}")
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if case == "cut":
                sh("ip", "-n", NS[0], "link", "set", "actorch_va", "up")

        failures += launch_cut(actorch, loop)
        failures += elastic_cut(actorch, digits, scratch)
    finally:
        teardown()
    if failures:
        sys.exit("\n".join(failures))
    print("two_hosts: tutorial and DDP across two namespaces; a cut link and a stopped rank "
          "reported in time")


if __name__ == "__main__":
    main()
