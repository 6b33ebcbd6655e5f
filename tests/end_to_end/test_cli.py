"""Behaviour of the pyrometer command, run as a subprocess: the profiled program
sees what it would see under plain python (argv, __main__, __file__, stdin,
stdout, exit status, tracebacks, signals, fork), the command line is checked
with one-line errors, and the reports have the documented shape."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TIMEOUT_S = 60

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ALL_OPTIONS = ["--outfile", "--json", "--cli", "--cpu-only", "--profile-all", "--profile-only",
               "--profile-exclude", "--use-virtual-time", "--cpu-percent-threshold",
               "--cpu-sampling-rate", "--reduced-profile", "--html", "--web", "--profile-interval",
               "--memory", "--no-memory", "--malloc-threshold", "--allocation-sampling-window",
               "--no-leak-detector"]

# About 0.4 s of pure-Python work, enough to be sampled many times.
BUSY = """
def busy(seconds=0.4):
    import time
    start = time.perf_counter()
    total = 0
    while time.perf_counter() - start < seconds:
        for i in range(2000): total += i * i
    return total
"""


def write_program(directory: Path, source: str, name: str = "prog.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def run_python(args, *, cwd, env=None) -> subprocess.CompletedProcess:
    """The same program under plain python, for comparison."""
    return subprocess.run([sys.executable, *[str(a) for a in args]], cwd=cwd, capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})), timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{proc.stderr}"
    assert lines[0].startswith("pyrometer: error:"), f"not a pyrometer error line: {lines[0]!r}"
    return lines[0]


def load_json(path: Path) -> dict:
    assert path.exists(), f"no profile at {path}"
    with open(path) as f:
        return json.load(f)


def own_package_dirs() -> list[str]:
    """Where pyrometer's own Python files are (source tree and import location)."""
    import pyrometer  # noqa: PLC0415
    dirs = {os.path.dirname(os.path.realpath(pyrometer.__file__)),
            os.path.dirname(os.path.abspath(pyrometer.__file__))}
    return sorted(d.rstrip(os.sep) + os.sep for d in dirs)


# ---------------------------------------------------------------------------
# What the program sees
# ---------------------------------------------------------------------------

REPORT_ENV = """
import json, os, sys
with open(os.environ["SIDE_FILE"], "w") as f:
    json.dump({"argv": sys.argv, "name": __name__, "file": __file__,
               "path0": sys.path[0], "main_file": getattr(sys.modules["__main__"], "__file__", None)}, f)
"""


def test_argv_name_and_file_are_as_under_python(tmp_path, run_pyrometer):
    prog = write_program(tmp_path, REPORT_ENV)
    side = tmp_path / "side.json"
    args = ["prog.py", "--json", "-x", "plain", "--outfile", "nowhere"]
    proc = run_pyrometer(["--cpu-only", *args], cwd=tmp_path, env={"SIDE_FILE": str(side)})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(side.read_text())
    assert seen["argv"] == args, "the program's own options were taken for pyrometer's or changed"
    assert seen["name"] == "__main__"
    assert seen["file"] == str(prog.resolve()) and os.path.isabs(seen["file"])
    assert seen["main_file"] == seen["file"]
    assert not (tmp_path / "nowhere").exists(), "pyrometer took the program's --outfile"
    # Exactly what python itself gives the program.
    ref = run_python(args, cwd=tmp_path, env={"SIDE_FILE": str(side)})
    assert ref.returncode == 0, ref.stderr
    assert json.loads(side.read_text()) == seen


