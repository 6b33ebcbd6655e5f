"""Pause and resume: the program's own regions (pyrometer.start(), stop(),
profiling()), --off, and pausing a running program from outside with
pyrometer --off/--on --pid N (docs/how-it-works.md, "Pause and resume").

The truth is the program's: every phase spins on its own marked line
(_groundtruth.spin_gil, CPU with the GIL held), so a line paused for its whole
phase must have no time charged, and a line profiled for its whole phase must
have about its spin.  Times are compared with what the program measured, never
with the wall clock's speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PROGRAM_TIMEOUT_S, program_env, write_program

from pyrometer import model


def charged(entry: dict) -> float:
    """Seconds charged to a line or function, on and off the CPU."""
    return entry["n_cpu_python_sec"] + entry["n_cpu_native_sec"] + entry["n_sys_sec"]


def cpu(entry: dict) -> float:
    """The CPU seconds charged to a line, which a line profiled for its whole
    phase has as its spin's (spin_gil's truth is its CPU; its time off the CPU
    is the machine's load: under xdist's other worker a spin's 0.3 s had 0.08 s
    more of it, of no kind the program saw)."""
    return entry["n_cpu_python_sec"] + entry["n_cpu_native_sec"]


# ---------------------------------------------------------------------------
# The program's own regions.
# ---------------------------------------------------------------------------

REGIONS = """
import pyrometer, _groundtruth as gt

def a():
    gt.spin_gil(300)  # A SPIN

def b():
    gt.spin_gil(300)  # B SPIN

a()
with pyrometer.profiling():
    b()
a()
"""


def test_off_profiles_only_the_region(profile_program):
    run = profile_program(REGIONS, ["--off", "--cpu-only"])
    a, b = run.line("A SPIN"), run.line("B SPIN")
    info = run.describe("A SPIN", "B SPIN")
    assert cpu(b) == pytest.approx(0.3, rel=0.25), info
    assert charged(a) < 0.02, info  # 0.6 s spun there, paused
    p = run.profile
    # Paused for both calls of a() at least: 0.6 s of the thread's CPU.
    assert p["paused_sec"] >= 0.55, info
    assert p["paused_sec"] <= p["elapsed_time_sec"]
    assert p["options"]["off"] is True
    # Percentages are of the time not paused: the region is nearly all of it.
    assert model.time_share(b) > 80, info


def test_without_off_the_region_changes_nothing(profile_program):
    run = profile_program(REGIONS, ["--cpu-only"])
    info = run.describe("A SPIN", "B SPIN")
    assert cpu(run.line("A SPIN")) == pytest.approx(0.6, rel=0.25), info
    assert cpu(run.line("B SPIN")) == pytest.approx(0.3, rel=0.25), info
    assert run.profile["paused_sec"] == 0.0


def test_nested_and_repeated_calls_are_counted(profile_program):
    run = profile_program("""
        import pyrometer, _groundtruth as gt

        assert pyrometer.stop() == 0   # extra stops: never below zero, no error
        assert pyrometer.stop() == 0
        gt.spin_gil(200)  # PAUSED 1
        with pyrometer.profiling():
            with pyrometer.profiling():
                gt.spin_gil(200)  # NESTED INSIDE
            gt.spin_gil(200)  # OUTER REGION
        gt.spin_gil(200)  # PAUSED 2
        assert pyrometer.start() == 1
        gt.spin_gil(200)  # STARTED
        assert pyrometer.stop() == 0
        gt.spin_gil(200)  # PAUSED 3
        for i in range(3):  # repeated regions
            with pyrometer.profiling():
                gt.spin_gil(100)  # REPEATED
            gt.spin_gil(100)  # BETWEEN

        @pyrometer.profiling()
        def decorated():
            gt.spin_gil(200)  # DECORATED
        decorated()
        gt.spin_gil(200)  # PAUSED 4
        """, ["--off", "--cpu-only"])
    info = run.describe("PAUSED 1", "NESTED INSIDE", "OUTER REGION", "PAUSED 2", "STARTED", "PAUSED 3",
                        "REPEATED", "BETWEEN", "DECORATED", "PAUSED 4")
    for marker in ("NESTED INSIDE", "OUTER REGION", "STARTED", "DECORATED"):
        assert cpu(run.line(marker)) == pytest.approx(0.2, rel=0.3), f"{marker}\n  {info}"
    assert cpu(run.line("REPEATED")) == pytest.approx(0.3, rel=0.3), info
    for marker in ("PAUSED 1", "PAUSED 2", "PAUSED 3", "BETWEEN", "PAUSED 4"):
        assert charged(run.line(marker)) < 0.02, f"{marker}\n  {info}"


SHORT_REGIONS = """
import time, pyrometer
import _groundtruth as gt

