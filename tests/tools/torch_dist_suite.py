"""torch's own distributed test suite, torch/testing/_internal/distributed/distributed_test.py
(DistributedTest._DistTestBase on TestDistBackend), over gloo and over actorch's backend, as
torch's test/distributed/test_distributed_spawn.py drives it (Debian ships the suite, not that
driver). Ranks start by fork, which keeps a test to a fraction of a second.

  torch_dist_suite.py --backend gloo|actorch|actorch-plugin --world-size N [-k PAT] [--json F]
  torch_dist_suite.py --ci      gloo and actorch at worlds 2 and 3, then the plugin run at 2;
                                fails when a test that passes on gloo does not on actorch

Backends:
- gloo: torch's own.
- actorch: BACKEND=gloo, so the suite runs its gloo tests, but every group asked for as "gloo"
  (init_process_group, new_group) is made an "actorch" group after `import actorch`, and each
  test first checks that the default group is one.
- actorch-plugin: BACKEND=actorch, registered as the suite's plugin backend
  (DistTestCases.backend_feature["plugin"]); the suite then skips whatever it gates on a named
  backend ("gloo", "nccl"), which the summary counts by reason. test_get_backend, which asserts
  that a group is named as BACKEND, is judged here rather than in the actorch run.

Two stand-ins: expecttest is not packaged in Debian 12 (common_utils imports it; only its
TestCase base and its ACCEPT flag are used), and the suite's experimental ReplicatedTensor DDP mode, which
TestDistBackend._run turns on, does not import under Python 3.11 and errors on gloo too: the
driver keeps it off.
"""
import argparse
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

RUN_TIMEOUT_S = 900  # one backend at one world size
# Tests that assert the default group's name is BACKEND's ("gloo"), which the actorch run makes
# untrue by design: they are judged in the plugin run instead, where BACKEND is "actorch".
NAMED_AS_ASKED = {"test_get_backend"}
PRINTING = threading.Lock()  # ci() runs two children at a time; their summaries print whole


def stand_ins():
    if "expecttest" not in sys.modules:
        expecttest = types.ModuleType("expecttest")
        expecttest.TestCase = unittest.TestCase
        expecttest.ACCEPT = False  # common_utils reads it: never rewrite expected output
        sys.modules["expecttest"] = expecttest
    import torch.nn.parallel._replicated_tensor_ddp_utils as replicated
    replicated._set_ddp_with_replicated_tensor = lambda value: None


def groups_as_actorch():
    """Every group asked for as gloo is made an actorch group, in this process and its forks."""
    import actorch  # noqa: F401  registers the backend
    import torch.distributed as dist
    c10d = dist.distributed_c10d

    def mapped(backend):
        return "actorch" if backend is not None and str(backend).lower() == "gloo" else backend

    init, new_group = c10d.init_process_group, c10d.new_group

    def init_process_group(backend=None, *args, **kwargs):
        return init(mapped(backend), *args, **kwargs)

    def new_group_as_actorch(ranks=None, timeout=c10d.default_pg_timeout, backend=None,
                             *args, **kwargs):
        group = new_group(ranks, timeout, mapped(backend), *args, **kwargs)
        if not c10d._rank_not_in_group(group) and dist.get_backend(group) != "actorch":
            raise AssertionError(f"new_group made a {dist.get_backend(group)} group")
        return group

    for module in (dist, c10d):
        module.init_process_group = init_process_group
        module.new_group = new_group_as_actorch


