"""CPU accuracy against ground truth.

Each test profiles a small program whose truth it controls (the test-only
_groundtruth extension burns known native CPU, with or without the GIL; Python
work is timed by the program itself with time.thread_time()) and compares the
profile with that truth.  Tolerances are stated in each assertion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import program_env

pytestmark = pytest.mark.accuracy


def total(entry: dict) -> float:
    """Seconds of any kind charged to a line or function."""
    return entry["n_cpu_python_sec"] + entry["n_cpu_native_sec"] + entry["n_sys_sec"]


def cpu(entry: dict) -> float:
    """Seconds of CPU (Python + native) charged to a line or function."""
    return entry["n_cpu_python_sec"] + entry["n_cpu_native_sec"]


def assert_cpu_within_process(run) -> None:
    """The CPU charged to the program can never exceed the CPU its process used
    (measured by the core itself over the same period); 1% + 5 ms for clock skew."""
    p = run.profile
    charged = p["cpu_time_sec"]["python"] + p["cpu_time_sec"]["native"]
    used = p["process_cpu_time_sec"]
    assert charged <= used * 1.01 + 0.005, (
        f"the profile charges {charged:.3f}s of CPU but the process used only {used:.3f}s "
        f"(untracked native {p.get('untracked_native_sec', 0):.3f}s):\n  {run.describe()}")


def all_lines(profile: dict):
    for filename, f in profile["files"].items():
        for e in f["lines"]:
            yield filename, e


# ---------------------------------------------------------------------------
# (a) native with the GIL vs pure Python, 70/30
# ---------------------------------------------------------------------------

NATIVE_PYTHON_SPLIT = """
import json, sys
import _groundtruth as gt

NATIVE_MS = 7.0
PYTHON_S = 0.003   # per iteration: 7 ms native + 3 ms Python = 70/30
ITERATIONS = int(sys.argv[2])

def calibrate():
    # Iterations of the Python line's loop that take PYTHON_S of this thread's CPU,
    # timed between two zero-length spins (which read the thread's CPU clock).
    acc, n = 0, 20000
    for i in range(n): acc += i * i % 7
    while True:
        _, t0 = gt.spin_gil(0)
        for i in range(n): acc += i * i % 7
        t1, _ = gt.spin_gil(0)
        if t1 - t0 > 0.02:
            return max(1, int(n * PYTHON_S / (t1 - t0)))
        n *= 2

def main(n):
    # The truth comes from the spins themselves: each returns the thread's CPU
    # clock before and after, so the native part is end - start and the Python
    # part is the CPU between one spin's end and the next one's start.  No clock
    # is read from Python inside the loop.
    native = python = 0.0
    acc = 0
    prev_end = None
    for k in range(ITERATIONS + 1):
        start, end = gt.spin_gil(NATIVE_MS if k < ITERATIONS else 0)  # @native
        if prev_end is not None:
            py = start - prev_end
            python += py
            # keep the Python part at PYTHON_S per iteration whatever the machine does
            n = max(1, int(n * (PYTHON_S / max(py, 1e-4)) ** 0.5))
        native += end - start
        if k == ITERATIONS:
            break
        for i in range(n): acc += i * i % 7  # @python
        prev_end = end
    with open(sys.argv[1], "w") as f:
        json.dump({"native": native, "python": python}, f)

main(calibrate())
"""


# Why these tolerances: the split is estimated by sampling.  Each sample charges
# about one sampling interval to what the program was doing, so with N samples the
# split of an unbiased sampler has a standard deviation of about
# sqrt(2 * 0.7 * 0.3 / N) (exponential intervals double the binomial variance):
# 4.5 points for 2 s at the default 10 ms.  Simulated, a 5-point tolerance fails
# 27% of an unbiased sampler's 2 s runs at 10 ms, but 0.4% at 2 ms.  So the
# 5-point claim is tested at a 2 ms sampling interval, and the default interval
# gets 6 s and a 7-point tolerance (2.7 standard deviations, 0.8% of unbiased
# runs fail).
@pytest.mark.parametrize("rate, cpu_seconds, split_tolerance, seconds_tolerance", [
    ("0.002", 2.0, 0.05, 0.15),
    ("0.01", 6.0, 0.07, 0.25),
], ids=["rate-2ms", "rate-default"])
def test_native_with_gil_vs_python_split(profile_program, tmp_path, rate, cpu_seconds,
                                         split_tolerance, seconds_tolerance):
    truth_file = tmp_path / "truth.json"
    options = [] if rate == "0.01" else ["--cpu-sampling-rate", rate]
    iterations = int(cpu_seconds / 0.010)
    run = profile_program(NATIVE_PYTHON_SPLIT, options=options, args=[str(truth_file), str(iterations)])
    truth = json.loads(truth_file.read_text())
    true_split = truth["native"] / (truth["native"] + truth["python"])
    native_line = run.line("# @native")
    python_line = run.line("# @python")
    info = run.describe("# @native", "# @python") + (
        f"\n  truth: native {truth['native']:.3f}s python {truth['python']:.3f}s split {true_split:.3f}")

    # The program keeps its own Python part at 3 ms per 7 ms of native work.
    assert abs(true_split - 0.70) < 0.03, f"test calibration failed, truth is not 70/30:\n  {info}"

    reported_native = native_line["n_cpu_native_sec"]
    reported_python = python_line["n_cpu_python_sec"]
    assert reported_native + reported_python > 0, f"nothing charged to the two lines:\n  {info}"
    split = reported_native / (reported_native + reported_python)
    print(f"70/30 split at {rate} s: truth {true_split:.3f}, reported {split:.3f} "
          f"(native line {reported_native:.3f}s vs {truth['native']:.3f}s true, "
          f"Python line {reported_python:.3f}s vs {truth['python']:.3f}s true, "
          f"{run.profile['cpu_samples']} samples)")
    assert abs(split - true_split) <= split_tolerance, (
        f"native/Python split {split:.3f} is more than {split_tolerance * 100:.0f} points "
        f"from the true {true_split:.3f}:\n  {info}")

    # Each line's CPU is of its own kind: at least 85% of it.  (System time is
    # left out: on a busy machine the program also waits for a CPU, and that
    # wall time off the CPU is rightly reported as system time on both lines.)
    assert native_line["n_cpu_native_sec"] >= 0.85 * cpu(native_line), (
        f"the spin_gil line's CPU is not mostly native:\n  {info}")
    assert native_line["n_cpu_percent_c"] > native_line["n_cpu_percent_python"]
    assert python_line["n_cpu_python_sec"] >= 0.85 * cpu(python_line), (
        f"the pure-Python line's CPU is not mostly Python:\n  {info}")
    assert python_line["n_cpu_percent_python"] > python_line["n_cpu_percent_c"]

    # Each line's seconds against the CPU it really used.
    assert reported_native == pytest.approx(truth["native"], rel=seconds_tolerance), (
        f"native seconds off by more than {seconds_tolerance:.0%}:\n  {info}")
    assert reported_python == pytest.approx(truth["python"], rel=seconds_tolerance), (
        f"Python seconds off by more than {seconds_tolerance:.0%}:\n  {info}")


# ---------------------------------------------------------------------------
# (b) native code that releases the GIL, on the main thread and on another thread
# ---------------------------------------------------------------------------

SPIN_NOGIL_MAIN = """
import json, sys, time
import _groundtruth as gt

w0 = time.perf_counter()
start, end = gt.spin_nogil(1500)  # @spin
wall = time.perf_counter() - w0
with open(sys.argv[1], "w") as f:
    json.dump({"cpu": end - start, "wall": wall}, f)
"""

SPIN_NOGIL_THREAD = """
import json, sys, threading, time
import _groundtruth as gt

truth = {}

def worker():
    w0 = time.perf_counter()
    start, end = gt.spin_nogil(1500)  # @spin
    truth.update(cpu=end - start, wall=time.perf_counter() - w0)

