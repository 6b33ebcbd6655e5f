"""The verdict (src/pyrometer/model/verdict.py): ground-truth programs of each kind,
profiled by pyrometer, get the right bound, and the lines it names are the
program's heavy lines; the verdict is checked in saved profiles, made for
profiles written before it, and shown at the top of every report.

The machine these tests run on may be busy with other work: then the run's
bound is, truthfully, waiting for a CPU.  Every verdict also has the
program's own bound (`own_bound`, judged without the CPU wait), which is
what each ground truth is checked against; `bound` must be it, or
`cpu_wait` where the run waited for a CPU most of its time.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from pyrometer import model
from pyrometer.model import schema, verdict
from pyrometer.render import html, text

# Timing-based: run once more when the machine's load upsets one (conftest.py).
accuracy = pytest.mark.accuracy


def _describe(run) -> str:
    v = run.profile["verdict"]
    ev = {k: (round(x, 3) if isinstance(x, float) else x) for k, x in v["evidence"].items()}
    lines = [(os.path.basename(p["filename"]), p["lineno"], round(p["value"], 3), round(p["percent"], 1))
             for p in v["lines"]]
    return f"bound={v['bound']} own={v['own_bound']}\n  {v['summary']}\n  evidence={ev}\n  lines={lines}"


def _check_bound(run, expected: str) -> dict:
    """The program's own bound is the truth; the run's is it, or a busy machine."""
    v = run.profile["verdict"]
    why = _describe(run)
    print(why)
    assert v["own_bound"] == expected, why
    if v["bound"] != expected:
        assert v["bound"] == "cpu_wait" and v["evidence"]["cpu_wait_percent"] >= verdict.MAJORITY, why
    model.check(json.loads(json.dumps(run.profile)))  # the written verdict passes the reader's check
    return v


def _named(run) -> list[int]:
    return [p["lineno"] for p in run.profile["verdict"]["lines"] if p["filename"] == str(run.program)]


# ---------------------------------------------------------------------------
# Ground truth: one program of each kind
# ---------------------------------------------------------------------------

PYTHON_LOOP = """
import time

def work():
    a = b = c = 0
    for i in range(3000):
        for k in range(60): a += i * k       # @heavy1
        for k in range(35): b += k % 7       # @heavy2
        for k in range(20): c += k ^ i       # @heavy3
        c += 1
    return a + b + c

start = time.process_time()
while time.process_time() - start < 1.5:
    work()