class Outcomes(unittest.TextTestResult):
    """Each test's outcome, by name: passed, skipped (with the reason), failed or error."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def _put(self, test, outcome, detail=""):
        self.outcomes[test.id().split(".")[-1]] = {"outcome": outcome, "detail": detail}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "passed")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skipped", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._put(test, "error", self._exc_info_to_string(err, test))


def run_here(backend, world, pattern, out):
    """Runs the suite in this process (its ranks are forks of it); writes the outcomes."""
    temp = tempfile.mkdtemp(prefix="torch_dist_suite.")
    os.environ.update(BACKEND="actorch" if backend == "actorch-plugin" else "gloo",
                      WORLD_SIZE=str(world), TEMP_DIR=temp, INIT_METHOD="env://")
    stand_ins()
    expected = "gloo"
    if backend == "actorch":
        groups_as_actorch()
        expected = "actorch"
    elif backend == "actorch-plugin":
        import actorch  # noqa: F401
        expected = "actorch"
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import DistTestCases
    from torch.testing._internal.distributed import distributed_test as suite
    if backend == "actorch-plugin":
        DistTestCases.backend_feature["plugin"].add("actorch")

    class TestDistBackendWithFork(suite.TestDistBackend, suite.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            # torch 1.13 dropped _fork_processes; _start_processes takes the context's Process.
            import torch.multiprocessing as mp
            self._start_processes(mp.get_context("fork").Process)

        def run_test(self, test_name, parent_pipe):
            method = getattr(self, test_name)

            def checked():
                if dist.get_backend() != expected:
                    raise AssertionError(f"the default group is {dist.get_backend()}, not "
                                         f"{expected}")
                return method()
            setattr(self, test_name, checked)
            super().run_test(test_name, parent_pipe)

    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = [f"*{pattern}*"]
    tests = loader.loadTestsFromTestCase(TestDistBackendWithFork)
    with open(os.devnull, "w") as quiet:
        result = unittest.TextTestRunner(stream=quiet, resultclass=Outcomes).run(tests)
    with open(out, "w") as f:
        json.dump(result.outcomes, f, indent=1, sort_keys=True)


def summary(name, outcomes):
    counts = {}
    for o in outcomes.values():
        counts[o["outcome"]] = counts.get(o["outcome"], 0) + 1
    print(f"torch_dist_suite {name}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    for test, o in sorted(outcomes.items()):
        if o["outcome"] in ("failed", "error"):
            last = [l for l in o["detail"].strip().splitlines() if l.strip()][-1:]
            print(f"  {o['outcome']}: {test}: {last[0] if last else ''}")
    return counts


def skip_reasons(outcomes):
    reasons = {}
    for o in outcomes.values():
        if o["outcome"] == "skipped":
            reasons[o["detail"]] = reasons.get(o["detail"], 0) + 1
    return reasons


def run_child(backend, world, pattern, out):
    """The suite for one backend and world size in a child of its own, bounded in time."""
    cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend,
           "--world-size", str(world), "--json", out] + (["-k", pattern] if pattern else [])
    start = time.monotonic()
    with open(out + ".log", "w+") as log:  # the ranks' logging, shown when the run breaks
        child = subprocess.Popen(cmd, start_new_session=True, stdout=log, stderr=log)
        try:
            child.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        if child.returncode != 0 or not os.path.exists(out):
            log.seek(0)
            sys.stderr.write(log.read()[-6000:])
            raise SystemExit(f"torch_dist_suite: {backend} at world {world} exited "
                             f"{child.returncode} without its outcomes (killed past "
                             f"{RUN_TIMEOUT_S} s if -9)")
    with open(out) as f:
        outcomes = json.load(f)
    with PRINTING:
        summary(f"{backend} world={world} ({time.monotonic() - start:.0f} s)", outcomes)
    return outcomes


def regressions(gloo, actorch):
    """Tests that pass on gloo and not on actorch."""
    return sorted(t for t, o in gloo.items() if t not in NAMED_AS_ASKED and o["outcome"] ==
                  "passed" and actorch.get(t, {}).get("outcome") != "passed")


def ci(pattern):
    """Two runs at a time: a run waits on its tests' timeouts and its ranks' starts, and uses about
    0.4 of a core (68 s of wall time for 27 s of CPU at world 2), so pairs halve the suite's time
    in CI without crowding the cores."""
    bad = []
    runs = [("gloo", 2), ("actorch", 2), ("gloo", 3), ("actorch", 3), ("actorch-plugin", 2)]
    with tempfile.TemporaryDirectory(prefix="torch_dist_suite.") as d, \
            concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {(b, w): pool.submit(run_child, b, w, pattern, f"{d}/{b}{w}.json")
                   for b, w in runs}
        for world in (2, 3):
            gloo, ours = futures[("gloo", world)].result(), futures[("actorch", world)].result()
            lost = regressions(gloo, ours)
            passed = sum(o["outcome"] == "passed" for o in ours.values())
            print(f"torch_dist_suite world={world}: actorch passes {passed} tests, gloo "
                  f"{sum(o['outcome'] == 'passed' for o in gloo.values())}; "
                  f"{len(lost)} that gloo passes do not pass on actorch")
            for t in lost:
                print(f"  world {world}: {t}: {ours.get(t, {}).get('outcome', 'not run')}")
            bad += lost
        plugin = futures[("actorch-plugin", 2)].result()
        for reason, n in sorted(skip_reasons(plugin).items(), key=lambda x: -x[1]):
            print(f"  plugin skips {n}: {reason}")
        for t in sorted(NAMED_AS_ASKED):
            got = plugin.get(t, {}).get("outcome")
            if got is not None and got != "passed":
                print(f"  plugin: {t}: {got}")
                bad.append(t)
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("gloo", "actorch", "actorch-plugin"))
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("-k", dest="pattern", default="")
    p.add_argument("--json")
    p.add_argument("--ci", action="store_true")
    a = p.parse_args()
    if a.ci:
        return ci(a.pattern)
    if not a.backend:
        p.error("--backend or --ci")
    if a.json:
        run_here(a.backend, a.world_size, a.pattern, a.json)
        return 0
    with tempfile.TemporaryDirectory() as d:
        outcomes = run_child(a.backend, a.world_size, a.pattern, f"{d}/out.json")
    if a.backend == "actorch-plugin":
        for reason, n in sorted(skip_reasons(outcomes).items(), key=lambda x: -x[1]):
            print(f"  skipped {n}: {reason}")
    return 1 if any(o["outcome"] in ("failed", "error") for o in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