def test_run_subcommand(tmp_path, run_pyrometer):
    write_program(tmp_path, REPORT_ENV)
    side = tmp_path / "side.json"
    proc = run_pyrometer(["run", "prog.py", "a", "-b"], cwd=tmp_path, env={"SIDE_FILE": str(side)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(side.read_text())["argv"] == ["prog.py", "a", "-b"]
    assert "pyrometer: prog.py" in proc.stdout, f"no report:\n{proc.stdout}"


def test_module_runs_like_python_dash_m(tmp_path, run_pyrometer):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(REPORT_ENV.lstrip())
    side = tmp_path / "side.json"
    proc = run_pyrometer(["-m", "pkg.mod", "a", "--json"], cwd=tmp_path, env={"SIDE_FILE": str(side)})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(side.read_text())
    assert seen["argv"] == [str(pkg / "mod.py"), "a", "--json"]
    assert seen["name"] == "__main__"
    assert seen["file"] == str(pkg / "mod.py")
    ref = run_python(["-m", "pkg.mod", "a", "--json"], cwd=tmp_path, env={"SIDE_FILE": str(side)})
    assert ref.returncode == 0, ref.stderr
    assert json.loads(side.read_text()) == seen, "python -m gives the module a different view"


def test_stdin_passes_through(tmp_path, run_pyrometer):
    write_program(tmp_path, """
        import sys
        data = sys.stdin.read()
        print("GOT:" + data.upper(), end="")
        """)
    proc = run_pyrometer(["prog.py"], cwd=tmp_path, input="hello\nworld\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("GOT:HELLO\nWORLD\n"), proc.stdout[:200]


def test_program_stdout_is_complete_and_before_the_report(tmp_path, run_pyrometer):
    write_program(tmp_path, BUSY + """
busy(0.2)
for i in range(5000):
    print(f"line {i}")
print("last line", end="")
""")
    proc = run_pyrometer(["prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = "".join(f"line {i}\n" for i in range(5000)) + "last line"
    assert proc.stdout.startswith(expected), "the program's output is incomplete or out of order"
    report = proc.stdout[len(expected):]
    assert "pyrometer: prog.py" in report, f"no report after the program's output:\n{report[:500]}"


# ---------------------------------------------------------------------------
# Exit status, errors and tracebacks
# ---------------------------------------------------------------------------

def test_exit_status(tmp_path, run_pyrometer):
    write_program(tmp_path, "import sys\nprint('bye')\nsys.exit(3)\n")
    out = tmp_path / "p.json"
    proc = run_pyrometer(["--json", "--outfile", out, "prog.py"], cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "bye\n"
    assert load_json(out)["exit_status"] == 3


def test_exit_with_message(tmp_path, run_pyrometer):
    write_program(tmp_path, "import sys\nsys.exit('something went wrong')\n")
    # --quiet: the program's standard error alone, as python gives it.
    proc = run_pyrometer(["--quiet", "--json", "--outfile", tmp_path / "p.json", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == "something went wrong\n"
    assert proc.stderr == run_python(["prog.py"], cwd=tmp_path).stderr


def test_uncaught_exception_traceback(tmp_path, run_pyrometer):
    prog = write_program(tmp_path, """
        def inner():
            raise ValueError("boom")

        def outer():
            inner()

        outer()
        """)
    out = tmp_path / "p.json"
    proc = run_pyrometer(["--quiet", "--json", "--outfile", out, "prog.py"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert err.startswith("Traceback (most recent call last):\n"), err
    first_frame = err.splitlines()[1]
    assert first_frame == f'  File "{prog.resolve()}", line 7, in <module>', (
        f"the first frame is not the user's script:\n{err}")
    assert "pyrometer" not in err and "runpy" not in err, f"profiler frames in the traceback:\n{err}"
    assert err.rstrip().endswith("ValueError: boom")
    assert err == run_python(["prog.py"], cwd=tmp_path).stderr, "traceback differs from python's"
    profile = load_json(out)
    assert profile["exit_status"] == 1


def test_keyboard_interrupt(tmp_path, run_pyrometer):
    write_program(tmp_path, """
        import os, signal
        i = 0
        while True:
            i += 1
            if i == 200000:
                os.kill(os.getpid(), signal.SIGINT)
        """)
    out = tmp_path / "p.json"
    proc = run_pyrometer(["--quiet", "--json", "--outfile", out, "prog.py"], cwd=tmp_path)
    ref = run_python(["prog.py"], cwd=tmp_path)
    assert ref.returncode == -2  # how python itself ends on Ctrl-C
    assert proc.returncode == -2, f"exit status {proc.returncode}, expected death by SIGINT\n{proc.stderr}"
    assert proc.stderr.startswith("Traceback (most recent call last):\n"), proc.stderr
    assert proc.stderr.rstrip().endswith("KeyboardInterrupt"), proc.stderr
    assert "pyrometer" not in proc.stderr and "runpy" not in proc.stderr, proc.stderr
    load_json(out)  # the profile is still written


def test_keyboard_interrupt_while_waiting_for_a_child(tmp_path, run_pyrometer):
    """Ctrl-C lands inside os.waitpid, which pyrometer wraps (to note what a
    program reaps): the traceback is python's, without the wrapper's frame."""
    write_program(tmp_path, """
        import os, signal, subprocess, threading
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        subprocess.Popen(["sleep", "5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait()
        """)
    proc = run_pyrometer(["--quiet", "--cpu-only", "prog.py"], cwd=tmp_path)
    ref = run_python(["prog.py"], cwd=tmp_path)
    assert ref.returncode == proc.returncode == -2, proc.stderr
    assert "pyrometer" not in proc.stderr, proc.stderr
    assert proc.stderr == ref.stderr, "traceback differs from python's"


def test_keyboard_interrupt_goes_through_the_programs_excepthook(tmp_path, run_pyrometer):
    """python hands an uncaught KeyboardInterrupt to sys.excepthook like any
    other exception: a program's own hook sees it under pyrometer too."""
    write_program(tmp_path, """
        import sys
        def hook(kind, value, tb):
            print(f"hook: {kind.__name__}", file=sys.stderr)
        sys.excepthook = hook
        raise KeyboardInterrupt
        """)
    proc = run_pyrometer(["--quiet", "--cpu-only", "prog.py"], cwd=tmp_path)
    ref = run_python(["prog.py"], cwd=tmp_path)
    assert proc.returncode == ref.returncode == -2, proc.stderr
    assert proc.stderr == ref.stderr == "hook: KeyboardInterrupt\n", proc.stderr
    # A hook that fails: python's "Error in sys.excepthook", then the original.
    write_program(tmp_path, """
        import sys
        def hook(kind, value, tb):
            raise ValueError("bad hook")
        sys.excepthook = hook
        raise KeyboardInterrupt
        """)
    proc = run_pyrometer(["--quiet", "--cpu-only", "prog.py"], cwd=tmp_path)
    ref = run_python(["prog.py"], cwd=tmp_path)
    assert proc.returncode == ref.returncode, proc.stderr
    assert proc.stderr == ref.stderr and "Original exception was" in proc.stderr, proc.stderr


def test_a_second_ctrl_c_before_the_traceback_is_printed(tmp_path, run_pyrometer):
    """A second Ctrl-C (`timeout` sends one to the process and one to its
    group) that lands in pyrometer's way to printing the first one's
    traceback: made here by a hook that is interrupted once.  The traceback is
    printed all the same (it was lost: nothing, or its first line)."""
    write_program(tmp_path, """
        import sys
        calls = []
        def hook(kind, value, tb):
            calls.append(kind)
            if len(calls) == 1:
                raise KeyboardInterrupt  # as a Ctrl-C landing there
            sys.__excepthook__(kind, value, tb)
        sys.excepthook = hook
        def main():
            raise KeyboardInterrupt
        main()
        """)
    proc = run_pyrometer(["--quiet", "--cpu-only", "prog.py"], cwd=tmp_path)
    assert proc.returncode == -2, proc.stderr
    assert proc.stderr.startswith("Traceback (most recent call last):\n"), proc.stderr
    assert proc.stderr.count("Traceback") == 1 and "in main" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("KeyboardInterrupt") and "pyrometer" not in proc.stderr, proc.stderr


def test_missing_script(tmp_path, run_pyrometer):
    """python's own line and status (tests/end_to_end/test_start.py has every such case)."""
    proc = run_pyrometer(["does_not_exist.py"], cwd=tmp_path)
    ref = run_python(["does_not_exist.py"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, ref.stderr, "")


@pytest.mark.parametrize("args", [
    ["--cpu-sampling-rate", "0"],
    ["--cpu-sampling-rate", "-1"],
    ["--cpu-sampling-rate", "abc"],
    ["--cpu-sampling-rate=-1"],
    ["--cpu-percent-threshold", "-5"],
    ["--cpu-percent-threshold", "nan"],
    ["--bogus"],
    ["--outfile"],
    [],
], ids=lambda a: " ".join(a) or "nothing")
def test_bad_command_lines(tmp_path, run_pyrometer, args):
    write_program(tmp_path, "print('should not run')\n")
    tail = [] if args in (["--outfile"], []) else ["prog.py"]
    proc = run_pyrometer([*args, *tail], cwd=tmp_path)
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    one_line_error(proc)
    assert "should not run" not in proc.stdout


def test_help_lists_every_option(run_pyrometer, tmp_path):
    proc = run_pyrometer(["--help"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for option in ALL_OPTIONS:
        assert option in text, f"--help does not mention {option}"
    # The defaults: 0.01 s between samples, 1% threshold.
    rate = text[text.index("--cpu-sampling-rate"):]
    assert re.search(r"0\.01\b", rate[:400]), "--help does not give the sampling rate default 0.01"
    threshold = text[text.index("--cpu-percent-threshold"):]
    assert re.search(r"\b1(\.0)?%?\)", threshold[:400]) or re.search(r"default[:=]? ?1\b", threshold[:400]), (
        "--help does not give the threshold default 1")


# ---------------------------------------------------------------------------
# fork
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("child_exit", ["os._exit", "return"])
def test_fork(tmp_path, run_pyrometer, child_exit):
    child_end = "os._exit(0)" if child_exit == "os._exit" else "pass"
    write_program(tmp_path, BUSY + f"""
import os, sys
busy(0.2)
pid = os.fork()
if pid == 0:
    print("child here", flush=True)
    busy(0.1)
    {child_end}
else:
    _, status = os.waitpid(pid, 0)
    print("parent saw child exit", os.waitstatus_to_exitcode(status), flush=True)
    sys.exit(4)
""")
    proc = run_pyrometer(["prog.py"], cwd=tmp_path)
    assert proc.returncode == 4, f"parent status {proc.returncode}\n{proc.stderr}"
    assert "child here\n" in proc.stdout
    assert "parent saw child exit 0\n" in proc.stdout
    reports = proc.stdout.count("pyrometer: prog.py")
    assert reports == 1, f"{reports} reports:\n{proc.stdout}"
    assert proc.stderr == "", proc.stderr


# ---------------------------------------------------------------------------
# Which files are reported
# ---------------------------------------------------------------------------

STDLIB_WORK = BUSY + """
import fractions, time
start = time.perf_counter()
total = fractions.Fraction(0)
i = 1
while time.perf_counter() - start < 0.5:
    total += fractions.Fraction(1, i)  # @stdlib
    i += 1
"""


def profile_json(run_pyrometer, tmp_path, options, prog="prog.py") -> dict:
    out = tmp_path / "p.json"
    if out.exists():
        out.unlink()
    proc = run_pyrometer(["--json", "--outfile", out, *options, prog], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return load_json(out)


def test_profile_all_includes_the_standard_library(tmp_path, run_pyrometer):
    prog = write_program(tmp_path, STDLIB_WORK)
    default = profile_json(run_pyrometer, tmp_path, [])
    assert list(default["files"]) == [str(prog.resolve())], (
        f"by default only the program's files are reported: {list(default['files'])}")
    everything = profile_json(run_pyrometer, tmp_path, ["--profile-all"])
    assert any(name.endswith(os.sep + "fractions.py") for name in everything["files"]), (
        f"--profile-all does not report fractions.py: {list(everything['files'])}")
    for name in everything["files"]:
        for own in own_package_dirs():
            assert not name.startswith(own), f"pyrometer's own file {name} is in the profile"


def test_own_files_never_reported(tmp_path, run_pyrometer):
    write_program(tmp_path, BUSY + "busy()\n")
    for options in ([], ["--profile-all"], ["--profile-only", "pyrometer,launcher,cli"]):
        profile = profile_json(run_pyrometer, tmp_path, options)
        for name in profile["files"]:
            for own in own_package_dirs():
                assert not name.startswith(own), f"{options}: pyrometer's own {name} is in the profile"
            assert "runpy" not in name, f"{options}: {name} reported"


def test_runpy_is_pyrometers_own_where_it_is_a_file():
    """`python -m pyrometer` runs through runpy, below every frame of the run: on
    3.10 its module is a file, which --profile-all reported when a sample met
    only pyrometer's frames above it (3.11 and later freeze it: a pseudo-file,
    never reported)."""
    import runpy
    from pyrometer.core.session import own_prefixes
    path = getattr(runpy, "__file__", None)
    if not path or not os.path.isfile(path):
        pytest.skip("runpy is not a file here")
    assert os.path.realpath(path) in own_prefixes()


def test_profile_only_and_exclude(tmp_path, run_pyrometer):
    write_program(tmp_path, BUSY + "def helper_work():\n    busy(0.3)\n", name="zzhelperzz.py")
    prog = write_program(tmp_path, BUSY + "import zzhelperzz\nzzhelperzz.helper_work()\nbusy(0.3)\n")
    helper = str((tmp_path / "zzhelperzz.py").resolve())
    main = str(prog.resolve())
    both = profile_json(run_pyrometer, tmp_path, [])
    assert set(both["files"]) == {main, helper}
    only = profile_json(run_pyrometer, tmp_path, ["--profile-only", "zzhelperzz"])
    assert list(only["files"]) == [helper]
    excluded = profile_json(run_pyrometer, tmp_path, ["--profile-exclude", "zzhelperzz"])
    assert list(excluded["files"]) == [main]
    several = profile_json(run_pyrometer, tmp_path, ["--profile-only", "nomatch,zzhelperzz"])
    assert list(several["files"]) == [helper]


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------

def test_text_report_columns_and_no_color_when_not_a_tty(tmp_path, run_pyrometer):
    write_program(tmp_path, BUSY + "busy()  # hot line\n")
    proc = run_pyrometer(["prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for column in ("Time Python", "native", "system"):
        assert column in proc.stdout, f"column {column!r} missing:\n{proc.stdout}"
    assert "busy()  # hot line" in proc.stdout
    assert not ANSI.search(proc.stdout + proc.stderr), "ANSI escapes in output that is not a terminal"
    # --cli is the same report
    cli = run_pyrometer(["--cli", "prog.py"], cwd=tmp_path)
    assert cli.returncode == 0 and "Time Python" in cli.stdout


def test_outfile_text(tmp_path, run_pyrometer):
    write_program(tmp_path, BUSY + "print('program output')\nbusy(0.2)\n")
    out = tmp_path / "report.txt"
    proc = run_pyrometer(["--outfile", out, "prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "program output\n", "the report went to stdout despite --outfile"
    text = out.read_text()
    assert "Time Python" in text and not ANSI.search(text)


def test_reduced_profile_omits_cold_lines(tmp_path, run_pyrometer):
    write_program(tmp_path, """
        import time
        cold_a = 1  # cold line a
        cold_b = 2  # cold line b
        start, total = time.perf_counter(), 0
        while time.perf_counter() - start < 0.5:
            for i in range(2000): total += i * i  # hot line
        """)
    full = run_pyrometer(["prog.py"], cwd=tmp_path)
    reduced = run_pyrometer(["--reduced-profile", "prog.py"], cwd=tmp_path)
    for proc in (full, reduced):
        assert proc.returncode == 0, proc.stderr
    assert "# cold line a" in full.stdout and "# cold line b" in full.stdout
    assert "# hot line" in reduced.stdout
    assert "# cold line a" not in reduced.stdout and "# cold line b" not in reduced.stdout, reduced.stdout
    profile = profile_json(run_pyrometer, tmp_path, ["--reduced-profile"])
    (f,) = profile["files"].values()
    shown = [e["line"] for e in f["lines"]]
    assert not any("cold line" in line for line in shown), shown
    assert any("hot line" in line for line in shown), shown


def test_too_brief_program(tmp_path, run_pyrometer):
    write_program(tmp_path, "print('quick')\n")
    profile = profile_json(run_pyrometer, tmp_path, [])
    for key in ("elapsed_time_sec", "cpu_samples", "threads", "sampling_interval_sec", "total_time_sec",
                "cpu_time_sec", "exit_status", "options", "files"):
        assert key in profile, f"{key} missing from the profile of a brief program"
    assert profile["exit_status"] == 0
    proc = run_pyrometer(["prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("quick\n")
    # No sample at all, as a rule ("too brief"); the sampler's first wake is
    # exponential, so now and then one lands in the 4 ms (CI: 1 sample, "Only 1
    # sample was taken").  Either note says the profile is thin.
    assert re.search(r"too (brief|short)|Only \d+ samples? w(as|ere) taken", proc.stdout), f"no 'too brief' note:\n{proc.stdout}"
    assert proc.stderr == ""


def test_json_schema_fields(tmp_path, run_pyrometer):
    prog = write_program(tmp_path, BUSY + "busy(0.5)  # hot\n")
    profile = profile_json(run_pyrometer, tmp_path, [])
    for key in ("elapsed_time_sec", "cpu_samples", "threads", "sampling_interval_sec", "total_time_sec",
                "exit_status", "options"):
        assert key in profile
    assert set(profile["cpu_time_sec"]) >= {"python", "native", "system"}
    f = profile["files"][str(prog.resolve())]
    assert {"percent_cpu_time", "cpu_time_sec", "lines", "functions"} <= set(f)
    fields = {"lineno", "line", "n_cpu_percent_python", "n_cpu_percent_c", "n_sys_percent",
              "n_core_utilization", "n_cpu_python_sec", "n_cpu_native_sec", "n_sys_sec", "n_samples"}
    for entry in f["lines"] + f["functions"]:
        assert fields <= set(entry), fields - set(entry)
    funcs = {e["line"]: e for e in f["functions"]}
    assert "busy" in funcs and funcs["busy"]["lineno"] == 1, funcs.keys()
    # Percentages are of total_time_sec.
    total = profile["total_time_sec"]
    for e in f["lines"]:
        assert e["n_cpu_percent_python"] == pytest.approx(100 * e["n_cpu_python_sec"] / total, abs=1e-6)
    assert profile["cpu_samples"] > 10


# ---------------------------------------------------------------------------
# A command line that says what it did
# ---------------------------------------------------------------------------

CHATTY = BUSY + """
import sys
for i in range(3):
    print(f"program line {i}")
print("program error line", file=sys.stderr)
busy(0.2)
"""


def test_json_never_goes_into_the_programs_stdout(tmp_path, groundtruth_dir):
    """pyrometer --json prog.py > out.txt: out.txt is the program's output alone,
    the profile is pyrometer-profile.json (and json.load reads it)."""
    from conftest import program_env  # noqa: PLC0415
    write_program(tmp_path, CHATTY)
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        proc = subprocess.run([sys.executable, "-m", "pyrometer", "--json", "prog.py"], cwd=tmp_path, stdout=out,
                              stderr=err, stdin=subprocess.DEVNULL, env=program_env(groundtruth_dir),
                              timeout=TIMEOUT_S)
    assert proc.returncode == 0, (tmp_path / "err.txt").read_text()
    assert (tmp_path / "out.txt").read_text() == "program line 0\nprogram line 1\nprogram line 2\n"
    assert (tmp_path / "err.txt").read_text() == (
        "program error line\n"
        "pyrometer: profile written to pyrometer-profile.json (view: pyrometer view pyrometer-profile.json)\n")
    profile = load_json(tmp_path / "pyrometer-profile.json")
    assert profile["exit_status"] == 0 and profile["files"]


def test_view_reads_standard_input(tmp_path, run_pyrometer, groundtruth_dir):
    """pyrometer view /dev/stdin < profile.json, from a file and from a pipe (not
    seekable), and pyrometer view - the same."""
    from conftest import program_env  # noqa: PLC0415
    write_program(tmp_path, BUSY + "busy(0.3)  # @hot\n")
    profile = profile_json(run_pyrometer, tmp_path, [])
    saved = tmp_path / "p.json"
    expected = run_pyrometer(["view", saved], cwd=tmp_path)
    assert expected.returncode == 0 and "# @hot" in expected.stdout, expected
    env = program_env(groundtruth_dir)
    for name in ("/dev/stdin", "-"):
        with open(saved, "rb") as f:  # redirected from a file
            from_file = subprocess.run([sys.executable, "-m", "pyrometer", "view", name], stdin=f,
                                       capture_output=True, cwd=tmp_path, env=env, timeout=TIMEOUT_S)
        # through a pipe, which cannot seek
        piped = subprocess.run([sys.executable, "-m", "pyrometer", "view", name], input=saved.read_bytes(),
                               capture_output=True, cwd=tmp_path, env=env, timeout=TIMEOUT_S)
        for proc in (from_file, piped):
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.decode() == expected.stdout and proc.stderr == b""
    # JSON back out of view goes to standard output: no program shares it there.
    again = subprocess.run([sys.executable, "-m", "pyrometer", "view", "-", "--json"], input=saved.read_bytes(),
                           capture_output=True, cwd=tmp_path, env=env, timeout=TIMEOUT_S)
    assert json.loads(again.stdout) == profile


@pytest.mark.parametrize("mode, args, line", [
    ("json", ["--json"],
     "pyrometer: profile written to pyrometer-profile.json (view: pyrometer view pyrometer-profile.json)"),
    ("json outfile", ["--json", "--outfile", "my profile.json"],
     "pyrometer: profile written to my profile.json (view: pyrometer view 'my profile.json')"),
    ("html", ["--html"], "pyrometer: web report written to pyrometer-profile.html (view: open it in a browser)"),
    ("text outfile", ["--outfile", "r.txt"], "pyrometer: report written to r.txt (view: less -S r.txt)"),
    ("periodic", ["--json", "--profile-interval", "0.1"],
     "pyrometer: profile written to pyrometer-profile.json, also every 0.1 s while the program ran "
     "(view: pyrometer view pyrometer-profile.json)"),
    ("periodic text", ["--profile-interval", "0.1"],
     "pyrometer: report written to pyrometer-profile.txt, also every 0.1 s while the program ran "
     "(view: less -S pyrometer-profile.txt)"),
    ("device", ["--json", "--outfile", os.devnull], f"pyrometer: profile written to {os.devnull}"),
], ids=lambda v: v if isinstance(v, str) and " " not in v[:12] else None)
def test_every_mode_says_where_its_output_went(tmp_path, run_pyrometer, mode, args, line):
    write_program(tmp_path, CHATTY)
    proc = run_pyrometer([*args, "prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "program line 0\nprogram line 1\nprogram line 2\n", "a report went into stdout"
    # After the program's own standard error, one line.
    assert proc.stderr == "program error line\n" + line + "\n", proc.stderr
    quiet = run_pyrometer(["--quiet", *args, "prog.py"], cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "program error line\n", quiet.stderr


def test_text_report_to_stdout_needs_no_line(tmp_path, run_pyrometer):
    write_program(tmp_path, CHATTY)
    proc = run_pyrometer(["prog.py"], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "program error line\n", proc.stderr
    assert "pyrometer: prog.py" in proc.stdout


def test_view_says_where_and_quiet_silences_it(tmp_path, run_pyrometer):
    write_program(tmp_path, BUSY + "busy(0.2)\n")
    profile_json(run_pyrometer, tmp_path, [])
    proc = run_pyrometer(["view", "p.json", "--json", "-o", "again.json"], cwd=tmp_path)
    assert proc.stderr == "pyrometer: profile written to again.json (view: pyrometer view again.json)\n"
    proc = run_pyrometer(["view", "p.json", "--html", "--quiet"], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "" and (tmp_path / "pyrometer-profile.html").exists()


def test_version(tmp_path, run_pyrometer):
    import pyrometer  # noqa: PLC0415
    proc = run_pyrometer(["--version"], cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"pyrometer {pyrometer.__version__}\n", "")


def _help_of(text: str, option: str) -> str:
    """The help text of one option, its lines joined."""
    start = re.search(rf"^  {re.escape(option)}\b.*$", text, re.M)
    assert start, f"{option} not in --help"
    rest = text[start.start():].splitlines()
    block = [rest[0]] + [line for line in __import__("itertools").takewhile(
        lambda line: line.startswith(" " * 10), rest[1:])]
    return " ".join(" ".join(block).split())


def test_help_says_the_truth(tmp_path, run_pyrometer):
    proc = run_pyrometer(["--help"], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    text = proc.stdout
    # A flag's "default" is its variable's (True for --no-leak-detector): never shown.
    assert "default: True" not in text and "default: False" not in text, text
    assert "reported by default" in _help_of(text, "--no-leak-detector")
    # The description promises GPU only beside the option that keeps the promise.
    description = " ".join(text.split("\n\n")[1].split())
    assert "GPU" in description and "--gpu" in text and "--no-gpu" in text, description
    for option in ("--outfile", "--profile-interval", "--profile-only", "--profile-exclude"):
        assert "default" in _help_of(text, option), f"{option}: {_help_of(text, option)}"
    assert "pyrometer-profile.json" in _help_of(text, "--json")
    rate = _help_of(text, "--cpu-sampling-rate")
    assert "0.0001" in rate and " 1 " in rate + " " and "0.01" in rate, rate
    assert "--quiet" in text and "--version" in text


@pytest.mark.parametrize("args, expected", [
    (["--cpu-sampling-rate", "2"], "--cpu-sampling-rate must be between 0.0001 and 1 seconds, not 2"),
    (["--cpu-sampling-rate", "0.00005"], "--cpu-sampling-rate must be between 0.0001 and 1 seconds, not 0.00005"),
    (["--cpu-sampling-rate", "abc"], "--cpu-sampling-rate: expected a number of seconds, not 'abc'"),
    (["--cpu-percent-threshold", "101"], "--cpu-percent-threshold must be at least 0 and at most 100, not 101"),
    (["--profile-interval", "0"], "--profile-interval must be greater than 0 and at most 1e+09 seconds, not 0"),
    (["--allocation-sampling-window", "10"],
     "--allocation-sampling-window must be between 4096 bytes and 16 GiB (17179869184), not 10"),
    (["--malloc-threshold", "-1"], "--malloc-threshold must be at least 0 and at most 1e+09 MB, not -1"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_errors_name_the_option_once_and_state_the_limits(tmp_path, run_pyrometer, args, expected):
    write_program(tmp_path, "print('should not run')\n")
    proc = run_pyrometer([*args, "prog.py"], cwd=tmp_path)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert line == "pyrometer: error: " + expected, line
    assert line.count(args[0]) == 1, line


def test_scalene_top_level_names(tmp_path, run_pyrometer):
    """growth_rate, max_footprint_fname and max_footprint_lineno, as Scalene
    writes them (scalene view's web page needs growth_rate)."""
    prog = write_program(tmp_path, """
        keep = [bytearray(1 << 20) for _ in range(40)]  # @kept
        for _ in range(40):
            temporary = bytearray(1 << 20)
        """)
    profile = profile_json(run_pyrometer, tmp_path, ["--allocation-sampling-window", "65536"])
    where = profile["max_footprint_where"]
    assert where is not None
    assert profile["max_footprint_fname"] == where["filename"] == str(prog.resolve())
    assert profile["max_footprint_lineno"] == where["lineno"] >= 1
    # 40 MB kept of about 80 MB allocated: about half, as a percentage.
    assert 25 <= profile["growth_rate"] <= 75, profile["growth_rate"]
