"""A program cannot tell it is profiled, except by its speed (issue 46): what
pyrometer replaces looks like the original, it keeps no descriptor where the
program counts its own, it warns about nothing under the strictest warning
settings, it leaves the collector's counts alone, and pytest under
`filterwarnings = error` passes profiled as bare.  Each test here failed
before (the failures CPython's own regression tests and pytest showed) and
compares the profiled run with the bare one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# What a program can read of the functions pyrometer replaces or watches.
LOOKS = r"""
import inspect, json, os, posix, signal, _signal, subprocess, sys, threading, _thread
out = {}
for where, name in [("signal", "signal"), ("_signal", "signal"), ("os", "fork"), ("os", "forkpty"),
                    ("os", "_exit"), ("os", "waitpid"), ("os", "wait"), ("os", "execv"), ("os", "execve"),
                    ("_thread", "start_new_thread"), ("threading", "_start_new_thread")]:
    f = getattr(sys.modules[where], name, None)
    if f is None:
        continue  # threading._start_new_thread: before 3.13 only
    try:
        sig = str(inspect.signature(f))
    except ValueError as e:
        sig = "no signature"
    out[where + "." + name] = [f.__name__, f.__qualname__, f.__module__, type(f).__name__,
                               getattr(getattr(f, "__self__", None), "__name__", None), sig, f.__doc__,
                               hasattr(f, "__wrapped__"), repr(f).split(" at ")[0]]
out["same in os and posix"] = [getattr(os, n) is getattr(posix, n) for n in ("fork", "_exit", "waitpid", "wait")]
start = threading.Thread.start
out["Thread.start"] = [start.__module__, start.__qualname__, start.__code__.co_filename, hasattr(start, "__wrapped__"),
                       sorted(vars(start)), str(inspect.signature(start))]
out["_start_new_thread is start_new_thread"] = getattr(threading, "_start_new_thread", None) is _thread.start_new_thread
ex = subprocess.Popen._execute_child
out["Popen._execute_child"] = [ex.__module__, ex.__qualname__, ex.__code__.co_filename, str(inspect.signature(ex))]
out["meta_path"] = [type(m).__name__ for m in sys.meta_path]
out["signal module attr"] = [v.__module__ for k, v in vars(signal).items()
                             if inspect.isroutine(v) and not inspect.isbuiltin(v)]
try:
    os.execv("/nonexistent/program", ["x"])
except OSError as e:
    import traceback
    out["exec error frames"] = [f.name for f in traceback.extract_tb(e.__traceback__)]
print(json.dumps(out, sort_keys=True))
"""


def test_what_pyrometer_replaces_looks_like_the_original(profile_program, run_bare):
    """CPython's test_signal checks that every function of the signal module
    has __module__ "signal": under pyrometer signal.signal had
    "pyrometer.run.endings".  os._exit, os.waitpid and os.wait were Python
    functions of pyrometer's, os.fork a builtin with another __self__ and no
    __module__, Popen._execute_child pyrometer's own function, a finder of
    pyrometer's stood first in sys.meta_path, and threading.Thread.start a
    wrapper of pyrometer's (its code's file, __wrapped__)."""
    bare = run_bare(LOOKS)
    assert bare.returncode == 0, bare.stderr
    for options in (["--cpu-only"], []):
        p = profile_program(LOOKS, options=options)
        assert json.loads(p.proc.stdout) == json.loads(bare.stdout), (options, p.proc.stdout, bare.stdout)


def test_replaced_functions_still_do_their_work(profile_program):
    """What the stand-ins and the watch are there for: a child started
    through subprocess and reaped is listed with its status, a signal put back
    to SIG_DFL still ends the run with its profile written."""
    source = """
import os, signal, subprocess, sys, time
r = subprocess.run([sys.executable, "-c", "import sys; sys.exit(3)"])
pid = os.fork()
if pid == 0:
    os._exit(5)
_, status = os.waitpid(pid, 0)
print(r.returncode, os.waitstatus_to_exitcode(status))
signal.signal(signal.SIGTERM, signal.SIG_DFL)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)  # the signal is acted on here (the program must not end first)
print("not reached")
"""
    p = profile_program(source, options=["--cpu-only"], expect_status=-15)
    assert p.proc.stdout == "3 5\n", p.proc.stderr
    rows = p.profile["processes"]
    assert any(r["exit_status"] == 3 and r["command"][-2:] == ["-c", "import sys; sys.exit(3)"] for r in rows), rows
    assert any(r["exit_status"] == 5 and r["started_by"] == "fork" for r in rows), rows
    assert p.profile["ended_by"] == "SIGTERM" and p.profile["exit_status"] == 128 + 15


FDS = r"""
import os, subprocess, sys
def fds():
    return [f for f in range(0, 300) if _open(f)]
