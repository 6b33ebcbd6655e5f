"""Shared test machinery.

- ``groundtruth_dir``: builds the test-only C extension tests/groundtruth/_groundtruth.c
  once per session (gcc, flags from sysconfig, -Wall -Wextra -Werror) into a
  temporary directory; test programs import it through PYTHONPATH.
- ``fake_cupti_dir``: builds the CUPTI test double tests/gpu/fake_cupti.c the
  same way (libcupti.so.13).
- ``fake_nvml_dir``: builds the NVML test double tests/gpu/fake_nvml.c once per
  session into a temporary directory as libnvidia-ml.so.1 (tests/end_to_end/test_gpu.py puts
  it on LD_LIBRARY_PATH).
- ``run_pyrometer``: runs ``python -m pyrometer ...`` in a subprocess with that
  PYTHONPATH.
- ``profile_program``: writes a program, profiles it with --json --outfile and
  returns the parsed profile with helpers to find lines by marker comments.
- ``run_bare``: writes a program and runs it with plain ``python`` (no profiler) in
  the same environment, to compare a profiled run's behaviour with.
- ``start_pyrometer``: starts ``python -m pyrometer ...`` without waiting (Popen), for
  tests that watch or signal the run while it goes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
GROUNDTRUTH_SOURCES = TESTS_DIR / "groundtruth"

# Every test program is killed after this long: a hang is a failure, not a stall.
PROGRAM_TIMEOUT_S = 60


def _compiler() -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return cc.split()


def build_groundtruth(out_dir: Path) -> Path:
    """Compile _groundtruth.c into out_dir and return out_dir."""
    if shutil.which(_compiler()[0]) is None:
        raise RuntimeError(f"no C compiler ({_compiler()[0]}) to build the ground-truth extension")
    src = GROUNDTRUTH_SOURCES / "_groundtruth.c"
    target = out_dir / ("_groundtruth" + sysconfig.get_config_var("EXT_SUFFIX"))
    include = sysconfig.get_paths()["include"]
    plat_include = sysconfig.get_paths()["platinclude"]
    cmd = [
        *_compiler(), "-std=c11", "-O2", "-g", "-fPIC", "-shared",
        "-Wall", "-Wextra", "-Werror",
        f"-I{include}", f"-I{plat_include}",
        str(src), "-o", str(target),
    ]
    if sys.platform == "darwin":
        cmd[1:1] = ["-undefined", "dynamic_lookup"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the ground-truth extension failed:\n$ {' '.join(cmd)}\n"
                           f"{proc.stdout}{proc.stderr}")
    return out_dir


@pytest.fixture(scope="session")
def groundtruth_dir(tmp_path_factory) -> Path:
    """Directory holding the freshly built _groundtruth extension."""
    return build_groundtruth(tmp_path_factory.mktemp("groundtruth_build"))


FAKE_NVML_SOURCE = TESTS_DIR / "gpu" / "fake_nvml.c"


def _build_double(source: Path, target: Path, what: str) -> Path:
    """Compile a test double (a shared library standing in for a vendor's) into
    target, the name pyrometer's dlopen looks for; returns target's directory,
    which a test puts on LD_LIBRARY_PATH."""
    cmd = [*_compiler(), "-std=c11", "-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
           str(source), "-o", str(target), "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the {what} test double failed:\n$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return target.parent


def build_fake_nvml(out_dir: Path) -> Path:
    """The NVML test double (tests/gpu/fake_nvml.c) as libnvidia-ml.so.1."""
    return _build_double(FAKE_NVML_SOURCE, out_dir / "libnvidia-ml.so.1", "NVML")


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory) -> Path:
    """Directory holding the freshly built fake libnvidia-ml.so.1."""
    return build_fake_nvml(tmp_path_factory.mktemp("fake_nvml"))


FAKE_CUPTI_SOURCE = TESTS_DIR / "gpu" / "fake_cupti.c"


def build_fake_cupti(out_dir: Path) -> Path:
    """The CUPTI test double (tests/gpu/fake_cupti.c) as libcupti.so.13."""
    return _build_double(FAKE_CUPTI_SOURCE, out_dir / "libcupti.so.13", "CUPTI")


@pytest.fixture(scope="session")
def fake_cupti_dir(tmp_path_factory) -> Path:
    """Directory holding the freshly built fake libcupti.so.13."""
    return build_fake_cupti(tmp_path_factory.mktemp("fake_cupti"))


def program_env(groundtruth: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(groundtruth)] if groundtruth is not None else []
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("NO_COLOR", None)  # so that "no colour when not a terminal" is pyrometer's doing
    if extra:
        env.update(extra)
    return env


@pytest.fixture
def run_pyrometer(groundtruth_dir):
    """run_pyrometer(args, cwd=..., input=..., env=...) -> CompletedProcess (text mode)."""

    def run(args: list[str], *, cwd: str | os.PathLike | None = None, input: str | None = None,
            env: dict[str, str] | None = None, timeout: float = PROGRAM_TIMEOUT_S,
            python_args: list[str] | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable, *(python_args or []), "-m", "pyrometer", *[str(a) for a in args]]
        return subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, text=True,
                              env=program_env(groundtruth_dir, env), timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)

    return run


@pytest.fixture
def start_pyrometer(groundtruth_dir):
    """start_pyrometer(args, cwd=..., env=..., **popen_kwargs) -> Popen (no input, own session)."""

    def start(args: list[str], *, cwd: str | os.PathLike | None = None,
              env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "pyrometer", *[str(a) for a in args]]
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("start_new_session", True)
        return subprocess.Popen(cmd, cwd=cwd, env=program_env(groundtruth_dir, env), **kw)

    return start


def write_program(directory: Path, source: str, name: str = "prog.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


@dataclass
class Profiled:
    """A profiled run: the process, the parsed JSON profile and the program's path."""
    proc: subprocess.CompletedProcess
    profile: dict[str, Any]
    program: Path

    @property
    def source_lines(self) -> list[str]:
        return self.program.read_text().splitlines()

    def lineno(self, marker: str) -> int:
        """The line number of the (unique) source line containing marker."""
        hits = [i + 1 for i, line in enumerate(self.source_lines) if marker in line]
        assert len(hits) == 1, f"marker {marker!r} found on lines {hits} of {self.program}"
        return hits[0]

    def file(self, path: Path | None = None) -> dict[str, Any]:
        path = Path(path or self.program)
        files = self.profile["files"]
        for key in (str(path), str(path.resolve()), os.path.realpath(path)):
            if key in files:
                return files[key]
        raise AssertionError(f"{path} is not in the profile's files: {sorted(files)}")

    def line(self, marker: str, path: Path | None = None) -> dict[str, Any]:
        """The profile entry of the line holding marker (zeros if not reported)."""
        n = self.lineno(marker)
        for entry in self.file(path)["lines"]:
            if entry["lineno"] == n:
                return entry
        raise AssertionError(f"line {n} ({marker!r}) missing from the profile of {path or self.program}")

    def function(self, qualname: str, path: Path | None = None) -> dict[str, Any]:
        for entry in self.file(path)["functions"]:
            if entry["line"] == qualname:
                return entry
        names = [e["line"] for e in self.file(path)["functions"]]
        raise AssertionError(f"function {qualname!r} not in the profile (functions: {names})")

    def describe(self, *markers: str) -> str:
        """A compact summary for assertion messages."""
        p = self.profile
        parts = [f"total_time_sec={p['total_time_sec']:.3f} elapsed={p['elapsed_time_sec']:.3f} "
                 f"cpu={p['cpu_time_sec']} samples={p['cpu_samples']} threads={p['threads']}"]
        for m in markers:
            try:
                e = self.line(m)
            except AssertionError as err:
                parts.append(f"{m}: {err}")
                continue
            parts.append(f"{m} (line {e['lineno']}): py={e['n_cpu_python_sec']:.3f}s "
                         f"c={e['n_cpu_native_sec']:.3f}s sys={e['n_sys_sec']:.3f}s "
                         f"py%={e['n_cpu_percent_python']:.1f} c%={e['n_cpu_percent_c']:.1f} "
                         f"sys%={e['n_sys_percent']:.1f} samples={e['n_samples']}")
        hot = sorted(((e["n_cpu_python_sec"] + e["n_cpu_native_sec"] + e["n_sys_sec"], name, e)
                      for name, f in p["files"].items() for e in f["lines"]),
                     key=lambda t: -t[0])[:6]
        parts.append("hottest lines: " + "; ".join(
            f"{os.path.basename(name)}:{e['lineno']} py={e['n_cpu_python_sec']:.3f} "
            f"c={e['n_cpu_native_sec']:.3f} sys={e['n_sys_sec']:.3f}" for t, name, e in hot if t > 0))
        return "\n  ".join(parts)


@pytest.fixture
def profile_program(tmp_path, run_pyrometer):
    """profile_program(source, options=[], args=[]) -> Profiled.

    Writes source to tmp_path/prog.py, runs
    ``python -m pyrometer --quiet --json --outfile OUT [options] prog.py [args]`` and parses OUT.
    --quiet: the tests compare the program's standard error with plain python's;
    the line that says where the profile went is tested in test_cli.py.
    """

    def profile(source: str, options: list[str] | None = None, args: list[str] | None = None,
                name: str = "prog.py", expect_status: int | None = 0, **kw) -> Profiled:
        prog = write_program(tmp_path, source, name)
        out = tmp_path / "profile.json"
        if out.exists():
            out.unlink()
        proc = run_pyrometer(["--quiet", "--json", "--outfile", out, *(options or []), prog, *(args or [])],
                             cwd=tmp_path, **kw)
        if expect_status is not None:
            assert proc.returncode == expect_status, (
                f"pyrometer exited {proc.returncode}, expected {expect_status}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        assert out.exists(), f"no profile written\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        with open(out) as f:
            data = json.load(f)
        return Profiled(proc, data, prog)

    return profile


@pytest.fixture
def run_bare(tmp_path, groundtruth_dir):
    """run_bare(source, args=[], name="bare.py", python_args=[]) -> CompletedProcess: the program run by
    plain python, without the profiler, in tmp_path and the same environment."""

    def run(source: str, args: list[str] | None = None, name: str = "bare.py",
            env: dict[str, str] | None = None,
            python_args: list[str] | None = None) -> subprocess.CompletedProcess:
        prog = write_program(tmp_path, source, name)
        return subprocess.run([sys.executable, *(python_args or []), str(prog),
                               *[str(a) for a in args or []]], cwd=tmp_path,
                              capture_output=True, text=True, env=program_env(groundtruth_dir, env),
                              timeout=PROGRAM_TIMEOUT_S, stdin=subprocess.DEVNULL)

    return run


# The tests of signals (Ctrl-C, SIGHUP, SIGTERM) compare pyrometer's run with the
# bare program's under the dispositions a terminal's shell gives: SIGINT and
# SIGHUP at their defaults.  A suite started under nohup, or as a background
# command of a shell without job control, inherits them ignored, and the
# programs it starts keep them ignored (an exec resets handlers, not an
# ignore): the bare program then outlives its SIGHUP, and eight such tests
# failed for that alone.  The defaults are put back for the programs the suite
# starts.
_DEFAULTS_FOR_PROGRAMS = {signal.SIGHUP: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}


def pytest_configure(config):
    config.addinivalue_line("markers", "accuracy: profiles a program and compares it with ground truth")
    config.addinivalue_line("markers", "stress: a long run (about 25 s) of many threads, forks and allocations")
    config.addinivalue_line("markers", "alone: what it measures changes with a test beside it, so it runs with none "
                                       "(set from accuracy; tests/pythons.py)")
    config.addinivalue_line("markers", "once: tests what is the same on every CPython (C, a browser, the fuzzer); "
                                       "tests/pythons.py runs it in one suite")
    for signum, default in _DEFAULTS_FOR_PROGRAMS.items():
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, default)


# A ground-truth test compares a sampled estimate with the truth under a
# tolerance: a few times in a hundred runs the sample itself lands outside it
# on this loaded 2-core machine (a CPU split read 8 points off where 3 are
# allowed, with nothing wrong).  Such a test is run again when it fails, up to
# twice, and passes only if a later run is within the tolerance: a defect
# fails every run, and pytest's summary lists every rerun ("R"), so none is
# hidden.  Twice: CI runs about 700 of them (six builds), and with one rerun
# a CI run failed on three tests, on three builds, that passed on the others
# and run after run here: CI's virtual machine is at times busier.
ACCURACY_RERUNS = 2


# tests/pythons.py runs each CPython's suite in two parts: the tests marked
# `alone` one after another with nothing beside them, then the rest spread over
# the machine's cores (pytest-xdist).  A test that compares what it measures
# with the truth (accuracy) is `alone`: a second test running beside it would
# change the time and CPU it measures.  The stress test loads the machine but
# checks the profile against itself (a loaded machine is its point): spread.
ALONE_MARKERS = ("accuracy",)


# tryfirst: the markers are set before `-m` selects on them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(name) is not None for name in ALONE_MARKERS):
            item.add_marker(pytest.mark.alone)
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return  # pytest-rerunfailures (the test extra) is not installed: one run each
    for item in items:
        if item.get_closest_marker("accuracy") is not None and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=ACCURACY_RERUNS))


# pytest-xdist's workers are started with COLUMNS=80 and LINES=24 in their
# environment (execnet sets them), which the programs the tests start inherit:
# a report would be cut to 80 columns there and nowhere else.  The suite's
# programs see the environment a plain `pytest` gives them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)
