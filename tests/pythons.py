#!/usr/bin/env python3
"""Runs the whole test suite on every CPython pyrometer supports that this
machine has, each in a fresh virtual environment with pyrometer built for it,
and the free-threaded refusal test on a free-threaded CPython.

    python3 tests/pythons.py [--pythons 3.10,3.11,...] [--require LIST] [--workers N]
                             [--no-freethreaded | --require-freethreaded] [-- PYTEST ARGS]

Interpreters are looked for as python3.X on PATH and under pyenv's versions
(`pyenv root`, or ~/.pyenv); the newest patch release of each minor version is
taken.  CPython 3.14 and 3.15, when this machine has none, run in a Debian
sid chroot (.ci/python-chroot.sh makes it once and caches it outside the clone;
root only): the clone is mounted there at the same path, so the venvs under
build/pythons are the same files inside and out.  A version that is not found
is skipped, and the summary says so; one named by --require is a failure
instead (CI requires all six).  The
free-threaded CPython 3.13.5t is built once from Debian's source by
.ci/python-freethreaded.sh and cached outside the clone.  Exit status: 0 when
every suite that ran passed (and nothing required was missing), 1 otherwise.

Each suite runs in two parts (tests/conftest.py says which test goes where):
the tests marked `alone` (they compare what they measure with the truth)
one after another, then the rest spread over --workers processes
(pytest-xdist; default: this machine's cores).  The tests marked `once` (C
built by gcc, the web report in a browser, the fuzzer: the same on every
CPython) run in one suite only: that of the CPython running this script when
it is among those tested, else the first.  `--workers 1` runs each suite as
one plain pytest run, the `once` tests still in one suite; so does a `-m`
of your own after `--` (it selects in place of the parts' own).
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUPPORTED = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]
# Those that Debian's sid chroot provides when the host has none.
CHROOT_VERSIONS = ["3.14", "3.15"]
CHROOT_SCRIPT = REPO / ".ci" / "python-chroot.sh"
# Where PyPI has an atheris wheel (pyproject.toml's test extra, whose marker says
# the same): there the fuzz test must run (PYROMETER_REQUIRE_FUZZ=1), not skip.
FUZZ_VERSIONS = ["3.10", "3.11", "3.12", "3.13", "3.14"]
FUZZ_PLATFORM = sys.platform == "linux" and platform.machine() == "x86_64"
# Where the real-library corpus and the servers are installed (the corpus extra)
# and must run (PYROMETER_REQUIRE_CORPUS=1): two CPythons with binary wheels of
# every library in it; a few minutes of CI each.
CORPUS_VERSIONS = ["3.11", "3.12"]
# Where CPython's own regression tests run under the full profile
# (tests/end_to_end/test_cpython_tests.py): the oldest, one of each way the
# threads' starts are watched (a stand-in before 3.12, audit events after) and
# the newest, 2-5 minutes each; on every CPython the suite took 80 minutes of
# CI's 90.  Elsewhere that test skips, saying where it ran (when one of them
# is in the run); a plain pytest run, or `tests/regrtest_corpus.py`, runs it
# on any CPython.
REGRTEST_VERSIONS = ["3.10", "3.12", "3.15"]
VENVS = REPO / "build" / "pythons"
FREETHREADED_SCRIPT = REPO / ".ci" / "python-freethreaded.sh"


def say(text: str) -> None:
    print(f"[pythons] {text}", flush=True)


def _version_of(python: str) -> tuple[int, ...] | None:
    try:
        # A usable interpreter has the headers (pyrometer compiles against them)
        # and ensurepip (for its venv): Debian's own python3.X lacks both unless
        # python3.X-dev and python3.X-venv are installed.
        out = subprocess.run([python, "-c", "import sys, sysconfig, os, ensurepip; "
                              "assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')); "
                              "print(*sys.version_info[:3], sysconfig.get_config_var('Py_GIL_DISABLED') or 0)"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 4 or parts[3] not in ("0", "1"):
        return None
    if parts[3] == "1":
        return None  # a free-threaded build is not one of the suite's interpreters
    return tuple(int(p) for p in parts[:3])


def find_interpreters(wanted: list[str]) -> dict[str, str]:
    """minor version -> the newest interpreter of it found."""
    candidates: list[str] = []
    for minor in wanted:
        exe = shutil.which(f"python{minor}")
        if exe:
            candidates.append(exe)
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    try:
        pyenv_root = subprocess.run(["pyenv", "root"], capture_output=True, text=True,
                                    timeout=30).stdout.strip() or pyenv_root
    except (OSError, subprocess.TimeoutExpired):
        pass
    for minor in wanted:
        candidates += glob.glob(os.path.join(pyenv_root, "versions", f"{minor}.*", "bin", f"python{minor}"))
    candidates.append(sys.executable)
    best: dict[str, tuple[tuple[int, ...], str]] = {}
    for exe in candidates:
        if os.sep + "shims" + os.sep in exe:
            continue  # pyenv's shims run whatever pyenv picks, not what they are named after
        version = _version_of(exe)
        if version is None:
            continue
        minor = f"{version[0]}.{version[1]}"
        if minor in wanted and (minor not in best or version > best[minor][0]):
            best[minor] = (version, exe)
    return {minor: exe for minor, (_, exe) in sorted(best.items())}


def run(cmd: list[str], prefix: list[str] = (), **kw) -> subprocess.CompletedProcess:
    """cmd, through prefix (a chroot's, which also enters the clone), else in the clone."""
    say("$ " + " ".join(str(c) for c in [*prefix, *cmd]))
    return subprocess.run([*prefix, *cmd], cwd=REPO, **kw)


def chroot_prefix() -> tuple[list[str] | None, str]:
    """The command prefix that runs a command in the sid chroot, in this clone
    (mounted there at the same path), or why there is none."""
    if os.geteuid() != 0 or not CHROOT_SCRIPT.exists():
        return None, "not root (the CPython 3.14/3.15 chroot needs it)" if os.geteuid() != 0 \
            else f"{CHROOT_SCRIPT} is missing"
    made = run(["bash", str(CHROOT_SCRIPT), "prepare"], capture_output=True, text=True)
    sys.stderr.write(made.stderr[-3000:])
    if made.returncode != 0 or not made.stdout.strip():
        reason = (made.stderr.strip().splitlines() or ["no reason given"])[-1]
        return None, f"no Debian sid chroot: {reason}"
    root = made.stdout.strip().splitlines()[-1]
    mounted = run(["bash", str(CHROOT_SCRIPT), "mount", root, str(REPO)], capture_output=True, text=True)
    if mounted.returncode != 0:
        return None, f"cannot mount the clone in {root}: {mounted.stderr.strip()[-300:]}"
    atexit.register(subprocess.run, ["bash", str(CHROOT_SCRIPT), "umount", root])
    # A clean PATH: the host's names pyenv's shims and folders not in there;
    # and no pip find-links of the host's (a folder the chroot has not).
    return ["chroot", root, "env", "-C", str(REPO), "-u", "PIP_FIND_LINKS",
            "PATH=/usr/local/bin:/usr/bin:/bin"], ""


def make_venv(python: str, name: str, extras: str, prefix: list[str] = ()) -> tuple[str | None, str]:
    """A fresh venv with pyrometer installed from this tree; (its python, problem)."""
    venv = VENVS / name
    shutil.rmtree(venv, ignore_errors=True)
    if run([python, "-m", "venv", str(venv)], prefix).returncode != 0:
        return None, "cannot make a virtual environment"
    vpython = str(venv / "bin" / "python")
    quiet = ["--quiet", "--disable-pip-version-check"]
    if run([vpython, "-m", "pip", "install", *quiet, "--upgrade", "pip"], prefix).returncode != 0:
        return None, "cannot upgrade pip"
    if run([vpython, "-m", "pip", "install", *quiet, f".{extras}"], prefix).returncode != 0:
        return None, "pip install failed"
    return vpython, ""


def timed_venv(python: str, minor: str, prefix: list[str]) -> tuple[tuple[str | None, str], float]:
    """make_venv for one of the suite's CPythons (with the corpus where it runs),
    and the seconds it took."""
    started = time.monotonic()
    made = make_venv(python, minor, "[test,corpus]" if minor in CORPUS_VERSIONS else "[test]", prefix)
    return made, time.monotonic() - started


def freethreaded_python() -> tuple[str | None, str]:
    """A free-threaded CPython with pyrometer installed, or why there is none."""
    if not FREETHREADED_SCRIPT.exists():
        return None, f"{FREETHREADED_SCRIPT} is missing"
    built = run(["bash", str(FREETHREADED_SCRIPT)], capture_output=True, text=True)
    sys.stderr.write(built.stderr[-3000:])
    if built.returncode != 0 or not built.stdout.strip():
        reason = (built.stderr.strip().splitlines() or ["no reason given"])[-1]
        return None, f"could not build a free-threaded CPython: {reason}"
    python = built.stdout.strip().splitlines()[-1]
    return make_venv(python, "3.13t", "")


SUMMARY = re.compile(r"=+ (.*?) in [0-9.]+s")
NO_TESTS_COLLECTED = 5  # pytest's exit status when a selection is empty


def run_suite(vpython: str, prefix: list[str], env: dict[str, str], pytest_args: list[str], workers: int,
              once: bool) -> tuple[bool, str, str]:
    """The suite in its parts (the module docstring says which); (passed, the
    parts' pytest summaries, their output)."""
    not_once = [] if once else ["not once"]
    if workers == 1 or "-m" in pytest_args:  # a -m of the caller's would replace each part's
        parts = [("", " and ".join(not_once), [])]
    else:
        parts = [("alone", " and ".join(["alone", *not_once]), []),
                 (f"{workers} workers", " and ".join(["not alone", *not_once]), ["-n", str(workers)])]
    ok, lines, outputs, ran = True, [], [], False
    for name, marks, spread in parts:
        # -rfER: failures, errors and reruns named in pytest's short summary,
        # which the summary at the end repeats (the tail of a long log is what is read).
        proc = run([vpython, "-m", "pytest", "tests", "-p", "no:cacheprovider", "-rfER",
                    *(["-m", marks] if marks else []), *spread, *pytest_args], prefix,
                   env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
        outputs.append(proc.stdout)
        summaries = SUMMARY.findall(proc.stdout)
        line = summaries[-1] if summaries else f"exit status {proc.returncode}"
        lines.append(f"{line} ({name})" if name else line)
        ran |= proc.returncode != NO_TESTS_COLLECTED
        ok &= proc.returncode in (0, NO_TESTS_COLLECTED)
    return ok and ran, "; ".join(lines), "".join(outputs)


def named_tests(output: str, most: int = 12, width: int = 400) -> list[str]:
    """The tests pytest's short summary names as failed, errored or rerun, with
    the first words of why (pytest-rerunfailures writes RERUN lines under -rR)."""
    lines = [line[:width] for line in output.splitlines()
             if re.match(r"(FAILED|ERROR|RERUN) tests/", line)]
    return lines[:most] + ([f"... and {len(lines) - most} more"] if len(lines) > most else [])


def main(argv: list[str]) -> int:
    pytest_args: list[str] = []
    if "--" in argv:
        pytest_args = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser(prog="tests/pythons.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pythons", default=",".join(SUPPORTED),
                        help="minor versions to test (default: %(default)s)")
    parser.add_argument("--require", default="",
                        help="minor versions that must be found (a missing one fails the run)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes for the tests not marked alone (default: this machine's cores, %(default)s)")
    ft = parser.add_mutually_exclusive_group()
    ft.add_argument("--no-freethreaded", action="store_true",
                    help="do not build or test the free-threaded CPython")
    ft.add_argument("--require-freethreaded", action="store_true",
                    help="fail if the free-threaded CPython cannot be built")
    ns = parser.parse_args(argv)
    if ns.workers < 1:
        parser.error(f"--workers must be at least 1, not {ns.workers}")
    wanted = [v for v in ns.pythons.split(",") if v]
    required = [v for v in ns.require.split(",") if v]
    unknown = [v for v in wanted + required if v not in SUPPORTED]
    if unknown:
        parser.error(f"not a supported version: {', '.join(unknown)} (supported: {', '.join(SUPPORTED)})")

    results: list[tuple[str, str, str]] = []  # (version, interpreter, outcome)
    named: dict[str, list[str]] = {}  # version -> its failed, errored and rerun tests
    failed = False
    env = dict(os.environ)
    if ns.no_freethreaded:
        results.append(("3.13t", "-", "skipped: --no-freethreaded"))
    else:
        started = time.monotonic()
        python, problem = freethreaded_python()
        if python is None:
            results.append(("3.13t", "-", f"skipped: {problem}"))
            failed |= ns.require_freethreaded
        else:
            env["PYROMETER_FREETHREADED_PYTHON"] = python
            results.append(("3.13t", python, f"built and installed in {time.monotonic() - started:.0f} s; "
                                             "refusal tested by each suite (test_interpreters.py)"))

    found = find_interpreters(wanted)
    prefixes: dict[str, list[str]] = {}
    labels = dict(found)
    chroot_wanted = [v for v in wanted if v in CHROOT_VERSIONS and v not in found]
    chroot_problem = ""
    if chroot_wanted:
        started = time.monotonic()
        prefix, chroot_problem = chroot_prefix()
        for minor in chroot_wanted if prefix is not None else []:
            found[minor] = f"/usr/bin/python{minor}"
            prefixes[minor] = prefix
            labels[minor] = f"Debian sid chroot {prefix[1]}: {found[minor]}"
        if prefix is not None:
            say(f"Debian sid chroot ready in {time.monotonic() - started:.0f} s")
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    once_in = here if here in found else next((v for v in wanted if v in found), None)
    for minor in wanted:
        if minor not in found:
            why = chroot_problem if minor in chroot_wanted and chroot_problem else "no interpreter found"
            results.append((minor, "-", f"skipped: {why}" + (" (REQUIRED)" if minor in required else "")))
            failed |= minor in required
    # Every venv first, --workers at a time (pip and the build wait on the disk
    # and the network as much as on a core), then the suites one after another.
    with concurrent.futures.ThreadPoolExecutor(max_workers=ns.workers) as pool:
        venvs = {minor: pool.submit(timed_venv, found[minor], minor, prefixes.get(minor, []))
                 for minor in wanted if minor in found}
    for minor, made in venvs.items():
        (vpython, problem), venv_seconds = made.result()
        started = time.monotonic() - venv_seconds
        prefix = prefixes.get(minor, [])
        if vpython is None:
            results.append((minor, labels[minor], f"FAILED: {problem}"))
            failed = True
            continue
        say(f"CPython {minor}: the whole suite ({labels[minor]})"
            + ("" if minor == once_in else f"; the tests marked once run under {once_in}"))
        suite_env = dict(env)
        if FUZZ_PLATFORM and minor in FUZZ_VERSIONS:
            suite_env["PYROMETER_REQUIRE_FUZZ"] = "1"
        if minor in CORPUS_VERSIONS:
            suite_env["PYROMETER_REQUIRE_CORPUS"] = "1"
        suite_env["PYROMETER_REQUIRE_REGRTEST"] = "1"  # CPython's own tests: every build here has them
        elsewhere = [v for v in REGRTEST_VERSIONS if v in found]
        if minor not in REGRTEST_VERSIONS and elsewhere:  # with none of them in this run, here
            suite_env["PYROMETER_REGRTEST_ELSEWHERE"] = ", ".join(elsewhere)
        if prefix:
            # The host's free-threaded CPython is not in the chroot: the host's
            # suites test the refusal.
            suite_env.pop("PYROMETER_FREETHREADED_PYTHON", None)
        ok, line, output = run_suite(vpython, prefix, suite_env, pytest_args, ns.workers, once=minor == once_in)
        outcome = ("passed" if ok else "FAILED") + f": {line} ({time.monotonic() - started:.0f} s)"
        results.append((minor, labels[minor], outcome))
        named[minor] = named_tests(output)
        failed |= not ok

    say("summary")
    for version, python, outcome in results:
        print(f"  CPython {version:6} {outcome}   [{python}]", flush=True)
        for line in named.get(version, []):
            print(f"      {line}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
