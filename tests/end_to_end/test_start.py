"""Every way python starts a program, under pyrometer: a directory or a zip
archive with a __main__.py, -c, a script on standard input, -m of a module that
lives in the standard library.  Each is compared with plain python running the
same input (what the program sees, its output and exit status), and its own
lines must be the ones reported.  A program python refuses to start (a syntax
error, a binary file, an undeclared non-UTF-8 source, a missing file or module,
a directory without __main__.py) gets python's very message and exit status,
and no profile after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipapp
from pathlib import Path

import pytest

TIMEOUT_S = 60

# The program reports what it sees to SIDE_FILE, then works long enough to be
# sampled in a marked loop.
SEES = """
import json, os, sys
main = sys.modules["__main__"]
spec = getattr(main, "__spec__", None)
with open(os.environ["SIDE_FILE"], "w") as f:
    json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__,
               "file": globals().get("__file__"), "cached": globals().get("__cached__", "absent"),
               "spec": None if spec is None else [spec.name, spec.origin],
               "loader": type(main.__loader__).__name__ if not isinstance(main.__loader__, type)
                         else main.__loader__.__name__,
               "globals": sorted(globals())}, f)
import time
start = time.perf_counter()
total = 0
while time.perf_counter() - start < 0.4:  # HOT
    total += sum(range(200))  # HOT