"""


@accuracy
def test_python_loop_is_python_cpu(profile_program):
    """Pure bytecode (no call into C in the loops: sum() of a generator read
    a third native): Python CPU, on the three lines that do the work (weights
    60:35:20, each well above the loop's own lines).  --cpu-only: no memory
    figures, so churn and copying are not judged."""
    run = profile_program(PYTHON_LOOP, options=["--cpu-only"])
    v = _check_bound(run, "python_cpu")
    heavy = {run.lineno(f"@heavy{k}") for k in (1, 2, 3)}
    assert set(_named(run)) == heavy, _describe(run)
    assert v["lines"][0]["lineno"] == run.lineno("@heavy1"), _describe(run)
    assert v["evidence"]["python_percent"] >= verdict.MAJORITY
    assert v["evidence"]["allocated_mb_per_cpu_sec"] is None and v["evidence"]["copy_mb_per_cpu_sec"] is None
    assert "Python CPU bounds this run" in v["summary"] or v["bound"] == "cpu_wait"


NATIVE_CALLS = """
import time
import _groundtruth as gt

start = time.process_time()
while time.process_time() - start < 1.5:
    gt.spin_gil(12)    # @heavy1
    gt.spin_gil(7)     # @heavy2
    gt.spin_gil(4)     # @heavy3
"""


@accuracy
def test_long_native_calls_are_native_cpu(profile_program):
    """A loop of long calls into C (the test extension burns CPU holding the
    GIL, 12, 7 and 4 ms): native CPU, on those three lines."""
    run = profile_program(NATIVE_CALLS)
    v = _check_bound(run, "native_cpu")
    assert _named(run) == [run.lineno(f"@heavy{k}") for k in (1, 2, 3)], _describe(run)
    assert v["evidence"]["allocated_mb_per_cpu_sec"] < verdict.CHURN_MB_PER_CPU_SEC


SYSTEM_WAITS = """
import os, select, tempfile, threading, time

event = threading.Event()
path = os.path.join(tempfile.mkdtemp(), "f")
open(path, "wb").close()
for i in range(40):
    time.sleep(0.016)                    # @heavy1
    select.select([], [], [], 0.010)     # @heavy2
    event.wait(0.005)                    # @heavy3
    with open(path, "r+b") as f:
        f.write(b"x" * 4096)
    with open(path, "rb") as f:
        f.read()
os.unlink(path)
"""


@accuracy
def test_sleeps_and_io_are_system(profile_program):
    """Sleeping, waiting in select and on a lock, small file I/O: system time, on
    the three waits (16, 10 and 5 ms each round).  The file is rewritten in
    place: opened with "wb", truncating it, ext4 writes it out at close
    (auto_da_alloc), which took 28 ms a round here, bare, more than the waits."""
    run = profile_program(SYSTEM_WAITS)
    v = _check_bound(run, "system")
    assert _named(run) == [run.lineno(f"@heavy{k}") for k in (1, 2, 3)], _describe(run)
    assert v["evidence"]["overlapped_wait_sec"] < 0.05 * v["evidence"]["total_time_sec"], _describe(run)


GIL_CONTENTION = """
import threading, time

def spin():
    start = time.perf_counter(); acc = 0
    while time.perf_counter() - start < 1.5:
        for i in range(3000): acc += i * i   # @loop

threads = [threading.Thread(target=spin) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
"""


@accuracy
def test_threads_contending_for_the_gil_are_gil_wait(profile_program):
    """Four threads running bytecode take turns with the GIL: each waits for it
    about three quarters of its time.  The main thread's wait in join() is
    overlapped by the threads' work, so it is not the bound; the line named
    first, with most of the waiting, is the loop the threads wait on."""
    run = profile_program(GIL_CONTENTION, options=["--cpu-only"])
    v = _check_bound(run, "gil_wait")
    assert v["lines"][0]["lineno"] == run.lineno("@loop") and v["lines"][0]["percent"] >= 80, _describe(run)
    assert v["evidence"]["overlapped_wait_sec"] > 0.5 * run.profile["cpu_time_sec"]["system"], _describe(run)


CHURN = """
import time

start = time.process_time()
while time.process_time() - start < 1.5:
    for _ in range(20):
        a = bytearray(4 << 20)          # @heavy1
        b = [None] * 300_000            # @heavy2
        c = bytearray(1 << 20)          # @heavy3
        del a, b, c
"""


@accuracy
def test_building_and_dropping_buffers_is_allocation_churn(profile_program):
    """Buffers and lists built and dropped in a loop (4 MiB, 2.3 MiB and 1 MiB
    a round, all freed): allocation churn, on those three lines in that order."""
    run = profile_program(CHURN)
    v = _check_bound(run, "allocation_churn")
    assert _named(run) == [run.lineno(f"@heavy{k}") for k in (1, 2, 3)], _describe(run)
    assert v["evidence"]["freed_fraction"] >= 0.9
    assert all(p["unit"] == "MB" for p in v["lines"])


COPIES = """
import time
import numpy as np

big, mid = bytearray(8 << 20), bytearray(8 << 20)
src = np.ones(1 << 19)             # 4 MiB
dst = np.empty_like(src)
small = bytearray(2 << 20)
start = time.process_time()
while time.process_time() - start < 1.5:
    for _ in range(5):
        mid[:] = big                # @heavy1
        np.copyto(dst, src)         # @heavy2
        b = bytes(small)            # @heavy3 (bytes of a bytes object would be the same object)
"""


@accuracy
def test_memcpy_loop_is_copying(profile_program):
    """Copies into existing buffers and into new bytes (8, 4 and 2 MiB a round):
    copying, on those three lines in that order."""
    run = profile_program(COPIES)
    v = _check_bound(run, "copying")
    assert _named(run) == [run.lineno(f"@heavy{k}") for k in (1, 2, 3)], _describe(run)
    assert v["evidence"]["copy_mb_per_cpu_sec"] >= verdict.COPY_MB_PER_CPU_SEC


BUSY_MACHINE = """
import os, subprocess, time

n = 4 * (os.cpu_count() or 1)
hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]
try:
    start = time.perf_counter(); acc = 0
    while time.perf_counter() - start < 1.5:
        for i in range(3000): acc += i * i    # @loop
finally:
    for h in hogs:
        h.kill()
    for h in hogs:
        h.wait()
"""


@accuracy
def test_more_busy_processes_than_cpus_is_cpu_wait(profile_program):
    """The program starts four busy processes per CPU, then runs a Python loop:
    it gets about a fifth of a CPU, and waits for one the rest of the time.
    The run's bound is CPU wait, and the line that waited is the loop."""
    run = profile_program(BUSY_MACHINE, options=["--cpu-only", "--no-children"])
    v = run.profile["verdict"]
    why = _describe(run)
    print(why)
    assert v["bound"] == "cpu_wait", why
    assert v["lines"][0]["lineno"] == run.lineno("@loop") and v["lines"][0]["percent"] >= 80, why
    # What the program did with the little CPU it had (Python, and the system
    # time of starting the processes) is said too.
    assert "Of the time it ran or waited on its own: " in v["summary"], why


GPU_IDLE = """
import ctypes, time
nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.fake_nvml_busy(0, 1); time.sleep(0.3); nv.fake_nvml_busy(0, 0)   # @gpu
start = time.perf_counter(); acc = 0
while time.perf_counter() - start < 1.5:
    for i in range(3000): acc += i * i    # @heavy
"""


@accuracy
def test_gpu_idle_while_the_cpu_works(profile_program, fake_nvml_dir):
    """The NVML test double (tests/gpu/fake_nvml.c): the GPU is busy 0.3 s, then
    idle for 1.5 s of Python work.  The GPU idles while the CPU works, and the
    line named is the one keeping the CPU busy."""
    previous = os.environ.get("LD_LIBRARY_PATH")
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir) + (os.pathsep + previous if previous else "")}
    run = profile_program(GPU_IDLE, options=["--cpu-only", "--gpu"], env=env)
    v = _check_bound(run, "gpu_idle")
    assert v["evidence"]["gpu_busy_percent"] < verdict.GPU_BUSY, _describe(run)
    assert v["lines"][0]["lineno"] == run.lineno("@heavy"), _describe(run)


