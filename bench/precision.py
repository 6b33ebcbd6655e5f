#!/usr/bin/env python3
"""Per-line precision: each line's share of the time against the program's own
clock, for pyrometer (its default and the choices of its sampler) beside
CPython 3.15's own sampler, py-spy and Scalene where they are there.

    python3 bench/precision.py [--runs N] [--programs mixed,periodic10,periodic1]
                               [--tools pyrometer,...] [--json OUT] [--markdown OUT]

The programs (written to a temporary folder, run from there):

- mixed: six kinds of work interleaved over 40 rounds of about 100 ms (4 s):
  two pure-Python loops (about 32% and 2% of the time), hashing a large
  buffer (the GIL released, 15%), `bytes.count` on it (native, the GIL held,
  15%), hashing in calls of about 20 us (15%) and 1 ms sleeps (21%).
- periodic10, periodic1: a loop whose period is 10 ms (or 1 ms), 30% Python
  and 70% sleeping, 3 s: a sampler whose period locks onto the program's
  would read one of the two lines only.
- waits: the same loop with 300 ms periods, 20% Python and 80% asleep (a
  server between requests): the long sleeps are where pyrometer's peeks
  stand for longer strata (csrc/sampler/spread.c, SPREAD_LONGER_AFTER).

The truth: each marked line's wall time, from time.perf_counter read on the
lines around it (unmarked) in the same profiled run, so that a tool's
slowing of one kind of work does not count as misattribution.  A tool's
answer: each marked line's time of any kind (pyrometer: its five kinds; the
3.15 sampler in wall mode and py-spy --idle: samples whose innermost frame of
the program is that line; Scalene: its CPU and system percentages).  Both are
taken as shares of the marked lines' total.  Scored per run: the mean over
the lines of |share - truth| in points, and the worst line; over runs, the
median and range of each.  Wall time and the CPU of the whole command (the
profiler's own threads and processes, and its report, included) against the
bare program's, alternated in one loop (the tools in a new random order each
round).

pyrometer's sampler choices are set for the benchmark only by the environment
variable PYROMETER_SAMPLER (csrc/sampler/sampler.c, sampler_choices): a tool
named `pyrometer[spacing=exponential]` runs with PYROMETER_SAMPLER set to
`spacing=exponential`.

Not part of the test suite: a benchmark; docs/benchmarks.md carries its last
results.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MIXED = '''
import hashlib, json, sys, time
ROUNDS = 40
BIG = bytes(range(256)) * (1 << 15)           # 8 MiB
SMALL = BIG[: 1 << 14]
TARGET_MS = {"py_big": 32, "py_small": 2, "hash_nogil": 15, "count_gil": 15, "short_hash": 15, "sleep": 21}

def py_big(n):
    acc = 0
    for i in range(n): acc += i * i % 7  # @py_big
    return acc

def py_small(n):
    acc = 0
    for i in range(n): acc += i % 3  # @py_small
    return acc

def hash_nogil(n):
    for _ in range(n): hashlib.sha256(BIG).digest()  # @hash_nogil

def count_gil(n):
    for _ in range(n): BIG.count(b"\\x07\\x08")  # @count_gil

def short_hash(n):
    for _ in range(n): hashlib.sha256(SMALL).digest()  # @short_hash

def sleep(n):
    for _ in range(n): time.sleep(0.001)  # @sleep

PARTS = [py_big, py_small, hash_nogil, count_gil, short_hash, sleep]

def calibrate(f, ms):
    """The count of f's unit of work that takes ms, the fastest of 5 timings
    of about 50 ms (run bare once by the benchmark, the counts then fixed)."""
    if f is sleep:
        return round(ms)
    n = 1
    while True:
        t = time.perf_counter(); f(n); dt = time.perf_counter() - t
        if dt > 0.05:
            break
        n *= 2
    best = min(timed(f, n) for _ in range(5))
    return max(1, round(n * ms / 1000 / best))

def timed(f, n):
    t = time.perf_counter(); f(n)
    return time.perf_counter() - t

def main():
    if sys.argv[1] == "--calibrate":
        with open(sys.argv[2], "w") as out:
            json.dump({f.__name__: calibrate(f, TARGET_MS[f.__name__]) for f in PARTS}, out)
        return
    with open(sys.argv[2]) as f:
        counts = json.load(f)
    truth = dict.fromkeys(counts, 0.0)
    for _ in range(ROUNDS):
        for f in PARTS:
            n = counts[f.__name__]
            t = time.perf_counter()
            f(n)
            truth[f.__name__] += time.perf_counter() - t
    with open(sys.argv[1], "w") as out:
        json.dump(truth, out)

main()
'''

PERIODIC = '''
import json, sys, time
PERIOD = {period}
WORK = {work} * PERIOD

def work(until):
    acc = 0
    while time.perf_counter() < until: acc += 1  # @work
    return acc

def rest(until):
    time.sleep(max(0.0, until - time.perf_counter()))  # @rest

def main():
    truth = {"work": 0.0, "rest": 0.0}
    t = time.perf_counter()
    for _ in range(round(3.0 / PERIOD)):
        a = time.perf_counter(); work(t + WORK)
        b = time.perf_counter(); rest(t + PERIOD)
        c = time.perf_counter()
        truth["work"] += b - a; truth["rest"] += c - b
        t += PERIOD
    with open(sys.argv[1], "w") as out:
        json.dump(truth, out)

main()
'''

PROGRAMS = {"mixed": MIXED, "periodic10": PERIODIC.replace("{period}", "0.010").replace("{work}", "0.3"),
            "periodic1": PERIODIC.replace("{period}", "0.001").replace("{work}", "0.3"),
            "waits": PERIODIC.replace("{period}", "0.300").replace("{work}", "0.2")}


def marked_lines(source: str) -> dict[int, str]:
    """line number -> marker name."""
    out = {}
    for i, line in enumerate(source.splitlines(), 1):
        m = re.search(r"# @(\w+)", line)
        if m:
            out[i] = m.group(1)
    return out


def read_pyrometer(profile_path: Path, program: Path, lines: dict[int, str]) -> dict[str, float]:
    prof = json.loads(profile_path.read_text())
    got = dict.fromkeys(lines.values(), 0.0)
    for name, f in prof["files"].items():
        if Path(name).name != program.name:
            continue
        for e in f["lines"]:
            if e["lineno"] in lines:
                got[lines[e["lineno"]]] += (e["n_cpu_python_sec"] + e["n_cpu_native_sec"] + e["n_sys_sec"]
                                            + e["n_gil_wait_sec"] + e["n_cpu_wait_sec"])
    return got


def read_collapsed(path: Path, program: Path, lines: dict[int, str]) -> dict[str, float]:
    """Samples whose innermost frame of the program is a marked line (the 3.15
    sampler's `file:function:line` frames, py-spy's `function (file:line)`)."""
    got = dict.fromkeys(lines.values(), 0.0)
    for row in path.read_text().splitlines():
        stack, _, count = row.rpartition(" ")
        if not count.isdigit():
            continue
        hit = None
        for frame in stack.split(";"):
            m = re.search(re.escape(program.name) + r"[:)]?(?:[^:;]*:)?(\d+)\)?$", frame)
            if m and int(m.group(1)) in lines:
                hit = lines[int(m.group(1))]
            elif program.name in frame:
                hit = None
        if hit is not None:
            got[hit] += int(count)
    return got


def read_scalene(profile_path: Path, program: Path, lines: dict[int, str]) -> dict[str, float]:
    prof = json.loads(profile_path.read_text())
    got = dict.fromkeys(lines.values(), 0.0)
    for name, f in prof.get("files", {}).items():
        if Path(name).name != program.name:
            continue
        for e in f["lines"]:
            if e["lineno"] in lines:
                got[lines[e["lineno"]]] += (e.get("n_cpu_percent_python", 0) + e.get("n_cpu_percent_c", 0)
                                            + e.get("n_sys_percent", 0))
    return got


def tool_command(tool: str, program: Path, truth: Path, out: Path) -> tuple[list[str], dict, callable]:
    """The command, its extra environment, and the reader of its answer."""
    py = sys.executable
    args = [str(program), str(truth), str(program.with_suffix(".counts.json"))]
    base = tool.split("[", 1)[0]
    choices = tool[len(base) + 1:-1] if "[" in tool else ""
    if base == "bare":
        return [py, *args], {}, None
    if base.startswith("pyrometer"):
        extra = base.split(":", 1)[1].split() if ":" in base else []
        env = {"PYROMETER_SAMPLER": choices} if choices else {}
        return ([py, "-m", "pyrometer", "--cpu-only", "--quiet", "--json", "--outfile", str(out), *extra, *args], env, read_pyrometer)
    if base.startswith("sampler"):  # CPython 3.15's profiling.sampling, wall mode; sampler:100 for 100 Hz
        rate = base.split(":", 1)[1] if ":" in base else None
        return ([py, "-m", "profiling.sampling", "run", "--mode", "wall", *(["-r", rate] if rate else []),
                 "--collapsed", "-o", str(out), *args], {}, read_collapsed)
    if base == "py-spy":
        return ([shutil.which("py-spy") or "py-spy", "record", "--idle", "-r", "100", "-f", "raw", "-o", str(out),
                 "--", py, *args], {}, read_collapsed)
    if base == "scalene":
        # Scalene 2.x: `scalene run` writes its JSON profile (-o); 1.x took --json --no-browser.
        return ([py, "-m", "scalene", "run", "--cpu-only", "-o", str(out), *args], {}, read_scalene)
    raise SystemExit(f"precision.py: unknown tool {tool!r}")


def score(truth: dict[str, float], got: dict[str, float]) -> dict:
    t_all, g_all = sum(truth.values()), sum(got.values())
    if g_all <= 0:
        return {"mean": None, "worst": None}
    errors = {k: abs(100.0 * got.get(k, 0.0) / g_all - 100.0 * truth[k] / t_all) for k in truth}
    return {"mean": statistics.mean(errors.values()), "worst": max(errors.values()),
            "worst_line": max(errors, key=errors.get),
            "shares": {k: round(100.0 * got.get(k, 0.0) / g_all, 2) for k in truth},
            "truth": {k: round(100.0 * truth[k] / t_all, 2) for k in truth}}


def run_one(tool: str, name: str, work: Path) -> dict:
    program = work / f"{name}.py"
    truth_path = work / f"{name}-truth.json"
    out = work / f"{name}-out.json"  # Scalene 2.x adds .json to a name without it
    for p in (truth_path, out):
        p.unlink(missing_ok=True)
    cmd, env, reader = tool_command(tool, program, truth_path, out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0 or not truth_path.exists():
        return {"wall": wall, "failed": (proc.stderr or proc.stdout)[-400:]}
    result = {"wall": wall, "cpu": cpu}
    if reader is not None:
        if not out.exists():
            return {"wall": wall, "failed": "no output: " + proc.stderr[-300:]}
        truth = json.loads(truth_path.read_text())
        result.update(score(truth, reader(out, program, marked_lines(program.read_text()))))
    return result


def study(tools: list[str], programs: list[str], runs: int, log=print) -> dict:
    results: dict = {p: {t: [] for t in ["bare", *tools]} for p in programs}
    with tempfile.TemporaryDirectory(prefix="pyrometer-precision-") as tmp:
        work = Path(tmp)
        for name in programs:
            program = work / f"{name}.py"
            program.write_text(textwrap.dedent(PROGRAMS[name]))
            counts = program.with_suffix(".counts.json")
            if "--calibrate" in PROGRAMS[name]:
                subprocess.run([sys.executable, str(program), "--calibrate", str(counts)], check=True, cwd=work)
            else:
                counts.write_text("{}")
        for r in range(runs):
            for name in programs:
                order = ["bare", *tools]
                random.shuffle(order)
                for tool in order:
                    res = run_one(tool, name, work)
                    results[name][tool].append(res)
                    log(f"[precision] round {r + 1}/{runs} {name} {tool}: "
                        + (f"failed: {res['failed']}" if "failed" in res else
                           f"wall {res['wall']:.2f}s cpu {res['cpu']:.2f}s" + (f" mean {res['mean']:.2f} worst {res['worst']:.2f}"
                                                         f" ({res['worst_line']})" if res.get("mean") is not None
                                                         else "")))
    return summarise(results, tools)


def summarise(results: dict, tools: list[str]) -> dict:
    summary: dict = {}
    for name, by_tool in results.items():
        bare = [r["wall"] for r in by_tool["bare"] if "failed" not in r]
        summary[name] = {}
        for tool in tools:
            runs = by_tool[tool]
            ok = [r for r in runs if r.get("mean") is not None]
            pairs = [(r, b) for r, b in zip(runs, by_tool["bare"]) if "failed" not in r and "failed" not in b]
            ratios = [r["wall"] / b["wall"] for r, b in pairs]
            cpu_ratios = [r["cpu"] / b["cpu"] for r, b in pairs if b.get("cpu")]
            if not ok:
                summary[name][tool] = {"failed": [r.get("failed") for r in runs]}
                continue
            summary[name][tool] = {
                "mean": [min(r["mean"] for r in ok), statistics.median(r["mean"] for r in ok),
                         max(r["mean"] for r in ok)],
                "worst": [min(r["worst"] for r in ok), statistics.median(r["worst"] for r in ok),
                          max(r["worst"] for r in ok)],
                "wall_vs_bare": statistics.median(ratios) if ratios and bare else None,
                "cpu_vs_bare": statistics.median(cpu_ratios) if cpu_ratios else None,
                "runs": len(ok)}
    return {"python": sys.version.split()[0], "summary": summary, "results": results}


def markdown(data: dict) -> str:
    rows = [f"CPython {data['python']}, {platform_line()}.", ""]
    for name, by_tool in data["summary"].items():
        rows += [f"**{name}**", "", "| tool | mean error per line (points) | worst line | wall vs bare | CPU vs bare |",
                 "| --- | --- | --- | --- | --- |"]
        for tool, s in by_tool.items():
            if "failed" in s:
                rows.append(f"| {tool} | failed | | | |")
                continue
            m, w = s["mean"], s["worst"]
            rows.append(f"| {tool} | {m[1]:.2f} ({m[0]:.2f}-{m[2]:.2f}) | {w[1]:.2f} ({w[0]:.2f}-{w[2]:.2f}) | "
                        f"{s['wall_vs_bare']:.3f}x | "
                        + (f"{s['cpu_vs_bare']:.3f}x |" if s.get("cpu_vs_bare") else "|"))
        rows.append("")
    return "\n".join(rows)


def platform_line() -> str:
    return f"{os.cpu_count()} CPUs, median (min-max) over runs"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--programs", default="mixed,periodic10,periodic1,waits")
    ap.add_argument("--tools", default=None,
                    help="comma-separated: pyrometer, pyrometer[CHOICES], pyrometer:OPTIONS, sampler, "
                         "sampler:100, py-spy, scalene (default: pyrometer and, on 3.15, the sampler)")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    tools = args.tools.split(",") if args.tools else (
        ["pyrometer", "sampler", "sampler:100"] if sys.version_info >= (3, 15) else ["pyrometer"])
    data = study(tools, args.programs.split(","), args.runs)
    text = markdown(data)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
