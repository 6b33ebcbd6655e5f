"""Overhead benchmark: run every workload in bench/workloads bare, under
pyrometer, and under its peers, alternating, for several rounds, and report
each tool's slowdown relative to the bare run.

    python3 bench/run.py [--rounds N] [--quick] [--only NAME,...]
                         [--tools bare,pyrometer,scalene,...]
                         [--suite own|pyperformance]

Two tables come out of one run. CPU profiling: pyrometer --cpu-only,
scalene --cpu-only, py-spy, Austin, pyinstrument, cProfile and line_profiler
(kernprof -l on a copy of the workload with @profile on the functions its HOT
list names). Full profiling (CPU, memory and, for pyrometer, copy volume):
pyrometer with memory on (its default), scalene with memory on (its
default), memray and memory_profiler (on MPROF_WORKLOADS only, first round
only, killed after MPROF_TIMEOUT s). Both tables use the same bare runs.
bench/study.py runs this together with the accuracy and scale studies and
rewrites the whole of docs/benchmarks.md; this script alone rewrites only
the two tables there (between their markers).

This is a benchmark, not a test: it never fails on a slow result. It fails
(exit 1) only if a bare workload fails. A profiler that crashes, exits with
another status, times out, or changes the program's standard output is
recorded in the table and the notes under it.

pyrometer and cProfile run from the python3 that runs this script (it must
have pyrometer installed: `python3 -m pip install .` in the repository; an
editable install re-checks its build at every import, which the timings would
include, so the tool's version says so and a warning is printed).
The other peers are installed from PyPI into a private virtual environment,
bench/.venv, made on first use, with the same numpy version as the running
interpreter so that the workloads execute the same code under every tool.

Method: for each round, the workloads are taken in a shuffled order and, for
each workload, every tool runs it once, in a shuffled order. Each command's
whole wall time (start-up, profiling, writing the profile) is measured with
time.perf_counter around subprocess.run. A tool's slowdown for a workload in
a round is its time divided by the bare time of the same workload in the same
round (paired, so slow drifts in machine speed cancel). The table gives the
median over rounds, with the min and max, and the median over workloads of
those medians; the same for CPU time (the command's and its children's user
and system time, from getrusage), and, for pyrometer, how much one round's
ratio varies and so how many rounds resolve 1.02x from 1.05x.

--suite pyperformance runs pyperformance's own benchmark programs instead
(bench/pyperf_suite.py), into tables of their own; line_profiler and
memory_profiler need a workload's HOT list and are left out there.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
WORKLOADS_DIR = BENCH_DIR / "workloads"
VENV = BENCH_DIR / ".venv"
DOC = REPO / "docs" / "benchmarks.md"

# The two tables: which tools each compares with the bare run, and the
# markers that delimit it in docs/benchmarks.md.
TABLES = {
    "cpu": ["pyrometer", "scalene", "py-spy", "austin", "pyinstrument",
            "cProfile", "line_profiler"],
    "memory": ["pyrometer-full", "scalene-full", "memray", "memory_profiler"],
}
TITLES = {
    "cpu": "CPU-only profiling",
    "memory": "Full profiling (CPU + memory)",
}


def markers(table: str) -> tuple[str, str]:
    return f"<!-- bench:{table}:start -->", f"<!-- bench:{table}:end -->"


# --suite pyperformance: pyperformance's own programs (bench/pyperf_suite.py),
# their tables under markers of their own ("pyperformance-cpu", ...).  The
# tools that need a user's @profile on the workload's HOT functions
# (line_profiler, memory_profiler) have none to decorate there.
SUITES = ["own", "pyperformance"]
NEEDS_HOT = ["line_profiler", "memory_profiler"]
PYPERF_CACHE = VENV / "pyperformance"
# Its section as last written, which bench/study.py puts in the page it renders.
PYPERF_RESULTS = BENCH_DIR / "results" / "pyperformance.md"


ALL_TOOLS = ["bare"] + TABLES["cpu"] + TABLES["memory"]
# The program in bench/.venv/bin that each peer tool runs, and the PyPI
# package that provides it. cProfile is the standard library's: it runs
# from the same interpreter as the bare run.
VENV_PROGRAM = {"scalene": "scalene", "scalene-full": "scalene",
                "py-spy": "py-spy", "memray": "memray", "austin": "austin",
                "pyinstrument": "pyinstrument", "line_profiler": "kernprof",
                "memory_profiler": "mprof"}
VENV_PACKAGE = {"scalene": "scalene", "py-spy": "py-spy", "memray": "memray",
                # 4.0.0's binary needs glibc 2.38; Debian 12 has 2.36.
                "austin": "austin-dist==3.7.0",
                "pyinstrument": "pyinstrument", "kernprof": "line_profiler",
                "mprof": "memory_profiler"}
# Extra packages for bench/.venv: psutil (memory_profiler's RSS reader) and
# matplotlib (the study's chart).
VENV_EXTRAS = ["psutil", "matplotlib"]
# memory_profiler traces every line of the decorated functions and is tens
# of times slower: it runs on these (short) workloads only, in the first
# round only, killed after MPROF_TIMEOUT seconds (reported as a lower bound).
MPROF_WORKLOADS = ["fannkuch", "json_roundtrip", "numpy_work"]
MPROF_TIMEOUT = 60.0
QUICK_SCALE = 0.1
DEFAULT_ROUNDS = 5
# Shortest bare run a workload gets (it is scaled up to it), outside --quick:
# the issue asks for programs of 2 s or more, and a shorter one weighs the
# profilers' start-up more than a real program does.
MIN_SECONDS = 2.0
# Start-up and exit on their own: an empty program, run by every command of
# the tables (alternated, STARTUP_RUNS per round), reported apart from the
# workloads' ratios in milliseconds more than bare.  A 2 s workload's ratio
# carries this once; a long-running program pays it once.
STARTUP_RUNS = 3
EMPTY_PROGRAM = '''\
"""An empty program: what a profiler costs to start and to end."""
# The function a user would decorate (bench/run.py's decorated copy).
HOT = ["nothing"]


def nothing():
    pass


nothing()
'''

DOC_INTRO = """\
# Benchmarks

