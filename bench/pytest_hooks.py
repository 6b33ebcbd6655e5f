#!/usr/bin/env python3
"""What pytest --pyrometer's hooks cost one test, phase by phase, in one
process: the calls its hooks make around a test's call phase (the profile
made, started, collected, built, summarised, merged), around an empty call,
N times; the mean of each phase in ms.  A build's own cost per test, without
pytest and without the test's code (bench/pytest_plugin.py measures those).

    python bench/pytest_hooks.py [--no-memory] [-n 1000]

Run it with the python of the environment to measure (the memory library is
attached to the process as the plugin attaches it).  Alternate two builds'
runs: this machine's noise moves a run by tens of percent."""
from __future__ import annotations

import argparse
import os
import time

from pyrometer.integrations import pytest_plugin
from pyrometer.integrations.inprocess import InProcessRun, default_options
from pyrometer.run.children import Merger


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-memory", action="store_true", help="as --pyrometer-no-memory")
    ap.add_argument("-n", type=int, default=1000, help="tests (default 1000)")
    args = ap.parse_args()
    options = default_options()
    options.memory = not args.no_memory
    phases = dict.fromkeys(("make", "start", "collect", "build", "summary", "merge"), 0.0)
    merger = None
    for i in range(args.n):
        t0 = time.perf_counter()
        run = InProcessRun(options, f"t{i}", program_directory=os.getcwd())
        t1 = time.perf_counter()
        run.start()
        t2 = time.perf_counter()
        sum(range(200))  # the test
        t3 = time.perf_counter()
        raw = run.collect(keep_thread=True)  # as the plugin does
        t4 = time.perf_counter()
        profile = run.build(raw, listing="data")
        t5 = time.perf_counter()
        pytest_plugin.summary(profile, {}, options.memory)
        t6 = time.perf_counter()
        if merger is None:
            merger = Merger(raw, run.session.start_time)
        else:
            merger.add({"raw": raw, "start_time": run.session.start_time})
        t7 = time.perf_counter()
        for name, spent in zip(phases, (t1 - t0, t2 - t1, t4 - t3, t5 - t4, t6 - t5, t7 - t6)):
            phases[name] += spent
    from pyrometer import _core
    _core.end_kept_thread()
    print(("memory" if options.memory else "CPU only") + ": "
          + ", ".join(f"{name} {spent / args.n * 1e3:.3f}" for name, spent in phases.items())
          + f"; in all {sum(phases.values()) / args.n * 1e3:.3f} ms per test")


if __name__ == "__main__":
    main()
