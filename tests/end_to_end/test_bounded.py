"""Bounded: the profiler's memory and the report's size follow what the program
has (distinct functions and lines with data), never how long it runs, how many
code objects it makes, or the highest line number it reaches."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

EXEC_LOOP = """
import sys, time
marks = [5.0, 20.0]
template = '''
def work_{i}(n):
    total = 0
    for k in range(n):
        total += k * k % 7
    return total
'''
def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
start = time.monotonic()
made = 0
while marks:
    scope = {}
    # A new code object each time (as template engines and factories make
    # them), doing real work so that the sampler meets many of them.
    exec(compile(template.format(i=made % 50), "<generated>", "exec"), scope)
    scope["work_%d" % (made % 50)](2000)  # @call
    # The function and its globals (scope) form a cycle: cleared, each code
    # object dies now, not at the next collection (the number alive at the end
    # then counts what the profiler keeps, not how long ago the collector ran:
    # 57 to 202 with the cycle).
    scope.clear()
    made += 1
    if time.monotonic() - start >= marks[0]:
        print(f"at {marks.pop(0):.0f}s rss {rss_kb()} made {made}", flush=True)
"""


def test_exec_loop_memory_stays_flat(profile_program):
    """A program that makes a new code object about every 0.2 ms for 20 s, sampled
    every millisecond: the profiled process's RSS from 5 s to 20 s stays within
    10% (the program itself does not grow).  Keeping every code object the
    sampler met alive grew it from 21.7 to 31.5 MB in 9 s; the profiler now
    keys its lines by function (file, name, first line) and forgets a code
    object when it dies."""
    run = profile_program(EXEC_LOOP, options=["--cpu-sampling-rate", "0.001"])
    rss = {int(m[0]): int(m[1]) for m in re.findall(r"at (\d+)s rss (\d+)", run.proc.stdout)}
    made = int(re.findall(r"made (\d+)", run.proc.stdout)[-1])
    p = run.profile
    info = (f"RSS {rss} kB, {made} code objects made; the profiler knows {p['code_objects']} "
            f"of {p['code_objects_seen']} it met, holds {p['profiler_memory_bytes'] / 1e6:.1f} MB")
    print(info)
    assert set(rss) == {5, 20}, run.proc.stdout
    if "ASAN_OPTIONS" not in os.environ:  # the sanitizer job: ASan holds freed memory back
        assert rss[20] <= rss[5] * 1.10, info
    assert p["code_objects_seen"] > 1000, info  # the sampler did meet many
    assert p["code_objects"] < 200, info        # and did not keep them
    # Every code object of the loop is one function: one line record.
    assert run.line("# @call")["n_samples"] > 0, info


def test_lines_far_beyond_the_source_do_not_inflate_the_report(profile_program, tmp_path):
    """Code compiled with two million leading newlines under the program's own
    file name: the report lists the file's real lines and the line with data
    (with the context the source has, none here), not two million entries (it
    was a 557 MB JSON and 5.1 GB of RSS)."""
    source = (
        "code = compile('\\n' * 2_000_000 + 'for i in range(3_000_000): i * i', __file__, 'exec')\n"
        "exec(code)  # @exec\n"
    )
    run = profile_program(source)
    size = (tmp_path / "profile.json").stat().st_size
    entries = run.file()["lines"]
    numbers = [e["lineno"] for e in entries]
    print(f"{size} bytes, lines {numbers[:5]}...{numbers[-3:]}")
    assert size < 1_000_000
    assert numbers[:2] == [1, 2]
    assert 2_000_001 in numbers, numbers  # the line that ran: its time is kept
    assert len(entries) <= 10
    far = next(e for e in entries if e["lineno"] == 2_000_001)
    assert far["n_samples"] > 0 and far["line"] == ""
    assert json.dumps(run.profile)  # and it is a whole profile


RUNS_IN_ONE_PROCESS = """
import json, os, sys, time
from pyrometer import _core
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "lib"))
import work

def run(include, only=()):
    _core.reset()
    _core.start(interval=0.001, virtual_time=False, include=include, exclude=[], own=[], only=list(only),
                exclude_substrings=[], profile_all=False)
    work.spin(0.3)
    _core.stop()
    raw = _core.collect()
    return sorted({os.path.basename(r[0]) for r in raw["records"]}), raw["code_objects_seen"]

def restart_without_reset(include, only):
    # A start without a reset adds to the last run's aggregates, which name
    # their functions by site: other rules must not take those away.
    _core.start(interval=0.001, virtual_time=False, include=include, exclude=[], own=[], only=list(only),
                exclude_substrings=[], profile_all=False)
    work.spin(0.05)
    _core.stop()
    return sorted({os.path.basename(r[0]) for r in _core.collect()["records"]})

lib = os.path.join(here, "lib") + os.sep
runs = [run(["/nowhere/"]), run([lib]), run([lib]), run([lib], only=["nothing"]), run([lib])]
print(json.dumps([runs, restart_without_reset([lib], ["nothing"])]))
"""

WORK = """
import time
def spin(seconds):
    end = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < end:
        total += sum(k * k for k in range(200))
    return total
"""


def test_runs_in_one_process_keep_what_they_know_of_codes_under_the_same_rules(tmp_path):
    """Runs one after another in one process (the pytest plugin makes one per
    test) keep the facts of the code objects met, which depend on the code and
    on which files are reported: a run with the last one's rules registers
    none of them again (code_objects_seen counts a run's new ones), and a run
    with other rules works them out afresh, so that a file reported now and
    not before (or the reverse) is seen so, and keeps the functions' names
    that the last run's aggregates hold (a start without a reset adds to
    them)."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "work.py").write_text(WORK)
    (tmp_path / "main.py").write_text(RUNS_IN_ONE_PROCESS)
    proc = subprocess.run([sys.executable, str(tmp_path / "main.py")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    runs, files_after_restart = json.loads(proc.stdout)
    (files1, seen1), (files2, seen2), (files3, seen3), (files4, seen4), (files5, seen5) = runs
    assert files1 == [] and files2 == ["work.py"] and files3 == ["work.py"], proc.stdout
    assert files4 == [] and files5 == ["work.py"], proc.stdout  # a change of rules both ways
    assert seen2 >= 2, proc.stdout  # spin and its generator expression
    assert seen3 < seen2 and seen5 >= 2, proc.stdout
    assert files_after_restart == ["work.py"], proc.stdout