`python3 bench/run.py` runs the realistic workloads in `bench/workloads/`
(each about 2 to 3 s bare) with no profiler (*bare*) and under each
profiler, and reports how much longer each whole command takes than the
bare run, in two tables from the same run and the same bare runs:

- **CPU-only profiling**: `pyrometer --cpu-only`, `scalene run --cpu-only`
  and `py-spy record`.
- **Full profiling**: `pyrometer` with its defaults (CPU, memory and copy
  volume), `scalene run` with its defaults (CPU and memory) and
  `memray run` (memory).

Run it with `python3 bench/run.py` (about 25 minutes on 2 cores). Options:
`--rounds N` (default 5), `--only raytrace,nbody`, `--tools
bare,pyrometer,scalene,py-spy,pyrometer-full,scalene-full,memray` (a table
whose tools were all left out keeps its old contents here), and `--quick`
(1 round at `BENCH_SCALE=0.1`, printed but not written here) for
development. The first run makes `bench/.venv` and installs Scalene, py-spy,
memray and numpy into it from PyPI.

| workload | what it exercises |
| --- | --- |
| `raytrace` | pure-Python objects: a ray tracer that makes millions of small vector objects |
| `nbody` | pure-Python float arithmetic in tight loops over lists |
| `richards` | an OS-scheduler simulation: method calls, attributes, linked lists |
| `fannkuch` | permutations by list slicing: integer code on C-implemented list operations |
| `text` | JSON encode/decode and regular expressions over generated logs (C-accelerated library code plus glue) |
| `numpy_work` | numpy linear algebra, FFT and elementwise arrays, plus a step-by-step Kalman filter of tiny numpy calls |
| `sqlite_work` | in-memory SQLite: bulk inserts from generators, joins and aggregates, a Python function called from SQL |
| `threaded` | four threads mixing pure-Python work with GIL-releasing hashlib and zlib |
| `alloc_churn` | allocation churn: an event loop building and dropping millions of small dicts, lists, tuples and strings, while an index, a list and a bytearray log keep growing |
| `numpy_copies` | numpy that copies: arrays from Python lists, `.copy()`, concatenate/stack, `astype`, fancy and boolean indexing, a buffer grown by concatenation |

Each workload prints one line with a checksum of its result, reads
`BENCH_SCALE` (default 1) to scale its work, and has its size constant at
the top, calibrated to about 2.5 s bare on a 2-core development machine.
Outside `--quick`, a workload whose warm-up run takes under 2 s on the
measuring machine runs at a higher `BENCH_SCALE` of its own (printed with
the tables), so that every program runs 2 s or more bare.

How it measures:

- Each command's whole wall time is taken with `time.perf_counter()` around
  `subprocess.run`, so start-up, profiling and writing the profile all count.
- In every round the workloads come in a shuffled order, and for each
  workload every tool (of both tables) runs once, in a shuffled order
  (round-robin), so that drifts in machine speed hit all tools alike.
- A slowdown is the tool's time divided by the bare time *of the same
  workload in the same round*. The table gives, per workload, the median
  over rounds and the range (min to max); the last rows give the median
  over workloads of those medians, and the largest of them.
- numpy's BLAS runs single-threaded (`OPENBLAS_NUM_THREADS=1`; change it
  with `--blas-threads`): on a small shared machine, spinning BLAS threads
  make numpy timings swing by several times, which would drown the overhead.
- pyrometer runs from the same interpreter as the bare run. Scalene, py-spy
  and memray come from PyPI in a private virtual environment (`bench/.venv`)
  made from that same interpreter, with the same numpy version.
- The profiled program's exit status and standard output are compared with
  the bare run; any difference is listed under the table. pyrometer's
  profile must also be valid JSON with the program's exit status 0 and
  `"memory"` false under `--cpu-only` and true otherwise; Scalene's must be
  valid JSON, with `"memory"` true for its full profile.

This is a benchmark, not a timed test: results depend on the machine and on
what else runs on it. Compare tools within one run, never across runs.
On a shared 2-core machine the bare run alone can vary by 20% or more from
round to round (see its range in the table), so a single table cannot
resolve a difference of a few percent: use more rounds on a quiet machine
for that.

## CPU profiling overhead

All three profilers sample CPU at their default rate (100 Hz). The
mission's bar for CPU-only profiling is a median of at most 1.03x.

"""

DOC_MEMORY_INTRO = """\

## Full (CPU + memory) profiling overhead

