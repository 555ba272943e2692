"""Two hosts on one machine: network namespaces joined by a veth pair, each with a host name and
a /dev/shm of its own (so the ranks cannot take the shared-memory path and really cross the
link), no GLOO_SOCKET_IFNAME. Across them: the seed tutorial, a DDP training (the digits job),
then a link cut mid-collective and a rank stopped with SIGSTOP, each reported by the other side
within the timeout, naming the peer. Skips (status 77), saying why, where namespaces cannot be
made. Usage: python3 two_hosts.py TUTORIAL DIGITS_DDP COLLECTIVE_LOOP SCRATCH_DIR
"""
import os
import shutil
import signal
import subprocess
import sys
import time

NS = ("actorch_ha", "actorch_hb")
ADDR = ("10.231.0.1", "10.231.0.2")


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


def main():
    tutorial, digits, loop, scratch = sys.argv[1:5]
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
                failures.append(f"digits rank {r}: status {rc}\n{o[-2000:]}\n{e[-2000:]}")
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
    finally:
        teardown()
    if failures:
        sys.exit("\n".join(failures))
    print("two_hosts: tutorial and DDP across two namespaces; a cut link and a stopped rank "
          "reported in time")


if __name__ == "__main__":
    main()