CHILD_WORKS = """
import multiprocessing, time

def work():
    start = time.perf_counter(); acc = 0
    while time.perf_counter() - start < 1.5:
        for i in range(3000): acc += i * i    # @heavy

if __name__ == "__main__":
    p = multiprocessing.get_context("fork").Process(target=work)
    p.start()
    p.join()                                  # @join
"""


@accuracy
def test_parent_waiting_for_its_child_is_not_system(profile_program):
    """Child processes merged: the parent waits 1.5 s in join() while its child
    runs Python.  The wait overlaps the program's own work, so the run is
    Python CPU, on the child's loop."""
    run = profile_program(CHILD_WORKS, options=["--cpu-only"])
    assert run.profile["process_count"] == 2, run.profile["processes"]
    v = _check_bound(run, "python_cpu")
    assert v["lines"][0]["lineno"] == run.lineno("@heavy"), _describe(run)


FOCUSED = """
import time
from pyrometer import profile

@profile
def light():
    time.sleep(0.001)                     # @light

start = time.perf_counter(); acc = 0
while time.perf_counter() - start < 1.0:
    for i in range(3000): acc += i * i    # @heavy
light()
"""


@accuracy
def test_verdict_is_the_whole_runs_with_profile(profile_program):
    """@profile narrows the report, not the verdict: the heavy line outside the
    decorated function is named, marked as not shown, and the summary says so."""
    run = profile_program(FOCUSED, options=["--cpu-only"])
    v = _check_bound(run, "python_cpu")
    first = v["lines"][0]
    assert first["lineno"] == run.lineno("@heavy") and first["shown"] is False, _describe(run)
    assert first["line"] == "" and "@heavy" not in json.dumps(run.profile), "source outside @profile in the profile"
    assert "not all of them in the @profile functions shown" in v["summary"]
    assert all(e["lineno"] != run.lineno("@heavy") for e in run.file()["lines"])