Each tool as a user runs it for a memory profile, with its defaults:
pyrometer samples CPU at 100 Hz and memory every 1 MiB allocated (net) per
thread, and measures copy volume; Scalene samples CPU at 100 Hz and memory
every 1 MiB allocated (its `--allocation-sampling-window` default); memray
records every allocation made through the system allocator into a binary
file (its default: no `--native` stacks and no `--trace-python-allocators`,
so pymalloc's small objects are not traced one by one).
The mission's bar for the full profile is a median of at most 1.10x, the
worst workload at most 1.5x, and better than Scalene's full profile in the
same run.

"""


DOC_PYPERF_INTRO = """\

## pyperformance: programs nobody here wrote

`python3 bench/run.py --suite pyperformance` runs the same comparison on
benchmark programs of pyperformance (the suite CPython itself is tuned
with), each `run_benchmark.py` unchanged, in one process as pyperf's worker
runs it, with loops for about 2.5 s bare on the measuring machine
(`bench/pyperf_suite.py` says how, and which benchmarks).  The CPU table
comes first, the full-profiling table after it, from the same bare runs.

"""


# ---------------------------------------------------------------- helpers --

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def short(text: str, limit: int = 160) -> str:
    """The last meaningful line of some output, shortened, for the table."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    line = line.replace("|", "/")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.0f} GiB"
    except OSError:
        pass
    return "?"


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


# ------------------------------------------------------------------ tools --

@dataclass
class Tool:
    name: str
    version: str = "?"
    error: str | None = None       # set when the tool cannot run at all
    commands: dict = field(default_factory=dict)


def pyrometer_tool(name: str = "pyrometer") -> Tool:
    tool = Tool(name)
    if importlib.util.find_spec("pyrometer") is None:
        tool.error = (f"pyrometer is not installed in {sys.executable}; "
                      f"install it with `{sys.executable} -m pip install {REPO}`")
        return tool
    try:
        dist = importlib.metadata.distribution("pyrometer")
        tool.version = dist.version
        if '"editable": true' in (dist.read_text("direct_url.json") or ""):
            # An editable install checks (and may redo) the build at every import,
            # which the memory mode, started twice, pays twice.
            tool.version += " (editable install: startup overstated)"
            print(f"bench: warning: pyrometer is an editable install; measure a regular one "
                  f"(`{sys.executable} -m pip install {REPO}`)", file=sys.stderr)
    except importlib.metadata.PackageNotFoundError:
        tool.version = "?"
    return tool


def venv_bin(name: str) -> Path:
    return VENV / "bin" / name


def ensure_venv(need: list[str]) -> str | None:
    """Make bench/.venv with the peer profilers; return an error or None."""
    if not need:
        return None
    programs = sorted({VENV_PROGRAM[t] for t in need})
    missing = [p for p in programs if not venv_bin(p).exists()]
    has_extras = (VENV / "bin" / "python").exists() and subprocess.run(
        [str(venv_bin("python")), "-c", "import psutil, matplotlib"],
        capture_output=True).returncode == 0
    try:
        import numpy
        numpy_req = f"numpy=={numpy.__version__}"
    except ImportError:
        numpy_req = "numpy"
    has_numpy = (VENV / "bin" / "python").exists() and subprocess.run(
        [str(venv_bin("python")), "-c", "import numpy"],
        capture_output=True).returncode == 0
    if not missing and has_numpy and has_extras:
        return None
    try:
        if not venv_bin("python").exists():
            log(f"creating {VENV}")
            subprocess.run([sys.executable, "-m", "venv", str(VENV)],
                           check=True, capture_output=True, text=True)
        reqs = [VENV_PACKAGE[p] for p in missing] + VENV_EXTRAS
        if not has_numpy:
            reqs.append(numpy_req)
        log(f"installing into {VENV}: {' '.join(reqs)}")
        subprocess.run([str(venv_bin("python")), "-m", "pip", "install",
                        "--quiet", *reqs],
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        return f"could not set up {VENV}: {short(e.stderr or e.stdout or '')}"
    return None


def venv_package_version(package: str) -> str:
    out = subprocess.run([str(venv_bin("python")), "-c",
                          "import importlib.metadata as m, sys; "
                          "print(m.version(sys.argv[1]))", package],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def peer_tool(name: str, venv_error: str | None) -> Tool:
    """A tool run from bench/.venv: scalene, scalene-full, py-spy, memray."""
    tool = Tool(name)
    program = VENV_PROGRAM[name]
    if venv_error or not venv_bin(program).exists():
        tool.error = venv_error or f"{program} not installed in bench/.venv"
        return tool
    if program in ("py-spy", "austin"):
        # Binaries (Rust, C); their Python package metadata is there too,
        # but ask the program itself.
        out = subprocess.run([str(venv_bin(program)), "--version"],
                             capture_output=True, text=True)
        tool.version = (out.stdout.strip().splitlines() or ["?"])[0]
        tool.version = tool.version.removeprefix(program).strip() or "?"
    else:
        tool.version = venv_package_version(VENV_PACKAGE[program])
    return tool


def cprofile_tool() -> Tool:
    return Tool("cProfile", f"stdlib (Python {platform.python_version()})")


def decorated_copy(script: Path, outdir: Path) -> Path:
    """A copy of script with @profile on each function its HOT list names.

    HOT holds plain names ("render") and Class.method names ("Scene.trace").
    The decorator line goes above the function's first decorator, with the
    function's indentation. The copy is what kernprof -l and memory_profiler
    run, as a user who decorated the hot functions would.
    """
    import ast
    target = outdir / "decorated" / script.name
    if target.exists():
        return target
    source = script.read_text()
    tree = ast.parse(source)
    hot: list = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "HOT"):
            hot = list(ast.literal_eval(node.value))
    if not hot:
        raise ValueError(f"{script.name} has no HOT = [...] list")
    linenos = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if prefix + node.name in hot:
                    first = min([node.lineno] + [d.lineno for d in
                                                 node.decorator_list])
                    linenos.append((first, node.col_offset))
            elif isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")

    visit(tree.body, "")
    if len(linenos) != len(hot):
        raise ValueError(f"{script.name}: HOT names {hot}, found "
                         f"{len(linenos)} of them")
    lines = source.splitlines(keepends=True)
    for lineno, col in sorted(linenos, reverse=True):
        lines.insert(lineno - 1, " " * col + "@profile\n")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines))
    return target


