"""Where a report goes (--outfile, view -o): a regular file is replaced
atomically, keeping its mode, and a new one gets the mode any new file gets
under the umask, which is read, never set, while the program's threads may
still run; a device, a FIFO and what a symbolic link points to are written,
never replaced by a regular file.  A name pyrometer chose itself
(pyrometer-profile.json) is replaced whatever is there: a link planted in a
shared directory is never followed."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import program_env

PROGRAM = "print('ran')\n"


def pyrometer(args: list, cwd: Path, groundtruth: Path, umask: int | None = None) -> subprocess.CompletedProcess:
    """python -m pyrometer ARGS, under umask when given (set in the child only)."""
    return subprocess.run([sys.executable, "-m", "pyrometer", *[str(a) for a in args]], cwd=cwd,
                          capture_output=True, text=True, env=program_env(groundtruth), timeout=60,
                          stdin=subprocess.DEVNULL, preexec_fn=None if umask is None else lambda: os.umask(umask))


@pytest.fixture
def prog(tmp_path) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


@pytest.fixture
def saved(tmp_path, prog, groundtruth_dir) -> Path:
    proc = pyrometer(["--json", "--outfile", tmp_path / "saved.json", prog], tmp_path, groundtruth_dir)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "saved.json"


@pytest.fixture
def null_device(tmp_path) -> Path:
    """A character device that discards what is written to it.  As root, a
    private one (the null device's numbers, in tmp_path): were pyrometer to
    replace it with a file, as it once did, a test run as root would replace the
    machine's /dev/null.  Otherwise /dev/null itself, which only root can replace."""
    if os.geteuid() != 0:
        return Path("/dev/null")
    path = tmp_path / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(path, "w") as f:
            f.write("x")
    except OSError as e:  # a file system mounted nodev, a container without mknod
        pytest.skip(f"cannot make a private null device in {tmp_path}: {e}")
    return path


def test_device_is_written_not_replaced(tmp_path, prog, saved, null_device, groundtruth_dir):
    for args in (["--json", "--outfile", null_device, prog], ["--html", "--outfile", null_device, prog],
                 ["view", saved, "--json", "-o", null_device]):
        proc = pyrometer(args, tmp_path, groundtruth_dir)
        assert proc.returncode == 0, proc.stderr
        # Where it went, and no "view:" (there is nothing to look at again in a device).
        assert re.fullmatch(rf"pyrometer: [a-z ]+ written to {re.escape(str(null_device))}\n", proc.stderr), proc.stderr
        assert stat.S_ISCHR(os.stat(null_device).st_mode), f"{args}: {null_device} is no longer a device"
    assert not list(tmp_path.glob(".pyrometer-*")), "a temporary file was left"


def test_fifo_is_written_into(tmp_path, prog, saved, groundtruth_dir):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    for args in (["--json", "--outfile", fifo, prog], ["view", saved, "--json", "-o", fifo]):
        # The test holds both ends (O_RDWR never waits for a peer), so that the
        # report's open does not wait, and a pipe large enough for the report.
        ends = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        try:
            fcntl.fcntl(ends, fcntl.F_SETPIPE_SZ, 1 << 20)
            proc = pyrometer(args, tmp_path, groundtruth_dir)
            assert proc.returncode == 0, proc.stderr
            assert stat.S_ISFIFO(os.stat(fifo).st_mode), f"{args}: the FIFO was replaced"
            data = b""
            while True:
                try:
                    chunk = os.read(ends, 1 << 20)
                except BlockingIOError:
                    break
                data += chunk
        finally:
            os.close(ends)
        assert json.loads(data)["pyrometer_schema"] == 1, f"{args}: {data[:200]!r}"


def test_symbolic_link_stays_and_its_target_is_written(tmp_path, prog, saved, groundtruth_dir):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "profile.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(elsewhere / "new.json")
    for path, points_to in ((link, target), (dangling, elsewhere / "new.json")):
        proc = pyrometer(["--json", "--outfile", path, prog], tmp_path, groundtruth_dir)
        assert proc.returncode == 0, proc.stderr
        assert path.is_symlink() and Path(os.readlink(path)) == points_to, f"{path} was replaced"
        assert json.loads(points_to.read_text())["pyrometer_schema"] == 1
    # A link to something written in place: to this process's standard output (a pipe).
    out = tmp_path / "stdout-link"
    out.symlink_to("/dev/stdout")
    proc = pyrometer(["view", saved, "--json", "-o", out], tmp_path, groundtruth_dir)
    assert proc.returncode == 0, proc.stderr
    assert out.is_symlink() and json.loads(proc.stdout)["pyrometer_schema"] == 1
    assert not list(tmp_path.glob(".pyrometer-*")) and not list(elsewhere.glob(".pyrometer-*"))


def test_a_name_pyrometer_chose_never_follows_a_link(tmp_path, prog, groundtruth_dir):
    """pyrometer-profile.json and .html, the names pyrometer picks when none is
    given, in a shared working directory: a link planted there is replaced by
    the report, and what it points to is left as it was (content and mode)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for option, name in (("--json", "pyrometer-profile.json"), ("--html", "pyrometer-profile.html")):
        target = victim / (name + ".secret")
        target.write_text("mine\n")
        target.chmod(0o600)
        planted = tmp_path / name
        planted.symlink_to(target)
        proc = pyrometer([option, prog], tmp_path, groundtruth_dir)
        assert proc.returncode == 0, proc.stderr
        assert not planted.is_symlink() and planted.is_file(), name
        assert target.read_text() == "mine\n" and stat.S_IMODE(target.stat().st_mode) == 0o600, name
    assert json.loads((tmp_path / "pyrometer-profile.json").read_text())["pyrometer_schema"] == 1


def test_a_file_replaced_keeps_its_mode(tmp_path, prog, groundtruth_dir):
    """A private report stays private: replaced, a 0600 file is 0600 again
    (through a link the user gave, too)."""
    out = tmp_path / "private.json"
    out.write_text("old\n")
    out.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(out)
    for path in (out, link):
        proc = pyrometer(["--json", "--outfile", path, prog], tmp_path, groundtruth_dir, umask=0o022)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o600, path
        assert json.loads(out.read_text())["pyrometer_schema"] == 1


def test_regular_file_is_replaced(tmp_path, prog, groundtruth_dir):
    out = tmp_path / "profile.json"
    out.write_text("old\n")
    old_inode = out.stat().st_ino
    proc = pyrometer(["--json", "--outfile", out, prog], tmp_path, groundtruth_dir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["pyrometer_schema"] == 1
    assert out.stat().st_ino != old_inode, "not replaced by rename (a reader could see half a report)"


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_report_mode_is_a_new_files(tmp_path, prog, saved, umask, groundtruth_dir):
    """The mode any new file gets (0666 less the umask), for run and view alike."""
    expected = 0o666 & ~umask
    for args, out in ((["--json", "--outfile", tmp_path / "run.json", prog], tmp_path / "run.json"),
                      (["view", saved, "--html", "-o", tmp_path / "view.html"], tmp_path / "view.html")):
        proc = pyrometer(args, tmp_path, groundtruth_dir, umask=umask)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(out.stat().st_mode) == expected, f"{out.name}: {stat.S_IMODE(out.stat().st_mode):o}"


THREADS_CREATE_FILES = """
import os, sys, threading, time

log, directory = sys.argv[1], sys.argv[2]
real_umask = os.umask

def umask_spy(mask):  # pyrometer shares this interpreter: it would call this
    with open(log, "a") as f:
        f.write(f"os.umask({mask:o}) called\\n")
    return real_umask(mask)

os.umask = umask_spy

def create_files():
    # What any program's thread may do while the profile is written after its
    # main code returned: a file created then must get the program's umask.
    i = 0
    while True:
        path = os.path.join(directory, f"f{i % 16}")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o666)
        mode = os.fstat(fd).st_mode & 0o777
        os.close(fd)
        os.unlink(path)
        if mode != 0o644:
            with open(log, "a") as f:
                f.write(f"a file made by the program's thread has mode {mode:o}\\n")
        i += 1