t = threading.Thread(target=worker)
t.start()
t.join()  # @join
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
"""


@pytest.mark.parametrize("source", [SPIN_NOGIL_MAIN, SPIN_NOGIL_THREAD], ids=["main", "thread"])
def test_native_without_gil_is_native(profile_program, tmp_path, source):
    truth_file = tmp_path / "truth.json"
    run = profile_program(source, args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    # On a busy machine the spinning thread waits for a CPU now and then; that
    # wait is wall time off the CPU, which the profile rightly calls system time.
    off_cpu = max(0.0, truth["wall"] - truth["cpu"])
    spin = run.line("# @spin")
    info = run.describe("# @spin", *(["# @join"] if "@join" in source else [])) + (
        f"\n  truth: cpu {truth['cpu']:.3f}s wall {truth['wall']:.3f}s (off CPU {off_cpu:.3f}s)")
    print(f"spin_nogil(1500): native {spin['n_cpu_native_sec']:.3f}s python {spin['n_cpu_python_sec']:.3f}s "
          f"system {spin['n_sys_sec']:.3f}s; truth cpu {truth['cpu']:.3f}s, off CPU {off_cpu:.3f}s")
    # 1.5 s of CPU was burnt in C: native, within 15%.
    assert spin["n_cpu_native_sec"] == pytest.approx(truth["cpu"], rel=0.15), f"native seconds off:\n  {info}"
    assert spin["n_cpu_percent_c"] > 5 * spin["n_cpu_percent_python"], (
        f"spin_nogil line: native does not dominate Python time:\n  {info}")
    # Native, not system time: system time beyond the thread's real time off the
    # CPU must be small next to the native time.
    excess_system = max(0.0, spin["n_sys_sec"] - off_cpu)
    assert spin["n_cpu_native_sec"] > 5 * excess_system, (
        f"spin_nogil line: native does not dominate system time:\n  {info}")
    if off_cpu < 0.05 * truth["wall"]:  # an idle machine: the plain statement holds
        assert spin["n_cpu_percent_c"] > 5 * spin["n_sys_percent"], (
            f"spin_nogil line: native does not dominate system time:\n  {info}")
    if "@join" in source:
        join = run.line("# @join")
        assert cpu(join) < 0.05 * truth["cpu"], f"the join() line got CPU time it did not use:\n  {info}"


# ---------------------------------------------------------------------------
# (c) blocking: sleep and a blocking read are system time on their own lines
# ---------------------------------------------------------------------------

BLOCKING = """
import os, threading, time

def writer(fd):
    time.sleep(1.0)
    os.write(fd, b"x")

time.sleep(1.0)  # @sleep
r, w = os.pipe()
t = threading.Thread(target=writer, args=(w,))
t.start()
os.read(r, 1)  # @read
t.join()
"""


def test_blocking_is_system_time(profile_program):
    run = profile_program(BLOCKING)
    info = run.describe("# @sleep", "# @read")
    for marker in ("# @sleep", "# @read"):
        e = run.line(marker)
        assert e["n_sys_percent"] > 5 * (e["n_cpu_percent_python"] + e["n_cpu_percent_c"]), (
            f"{marker}: blocking is not reported as system time:\n  {info}")
        # 1 s of blocking: within 20%.
        assert e["n_sys_sec"] == pytest.approx(1.0, rel=0.20), f"{marker}: system seconds off:\n  {info}"


WAITS_THEN_WORK = """
import json, sys, time

def work(seconds):
    end = time.perf_counter() + seconds
    acc = 0
    while time.perf_counter() < end:
        for i in range(200): acc += i * i  # @work
    return acc

truth = {"rest": 0.0, "work": 0.0}
for wait in (1.2, 0.8):
    t = time.perf_counter()
    time.sleep(wait)  # @rest
    u = time.perf_counter()
    work(0.4)
    truth["rest"] += u - t
    truth["work"] += time.perf_counter() - u
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
"""


def test_a_long_wait_is_peeked_less_often_and_still_placed(profile_program, tmp_path):
    """The main thread blocked in one place for long: its peeks stand for
    longer strata (csrc/sampler/spread.c, SPREAD_LONGER_AFTER), so they are
    fewer than one a period, and the lines keep their shares of the time."""
    truth_file = tmp_path / "truth.json"
    run = profile_program(WAITS_THEN_WORK, options=["--cpu-only"], args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    p = run.profile
    info = run.describe("# @rest", "# @work")
    total = p["total_time_sec"]
    for name, seconds in truth.items():
        e = run.line(f"# @{name}")
        share = (e["n_cpu_percent_python"] + e["n_cpu_percent_c"] + e["n_sys_percent"]
                 + e["n_gil_wait_percent"] + e["n_cpu_wait_percent"])
        assert share == pytest.approx(100.0 * seconds / total, abs=2.0), f"{name}:\n  {info}"
    # One peek a millisecond would be about 2,800; the 2 s of sleep at one
    # peek each 8 ms at most are about 300 of them.
    assert 0 < p["cpu_peeks"] < 0.6 * 1000 * total, f"{p['cpu_peeks']} peeks in {total:.2f} s:\n  {info}"


# ---------------------------------------------------------------------------
# (d) threads running Python: each gets its own CPU on its own lines
# ---------------------------------------------------------------------------

TWO_THREADS = """
import json, sys, threading, time

RUN_CPU_S = 1.0
measured = {}

# Both hot lines are pure bytecode (no calls), so their time is Python time; each
# thread reads its CPU clock only every millisecond or so.
def sums():
    start = time.thread_time()
    total = 0
    while time.thread_time() - start < RUN_CPU_S:
        for i in range(20000): total += i * i  # @sums
    measured["sums"] = time.thread_time() - start

def strings():
    start = time.thread_time()
    text = "abc"
    while time.thread_time() - start < RUN_CPU_S:
        for i in range(20000): text = (text + "xyz")[-40:]  # @strings
    measured["strings"] = time.thread_time() - start

threads = [threading.Thread(target=sums), threading.Thread(target=strings)]
for t in threads:
    t.start()
for t in threads:
    t.join()  # @join
with open(sys.argv[1], "w") as f:
    json.dump(measured, f)