def command_for(tool: str, script: Path, outdir: Path) -> tuple[list, Path | None]:
    """The command line that runs script under tool, and its profile file."""
    py = sys.executable
    if tool == "bare":
        return [py, str(script)], None
    out = outdir / f"{script.stem}.{tool}"
    if tool == "pyrometer":
        out = out.with_suffix(".json")
        return [py, "-m", "pyrometer", "--cpu-only", "--json", "--quiet",
                "--outfile", str(out), str(script)], out
    if tool == "pyrometer-full":
        # pyrometer's default: CPU, memory and copy volume.
        out = out.with_suffix(".json")
        return [py, "-m", "pyrometer", "--json", "--quiet",
                "--outfile", str(out), str(script)], out
    if tool in ("scalene", "scalene-full"):
        # `scalene run` only saves a JSON profile; it never opens a browser
        # (that is `scalene view`). Without --cpu-only it profiles memory
        # too (its default; its JSON then says "memory": true).
        out = out.with_suffix(".json")
        cpu_only = ["--cpu-only"] if tool == "scalene" else []
        return [str(venv_bin("python")), "-m", "scalene", "run",
                *cpu_only, "-o", str(out), str(script)], out
    if tool == "py-spy":
        # Default (blocking) sampling at 100 Hz, as a user runs it; the
        # program runs on the same interpreter as the bare run.
        out = out.with_suffix(".svg")
        return [str(venv_bin("py-spy")), "record", "-o", str(out), "--",
                py, str(script)], out
    if tool == "austin":
        # Its default sampling interval (100 us), the collapsed stacks
        # written to a file; it starts the program as its child, like py-spy.
        out = out.with_suffix(".austin")
        return [str(venv_bin("austin")), "-o", str(out), py, str(script)], out
    if tool == "pyinstrument":
        # Its default sampling interval (1 ms), JSON output.
        out = out.with_suffix(".json")
        return [str(venv_bin("python")), "-m", "pyinstrument", "-r", "json",
                "-o", str(out), str(script)], out
    if tool == "cProfile":
        out = out.with_suffix(".pstats")
        return [py, "-m", "cProfile", "-o", str(out), str(script)], out
    if tool == "line_profiler":
        out = out.with_suffix(".lprof")
        return [str(venv_bin("kernprof")), "-l", "-o", str(out),
                str(decorated_copy(script, outdir))], out
    if tool == "memory_profiler":
        # It prints its line tables to standard output after the program's.
        return [str(venv_bin("python")), "-m", "memory_profiler",
                str(decorated_copy(script, outdir))], None
    if tool == "memray":
        # memray runs the program in its own interpreter (bench/.venv's, made
        # from the same Python, with the same numpy). --force in case the
        # file is there; run_once also removes it before each run.
        out = out.with_suffix(".bin")
        return [str(venv_bin("memray")), "run", "--force", "-o", str(out),
                str(script)], out
    raise ValueError(tool)


def display_command(tool: str) -> str:
    return {
        "bare": "python3 W.py",
        "pyrometer": "python3 -m pyrometer --cpu-only --json --outfile F W.py",
        "scalene": "scalene run --cpu-only -o F W.py",
        "py-spy": "py-spy record -o F -- python3 W.py",
        "austin": "austin -o F python3 W.py",
        "pyrometer-full": "python3 -m pyrometer --json --outfile F W.py",
        "scalene-full": "scalene run -o F W.py",
        "memray": "memray run --force -o F.bin W.py",
        "pyinstrument": "pyinstrument -r json -o F W.py",
        "cProfile": "python3 -m cProfile -o F W.py",
        "line_profiler": "kernprof -l -o F W_decorated.py (@profile on W.HOT)",
        "memory_profiler": "python -m memory_profiler W_decorated.py "
                           "(@profile on W.HOT)",
    }[tool]


# ---------------------------------------------------------------- running --

@dataclass
class Run:
    seconds: float
    ok: bool
    problem: str | None = None     # why the run does not count
    note: str | None = None        # counts, but worth reporting
    stdout: str = ""
    cpu: float = 0.0               # user + system seconds of the command and
                                   # every process it waited for
    sampler_share: float | None = None  # pyrometer's sampler (and GPU) thread's
                                        # CPU over the process's, from its profile


def children_cpu() -> float:
    import resource
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def workload_env(scale, blas_threads: int) -> dict:
    """The environment the workloads run in (also bench/builds.py's)."""
    env = dict(os.environ)
    env["BENCH_SCALE"] = str(scale)
    if blas_threads:
        # On a small machine shared with other work, BLAS threads that spin
        # while waiting for a core make numpy's timings swing by several
        # times; pin them so that the noise does not swamp the overhead.
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS"):
            env[var] = str(blas_threads)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    return env


def run_once(tool: str, script: Path, env: dict, outdir: Path,
             timeout: float, expected_stdout: str | None) -> Run:
    cmd, profile = command_for(tool, script, outdir)
    if profile is not None and profile.exists():
        profile.unlink()
    cpu_before = children_cpu()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, errors="replace", timeout=timeout,
                              cwd=str(outdir))
    except subprocess.TimeoutExpired:
        return Run(time.perf_counter() - start, False,
                   f"timed out after {timeout:.0f} s")
    except OSError as e:
        return Run(0.0, False, f"could not start: {e}")
    seconds = time.perf_counter() - start
    cpu = children_cpu() - cpu_before
    if proc.returncode != 0:
        why = short(proc.stderr) or short(proc.stdout)
        return Run(seconds, False, f"exit status {proc.returncode}: {why}",
                   stdout=proc.stdout)
    notes = []
    if expected_stdout is not None and not same_output(tool, proc.stdout,
                                                       expected_stdout):
        notes.append("standard output differs from the bare run: "
                     + repr(proc.stdout[:200]))
    sampler_share = None
    if tool in ("pyrometer", "pyrometer-full"):
        found, data = check_pyrometer(proc.stderr, profile,
                                      memory=tool == "pyrometer-full")
        notes.extend(found)
        sampler_share = pyrometer_sampler_share(data)
    elif tool in ("scalene", "scalene-full"):
        notes.extend(check_scalene(profile, memory=tool == "scalene-full"))
    elif profile is not None and (not profile.exists()
                                  or profile.stat().st_size == 0):
        notes.append("wrote no profile")
    return Run(seconds, True, note="; ".join(notes) or None,
               stdout=proc.stdout, cpu=cpu, sampler_share=sampler_share)


def same_output(tool: str, stdout: str, expected: str) -> bool:
    """Whether the program's standard output came through unchanged.

    pyrometer must leave stdout exactly as the program wrote it. py-spy
    writes its own progress lines there ("py-spy> ...") and so does memray
    ("Writing profile results into ..."), so for the peers it is enough
    that the program's output appears whole.
    """
    if tool in ("bare", "pyrometer", "pyrometer-full"):
        return stdout == expected
    return expected in stdout