def _open(f):
    try:
        os.fstat(f)
        return True
    except OSError:
        return False
if sys.argv[1:] == ["child"]:
    print("child", fds(), flush=True)
else:
    for i in range(200000):  # long enough for the sampler to open what it keeps open
        pass
    print("program", fds(), flush=True)
    subprocess.run([sys.executable, __file__, "child"], close_fds=True)
    subprocess.run([sys.executable, __file__, "child"], close_fds=False)
"""


def test_no_descriptor_where_the_program_counts_its_own(profile_program, run_bare):
    """CPython's test_subprocess passes descriptors 3-12 to children and checks
    which arrive: the sampler's schedstat and system-call files were 3, 4 and
    5 in the program and in every profiled child."""
    bare = run_bare(FDS, name="prog.py")
    assert bare.returncode == 0, bare.stderr
    for options in (["--cpu-only"], []):
        p = profile_program(FDS, options=options)
        assert p.proc.stdout == bare.stdout, (options, p.proc.stderr)


@pytest.mark.parametrize("flags", [["-X", "warn_default_encoding", "-W", "error"], ["-X", "dev", "-W", "error"]])
def test_no_warning_of_ours_under_the_strictest_settings(run_pyrometer, run_bare, tmp_path, flags):
    """CPython's test_subprocess runs a child with -X warn_default_encoding and
    counts its warnings: pyrometer's own open() calls without an encoding
    (children.py) added EncodingWarnings to the program's children."""
    source = r"""
import subprocess, sys
r = subprocess.run([sys.executable, *sys.argv[1:], "-c", "print('child')"], capture_output=True,
                   encoding="utf-8")
print(r.returncode, r.stdout.strip(), repr(r.stderr))
"""
    bare = run_bare(source, args=flags, name="prog.py", python_args=flags)
    assert bare.returncode == 0, bare.stderr
    prog = tmp_path / "prog.py"
    p = run_pyrometer(["--quiet", "--cpu-only", "--json", "--outfile", tmp_path / "p.json", prog, *flags],
                      python_args=flags, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout == bare.stdout, (p.stdout, p.stderr, bare.stdout)
    assert "Warning" not in p.stderr, p.stderr


def test_the_collectors_counts_are_the_programs(profile_program):
    """CPython's test_gc: after gc.collect(), fewer than five new objects.
    pyrometer made two objects the collector counts (a weak reference and its
    callback) for each code object its sampler met, and a collection just
    before a snapshot saw them: 14 at the first snapshot, in every run."""
    source = r"""
import gc, time
t = time.time(); seen = []; i = 0
while time.time() - t < 1.5:
    i += 1
    ns = {}
    exec(compile(f"def f{i}():\n    s = 0\n    for k in range(2000): s += k\n", f"<gen{i}>", "exec"), ns)
    ns[f"f{i}"]()
    del ns
    gc.collect()
    a, b, c = gc.get_count()
    if a >= 2:
        seen.append(a)
print(seen)
"""
    for options in (["--cpu-only"], []):
        p = profile_program(source, options=options)
        assert p.proc.stdout == "[]\n", (options, p.proc.stdout)


def test_pytest_at_its_strictest_passes_profiled(run_pyrometer, tmp_path):
    """pytest marks every plugin's package for assertion rewriting and warns
    where it is imported already, as pyrometer is when it runs pytest:
    "PytestAssertRewriteWarning: Module already imported so cannot be
    rewritten; pyrometer", an error under filterwarnings = error.  The
    project's own modules and its conftest plugin are still rewritten."""
    pytest.importorskip("pytest")
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\naddopts = -p no:cacheprovider\n")
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef pair():\n    return [1, 2]\n\n"
        "def check(a, b):\n    assert a == b\n")
    (tmp_path / "test_strict.py").write_text(
        "import conftest\n\ndef test_equal(pair):\n    assert pair == [1, 2]\n\n"
        "def test_rewritten(pair):\n    try:\n        assert pair == [1, 3]\n"
        "    except AssertionError as e:\n        assert '[1, 2] == [1, 3]' in str(e)\n\n"
        "def test_conftest_rewritten():\n    try:\n        conftest.check(1, 2)\n"
        "    except AssertionError as e:\n        assert '1 == 2' in str(e)\n")
    for how in (["-m", "pytest", "-q", "--import-mode=importlib"], ["-m", "pytest", "-q"]):
        bare = subprocess.run([sys.executable, *how[:2], *how[2:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert bare.returncode == 0, bare.stdout + bare.stderr
        p = run_pyrometer(["--quiet", "--cpu-only", "--json", "--outfile", tmp_path / "p.json", *how],
                          cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "3 passed" in p.stdout and "Warning" not in p.stdout + p.stderr, p.stdout + p.stderr
