"""The seed tutorial (examples/distributed_tutorial) started by each launcher a PyTorch job starts
under: PyTorch's own torchrun (its agent hosts the store, TORCHELASTIC_USE_AGENT_STORE), OpenMPI's
mpirun (OMPI_COMM_WORLD_*), SLURM's variables (SLURM_PROCID, SLURM_NTASKS) and actorch launch.
Each rank must print the tutorial's four lines exactly once.
Usage: python3 launchers.py ACTORCH_BINARY TUTORIAL_BINARY
"""
import collections
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from distributed_tutorial import expected as tutorial_lines  # noqa: E402
from job_helpers import free_port  # noqa: E402


def expected(world):
    return collections.Counter(line for r in range(world) for line in tutorial_lines(r))


def check(name, proc, failures, strip_prefix=False):
    if proc.returncode != 0:
        failures.append(f"{name}: exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return
    lines = [l.split("]: ", 1)[1] if strip_prefix and "]: " in l else l
             for l in proc.stdout.splitlines() if "Rank " in l]
    got = collections.Counter(lines)
    if got != expected(2):
        failures.append(f"{name}: printed {sorted(got.elements())}")


def main():
    actorch, tutorial = sys.argv[1], sys.argv[2]
    failures = []
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "OMPI_", "SLURM_", "TORCHELASTIC"))}

    # torchrun: its agent hosts a TCPStore on MASTER_PORT; the ranks join it as clients.
    r = subprocess.run([sys.executable, os.path.join(HERE, "torchrun.py"), "--nproc_per_node", "2",
                        "--master_port", str(free_port()), "--no_python", tutorial],
                       capture_output=True, text=True, timeout=120, env=base)
    check("torchrun", r, failures)

    # mpirun: ranks from OMPI_COMM_WORLD_RANK / _SIZE, the store's address as PyTorch's docs say.
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("launchers: mpirun skipped: OpenMPI is not installed (scripts/setup.sh test installs "
              "openmpi-bin)")
    else:
        env = dict(base, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        r = subprocess.run([mpirun, "-np", "2", "--oversubscribe", "-x", "MASTER_ADDR=127.0.0.1",
                            "-x", f"MASTER_PORT={free_port()}", tutorial],
                           capture_output=True, text=True, timeout=120, env=env)
        check("mpirun", r, failures)

    # SLURM: srun gives each task SLURM_PROCID and SLURM_NTASKS (here set by hand, as srun would).
    port = str(free_port())
    procs = [subprocess.Popen([tutorial], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(base, SLURM_PROCID=str(r), SLURM_NTASKS="2",
                                       SLURM_LOCALID=str(r), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=port))
             for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    slurm = subprocess.CompletedProcess(
        "slurm", max(p.returncode for p in procs), "".join(o for o, _ in outs),
        "".join(e for _, e in outs))
    check("SLURM variables", slurm, failures)

    r = subprocess.run([actorch, "launch", "--nproc-per-node", "2", tutorial],
                       capture_output=True, text=True, timeout=120, env=base)
    check("actorch launch", r, failures, strip_prefix=True)

    if failures:
        sys.exit("\n".join(failures))
    print("launchers: torchrun, mpirun, SLURM variables and actorch launch all ran the tutorial")


if __name__ == "__main__":
    main()