def check_pyrometer(stderr: str, profile: Path | None,
                    memory: bool) -> tuple[list[str], dict | None]:
    """What in a successful pyrometer run looks wrong, and its profile (None
    when it wrote none that reads as a JSON object)."""
    notes = []
    if stderr.strip():
        notes.append("wrote to stderr: " + repr(stderr.strip()[:200]))
    if profile is None or not profile.exists():
        return notes + ["wrote no profile"], None
    try:
        data = json.loads(profile.read_text())
    except (OSError, ValueError) as e:
        return notes + [f"profile is not valid JSON: {e}"], None
    if not isinstance(data, dict):
        return notes + ["profile is not a JSON object"], None
    if data.get("exit_status", 0) != 0:
        notes.append(f"profile says exit_status {data.get('exit_status')}")
    if data.get("memory") is not memory:
        notes.append(f"profile says \"memory\": "
                     f"{json.dumps(data.get('memory'))}, expected "
                     f"{json.dumps(memory)}")
    return notes, data


def pyrometer_sampler_share(data: dict | None) -> float | None:
    """profiler_cpu_time_sec / process_cpu_time_sec of a pyrometer profile:
    the part of the process's CPU its own sampler thread took (the rest of
    its cost is in the program's threads: start-up, the answers to samples,
    the allocator and copy wrappers)."""
    try:
        return data["profiler_cpu_time_sec"] / data["process_cpu_time_sec"]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def check_scalene(profile: Path | None, memory: bool) -> list[str]:
    """Whether Scalene wrote a JSON profile, with memory on when asked."""
    if profile is None or not profile.exists() or profile.stat().st_size == 0:
        return ["wrote no profile"]
    try:
        data = json.loads(profile.read_text())
    except (OSError, ValueError) as e:
        return [f"profile is not valid JSON: {e}"]
    if memory and not (isinstance(data, dict) and data.get("memory")):
        return ["profile does not say \"memory\": true"]
    return []


def calibrated_scale(scale: float, seconds: float, min_seconds: float) -> float:
    """The BENCH_SCALE that makes a workload that took `seconds` at `scale` run
    about min_seconds or more (10% above it, rounded up to a tenth), on a
    machine faster than the one the workloads were sized on; `scale` itself
    when it is long enough already."""
    if min_seconds <= 0 or seconds >= min_seconds or seconds <= 0:
        return scale
    return math.ceil(scale * min_seconds * 1.1 / seconds * 10) / 10


def run_benchmark(workloads: list[Path], tools: list[str], rounds: int,
                  scale: float, timeout: float, seed: int | None,
                  blas_threads: int, min_seconds: float = 0.0):
    """Returns times, ratios, problems, notes, capped ratios, the
    BENCH_SCALE each workload ran at (its own when calibrated up to
    min_seconds bare), the start-up costs, the CPU-time ratios (the
    command's CPU time, its children's included, over bare's in the same
    round) and pyrometer's sampler-thread shares of its process's CPU."""
    env = workload_env(scale, blas_threads)
    rng = random.Random(seed)
    times: dict = {(w.stem, t): [] for w in workloads for t in tools}
    problems: dict = {}   # (workload, tool) -> list of messages
    notes: dict = {}
    ratios: dict = {(w.stem, t): [] for w in workloads for t in tools}
    cpu_ratios: dict = {(w.stem, t): [] for w in workloads for t in tools}
    sampler_shares: dict = {}  # (workload, pyrometer command) -> shares
    capped: dict = {}     # (workload, tool) -> seconds of killed runs
    capped_ratio: dict = {}  # (workload, tool) -> lower bounds on slowdown
    expected: dict = {}
    envs = {w.stem: env for w in workloads}
    scales = {w.stem: scale for w in workloads}

    with tempfile.TemporaryDirectory(prefix="pyrometer-bench-") as tmp:
        outdir = Path(tmp)
        # One untimed bare run per workload: warms the page cache and gives
        # the reference output that the profiled runs must reproduce.  A
        # workload shorter than min_seconds here (a faster machine than the
        # one it was sized on) is scaled up and warmed up again, so that
        # start-up does not weigh more in its ratios than in a real program.
        for w in workloads:
            log(f"warm-up: {w.stem}")
            r = run_once("bare", w, env, outdir, timeout, None)
            if not r.ok:
                raise SystemExit(f"bare run of {w.name} failed: {r.problem}")
            own = calibrated_scale(scale, r.seconds, min_seconds)
            if own != scale:
                scales[w.stem] = own
                envs[w.stem] = dict(env, BENCH_SCALE=str(own))
                log(f"warm-up: {w.stem} took {r.seconds:.2f} s: again at "
                    f"BENCH_SCALE={own:g}")
                r = run_once("bare", w, envs[w.stem], outdir, timeout, None)
                if not r.ok:
                    raise SystemExit(f"bare run of {w.name} failed: "
                                     f"{r.problem}")
            expected[w.stem] = r.stdout
        for rnd in range(1, rounds + 1):
            order = workloads[:]
            rng.shuffle(order)
            for w in order:
                tool_order = tools[:]
                rng.shuffle(tool_order)
                bare_time = bare_cpu = None
                this_round = {}
                this_cpu = {}
                for t in tool_order:
                    limit = timeout
                    if t == "memory_profiler":
                        if rnd > 1 or w.stem not in MPROF_WORKLOADS:
                            continue
                        limit = min(timeout, MPROF_TIMEOUT)
                    r = run_once(t, w, envs[w.stem], outdir, limit,
                                 expected[w.stem])
                    status = f"{r.seconds:6.2f} s" if r.ok else "FAILED"
                    log(f"round {rnd}/{rounds}  {w.stem:12} {t:14} {status}"
                        + (f"  ({r.problem})" if r.problem else "")
                        + (f"  [{r.note}]" if r.note else ""))
                    if r.problem:
                        if r.problem.startswith("timed out"):
                            capped.setdefault((w.stem, t), []).append(
                                r.seconds)
                        problems.setdefault((w.stem, t), []).append(r.problem)
                        continue
                    if r.note:
                        notes.setdefault((w.stem, t), []).append(r.note)
                    times[(w.stem, t)].append(r.seconds)
                    this_round[t] = r.seconds
                    this_cpu[t] = r.cpu
                    if r.sampler_share is not None:
                        sampler_shares.setdefault((w.stem, t), []).append(
                            r.sampler_share)
                    if t == "bare":
                        bare_time, bare_cpu = r.seconds, r.cpu
                if bare_time is None:
                    raise SystemExit(f"bare run of {w.name} failed: "
                                     f"{problems[(w.stem, 'bare')][-1]}")
                for t, s in this_round.items():
                    ratios[(w.stem, t)].append(s / bare_time)
                    if bare_cpu:
                        cpu_ratios[(w.stem, t)].append(this_cpu[t] / bare_cpu)
                for key, secs in capped.items():
                    if key[0] == w.stem and len(secs) > len(
                            capped_ratio.get(key, [])):
                        capped_ratio.setdefault(key, []).append(
                            secs[-1] / bare_time)
        startup = measure_startup(tools, rounds, env, outdir, timeout, rng)
    return (times, ratios, problems, notes, capped_ratio, scales, startup,
            cpu_ratios, sampler_shares)