def test_too_brief_is_unknown(profile_program):
    run = profile_program("x = sum(range(1000))\n", options=["--cpu-only"])
    v = run.profile["verdict"]
    assert v["bound"] == "unknown" and v["lines"] == [], v
    assert v["summary"].startswith("Too few samples"), v["summary"]


# ---------------------------------------------------------------------------
# The rule on figures (no profiling)
# ---------------------------------------------------------------------------

def _run(python=0.0, native=0.0, system=0.0, gil_wait=0.0, cpu_wait=0.0, elapsed=None, threads=1, **extra):
    total = python + native + system + gil_wait + cpu_wait
    return {"total_time_sec": total, "elapsed_time_sec": total if elapsed is None else elapsed, "paused_sec": 0.0,
            "cpu_time_sec": {"python": python, "native": native, "system": system, "gil_wait": gil_wait,
                             "cpu_wait": cpu_wait},
            "cpu_samples": 200, "threads": threads, "process_count": 1, "n_cpus": 2, "memory": False, **extra}


def _line(lineno, **fields):
    return ("/src/app.py", {"lineno": lineno, "line": f"line {lineno}", **fields})


@pytest.mark.parametrize("figures, bound", [
    (dict(python=0.8, native=0.2), "python_cpu"),
    (dict(python=0.52, native=0.48), "none"),          # a split is no single bound, whichever side leads
    (dict(python=0.48, native=0.52), "none"),
    (dict(native=0.7, system=0.3), "native_cpu"),
    (dict(system=0.9, python=0.1), "system"),
    (dict(python=0.3, cpu_wait=0.7), "cpu_wait"),
    (dict(python=0.45, cpu_wait=0.55), "python_cpu"),  # CPU wait short of its margin: the program's own
    (dict(python=0.7, gil_wait=0.3, threads=4), "gil_wait"),
    (dict(python=0.7, gil_wait=0.3, threads=1), "python_cpu"),  # one thread waits for no GIL: CPU wait
])
def test_rule(figures, bound):
    v = verdict.decide(_run(**figures), [])
    assert v["bound"] == bound, v["summary"]


def test_gil_wait_of_one_thread_counts_as_cpu_wait():
    v = verdict.decide(_run(python=0.3, gil_wait=0.7), [])
    assert v["bound"] == "cpu_wait" and v["evidence"]["gil_wait_percent"] == 0.0, v


def test_waiting_for_other_threads_is_overlapped():
    """Two threads: one sleeps the whole run, one computes: wall 1 s, system 1 s
    overlapped entirely by the computing thread."""
    v = verdict.decide(_run(python=1.0, system=1.0, elapsed=1.0, threads=2), [_line(3, n_cpu_python_sec=1.0),
                                                                              _line(9, n_sys_sec=1.0)])
    assert v["bound"] == "python_cpu", v["summary"]
    assert v["evidence"]["overlapped_wait_sec"] == pytest.approx(1.0)
    assert [p["lineno"] for p in v["lines"]] == [3]
    assert v["summary"].endswith("Not counted: 1.00 s that threads waited for the program's own work elsewhere "
                                 "(join, queues, locks, child processes).")