threading.Thread(target=create_files, daemon=True).start()
time.sleep(0.3)
"""


def test_umask_is_never_set_while_the_program_runs(tmp_path, groundtruth_dir):
    prog = tmp_path / "threads.py"
    prog.write_text(THREADS_CREATE_FILES)
    log, files = tmp_path / "log.txt", tmp_path / "files"
    files.mkdir()
    log.write_text("")
    for fmt in ("--json", "--html", "--cli"):
        out = tmp_path / f"report{fmt}"
        proc = pyrometer([fmt, "--outfile", out, prog, log, files], tmp_path, groundtruth_dir, umask=0o022)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert log.read_text() == ""


def test_umask_without_proc(tmp_path, monkeypatch):
    """Where /proc/self/status does not say it, the umask comes from a probe
    file, made in a private directory that is then removed."""
    from pyrometer.render import json_out  # noqa: PLC0415
    from_proc = json_out.umask()

    def no_proc(path, *args, **kw):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return open(path, *args, **kw)

    monkeypatch.setattr(json_out, "open", no_proc, raising=False)
    assert json_out.umask(str(tmp_path)) == from_proc
    assert list(tmp_path.iterdir()) == []


def test_json_layout_reads_back_as_json_dumps_would_write_it(tmp_path, groundtruth_dir):
    """The profile is written by the C encoder, laid out one section, file and
    entry per line (render/json_out.py): what it writes must read back exactly as
    what json.dumps writes, for a real profile and for keys json turns into
    strings, and a NaN is refused as json.dumps(allow_nan=False) refuses it."""
    from pyrometer.render.json_out import render  # noqa: PLC0415
    (tmp_path / "prog.py").write_text("x = [bytearray(1000) for _ in range(3000)]\nsum(range(10**6))\n")
    out = tmp_path / "p.json"
    subprocess.run([sys.executable, "-m", "pyrometer", "--quiet", "--json", "--outfile", str(out), "prog.py"],
                   cwd=tmp_path, check=True, env=program_env(groundtruth_dir), stdin=subprocess.DEVNULL,
                   timeout=60)
    profile = json.loads(out.read_text())
    assert len(out.read_text().splitlines()) > 20  # laid out, not one line
    odd = {"files": {"a": {"lines": [{"x": [1, [2.5, None]]}], 1: {2: True}}}, None: [], True: {}, 1.5: "s",
           "deep": [[{"a": {"b": {"c": [1]}}}]], "empty": {}, "nested_empty": [[], {}]}
    for value in (profile, odd, [], {}, 0, "text", [1, 2, 3]):
        assert json.loads(render(value)) == json.loads(json.dumps(value))
    with pytest.raises(ValueError):
        render({"files": {"x": {"lines": [{"n": float("nan")}]}}})


def test_quiet_lines_are_written_as_any_line_is(tmp_path, groundtruth_dir):
    """Lines with nothing measured (model.schema.QuietLine) are written from one
    encoding of their shared zero figures: byte for byte what the general
    layout writes for the same profile read back as plain dicts, for a listing
    that is mostly quiet lines with awkward text (quotes, escapes, non-ASCII).
    An entry whose figures changed after build, even to an equal value written
    otherwise (0 for 0.0, -0.0, False), is written from its own; a built
    profile passes model.check, quiet lines and all."""
    from pyrometer import model  # noqa: PLC0415
    from pyrometer.model.schema import QuietLine  # noqa: PLC0415
    from pyrometer.render.json_out import render  # noqa: PLC0415
    source = "".join(f"# comment {i} \"quoted\" \\ \u00e9\u6f22 \t tab\n" for i in range(300))
    source += "x = [bytearray(1000) for _ in range(3000)]\nsum(range(10**6))\n"
    (tmp_path / "prog.py").write_text(source, encoding="utf-8")
    out = tmp_path / "p.json"
    subprocess.run([sys.executable, "-m", "pyrometer", "--quiet", "--json", "--outfile", str(out), "prog.py"],
                   cwd=tmp_path, check=True, env=program_env(groundtruth_dir), stdin=subprocess.DEVNULL,
                   timeout=60)
    written = out.read_text(encoding="utf-8")
    profile = json.loads(written)
    lines = next(iter(profile["files"].values()))["lines"]
    assert len(lines) == 302 and lines[0]["line"].startswith("# comment 0 \"quoted\"")
    assert render(profile) == written
    figures = {k: v for k, v in lines[0].items() if k not in ("lineno", "line")}
    for change in ({}, {"n_samples": 3}, {"n_malloc_mb": 0}, {"n_growth_mb": -0.0}, {"n_samples": False},
                   {"memory_samples": [[0.5, 1.0]]}):
        entries = [QuietLine.of(7, "x = 1", figures), QuietLine.of(8, "", figures)]
        entries[1].update(change)
        assert render(entries) == render([dict(e) for e in entries]), change
    built = dict(profile, files={name: dict(f, lines=[QuietLine.of(e["lineno"], e["line"], figures)
                                                       if e["n_samples"] == 0 and e["n_malloc_mb"] == 0 else e
                                                       for e in f["lines"]])
                                 for name, f in profile["files"].items()})
    model.check(built)


def test_a_program_that_closes_its_stdout_gets_the_report_on_stderr(tmp_path, groundtruth_dir):
    """The text report goes to standard output; a program that closed the
    descriptor itself (os.close(1)) gets it on stderr, and the run's exit status
    stays the program's.  Before: "cannot write the report: [Errno 9] Bad file
    descriptor", no report, and exit status 1 for a program that exited 0."""
    prog = tmp_path / "closes.py"
    prog.write_text("import os, sys\nprint('before', flush=True)\nos.close(1)\nsys.exit(0)\n")
    proc = pyrometer(["--cpu-only", prog], tmp_path, groundtruth_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "before\n"
    assert "cannot write" not in proc.stderr and "closes.py" in proc.stderr, proc.stderr


# A program that replaces sys.stdout for the rest of its run: quiet (os.devnull,
# io.StringIO), a wrapper without isatty, a tee into its own log.
REPLACED_STDOUT = """
import io, os, sys
print("before")
how = sys.argv[1]
if how == "devnull":
    sys.stdout = open(os.devnull, "w")
elif how == "stringio":
    sys.stdout = io.StringIO()
elif how == "detach":
    sys.stdout = io.TextIOWrapper(sys.stdout.detach(), encoding="utf-8")
else:
    class Tee:
        def __init__(self, f):
            self.f, self.log = f, open("program.log", "w")
        def write(self, x):
            self.log.write(x)
            return self.f.write(x.upper())
        def flush(self):
            self.f.flush(); self.log.flush()
    sys.stdout = Tee(sys.stdout)
print("after")
"""


@pytest.mark.parametrize("how", ["devnull", "stringio", "tee", "detach"])
def test_a_program_that_replaces_its_stdout_leaves_the_report_on_pyrometers(tmp_path, groundtruth_dir, how):
    """The report is pyrometer's output, not the program's: it goes to the
    standard output pyrometer had before the program ran.  Before, it went to
    whatever sys.stdout the program left: nowhere (os.devnull, io.StringIO),
    into the program's own log (a tee), and a wrapper without isatty ended
    the run on pyrometer's AttributeError, no report, exit status 1.  A
    program that detaches it to wrap its buffer again leaves pyrometer's
    unusable (ValueError): the program's own, on the same descriptor, then."""
    prog = tmp_path / "replaces.py"
    prog.write_text(REPLACED_STDOUT)
    proc = pyrometer(["--cpu-only", prog, how], tmp_path, groundtruth_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    program_output = {"tee": "before\nAFTER\n", "detach": "before\nafter\n"}.get(how, "before\n")
    assert proc.stdout.startswith(program_output + "pyrometer: "), proc.stdout[:500]
    assert f"replaces.py {how}\nverdict: " in proc.stdout, proc.stdout[:500]
    if how == "tee":
        assert (tmp_path / "program.log").read_text() == "after\n"


def test_a_report_that_cannot_be_written_keeps_the_programs_status(tmp_path, groundtruth_dir):
    """--outfile's directory was there at the start (checked then) and the
    program removed it: the failure is said on stderr, and the exit status is
    still the program's (3 here, 0 below), not pyrometer's."""
    out_dir = tmp_path / "reports"
    for status in (3, 0):
        out_dir.mkdir()
        prog = tmp_path / "removes.py"
        prog.write_text(f"import shutil, sys\nshutil.rmtree({str(out_dir)!r})\nprint('ran')\nsys.exit({status})\n")
        proc = pyrometer(["--cpu-only", "--json", "--outfile", out_dir / "p.json", prog], tmp_path, groundtruth_dir)
        assert proc.returncode == status, proc.stderr
        assert proc.stdout == "ran\n"
        assert "pyrometer: error: cannot write the report" in proc.stderr, proc.stderr
