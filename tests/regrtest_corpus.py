#!/usr/bin/env python3
"""CPython's own regression tests as a corpus: a named set of test.* modules
run bare and profiled (the full profile and --cpu-only), compared test by
test.  A program must not be able to tell that it is profiled (issue 46):
the same tests pass, fail and skip.

    python3 tests/regrtest_corpus.py [--python PY] [--modules a,b] [--modes full,cpu-only]
                                     [-j N] [--json OUT]

Each mode runs `PY -m test -jN --junit-xml FILE MODULES` (profiled: under
`PY -m pyrometer --quiet --json --outfile ... [--cpu-only]`, its workers
profiled as the program's children); outcomes are read from the JUnit file.
A test whose outcome differs from bare is run again alone, bare and
profiled, once: a difference that comes back is a failure (exit 1; 3 where
nothing could run: no test package), one that
does not is listed as flaky; a test of KNOWN is reported with its reason and
not failed (what is still to mend).  Modules that no profiler could pass are listed
in EXCLUDED with the reason, not dropped silently.  Needs CPython's test
package (pyenv's builds ship it; Debian's libpython3.1x-testsuite).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

MODULES = ["test_signal", "test_subprocess", "test_gc", "test_os", "test_threading", "test_sys",
           "test_faulthandler", "test_tempfile", "test_json", "test_re", "test_queue",
           "test_asyncio.test_tasks", "test_concurrent_futures", "test_tracemalloc", "test_warnings",
           "test_atexit"]

# Modules left out, each with why no profiler could pass it.  (None today:
# every module of MODULES passes profiled as bare.)
EXCLUDED: dict[str, str] = {}

# Tests that still differ profiled, each with why: reported on every run, not
# failed, and to be emptied (docs/how-it-works.md, "What a program can see of
# pyrometer").
KNOWN: dict[str, str] = {
    "test.test_subprocess.POSIXProcessTestCase.test_pass_fds_redirected":
        "the child lists every descriptor up to its limit and compares the set exactly: a profiled "
        "child has the sampler's kept files (900 and above)",
}

MODES = {"full": [], "cpu-only": ["--cpu-only"]}

NOTHING_RUN = 3  # the exit status where this CPython has none of the tests

# regrtest's limit for one test file: a hang ends there, its tests are missing
# from the run, and each is run again alone before it counts.  3.13.0's
# ProcessPoolExecutor can deadlock at shutdown when feeding a job fails (a
# race of CPython's own, concurrent/futures/process.py: the feeder thread's
# error handler waits for the shutdown lock, which the manager thread holds
# while it joins the feeder): test_concurrent_futures.test_shutdown hung a
# --cpu-only run here for 12 minutes before this limit.
TEST_TIMEOUT_S = 300


def has_test_package(python: str) -> bool:
    return subprocess.run([python, "-c", "import test.libregrtest"], capture_output=True).returncode == 0


def unrunnable(python: str, modules: list[str]) -> dict[str, str]:
    """The modules this CPython's regrtest cannot run (one it lacks; 3.11.7's
    expects test_concurrent_futures to be the package it became in 3.12),
    each with the last line regrtest said: listed, not dropped silently."""
    out = {}
    for m in modules:
        proc = subprocess.run([python, "-m", "test", "--list-tests", m], capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            out[m] = f"this CPython's regrtest cannot run it ({lines[-1] if lines else proc.returncode})"
    return out


def regrtest(python: str, mode: str | None, modules: list[str], jobs: int, work: Path,
             extra: list[str] | None = None) -> tuple[dict[str, str], float, str]:
    """(test id -> outcome, seconds, the run's last lines)."""
    tag = mode or "bare"
    xml = work / f"{tag}-{time.monotonic_ns()}.xml"
    test = ["-m", "test", f"-j{jobs}", "--timeout", str(TEST_TIMEOUT_S), "--junit-xml", str(xml), *(extra or []),
            *modules]
    if mode is None:
        cmd = [python, *test]
    else:
        cmd = [python, "-m", "pyrometer", "--quiet", "--json", "--outfile", str(work / f"{tag}.json"),
               *MODES[mode], *test]
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=3600,
                          stdin=subprocess.DEVNULL)
    took = time.monotonic() - began
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
    return (read_outcomes(xml) if xml.exists() else {}), took, tail


def read_outcomes(xml: Path) -> dict[str, str]:
    """Each test case's outcome; a name met twice (doctests of one module) gets
    a count after it."""
    seen: collections.Counter = collections.Counter()
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "?")
        seen[name] += 1
        key = name if seen[name] == 1 else f"{name}#{seen[name]}"
        if case.find("failure") is not None:
            out[key] = "failed"
        elif case.find("error") is not None:
            out[key] = "error"
        elif case.find("skipped") is not None or case.get("status") == "skipped":
            out[key] = "skipped"
        else:
            out[key] = "passed"
    return out