"""


def test_threads_get_their_own_cpu(profile_program, tmp_path):
    truth_file = tmp_path / "truth.json"
    run = profile_program(TWO_THREADS, args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    p = run.profile
    info = run.describe("# @sums", "# @strings", "# @join") + f"\n  truth (thread CPU s): {truth}"
    for name in ("sums", "strings"):
        f = run.function(name)
        line = run.line(f"# @{name}")
        print(f"thread {name}: reported CPU {cpu(f):.3f}s, measured {truth[name]:.3f}s")
        assert cpu(line) > 0.5 * truth[name], f"{name}: its hot line got little CPU:\n  {info}"
        # Tolerance: 25% of the thread's own CPU time.
        assert cpu(f) == pytest.approx(truth[name], rel=0.25), (
            f"{name}: reported CPU {cpu(f):.3f}s vs the thread's own {truth[name]:.3f}s:\n  {info}")
        assert f["n_cpu_python_sec"] > 0.8 * cpu(f), f"{name}: pure Python reported as native:\n  {info}"
    join = run.line("# @join")
    # The main thread only waits: no CPU worth mentioning (< 5% of the run's total).
    assert cpu(join) < 0.05 * p["total_time_sec"], f"the join() line got CPU time:\n  {info}"


def test_threads_get_their_own_cpu_on_a_busy_machine(profile_program, tmp_path, busy_machine):
    """The same two threads with every CPU busy besides.  A thread whose time
    slice runs out is preempted where the scheduler first notices, which is in a
    system call that reads its clock (the loop's time.thread_time()) more often
    than at a tick, and it stays there, off its CPU, while the other processes
    run: found there holding the GIL, its window's CPU was charged as native time
    on that call (Python 0.60-0.66 of the threads' CPU on 3.11, 0.64-0.77 on
    3.14, and 0.6 s of system time a thread on 3.11).  A holder found off its
    CPU (its clock did not move while it was read) is waiting there, not
    running.  Tolerance: as above, 80% Python; system time under 5%."""
    truth_file = tmp_path / "truth.json"
    run = profile_program(TWO_THREADS, args=[str(truth_file)])
    info = run.describe("# @sums", "# @strings") + f"\n  {busy_machine} competing processes"
    for name in ("sums", "strings"):
        f = run.function(name)
        print(f"thread {name}: Python {f['n_cpu_python_sec']:.3f}s of {cpu(f):.3f}s, system {f['n_sys_sec']:.3f}s")
        assert f["n_cpu_python_sec"] > 0.8 * cpu(f), f"{name}: pure Python reported as native:\n  {info}"
        assert f["n_sys_sec"] <= 0.05 * total_with_waits(f), f"{name}: waiting read as system:\n  {info}"


NATIVE_BESIDE_PYTHON = """
import threading, time

def native():
    start = time.thread_time()
    while time.thread_time() - start < 1.0:
        sum(range(3_000_000))  # @native

def python():
    start = time.thread_time(); total = 0
    while time.thread_time() - start < 1.0:
        for i in range(20000): total += i * i  # @python

threads = [threading.Thread(target=native), threading.Thread(target=python)]
for t in threads: t.start()
for t in threads: t.join()
"""


def test_a_native_thread_beside_a_python_thread(profile_program):
    """One thread in a C loop that keeps the GIL 10-30 ms at a time (sum over a
    range), one running bytecode: each is what it runs, and neither waits as
    system time (none of their calls blocks: their time off the CPU is the
    GIL's).  Read before: the native thread 0.22-0.32 s of system time beside
    its 1 s of CPU, the Python thread 15% native and 0.4-0.6 s of system time
    (its waits for the GIL after the range() call, and holders in a call, were
    taken for a call's).  Tolerances: 90% of each thread's CPU of its kind,
    system time under 5% of each one's time."""
    run = profile_program(NATIVE_BESIDE_PYTHON, options=["--cpu-only"])
    info = run.describe("# @native", "# @python")
    native, python = run.function("native"), run.function("python")
    for name, f in (("native", native), ("python", python)):
        print(f"{name}: Python {f['n_cpu_python_sec']:.3f}s native {f['n_cpu_native_sec']:.3f}s "
              f"system {f['n_sys_sec']:.3f}s GIL wait {f['n_gil_wait_sec']:.3f}s")
        assert f["n_sys_sec"] <= 0.05 * total_with_waits(f), f"{name}: waiting read as system:\n  {info}"
    assert native["n_cpu_native_sec"] >= 0.9 * cpu(native), f"the C loop is not native:\n  {info}"
    assert python["n_cpu_python_sec"] >= 0.9 * cpu(python), f"the bytecode loop is not Python:\n  {info}"


WHILE_LOOP_THREAD = """
import threading, time

def counting():
    i, n = 0, 0
    deadline = time.perf_counter() + 0.8
    while time.perf_counter() < deadline:
        i = 0
        while i < 20000: i += 1  # @while

t = threading.Thread(target=counting)
t.start()
t.join()
"""


def test_while_loop_in_a_thread_is_python(profile_program):
    """A thread running a bare `while` loop parks, when it hands over the GIL, at
    the loop's conditional jump (POP_JUMP_IF_TRUE on 3.10, POP_JUMP_BACKWARD_IF_TRUE
    on 3.11, JUMP_BACKWARD on 3.12+): that is running Python, not native code.
    Tolerance: 85% of the line's CPU is Python."""
    run = profile_program(WHILE_LOOP_THREAD)
    line = run.line("# @while")
    info = run.describe("# @while")
    assert cpu(line) > 0.3, f"the loop line got little CPU:\n  {info}"
    assert line["n_cpu_python_sec"] >= 0.85 * cpu(line), f"a `while` loop reported as native:\n  {info}"


# ---------------------------------------------------------------------------
# (e) --use-virtual-time: no system time at all
# ---------------------------------------------------------------------------

VIRTUAL_TIME = """
import time

def work():
    start = time.thread_time()
    total = 0
    while time.thread_time() - start < 1.0:
        for i in range(20000): total += i * i  # @work

time.sleep(1.0)  # @sleep
work()
"""


def test_virtual_time_has_no_system_time(profile_program):
    run = profile_program(VIRTUAL_TIME, options=["--use-virtual-time"])
    p = run.profile
    info = run.describe("# @sleep", "# @work")
    assert p["cpu_time_sec"]["system"] < 0.02, f"system time reported with --use-virtual-time:\n  {info}"
    for filename, e in all_lines(p):
        assert e["n_sys_sec"] < 0.01, f"{filename}:{e['lineno']} has system time {e['n_sys_sec']:.3f}s"
    sleep = run.line("# @sleep")
    assert total(sleep) < 0.05, f"the sleep line has time under --use-virtual-time:\n  {info}"
    work = run.function("work")
    assert cpu(work) == pytest.approx(1.0, rel=0.15), f"the work function's CPU is off:\n  {info}"
    assert cpu(run.line("# @work")) > 0.8 * cpu(work), f"the work line is not where the work is:\n  {info}"


# ---------------------------------------------------------------------------
# (g) a program with its own SIGALRM timer keeps getting its signals
# ---------------------------------------------------------------------------

OWN_TIMER = """
import signal, time

count = 0

def on_alarm(signum, frame):
    global count
    count += 1

signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
start = time.perf_counter()
total = 0
while time.perf_counter() - start < 1.5:
    for i in range(1000): total += i * i  # @work
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print(f"alarms={count}")
"""


def test_program_own_sigalrm_timer_still_works(profile_program):
    run = profile_program(OWN_TIMER)
    out = run.proc.stdout
    assert "alarms=" in out, f"the program's output is missing:\n{out}\n{run.proc.stderr}"
    count = int(out.split("alarms=")[1].split()[0])
    print(f"SIGALRM handler calls in 1.5 s at 10 ms: {count}")
    # 150 expected; more than 50 proves the timer is the program's and still fires.
    assert count > 50, f"the program's own SIGALRM handler ran only {count} times"
    work = run.line("# @work")
    assert work["n_samples"] > 0 and cpu(work) > 0.5 * run.profile["process_cpu_time_sec"], (
        f"the work line was not sampled:\n  {run.describe('# @work')}")


# ---------------------------------------------------------------------------
# The CPU charged never exceeds the CPU the process used
# ---------------------------------------------------------------------------

ONLY_SLEEPS = """
import time
time.sleep(1.0)  # @line
"""

NOGIL_ON_MAIN = """
import _groundtruth as gt
gt.spin_nogil(1000)  # @line
"""

NOGIL_IN_THREAD = """
import threading
import _groundtruth as gt
t = threading.Thread(target=gt.spin_nogil, args=(1000,))
t.start()
t.join()  # @line
"""


@pytest.mark.parametrize("source", [ONLY_SLEEPS, NOGIL_ON_MAIN, NOGIL_IN_THREAD],
                         ids=["sleep", "nogil-main", "nogil-thread"])
def test_charged_cpu_never_exceeds_process_cpu(profile_program, source):
    run = profile_program(source)
    p = run.profile
    print(f"charged CPU {p['cpu_time_sec']['python'] + p['cpu_time_sec']['native']:.3f}s, "
          f"process CPU {p['process_cpu_time_sec']:.3f}s, untracked native {p['untracked_native_sec']:.3f}s")
    assert_cpu_within_process(run)


# ---------------------------------------------------------------------------
# (h) a busy machine: where samples land must not depend on the program's
#     system calls
# ---------------------------------------------------------------------------

CHEAP_SYSCALL_CHECK = """
import json, sys, time

def work():
    checks = 0
    total = 0
    start = time.thread_time()
    while time.thread_time() - start < 1.5:  # @check
        checks += 1
        for i in range(2000): total += i * i  # @work
    return checks, time.thread_time() - start

def cost_of_check(n=20000):
    t0 = time.thread_time()
    for _ in range(n):
        time.thread_time() - t0 < 1.5
    return (time.thread_time() - t0) / n

checks, used = work()
with open(sys.argv[1], "w") as f:
    json.dump({"checks": checks, "cpu": used, "per_check": cost_of_check()}, f)
"""


@pytest.fixture
def busy_machine():
    """Every CPU busy with another process for the duration of the test, as on a
    shared CI runner (the processes are this test's own and are ended by it)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(os.cpu_count() or 1)]
    try:
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def test_busy_machine_skew_stays_within_its_known_limit(profile_program, tmp_path, busy_machine):
    """The check line reads the thread's CPU clock (a system call) once per ~100 us
    of work on the next line; it costs well under 1% of the loop.  When every CPU
    is busy, the kernel tends to run the sampler thread when the main thread
    enters the kernel, so requests cluster right after the check's system call
    and the check line is over-reported: a known limit (docs/how-it-works.md,
    Known limits).  This was a non-strict xfail, which passed or failed with the
    machine's load and so could not fail.  How large the skew is depends on the
    load: 9% for a 0.4% line when first measured, 29% to 51% on a 2-core machine
    shared with other jobs (the code before and after issue 12 alike).  What
    must hold whatever the load: the loop is sampled, and the work line keeps at
    least 30% of it (tolerance: the check line at most 70 points over its true
    share; requests landing at the system calls altogether give it all)."""
    truth_file = tmp_path / "truth.json"
    run = profile_program(CHEAP_SYSCALL_CHECK, args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    true_share = truth["checks"] * truth["per_check"] / truth["cpu"]
    check, work = run.line("# @check"), run.line("# @work")
    reported_share = cpu(check) / max(cpu(check) + cpu(work), 1e-9)
    info = run.describe("# @check", "# @work") + (
        f"\n  truth: check line {true_share:.1%} of {truth['cpu']:.3f}s CPU "
        f"({truth['checks']} checks at {truth['per_check'] * 1e9:.0f} ns); "
        f"{busy_machine} competing processes")
    print(f"busy machine: check line reported {reported_share:.1%}, true {true_share:.1%}")
    assert cpu(check) + cpu(work) > 0.5 * truth["cpu"], f"the loop was hardly sampled:\n  {info}"
    assert reported_share <= true_share + 0.70, (
        f"the cheap check line got {reported_share:.1%} of the CPU, truly {true_share:.1%}:\n  {info}")


# ---------------------------------------------------------------------------
# (g) short native calls: the kind is where the main thread stood at the request
# ---------------------------------------------------------------------------

SHORT_CALLS = """
import json, sys, time
import _groundtruth as gt

PHASE_S = float(sys.argv[2])

def calls_for(us):
    # How many calls of `us` microseconds fill PHASE_S (the spins burn CPU).
    return max(1, int(PHASE_S / (us * 1e-6)))

def python_iterations():
    acc, n = 0, 20000
    t0 = time.perf_counter()
    for i in range(n): acc += i * i % 7
    return max(1, int(n * PHASE_S / (time.perf_counter() - t0)))

def c20(n):
    for _ in range(n): gt.spin_gil(0.02)  # @c20
def c50(n):
    for _ in range(n): gt.spin_gil(0.05)  # @c50
def c150(n):
    for _ in range(n): gt.spin_gil(0.15)  # @c150
def c1000(n):
    for _ in range(n): gt.spin_gil(1.0)  # @c1000
def py(n):
    acc = 0
    for i in range(n): acc += i * i % 7  # @py

wall = {}
for name, fn, n in [("c20", c20, calls_for(20)), ("c50", c50, calls_for(50)),
                    ("c150", c150, calls_for(150)), ("c1000", c1000, calls_for(1000)),
                    ("py", py, python_iterations())]:
    t0 = time.perf_counter()
    fn(n)
    wall[name] = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    json.dump(wall, f)
"""

SHORT_CALL_LINES = ["c20", "c50", "c150", "c1000"]


def _short_calls_run(profile_program, tmp_path, phase_s: float, options: list[str]):
    truth_file = tmp_path / "truth.json"
    run = profile_program(SHORT_CALLS, options=["--cpu-only", *options], args=[str(truth_file), str(phase_s)])
    return run, json.loads(truth_file.read_text())


def test_short_native_calls_are_native(profile_program, tmp_path):
    """Calls of 20 us to 1 ms into C holding the GIL are native at the default
    rate, however short: a request that lands in one is answered a few
    microseconds later, when the call ends, so the answer's delay cannot tell;
    where the main thread stood at the request can.  A pure-bytecode line stays
    Python.  Tolerance: 0.9 of each line's CPU of its own kind (the calls' own
    Python part, the loop and the argument, is under 3% at 20 us)."""
    run, wall = _short_calls_run(profile_program, tmp_path, 1.0, [])
    markers = [f"# @{name}" for name in SHORT_CALL_LINES + ["py"]]
    info = run.describe(*markers) + f"\n  program's own timing: {wall}"
    for name in SHORT_CALL_LINES:
        line = run.line(f"# @{name}")
        share = line["n_cpu_native_sec"] / max(cpu(line), 1e-9)
        print(f"{name}: native share {share:.3f} of {cpu(line):.3f}s CPU")
        assert share >= 0.9, f"calls of {name[1:]} us: native share {share:.3f} < 0.9:\n  {info}"
    py = run.line("# @py")
    py_share = py["n_cpu_python_sec"] / max(cpu(py), 1e-9)
    print(f"py: Python share {py_share:.3f}")
    assert py_share >= 0.9, f"pure-bytecode line: Python share {py_share:.3f} < 0.9:\n  {info}"


def test_short_native_calls_time_shares(profile_program, tmp_path):
    """Each line's share of the run within 3 points of the program's own timing.
    At a 2 ms rate over 7.5 s (about 3,700 samples) the standard deviation of a
    20% share is under 1 point (sqrt(2 p (1-p) / N) for exponential intervals)."""
    run, wall = _short_calls_run(profile_program, tmp_path, 1.5, ["--cpu-sampling-rate", "0.002"])
    markers = [f"# @{name}" for name in SHORT_CALL_LINES + ["py"]]
    info = run.describe(*markers) + f"\n  program's own timing: {wall}"
    reported = {name: total(run.line(f"# @{name}")) + waits(run.line(f"# @{name}")) for name in wall}
    all_reported, all_true = sum(reported.values()), sum(wall.values())
    for name in wall:
        true_share, share = wall[name] / all_true, reported[name] / all_reported
        print(f"{name}: share {share:.3f}, true {true_share:.3f}")
        assert abs(share - true_share) <= 0.03, (
            f"{name}: {share:.3f} of the run, truly {true_share:.3f}:\n  {info}")


# ---------------------------------------------------------------------------
# (h) waiting is not system time: the GIL, and a CPU on a busy machine
# ---------------------------------------------------------------------------

def waits(entry: dict) -> float:
    return entry.get("n_gil_wait_sec", 0.0) + entry.get("n_cpu_wait_sec", 0.0)


GIL_CONTENTION = """
import threading, time

def spin():
    t0 = time.perf_counter(); acc = 0
    while time.perf_counter() - t0 < 1.2:
        for i in range(5000): acc += {body}  # @loop

threads = [threading.Thread(target=spin) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
"""


@pytest.mark.parametrize("body", ["i * i", "abs(i)"], ids=["bytecode", "builtin_call"])
def test_gil_contention_is_gil_wait(profile_program, body):
    """Two threads running bytecode share one GIL: each waits for it about half of
    its time.  That waiting is its own figure, not system time.  With a builtin
    called in the loop, since 3.11 a thread also hands the GIL over right after
    the call returns, and waits standing on the call, where a thread blocked in
    a call that released the GIL stands too.  Which it is, the kernel says: the
    thread asleep on the GIL's own lock or condition variable waits for the GIL
    (/proc/self/task/<tid>/syscall: a futex on an address in the GIL's state);
    read by position alone, 20-45% of that loop's time was system time (3.11,
    3.12).  Tolerances: the loop line's waiting is at least 30% of its time (the
    truth is near 50%), its system time under 5%."""
    run = profile_program(GIL_CONTENTION.replace("{body}", body), options=["--cpu-only"])
    loop = run.line("# @loop")
    info = run.describe("# @loop") + f"\n  loop waits: GIL {loop['n_gil_wait_sec']:.3f}s CPU {loop['n_cpu_wait_sec']:.3f}s"
    print(info)
    assert waits(loop) >= 0.3 * total_with_waits(loop), info
    assert loop["n_sys_sec"] <= 0.05 * total_with_waits(loop), info
    assert run.profile["cpu_time_sec"]["gil_wait"] > 0.5, info


def total_with_waits(entry: dict) -> float:
    return total(entry) + waits(entry)


# Threads that run none of the program's code: a pool's (concurrent.futures
# here; joblib's threading backend under scikit-learn's n_jobs, dask's threaded
# scheduler) and a thread whose target is a C function.
LIBRARY_THREADS = """
import threading
from concurrent.futures import ThreadPoolExecutor
import _groundtruth as gt

with ThreadPoolExecutor(2) as pool:
    list(pool.map(gt.spin_nogil, [400, 400]))  # @map

worker = threading.Thread(target=gt.spin_nogil, args=(300,))
worker.start()  # @start
worker.join()
"""


def test_threads_that_run_no_program_code_charge_the_line_that_started_them(profile_program):
    """A thread whose stack holds no frame of the program had its CPU charged to
    no line: RandomForestClassifier(n_jobs=2).fit left 1.7 s of native CPU
    unattributed and its line 1-2% native, and the verdict named the import
    line.  Each thread start now tells the core where it was called from
    (origins.c), and such a thread's CPU goes there (its waits do not: an idle
    pool waits for work all run long).  Truth: 0.8 s of CPU on the map's line,
    0.3 s on the start's.  Tolerances: each line at least 85% of its truth as
    native time, at most 0.1 s of native time unattributed."""
    run = profile_program(LIBRARY_THREADS, options=["--cpu-only"])
    info = run.describe("# @map", "# @start") + f"\n  unattributed: {run.profile['unattributed']}"
    assert run.line("# @map")["n_cpu_native_sec"] >= 0.85 * 0.8, info
    assert run.line("# @start")["n_cpu_native_sec"] >= 0.85 * 0.3, info
    assert run.profile["unattributed"]["native_sec"] <= 0.1, info


# The main thread waits for the GIL standing on a call: it sleeps 1 ms (the
# GIL released), then a worker's C call keeps the GIL 50 ms (as a numpy
# operation or a large list's `*` does), and the main thread, done sleeping,
# waits for it.
MAIN_WAITS_FOR_A_WORKERS_GIL = """
import threading, time
import _groundtruth as gt

def work():
    for _ in range(16):
        gt.spin_gil(50)

worker = threading.Thread(target=work)
worker.start()
while worker.is_alive():
    time.sleep(0.001)  # @sleep
worker.join()
"""


def test_the_main_thread_waiting_for_a_workers_gil_is_gil_wait(profile_program):
    """The main thread's own wait for the GIL, standing on a call: the sampler
    thread reads its /proc/self/task/<tid>/syscall at the request and at each
    look while the request waits, as it does for the other threads; asleep on
    the GIL's state, the main thread's time off the CPU is GIL wait.  Read by
    its position (a call), all of it was system time: `t.start()` beside a
    worker's 0.4 s operator read 38% system, no GIL wait.  Truth: about 2% of
    the loop's time sleeping, 98% waiting for the GIL.  Tolerances: the sleep
    line's GIL wait at least 60% of its time, its system time at most 30%."""
    run = profile_program(MAIN_WAITS_FOR_A_WORKERS_GIL, options=["--cpu-only"])
    line = run.line("# @sleep")
    info = run.describe("# @sleep") + f"\n  waits: GIL {line['n_gil_wait_sec']:.3f}s CPU {line['n_cpu_wait_sec']:.3f}s"
    assert line["n_gil_wait_sec"] >= 0.6 * total_with_waits(line), info
    assert line["n_sys_sec"] <= 0.3 * total_with_waits(line), info


CLOCK_LOOP = """
import time
end = time.process_time() + 1.0
x = 0
while time.process_time() < end:  # @clock
    x += 1
"""


def test_a_loop_of_short_native_calls_keeps_its_cpu(profile_program):
    """A loop that is mostly short native calls (a clock read, well under a
    microsecond): the main thread answers each request within microseconds of
    it, in the call.  How much of the window it spent on its CPU was read from
    that delay alone, where the two clocks read in turn by two threads skew the
    fraction down (0.72-0.96 for a thread on its CPU 99% of the time, on 3.14),
    and the CPU unit being capped at the common one, that much of the run's CPU
    was never charged: 0.93-0.99 of it on 3.14 (so this test fails on that
    code only now and then), 0.46-0.99 with a thread state held for a thread
    not yet started (test_hardening.py's, which failed there 1 run in 4).
    Tolerance: 5% of the program's CPU, as test_hardening.py's (0.965-0.99
    now: what is left out is the windows at the run's ends)."""
    run = profile_program(CLOCK_LOOP, options=["--cpu-only"])
    p = run.profile
    charged = p["cpu_time_sec"]["python"] + p["cpu_time_sec"]["native"]
    used = p["process_cpu_time_sec"] - p["profiler_cpu_time_sec"]
    info = run.describe("# @clock") + f"\n  charged {charged:.3f} s of {used:.3f} s"
    print(info)
    assert used > 0.9, info
    assert abs(charged - used) <= 0.05 * used, info


PYTHON_CALLS = """
import time

def recurse(x):
    if x == 0:
        return 0
    return recurse(x - 1) + 1  # @recursion

class Point:
    def __init__(self, x):
        self.x = x
    def moved(self, d):
        return self.x + d

p = Point(1)

def work(i):
    if {kind!r} == "recursion":
        return recurse(20)
    return p.moved(i) + p.moved(1)  # @method

t0 = time.perf_counter()
while time.perf_counter() - t0 < 1.0:
    for i in range(2000):
        work(i)
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason=(
    "3.10 does not specialise its calls: a frame at CALL_FUNCTION may be calling C or Python, and the "
    "call's machinery before the callee's frame exists reads as native (33-44% of a recursion, measured; "
    "docs/how-it-works.md)"))
@pytest.mark.parametrize("kind", ["recursion", "method"])
def test_calls_of_python_functions_are_python(profile_program, kind):
    """A program that calls only Python functions (and perf_counter once per 2,000
    calls) runs no native code to speak of.  A frame found at a call the
    interpreter specialised for a Python callee (CALL_PY_EXACT_ARGS, the bound
    method's) is pushing its callee's frame or just had it return: Python's
    work.  Read as a call into native code, a recursive function's call line
    was 35% native on 3.13, 66% on 3.14, 69% on 3.15 (py-spy's own test
    program, recursive.py, attached to on 3.14: 85%).  (A class's instantiation
    is left out: before 3.13 type.__call__, in C, makes the object.)"""
    run = profile_program(PYTHON_CALLS.format(kind=kind), options=["--cpu-only"])
    cpu = run.profile["cpu_time_sec"]
    info = run.describe(f"# @{kind}") + f"\n  run: Python {cpu['python']:.3f}s native {cpu['native']:.3f}s"
    print(info)
    assert cpu["native"] <= 0.08 * (cpu["python"] + cpu["native"]), info


TIGHT_LOOPS = """
import time

def empty(n):
    for i in range(n): pass  # @for

def counting(n):
    i = 0
    while i < n: i += 1  # @while

def body(n):
    x = 0
    for i in range(n): x += i * 2 % 7  # @body

for f in (empty, counting, body):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.8:
        f(200_000)
"""


def test_tight_loops_are_python(profile_program):
    """Loops of two to eight instructions that call nothing run no native code.
    A loop meets its instructions in proportion to their time, so peeks find it
    at its slowest one several times in a row: read as one instruction's C
    work (five running peeks in a row at it), `for i in range(n): pass` was
    8-19% native on 3.11 and 3.12, `while i < n: i += 1` 1.3-5.2%.  Each
    identical peek must now also find the thread still there when it reads
    again, eight times (spread.c, SPREAD_STILL_READS; with three, 0.8-3.3%
    in 2 of 12 runs on 3.10): 0.00-0.25% in 32 runs on 3.10-3.13.  Tolerance: 2%
    of each line's CPU."""
    run = profile_program(TIGHT_LOOPS, options=["--cpu-only"])
    info = run.describe("# @for", "# @while", "# @body")
    print(info)
    for marker in ("# @for", "# @while", "# @body"):
        line = run.line(marker)
        assert cpu(line) > 0.3, info
        assert line["n_cpu_native_sec"] <= 0.02 * cpu(line), f"{marker}\n{info}"


LAST_LINE = """
import time
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.3: pass  # @first
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.01: pass  # @last
"""


def test_the_last_window_is_charged(profile_program):
    """The run's last window, from the last snapshot to the stop, is charged
    like any other (sampler_charge_last_window): it was dropped, and a
    program's last 10 ms line read 0-9.5 ms (0 in 5 runs of 8), its 300 ms
    line before it 290-300; then 9.5-10.7 and 299-301 in 8 runs.  Tolerances:
    the last line within 20% of its 10 ms, the first within 3%, and the two
    lines' time within 3% of the run's."""
    run = profile_program(LAST_LINE, options=["--cpu-only"])
    info = run.describe("# @first", "# @last") + f"\n  total {run.profile['total_time_sec']:.4f}s"
    print(info)
    first, last = total_with_waits(run.line("# @first")), total_with_waits(run.line("# @last"))
    assert 0.008 <= last <= 0.012, info
    assert 0.291 <= first <= 0.309, info
    assert first + last >= 0.97 * run.profile["total_time_sec"], info


IN_PROCESS_STOP = """
import json, sys, time
from pyrometer.integrations.inprocess import InProcessRun, default_options
runs = []
for _ in range(5):
    run = InProcessRun(default_options(memory=False), "t", program_directory=sys.argv[1])
    run.start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.1: pass  # @spin
    raw = run.collect()  # @stop
    profile = run.build(raw)
    lines = {l["line"].split("# @")[-1]: [l["n_cpu_python_sec"] + l["n_cpu_native_sec"] + l["n_sys_sec"]
                                          + l["n_gil_wait_sec"] + l["n_cpu_wait_sec"], l["n_samples"]]
             for f in profile["files"].values() for l in f["lines"] if "# @" in l["line"]}
    runs.append(lines)
print(json.dumps(runs))
"""


def test_an_in_process_stop_is_not_the_calling_lines(tmp_path, groundtruth_dir):
    """In process, the last window ends where the stop was asked for
    (Session.stop's asked_ns): the peeks after it find the stop's own path,
    pyrometer's frames, located at the line that called it.  Charging the last
    window over them gave `raw = run.collect()` time (and once figures without
    a sample).  Five stops in one process: the stop line gets nothing, the
    0.1 s spin line within 10% of its time."""
    script = tmp_path / "stops.py"
    script.write_text(IN_PROCESS_STOP)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          env=program_env(groundtruth_dir), timeout=120)
    assert done.returncode == 0, done.stderr
    for lines in json.loads(done.stdout):
        assert lines.get("stop", [0, 0]) == [0, 0], lines
        assert 0.09 <= lines["spin"][0] <= 0.11, lines


PYTHON_LOOP = """
import time
t0 = time.perf_counter(); acc = 0
while time.perf_counter() - t0 < 1.5:
    for i in range(5000): acc += i * i  # @loop
"""


def test_busy_machine_is_cpu_wait(profile_program, busy_machine):
    """Every CPU busy with other processes: the program's pure-Python loop waits
    on the run queue for part of its time, which the kernel counts
    (/proc/self/task/<tid>/schedstat).  That is CPU wait, not system time, and the
    line stays Python.  With no other thread to hold the GIL, none of that
    waiting is GIL wait (it was 6-14% of such a line's time when the run-queue
    figure missed a wait still under way).  Tolerances: system under 5% of the
    line's time, GIL wait under 2%, CPU wait at least 5% (with one more
    runnable process than CPUs the truth is far above)."""
    run = profile_program(PYTHON_LOOP, options=["--cpu-only"])
    loop = run.line("# @loop")
    info = run.describe("# @loop") + f"\n  loop waits: GIL {loop['n_gil_wait_sec']:.3f}s CPU {loop['n_cpu_wait_sec']:.3f}s"
    print(info)
    whole = total_with_waits(loop)
    assert loop["n_sys_sec"] <= 0.05 * whole, info
    assert loop["n_gil_wait_sec"] <= 0.02 * whole, info
    assert loop["n_cpu_wait_sec"] >= 0.05 * whole, info
    assert loop["n_cpu_python_sec"] >= 0.9 * cpu(loop), info


# ---------------------------------------------------------------------------
# (i) where the main thread answers is not where it was: a loop whose jump back
#     has no line of its own
# ---------------------------------------------------------------------------

SKIPPING_LOOP = """
import time

def count(n):
    t = 0
    for i in range(n):  # @for
        if i % 3:  # @if
            t += 1  # @add
    return t

def run():
    end = time.perf_counter() + 1.5
    while time.perf_counter() < end:
        count(10000)  # @call

run()
"""

SKIPPING_LOOP_THREAD = SKIPPING_LOOP.replace("\nrun()\n", """
import threading
worker = threading.Thread(target=run)
worker.start()
worker.join()
""")


# Two threads in the loop: at each request one of them waits for the GIL, parked
# at the jump back; the CPU it used before goes where it was last seen running.
# Each snapshot finds about one of the two running, so a line's share rests on
# about half as many looks as with one thread: in 1.5 s (60-75 snapshots here,
# 28 once in CI) the `t += 1` line's share of the CPU spread from 16% to 35%
# over 12 runs, and read 9.7% in CI (twice in a row).  The loop runs twice as
# long, for as many looks as one thread has in 1.5 s.  (Those counts were before
# the looks were scheduled from their due time, sampler.c: about 1.5 times as
# many now.)
SKIPPING_LOOP_TWO_THREADS = SKIPPING_LOOP.replace("perf_counter() + 1.5", "perf_counter() + 3.0").replace("\nrun()\n", """
import threading
workers = [threading.Thread(target=run) for _ in range(2)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
""")


@pytest.mark.parametrize("source", [SKIPPING_LOOP, SKIPPING_LOOP_THREAD, SKIPPING_LOOP_TWO_THREADS],
                         ids=["main", "thread", "two-threads"])
def test_loop_lines_keep_their_samples(profile_program, source):
    """The main thread answers a request at its next eval-breaker check, a loop's
    jump back; here that jump (taken when `if` is false) has no line (3.10, 3.11)
    or the line of the `if` (3.12+).  Charged where the thread answered, the
    three lines lost nearly all their time (3.11: every line empty and the
    function 99% of the run; 3.10: 81% of the samples on line -1), and the `for`
    line got nothing on 3.12+.  Charged where it stood at the request, each line
    gets its share.  Another thread running bytecode is parked where it handed
    over the GIL, the same jump: it is charged where it stood when its position
    was read before the snapshot.  Tolerances: the loop's three lines hold at least 90% of the
    function's time, each of them at least 10% of it (one thread in the loop)
    and at least 10% of its CPU (the `for` line's truth is about a third:
    FOR_ITER on a range is as costly as the `if`), and no stack frame has a
    line below 1."""
    run = profile_program(source, options=["--cpu-only"])
    info = run.describe("# @for", "# @if", "# @add", "# @call")
    function = total_with_waits(run.function("count"))
    lines = [total_with_waits(run.line(marker)) for marker in ("# @for", "# @if", "# @add")]
    assert function > 1.0, info
    assert sum(lines) >= 0.9 * function, f"the loop's lines lost time:\n  {info}"
    if source is not SKIPPING_LOOP_TWO_THREADS:
        # (Two threads wait for the GIL at the jumps back: the `for` line's and
        # the `if`'s, none of the `t += 1` line's.)
        assert min(lines) >= 0.1 * function, f"a loop line got little time:\n  {info}"
    # Their CPU alone (GIL waits are where the threads wait): two threads had
    # the `for` line at 8.6% of the CPU, each thread's CPU charged where it
    # waited for the GIL; one thread alone gives about 35/38/27%.
    function_cpu = total(run.function("count"))
    cpus = [total(run.line(marker)) for marker in ("# @for", "# @if", "# @add")]
    assert min(cpus) >= 0.1 * function_cpu, f"a loop line got little CPU:\n  {info}"
    frames = run.profile["call_stacks"]["frames"]
    assert all(frame["lineno"] >= 1 for frame in frames), frames


# A loop whose body ends with an `if` that is almost never taken (austin's
# test/targets/target34.py has this shape): the loop's jump back carries the
# `if` body's line in the line table (3.11-3.13; 3.10: no line, so the line
# before it), and it is where threads answer requests and wait for the GIL.
RARE_LAST_LINE = """
import sys, threading

def spin():
    hits = 0
    for i in range(15_000_000):  # @for
        x = i * 2  # @body
        if i % 1_000_000 == 0:  # @if
            hits += 1  # @rare
    return hits

if sys.argv[1:] == ["threads"]:
    worker = threading.Thread(target=spin)
    worker.start()
    spin()
    worker.join()
else:
    spin()
"""


@pytest.mark.parametrize("args", [[], ["threads"]], ids=["one-thread", "two-threads"])
def test_a_loops_jump_back_is_the_loops_line(profile_program, args):
    """Charged to the line the table gives it, the jump back made `hits += 1`
    (run 15 times in 15 million turns) the hottest line: 42-58% of the run with
    two threads (its GIL wait and the other thread's time there), 0-4% alone.
    The jump goes to the loop's head now.  Tolerances: the rare line has at most
    3% of the function's time (waits included), and the loop's other lines at
    least 90%."""
    run = profile_program(RARE_LAST_LINE, options=["--cpu-only"], args=args)
    info = run.describe("# @for", "# @body", "# @if", "# @rare")
    function = total_with_waits(run.function("spin"))
    rare = total_with_waits(run.line("# @rare"))
    loop = sum(total_with_waits(run.line(marker)) for marker in ("# @for", "# @body", "# @if"))
    assert function > 0.5, info
    assert rare <= 0.03 * function, f"the rare line got the jump's time:\n  {info}"
    assert loop >= 0.9 * function, info


# Two threads in a loop whose body is costly and whose head is cheap: at every
# request one thread waits for the GIL at the jump back (the loop head's line).
HEAVY_BODY_TWO_THREADS = """
import threading

def spin():
    t = 0
    for i in range(3_000_000):  # @for
        t += (i * 7 + 3) % 11 * 13 // 5 + i * i % 97 - (i ^ 5) % 3  # @work
    return t

workers = [threading.Thread(target=spin) for _ in range(2)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
"""


def test_a_thread_waiting_for_the_gil_keeps_its_cpu_where_it_ran(profile_program):
    """A thread found waiting for the GIL has used its CPU earlier, where it ran;
    charged where it waits (the loop's jump back), the cheap `for` line got
    about half of the two threads' CPU.  It goes where the thread was last seen
    running now.  Tolerance: the body has at least 65% of the function's CPU
    (about 85% with one thread)."""
    run = profile_program(HEAVY_BODY_TWO_THREADS, options=["--cpu-only"])
    info = run.describe("# @for", "# @work")
    function_cpu = total(run.function("spin"))
    assert function_cpu > 0.5, info
    assert total(run.line("# @work")) >= 0.65 * function_cpu, info


# More threads in that loop than the sampler peeks at each request (8): each
# must still be charged where it ran, not where it parks.
HEAVY_BODY_MANY_THREADS = HEAVY_BODY_TWO_THREADS.replace("range(3_000_000)", "range(1_000_000)").replace(
    "range(2)", "range(12)")


def test_many_threads_keep_their_cpu_where_it_ran(profile_program):
    """The sampler peeked the first 8 threads of CPython's list at every request;
    the other 4 were charged where they parked, the loop's head: the body read
    22-50% of the function's CPU in this 2.7 s run (83-93% with one thread).
    The peeks now go to each thread in turn and to the thread holding the GIL
    at the request, and a thread's CPU waits for a place where it was seen
    running: 69-90% (6 runs each).  Tolerance: the body has at least 60% of
    the function's CPU."""
    assert "range(12)" in HEAVY_BODY_MANY_THREADS and "range(1_000_000)" in HEAVY_BODY_MANY_THREADS
    run = profile_program(HEAVY_BODY_MANY_THREADS, options=["--cpu-only"])
    info = run.describe("# @for", "# @work")
    function_cpu = total(run.function("spin"))
    assert function_cpu > 1.0, info
    assert total(run.line("# @work")) >= 0.6 * function_cpu, info


# A worker thread that runs a Python loop, then a native call that releases the
# GIL (hashlib on a large buffer, zlib, numpy), while the main thread waits.
LOOP_THEN_RELEASING_CALL = """
import json, sys, threading, time
import _groundtruth as gt

spent = {"loop": 0.0, "native": 0.0}

def work(i):
    t0 = time.thread_time()
    h = 0
    for k in range(20_000):  # @for
        h += (k * i) % 7  # @body
    t1 = time.thread_time()
    gt.spin_nogil(0.6)  # @native
    spent["loop"] += t1 - t0
    spent["native"] += time.thread_time() - t1
    return h

def run():
    for i in range(700):
        work(i)

worker = threading.Thread(target=run)
worker.start()
worker.join()
with open(sys.argv[1], "w") as f:
    json.dump(spent, f)
"""


def test_a_worker_is_python_where_it_ran_bytecode(profile_program):
    """The sampler thread gets the GIL when the worker gives it up, mostly at the
    native call that releases it; the line was read where the peek found the
    worker at t0 (the loop), but its kind where it stood then (in the call): the
    loop read 100% native (a pool thread hashing after a loop did the same).
    The kind is read at t0 too now.  Tolerances: the loop's lines are at most
    10% native, and hold their share of the function's CPU, which the worker
    measures itself (thread_time around each part: about 70% on 3.10-3.13, a
    loop of about 1.5 ms then 0.6 ms of native work; 3.14 runs the loop
    faster, about 55%), less 15 points."""
    run = profile_program(LOOP_THEN_RELEASING_CALL, options=["--cpu-only"], args=["truth.json"])
    truth = json.loads((run.program.parent / "truth.json").read_text())
    true_share = truth["loop"] / (truth["loop"] + truth["native"])
    info = run.describe("# @for", "# @body", "# @native") + f"\n  truth: loop share {true_share:.2f}"
    loop = [run.line("# @for"), run.line("# @body")]
    loop_cpu = sum(cpu(entry) for entry in loop)
    loop_native = sum(entry["n_cpu_native_sec"] for entry in loop)
    function_cpu = cpu(run.function("work"))
    assert function_cpu > 0.8, info
    assert loop_native <= 0.1 * loop_cpu, f"the loop read as native:\n  {info}"
    assert loop_cpu >= (true_share - 0.15) * function_cpu, info
    assert run.line("# @native")["n_cpu_native_sec"] >= 0.5 * cpu(run.line("# @native")), info


# A worker thread whose time is in numpy operators that release the GIL: a
# BINARY_OP, not a call, still under way when the snapshot is taken.
OPERATORS_RELEASING_THE_GIL = """
import threading
import numpy as np

def work():
    a = np.zeros(4_000_000)
    for _ in range(150):
        a += 1.0  # @add
        a *= 0.999  # @mul

worker = threading.Thread(target=work)
worker.start()
worker.join()
"""


def test_a_workers_numpy_operators_stay_native(profile_program):
    """Reading the kind where the peek found the thread at t0 (an operator,
    not a call) made numpy's `a += 1.0` in a worker 100% Python; an
    instruction the thread still stands in at the snapshot, outside the places
    where bytecode parks, is native work under way.  Tolerance: the two
    operator lines are at least 80% native (about 100% measured)."""
    pytest.importorskip("numpy")
    run = profile_program(OPERATORS_RELEASING_THE_GIL, options=["--cpu-only"])
    info = run.describe("# @add", "# @mul")
    lines = [run.line("# @add"), run.line("# @mul")]
    ops_cpu = sum(cpu(entry) for entry in lines)
    assert ops_cpu > 0.2, info
    assert sum(entry["n_cpu_native_sec"] for entry in lines) >= 0.8 * ops_cpu, info


# A recursion that unwinds past the callers a peek keeps (py-spy's
# tests/scripts/recursive.py has this shape).
RECURSION = """
import time

def recurse(x):  # @def
    if x == 0:  # @base
        return  # @return
    recurse(x - 1)  # @recurse

end = time.perf_counter() + 1.5
while time.perf_counter() < end:  # @while
    recurse(20)  # @call
"""


def test_a_recursion_that_unwinds_keeps_its_lines(profile_program):
    """At t0 the thread is 20 calls deep; by its next eval-breaker check the
    recursion has unwound to the caller's loop, or entered the next call, and
    no frame seen at t0 is left on the stack.  Charged where it answered, the
    `def` line had 30-44% of the run and the `while` line 16-32%, the recursion's
    own lines 25-35%.  Truth, timed alone: 145 ns a turn on the `while` line
    (perf_counter), about 56 ns a level of `recurse(20)`: `while` about 10%,
    the call 5%, the body 85%.  Measured: body 68-84% (CI's ASan job 68%),
    because the peek reads the frame's address and the frame 0.75 us apart, and
    a `while`-line read whose copy is made after the next call began shows
    the call line (how-it-works, "Known limit").  Tolerances: the `def` line
    at most 5% of the run's time, the `while` line at most 14%, the body lines
    at least 60%."""
    run = profile_program(RECURSION, options=["--cpu-only"])
    info = run.describe("# @def", "# @base", "# @return", "# @recurse", "# @while", "# @call")
    whole = total(run.function("<module>")) + total(run.function("recurse"))
    body = sum(total(run.line(m)) for m in ("# @base", "# @return", "# @recurse"))
    assert whole > 1.0, info
    assert total(run.line("# @def")) <= 0.05 * whole, info
    assert total(run.line("# @while")) <= 0.14 * whole, info
    assert body >= 0.60 * whole, info


# A function whose local list dies as it returns, then a sleep (austin's
# test/targets/sleepy.py has this shape, scaled up).
FREE_THEN_SLEEP = """
import time

def build():
    kept = [x for x in range(4_000_000)]  # @build
    return None  # @return

for _ in range(3):
    build()  # @call
    time.sleep(0.3)  # @sleep
"""


def test_freeing_before_a_sleep_is_not_the_sleeps(profile_program):
    """The request lands while the list is freed, inside the return; the main
    thread answers only after the sleep, and the sampler thread, looking at it
    meanwhile, charged the CPU it had used (the freeing) to where it stood: the
    sleep's line, as native time (0.08-0.16 s for one free of 10 million).
    That CPU goes where the request found the thread now.  Tolerances: at most 0.06 s of CPU on the
    sleep's line (a request made after a free still takes it there), at least
    0.05 s of native time on the call's line or build's return (the three
    frees take 0.1-0.15 s here)."""
    run = profile_program(FREE_THEN_SLEEP, options=["--cpu-only"])
    info = run.describe("# @build", "# @return", "# @call", "# @sleep")
    sleep = run.line("# @sleep")
    assert sleep["n_cpu_python_sec"] + sleep["n_cpu_native_sec"] <= 0.06, info
    assert sleep["n_sys_sec"] >= 0.8, info
    freeing = sum(run.line(m)["n_cpu_native_sec"] for m in ("# @return", "# @call"))
    assert freeing >= 0.05, info


# A long instruction that checks nothing (a list's `*`, and the store that frees
# the list before it), then a call that keeps the GIL: the request that lands in
# the first is answered only after the second.  The first phase times the
# operator alone (its own clock around it answers the requests, so it is not
# the measured loop).
OPERATOR_THEN_CALL = """
import json, sys, time
import _groundtruth as gt
big = list(range(1_000_000))
x = None
spent = 0.0
for _ in range(20):
    c0 = time.thread_time()
    x = big * 4
    spent += time.thread_time() - c0
    gt.spin_gil(40)
N = 60
for _ in range(N):
    x = big * 4  # @operator
    gt.spin_gil(40)  # @call
with open(sys.argv[1], "w") as f:
    json.dump({"operator": N * spent / 20, "call": N * 0.040}, f)
"""


def test_a_call_after_a_long_instruction_keeps_its_time(profile_program, tmp_path):
    """The sampler thread looks again each time it wakes while the request
    waits, and charges the wait from the thread's move on (halfway between the
    looks around it) to where it moved.  Before, the whole wait went to where
    the request found the thread: the operator's line got 0.82-0.97 of the two
    lines' time, truly about 0.30.  Tolerance: the operator's share within 0.15
    of the truth.  The looks are a sampler wake apart (10 ms on average, against
    16 ms operators and 40 ms calls), and the halfway point lands late on
    average: the gap back to the look before a move is cut short at t0, the gap
    on to the next look is not.  Seen over 20 runs: 0.00 to 0.12 above the
    truth; CI rerun it twice at the first tolerance, 0.10."""
    truth_file = tmp_path / "truth.json"
    run = profile_program(OPERATOR_THEN_CALL, options=["--cpu-only"], args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    info = run.describe("# @operator", "# @call") + f"\n  program's own timing: {truth}"
    operator, call = total(run.line("# @operator")), total(run.line("# @call"))
    share, true_share = operator / (operator + call), truth["operator"] / (truth["operator"] + truth["call"])
    print(f"operator's share {share:.3f}, truly {true_share:.3f}")
    assert abs(share - true_share) <= 0.15, info


# ---------------------------------------------------------------------------
# (j) native work in an operator, in a small function that has returned by the
#     time the thread answers
# ---------------------------------------------------------------------------

NATIVE_OPERATOR = """
import json, sys, time
import _groundtruth as gt

SPINNER = gt.Spinner()

def burn(ms):
    return SPINNER * ms  # @op

def run(seconds):
    native = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start, stop = burn(2.0)  # @call
        native += stop - start
    return native

with open(sys.argv[1], "w") as f:
    json.dump(run(1.5), f)
"""

# The thread answers at the entry of the function called next (its first
# eval-breaker check after the operator), in a frame where the operator's was.
NATIVE_OPERATOR_THEN_A_CALL = NATIVE_OPERATOR.replace("""def run(seconds):""", """def after():  # @after
    return 0

def run(seconds):""").replace("""        native += stop - start""", """        native += stop - start + after()""")

NATIVE_OPERATOR_THREAD = NATIVE_OPERATOR.replace("""with open(sys.argv[1], "w") as f:
    json.dump(run(1.5), f)""", """import threading
result = []
worker = threading.Thread(target=lambda: result.append(run(1.5)))
worker.start()
worker.join()
with open(sys.argv[1], "w") as f:
    json.dump(result[0], f)""")


@pytest.mark.parametrize("source, options", [(NATIVE_OPERATOR, ["--cpu-only"]), (NATIVE_OPERATOR, []),
                                             (NATIVE_OPERATOR_THREAD, ["--cpu-only"]),
                                             (NATIVE_OPERATOR_THEN_A_CALL, ["--cpu-only"])],
                         ids=["cpu-only", "full", "thread", "then-a-call"])
def test_native_operator_in_a_returned_function_keeps_its_line(profile_program, tmp_path, source, options):
    """`SPINNER * ms` burns 2 ms in C holding the GIL inside a multiplication
    (a BINARY_OP, as a bytes repeat or a numpy operation is, not a call).  The
    request lands in it; the thread can answer only after `burn` has returned,
    in `run`.  Charged where it answered, the time went to `run`'s lines
    (before: 0% on the operator's line, 98% on the call's line); charged where
    it stood at the request, it is the operator's, through its caller on the
    stack.  Where a call follows, the thread answers at that
    function's entry, which got the time on its `def` line (7.8% of Scalene's
    arithmetic_smear.py on `def hot_arith`): frames called since the request
    are not the sample's.  Tolerances: the operator's line holds at least 85%
    of the native time the program measured itself, as native, and the call's
    line (and the next function's) at most 10% of it."""
    truth_file = tmp_path / "truth.json"
    run = profile_program(source, options=options, args=[str(truth_file)])
    native = json.loads(truth_file.read_text())
    info = run.describe("# @op", "# @call") + f"\n  truth: {native:.3f} s native"
    op, call = run.line("# @op"), run.line("# @call")
    assert op["n_cpu_native_sec"] >= 0.85 * native, info
    assert total_with_waits(call) <= 0.1 * native, info
    if "# @after" in source:
        after = run.line("# @after")
        assert total_with_waits(after) <= 0.1 * native, f"{info}\n  {run.describe('# @after')}"
    # The stack through the function that has returned: run at its call, burn at the operator.
    frames = run.profile["call_stacks"]["frames"]
    wanted = [("run", run.lineno("# @call")), ("burn", run.lineno("# @op"))]
    native_there = sum(s["native_sec"] for s in run.profile["call_stacks"]["stacks"]
                       if [(frames[i]["function"], frames[i]["lineno"]) for i in s["path"][-2:]] == wanted)
    assert native_there >= 0.85 * native, f"{info}\n  on the stack run -> burn: {native_there:.3f} s"


# The same in a lambda and in a closure, written in the function that calls
# them: no module dictionary holds them, their code objects are constants of
# the caller's code.
NATIVE_OPERATOR_LAMBDA_AND_CLOSURE = """
import json, sys, time
import _groundtruth as gt

SPINNER = gt.Spinner()

def run(seconds):
    burn = lambda ms: SPINNER * ms  # @lambda-op
    native = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start, stop = burn(2.0)  # @lambda-call
        native += stop - start
    return native

def outer(seconds):
    def inner(ms):
        return SPINNER * ms  # @inner-op
    native = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start, stop = inner(2.0)  # @inner-call
        native += stop - start
    return native

with open(sys.argv[1], "w") as f:
    json.dump([run(1.5), outer(1.5)], f)
"""


@pytest.mark.parametrize("options", [["--cpu-only"], []], ids=["cpu-only", "full"])
def test_native_operator_in_a_returned_lambda_or_closure_keeps_its_line(profile_program, tmp_path, options):
    """As the test above, with the operator in a lambda and in a nested function
    made by their caller: neither is in a module's dictionary, so their code
    objects could not be proved alive once returned, and the time went to the
    call's line (0% on each operator's line, 48-50% on each call's).  A lambda's
    code is a constant of the code it is written in, alive while that runs.
    Tolerances as above: each operator's line at least 85% of its native time,
    each call's line at most 10%."""
    truth_file = tmp_path / "truth.json"
    run = profile_program(NATIVE_OPERATOR_LAMBDA_AND_CLOSURE, options=options, args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    pairs = [("# @lambda-op", "# @lambda-call"), ("# @inner-op", "# @inner-call")]
    info = run.describe(*(m for pair in pairs for m in pair)) + f"\n  truth: {truth} s native"
    for (op, call), native in zip(pairs, truth):
        assert run.line(op)["n_cpu_native_sec"] >= 0.85 * native, info
        assert total_with_waits(run.line(call)) <= 0.1 * native, info


# ---------------------------------------------------------------------------
# (k) the program's last call: native work in a function whose frames, the
#     script's too, have all returned by the time the thread answers
# ---------------------------------------------------------------------------

# Nothing after the operator checks for a request (a store, returns): the
# thread answers in pyrometer's launcher, with none of the program's frames on
# its stack.  The atexit handler writes what the spinner measured.
LAST_CALL_NATIVE = """
import atexit, json, sys
import _groundtruth as gt

SPINNER = gt.Spinner()
TIMES = None

def save():
    start, stop = TIMES
    with open(sys.argv[1], "w") as f:
        json.dump(stop - start, f)

atexit.register(save)

def burn(ms):
    global TIMES
    TIMES = SPINNER * ms  # @op

def main():
    burn(600.0)  # @call

main()
"""


@pytest.mark.parametrize("options", [["--cpu-only"], []], ids=["cpu-only", "full"])
def test_native_work_that_ends_the_program_keeps_its_line(profile_program, tmp_path, options):
    """The program's last 0.6 s burn in C inside `burn`, called by `main`, called
    last by the script.  The request made meanwhile is answered only once every
    frame of the program has returned: the sample was unattributed (`--cpu-only`:
    0.4 s native, 1 sample, no line of the program in the report), as the
    frames seen at the request could not be read, their functions not known to
    be alive.  The program's module dictionary holds them.  Tolerances: the
    operator's line holds at least 85% of the time the spinner measured, as
    native, on the stack main -> burn; the run's unattributed native time at
    most 10% of it."""
    truth_file = tmp_path / "truth.json"
    run = profile_program(LAST_CALL_NATIVE, options=options, args=[str(truth_file)])
    native = json.loads(truth_file.read_text())
    info = run.describe("# @op", "# @call") + f"\n  truth: {native:.3f} s native"
    op = run.line("# @op")
    assert op["n_cpu_native_sec"] >= 0.85 * native, info
    unattributed = run.profile["unattributed"]
    assert unattributed["native_sec"] <= 0.1 * native, f"{info}\n  {unattributed}"
    frames = run.profile["call_stacks"]["frames"]
    wanted = [("main", run.lineno("# @call")), ("burn", run.lineno("# @op"))]
    native_there = sum(s["native_sec"] for s in run.profile["call_stacks"]["stacks"]
                       if [(frames[i]["function"], frames[i]["lineno"]) for i in s["path"][-2:]] == wanted)
    assert native_there >= 0.85 * native, f"{info}\n  on the stack main -> burn: {native_there:.3f} s"
