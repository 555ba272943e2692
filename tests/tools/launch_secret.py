"""actorch launch's job secret against real processes (Note [Launch secrets] in
comm/launch/launcher.cpp): a job started with no secret in its environment gets one, so that
 1. a stranger at its MASTER_PORT can neither write a key (a planted rendezvous key broke the
    job before) nor read one: the master drops it and its log says why;
 2. a second job started on the same port is refused with a message that says so, and the
    first one goes on undisturbed (the two jobs' ranks once paired across jobs and both failed).
Usage: python3 launch_secret.py ACTORCH_BINARY COLLECTIVE_LOOP TUTORIAL_BINARY
"""
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_helpers import free_port  # noqa: E402


class Job:
    """A launcher whose merged output is read line by line on a thread of its own."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, start_new_session=True)
        self.lines = []
        self.fresh = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            self.fresh.put(line)

    def wait_for(self, text, count, timeout):
        seen, deadline = 0, time.monotonic() + timeout
        while seen < count:
            left = deadline - time.monotonic()
            if left <= 0:
                sys.exit(f"launch_secret: FAILED: no {count} lines with '{text}' within {timeout} s:"
                         f"\n{self.output()}")
            try:
                if text in self.fresh.get(timeout=left):
                    seen += 1
            except queue.Empty:
                pass

    def output(self):
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def stranger_plants_a_key(port):
    """torch 1.13's SET of default_pg/1 then a GET: True when the master answered the GET."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    key, value = b"/default_pg/1", b"x" * 64
    s.sendall(b"\x00" + struct.pack("<Q", len(key)) + key + struct.pack("<Q", len(value)) + value +
              b"\x02" + struct.pack("<Q", len(key)) + key)
    try:
        answered = len(s.recv(8)) > 0
    except ConnectionResetError:
        answered = False
    s.close()
    return answered


def main():
    actorch, loop, tutorial = sys.argv[1:4]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC", "ACTORCH_JOB_"))}
    env["ACTORCH_TEST_TIMEOUT_MS"] = "5000"
    port = free_port()
    failures = []
    first = Job([actorch, "launch", "--nproc-per-node", "2", "--master-port", str(port), loop], env)
    try:
        first.wait_for("looping", 2, 60)

        if stranger_plants_a_key(port):
            failures.append("a stranger without the job secret wrote and read a key")
        time.sleep(0.5)
        if "it sent a request without proving it knows the job secret" not in first.output():
            failures.append("rank 0's log does not say why it dropped the stranger")

        second = subprocess.run([actorch, "launch", "--nproc-per-node", "2", "--master-port",
                                 str(port), tutorial], capture_output=True, text=True, env=env,
                                timeout=120)
        said = second.stdout + second.stderr
        if second.returncode == 0:
            failures.append(f"the second job on port {port} ran:\n{said}")
        if "address already in use" not in said and "another job" not in said:
            failures.append(f"the second job's failure does not say that another job holds the "
                            f"port:\n{said}")

        time.sleep(1)  # the first job's collectives go on meanwhile
        if first.proc.poll() is not None:
            failures.append(f"the first job ended (status {first.proc.returncode}) when the "
                            f"second one came:\n{first.output()}")
        bad = [l for l in first.lines if "error" in l.lower() or "failed" in l.lower()]
        if bad:
            failures.append("the first job's ranks reported errors:\n" + "".join(bad))
    finally:
        first.stop()
    if failures:
        sys.exit("launch_secret: FAILED:\n" + "\n".join(failures))
    print("launch_secret: the stranger and the second job were refused, the first job went on")


if __name__ == "__main__":
    main()
