"""Memory attacks on a tcp_store master from outside, each of which took the master past any
bound before Note [Store bounds] (tcp_store_server.cpp): pipelined GETs whose replies are never
read, a MULTI_GET naming one large key 2,000 times, 64 MiB SETs without end, WAITs on huge key
lists. The master (tests/tools/store_master.cpp) runs in a memory cgroup of its own limited to
1.5 GiB, so that a master that does not keep its bounds is killed there instead of taking the
machine down; after every attack it must still be alive and serving, under its bounds.

Usage: store_attacks.py STORE_MASTER. Exits 77 (skipped) where no memory cgroup can be made."""
import os
import socket
import struct
import subprocess
import sys
import time

CGROUP_ROOT = "/sys/fs/cgroup/memory"
LIMIT = 1536 << 20
MAX_BYTES = 200_000_000    # ACTORCH_STORE_MAX_BYTES for this master
MAX_WAIT_KEYS = 100_000    # ACTORCH_STORE_MAX_WAIT_KEYS


def u64(n):
    return struct.pack("<Q", n)


def string(s):
    return u64(len(s)) + s


# torch 1.13's numbering (the master's default dialect for a connection).
def set_req(key, value):
    return b"\x00" + string(key) + string(value)


def get_req(key):
    return b"\x02" + string(key)


def wait_req(keys):
    return b"\x05" + u64(len(keys)) + b"".join(string(k) for k in keys)


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the master closed the connection")
        out += chunk
    return out


def closed_by_master(s, timeout=10.0):
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(1 << 16):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def make_cgroup():
    path = os.path.join(CGROUP_ROOT, f"actorch-store-attacks-{os.getpid()}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(LIMIT))
    except OSError as e:
        print(f"store_attacks: skipped: no memory cgroup can be made here ({e})")
        sys.exit(77)
    return path


class Master:
    def __init__(self, binary, cgroup):
        env = dict(os.environ, ACTORCH_STORE_MAX_BYTES=str(MAX_BYTES),
                   ACTORCH_STORE_MAX_WAIT_KEYS=str(MAX_WAIT_KEYS))
        env.pop("ACTORCH_JOB_TOKEN", None)
        procs = os.path.join(cgroup, "cgroup.procs")

        def enter_cgroup():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        self.log_path = f"/tmp/store_attacks_{os.getpid()}.log"
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, preexec_fn=enter_cgroup)
        self.port = int(self.proc.stdout.readline())

    def check_alive(self, after):
        """The master still runs and serves a SET and a GET; its resident memory is bounded."""
        if self.proc.poll() is not None:
            sys.exit(f"store_attacks: FAILED: the master died after {after} "
                     f"(status {self.proc.returncode}; killed by the cgroup's memory limit?)")
        s = connect(self.port)
        s.sendall(set_req(b"/probe", after.encode()) + get_req(b"/probe"))
        n = struct.unpack("<Q", recv_exact(s, 8))[0]
        got = recv_exact(s, n)
        s.close()
        assert got == after.encode(), (after, got)
        rss = 0
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) << 10
        print(f"store_attacks: after {after}: the master serves, RSS {rss >> 20} MiB")
        return rss

    def stderr(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log_path)


def main():
    binary = sys.argv[1]
    cgroup = make_cgroup()
    master = None
    try:
        master = Master(binary, cgroup)
        port = master.port
        big = b"x" * (1 << 20)
        s = connect(port)
        s.sendall(set_req(b"/big", big))
        s.close()

        # 1. 5,000 pipelined GETs of a 1 MiB value, replies never read: 5 GiB of replies before.
        attacker = connect(port)
        attacker.sendall(get_req(b"/big") * 5000)
        time.sleep(2)
        rss = master.check_alive("5,000 pipelined GETs whose replies are never read")
        assert rss < 512 << 20, rss
        attacker.close()

        # 2. One MULTI_GET (2.x numbering, after VALIDATE) naming the 1 MiB key 2,000 times.
        s = connect(port)
        s.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE) + b"\x0a" + u64(2000) +
                  string(b"/big") * 2000)
        assert closed_by_master(s), "the master answered a 2 GB MULTI_GET"
        s.close()
        master.check_alive("a MULTI_GET of 2,000 copies of a 1 MiB value")

        # 3. 64 MiB SETs, one after the other: refused past ACTORCH_STORE_MAX_BYTES.
        value = b"v" * (64 << 20)
        refused_at = None
        for i in range(12):
            s = connect(port)
            s.sendall(set_req(b"/huge/%d" % i, value) + get_req(b"/big"))
            s.settimeout(20)
            try:
                recv_exact(s, 8 + len(big))
            except ConnectionError:
                refused_at = i
                s.close()
                break
            s.close()
        assert refused_at == MAX_BYTES // (64 << 20), refused_at
        master.check_alive(f"{refused_at + 1} SETs of 64 MiB (the store's bound: {MAX_BYTES} bytes)")

        # 4. WAITs naming 60,000 missing keys each: the second passes the pending waits' bound.
        first, second = connect(port), connect(port)
        keys = [b"/missing/%06d" % i for i in range(60_000)]
        # A CHECK after the first WAIT: its answer says the WAIT is registered.
        first.sendall(wait_req(keys) + b"\x04" + u64(1) + string(b"/big"))
        first.settimeout(20)
        assert recv_exact(first, 1) == b"\x00"
        second.sendall(wait_req([k + b"b" for k in keys]))
        assert closed_by_master(second), "the master took 120,000 pending wait keys"
        master.check_alive("two WAITs of 60,000 missing keys each")
        first.close()

        log = master.stderr()
        for want in ("ACTORCH_STORE_MAX_BYTES", "more than the master sends one connection at once",
                     "ACTORCH_STORE_MAX_WAIT_KEYS"):
            assert want in log, f"the master's log does not say '{want}':\n{log[-3000:]}"
        print("store_attacks: every attack was bounded; the master's log says why it refused")
    finally:
        if master is not None:
            master.stop()
        for _ in range(100):
            try:
                os.rmdir(cgroup)
                break
            except OSError:
                time.sleep(0.05)


if __name__ == "__main__":
    main()
