"""Compare two builds of pyrometer on the same workloads: each build installed in
its own environment of the same interpreter (a virtual environment's python),
the bare program run by the first one, the three commands alternated in every
round, and the median over rounds of each build's ratio to the bare run of its
round.  For telling whether a change moved the overhead, which two runs of
bench/run.py on this noisy machine cannot (their medians move by 2-3% between
runs of the same build).

    python3 bench/builds.py --before OLD/bin/python --after NEW/bin/python \\
        --only alloc_churn,json_roundtrip --rounds 7 [--cpu-only] [--scale 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402

WORKLOADS = bench.WORKLOADS_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="python of the environment with the first build")
    parser.add_argument("--after", required=True, help="python of the environment with the second build")
    parser.add_argument("--only", required=True, help="comma-separated workload names (bench/workloads)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--scale", default="1", help="BENCH_SCALE (default 1)")
    parser.add_argument("--cpu-only", action="store_true", help="compare CPU-only profiling (default: full)")
    args = parser.parse_args(argv)
    names = [w for w in args.only.split(",") if w]
    for w in names:
        if not (WORKLOADS / f"{w}.py").exists():
            parser.error(f"no workload {w!r} in {WORKLOADS}")
    for python in (args.before, args.after):
        if not os.access(python, os.X_OK):
            parser.error(f"{python} is not an executable python")
    env = bench.workload_env(args.scale, blas_threads=1)
    mode = ["--cpu-only"] if args.cpu_only else []
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "profile.json")
        for r in range(args.rounds):
            for w in names:
                path = str(WORKLOADS / f"{w}.py")
                for label, cmd in (("bare", [args.before, path]),
                                   ("before", [args.before, "-m", "pyrometer", "--quiet", *mode, "--json",
                                               "--outfile", out, path]),
                                   ("after", [args.after, "-m", "pyrometer", "--quiet", *mode, "--json",
                                              "--outfile", out, path])):
                    start = time.perf_counter()
                    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                          env=env)
                    elapsed = time.perf_counter() - start
                    if proc.returncode != 0:
                        print(f"{label} {w} failed ({proc.returncode}):\n{proc.stderr}", file=sys.stderr)
                        return 1
                    times.setdefault((w, label), []).append(elapsed)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"| workload | bare (s) | before | after |  ({'CPU-only' if args.cpu_only else 'full'}, "
          f"{args.rounds} rounds, BENCH_SCALE={args.scale})")
    print("| --- | --- | --- | --- |")
    for w in names:
        bare = times[(w, "bare")]
        cells = []
        for label in ("before", "after"):
            ratios = [t / b for t, b in zip(times[(w, label)], bare)]
            cells.append(f"{statistics.median(ratios):.3f}x ({min(ratios):.2f} to {max(ratios):.2f})")
        print(f"| {w} | {statistics.median(bare):.2f} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
