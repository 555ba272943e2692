"""What the tools tests share about the jobs they start: a free port for a master, and the test
accuracy a digits job prints."""
import random
import re
import socket


def free_port():
    """A TCP port on 127.0.0.1 that nothing is bound to right now, one of the 8192 below the
    kernel's ephemeral range as dist::free_port picks them (Note [Ports below the ephemeral
    range] in comm/launch/launcher.cpp): a store client knocking on an ephemeral port before
    its master listens can land on another test's Gloo listener and break that group."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first = max(1024, low - 8192)
    candidates = random.sample(range(first, low), min(64, max(0, low - first)))
    for port in candidates + [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("free_port: no port on 127.0.0.1 could be bound")


def test_accuracy(text):
    """The number after "test accuracy" in a digits job's output, or None."""
    m = re.search(r"test accuracy ([0-9.]+)", text)
    return float(m.group(1)) if m else None