print("done", total > 0)
"""


def python(args, *, cwd, input=None, env=None) -> subprocess.CompletedProcess:
    """The same input under plain python: what pyrometer must reproduce."""
    return subprocess.run([sys.executable, *[str(a) for a in args]], cwd=cwd, capture_output=True,
                          text=True, input=input, env=dict(os.environ, **(env or {})),
                          timeout=TIMEOUT_S, stdin=None if input is not None else subprocess.DEVNULL)


def seen(side: Path) -> dict:
    return json.loads(side.read_text())


def profiled_and_plain(tmp_path, run_pyrometer, args, *, input=None):
    """Runs args under pyrometer (JSON profile) and under python, each reporting what
    the program saw; returns (pyrometer's run, its profile, what it saw, what python's
    program saw)."""
    side = tmp_path / "side.json"
    out = tmp_path / "profile.json"
    env = {"SIDE_FILE": str(side)}
    ref = python(args, cwd=tmp_path, input=input, env=env)
    assert ref.returncode == 0, ref.stderr
    expected = seen(side)
    side.unlink()
    proc = run_pyrometer(["--cpu-only", "--json", "--outfile", out, *args], cwd=tmp_path, input=input,
                         env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ref.stdout, "the program's output differs from python's"
    return proc, json.loads(out.read_text()), seen(side), expected


def _time(entry: dict) -> float:
    return entry["n_cpu_percent_python"] + entry["n_cpu_percent_c"] + entry["n_sys_percent"]


def hot_share(file_entry: dict) -> float:
    """The percentage of the file's time (waits apart: a busy machine) on the lines
    marked HOT."""
    total = sum(_time(e) for e in file_entry["lines"])
    return 100 * sum(_time(e) for e in file_entry["lines"] if "# HOT" in e["line"]) / total if total else 0.0


def test_directory_runs_like_python(tmp_path, run_pyrometer):
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text(textwrap.dedent(SEES))
    proc, profile, got, expected = profiled_and_plain(tmp_path, run_pyrometer, ["app", "x", "-y"])
    assert got == expected, "the program sees something else than under python"
    assert got["spec"] == ["__main__", str(app / "__main__.py")] and got["path0"] == str(app)
    entry = profile["files"][str(app / "__main__.py")]
    assert hot_share(entry) > 50, entry["lines"]


def test_zipapp_runs_like_python(tmp_path, run_pyrometer):
    source = tmp_path / "src"
    source.mkdir()
    (source / "__main__.py").write_text(textwrap.dedent(SEES))
    zipapp.create_archive(source, tmp_path / "app.pyz")
    proc, profile, got, expected = profiled_and_plain(tmp_path, run_pyrometer, ["app.pyz", "x"])
    assert got == expected, "the program sees something else than under python"
    assert got["loader"] == "zipimporter"
    # Reported under the name zipimport gives it, with its lines read from the archive.
    entry = profile["files"][str(tmp_path / "app.pyz" / "__main__.py")]
    assert any("# HOT" in e["line"] for e in entry["lines"]), "the source was not read from the archive"
    assert hot_share(entry) > 50, entry["lines"]


def test_command_runs_like_python(tmp_path, run_pyrometer):
    code = textwrap.dedent(SEES)
    proc, profile, got, expected = profiled_and_plain(tmp_path, run_pyrometer, ["-c", code, "a", "--json"])
    assert got == expected, "the program sees something else than under python"
    assert got["argv"] == ["-c", "a", "--json"] and got["path0"] == ""
    entry = profile["files"]["<string>"]
    assert [e["line"] for e in entry["lines"]] == code.splitlines(), "not the -c code as its source"
    assert hot_share(entry) > 80, entry["lines"]
    assert profile["program"] == "-c" and profile["args"] == ["a", "--json"]


@pytest.mark.parametrize("stdin", ["pipe", "file"])
def test_stdin_script_runs_like_python(tmp_path, stdin):
    """From a pipe, UTF-8; from a file, in the encoding its coding line declares
    (python honours one only where it can seek standard input: not on a pipe)."""
    if stdin == "pipe":
        code = textwrap.dedent(SEES) + "print('\xe9')\n"
        data = code.encode()
    else:
        code = "# -*- coding: latin-1 -*-\n" + textwrap.dedent(SEES) + "print('\xe9')\n"
        data = code.encode("latin-1")
    (tmp_path / "prog.py").write_bytes(data)
    side = tmp_path / "side.json"
    out = tmp_path / "profile.json"
    env = dict(os.environ, SIDE_FILE=str(side))

    def run(args):
        if stdin == "pipe":
            return subprocess.run(args, cwd=tmp_path, input=data, capture_output=True, env=env,
                                  timeout=TIMEOUT_S)
        with open(tmp_path / "prog.py", "rb") as f:
            return subprocess.run(args, cwd=tmp_path, stdin=f, capture_output=True, env=env,
                                  timeout=TIMEOUT_S)

    ref = run([sys.executable, "-", "arg"])
    assert ref.returncode == 0, ref.stderr
    expected = seen(side)
    side.unlink()
    proc = run([sys.executable, "-m", "pyrometer", "--cpu-only", "--json", "--outfile", str(out), "-", "arg"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ref.stdout
    got = seen(side)
    assert got == expected and got["file"] == "<stdin>" and got["argv"] == ["-", "arg"]
    entry = json.loads(out.read_text())["files"]["<stdin>"]
    assert [e["line"] for e in entry["lines"]] == code.splitlines()
    assert hot_share(entry) > 50, entry["lines"]


def test_generated_string_code_is_not_the_command(tmp_path, run_pyrometer):
    """dataclasses and namedtuple compile their methods as "<string>" too: only the
    -c program's own code is its lines, the rest is charged to the line calling it."""
    code = textwrap.dedent("""
        import dataclasses, time
        @dataclasses.dataclass
        class P:
            a: int
            b: int
        start = time.perf_counter()
        while time.perf_counter() - start < 0.5:  # HOT
            [P(i, i) for i in range(100)]  # HOT
        """).lstrip()
    out = tmp_path / "profile.json"
    proc = run_pyrometer(["--cpu-only", "--json", "--outfile", out, "-c", code], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(out.read_text())["files"]["<string>"]
    # The generated __init__'s own lines are 3 and 4 of its text (dataclasses'
    # _create_fn); line 1 is left out, it is charged the import of dataclasses
    # (5% of this run on a slow start of 3.10).
    head = sum(_time(e) for e in entry["lines"] if 2 <= e["lineno"] <= 5)
    assert head < 5, f"generated __init__ time landed on the program's first lines: {entry['lines'][:6]}"
    assert hot_share(entry) > 50, entry["lines"]


def test_stdlib_module_reports_its_package(tmp_path, run_pyrometer):
    """-m json.tool: the named module's package is the program, though it is in
    the standard library; the rest of the standard library is not reported."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{"a": i, "b": [str(i)] * 5, "c": {"d": None}} for i in range(150_000)]))
    out = tmp_path / "profile.json"
    proc = run_pyrometer(["--quiet", "--cpu-only", "--json", "--outfile", out, "-m", "json.tool", data, os.devnull],
                         cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ref = python(["-m", "json.tool", data, os.devnull], cwd=tmp_path)
    assert (proc.stderr, ref.returncode) == (ref.stderr, 0)
    package = os.path.dirname(json.__file__) + os.sep
    files = json.loads(out.read_text())["files"]
    assert files, "nothing reported for -m json.tool"
    assert all(name.startswith(package) for name in files), sorted(files)
    assert sum(f["percent_cpu_time"] for f in files.values()) > 50, {n: f["percent_cpu_time"]
                                                                     for n, f in files.items()}


# ---------------------------------------------------------------------------
# Programs python refuses to start: python's words, python's status, no profile
# ---------------------------------------------------------------------------

def _setup_error(tmp_path: Path, case: str) -> tuple[list[str], bytes | None]:
    """The command line (after the interpreter or pyrometer) and standard input of
    each case."""
    if case == "syntax error":
        (tmp_path / "prog.py").write_text("print('before')\nx = (\n")
        return ["prog.py"], None
    if case == "binary file":
        (tmp_path / "prog.py").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00\x00" + bytes(range(256)))
        return ["prog.py"], None
    if case == "non-UTF-8 source":
        (tmp_path / "prog.py").write_bytes(b"print('caf\xe9')\n")
        return ["prog.py"], None
    if case == "bad coding line":
        (tmp_path / "prog.py").write_bytes(b"# coding: no-such-codec\nprint(1)\n")
        return ["prog.py"], None
    if case == "missing file":
        return ["missing.py", "arg"], None
    if case == "unreadable file":
        (tmp_path / "prog.py").write_text("print(1)\n")
        os.chmod(tmp_path / "prog.py", 0)
        return ["prog.py"], None
    if case == "directory without __main__":
        (tmp_path / "app").mkdir()
        (tmp_path / "app" / "other.py").write_text("print(1)\n")
        return ["app"], None
    if case == "zip without __main__":
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "other.py").write_text("print(1)\n")
        import zipfile
        with zipfile.ZipFile(tmp_path / "app.pyz", "w") as z:
            z.write(tmp_path / "src" / "other.py", "other.py")
        return ["app.pyz"], None
    if case == "missing module":
        return ["-m", "no_such_module_here"], None
    if case == "missing submodule":
        return ["-m", "json.no_such_submodule"], None
    if case == "package without __main__":  # (json has one from 3.14: python -m json)
        return ["-m", "xml"], None
    if case == "module with a syntax error":
        (tmp_path / "broken.py").write_text("x = (\n")
        return ["-m", "broken"], None
    if case == "-c syntax error":
        return ["-c", "print(1)\nx = (", "arg"], None
    if case == "stdin syntax error":
        return ["-"], b"print(1)\nx = (\n"
    if case == "stdin non-UTF-8":
        return ["-"], b"print('caf\xe9')\n"
    if case == "stdin coding line":  # python cannot honour one on a pipe
        return ["-"], b"# coding: latin-1\nprint('caf\xe9')\n"
    raise AssertionError(case)


ERROR_CASES = ["syntax error", "binary file", "non-UTF-8 source", "bad coding line", "missing file",
               "unreadable file", "directory without __main__", "zip without __main__", "missing module",
               "missing submodule", "package without __main__", "module with a syntax error",
               "-c syntax error", "stdin syntax error", "stdin non-UTF-8", "stdin coding line"]


@pytest.mark.parametrize("memory", [False, True], ids=["cpu-only", "memory"])
@pytest.mark.parametrize("case", ERROR_CASES)
def test_refused_program_is_said_as_python_says_it(tmp_path, case, memory):
    if case == "unreadable file" and os.geteuid() == 0:
        pytest.skip("root reads any file")
    args, stdin = _setup_error(tmp_path, case)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    ref = subprocess.run([sys.executable, *args], cwd=tmp_path, input=stdin, capture_output=True,
                         env=env, timeout=TIMEOUT_S)
    assert ref.returncode != 0 and ref.stderr, "python ran it: not an error case"
    options = [] if memory else ["--cpu-only"]
    proc = subprocess.run([sys.executable, "-m", "pyrometer", *options, *args], cwd=tmp_path, input=stdin,
                          capture_output=True, env=env, timeout=TIMEOUT_S)
    # Byte for byte: both name the same interpreter (sys.executable), as python's
    # own messages do.
    assert proc.stderr.decode() == ref.stderr.decode()
    assert proc.returncode == ref.returncode
    assert proc.stdout == ref.stdout == b"", "a profile (or output) after python refused the program"
