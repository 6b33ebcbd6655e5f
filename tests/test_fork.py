"""A profiled program that forks sees exactly what it sees under plain python: no
warning (CPython 3.12+ warns when a process with more than one thread forks, and
pyrometer's sampler is a thread), no other output, the same exit statuses; and
the parent's profile still covers the whole run, after the forks as before.

Every run here is made with ``-W error::DeprecationWarning``, so that a fork
warning would also be an exception in the program, not only a line on stderr."""

from __future__ import annotations

import pytest

STRICT = ["-W", "error::DeprecationWarning"]

# Two copies of the same loop: a profile charges time to the innermost line of
# the program, so each phase needs lines of its own.
BUSY = """
import time
def before(seconds):
    start, total = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for i in range(2000): total += i * i
def after(seconds):
    start, total = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for i in range(2000): total += i * i
def busy(seconds):
    start, total = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for i in range(2000): total += i * i
"""

MODES = {
    "cpu": ["--cpu-only"],
    "memory": [],
    "periodic": ["--profile-interval", "0.05"],
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_fork_is_silent_and_profiled_after(profile_program, run_bare, mode):
    source = BUSY + """
import os, sys
before(0.2)
for n in range(20):
    pid = os.fork()
    if pid == 0:
        busy(0.01)
        os._exit(n % 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == n % 3, status
pid = os.fork()
if pid == 0:
    print("child here", flush=True)
    sys.exit(0)
os.waitpid(pid, 0)
after(0.4)
print("parent done", flush=True)
"""
    bare = run_bare(source, python_args=STRICT)
    assert bare.returncode == 0 and bare.stderr == "", bare.stderr
    p = profile_program(source, options=MODES[mode], python_args=STRICT)
    assert p.proc.stderr == "", p.proc.stderr  # parent's and children's
    assert p.proc.stdout == bare.stdout == "child here\nparent done\n"
    before, after = p.function("before"), p.function("after")
    assert after["n_samples"] >= 5 and before["n_samples"] >= 3, p.describe()
    # The work after the forks is measured as well as the work before them.
    after_s = after["n_cpu_python_sec"] + after["n_cpu_native_sec"]
    assert 0.25 <= after_s <= 0.6, p.describe()


def test_multiprocessing_fork_pool_is_silent(profile_program, run_bare):
    source = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:
        print(sum(pool.map(square, range(1000))), flush=True)
"""
    bare = run_bare(source, python_args=STRICT)
    assert bare.returncode == 0 and bare.stderr == "", bare.stderr
    p = profile_program(source, python_args=STRICT)
    assert p.proc.stderr == "", p.proc.stderr
    assert p.proc.stdout == bare.stdout == "332833500\n"


def test_fork_from_a_thread(profile_program):
    """os.fork from a thread other than the main one: the sampler stops and starts
    again around it just the same.  The program has two threads, so 3.12+ warns,
    as it would without pyrometer; the warning is the program's, not ours (it is
    not turned into an error here)."""
    source = BUSY + """
import os, threading
def forker():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), flush=True)
t = threading.Thread(target=forker)
t.start(); t.join()
after(0.3)
"""
    p = profile_program(source)
    assert p.proc.stdout == "child 7\n"
    assert p.function("after")["n_samples"] >= 3, p.describe()