def test_one_thread_waits_for_nothing_else():
    """One thread in one process, no native threads: what it waited for in
    system calls overlaps nothing, even where its lines add up to more than
    the wall time (a busy machine's clocks), so nothing is left out; with
    native threads' CPU beside it (a BLAS pool it waits for), the overlap
    is counted."""
    alone = _run(python=0.5, native=0.6, system=0.4, elapsed=1.3)
    v = verdict.decide(alone, [])
    assert v["evidence"]["overlapped_wait_sec"] == 0.0 and "Not counted" not in v["summary"], v
    pool = dict(alone, untracked_native_sec=0.5)
    assert verdict.decide(pool, [])["evidence"]["overlapped_wait_sec"] == pytest.approx(0.2)
    children = dict(alone, process_count=2)
    assert verdict.decide(children, [])["evidence"]["overlapped_wait_sec"] == pytest.approx(0.2)


def test_memory_rules():
    mb = 1 << 20
    churn = _run(native=1.0, memory=True)
    lines = [_line(4, n_cpu_native_sec=1.0, n_malloc_bytes=5000 * mb, n_free_bytes=5000 * mb, n_copy_bytes=0)]
    assert verdict.decide(churn, lines)["bound"] == "allocation_churn"
    # The same volume copied into new objects: the copy is the cost a user removes.
    lines[0][1]["n_copy_bytes"] = 5000 * mb
    assert verdict.decide(churn, lines)["bound"] == "copying"
    # Kept, not churned: not churn.
    lines[0][1].update(n_copy_bytes=0, n_free_bytes=100 * mb)
    assert verdict.decide(churn, lines)["bound"] == "native_cpu"
    # Below the rate: native.
    lines[0][1].update(n_malloc_bytes=1000 * mb, n_free_bytes=1000 * mb)
    assert verdict.decide(churn, lines)["bound"] == "native_cpu"