def measure_startup(tools: list[str], rounds: int, env: dict, outdir: Path,
                    timeout: float, rng: random.Random) -> dict:
    """Each command's start-up and exit: tool -> the seconds its runs of an
    empty program took more than the bare run just before them (same order
    shuffled every time, STARTUP_RUNS per round); failed runs are left out."""
    empty = outdir / "empty_program.py"
    empty.write_text(EMPTY_PROGRAM)
    extra: dict = {t: [] for t in tools if t != "bare"}
    for rnd in range(rounds * STARTUP_RUNS):
        order = tools[:]
        rng.shuffle(order)
        seconds = {}
        for t in order:
            r = run_once(t, empty, env, outdir, timeout, None)
            if r.ok:
                seconds[t] = r.seconds
        log(f"start-up {rnd + 1}/{rounds * STARTUP_RUNS}  "
            + "  ".join(f"{t} {s * 1000:.0f} ms" for t, s in seconds.items()))
        if "bare" in seconds:
            for t, s in seconds.items():
                if t != "bare":
                    extra[t].append(s - seconds["bare"])
    extra["bare"] = []
    return extra


# ---------------------------------------------------------------- report --

def rounds_to_tell(sd: float, apart: float = 0.03) -> int:
    """Rounds of paired runs for a mean ratio to tell two overheads `apart`
    (1.02x from 1.05x) at 5% significance with 80% power, when one round's
    ratio has standard deviation sd: n = ((1.96 + 0.84) sd / apart)^2."""
    return max(1, math.ceil(((1.96 + 0.84) * sd / apart) ** 2))


def spread_remarks(peers, names, ratios, cpu_ratios,
                   sampler_shares=None) -> list[str]:
    """How noisy one round's ratio was, per pyrometer command, and what it
    takes to resolve 1.02x from 1.05x with it, by wall and by CPU time; and
    the part of its CPU that its own sampler thread took."""
    out = []
    for t in peers:
        if not t.startswith("pyrometer"):
            continue
        shares = [statistics.median(sampler_shares[(n, t)]) for n in names
                  if (sampler_shares or {}).get((n, t))]
        if shares:
            out.append(f"- `{t}`'s sampler thread took {100 * statistics.median(shares):.2f}% "
                       f"of its process's CPU (median over workloads; the most "
                       f"{100 * max(shares):.2f}%): the rest of its cost beyond "
                       "start-up is in the program's own threads.")
        parts = []
        for label, source in (("wall", ratios), ("CPU", cpu_ratios or {})):
            sds = [statistics.stdev(source[(n, t)]) for n in names
                   if len(source.get((n, t), [])) >= 2]
            if sds:
                sd = statistics.median(sds)
                parts.append(f"by {label} time one round's ratio has a standard "
                             f"deviation of {sd:.3f} (median over workloads): "
                             f"{rounds_to_tell(sd)} rounds per workload tell 1.02x "
                             f"from 1.05x")
        if parts:
            out.append(f"- Spread of `{t}`: " + "; ".join(parts) + ".")
    return out


