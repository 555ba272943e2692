"""actorch launch taking the command lines torchrun users type: a .py program run with python3,
-m MODULE, --no-python, a -- before the program, --standalone, --nproc-per-node cpu, torchrun's
rendezvous flags, and errors that name the option at fault before any rank starts.
Usage: python3 launch_cli.py ACTORCH_BINARY
"""
import os
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_helpers import free_port  # noqa: E402

SCRIPT = """import os, sys
print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], "args", sys.argv[1:],
      "python", sys.executable)
"""


def run(actorch, *args, env=None, timeout=60):
    return subprocess.run([actorch, "launch", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def main():
    actorch = sys.argv[1]
    failures = []

    def expect(name, ok, proc):
        if not ok:
            failures.append(f"{name}: exit {proc.returncode}\nstdout:\n{proc.stdout}\n"
                            f"stderr:\n{proc.stderr}")

    # python3 comes from PATH, as a shell finds it: here Debian's, which the tests use.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC"))}
    env["PATH"] = "/usr/bin:/bin"
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "train.py")  # no execute bit, as a user's script
        with open(script, "w") as f:
            f.write(SCRIPT)
        with open(os.path.join(tmp, "trainmod.py"), "w") as f:
            f.write(SCRIPT)

        r = run(actorch, "--standalone", "--nproc_per_node=2", script, "--lr", "0.1", env=env)
        expect("a .py program under --standalone", r.returncode == 0 and all(
            f"rank {k} of 2 args ['--lr', '0.1'] python /usr/bin/python3" in r.stdout
            for k in range(2)), r)

        r = run(actorch, "--nproc-per-node", "2", "-m", "trainmod", "x",
                env=dict(env, PYTHONPATH=tmp))
        expect("-m MODULE", r.returncode == 0 and r.stdout.count("args ['x']") == 2, r)

        r = run(actorch, "--nproc-per-node", "1", "--no-python", script, env=env)
        expect("--no-python on a script without the execute bit", r.returncode != 0 and
               "Permission denied (a Python script run as it is" in r.stdout + r.stderr, r)

        r = run(actorch, "--nproc-per-node", "2", "--", "/bin/echo", "--after-dashes", env=env)
        expect("-- before the program",
               r.returncode == 0 and r.stdout.count("--after-dashes") == 2, r)

        r = run(actorch, "--nproc-per-node", "2", "--standalonee", script, env=env)
        expect("an unknown option", r.returncode != 0 and "unknown option '--standalonee'" in
               r.stderr and "rank" not in r.stdout, r)

        r = run(actorch, "--standalone", "--nnodes", "2", script, env=env)
        expect("--standalone across nodes", r.returncode != 0 and
               "--standalone runs one node" in r.stderr, r)

        r = run(actorch, "--nproc-per-node", "cpu", script, env=env)
        expect("--nproc-per-node cpu", r.returncode == 0 and
               r.stdout.count(f"of {os.cpu_count()} args") == os.cpu_count(), r)

        r = run(actorch, "--nproc-per-node", "2", "--no-python", "-m", "trainmod", env=env)
        expect("--no-python with -m", r.returncode != 0 and "cannot be used together" in r.stderr,
               r)

        # torchrun's variables, OMP_NUM_THREADS=1 among them (unless set), and --nnodes 1:1.
        r = run(actorch, "--nnodes", "1:1", "--nproc-per-node", "2", "/usr/bin/env", env=env)
        want = ["OMP_NUM_THREADS=1", "TORCHELASTIC_RUN_ID=none", "GROUP_WORLD_SIZE=1",
                "ROLE_NAME=default", "ROLE_RANK=1", "ROLE_WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2"]
        expect("torchrun's environment", r.returncode == 0 and all(
            f"[rank1]: {v}" in r.stdout for v in want) and "OMP_NUM_THREADS is set to 1" in
            r.stderr, r)
        r = run(actorch, "--nproc-per-node", "2", "/usr/bin/env", env=dict(env, OMP_NUM_THREADS="3"))
        expect("OMP_NUM_THREADS of the user's", r.returncode == 0 and
               r.stdout.count("OMP_NUM_THREADS=3") == 2, r)
        r = run(actorch, "--nnodes", "1:2", script, env=env)
        expect("--nnodes MIN:MAX", r.returncode != 0 and "a range of nodes" in r.stderr, r)

        r = run(actorch, "--rdzv-backend", "etcd", script, env=env)
        expect("--rdzv-backend etcd", r.returncode != 0 and "etcd" in r.stderr, r)

        # Two nodes on this host; node 1 was started for another job than node 0's.
        port = free_port()
        common = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                  f"127.0.0.1:{port}", "--rdzv-timeout", "3", "--insecure"]
        results = {}
        node0 = threading.Thread(target=lambda: results.setdefault(0, run(
            actorch, *common, "--node-rank", "0", "--rdzv-id", "job-a", "/bin/true", env=env)))
        node0.start()
        r = run(actorch, *common, "--node-rank", "1", "--rdzv-id", "job-b", "/bin/true", env=env)
        node0.join()
        expect("a node of another job at the endpoint", r.returncode != 0 and
               "belongs to job 'job-a'" in r.stderr and "started for job 'job-b'" in r.stderr, r)

    if failures:
        sys.exit("\n\n".join(failures))
    print("launch_cli: every torchrun command line behaved")


if __name__ == "__main__":
    main()