# ---------------------------------------------------------------------------
# Saved profiles and reports
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory, groundtruth_dir):
    """A real profile of the Python loop, memory on."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from conftest import program_env  # noqa: PLC0415
    d = tmp_path_factory.mktemp("verdict")
    (d / "prog.py").write_text(PYTHON_LOOP.lstrip("\n"))
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "--quiet", "--json", "--outfile", "p.json", "prog.py"],
                          cwd=d, capture_output=True, text=True, env=program_env(groundtruth_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return d / "p.json"


def test_older_profile_gets_a_verdict_from_its_figures(saved, tmp_path, run_pyrometer):
    """A profile written before the verdict (no field): pyrometer view makes it
    from the profile's own figures, the same as the one written with it."""
    profile = json.loads(saved.read_text())
    written = profile.pop("verdict")
    older = tmp_path / "older.json"
    older.write_text(json.dumps(profile))
    remade = model.load(str(older))["verdict"]
    assert remade["bound"] == written["bound"] and remade["own_bound"] == written["own_bound"]
    assert [(p["filename"], p["lineno"]) for p in remade["lines"]] == \
        [(p["filename"], p["lineno"]) for p in written["lines"]]
    proc = run_pyrometer(["view", older], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("verdict: "), proc.stdout[:500]


def test_reports_show_the_verdict_first(saved):
    profile = model.load(str(saved))
    v = profile["verdict"]
    out = text.render(profile, width=100).splitlines()
    assert out[1].startswith("verdict: "), out[:3]
    end = next(i for i, line in enumerate(out) if line.startswith("elapsed "))
    assert " ".join(line.strip() for line in out[1:end]) == "verdict: " + v["summary"], out[:end]
    data = html.page_data(profile)
    assert data["summary"]["verdict"] == v
    assert "verdictHtml" in html.render(profile)
    # --reduced-profile keeps the run's verdict.
    assert model.reduced(profile)["verdict"] == v


@pytest.mark.parametrize("damage, message", [
    (lambda v: v.update(bound="fastest"), "verdict.bound is 'fastest'"),
    (lambda v: v.update(own_bound=3), "verdict.own_bound has the wrong type"),
    (lambda v: v.update(summary=None), "verdict.summary has the wrong type"),
    (lambda v: v["evidence"].update(python_percent=-1), "verdict.evidence.python_percent is out of range"),
    (lambda v: v["evidence"].update(samples=1.5), "verdict.evidence.samples has the wrong type"),
    (lambda v: v.update(lines={}), "verdict.lines has the wrong type"),
    (lambda v: v["lines"].append({"filename": "/a.py", "lineno": -1, "value": 1.0}), "lineno is out of range"),
    (lambda v: v["lines"].append({"filename": "/a.py", "lineno": 2, "value": 1.0, "percent": 101}),
     "percent is out of range"),
    (lambda v: v["lines"].append({"lineno": 2, "value": 1.0}), "filename is missing"),
    (lambda v: v.update(lines=[[]]), "verdict.lines[0] has the wrong type"),
])
def test_check_refuses_a_damaged_verdict(saved, damage, message):
    profile = json.loads(saved.read_text())
    damage(profile["verdict"])
    with pytest.raises(model.ProfileError) as e:
        model.check(copy.deepcopy(profile), "p.json")
    assert message in str(e.value), str(e.value)


def test_view_of_a_damaged_verdict_is_one_line(saved, tmp_path, run_pyrometer):
    profile = json.loads(saved.read_text())
    profile["verdict"]["evidence"]["native_percent"] = "lots"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(profile))
    proc = run_pyrometer(["view", bad], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "verdict.evidence.native_percent" in proc.stderr, proc.stderr


def test_a_line_holding_all_of_it_is_at_most_100_percent():
    """100 * 0.007 / 0.007 is 100.00000000000001 in floating point: the share is
    kept within what model.check allows."""
    v = verdict.decide(_run(python=0.007, elapsed=0.007), [_line(3, n_cpu_python_sec=0.007)])
    assert v["lines"][0]["percent"] == 100.0 and v["evidence"]["lines_percent"] == 100.0
    schema._check_value(v, schema._VERDICT, "verdict")


def test_figures_too_large_to_judge_are_one_line(saved, tmp_path, run_pyrometer):
    """An older profile (no verdict) whose figures are each finite but whose
    sums are not: the verdict cannot be made, and view says so in one line."""
    profile = json.loads(saved.read_text())
    del profile["verdict"]
    profile["cpu_time_sec"].update(python=1.7e308, native=1.7e308)
    profile["total_time_sec"] = 1.7e308
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps(profile))
    for fmt in ([], ["--json"]):
        proc = run_pyrometer(["view", huge, *fmt], cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout[:300]
        assert proc.stderr.count("\n") == 1 and "too large to add up" in proc.stderr, proc.stderr


ASYNC_SLEEPS = """
import asyncio

async def tick(n, delay):
    for _ in range(n):
        await asyncio.sleep(delay)     # @await

async def main():
    await asyncio.gather(tick(100, 0.012), tick(60, 0.02))

asyncio.run(main())
"""


@accuracy
def test_idle_event_loop_is_system(profile_program):
    """Coroutines awaiting timers: the event loop sits idle (in no share of the
    profile) nearly all the run, and that waiting bounds it; the line named is
    where the coroutines wait."""
    run = profile_program(ASYNC_SLEEPS)
    v = _check_bound(run, "system")
    assert v["evidence"]["event_loop_idle_sec"] > 0.5 * run.profile["elapsed_time_sec"], _describe(run)
    assert v["lines"][0]["lineno"] == run.lineno("@await"), _describe(run)
    assert "idle event loops" in v["summary"], _describe(run)
    # Not "System time bounds this run" above a header that says system 0.000 s:
    # the idle loop is in no share of the profile, and the words say it waits.
    assert v["summary"].startswith("Waiting bounds this run: "), _describe(run)
    assert run.profile["cpu_time_sec"]["system"] < 0.1 * run.profile["elapsed_time_sec"], _describe(run)
