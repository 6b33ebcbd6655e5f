"""No profile lost without a word: a run that does not end by returning (exec,
os._exit, a termination signal, a crash, SIGKILL, Ctrl-C once or twice) ends as
it would under plain python (same output, exit status, death by the same signal),
and the profile is written, or one line on stderr says why it could not be.

Each program compares itself with a run under plain python (run_bare) where the
outcome is the program's own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PROGRAM_TIMEOUT_S, write_program

BUSY = """
import time
def busy(seconds):
    start, total = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for i in range(2000): total += i * i  # @busy
"""


def load(path: Path) -> dict:
    assert path.exists(), f"no profile at {path}"
    return json.loads(path.read_text())


def busy_samples(profile: dict, program: Path) -> int:
    """Samples charged to the @busy line: the profile covers the program's work."""
    lineno = next(i + 1 for i, line in enumerate(program.read_text().splitlines()) if "@busy" in line)
    files = profile["files"]
    entry = files.get(str(program)) or files.get(os.path.realpath(program))
    assert entry is not None, sorted(files)
    return sum(e["n_samples"] for e in entry["lines"] if e["lineno"] == lineno)


def pyrometer_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("pyrometer:")]


def profiled(run_pyrometer, tmp_path, source, options=(), args=(), name="prog.py"):
    prog = write_program(tmp_path, BUSY + source, name)
    out = tmp_path / "out.json"
    if out.exists():
        out.unlink()
    # --quiet: pyrometer's own lines on stderr are only the ones a test looks for.
    proc = run_pyrometer(["--quiet", "--json", "--outfile", out, *options, prog, *args], cwd=tmp_path)
    return proc, out, prog


# ---------------------------------------------------------------------------
# exec
# ---------------------------------------------------------------------------

EXEC = """
import os, sys
busy(0.3)
print("before exec", flush=True)
how = sys.argv[1]
if how == "execv":
    os.execv("/bin/sh", ["sh", "-c", "echo the new program; exit 7"])
elif how == "execlp":  # searches PATH: every directory before sh's is a failed exec
    os.execlp("sh", "sh", "-c", "echo the new program; exit 7")
elif how == "execve":
    os.execve("/bin/sh", ["sh", "-c", "echo the new program $X; exit 7"], {"X": "here"})
"""


@pytest.mark.parametrize("how", ["execv", "execlp", "execve"])
def test_exec_writes_the_profile_then_execs(tmp_path, run_pyrometer, run_bare, how):
    bare = run_bare(BUSY + EXEC, args=[how])
    proc, out, prog = profiled(run_pyrometer, tmp_path, EXEC, args=[how])
    assert proc.returncode == bare.returncode == 7, proc.stderr
    assert proc.stdout == bare.stdout, "the program's or the new program's output differs"
    assert proc.stderr == "", proc.stderr
    profile = load(out)
    assert profile["ended_by"] == "exec" and profile["exit_status"] is None
    assert busy_samples(profile, prog) >= 5, "the profile does not hold the work before the exec"


def test_failed_exec_goes_on_profiled(tmp_path, run_pyrometer):
    proc, out, prog = profiled(run_pyrometer, tmp_path, """
import os
busy(0.2)
try:
    os.execv("/no/such/program", ["x"])
except OSError as e:
    print("exec failed:", type(e).__name__, flush=True)
busy(0.2)
""")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "exec failed: FileNotFoundError\n"
    profile = load(out)
    assert profile["ended_by"] == "exit" and profile["exit_status"] == 0


# ---------------------------------------------------------------------------
# os._exit
# ---------------------------------------------------------------------------

def test_os_exit_writes_the_profile(tmp_path, run_pyrometer, run_bare):
    source = "import os\nbusy(0.3)\nprint('bye', flush=True)\nos._exit(5)\nprint('not reached')\n"
    bare = run_bare(BUSY + source)
    proc, out, prog = profiled(run_pyrometer, tmp_path, source)
    assert proc.returncode == bare.returncode == 5, proc.stderr
    assert proc.stdout == bare.stdout == "bye\n" and proc.stderr == ""
    profile = load(out)
    assert profile["ended_by"] == "os._exit" and profile["exit_status"] == 5
    assert busy_samples(profile, prog) >= 5