def build_report(table, workloads, tools, tool_info, times, ratios, problems,
                 notes, rounds, scale, blas_threads, load_before, load_after,
                 elapsed, capped=None, scales=None, startup=None,
                 cpu_ratios=None, suite="own", sampler_shares=None) -> str:
    """The section of docs/benchmarks.md for one table ("cpu" or "memory"),
    of the study's own workloads or (suite "pyperformance") of pyperformance's."""
    names = [w.stem for w in workloads]
    peers = [t for t in TABLES[table] if t in tools]
    both = all(any(t in tools for t in TABLES[x]) for x in TABLES)
    tools = ["bare"] + peers
    out = []
    now = datetime.datetime.now(datetime.timezone.utc)
    title = TITLES[table] + (", pyperformance" if suite == "pyperformance" else "")
    out.append(f"{title}. Run on {now:%Y-%m-%d %H:%M} UTC, "
               f"{rounds} round(s), "
               f"BENCH_SCALE={scale:g}, BLAS threads "
               f"{blas_threads or 'unset'}, {elapsed / 60:.1f} min in all"
               + (" (both tables)." if both else "."))
    raised = {w: v for w, v in (scales or {}).items() if w in names and v != scale}
    if raised:
        out.append("")
        out.append(f"Workloads under {MIN_SECONDS:g} s bare on this machine at "
                   f"BENCH_SCALE={scale:g} ran scaled up: "
                   + ", ".join(f"{w} {v:g}" for w, v in sorted(raised.items()))
                   + ".")
    out.append("")
    out.append(f"- Machine: {cpu_model()}, {usable_cpus()} usable CPUs "
               f"(nproc), {memory_gib()} memory, {platform.system()} "
               f"{platform.release()} {platform.machine()}; load average "
               f"{load_before:.2f} before, {load_after:.2f} after.")
    out.append(f"- Python {platform.python_version()} "
               f"({platform.python_implementation()}, {sys.executable})"
               + (f", numpy {numpy_version()}" if numpy_version() else "")
               + ".")
    versions = ", ".join(f"{t} {tool_info[t].version}" for t in peers
                         if not tool_info[t].error)
    if versions:
        out.append(f"- Tools: {versions}.")
    for t in tools:
        out.append(f"- `{t}`: `{display_command(t)}`")
    out.append("")
    out.append("Bare: median wall time in seconds over rounds (min to max), "
               "which shows how noisy the machine was. Tools: slowdown vs bare "
               "in the same round, median over rounds (min to max); below "
               "them, the median and worst over workloads, by wall time and by "
               "CPU time (user + system of the command and every process it "
               "waited for: a profiler's own threads and processes count, a "
               "stall waiting for the CPU does not). The last "
               "row: how much longer than bare each command takes on an empty "
               f"program ({STARTUP_RUNS} runs a round), in milliseconds: "
               "the part of each ratio that a longer program would not pay "
               "again.")
    out.append("")
    header = "| workload | bare (s) | " + " | ".join(peers) + " |"
    out.append(header)
    out.append("|" + " --- |" * (2 + len(peers)))
    medians: dict = {t: [] for t in peers}
    capped_tools: set = set()
    for name in names:
        bare = times.get((name, "bare"), [])
        row = [name, f"{statistics.median(bare):.2f} ({min(bare):.2f} to "
                     f"{max(bare):.2f})" if bare else "-"]
        for t in peers:
            info = tool_info[t]
            rs = ratios.get((name, t), [])
            lower = (capped or {}).get((name, t), [])
            if info.error or (t == "memory_profiler"
                              and name not in MPROF_WORKLOADS):
                row.append("not run")
            elif lower and not rs:
                m = min(lower)
                medians[t].append(m)
                capped_tools.add(t)
                row.append(f"> {fmt_ratio(m)} (killed at "
                           f"{MPROF_TIMEOUT:.0f} s)")
            elif rs:
                m = statistics.median(rs)
                medians[t].append(m)
                cell = f"{fmt_ratio(m)} ({min(rs):.2f} to {max(rs):.2f})"
                failed = len(problems.get((name, t), []))
                if failed:
                    cell += f", {failed} failed"
                row.append(cell)
            else:
                row.append("failed")
        out.append("| " + " | ".join(row) + " |")
    overall = ["**median**", ""]
    for t in peers:
        overall.append(f"**{'>= ' if t in capped_tools else ''}"
                       f"{fmt_ratio(statistics.median(medians[t]))}**"
                       if medians[t] else "-")
    out.append("| " + " | ".join(overall) + " |")
    worst = ["worst", ""]
    for t in peers:
        worst.append((">= " if t in capped_tools else "")
                     + fmt_ratio(max(medians[t])) if medians[t] else "-")
    out.append("| " + " | ".join(worst) + " |")
    if cpu_ratios:
        cpu_medians = {t: [statistics.median(cpu_ratios[(n, t)]) for n in names
                           if cpu_ratios.get((n, t))] for t in peers}
        for label, pick in (("CPU time: median", statistics.median), ("CPU time: worst", max)):
            row = [label, ""]
            for t in peers:
                row.append(fmt_ratio(pick(cpu_medians[t])) if cpu_medians[t] else "-")
            out.append("| " + " | ".join(row) + " |")
    if startup:
        row = ["start-up and exit (an empty program; not in the median)", ""]
        for t in peers:
            extra = startup.get(t, [])
            row.append(f"+{statistics.median(extra) * 1000:.0f} ms "
                       f"({min(extra) * 1000:+.0f} to "
                       f"{max(extra) * 1000:+.0f})" if extra else "-")
        out.append("| " + " | ".join(row) + " |")

    remarks = spread_remarks(peers, names, ratios, cpu_ratios, sampler_shares)
    for t in peers:
        if tool_info[t].error:
            remarks.append(f"- {t} was not run: {tool_info[t].error}")
    for (name, t), msgs in sorted(problems.items()):
        if t not in tools:
            continue
        uniq = sorted(set(msgs))
        n_runs = 1 if t == "memory_profiler" else rounds
        remarks.append(f"- {t} on {name}: {len(msgs)} of {n_runs} runs "
                       f"failed: " + "; ".join(uniq[:3]))
    for (name, t), msgs in sorted(notes.items()):
        if t not in tools:
            continue
        uniq = sorted(set(msgs))
        remarks.append(f"- {t} on {name}: " + "; ".join(uniq[:3])
                       + f" ({len(msgs)} of {rounds} runs)")
    if remarks:
        out.append("")
        out.append("Notes:")
        out.append("")
        out.extend(remarks)
    return "\n".join(out) + "\n"


def numpy_version() -> str | None:
    try:
        return importlib.metadata.version("numpy")
    except importlib.metadata.PackageNotFoundError:
        return None


def write_doc(reports: dict) -> None:
    """Put each table's report between its markers in docs/benchmarks.md."""
    text = DOC.read_text() if DOC.exists() else None
    if text is None:
        empty = "(not run yet)\n"
        text = (DOC_INTRO + markers("cpu")[0] + "\n" + empty
                + markers("cpu")[1] + "\n" + DOC_MEMORY_INTRO
                + markers("memory")[0] + "\n" + empty
                + markers("memory")[1] + "\n")
    for table, report in reports.items():
        start, end = markers(table)
        section = f"{start}\n{report}{end}\n"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end)
                             + r"\n?", re.DOTALL)
        if pattern.search(text):
            text = pattern.sub(lambda _: section, text, count=1)
        else:
            intro = {"memory": DOC_MEMORY_INTRO,
                     "pyperformance-cpu": DOC_PYPERF_INTRO}.get(table, "\n")
            text = text.rstrip("\n") + "\n" + intro + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def peer_tools(tools: list[str]) -> dict:
    """Tool records for the peers among tools, bench/.venv made if needed."""
    info = {}
    peers = [t for t in tools if t in VENV_PROGRAM]
    venv_error = ensure_venv(peers)
    if venv_error:
        log("warning: " + venv_error)
    for t in peers:
        info[t] = peer_tool(t, venv_error)
    if "cProfile" in tools:
        info["cProfile"] = cprofile_tool()
    return info