cpu = 0.0
for i in range(60):
    with pyrometer.profiling():
        t0, t1 = gt.spin_gil(5)  # REGION
        cpu += t1 - t0
    gt.spin_gil(5)  # BETWEEN
print(cpu)
"""


def test_a_regions_last_window_is_charged(profile_program):
    """A region's end is the program's own pause: the main thread's window
    up to it is spread over the peeks made in it.  It was dropped, and 60
    regions of 5 ms read 0.06-0.09 s of their 0.30 (a region shorter than a
    window had nothing).  Within 10% of the spins' CPU; outside, nothing."""
    run = profile_program(SHORT_REGIONS, ["--off", "--cpu-only"])
    truth = float(run.proc.stdout.split()[-1])
    info = run.describe("REGION", "BETWEEN") + f"\n  truth {truth:.4f}s"
    assert cpu(run.line("REGION")) == pytest.approx(truth, rel=0.1), info
    assert charged(run.line("BETWEEN")) < 0.01, info


def test_stop_pauses_a_run_started_on(profile_program):
    run = profile_program("""
        import pyrometer, _groundtruth as gt
        gt.spin_gil(200)  # BEFORE
        assert pyrometer.stop() == 0
        gt.spin_gil(300)  # PAUSED
        assert pyrometer.start() == 1
        gt.spin_gil(200)  # AFTER
        """, ["--cpu-only"])
    info = run.describe("BEFORE", "PAUSED", "AFTER")
    assert cpu(run.line("BEFORE")) == pytest.approx(0.2, rel=0.3), info
    assert cpu(run.line("AFTER")) == pytest.approx(0.2, rel=0.3), info
    assert charged(run.line("PAUSED")) < 0.02, info
    assert run.profile["paused_sec"] >= 0.28, info


def test_off_without_start_charges_nothing(profile_program):
    run = profile_program("""
        import _groundtruth as gt
        gt.spin_gil(400)  # SPIN
        """, ["--off"])
    info = run.describe("SPIN")
    p = run.profile
    assert p["total_time_sec"] < 0.02, info
    assert p["cpu_samples"] <= 2, info
    assert p["paused_sec"] >= 0.38, info
    # Nothing allocated is charged either.
    assert all(e.get("n_malloc_mb", 0.0) == 0.0 for f in p["files"].values() for e in f["lines"])


def test_memory_in_a_paused_region_is_not_charged(profile_program):
    run = profile_program("""
        import pyrometer, _groundtruth as gt
        before = [gt.malloc_bytes(1 << 20) for _ in range(64)]  # PAUSED ALLOC
        with pyrometer.profiling():
            during = [gt.malloc_bytes(1 << 20) for _ in range(64)]  # PROFILED ALLOC
        for h in before:
            gt.free_handle(h)
        for h in during:
            gt.free_handle(h)  # the frees of profiled blocks, paused: still counted
        """, ["--off", "--allocation-sampling-window", "65536"])
    paused, profiled = run.line("PAUSED ALLOC"), run.line("PROFILED ALLOC")
    info = (f"paused line {paused.get('n_malloc_mb')} MB, profiled line {profiled.get('n_malloc_mb')} MB "
            f"allocated, {profiled.get('n_free_bytes', 0) / 1048576:.2f} MB freed, "
            f"growth {profiled.get('n_growth_mb')} MB; paused_sec {run.profile['paused_sec']}")
    print(info)
    assert profiled["n_malloc_mb"] == pytest.approx(64, rel=0.2), info
    assert paused["n_malloc_mb"] == 0.0, info
    # Live memory stays right: the profiled blocks were all freed, while paused.
    assert profiled["n_free_bytes"] == pytest.approx(profiled["n_malloc_bytes"], rel=0.02), info
    assert abs(profiled["n_growth_mb"]) < 1.0, info