def module_of(test_id: str, modules: list[str]) -> str | None:
    for m in sorted(modules, key=len, reverse=True):
        if test_id.startswith(f"test.{m}.") or test_id == f"test.{m}":
            return m
    return None


def counts(outcomes: dict[str, str], modules: list[str]) -> dict[str, dict[str, int]]:
    by: dict[str, collections.Counter] = {m: collections.Counter() for m in modules}
    for test_id, outcome in outcomes.items():
        m = module_of(test_id, modules)
        if m is not None:
            by[m][outcome] += 1
    return {m: dict(c) for m, c in by.items()}


def again(python: str, mode: str, test_id: str, modules: list[str], work: Path) -> tuple[str | None, str | None]:
    """The test alone, bare and profiled: (bare's outcome, the mode's)."""
    module = module_of(test_id, modules)
    if module is None or "#" in test_id:
        return None, None
    pattern = "*" + test_id[len("test.") + len(module):]  # "*.Class.test_x": matched against the test's id
    got = []
    for m in (None, mode):
        outcomes, _, _ = regrtest(python, m, [module], 1, work, extra=["-m", pattern])
        got.append(outcomes.get(test_id))
    return got[0], got[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--modules", default=",".join(MODULES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", help="write the counts and differences here")
    args = ap.parse_args(argv)
    modules = [m for m in args.modules.split(",") if m and m not in EXCLUDED]
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}: one of {', '.join(MODES)}")
    if not has_test_package(args.python):
        print(f"regrtest_corpus: {args.python} has no test package (CPython's Lib/test): nothing run",
              file=sys.stderr)
        return NOTHING_RUN
    left_out = {**{m: w for m, w in EXCLUDED.items() if m in args.modules.split(",")},
                **unrunnable(args.python, modules)}
    modules = [m for m in modules if m not in left_out]
    for name, why in left_out.items():
        print(f"[corpus] {name}: left out: {why}")
    if not modules:
        print(f"regrtest_corpus: {args.python} can run none of the modules (its test package holds "
              "only libregrtest? Debian's libpython3.1x-testsuite has the tests): nothing run", file=sys.stderr)
        return NOTHING_RUN
    report: dict = {"python": args.python, "modules": modules, "left_out": left_out, "modes": {}}
    failed = False
    with tempfile.TemporaryDirectory(prefix="pyrometer-corpus-") as tmp:
        work = Path(tmp)
        bare, took, tail = regrtest(args.python, None, modules, args.jobs, work)
        if not bare:
            print(f"[corpus] the bare run wrote no results:\n{tail}", file=sys.stderr)
            return 1
        report["bare"] = {"seconds": round(took, 1), "counts": counts(bare, modules)}
        print(f"[corpus] bare: {len(bare)} tests in {took:.0f} s")
        for mode in modes:
            got, took, tail = regrtest(args.python, mode, modules, args.jobs, work)
            differ = sorted(t for t in set(bare) | set(got) if bare.get(t) != got.get(t))
            real, flaky = [], []
            known = [{"test": t, "bare": bare.get(t), mode: got.get(t), "why": KNOWN[t]}
                     for t in differ if t in KNOWN]
            differ = [t for t in differ if t not in KNOWN]
            for test_id in differ:
                b, p = again(args.python, mode, test_id, modules, work)
                row = {"test": test_id, "bare": bare.get(test_id), mode: got.get(test_id),
                       "again_bare": b, "again_" + mode: p}
                (flaky if b is not None and b == p else real).append(row)
            report["modes"][mode] = {"seconds": round(took, 1), "counts": counts(got, modules),
                                     "differences": real, "flaky": flaky, "known": known}
            print(f"[corpus] {mode}: {len(got)} tests in {took:.0f} s; {len(real)} differ from bare, "
                  f"{len(flaky)} differed once (flaky), {len(known)} known")
            for row in known:
                print(f"[corpus]   known: {row}")
            for row in real:
                print(f"[corpus]   {row}")
            for row in flaky:
                print(f"[corpus]   flaky: {row}")
            if real or not got:
                failed = True
                if not got:
                    print(f"[corpus] {mode} wrote no results:\n{tail}", file=sys.stderr)
    for m in modules:
        line = " ".join(f"{mode} {report['modes'][mode]['counts'].get(m)}" for mode in report["modes"])
        print(f"[corpus] {m}: bare {report['bare']['counts'].get(m)} {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