# ------------------------------------------------------------------- main --

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Measure the overhead of pyrometer and its peers, "
                    "CPU-only and full (CPU + memory) profiling, on the "
                    "workloads in bench/workloads.")
    ap.add_argument("--rounds", type=int, default=None,
                    help=f"rounds of every command (default {DEFAULT_ROUNDS}; "
                         "1 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help=f"development run: 1 round, BENCH_SCALE="
                         f"{QUICK_SCALE}, and docs/benchmarks.md is left "
                         "alone unless --write is given")
    ap.add_argument("--scale", type=float, default=None,
                    help="BENCH_SCALE for the workloads (default 1, or "
                         f"{QUICK_SCALE} with --quick)")
    ap.add_argument("--only", default="",
                    help="comma-separated workload names (default: all)")
    ap.add_argument("--tools", default=",".join(ALL_TOOLS),
                    help="comma-separated tools (default: %(default)s); "
                         "bare is always run; a table none of whose tools "
                         "is given is left out")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds before one command is killed "
                         "(default %(default)s)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed for the shuffled order (default: random)")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="OPENBLAS/OMP/MKL_NUM_THREADS for the workloads "
                         "(default %(default)s; 0 leaves them unset)")
    write = ap.add_mutually_exclusive_group()
    write.add_argument("--write", dest="write", action="store_true",
                       default=None, help="update docs/benchmarks.md")
    write.add_argument("--no-write", dest="write", action="store_false",
                       help="only print the table")
    ap.add_argument("--suite", choices=SUITES, default="own",
                    help="own: bench/workloads (default); pyperformance: "
                         "pyperformance's benchmark programs "
                         "(bench/pyperf_suite.py), tables of their own")
    args = ap.parse_args(argv)

    rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)
    scale = args.scale if args.scale is not None else (
        QUICK_SCALE if args.quick else 1.0)
    do_write = args.write if args.write is not None else not args.quick

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in tools if t not in ALL_TOOLS]
    if unknown:
        ap.error(f"unknown tool(s) {', '.join(unknown)}; "
                 f"choose from {', '.join(ALL_TOOLS)}")
    pyperf = args.suite == "pyperformance"
    if pyperf:
        asked = args.tools != ap.get_default("tools")
        hot = [t for t in tools if t in NEEDS_HOT]
        if hot and asked:
            ap.error(f"{', '.join(hot)} need(s) @profile on a workload's HOT "
                     "functions, which pyperformance's programs do not name")
        tools = [t for t in tools if t not in NEEDS_HOT]
    tools = ["bare"] + [t for t in ALL_TOOLS[1:] if t in tools]

    wanted = [n.strip().removesuffix(".py") for n in args.only.split(",")
              if n.strip()]
    if pyperf:
        import pyperf_suite
        # The tables name each by its wrapper, bm_NAME: either name is taken.
        wanted = [n.removeprefix("bm_") for n in wanted]
        missing = [n for n in wanted if n not in pyperf_suite.BENCHMARKS]
        if missing:
            ap.error(f"unknown benchmark(s) {', '.join(missing)}; choose "
                     f"from {', '.join(sorted(pyperf_suite.BENCHMARKS))}")
        workloads = pyperf_suite.prepare(PYPERF_CACHE, wanted)
    else:
        workloads = sorted(WORKLOADS_DIR.glob("*.py"))
        known = {w.stem for w in workloads}
        missing = [n for n in wanted if n not in known]
        if missing:
            ap.error(f"unknown workload(s) {', '.join(missing)}; "
                     f"choose from {', '.join(sorted(known))}")
        if wanted:
            workloads = [w for w in workloads if w.stem in wanted]

    tool_info = {"bare": Tool("bare", platform.python_version())}
    for t in ("pyrometer", "pyrometer-full"):
        if t in tools:
            tool_info[t] = pyrometer_tool(t)
            if tool_info[t].error:
                log("error: " + tool_info[t].error)
                return 2
    tool_info.update(peer_tools(tools))
    runnable = [t for t in tools if not tool_info[t].error]

    log(f"{len(workloads)} workloads x {len(runnable)} commands x {rounds} "
        f"rounds, BENCH_SCALE={scale:g}")
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    (times, ratios, problems, notes, capped, scales, startup, cpu_ratios,
     sampler_shares) = run_benchmark(
        workloads, runnable, rounds, scale, args.timeout, args.seed,
        args.blas_threads, 0.0 if args.quick else MIN_SECONDS)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()[0]
    reports = {}
    for table in TABLES:
        if not any(t in tools for t in TABLES[table]):
            continue
        key = f"pyperformance-{table}" if pyperf else table
        reports[key] = build_report(
            table, workloads, tools, tool_info, times, ratios, problems,
            notes, rounds, scale, args.blas_threads, load_before, load_after,
            elapsed, capped, scales, startup, cpu_ratios, args.suite,
            sampler_shares)
        print(f"## {TITLES[table]}\n")
        print(reports[key])
    if do_write and reports:
        if pyperf:
            PYPERF_RESULTS.write_text(DOC_PYPERF_INTRO.lstrip("\n") + "".join(
                f"{markers(k)[0]}\n{r}{markers(k)[1]}\n" for k, r in reports.items()))
        write_doc(reports)
        log(f"wrote {DOC.relative_to(REPO)} ({', '.join(reports)} "
            f"table{'s' if len(reports) > 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
