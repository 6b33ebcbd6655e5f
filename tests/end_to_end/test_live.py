"""pyrometer top (--live): the live view, driven in a terminal that tmux emulates.

Ground truth: a program that spends its first phase on line A and its second on
line B (allocating), printing a marker between them; every frame the view draws
says how long the program has run and which interval "now" covers, and shows the
program's last lines of output, so each frame can be placed in a phase and its
busiest line checked.  Then: the terminal given back (normal screen, cursor
shown), the program's output intact on it, the report written, on a normal exit,
on Ctrl-C, and when pyrometer is killed; and the view's own errors."""

from __future__ import annotations

import json
import marshal
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import program_env
from pyrometer.model import time_share

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (.ci/run installs it): the live "
                                                     "view is tested in the terminal tmux emulates")

WIDTH, HEIGHT = 120, 40
WAIT_S = 60.0  # for a frame or the end: generous, the machine may be loaded


class Terminal:
    """A tmux server of its own running `pyrometer ARGS` in one pane, then
    `echo EXIT $?` and a long sleep, so that the pane stays to be read."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]):
        self.socket = f"pyrometer-test-{os.getpid()}-{time.monotonic_ns()}"
        self.config = cwd / "tmux.conf"
        self.config.write_text("set -g history-limit 100000\n")  # the whole output stays readable
        command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "pyrometer", *map(str, args)])
        # The shell outlives a Ctrl-C (a trap, not an ignored signal: the
        # program must get SIGINT as it would from a shell) to say the status;
        # it says it a moment later, as a user would type: where pyrometer is
        # killed (SIGKILL) the view gives the terminal back as the shell wakes,
        # and what the shell writes before that goes to the alternate screen.
        shell = (f"trap true INT; cd {shlex.quote(str(cwd))} && {command}; status=$?; sleep 0.5; "
                 "echo \"EXIT $status\"; sleep 600")
        env = dict(env, TERM="xterm-256color")
        env.pop("TMUX", None)
        self._tmux("new-session", "-d", "-x", str(WIDTH), "-y", str(HEIGHT), shell, env=env)

    def _tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        return subprocess.run([TMUX, "-L", self.socket, "-f", str(self.config), *args], capture_output=True,
                              text=True, check=True, env=env, timeout=30).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p")

    def everything(self) -> str:
        """The normal screen with its history (not the alternate screen's)."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-5000")  # -J: wrapped lines joined

    def flag(self, name: str) -> str:
        return self._tmux("display-message", "-p", f"#{{{name}}}").strip()

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def wait(self, predicate, what: str, timeout: float = WAIT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            found = predicate(screen)
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {timeout:g} s; the screen:\n{self.screen()}")

    def exit_status(self) -> int:
        found = self.wait(lambda s: re.search(r"^EXIT (\d+)$", s, re.M), "end of the command")
        return int(found.group(1))

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal(groundtruth_dir, tmp_path):
    opened = []

    def start(args: list[str]) -> Terminal:
        t = Terminal(args, tmp_path, program_env(groundtruth_dir))
        opened.append(t)
        return t

    yield start
    for t in opened:
        t.close()


def lineno(source: str, marker: str) -> int:
    (n,) = [i for i, line in enumerate(source.splitlines(), 1) if marker in line]
    return n


PHASE_S = 4.0
TWO_PHASES = f"""
import sys, time

def phase_a(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end: n += 1  # @A
    return n

def phase_b(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end: b = bytearray(4_000_000)  # @B

print("marker: phase A \\x1b[1mbold\\x1b[0m", flush=True)
phase_a({PHASE_S})
print("marker: phase B", flush=True)
phase_b({PHASE_S})
print("marker: done", flush=True)
print("marker: on stderr", file=sys.stderr)
"""

FRAME = re.compile(r"running (\d+\.\d) s · now = the last (\d+\.\d) s")


def parse_frame(screen: str) -> dict | None:
    """A frame's times, its busiest line and that line's figures by column, and
    the program output it shows; None where the screen is not a full frame."""
    head = FRAME.search(screen)
    lines = screen.splitlines()
    tables = [i for i, line in enumerate(lines) if line.rstrip().endswith("line (now)")]
    if not head or not tables:
        return None
    header = [c.strip() for c in lines[tables[0]].split("│")]
    rows = [line for line in lines[tables[0] + 1:] if "prog.py:" in line]
    output = lines[next((i for i, line in enumerate(lines) if line.startswith("program output")), len(lines)):]
    if not rows:
        return None
    top = dict(zip(header, (c.strip() for c in rows[0].split("│"))))
    where = re.match(r"prog\.py:(\d+)", top["line (now)"])
    return {"elapsed": float(head.group(1)), "interval": float(head.group(2)), "top": int(where.group(1)),
            "cells": top, "output": "\n".join(output)}


@needs_tmux
def test_now_follows_the_phases_and_the_terminal_is_given_back(terminal, tmp_path):
    (tmp_path / "prog.py").write_text(TWO_PHASES)
    line_a, line_b = lineno(TWO_PHASES, "# @A"), lineno(TWO_PHASES, "# @B")
    t = terminal(["top", "prog.py"])
    t.wait(lambda s: "pyrometer top: prog.py" in s, "live view")
    assert t.flag("alternate_on") == "1", "the view is not on the alternate screen"
    frames, b_seen_at = [], None
    deadline = time.monotonic() + WAIT_S + 3 * PHASE_S
    while time.monotonic() < deadline:
        screen = t.screen()
        if re.search(r"^EXIT \d+$", screen, re.M):
            break
        f = parse_frame(screen)
        if f is not None and (not frames or f["elapsed"] != frames[-1]["elapsed"]):
            frames.append(f)
            if b_seen_at is None and "marker: phase B" in f["output"]:
                b_seen_at = f["elapsed"]
        time.sleep(0.1)
    # Frames wholly in phase A: after the first, before B's marker was printed.
    in_a = [f for f in frames if "marker: phase A" in f["output"] and "marker: phase B" not in f["output"]
            and f["elapsed"] >= 1.5]
    # Wholly in phase B: the interval begins after a frame that showed B's
    # marker, and the program has not printed its end yet.
    in_b = [f for f in frames if b_seen_at is not None and f["elapsed"] - f["interval"] >= b_seen_at
            and "marker: done" not in f["output"]]
    seen = [(f["elapsed"], f["top"]) for f in frames]
    assert in_a, f"no frame seen in phase A: {seen}"
    assert in_b, f"no frame seen in phase B: {seen}"
    assert all(f["top"] == line_a for f in in_a), f"phase A's busiest line is not {line_a}: {seen}"
    assert all(f["top"] == line_b for f in in_b), f"phase B's busiest line is not {line_b}: {seen}"
    # Line B allocates 4 MB per pass: megabytes allocated now, over the interval.
    for f in in_b:
        assert f["cells"]["Now MB"] and float(f["cells"]["Now MB"]) > 1.0, f["cells"]
        assert f["cells"]["Now %"].endswith("%") and int(f["cells"]["Now %"][:-1]) >= 50, f["cells"]

    assert t.exit_status() == 0
    assert t.flag("alternate_on") == "0", "the terminal is left on the alternate screen"
    assert t.flag("cursor_flag") == "1", "the cursor is left hidden"
    text = t.everything()
    # The program's output, whole and in its order, on the normal screen, its
    # escape sequences passed through (tmux has drawn the bold: no ESC left).
    lines = text.splitlines()
    printed = [line for line in lines if line.startswith("marker:")]
    assert printed == ["marker: phase A bold", "marker: phase B", "marker: done", "marker: on stderr"], text
    # Then the usual report, with both lines.
    report = lines.index("pyrometer: prog.py")
    assert report > lines.index("marker: on stderr"), text
    for n in (line_a, line_b):
        assert any(re.match(rf"\s*{n}│[^a-z]*\d+%", line) for line in lines[report:]), (n, text)


@needs_tmux
def test_crash_after_much_output(terminal, tmp_path):
    """Output faster than the view draws, then an exception: every line, in
    order, then the traceback, then the report; the terminal given back."""
    (tmp_path / "prog.py").write_text(
        "import time\nend = time.perf_counter() + 1.5\n"
        "while time.perf_counter() < end: pass  # @busy\n"
        "for i in range(5000): print(f'line {i}')\n"
        "raise ValueError('boom')\n")
    t = terminal(["top", "prog.py"])
    assert t.exit_status() == 1
    assert t.flag("alternate_on") == "0" and t.flag("cursor_flag") == "1"
    lines = t.everything().splitlines()
    assert [line for line in lines if line.startswith("line ")] == [f"line {i}" for i in range(5000)]
    boom = lines.index("ValueError: boom")
    assert lines.index("line 4999") < boom < lines.index("pyrometer: prog.py")


LOOP = """
import time
print("marker: started", flush=True)
i = 0
while True: i += 1  # @loop
"""


@needs_tmux
def test_ctrl_c_ends_both_and_the_profile_is_written(terminal, tmp_path):
    (tmp_path / "prog.py").write_text(LOOP)
    t = terminal(["top", "--json", "--outfile", "out.json", "prog.py"])
    t.wait(lambda s: (f := parse_frame(s)) and f["elapsed"] >= 1.0, "frame of the loop")
    t.keys("C-c")
    assert t.exit_status() == 128 + signal.SIGINT, t.everything()  # died of SIGINT, as python does
    assert t.flag("alternate_on") == "0" and t.flag("cursor_flag") == "1"
    text = t.everything()
    assert "marker: started" in text.splitlines(), text
    assert "KeyboardInterrupt" in text, "the program's traceback is lost"
    assert "pyrometer: profile written to out.json" in text, text
    profile = json.loads((tmp_path / "out.json").read_text())
    assert profile["exit_status"] == 130
    (entry,) = [e for e in profile["files"][str(tmp_path / "prog.py")]["lines"] if "# @loop" in e["line"]]
    assert time_share(entry) > 50, entry  # of every kind: waiting for a CPU too, on a loaded machine


@needs_tmux
def test_killed_pyrometer_leaves_the_terminal_restored(terminal, tmp_path):
    (tmp_path / "prog.py").write_text("import os\nopen('pid', 'w').write(str(os.getpid()))\n" + LOOP)
    t = terminal(["top", "prog.py"])
    t.wait(lambda s: (f := parse_frame(s)) and f["elapsed"] >= 1.0, "frame of the loop")
    os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
    assert t.exit_status() == 128 + signal.SIGKILL
    assert t.flag("alternate_on") == "0" and t.flag("cursor_flag") == "1"
    text = t.everything()
    assert "marker: started" in text.splitlines(), text
    assert "pyrometer: the program ended without writing its profile" in text, text


@needs_tmux
def test_bad_program_is_one_clear_error(terminal, tmp_path):
    t = terminal(["top", "missing.py"])
    assert t.exit_status() == 2
    text = t.everything()
    assert "can't open file" in text and "missing.py" in text and "Traceback" not in text, text
    assert t.flag("alternate_on") == "0"


def test_not_a_terminal_is_refused(run_pyrometer, tmp_path):
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    for args in (["top", "prog.py"], ["--live", "prog.py"]):
        proc = run_pyrometer(args, cwd=tmp_path)
        assert proc.returncode == 2
        assert proc.stderr.startswith("pyrometer: error: pyrometer top draws on a terminal and standard "
                                      "output is not one"), proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and proc.stdout == ""
        assert not (tmp_path / "ran").exists(), "the program ran without its view"


def test_usage_errors(run_pyrometer, tmp_path):
    proc = run_pyrometer(["top"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("pyrometer: error: no program to profile")
    proc = run_pyrometer(["top", "--profile-interval", "1", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 2 and "--live (pyrometer top) and --profile-interval are exclusive" in proc.stderr


def test_the_views_own_error_gives_the_terminal_back(groundtruth_dir, tmp_path):
    """The view process alone, on pseudo-terminals: a snapshot it cannot read
    makes it leave the alternate screen, show the output it held, say why, and
    pass the program's output through from then on."""
    import fcntl
    import select
    import struct
    import termios

    def high(fd: int) -> int:
        return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)

    screen_master, screen = os.openpty()
    fcntl.ioctl(screen, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    output_master, output = os.openpty()
    held = high(os.open(tmp_path / "held", os.O_RDWR | os.O_CREAT))
    mine, theirs = socket.socketpair()
    fds = [high(screen), high(output_master), held]
    code = ("import os; [os.dup2(a, b) for a, b in zip(%r, (3, 4, 5))]; "
            "from pyrometer.run.top import child_main; child_main()" % (fds,))
    view = subprocess.Popen([sys.executable, "-c", code], stdin=theirs.fileno(), stdout=theirs.fileno(),
                            pass_fds=fds, env=program_env(groundtruth_dir), start_new_session=True)
    theirs.close()
    for fd in fds:
        os.close(fd)
    got = b""

    def read_until(needle: bytes) -> None:
        nonlocal got
        deadline = time.monotonic() + WAIT_S
        while needle not in got and time.monotonic() < deadline:
            if select.select([screen_master], [], [], 0.2)[0]:
                got += os.read(screen_master, 65536)
        assert needle in got, got

    try:
        os.write(output, b"held while the view is up\n")
        read_until(b"\x1b[?1049h")
        read_until(b"held while the view is up")  # in the output pane
        payload = marshal.dumps({"program": "prog.py"})  # no aggregates: the view cannot build a profile
        mine.sendall(len(payload).to_bytes(8, "little") + payload)
        read_until(b"the live view stopped (KeyError")
        assert mine.recv(3) == b"ok\n"  # the run goes on
        left = got.rindex(b"\x1b[?1049l")
        assert left < got.index(b"held while the view is up", left) < got.index(b"the live view stopped")
        os.write(output, b"straight through\n")
        read_until(b"straight through")
        mine.sendall((0).to_bytes(8, "little"))  # the run is over
        assert view.wait(timeout=WAIT_S) == 0
    finally:
        if view.poll() is None:
            view.kill()
        mine.close()
        os.close(screen_master)
        os.close(output)


SWITCHED = """
import os, time
print("marker: started", flush=True)
n = 0
while not os.path.exists("b"): n += 1  # @A
while not os.path.exists("end"): b = bytearray(4_000_000)  # @B
print("marker: done", flush=True)
"""


@needs_tmux
def test_attach_to_a_running_program(terminal, start_pyrometer, tmp_path):
    """pyrometer top --pid N in a second terminal, on a program that writes its
    snapshots (--profile-interval with --json): the phases are switched by the
    test (files), and the frames after each switch show its line on top."""
    (tmp_path / "prog.py").write_text(SWITCHED)
    line_a, line_b = lineno(SWITCHED, "# @A"), lineno(SWITCHED, "# @B")
    with open(tmp_path / "program-output", "w") as out:
        program = start_pyrometer(["--profile-interval", "0.5", "--json", "--outfile", "snap.json", "prog.py"],
                                  cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (tmp_path / "snap.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        t = terminal(["top", "--pid", program.pid])
        first = t.wait(lambda s: (f := parse_frame(s)) and f["elapsed"] >= 1.0 and f, "frame of phase A")
        assert first["top"] == line_a, first
        assert f"process {program.pid} · its snapshots in {tmp_path / 'snap.json'}" in t.screen()
        (tmp_path / "b").touch()
        # A frame whose interval begins 1.5 s after the last frame seen before
        # the switch (snapshots every 0.5 s, read every 0.1 s) is wholly after it.
        switched = first["elapsed"]
        in_b = t.wait(lambda s: (f := parse_frame(s)) and f["elapsed"] - f["interval"] >= switched + 1.5 and f,
                      "frame of phase B")
        assert in_b["top"] == line_b, in_b
        assert float(in_b["cells"]["Now MB"]) > 1.0, in_b["cells"]
        (tmp_path / "end").touch()
        assert program.wait(timeout=WAIT_S) == 0
        assert t.exit_status() == 0
        assert t.flag("alternate_on") == "0" and t.flag("cursor_flag") == "1"
        text = t.everything()
        assert f"pyrometer: process {program.pid} ended; its profile is in {tmp_path / 'snap.json'}" in text, text
        assert (tmp_path / "program-output").read_text().startswith("marker: started\nmarker: done\n")
        assert json.loads((tmp_path / "snap.json").read_text())["exit_status"] == 0
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()


def test_attach_needs_a_program_that_writes_snapshots(run_pyrometer, start_pyrometer, tmp_path):
    import pty
    # Run in a pseudo-terminal: the view's check for a terminal comes first.
    def top(*args: str) -> tuple[int, str]:
        main, sub = pty.openpty()
        try:
            proc = subprocess.run([sys.executable, "-m", "pyrometer", "top", *args], stdin=subprocess.DEVNULL,
                                  stdout=sub, stderr=subprocess.PIPE, text=True, timeout=WAIT_S,
                                  env=program_env(None))
        finally:
            os.close(sub)
            os.close(main)
        return proc.returncode, proc.stderr

    # A plain Python process (not this one: an earlier test may have loaded
    # pyrometer's core into the test process and installed its signal handler).
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.DEVNULL)
    try:
        status, err = top("--pid", str(plain.pid))
    finally:
        plain.kill()
        plain.wait()
    assert status == 2 and err == f"pyrometer: error: process {plain.pid} is not running under pyrometer\n"
    (tmp_path / "prog.py").write_text("import time\nopen('ready', 'w').close()\ntime.sleep(60)\n")
    program = start_pyrometer(["--cpu-only", "prog.py"], cwd=tmp_path, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        status, err = top("--pid", str(program.pid))
        assert status == 2 and err.startswith(f"pyrometer: error: process {program.pid} writes no JSON "
                                              "snapshots to show: start the program with pyrometer "
                                              "--profile-interval 1 --json PROG"), err
    finally:
        program.kill()
        program.wait()
    proc = run_pyrometer(["top", "--pid", "1", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 2 and "takes no program to run" in proc.stderr


def test_since_is_the_change_between_snapshots():
    """model.since on two made-up snapshots: the seconds and MB of each entry in
    between, its share of the interval's time, its totals; busiest now first."""
    from pyrometer import model

    def entry(lineno, line, python, native, mb, samples=0):
        return {"lineno": lineno, "line": line, "n_samples": samples,
                "n_cpu_python_sec": python, "n_cpu_native_sec": native,
                "n_sys_sec": 0.0, "n_gil_wait_sec": 0.0, "n_cpu_wait_sec": 0.0, "n_malloc_mb": mb,
                "n_cpu_percent_python": python * 10, "n_cpu_percent_c": native * 10, "n_sys_percent": 0.0}

    def snapshot(elapsed, total, lines, functions=()):
        return {"elapsed_time_sec": elapsed, "total_time_sec": total, "memory": True,
                "files": {"/p/prog.py": {"lines": list(lines), "functions": list(functions)}}}

    # Line 5 was not sampled in between: its seconds moved (the estimate's
    # unit is the whole run's), but it did nothing now.
    before = snapshot(4.0, 4.0, [entry(3, "a()", 3.0, 0.0, 10.0, 300), entry(5, "d()", 0.5, 0.0, 0.0, 50),
                                 entry(7, "b()", 1.0, 0.0, 0.0, 100), entry(9, "c()", 0.0, 0.0, 0.0)])
    after = snapshot(5.0, 5.0, [entry(3, "a()", 3.2, 0.0, 10.0, 320), entry(5, "d()", 0.6, 0.0, 0.0, 50),
                                entry(7, "b()", 1.0, 0.8, 50.0, 180), entry(9, "c()", 0.0, 0.0, 0.0)],
                     [entry(1, "main", 5.0, 0.0, 60.0, 550)])
    after["unattributed"] = {"python_sec": 0.1, "native_sec": 0.0}
    change = model.since(before, after)
    assert change["interval_sec"] == pytest.approx(1.0)
    assert change["time_sec"] == pytest.approx(0.2 + 0.8 + 0.1)  # the lines' now, and time on no line
    first, second, third = change["lines"]  # line 9 has had nothing at all: not listed
    assert third["lineno"] == 5 and third["time_sec"] == 0.0 and third["total_time_sec"] == pytest.approx(0.6)
    assert (first["lineno"], second["lineno"]) == (7, 3)
    assert first["native_sec"] == pytest.approx(0.8) and first["percent"] == pytest.approx(80.0 / 1.1)
    assert first["native_percent"] == pytest.approx(80.0 / 1.1) and first["python_percent"] == pytest.approx(0.0)
    assert first["malloc_mb"] == pytest.approx(50.0) and first["total_malloc_mb"] == pytest.approx(50.0)
    assert first["total_time_sec"] == pytest.approx(1.8)
    assert second["python_sec"] == pytest.approx(0.2) and second["malloc_mb"] == pytest.approx(0.0)
    assert second["total_percent"] == pytest.approx(32.0)  # time_share of the later snapshot
    (function,) = change["functions"]  # new since before: all of it is now
    assert function["time_sec"] == pytest.approx(5.0) and function["malloc_mb"] == pytest.approx(60.0)
    # Since the start (no snapshot before): the totals.
    assert model.since(None, after)["lines"][0]["time_sec"] == pytest.approx(3.2)
