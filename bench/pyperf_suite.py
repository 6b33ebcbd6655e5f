"""pyperformance's benchmark programs as workloads of bench/run.py
(`python3 bench/run.py --suite pyperformance`): programs nobody here wrote,
the ones CPython itself is tuned with.

Each benchmark's `run_benchmark.py` runs unchanged, from pyperformance's
source distribution (PYPERFORMANCE below, from PyPI), in one process the way
pyperf's worker does it: `--worker --loops N --values 1 --warmups 0 -p 1`,
with `--pipe` to the null device so that its standard output (a timing that
changes from run to run) is empty and the bare run's output can be compared
with every tool's.  pyperf itself, the only dependency of these benchmarks,
is installed (`pip install --target`) into the cache directory, which every
interpreter of the study (the running one and bench/.venv's, made from it)
puts first on its path: the same code under every tool.

In a copy of each benchmark's directory goes a small program, bm_NAME.py (its
stem names the table row; NAME.py would hide the standard library's logging
module from the benchmark), that sets those arguments and runs
`run_benchmark.py` as `__main__`.  N is measured here once per machine: the
loops that make the bare run about TARGET_SECONDS long, so that start-up
weighs as little as in the study's own workloads; bench/run.py's
BENCH_SCALE multiplies it.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

PYPERFORMANCE = "1.14.0"
# name: (directory under data-files/benchmarks, arguments after pyperf's).
# Chosen to cover what issue 32 asks: pure Python (hexiom, deltablue,
# nqueens, richards, go, raytrace, pyflate), regex (regex_v8), serialising
# (json_dumps, pickle_pure_python, xml_etree), the standard library's
# heavier modules (deepcopy, logging), sqlite (sqlite_synth), asyncio
# (async_tree, coroutines), the collector (gc_collect), decimal and
# generators.  A benchmark of several tasks runs its first (--worker-task
# 0: deepcopy's deepcopy, not deepcopy_reduce and deepcopy_memo), or the one
# its arguments name.
BENCHMARKS = {
    "async_tree": ("bm_async_tree", ["none"]),
    "coroutines": ("bm_coroutines", []),
    "decimal_factorial": ("bm_decimal_factorial", []),
    "deepcopy": ("bm_deepcopy", []),
    "deltablue": ("bm_deltablue", []),
    "gc_collect": ("bm_gc_collect", []),
    "generators": ("bm_generators", []),
    "go": ("bm_go", []),
    "hexiom": ("bm_hexiom", []),
    "json_dumps": ("bm_json_dumps", []),
    "logging": ("bm_logging", ["simple"]),
    "nqueens": ("bm_nqueens", []),
    "pickle_pure_python": ("bm_pickle", ["--pure-python", "pickle"]),
    "pyflate": ("bm_pyflate", []),
    "raytrace": ("bm_raytrace", []),
    "regex_v8": ("bm_regex_v8", []),
    "richards": ("bm_richards", []),
    "sqlite_synth": ("bm_sqlite_synth", []),
    "xml_etree": ("bm_xml_etree", ["process"]),
}
TARGET_SECONDS = 2.5

WRAPPER = '''\
"""pyperformance {version}'s {name} benchmark ({directory}/run_benchmark.py,
unchanged), run by pyperf in this one process: its first task, {loops}
loops (times BENCH_SCALE), one value, no warm-up, the result to the null
device.
Written by bench/pyperf_suite.py."""
import os
import runpy
import sys

sys.path.insert(0, {lib!r})
here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "run_benchmark.py")
loops = max(1, round({loops} * float(os.environ.get("BENCH_SCALE", "1"))))
null = os.open(os.devnull, os.O_WRONLY)
sys.argv = [script, "--worker", "--worker-task", "0", "--pipe", str(null),
            "--loops", str(loops), "--values", "1", "--warmups", "0", "-p", "1",
            *{extra!r}]
runpy.run_path(script, run_name="__main__")
'''


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def _fetch(cache: Path) -> Path:
    """pyperformance's benchmarks directory and pyperf, in cache (once)."""
    source = cache / f"pyperformance-{PYPERFORMANCE}"
    benchmarks = source / "pyperformance" / "data-files" / "benchmarks"
    lib = cache / "lib"
    if not benchmarks.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        _log(f"downloading pyperformance {PYPERFORMANCE} (source) into {cache}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", "--dest", str(cache),
                        f"pyperformance=={PYPERFORMANCE}"], check=True)
        with tarfile.open(cache / f"pyperformance-{PYPERFORMANCE}.tar.gz") as tar:
            tar.extractall(cache, filter="data")
    if not (lib / "pyperf").is_dir():
        _log(f"installing pyperf into {lib}")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target",
                        str(lib), "pyperf"], check=True)
    return benchmarks


def _seconds(program: Path, loops: int) -> float:
    """One bare run's wall time with LOOPS forced to loops."""
    start = time.perf_counter()
    subprocess.run([sys.executable, str(program)], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, BENCH_SCALE=str(loops)))
    return time.perf_counter() - start


def _calibrate(program: Path) -> int:
    """Loops for about TARGET_SECONDS bare: one loop, then ten times more until the
    difference is half a second, the line through both points solved for the target."""
    _seconds(program, 1)  # warms the page cache and the .pyc files
    one = _seconds(program, 1)
    n = 10
    while True:
        t = _seconds(program, n)
        if t - one >= 0.5 or n >= 10 ** 6:
            break
        n *= 10
    per_loop = max((t - one) / (n - 1), 1e-9)
    return max(1, math.ceil((TARGET_SECONDS - (one - per_loop)) / per_loop))


def prepare(cache: Path, only: list[str] | None = None) -> list[Path]:
    """The wrapper programs, one per benchmark (calibrated on first use, the loops
    kept in cache/loops.json for the next run on this machine)."""
    benchmarks = _fetch(cache)
    workloads_dir = cache / "workloads"
    loops_file = cache / "loops.json"
    known = json.loads(loops_file.read_text()) if loops_file.exists() else {}
    out = []
    for name, (directory, extra) in sorted(BENCHMARKS.items()):
        if only and name not in only:
            continue
        here = workloads_dir / name
        if not here.is_dir():
            shutil.copytree(benchmarks / directory, here)
        program = here / f"bm_{name}.py"  # not {name}.py: logging.py would hide the module
        if name not in known:
            program.write_text(WRAPPER.format(version=PYPERFORMANCE, name=name, directory=directory,
                                              loops=1, lib=str(cache / "lib"), extra=extra))
            try:
                known[name] = _calibrate(program)
            except subprocess.CalledProcessError as e:
                raise SystemExit(f"bench: {name} failed bare (exit status {e.returncode}) "
                                 f"while its loops were measured: {program}")
            _log(f"calibrated {name}: {known[name]} loops for about {TARGET_SECONDS:g} s bare")
            loops_file.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
        program.write_text(WRAPPER.format(version=PYPERFORMANCE, name=name, directory=directory,
                                          loops=known[name], lib=str(cache / "lib"), extra=extra))
        out.append(program)
    return out