# ---------------------------------------------------------------------------
# Termination signals
# ---------------------------------------------------------------------------

TERMINATED = """
import os, signal, sys, time
busy(0.3)
print("default" if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else "changed", flush=True)
sig = getattr(signal, sys.argv[1])
if sys.argv[2] == "running":   # the main thread runs Python when the signal comes
    os.kill(os.getpid(), sig)
    busy(5)
else:                          # it sleeps: the sampler thread writes the profile
    import threading
    threading.Timer(0.1, os.kill, (os.getpid(), sig)).start()
    time.sleep(5)
print("not reached", flush=True)
"""


@pytest.mark.parametrize("where", ["running", "sleeping"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_termination_signal_writes_the_profile_then_kills(tmp_path, run_pyrometer, run_bare, sig, where):
    bare = run_bare(BUSY + TERMINATED, args=[sig, where])
    started = time.monotonic()
    proc, out, prog = profiled(run_pyrometer, tmp_path, TERMINATED, args=[sig, where])
    took = time.monotonic() - started
    signum = getattr(signal, sig)
    assert proc.returncode == bare.returncode == -signum, proc.stderr
    assert proc.stdout == bare.stdout == "default\n", "the program saw another disposition"
    assert proc.stderr == "", proc.stderr
    assert took < 4, f"the signal was acted on late ({took:.1f} s)"
    profile = load(out)
    assert profile["ended_by"] == sig and profile["exit_status"] == 128 + signum
    assert busy_samples(profile, prog) >= 5


RAISED_THEN_MORE = """
import os, signal, sys
busy(0.2)
print("before", flush=True)
if sys.argv[1] == "raise_signal":
    signal.raise_signal(signal.SIGTERM)
else:
    os.kill(os.getpid(), signal.SIGTERM)
print("after", flush=True)
"""


@pytest.mark.parametrize("how", ["raise_signal", "kill"])
def test_a_signal_the_program_sends_itself_stops_it_there(tmp_path, run_pyrometer, run_bare, how):
    """Bare, a process that sends itself SIGTERM dies inside the call; the line
    after it never runs.  Profiled, the handler only records the signal and
    the profile is written at the main thread's next bytecode boundary, once
    the sampler thread has asked for it: the handler now waits for that
    request (ending.c, wait_until_asked).  Before, the next line ran and
    printed "after" in 3 of 3 runs on 3.12."""
    bare = run_bare(BUSY + RAISED_THEN_MORE, args=[how])
    assert (bare.returncode, bare.stdout) == (-signal.SIGTERM, "before\n")
    for _ in range(3):
        proc, out, prog = profiled(run_pyrometer, tmp_path, RAISED_THEN_MORE, args=[how])
        assert (proc.returncode, proc.stdout) == (bare.returncode, bare.stdout), proc.stderr
        profile = load(out)
        assert profile["ended_by"] == "SIGTERM" and profile["exit_status"] == 128 + signal.SIGTERM


RAISED_LAST = """
import os, signal, subprocess, sys
if sys.argv[1] == "itself":
    signal.raise_signal(signal.SIGUSR1)
else:   # CPython's test_posix TestPosixSpawn.test_setsigdef: the child's last line
    original = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    code = "import signal; signal.raise_signal(signal.SIGUSR1)"
    try:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c", code], os.environ,
                             setsigdef=[signal.SIGUSR1])
    finally:
        signal.signal(signal.SIGUSR1, original)
    print("spawned", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    print("run", subprocess.run([sys.executable, "-c", code]).returncode, flush=True)
"""


@pytest.mark.parametrize("who", ["itself", "children"])
def test_a_termination_signal_on_the_last_line_still_kills(tmp_path, run_pyrometer, run_bare, who):
    """A signal raised as the program ends, before the sampler thread acted on
    it: the profile is written and the process dies of the signal, as it does
    bare (a child used to exit 0 and say nothing of it)."""
    bare = run_bare(BUSY + RAISED_LAST, args=[who])
    proc, out, prog = profiled(run_pyrometer, tmp_path, RAISED_LAST, args=[who])
    assert (proc.returncode, proc.stdout) == (bare.returncode, bare.stdout), proc.stderr
    profile = load(out)
    if who == "itself":
        assert proc.returncode == -signal.SIGUSR1
        assert profile["ended_by"] == "SIGUSR1" and profile["exit_status"] == 128 + signal.SIGUSR1
    else:
        assert proc.stdout == f"spawned {-signal.SIGUSR1}\nrun {-signal.SIGUSR1}\n"
        children = [p for p in profile["processes"] if p["pid"] != profile["processes"][0]["pid"]]
        assert [(c["exit_status"], c["ended_by"]) for c in children] == [(128 + signal.SIGUSR1, "SIGUSR1")] * 2


ASLEEP_WHEN_TERMINATED = """
import os, signal, threading, time

def terminate():
    with open("sent", "w") as f:
        f.write(repr(time.monotonic()))
    os.kill(os.getpid(), signal.SIGTERM)

threading.Timer(0.2, terminate).start()
time.sleep(10)
"""


def test_termination_signal_is_acted_on_at_once_with_a_long_interval(tmp_path, run_pyrometer):
    """The handler wakes the sampler thread (csrc/common/wake.c) rather than
    leaving the signal for its next wake: with samples a second apart on
    average (--cpu-sampling-rate 1, the longest), a program asleep that gets
    SIGTERM ends with its profile soon after, not when a sample is next due
    (an exponential draw: more than 0.5 s away two times in three).
    Tolerance: 0.6 s from the signal to the process's end (the wake and the
    sampler thread's takeover take 40 ms; the rest is writing the profile)."""
    proc, out, _ = profiled(run_pyrometer, tmp_path, ASLEEP_WHEN_TERMINATED, options=["--cpu-sampling-rate", "1"])
    ended = time.monotonic()
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    took = ended - float((tmp_path / "sent").read_text())
    assert took < 0.6, f"the signal was acted on late ({took:.2f} s after it was sent)"
    assert load(out)["ended_by"] == "SIGTERM"


OWN_HANDLER = """
import os, signal, sys
def handler(signum, frame):
    print("own handler", flush=True)
    sys.exit(3)
previous = signal.signal(signal.SIGTERM, handler)
busy(0.2)
os.kill(os.getpid(), signal.SIGTERM)
busy(5)
"""

RESTORED = """
import os, signal
previous = signal.signal(signal.SIGTERM, lambda s, f: None)
busy(0.2)
signal.signal(signal.SIGTERM, previous)  # what python said was there: SIG_DFL
os.kill(os.getpid(), signal.SIGTERM)
busy(5)
"""


def test_programs_own_handler_keeps_working(tmp_path, run_pyrometer, run_bare):
    bare = run_bare(BUSY + OWN_HANDLER)
    proc, out, prog = profiled(run_pyrometer, tmp_path, OWN_HANDLER)
    assert proc.returncode == bare.returncode == 3, proc.stderr
    assert proc.stdout == bare.stdout == "own handler\n" and proc.stderr == ""
    profile = load(out)
    assert profile["ended_by"] == "exit" and profile["exit_status"] == 3


def test_default_put_back_by_the_program_still_writes(tmp_path, run_pyrometer, run_bare):
    bare = run_bare(BUSY + RESTORED)
    proc, out, prog = profiled(run_pyrometer, tmp_path, RESTORED)
    assert proc.returncode == bare.returncode == -signal.SIGTERM, proc.stderr
    profile = load(out)
    assert profile["ended_by"] == "SIGTERM"


def test_ignored_sighup_stays_ignored(tmp_path, run_pyrometer):
    """Under nohup (SIGHUP ignored from the start) the program is not killed by it."""
    source = "import os, signal\nbusy(0.2)\nos.kill(os.getpid(), signal.SIGHUP)\nbusy(0.2)\nprint('alive')\n"
    prog = write_program(tmp_path, BUSY + source)
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-c",
                           "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
                           "os.execv(sys.executable, [sys.executable, '-m', 'pyrometer', *sys.argv[1:]])",
                           "--json", "--outfile", str(out), str(prog)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT_S)
    assert proc.returncode == 0 and proc.stdout == "alive\n", proc.stderr
    assert load(out)["ended_by"] == "exit"


# ---------------------------------------------------------------------------
# Crashes, SIGKILL, _exit from C: nothing can run in the process
# ---------------------------------------------------------------------------

CRASH = """
import sys, _groundtruth
busy(0.5)
print("crashing", flush=True)
_groundtruth.crash(sys.argv[1])
"""


@pytest.mark.parametrize("how,sig", [("segv", "SIGSEGV"), ("abort", "SIGABRT")])
def test_crash_is_said_and_not_hidden(tmp_path, run_pyrometer, run_bare, how, sig):
    bare = run_bare(BUSY + CRASH, args=[how])
    proc, out, prog = profiled(run_pyrometer, tmp_path, CRASH, args=[how])
    assert proc.returncode == bare.returncode == -getattr(signal, sig), proc.stderr
    assert proc.stdout == bare.stdout == "crashing\n"
    lines = pyrometer_lines(proc.stderr)
    assert len(lines) == 1 and sig in lines[0] and "profile is lost" in lines[0], proc.stderr


def test_crash_reaches_faulthandler(tmp_path, run_pyrometer, run_bare):
    """faulthandler, enabled before pyrometer's handler was installed, still runs
    (chained) and the process still dies of the same signal."""
    source = "import faulthandler\nfaulthandler.enable()\n" + CRASH
    bare = run_bare(BUSY + source, args=["segv"])
    proc, out, prog = profiled(run_pyrometer, tmp_path, source, args=["segv"])
    assert proc.returncode == bare.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in bare.stderr
    assert "Fatal Python error: Segmentation fault" in proc.stderr, proc.stderr
    assert len(pyrometer_lines(proc.stderr)) == 1, proc.stderr


@pytest.mark.parametrize("how", ["segv", "sigkill", "native-exit"])
def test_periodic_report_is_the_last_word(tmp_path, run_pyrometer, how):
    """With --profile-interval, what the last report holds stays, marked, and the
    writer says on stderr that the profile stops there."""
    source = BUSY + """
import os, signal, sys, _groundtruth
busy(0.6)
how = sys.argv[1]
if how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
_groundtruth.crash("segv" if how == "segv" else "exit")
"""
    prog = write_program(tmp_path, source)
    out = tmp_path / "out.json"
    proc = run_pyrometer(["--json", "--profile-interval", "0.1", "--outfile", out, prog, how], cwd=tmp_path)
    expected = {"segv": -signal.SIGSEGV, "sigkill": -signal.SIGKILL, "native-exit": 3}[how]
    assert proc.returncode == expected, proc.stderr
    lines = pyrometer_lines(proc.stderr)
    assert any("holds the last periodic report" in line for line in lines), proc.stderr
    assert len(lines) == (2 if how == "segv" else 1), proc.stderr
    profile = load(out)
    assert profile["ended_by"] == "unknown" and profile["exit_status"] is None
    assert any("without its final profile" in n for n in profile["notices"]), profile["notices"]
    assert busy_samples(profile, prog) >= 3


# ---------------------------------------------------------------------------
# Ctrl-C
# ---------------------------------------------------------------------------

def wait_for(proc: subprocess.Popen, path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, "the run ended early"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


CTRL_C_TWICE = BUSY + """
import os, sys
busy(0.4)
try:
    open("ready", "w").close()  # inside the try: a Ctrl-C right after it is caught
    busy(20)
except KeyboardInterrupt:
    print("cleaning up", flush=True)
    open("cleaning", "w").close()
    busy(20)  # the second Ctrl-C interrupts this
"""


def _frames(stderr: str) -> list[str]:
    """A traceback's shape: its frames without line numbers, its exception lines;
    the source lines and their markers, which depend on the line, left out."""
    shape = []
    for line in stderr.splitlines():
        if line.startswith("    ") or not line.strip(" ^~"):
            continue
        if line.startswith("  File") and not line.endswith(", in <module>"):
            continue  # where below the program's own line a Ctrl-C lands (busy(), open()) is chance too
        shape.append(re.sub(r", line \d+,", ", line N,", line))
    return shape


def ctrl_c_twice(start, tmp_path, args, program) -> tuple[int, str, str]:
    """Ctrl-C twice at the terminal: SIGINT to the whole foreground process group."""
    proc = start(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(proc, tmp_path / "ready")
        os.killpg(proc.pid, signal.SIGINT)
        wait_for(proc, tmp_path / "cleaning")
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=PROGRAM_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, stdout, stderr


@pytest.mark.parametrize("options", [[], ["--profile-interval", "0.1"]], ids=["plain", "periodic"])
def test_ctrl_c_twice(tmp_path, start_pyrometer, groundtruth_dir, options):
    prog = write_program(tmp_path, CTRL_C_TWICE)
    out = tmp_path / "out.json"

    def bare(args, **kw):
        from conftest import program_env
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen([sys.executable, *args], env=program_env(groundtruth_dir), start_new_session=True,
                                **kw)

    status, stdout, stderr = ctrl_c_twice(bare, tmp_path, [str(prog)], prog)
    (tmp_path / "ready").unlink()
    (tmp_path / "cleaning").unlink()
    p_status, p_stdout, p_stderr = ctrl_c_twice(start_pyrometer, tmp_path,
                                                ["--quiet", "--json", "--outfile", str(out), *options, str(prog)],
                                                prog)
    assert p_status == status == -signal.SIGINT, p_stderr
    assert p_stdout == stdout == "cleaning up\n"
    # Where each Ctrl-C lands in the busy loop (which line of it) is chance, in
    # either run: tracebacks are compared by their frames and exceptions.
    assert _frames(p_stderr) == _frames(stderr), "the program's tracebacks differ, or something else was written"
    assert p_stderr.count("Traceback") == 2 and "pyrometer" not in p_stderr
    profile = load(out)
    assert profile["exit_status"] == 130 and profile["ended_by"] == "exit"


def test_ctrl_c_while_the_profile_is_written(tmp_path, start_pyrometer):
    """A second Ctrl-C that lands in pyrometer's own end (made long here by a
    stopped report writer) neither stops the profile nor shows a traceback."""
    prog = write_program(tmp_path, BUSY + """
import os, signal
busy(0.4)
me = os.getpid()
writer = int(open(f"/proc/{me}/task/{me}/children").read().split()[0])
os.kill(writer, signal.SIGSTOP)
busy(0.3)
open("ready", "w").close()
busy(20)
""")
    out = tmp_path / "out.json"
    proc = start_pyrometer(["--quiet", "--json", "--profile-interval", "0.1", "--outfile", str(out), str(prog)],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(proc, tmp_path / "ready")
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.8)  # the program is over; pyrometer waits for the stopped writer
        assert proc.poll() is None, "the run ended before the second Ctrl-C"
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=PROGRAM_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGINT, stderr
    assert stderr.count("Traceback") == 1 and stderr.count("KeyboardInterrupt") == 1, stderr
    lines = pyrometer_lines(stderr)
    assert len(lines) == 1 and "did not answer" in lines[0], stderr
    profile = load(out)
    assert profile["exit_status"] == 130
