#!/usr/bin/env python3
"""pyrometer beside CPython 3.15's own sampling profiler (`python -m
profiling.sampling`: out of process, wall/CPU/GIL modes), on CPython 3.15.

    python3.15 bench/cpython315.py [--rounds N] [--scale S] [--suite own|pyperformance] [--json OUT] [--markdown OUT]

Run with a CPython 3.15 that has pyrometer installed (tests/pythons.py makes
one in build/pythons/3.15, in the Debian sid chroot on machines without a
3.15 of their own).  Two parts:

- Overhead: each workload of bench/workloads (or with --suite pyperformance,
  pyperformance's programs as bench/pyperf_suite.py runs them) run bare, under pyrometer
  (--cpu-only, and full: CPU + memory), and under the 3.15 sampler at its
  default 1 kHz and at 100 Hz (pyrometer's default rate), the tools in a
  new random order within each round; per workload the median over rounds
  of each tool's wall time over the same round's bare time, and the same for
  CPU time (the process and its children: an out-of-process sampler's own CPU
  counts, as it is spent on the user's machine).
- Accuracy: bench/accuracy.py's cpu_split program (and its short-calls
  variant), whose truth the program measures itself in the profiled run:
  each function's share of the time, and for each tool what it can tell of
  the kind of time.  The 3.15 sampler reports stacks per mode: wall samples
  minus CPU samples (`--mode cpu`) is the time off the CPU (system), and it
  has no Python/native split; pyrometer's is scored both ways.  And a GIL
  program: two threads running Python, whose GIL wait each thread measures
  (wall minus its own CPU time): pyrometer's GIL wait against the sampler's
  `--mode gil` (wall samples minus GIL-holding samples).

Not part of the test suite or CI: a benchmark; docs/benchmarks.md carries
its last results.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # noqa: E402  (the ground-truth programs, readers, scores)

BENCH = Path(__file__).resolve().parent
WORKLOADS = sorted((BENCH / "workloads").glob("*.py"))
TOOLS = {
    "bare": [],
    "pyrometer --cpu-only": ["-m", "pyrometer", "--cpu-only", "--quiet", "--outfile", "{out}.txt"],
    "pyrometer": ["-m", "pyrometer", "--quiet", "--outfile", "{out}.txt"],
    "3.15 sampler 1 kHz": ["-m", "profiling.sampling", "run", "--collapsed", "-o", "{out}.collapsed"],
    "3.15 sampler 100 Hz": ["-m", "profiling.sampling", "run", "-r", "100", "--collapsed", "-o",
                            "{out}.collapsed"],
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def timed(cmd: list[str], env: dict, cwd: Path, timeout: float = 600) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its children) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}: exit {proc.returncode}: {proc.stderr[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def overhead(rounds: int, scale: float, work: Path, workloads: list[Path]) -> dict:
    env = dict(os.environ, BENCH_SCALE=str(scale), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    times: dict = {}
    rng = random.Random(15)
    for r in range(rounds):
        for w in workloads:
            order = list(TOOLS)
            rng.shuffle(order)
            for tool in order:
                out = work / f"{w.stem}-{tool.replace(' ', '_')}-{r}"
                cmd = [sys.executable, *[a.format(out=out) for a in TOOLS[tool]], str(w)]
                try:
                    times.setdefault(w.stem, {}).setdefault(tool, []).append(timed(cmd, env, work))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    times.setdefault(w.stem, {}).setdefault(tool, []).append(None)
                    log(f"overhead: {w.stem} {tool}: {e}")
        log(f"overhead: round {r + 1} of {rounds} done")
    ratios: dict = {}
    for w, by_tool in times.items():
        bare = by_tool["bare"]
        for tool, runs in by_tool.items():
            if tool == "bare":
                continue
            pairs = [(t, b) for t, b in zip(runs, bare) if t is not None and b is not None]
            if pairs:
                ratios.setdefault(w, {})[tool] = {
                    "wall": statistics.median(t[0] / b[0] for t, b in pairs),
                    "cpu": statistics.median(t[1] / b[1] for t, b in pairs)}
        bare_walls = [b[0] for b in bare if b is not None]
        ratios.setdefault(w, {})["bare"] = {"seconds": statistics.median(bare_walls) if bare_walls else None,
                                            "spread": (max(bare_walls) / min(bare_walls)) if bare_walls else None}
    summary = {}
    for tool in TOOLS:
        if tool == "bare":
            continue
        walls = [ratios[w][tool]["wall"] for w in ratios if tool in ratios[w]]
        cpus = [ratios[w][tool]["cpu"] for w in ratios if tool in ratios[w]]
        if walls:
            summary[tool] = {"median_wall": statistics.median(walls), "max_wall": max(walls),
                             "median_cpu": statistics.median(cpus), "max_cpu": max(cpus)}
    return {"rounds": rounds, "scale": scale, "ratios": ratios, "summary": summary}


# ---------------------------------------------------------------- accuracy --

def sampler_stacks(program: Path, work: Path, env: dict, mode: str) -> dict:
    """function of the program -> seconds, from the 3.15 sampler's collapsed
    stacks in one mode (the innermost frame in the program's file)."""
    out = work / f"sampler-{mode}.collapsed"
    accuracy.run([sys.executable, "-m", "profiling.sampling", "run", "--all-threads", "--mode", mode,
                  "--collapsed", "-o", str(out), str(program)], env, work)
    ranges = accuracy.function_ranges(program)
    seconds: dict = {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        func = None
        for frame in stack.split(";"):
            parts = frame.rsplit(":", 2)
            if len(parts) == 3 and parts[0].endswith(program.name) and parts[2].isdigit():
                func = accuracy.function_of(ranges, int(parts[2])) or func
        if func is not None:
            seconds[func] = seconds.get(func, 0.0) + int(count) / 1000.0  # 1 kHz: a sample a ms
    return seconds


def read_cpython_sampler(program, work, env, memory):
    """Per function {"oncpu", "system"}: wall-mode samples, and of them those
    on the CPU (a second run in --mode cpu); no Python/native split."""
    wall = sampler_stacks(program, work, env, "wall")
    cpu = sampler_stacks(program, work, env, "cpu")
    return {f: {"oncpu": cpu.get(f, 0.0), "system": max(0.0, wall[f] - cpu.get(f, 0.0))} for f in wall}


accuracy.READERS["cpython-3.15-sampler"] = read_cpython_sampler


def oncpu_scores(truth: dict, reported: dict) -> dict:
    """Share error and on/off-CPU split error (points of the total), for a tool
    that tells only on-CPU from off-CPU time (or is scored so)."""
    kinds = {f: ("system" if k == "system" else "oncpu") for f, k in accuracy.CPU_KIND.items()}
    t_total = sum(truth.values())
    folded = {f: {"oncpu": r.get("oncpu", r.get("python", 0.0) + r.get("native", 0.0)),
                  "system": r.get("system", 0.0)} for f, r in reported.items()}
    r_total = sum(sum(v.values()) for f, v in folded.items() if f in kinds) or 1.0
    share_err = {f: 100 * (sum(folded.get(f, {}).values()) / r_total - truth[f] / t_total) for f in kinds}
    split_err = {f: {k: 100 * folded.get(f, {}).get(k, 0.0) / r_total
                     - (100 * truth[f] / t_total if kinds[f] == k else 0.0) for k in ("oncpu", "system")}
                 for f in kinds}
    return {"max_share_error": max(abs(v) for v in share_err.values()),
            "max_oncpu_split_error": max(abs(v) for e in split_err.values() for v in e.values()),
            "share_error": share_err, "split_error": split_err}


GIL_PROGRAM = '''
import json, os, threading, time

def spin(seconds, out, name):
    t0, c0 = time.perf_counter(), time.thread_time()
    total = 0
    while time.thread_time() - c0 < seconds:
        for i in range(2000):
            total += i % 7
    out[name] = {"wall": time.perf_counter() - t0, "cpu": time.thread_time() - c0}

def main():
    out = {}
    threads = [threading.Thread(target=spin, args=(1.0, out, n)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(os.environ["TRUTH_OUT"], "w") as f:
        json.dump({"gil_wait": sum(v["wall"] - v["cpu"] for v in out.values())}, f)

main()
'''


def gil_accuracy(work: Path, env: dict) -> dict:
    program = work / "gil.py"
    program.write_text(textwrap.dedent(GIL_PROGRAM).lstrip())
    res: dict = {}
    truth_file = work / "gil-truth.json"
    out = work / "gil-pyrometer.json"
    accuracy.run([sys.executable, "-m", "pyrometer", "--cpu-only", "--json", "--outfile", str(out),
                  str(program)], dict(env, TRUTH_OUT=str(truth_file)), work)
    truth = json.loads(truth_file.read_text())["gil_wait"]
    reported = json.loads(out.read_text())["cpu_time_sec"]["gil_wait"]
    res["pyrometer"] = {"truth_s": truth, "reported_s": reported, "error_pct": 100 * (reported - truth) / truth}
    samples = {}
    for mode in ("wall", "gil"):
        collapsed = work / f"gil-{mode}.collapsed"
        accuracy.run([sys.executable, "-m", "profiling.sampling", "run", "--all-threads", "--mode", mode,
                      "--collapsed", "-o", str(collapsed), str(program)],
                     dict(env, TRUTH_OUT=str(truth_file)), work)
        samples[mode] = sum(int(line.rpartition(" ")[2]) for line in collapsed.read_text().splitlines()
                            if ":spin:" in line and line.rpartition(" ")[2].isdigit())
        if mode == "wall":
            truth_sampler = json.loads(truth_file.read_text())["gil_wait"]
    reported = (samples["wall"] - samples["gil"]) / 1000.0
    res["cpython-3.15-sampler"] = {"truth_s": truth_sampler, "reported_s": reported,
                                   "error_pct": 100 * (reported - truth_sampler) / truth_sampler}
    return res


def accuracy_part(work: Path) -> dict:
    ext = accuracy.build_extension(work)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ext)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    program = work / "cpu_split.py"
    program.write_text(textwrap.dedent(accuracy.CPU_PROGRAM).lstrip())
    results: dict = {}
    for key, extra in (("cpu", {}), ("cpu_short_calls", {"CALL_US": str(accuracy.SHORT_CALL_US)})):
        for tool in ("pyrometer", "cpython-3.15-sampler"):
            truth_file = work / f"truth-{key}-{tool}.json"
            try:
                reported = accuracy.READERS[tool](program, work, dict(env, TRUTH_OUT=str(truth_file), **extra),
                                                  memory=False)
                truth = json.loads(truth_file.read_text())
                scores = oncpu_scores(truth, reported)
                if tool == "pyrometer":
                    full = accuracy.cpu_scores(truth, reported)
                    scores["max_split_error"] = full.get("max_split_error")
                results.setdefault(key, {})[tool] = scores
            except Exception as e:  # a tool's failure is a result
                results.setdefault(key, {})[tool] = {"error": f"{type(e).__name__}: {e}"}
            log(f"accuracy: {key} {tool}: " + json.dumps({k: v for k, v in results[key][tool].items()
                                                           if k.startswith("max") or k == "error"}))
    try:
        results["gil"] = gil_accuracy(work, env)
    except Exception as e:
        results["gil"] = {"error": f"{type(e).__name__}: {e}"}
    log("accuracy: gil " + json.dumps(results["gil"]))
    return results


def markdown(res: dict) -> str:
    suite = "pyperformance's programs (bench/pyperf_suite.py)" if res.get("suite") == "pyperformance" else \
        "bench/workloads"
    lines = [f"CPython {res['python']}, {res['machine']}, {suite}; {res['overhead']['rounds']} alternating rounds, "
             f"BENCH_SCALE={res['overhead']['scale']:g}; median over rounds of each run's time over the same "
             f"round's bare run.", "",
             "| workload | bare s (spread) | " + " | ".join(t for t in TOOLS if t != "bare") + " |",
             "| --- | --- | " + " | ".join("---" for t in TOOLS if t != "bare") + " |"]
    for w, by_tool in sorted(res["overhead"]["ratios"].items()):
        bare = by_tool.get("bare", {})
        cells = [f"{by_tool[t]['wall']:.2f}x ({by_tool[t]['cpu']:.2f}x CPU)" if t in by_tool else "failed"
                 for t in TOOLS if t != "bare"]
        lines.append(f"| {w} | {bare.get('seconds') or 0:.2f} ({bare.get('spread') or 0:.2f}) | "
                     + " | ".join(cells) + " |")
    s = res["overhead"]["summary"]
    lines.append("| **median** | | " + " | ".join(
        f"**{s[t]['median_wall']:.2f}x** ({s[t]['median_cpu']:.2f}x CPU)" if t in s else "" for t in TOOLS
        if t != "bare") + " |")
    acc = res["accuracy"]
    if acc:
        lines += ["", "| accuracy (points of the total; GIL: % of the truth) | pyrometer | 3.15 sampler |",
                  "| --- | --- | --- |"]
    for key, label in (("cpu", "cpu_split"), ("cpu_short_calls", "cpu_split, 40 us native calls")):
        p, c = acc.get(key, {}).get("pyrometer", {}), acc.get(key, {}).get("cpython-3.15-sampler", {})
        if not p:
            continue
        lines.append(f"| {label}: max share error | {p.get('max_share_error', float('nan')):.1f} | "
                     f"{c.get('max_share_error', float('nan')):.1f} |")
        lines.append(f"| {label}: max on/off-CPU split error | {p.get('max_oncpu_split_error', float('nan')):.1f} | "
                     f"{c.get('max_oncpu_split_error', float('nan')):.1f} |")
        lines.append(f"| {label}: max Python/native/system split error | "
                     f"{p.get('max_split_error') if p.get('max_split_error') is not None else float('nan'):.1f} | "
                     f"not reported |")
    g = acc.get("gil", {})
    if "pyrometer" in g:
        lines.append(f"| GIL wait, two Python threads | {g['pyrometer']['reported_s']:.2f} s of "
                     f"{g['pyrometer']['truth_s']:.2f} s ({g['pyrometer']['error_pct']:+.0f}%) | "
                     f"{g['cpython-3.15-sampler']['reported_s']:.2f} s of {g['cpython-3.15-sampler']['truth_s']:.2f} s "
                     f"({g['cpython-3.15-sampler']['error_pct']:+.0f}%) |")
    lines += ["", "Where the 3.15 sampler does better than pyrometer in this run:"]
    better = []
    for w, by_tool in sorted(res["overhead"]["ratios"].items()):
        ours = by_tool.get("pyrometer --cpu-only", {}).get("wall")
        for tool in ("3.15 sampler 100 Hz", "3.15 sampler 1 kHz"):
            theirs = by_tool.get(tool, {}).get("wall")
            if ours and theirs and theirs < ours:
                better.append(f"- overhead on {w}: {tool} {theirs:.2f}x, pyrometer --cpu-only {ours:.2f}x")
                break
    for key, label in (("cpu", "cpu_split"), ("cpu_short_calls", "cpu_split with 40 us calls")):
        p, c = acc.get(key, {}).get("pyrometer", {}), acc.get(key, {}).get("cpython-3.15-sampler", {})
        for metric, what in (("max_share_error", "time shares"), ("max_oncpu_split_error", "on/off-CPU split")):
            if metric in p and metric in c and c[metric] < p[metric]:
                better.append(f"- {what} on {label}: {c[metric]:.1f} points of error, pyrometer's {p[metric]:.1f}")
    if "pyrometer" in g and abs(g["cpython-3.15-sampler"]["error_pct"]) < abs(g["pyrometer"]["error_pct"]):
        better.append(f"- GIL wait: {g['cpython-3.15-sampler']['error_pct']:+.0f}% of the truth, "
                      f"pyrometer's {g['pyrometer']['error_pct']:+.0f}%")
    lines += better or ["- nowhere"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--skip", default="", help="overhead,accuracy")
    ap.add_argument("--suite", choices=("own", "pyperformance"), default="own",
                    help="the overhead's workloads: bench/workloads, or pyperformance's programs "
                         "(bench/pyperf_suite.py; loops calibrated for this interpreter, in its own cache)")
    ap.add_argument("--json", type=Path, help="default: bench/results/cpython315[-pyperformance].json")
    ap.add_argument("--markdown", type=Path, help="default: bench/results/cpython315[-pyperformance].md")
    ns = ap.parse_args(argv)
    if sys.version_info < (3, 15):
        print("bench/cpython315.py: needs CPython 3.15 (its profiling.sampling)", file=sys.stderr)
        return 2
    skip = set(filter(None, ns.skip.split(",")))
    stem = "cpython315" + ("-pyperformance" if ns.suite == "pyperformance" else "")
    ns.json = ns.json or BENCH / "results" / f"{stem}.json"
    ns.markdown = ns.markdown or BENCH / "results" / f"{stem}.md"
    import platform
    res = {"python": platform.python_version(),
           "machine": f"{os.cpu_count()} CPUs, {platform.machine()}"}
    with tempfile.TemporaryDirectory(prefix="pyrometer-cpython315-") as tmp:
        work = Path(tmp)
        if ns.suite == "pyperformance":
            import pyperf_suite
            workloads = pyperf_suite.prepare(BENCH / ".venv" / "pyperformance-cpython315")
        else:
            workloads = WORKLOADS
        res["suite"] = ns.suite
        res["overhead"] = overhead(ns.rounds, ns.scale, work, workloads) if "overhead" not in skip else \
            {"rounds": 0, "scale": ns.scale, "ratios": {}, "summary": {}}
        res["accuracy"] = accuracy_part(work) if "accuracy" not in skip else {}
    ns.json.write_text(json.dumps(res, indent=1))
    ns.markdown.write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
