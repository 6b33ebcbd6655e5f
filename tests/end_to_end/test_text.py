"""The terminal report: the width of the terminal respected (lines cut, never
wrapped, wide characters counted twice, control characters neutralised), a
header that says what was profiled, how long, with which options and how many
samples, and plain words for a run too short to sample."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import unicodedata

import pytest

from synthetic import SHOWN_IN_TEXT, STRING_FIELDS, make_profile

from pyrometer.render import json_out, text

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def columns(line: str) -> int:
    line = ANSI.sub("", line)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in line)


def hostile_profile() -> dict:
    profile = make_profile(2, 30, seed=7)
    lines = next(iter(profile["files"].values()))["lines"]
    lines[1]["line"] = "\ts = '" + "漢字" * 80 + "'"
    lines[2]["line"] = "x = '\x1b[2J\x1b[31mred\r\x07'  # escape sequences in a string"
    lines[3]["line"] = "y = 'e\u0301' * 300  # combining accents"
    return profile


@pytest.mark.parametrize("width", [60, 80, 100, 132])
def test_lines_fit_the_width(width):
    out = text.render(hostile_profile(), color=True, width=width)
    for line in out.splitlines():
        assert columns(line) <= width, f"{columns(line)} columns > {width}: {line!r}"
    plain = ANSI.sub("", out)
    assert "\x1b" not in plain and "\r" not in plain and "\x07" not in plain
    assert "…" in out


def _figures(profile: dict, waits: bool, awaits: bool) -> dict[int, list[str]]:
    """What each line of the first file must show, cell by cell: every figure,
    whatever the width (a timeline's sparkline is as long as the layout makes
    it: its share, the figure, is compared)."""
    (f,) = [next(iter(profile["files"].values()))]
    expected = {}
    for e in f["lines"]:
        cells = text._time_cells(e, waits, awaits) + (text._memory_cells(e) if profile["memory"] else [])
        expected[e["lineno"]] = [c.split(" ")[-1] if isinstance(c, text._Timeline) else c for c in cells]
    return expected


def _shown_figures(out: str, lineno: int) -> list[str]:
    row = next(line for line in out.splitlines() if re.match(rf"\s*{lineno}\s*│", line))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    return [c.split(" ")[-1] if "%" in c and " " in c else c for c in cells]


@pytest.mark.parametrize("width", [60, 80, 100, 200])
@pytest.mark.parametrize("extra", ["memory", "memory+wait", "memory+wait+await", "cpu-only"])
def test_every_column_at_every_width(width, extra):
    """An 80-column terminal (and a 60-column one) shows every figure column:
    the source is what gives way, never a figure; every line fits."""
    profile = make_profile(1, 30, seed=3, memory=extra != "cpu-only")
    waits, awaits = "wait" in extra, "await" in extra
    if waits:
        profile["cpu_time_sec"]["gil_wait"] = 5.0
    if awaits:
        profile["await_time_sec"] = 3.0
    out = text.render(profile, width=width)
    for line in out.splitlines():
        assert columns(line) <= width, f"{columns(line)} columns > {width}: {line!r}"
    expected = _figures(profile, waits, awaits)
    for lineno, cells in expected.items():
        assert _shown_figures(out, lineno) == cells, (width, extra, lineno, out)
    if extra != "cpu-only":
        assert "too narrow" not in out
        assert ("Copy MB/s" in out) if width >= 132 else ("Copy" in out and "MB/s" in out)
    # The source is still there, cut where it must be.
    assert "def " in out and "= " in out


def test_header_and_notices_wrap_not_cut():
    profile = make_profile(1, 10)
    profile["notices"] = ["a notice long enough to need three lines at eighty columns, " * 3 + "END"]
    for width in (60, 80):
        out = text.render(profile, width=width)
        head = out.split("\n\n")[0]
        assert "…" not in head, head
        words = " ".join(head.split())
        assert "exit status 0" in words and "notice: a notice long" in words and "columns, END" in words, head
        assert "--allocation-sampling-window 1048576" in words, head
        for line in head.splitlines():
            assert columns(line) <= width, line


def test_header_says_what_how_long_which_options_how_many_samples():
    profile = make_profile(1, 10)
    profile["options"].update(profile_all=True, use_virtual_time=True, profile_only=["pkg"])
    lines = text.render(profile, width=400).splitlines()
    assert lines[0] == "pyrometer: synthetic.py --size big"
    assert re.match(r"elapsed 60\.000 s · 6000 samples \(every 10\.10 ms on average\) · 3 threads · exit status 0",
                    lines[1]), lines[1]
    assert lines[2].startswith("Python 36.000 s · native 18.000 s · system 6.000 s")
    assert lines[3].startswith("options: CPU + memory · --cpu-sampling-rate 0.01 · --cpu-percent-threshold 1")
    for word in ("--use-virtual-time", "--profile-all", "--profile-only pkg", "--malloc-threshold 100"):
        assert word in lines[3], lines[3]


def test_brief_and_few_samples():
    brief = make_profile(1, 10, samples=0)
    for e in next(iter(brief["files"].values()))["lines"]:
        e.update(n_cpu_percent_python=0.0, n_cpu_percent_c=0.0, n_sys_percent=0.0)
    out = text.render(brief)
    assert "ran too briefly to be sampled (60.000 s" in out
    assert "memory sampling saw" in out
    assert "module_000.py" in out, "the memory the brief run recorded is not shown"
    assert "0 samples ·" in out and "on average" not in out.splitlines()[1]
    few = text.render(make_profile(1, 10, samples=7))
    assert "Only 7 samples were taken" in few


def test_snapshot_says_so():
    profile = make_profile(1, 5)
    profile["exit_status"] = None
    out = text.render(profile)
    assert "still running" in out and "exit status" not in out.splitlines()[1]


def test_terminal_width_from_a_real_terminal(tmp_path, groundtruth_dir):
    """Run under a pseudo-terminal 70 columns wide: colour on, nothing wider."""
    from conftest import program_env  # noqa: PLC0415
    (tmp_path / "prog.py").write_text(
        "import time\nstart = time.perf_counter()\n"
        "while time.perf_counter() - start < 0.3:\n"
        "    sum(range(1000))  # a comment long enough to need cutting on a terminal that is only seventy wide\n")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 70, 0, 0))
    env = program_env(groundtruth_dir)
    env.pop("COLUMNS", None)
    env.pop("NO_COLOR", None)
    # CPU only: with the memory columns, and the wait column a busy machine
    # adds, 70 columns leave the source no room at all to be cut in.
    proc = subprocess.Popen([sys.executable, "-m", "pyrometer", "--cpu-only", "prog.py"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=60) == 0
    os.close(master)
    out = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    assert ANSI.search(out), "no colour on a terminal"
    # Cut to what the columns leave (fewer when a busy machine adds the wait
    # column): its start, then the ellipsis.
    assert "sum(range(1000))  #" in out and "…" in out
    for line in out.splitlines():
        assert columns(line) <= 70, f"{columns(line)} columns: {line!r}"


# An escape sequence of each kind a terminal acts on: OSC (here: set the window
# title, ended by BEL), CSI after ESC and as the one C1 byte, a carriage return,
# a bidirectional override; and a lone surrogate (a file name that was not UTF-8).
HOSTILE = "A\x1b]0;pwned\x07B\x1b[2J\x9b31mC\rD\u202eE\udcffF"
# What the report shows instead: every one of them as a visible escape.
VISIBLE = r"A\x1b]0;pwned\x07B\x1b[2J\x9b31mC\x0dD\u202eE\udcffF"
# What must never reach the terminal (newlines are the report's own).
FORBIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
OWN_STYLES = (text.BOLD, text.RED, text.YELLOW, text.DIM, text.RESET)


def without_own_styles(out: str) -> str:
    for style in OWN_STYLES:
        out = out.replace(style, "")
    return out


@pytest.mark.parametrize("field", sorted(STRING_FIELDS))
def test_no_control_character_from_the_profile_reaches_the_terminal(field, tmp_path, groundtruth_dir):
    """Each string of a saved profile in turn holds escape sequences: pyrometer
    view shows them as visible escapes, and no control byte reaches its output."""
    from conftest import program_env  # noqa: PLC0415
    profile = make_profile(2, 30, seed=7)
    STRING_FIELDS[field](profile, HOSTILE)
    saved = tmp_path / "hostile.json"
    saved.write_text(json.dumps(profile))
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "view", str(saved)], cwd=tmp_path,
                          capture_output=True, env=program_env(groundtruth_dir), timeout=60)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert proc.stderr == b""
    out = proc.stdout.decode("utf-8")  # strict: bytes that are not UTF-8 are a failure too
    assert not FORBIDDEN.search(out), f"{field}: {FORBIDDEN.search(out)!r} in {out[:300]!r}"
    if field in SHOWN_IN_TEXT:
        assert VISIBLE in out, f"{field}: the string is not shown with visible escapes"
    # With colour (a terminal), only the report's own styles are escape sequences.
    coloured = text.render(profile, color=True, width=100)
    assert text.RED in coloured
    assert not FORBIDDEN.search(without_own_styles(coloured)), field
    # The JSON report to a terminal: JSON escapes every control character itself.
    assert not FORBIDDEN.search(json_out.render(profile).replace("\n", "")), field


def test_text_escapes_even_what_check_refuses():
    """The renderer does not rely on model.check: markup and escape sequences in
    the fields check refuses (numbers, leak keys) are shown as visible escapes."""
    profile = make_profile(1, 20)
    profile["exit_status"] = HOSTILE
    profile["max_footprint_where"]["lineno"] = HOSTILE
    f = next(iter(profile["files"].values()))
    f["leaks"] = {HOSTILE: {"likelihood": 0.99, "velocity_mb_s": 0.5, "growth_mb": 30.0}}
    out = text.render(profile, color=True, width=400)
    assert not FORBIDDEN.search(without_own_styles(out))
    assert out.count(VISIBLE) == 3, out
