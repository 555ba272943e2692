"""What the tools tests share about the jobs they start: a free port for a master, and the test
accuracy a digits job prints."""
import random
import re
import socket


_held = []  # the reservations free_port made, kept until this process exits


def free_port():
    """A TCP port for a master, held until this process exits as dist::free_port holds it (Note
    [Reserved ports] in comm/launch/launcher.cpp): a socket bound to it on every address without
    SO_REUSEADDR (so that it fails against anything already there, another test's reservation
    among them), then marked SO_REUSEADDR and never listening, so that only a store's own bind
    (actorch's and torch's TCPStore set the flag) can share it. One of the 8192 ports below the
    kernel's ephemeral range (Note [Ports below the ephemeral range]): a store client knocking
    on an ephemeral port before its master listens can land on another test's Gloo listener
    and break that group."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first = max(1024, low - 8192)
    candidates = random.sample(range(first, low), min(64, max(0, low - first)))
    for port in candidates + [0]:
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            s.close()
            continue
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _held.append(s)
        return s.getsockname()[1]
    raise RuntimeError("free_port: no port could be bound")


def test_accuracy(text):
    """The number after "test accuracy" in a digits job's output, or None."""
    m = re.search(r"test accuracy ([0-9.]+)", text)
    return float(m.group(1)) if m else None
