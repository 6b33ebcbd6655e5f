#!/usr/bin/env python3
"""What `pytest --pyrometer` costs a test suite: bare, CPU-only
(--pyrometer-no-memory) and full (--pyrometer), alternated within each round,
per interpreter given (to compare two builds of pyrometer in one run).

    python3 bench/pytest_plugin.py [--rounds N] [--suite DIR] [--python LABEL=PATH ...]

--suite: a directory whose `tests` pytest runs (more-itertools' sdist, for
example: `pip download --no-binary :all: more-itertools==10.5.0`, installed
into each interpreter given); without it, a generated suite of 2,000 tests of
a few microseconds each, where the plugin's own cost per test is all there is.
For each interpreter and mode, in wall time and in CPU time (user + system of
the pytest process, less noisy on a shared machine): the median, the median of
the per-round ratios to the same interpreter's bare run, and the cost per test
((mode - bare) / tests, median over rounds), with their ranges.  The rounds'
order of runs is shuffled, so that a slow spell of the machine falls on every
mode alike.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GENERATED = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_small(i):
    assert sum(range(i % 50)) >= 0
"""
MODES = {"bare": [], "cpu-only": ["--pyrometer", "--pyrometer-no-memory"], "full": ["--pyrometer"]}


def run_once(python: str, cwd: Path, target: str, mode: str) -> tuple[float, float, int]:
    """Wall seconds of one pytest run, its CPU seconds (user + system, of the
    process and its children) and the number of tests it ran."""
    cmd = [python, "-m", "pytest", target, "-q", "-p", "no:cacheprovider", *MODES[mode]]
    if mode != "bare":
        out = cwd / f".pyrometer-bench-{os.getpid()}"
        cmd += ["--pyrometer-json", f"{out}.json", "--pyrometer-summary", f"{out}.txt"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    counts = re.findall(r"(\d+) (passed|failed|skipped|xfailed|xpassed)", proc.stdout.splitlines()[-1])
    return wall, cpu, sum(int(n) for n, _ in counts)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--suite", type=Path, help="a directory with a tests/ folder (default: a generated suite)")
    ap.add_argument("--tests", type=int, default=2000, help="the generated suite's size")
    ap.add_argument("--python", action="append", default=[],
                    help="LABEL=PATH of an interpreter with pyrometer and pytest (default: this one)")
    args = ap.parse_args(argv)
    pythons = dict(p.split("=", 1) for p in args.python) or {"this": sys.executable}
    with tempfile.TemporaryDirectory() as tmp:
        if args.suite is not None:
            cwd, target = args.suite.resolve(), "tests"
        else:
            cwd, target = Path(tmp), "test_generated.py"
            (cwd / target).write_text(GENERATED.format(n=args.tests))
        walls: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        tests = 0
        for r in range(args.rounds):
            order = [(label, mode) for label in pythons for mode in MODES]
            random.shuffle(order)
            for label, mode in order:
                wall, cpu, tests = run_once(pythons[label], cwd, target, mode)
                walls.setdefault((label, mode), []).append(wall)
                cpus.setdefault((label, mode), []).append(cpu)
            print(f"round {r + 1}: " + ", ".join(f"{label} {mode} {walls[label, mode][-1]:.2f}s"
                                                for label, mode in sorted(walls)), file=sys.stderr)
    suite = str(args.suite) if args.suite else f"generated ({args.tests} tests)"
    print(f"pytest --pyrometer on {suite}: {tests} tests, {args.rounds} rounds, alternated\n")
    for what, times in (("wall", walls), ("CPU", cpus)):
        print(f"\n| interpreter | mode | {what} (median) | ratio to bare (median, range) "
              f"| per test, ms (median, range) |")
        print("| --- | --- | --- | --- | --- |")
        for label in pythons:
            bare = times[label, "bare"]
            for mode in MODES:
                w = times[label, mode]
                ratios = [x / b for x, b in zip(w, bare)]
                per_test = [(x - b) / tests * 1e3 for x, b in zip(w, bare)] if tests else [0.0]
                ratio = "" if mode == "bare" else (f"{statistics.median(ratios):.2f}x "
                                                    f"({min(ratios):.2f}-{max(ratios):.2f})")
                cost = "" if mode == "bare" else (f"{statistics.median(per_test):.2f} "
                                                   f"({min(per_test):.2f}-{max(per_test):.2f})")
                print(f"| {label} | {mode} | {statistics.median(w):.2f} s | {ratio} | {cost} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
