"""Races and lifetimes in the measuring core, each with a program whose truth
the test controls (issue 12).

- A thread state that no thread runs yet (CPython makes a new thread's state in
  the thread that starts it) has its creator's ids (3.10, 3.11) or none (3.12+):
  charged as a thread of its own, it counted its creator's CPU, or the sampling
  thread's own, a second time.
- The profiler's own allocations (registering a code object met for the first
  time calls CPython, which copies its bytecode) are not the program's.
The memory library's stop() waiting for running callbacks is a C unit test
(tests/c/memhooks: memhooks_stop_waits_for_running_callbacks).
"""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.accuracy


def charged_cpu(profile: dict) -> float:
    """All CPU time the profile charges (lines and unattributed)."""
    return profile["cpu_time_sec"]["python"] + profile["cpu_time_sec"]["native"]


def program_cpu(profile: dict) -> float:
    return profile["process_cpu_time_sec"] - profile["profiler_cpu_time_sec"]


UNSTARTED_THREAD = """
import time
import _groundtruth as gt
gt.hold_unstarted_thread_state()
end = time.process_time() + 1.0
x = 0
while time.process_time() < end:
    x += 1
gt.drop_unstarted_thread_state()
"""


@pytest.mark.accuracy
@pytest.mark.parametrize("memory", [True, False], ids=["memory", "cpu-only"])
def test_thread_being_started_is_not_charged_its_creators_cpu(profile_program, memory):
    """The main thread burns 1 s of CPU while a thread state that no thread runs
    yet exists.  Before the fix the charged CPU was twice the process's (1.98 s
    for 1.00 s on 3.11).  Tolerance: 5% of the process's CPU; a sampled figure
    against the truth, so a failure runs again (it failed once in the sanitizer
    job, and passed alone there: 2 of 2)."""
    run = profile_program(UNSTARTED_THREAD, options=[] if memory else ["--cpu-only"])
    charged, used = charged_cpu(run.profile), program_cpu(run.profile)
    assert used > 0.9, f"the program used {used:.3f} s of CPU, expected about 1 s"
    assert abs(charged - used) <= 0.05 * used, (
        f"{charged:.3f} s of CPU charged for {used:.3f} s used:\n  {run.describe()}")


# 100 functions, each with about 15 KB of bytecode that never runs (the branch is
# never taken), and a loop that stands long enough for CPU samples to find the
# function on the stack, so that the profiler registers each one during a
# snapshot.  The program itself allocates nothing in them but range iterators.
OWN_ALLOCATIONS = """
import _groundtruth as gt

N, STATEMENTS = 100, 1500
body = "".join(f"        x{i} = y + {i}\\n" for i in range(STATEMENTS))
source = "".join(f"def f{k}(y):\\n    if y is None:\\n{body}    for _ in range(4):\\n        gt.spin_gil(1.5)\\n"
                 for k in range(N))
namespace = {"gt": gt}
exec(compile(source, __file__, "exec"), namespace)  # @compile
functions = [namespace[f"f{k}"] for k in range(N)]
for f in functions:
    f(1)  # @call
"""


def test_profiler_own_allocations_are_not_the_programs(profile_program):
    """With a 16 KiB window, the bytecode copies made by registering 100 large
    functions (about 1.5 MB) were sampled as the program's and charged to the
    functions' lines: 0.8 to 1 MB of them before the fix.  Tolerance: 0.1 MB
    (6 windows; the program's own allocations there, range iterators, are about
    20 KB)."""
    run = profile_program(OWN_ALLOCATIONS, options=["--allocation-sampling-window", "16384"])
    program_lines = len(run.source_lines)
    inside = [e for e in run.file()["lines"] if e["lineno"] > program_lines]
    sampled_cpu = sum(e["n_cpu_python_sec"] + e["n_cpu_native_sec"] for e in inside)
    assert sampled_cpu > 0.2, f"the generated functions were hardly sampled: {sampled_cpu:.3f} s"
    allocated = sum(e["n_malloc_mb"] for e in inside)
    where = ", ".join(f"{e['lineno']}: {e['n_malloc_mb']:.3f} MB" for e in inside if e["n_malloc_mb"] > 0)
    assert allocated < 0.1, f"{allocated:.3f} MB charged inside functions that allocate nothing ({where})"
    # The program's own allocations are still seen: compiling allocates megabytes.
    assert run.line("# @compile")["n_malloc_mb"] > 1.0


SUBINTERPRETERS = """
import sys
try:
    import _interpreters as interpreters            # 3.13+
except ImportError:
    import _xxsubinterpreters as interpreters       # 3.12
kept = []
for i in range(5):
    interp = interpreters.create()
    (interpreters.run_string if hasattr(interpreters, "run_string") else interpreters.exec)(
        interp, "x = [bytearray(1000) for _ in range(1000)]\\nimport json")
    interpreters.destroy(interp)
    kept.append(bytearray(1 << 20))  # @main
print("ok")
"""


def test_subinterpreters_allocating_do_not_crash_the_memory_profile(profile_program):
    """3.12 gives a subinterpreter its own allocator.  A memory sample taken on
    its thread state held references to its code objects, which the main
    interpreter's drain dropped with its own allocator: "munmap_chunk():
    invalid pointer", SIGABRT, every run (CPython's test_threading,
    SubinterpThreadingTests).  A subinterpreter's allocations count as a
    thread's without Python state; the main interpreter's lines keep theirs."""
    if sys.version_info < (3, 12):
        pytest.skip("a subinterpreter shares the main interpreter's allocator before 3.12")
    pytest.importorskip("_interpreters" if sys.version_info >= (3, 13) else "_xxsubinterpreters")
    p = profile_program(SUBINTERPRETERS)
    assert p.proc.stdout == "ok\n", p.proc.stderr
    assert p.line("# @main")["n_malloc_mb"] >= 3, p.line("# @main")
