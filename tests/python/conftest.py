"""pytest hooks for every file here: a hang after the last test (in the interpreter's exit, where
native threads and objects left from the tests are torn down) prints every Python thread's stack
and ends the run with an error after 120 s, rather than silently holding ctest to its limit.
(pytest's faulthandler_timeout, set in tests/python/CMakeLists.txt, covers each test; it is
cancelled before the exit.)"""
import faulthandler
import sys


def pytest_unconfigure(config):
    print("pytest: the session ended; the interpreter exits", file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(120, exit=True)
