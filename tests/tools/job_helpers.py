"""What the tools tests share about the jobs they start: a free port for a master, and the test
accuracy a digits job prints."""
import re
import socket


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_accuracy(text):
    """The number after "test accuracy" in a digits job's output, or None."""
    m = re.search(r"test accuracy ([0-9.]+)", text)
    return float(m.group(1)) if m else None