def test_api_outside_pyrometer_does_nothing(run_bare):
    proc = run_bare("""
        import pyrometer
        assert pyrometer.start() is None and pyrometer.stop() is None
        with pyrometer.profiling():
            x = 1

        @pyrometer.profiling()
        def f():
            return 2
        assert f() == 2
        import sys
        assert "pyrometer._core" not in sys.modules  # nothing loaded into a plain run
        print("ok")
        """)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


# ---------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--pid", "123"], "--pid N needs --off (pause) or --on (resume)"),
    (["--on", "--off", "--pid", "123"], "--pid N needs --off (pause) or --on (resume)"),
    (["--on", "prog.py"], "--on needs --pid N"),
    (["--off", "--pid", "123", "prog.py"], "takes no program"),
    (["--off", "--pid", "x"], "--pid: expected a process id"),
    (["--on", "--pid", "0"], "--pid: expected a process id"),
])
def test_usage_errors(run_pyrometer, tmp_path, args, words):
    proc = run_pyrometer(args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize("target", ["sleep", "python", "python using the API"])
def test_a_process_not_under_pyrometer_is_refused_and_left_alone(run_pyrometer, tmp_path, target):
    code = {"sleep": None, "python": "import time; time.sleep(30)",
            "python using the API": "import pyrometer, time\nwith pyrometer.profiling(): time.sleep(30)"}[target]
    command = ["sleep", "30"] if code is None else [sys.executable, "-c", code]
    victim = subprocess.Popen(command, stdin=subprocess.DEVNULL, env=program_env(None))
    try:
        time.sleep(0.2)
        for flag in ("--off", "--on"):
            proc = run_pyrometer([flag, "--pid", victim.pid], cwd=tmp_path)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.count("\n") == 1, proc.stderr
            assert f"process {victim.pid} is not running under pyrometer" in proc.stderr, proc.stderr
        time.sleep(0.3)
        assert victim.poll() is None, "the process was signalled (a real-time signal's default kills)"
    finally:
        victim.kill()
        victim.wait()


def test_a_missing_process_is_refused(run_pyrometer, tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    proc = run_pyrometer(["--off", "--pid", gone.pid], cwd=tmp_path)
    assert proc.returncode == 2 and f"no process {gone.pid}" in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------
# Pause and resume from outside.
# ---------------------------------------------------------------------------

def _await_line(stream, expected: str, deadline: float) -> None:
    """Reads the program's standard output until the line `expected`."""
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            raise AssertionError(f"the program ended before printing {expected!r}")
        if line.strip() == expected:
            return
    raise AssertionError(f"no {expected!r} from the program in time")


def _control(flag: str, pid: int, groundtruth_dir) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pyrometer", flag, "--pid", str(pid)],
                          capture_output=True, text=True, env=program_env(groundtruth_dir),
                          timeout=PROGRAM_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    return proc


# Three phases on three lines.  The middle one waits (off CPU) until the test
# has paused the program (the pause command's own start-up is not the
# program's to spin through), spins until the test lets it go, then waits
# until the test has resumed the program.
PHASES = """
import os, sys, time, _groundtruth as gt

def first():
    gt.spin_gil(400)  # FIRST

def middle():
    while not os.path.exists("paused"):
        time.sleep(0.005)
    while not os.path.exists("middle-done"):
        gt.spin_gil(20)  # MIDDLE
    print("waiting", flush=True)
    while not os.path.exists("resumed"):
        time.sleep(0.01)

def last():
    gt.spin_gil(400)  # LAST

first()
print("middle", flush=True)
middle()
last()
"""


# The commands from outside are timed by the test and the profile is sampled:
# ground-truth tests (one rerun on failure, listed as such; conftest.py).
@pytest.mark.accuracy
def test_pause_by_pid_charges_nothing_of_the_pause(start_pyrometer, groundtruth_dir, tmp_path):
    prog = write_program(tmp_path, PHASES)
    out = tmp_path / "profile.json"
    run = start_pyrometer(["--json", "--outfile", out, "--cpu-only", prog], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + PROGRAM_TIMEOUT_S
    try:
        _await_line(run.stdout, "middle", deadline)
        paused = _control("--off", run.pid, groundtruth_dir)
        assert f"paused process {run.pid}" in paused.stderr
        began = time.monotonic()
        (tmp_path / "paused").touch()
        time.sleep(1.0)  # the middle phase spins all this time, paused
        (tmp_path / "middle-done").touch()
        _await_line(run.stdout, "waiting", deadline)
        ended = time.monotonic()
        _control("--on", run.pid, groundtruth_dir)
        resumed = time.monotonic()
        (tmp_path / "resumed").touch()
        _, err = run.communicate(timeout=PROGRAM_TIMEOUT_S)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 0, err
    profile = model.load(str(out))  # model.check accepts it
    lines = {e["lineno"]: e for e in next(iter(profile["files"].values()))["lines"]}
    src = prog.read_text().splitlines()

    def line(marker):
        return lines[next(i + 1 for i, text in enumerate(src) if marker in text)]

    info = (f"first {charged(line('FIRST')):.3f} s, middle {charged(line('MIDDLE')):.3f} s, "
            f"last {charged(line('LAST')):.3f} s, paused_sec {profile['paused_sec']:.3f} "
            f"(the test saw it paused for {ended - began:.3f} s to {resumed - began:.3f} s)")
    print(info)
    assert charged(line("FIRST")) == pytest.approx(0.4, rel=0.3), info
    assert charged(line("LAST")) == pytest.approx(0.4, rel=0.3), info
    # The pause takes effect within a sampler wake (<= 20 ms) of the signal;
    # the middle phase starts spinning after the command returned.
    assert charged(line("MIDDLE")) < 0.05, info
    # The pause lasted from the signal to the resume: at least from the --off
    # command's return to the --on command's start, at most a little more than
    # from its start to the --on command's return.
    assert ended - began - 0.05 <= profile["paused_sec"] <= resumed - began + 0.5, info
    assert profile["processes"][0]["paused_sec"] == pytest.approx(profile["paused_sec"])


@pytest.mark.accuracy
def test_pause_and_resume_inside_one_long_native_call(start_pyrometer, groundtruth_dir, tmp_path):
    """The main thread holds the GIL for 1.5 s in one native call while the
    program is paused and resumed: both commands land where they were sent
    (their handler notes the time), not when the call returns."""
    prog = write_program(tmp_path, """
        import time, _groundtruth as gt
        print("spinning", flush=True)
        began = time.monotonic()
        gt.spin_gil(1500)  # LONG CALL
        with open("call-wall", "w") as f:
            f.write(repr(time.monotonic() - began))
        """)
    out = tmp_path / "profile.json"
    run = start_pyrometer(["--json", "--outfile", out, "--cpu-only", prog], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + PROGRAM_TIMEOUT_S
    try:
        _await_line(run.stdout, "spinning", deadline)
        time.sleep(0.2)
        off_sent_from = time.monotonic()
        _control("--off", run.pid, groundtruth_dir)
        off_sent_by = time.monotonic()
        time.sleep(0.5)
        on_sent_from = time.monotonic()
        _control("--on", run.pid, groundtruth_dir)
        on_sent_by = time.monotonic()
        _, err = run.communicate(timeout=PROGRAM_TIMEOUT_S)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 0, err
    profile = model.load(str(out))
    n = next(i + 1 for i, text in enumerate(prog.read_text().splitlines()) if "LONG CALL" in text)
    entry = next(e for e in next(iter(profile["files"].values()))["lines"] if e["lineno"] == n)
    shortest, longest = on_sent_from - off_sent_by, on_sent_by - off_sent_from
    call_wall = float((tmp_path / "call-wall").read_text())
    # Every kind of time, waits included: the call's wall time, as the program measured it.
    line_wall = charged(entry) + entry["n_gil_wait_sec"] + entry["n_cpu_wait_sec"]
    info = (f"long call: {call_wall:.3f} s, charged {line_wall:.3f} s; paused_sec "
            f"{profile['paused_sec']:.3f}, the commands {shortest:.3f} to {longest:.3f} s apart")
    print(info)
    assert shortest - 0.02 <= profile["paused_sec"] <= longest + 0.05, info
    # The call's time on both sides of the pause is charged, the pause's is not
    # (0.1 s: the edges of the call, between samples).
    assert line_wall == pytest.approx(call_wall - profile["paused_sec"], abs=0.1), info


# The children: a child spinning in phases (exec'd by subprocess) is paused with
# its parent; children started while paused (a fork and a subprocess) start
# paused.
FAMILY_PARENT = """
import os, subprocess, sys, time, _groundtruth as gt

def wait_for(name):
    while not os.path.exists(name):
        time.sleep(0.01)

child = subprocess.Popen([sys.executable, "phases.py"])
child.wait()  # PARENT WAITS
print("second round", flush=True)
wait_for("go")
pid = os.fork()
if pid == 0:
    gt.spin_gil(300)  # FORKED WHILE PAUSED
    os._exit(0)
subprocess.run([sys.executable, "late.py"])
os.waitpid(pid, 0)
print("children done", flush=True)
wait_for("end")
gt.spin_gil(300)  # PARENT AFTER
"""

LATE = """
import _groundtruth as gt
gt.spin_gil(300)  # LATE CHILD
"""


@pytest.mark.accuracy
def test_children_follow_pause_and_resume(start_pyrometer, groundtruth_dir, tmp_path):
    phases = write_program(tmp_path, PHASES.replace('print("middle", flush=True)',
                                                    'print("middle", flush=True)\n'
                                                    'open("child-middle", "w").close()'), "phases.py")
    late = write_program(tmp_path, LATE, "late.py")
    prog = write_program(tmp_path, FAMILY_PARENT)
    out = tmp_path / "profile.json"
    run = start_pyrometer(["--json", "--outfile", out, "--cpu-only", prog], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + PROGRAM_TIMEOUT_S
    try:
        while not (tmp_path / "child-middle").exists():
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.01)
        paused = _control("--off", run.pid, groundtruth_dir)
        assert "and 1 child process" in paused.stderr, paused.stderr
        (tmp_path / "paused").touch()
        time.sleep(0.8)
        (tmp_path / "middle-done").touch()
        _await_line(run.stdout, "waiting", deadline)
        _control("--on", run.pid, groundtruth_dir)
        (tmp_path / "resumed").touch()
        _await_line(run.stdout, "second round", deadline)
        _control("--off", run.pid, groundtruth_dir)
        (tmp_path / "go").touch()
        _await_line(run.stdout, "children done", deadline)
        _control("--on", run.pid, groundtruth_dir)
        (tmp_path / "end").touch()
        _, err = run.communicate(timeout=PROGRAM_TIMEOUT_S)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 0, err
    profile = model.load(str(out))

    def line(path: Path, marker: str) -> float:
        src = path.read_text().splitlines()
        n = next(i + 1 for i, text in enumerate(src) if marker in text)
        for name, f in profile["files"].items():
            if os.path.realpath(name) == os.path.realpath(path):
                return sum(charged(e) for e in f["lines"] if e["lineno"] == n)
        return 0.0

    figures = {m: line(p, m) for p, m in ((phases, "FIRST"), (phases, "MIDDLE"), (phases, "LAST"),
                                          (prog, "FORKED WHILE PAUSED"), (late, "LATE CHILD"),
                                          (prog, "PARENT AFTER"))}
    info = f"{figures}; processes {json.dumps(profile['processes'])}"
    print({k: round(v, 3) for k, v in figures.items()},
          [(p["started_by"], round(p["paused_sec"] or 0, 3)) for p in profile["processes"]])
    assert figures["FIRST"] == pytest.approx(0.4, rel=0.3), info
    assert figures["LAST"] == pytest.approx(0.4, rel=0.3), info
    assert figures["MIDDLE"] < 0.05, info
    assert figures["FORKED WHILE PAUSED"] < 0.03, info
    assert figures["LATE CHILD"] < 0.03, info
    assert figures["PARENT AFTER"] == pytest.approx(0.3, rel=0.3), info
    children = profile["processes"][1:]
    assert len(children) == 3 and all(p["profiled"] for p in children), info
    # Each child says how long it was paused: the exec'd one of the first
    # round most of the 0.8 s; those started paused, about their whole life.
    assert all((p["paused_sec"] or 0) > 0.25 for p in children), info


# ---------------------------------------------------------------------------
# Reported.
# ---------------------------------------------------------------------------

def test_text_header_says_how_long_it_was_paused(run_pyrometer, tmp_path):
    write_program(tmp_path, """
        import _groundtruth as gt
        gt.spin_gil(300)
        """)
    proc = run_pyrometer(["--off", "--cli", "--cpu-only", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The header line under the title and the verdict.
    header = next(line for line in proc.stdout.splitlines() if line.startswith("elapsed "))
    assert "(paused " in header and "not charged)" in header, proc.stdout
    paused = float(header.split("(paused ")[1].split(" s")[0])
    elapsed = float(header.split("elapsed ")[1].split(" s")[0])
    assert 0.28 <= paused <= elapsed, header
    assert "--off" in proc.stdout  # the options line


def test_model_checks_paused_sec(profile_program):
    profile = profile_program("x = 1\n", ["--cpu-only"]).profile
    assert model.check(json.loads(json.dumps(profile)))["paused_sec"] == 0.0
    older = json.loads(json.dumps(profile))
    del older["paused_sec"], older["processes"][0]["paused_sec"]
    checked = model.check(older)  # a profile from before pausing existed
    assert checked["paused_sec"] == 0.0 and checked["processes"][0]["paused_sec"] is None
    for bad, words in ((-1.0, "paused_sec"), ("1", "paused_sec"),
                       (profile["elapsed_time_sec"] + 5.0, "more than the run's elapsed_time_sec")):
        damaged = json.loads(json.dumps(profile))
        damaged["paused_sec"] = bad
        with pytest.raises(model.ProfileError, match=words):
            model.check(damaged)


def test_web_page_header_says_how_long_it_was_paused(run_pyrometer, tmp_path):
    from browser import Browser, chromium
    if chromium() is None:
        pytest.skip("no chromium to open the page in")
    write_program(tmp_path, """
        import _groundtruth as gt
        gt.spin_gil(300)
        """)
    proc = run_pyrometer(["--off", "--html", "--cpu-only", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with Browser(tmp_path / "chromium") as b:
        page = b.open(tmp_path / "pyrometer-profile.html")
        page.settle()
        meta = page.eval("document.getElementById('run-meta').textContent")
        options = page.eval("document.getElementById('run-options').textContent")
    assert "(paused " in meta and "not charged)" in meta, meta
    assert "started paused (--off)" in options, options


def test_gpu_time_while_paused_is_not_charged(profile_program, fake_nvml_dir):
    """The GPU (the NVML test double, tests/gpu/fake_nvml.c) is busy 1 s in a
    profiled stretch and 1 s in a paused one: only the first is charged, to its
    line, and the device's busy time is that second only."""
    previous = os.environ.get("LD_LIBRARY_PATH")
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir) + (os.pathsep + previous if previous else "")}
    run = profile_program("""
        import ctypes, time, pyrometer
        nv = ctypes.CDLL("libnvidia-ml.so.1")
        time.sleep(0.5)
        nv.fake_nvml_busy(0, 1)
        time.sleep(1.0)  # GPU PROFILED
        pyrometer.stop()
        time.sleep(1.0)  # GPU PAUSED
        nv.fake_nvml_busy(0, 0)
        pyrometer.start()
        time.sleep(0.5)  # GPU IDLE
        """, ["--cpu-only", "--gpu"], env=env)
    p = run.profile
    figures = {m: run.line(m).get("n_gpu_sec", 0.0) for m in ("GPU PROFILED", "GPU PAUSED", "GPU IDLE")}
    info = f"{figures}; gpu_time_sec {p.get('gpu_time_sec')}, paused_sec {p['paused_sec']:.3f}"
    print(info)
    assert p["gpu"] is True, info
    assert figures["GPU PROFILED"] == pytest.approx(1.0, rel=0.15), info
    assert figures["GPU PAUSED"] < 0.05, info
    assert figures["GPU IDLE"] < 0.1, info
    assert p["gpu_time_sec"] == pytest.approx(1.0, rel=0.15), info
