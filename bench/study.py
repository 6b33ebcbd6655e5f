#!/usr/bin/env python3
"""The whole study in one command: overhead (bench/run.py), accuracy
(bench/accuracy.py) and scale (bench/scale.py), then docs/benchmarks.md
rewritten with the tables, the chart (docs/benchmarks-slowdowns.png, drawn
by bench/chart.py) and a paragraph per tool.

    python3 bench/study.py [--quick] [--rounds N] [--duration S]
                           [--skip overhead,accuracy,scale] [--render-only]

--quick: 1 round at BENCH_SCALE=0.1, a 20 s long run, results kept in
bench/results/quick.json and docs/benchmarks.md left alone (unless --write).
The full study keeps its results in bench/results/study.json; --render-only
rewrites docs/benchmarks.md from that file without measuring anything.
This is a benchmark, not a test: it is not part of the test suite or CI.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # noqa: E402
import run as bench  # noqa: E402
import scale  # noqa: E402

RESULTS = bench.BENCH_DIR / "results"
CHART = bench.REPO / "docs" / "benchmarks-slowdowns.png"
DOC = bench.DOC
CPU_PEERS = [t for t in bench.TABLES["cpu"] if t != "pyrometer"]
MEM_PEERS = [t for t in bench.TABLES["memory"] if t != "pyrometer-full"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -------------------------------------------------------------- measuring --

def measure_overhead(rounds: int, scale_: float, timeout: float, min_seconds: float) -> dict:
    workloads = sorted(bench.WORKLOADS_DIR.glob("*.py"))
    tools = bench.ALL_TOOLS
    tool_info = {"bare": bench.Tool("bare", platform.python_version())}
    for t in ("pyrometer", "pyrometer-full"):
        tool_info[t] = bench.pyrometer_tool(t)
    tool_info.update(bench.peer_tools(tools))
    runnable = [t for t in tools if not tool_info[t].error]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    (times, ratios, problems, notes, capped, scales, startup, cpu_ratios,
     sampler_shares) = bench.run_benchmark(
        workloads, runnable, rounds, scale_, timeout, None, 1, min_seconds)
    elapsed = time.perf_counter() - started

    def nest(d):
        out: dict = {}
        for (w, t), v in d.items():
            out.setdefault(w, {})[t] = v
        return out

    return {"workloads": [w.stem for w in workloads], "tools": tools,
            "tool_info": {t: {"version": i.version, "error": i.error}
                          for t, i in tool_info.items()},
            "times": nest(times), "ratios": nest(ratios), "cpu_ratios": nest(cpu_ratios),
            "sampler_shares": nest(sampler_shares),
            "problems": nest(problems), "notes": nest(notes),
            "capped": nest(capped), "rounds": rounds, "scale": scale_, "scales": scales,
            "startup": startup,
            "load_before": load_before, "load_after": os.getloadavg()[0],
            "elapsed": elapsed}


def machine() -> dict:
    return {"cpu": bench.cpu_model(), "cpus": bench.usable_cpus(),
            "memory": bench.memory_gib(),
            "os": f"{platform.system()} {platform.release()} {platform.machine()}",
            "python": f"{platform.python_version()} ({platform.python_implementation()}, "
                      f"{sys.executable})",
            "numpy": bench.numpy_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


# --------------------------------------------------------------- helpers --

def unnest(d: dict) -> dict:
    return {(w, t): v for w, per in d.items() for t, v in per.items()}


def medians(ov: dict) -> dict:
    """tool -> workload -> median slowdown (a killed run's lower bound when
    it never finished)."""
    out: dict = {}
    for w, per in ov["ratios"].items():
        for t, rs in per.items():
            if rs and t != "bare":
                out.setdefault(t, {})[w] = statistics.median(rs)
    for w, per in ov.get("capped", {}).items():
        for t, rs in per.items():
            if t not in out or w not in out[t]:
                out.setdefault(t, {})[w] = min(rs)
    return out


def overall(per: dict) -> float | None:
    return statistics.median(per.values()) if per else None


def fx(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def pts(x) -> str:
    return "-" if x is None else f"{x:.1f}"


# --------------------------------------------------------------- the doc --

INTRO = """\
# Benchmarks: pyrometer and its peers, side by side

One command measures everything on this page and rewrites it:

    python3 bench/study.py            # the full study (about {minutes} min here)
    python3 bench/study.py --quick    # 1 round at BENCH_SCALE=0.1: for development
    python3 bench/study.py --render-only   # rewrite this page from bench/results/study.json

It makes `bench/.venv` on first use and installs the peers into it from PyPI
(Scalene, py-spy, memray, pyinstrument, line_profiler, memory_profiler, with
psutil, matplotlib and the running interpreter's numpy version). Its parts
run alone too: `bench/run.py` (overhead), `bench/accuracy.py` (accuracy),
`bench/scale.py` (scale). It is a benchmark, not a test: CI does not run it.
On programs nobody here wrote, `python3 bench/run.py --suite pyperformance`
runs 19 of pyperformance's benchmarks unchanged against every peer, Austin
included (its section is below: "pyperformance: programs nobody here wrote").

Everything below comes from one run on one machine ({date}); compare tools
within it, never across runs. Losing figures are published as measured.
"""

METHOD = """\
## Method (overhead)

`bench/workloads/` holds {n} programs, each printing a checksum line,
scaled by `BENCH_SCALE` (sized for about 2.5 s bare on the machine they were
written on; a workload under 2 s bare on the measuring machine is scaled up
to run 2 s or more, and the tables say which and by how much):

| workload | what it exercises |
| --- | --- |
| `alloc_churn` | an event loop building and dropping millions of small dicts, lists, tuples and strings, while an index, a list and a bytearray log keep growing |
| `chaos` | pyperformance's chaos game, rewritten: random affine maps on spline points, pure-Python floats in small objects |
| `fannkuch` | pyperformance's fannkuch: permutations by list slicing |
| `io_sync` | temp files written, fsync'ed, re-read and deleted, and a socketpair ping-pong between two threads: mostly blocked in system calls |
| `json_roundtrip` | pyperformance's json_dumps/json_loads, rewritten: nested documents through the C encoder and scanner |
| `nbody` | pyperformance's nbody: float arithmetic in tight loops over lists |
| `numpy_copies` | numpy that copies: arrays from lists, `.copy()`, concatenate/stack, `astype`, fancy indexing |
| `numpy_work` | numpy linear algebra, FFT and elementwise arrays, plus a Kalman filter of tiny numpy calls |
| `pprint_format` | pyperformance's pprint, rewritten: `pprint.pformat` and `saferepr` of a large nested structure |
| `raytrace` | pyperformance's raytrace, rewritten: millions of small vector objects |
| `regex_scan` | pyperformance's regex_v8/regex_effbot, rewritten: eight patterns searched, substituted and split |
| `richards` | pyperformance's richards: an OS-scheduler simulation, method calls and attributes |
| `sqlite_work` | in-memory SQLite: bulk inserts, joins, aggregates, a Python function called from SQL |
| `text` | JSON and regular expressions over generated logs, with Python glue |
| `threaded` | four threads mixing pure-Python work with GIL-releasing hashlib and zlib |

pyperformance itself is not installed: its programs are rewritten in the
same spirit (same algorithms, our own sizes), so that each is a plain script
every tool can run unchanged.

The commands (W.py is the workload; F the profile file):

{commands}

- line_profiler and memory_profiler trace only decorated functions: each
  workload lists its hot functions in a module-level `HOT = [...]`, and
  `bench/run.py` writes a copy with `@profile` above each of them (what a
  user of those tools does by hand).
- memory_profiler traces every line of those functions and is tens to
  hundreds of times slower: it runs on {mprof} only, in the first round
  only, and is killed after {cap:.0f} s; a killed run is shown as a lower
  bound (`> Nx`).
- Each command's whole wall time is measured (start-up, profiling, writing
  the profile). Every round takes the workloads in a shuffled order and, for
  each workload, every command once in a shuffled order; a slowdown is the
  command's time over the bare time of the same workload in the same round.
  Tables give the median over rounds (min to max); the last rows give the
  median over workloads of those medians, and the worst.
- BLAS runs single-threaded (`OPENBLAS_NUM_THREADS=1`) so that spinning BLAS
  threads on a 2-core machine do not drown the overhead.
- pyrometer and cProfile run from the interpreter that runs the study; the
  peers from `bench/.venv`, made from the same interpreter with the same
  numpy. Output and exit status are compared with the bare run.
"""


def commands_block(ov: dict) -> str:
    lines = []
    for t in ov["tools"]:
        info = ov["tool_info"].get(t, {})
        v = info.get("version", "?")
        lines.append(f"- `{t}` ({v}): `{bench.display_command(t)}`")
    return "\n".join(lines)


def overhead_tables(ov: dict) -> dict:
    tool_info = {t: bench.Tool(t, i["version"], i["error"]) for t, i in ov["tool_info"].items()}
    workloads = [bench.WORKLOADS_DIR / f"{w}.py" for w in ov["workloads"]]
    out = {}
    for table in bench.TABLES:
        out[table] = bench.build_report(
            table, workloads, ov["tools"], tool_info, unnest(ov["times"]),
            unnest(ov["ratios"]), unnest(ov["problems"]), unnest(ov["notes"]),
            ov["rounds"], ov["scale"], 1, ov["load_before"], ov["load_after"],
            ov["elapsed"], unnest(ov.get("capped", {})), ov.get("scales"), ov.get("startup"),
            unnest(ov.get("cpu_ratios", {})), "own", unnest(ov.get("sampler_shares", {})))
    return out


def headline(ov: dict) -> str:
    med = medians(ov)
    cpu, full = overall(med.get("pyrometer", {})), overall(med.get("pyrometer-full", {}))
    out = ["## Headline", "",
           f"Median slowdown over the {len(ov['workloads'])} workloads, "
           f"{ov['rounds']} round(s):", "",
           "| tool | median | worst | ÷ pyrometer --cpu-only median | "
           "÷ pyrometer full median |",
           "| --- | --- | --- | --- | --- |"]
    capped = {t for per in ov.get("capped", {}).values() for t in per}
    for t in ov["tools"][1:]:
        m = overall(med.get(t, {}))
        if m is None:
            out.append(f"| {t} | not run | | | |")
            continue
        lb = ">= " if t in capped else ""
        worst = max(med[t].values())
        # The tool's median over pyrometer's: above 1, pyrometer is faster.
        rel = [f"{lb}{m / mine:.2f}" if mine else "" for mine in (cpu, full)]
        out.append(f"| {t} | {lb}{m:.2f}x | {lb}{worst:.2f}x | {rel[0]} | {rel[1]} |")
    out.append("")
    out.append("The last two columns divide the tool's median by pyrometer's: above "
               "1, pyrometer is faster by that factor; below 1, the tool is.")
    out.append("")
    bar = []
    if cpu is not None:
        bar.append(f"CPU-only median {cpu:.2f}x (bar: <= 1.03x, "
                   f"{'met' if cpu <= 1.03 else 'NOT met'})")
    if full is not None:
        worst = max(med["pyrometer-full"].values())
        sc = overall(med.get("scalene-full", {}))
        bar.append(f"full median {full:.2f}x (bar: <= 1.10x, "
                   f"{'met' if full <= 1.10 else 'NOT met'}), worst {worst:.2f}x "
                   f"(bar: <= 1.5x, {'met' if worst <= 1.5 else 'NOT met'})"
                   + (f", Scalene full {sc:.2f}x in the same run" if sc else ""))
    out.append("The mission's bar, as measured here: " + "; ".join(bar) + ".")
    out.append("")
    out.append("![slowdown per tool](benchmarks-slowdowns.png)")
    out.append("")
    return "\n".join(out)


def peer_wins(ov: dict) -> tuple[str, dict]:
    """Every workload where a peer's median beats pyrometer's (CPU-only peers
    against pyrometer --cpu-only, memory peers against pyrometer full)."""
    med = medians(ov)
    wins: dict = {}
    for peers, mine in ((CPU_PEERS, "pyrometer"), (MEM_PEERS, "pyrometer-full")):
        for t in peers:
            for w, m in sorted(med.get(t, {}).items()):
                p = med.get(mine, {}).get(w)
                capped = w in ov.get("capped", {}) and t in ov["capped"][w]
                if p is not None and m < p and not capped:
                    wins.setdefault(t, []).append((w, m, p, mine))
    lines = ["## Where a peer is faster than pyrometer", "",
             "Each workload where a peer's median slowdown is below pyrometer's "
             "(CPU-only peers against `pyrometer --cpu-only`, memory profilers "
             "against pyrometer's full profile). Differences of a few percent are "
             "within this machine's noise (see the bare ranges above).", ""]
    if not wins:
        lines.append("None in this run.")
    for t, ws in wins.items():
        lines.append(f"- **{t}**: " + "; ".join(
            f"{w} {m:.2f}x vs {p:.2f}x" for w, m, p, _ in ws))
    return "\n".join(lines) + "\n", wins


ACC_METHOD = """\
## Accuracy on programs whose truth is known

`bench/accuracy.py` builds the test-only C extension `tests/groundtruth`
(with the test suite's own build code) and profiles two programs with
every tool, reading each tool's own output: pyrometer's and Scalene's JSON,
py-spy's raw collapsed stacks (`--native --idle --format raw`),
pyinstrument's JSON, cProfile's pstats file, line_profiler's `.lprof`
(`line_profiler.load_stats`), memray's capture file (`memray run
--trace-python-allocators`, read with memray's `FileReader`) and
memory_profiler's line table. Figures are compared per function (a
line-level tool's lines are summed over the function).

**CPU program** (`cpu_split.py`): 40 rounds of four functions, each one
kind of work: `python_part` (a pure-Python loop), `native_gil_part`
(`spin_gil`: C code holding the GIL), `native_nogil_part` (`spin_nogil`: C
code with the GIL released) and `system_part` (`sleep_nogil`: blocked with
the GIL released), 15 ms each per round. The truth is each function's share
of the wall time, measured by the program itself with `perf_counter` in the
same profiled run (so that a tool slowing one kind of work, or the machine's
load, is not counted as misattribution), and each function's kind (all of
it Python, native or system). *Split error*: the largest difference, in
points of the four functions' total, between the reported Python, native
and system time of a function and the truth (12 cells). *Share error*: the
largest difference between a function's reported share of the total and its
true share (4 cells); every CPU tool reports that. py-spy does not split
time itself: we classify each sample by its leaf frame (a Python frame is
Python, a native frame named like a blocking call — sleep, poll, wait,
futex, recv, read — is system, any other native frame is native).
"""

MEM_METHOD = """\
**Memory program** (`memory.py`): 60 rounds of `python_alloc` (10 x
`bytearray(1 MiB)`, dropped at once: 600 MB, all Python), `native_alloc` (10 x
`malloc_free(1 MiB)`: 600 MB, all native), `python_leak` (a 1 MiB bytearray
kept in a global list: 60 MB, leaking), `native_leak` (`malloc_bytes(1 MiB)`,
never freed: 60 MB, leaking) and `copy_part` (`memcpy_bytes` of 20 MiB: 1,200
MB copied; nothing is copied anywhere else), with a 20 ms sleep per round.
*MB error*: the largest relative error of allocated MB over the four
allocating functions. *Share error*: the largest error, in points, of the
Python share of those functions, and the error of the Python share of the
whole. *Leaks*: leaking functions flagged (of 2), non-leaking ones flagged
(of 3). *Copy*: MB reported for `copy_part` (truth 1,200) and MB reported
anywhere else (truth 0).
"""


def accuracy_section(acc: dict) -> str:
    out = [ACC_METHOD, "| tool | split error (pts) | share error (pts) | "
           "reported shares: python / native GIL / native no-GIL / system (%) |",
           "| --- | --- | --- | --- |"]
    for t in accuracy.CPU_TOOLS:
        r = acc["cpu"].get(t, {})
        if "error" in r:
            out.append(f"| {t} | failed: {r['error']} | | |")
            continue
        split = pts(r.get("max_split_error")) if "max_split_error" in r else "cannot report"
        shares = " / ".join(f"{r['share'][f]:.1f}" for f in accuracy.CPU_KIND)
        truth = " / ".join(f"{r['truth_share'][f]:.1f}" for f in accuracy.CPU_KIND)
        out.append(f"| {t} | {split} | {pts(r.get('max_share_error'))} | "
                   f"{shares} (truth {truth}) |")
    out.append("")
    out.append("Each row's truth is from that tool's own run (the program times itself), "
               "so the truth differs between rows: a tool that slows Python code "
               "makes `python_part` a larger share of its run. pyinstrument and cProfile "
               "time each call with a clock, as the truth does, so their share error is "
               "near zero by construction; line_profiler leaves its own tracing cost, "
               "which falls on the traced Python function, out of its figures. None of "
               "these three can tell Python from native from system time. The bare "
               "runs' shares are kept in `bench/results/study.json` (`truth`).")
    out.append("")
    if acc["cpu"].get("pyrometer", {}).get("split"):
        out.append("Reported split per function (percent of the four functions' "
                   "total; Python / native / system), with the truth:")
        out.append("")
        out.append("| tool | " + " | ".join(accuracy.CPU_KIND) + " |")
        out.append("| --- |" + " --- |" * len(accuracy.CPU_KIND))
        pr = acc["cpu"]["pyrometer"]
        truth_row = []
        for f, kind in accuracy.CPU_KIND.items():
            s = pr["truth_share"][f]
            truth_row.append(" / ".join(f"{s if k == kind else 0:.1f}"
                                        for k in ("python", "native", "system")))
        out.append("| truth (pyrometer's run) | " + " | ".join(truth_row) + " |")
        for t in accuracy.CPU_TOOLS:
            r = acc["cpu"].get(t, {})
            if not r.get("split"):
                continue
            out.append(f"| {t} | " + " | ".join(
                " / ".join(f"{r['split'][f][k]:.1f}" for k in ("python", "native", "system"))
                for f in accuracy.CPU_KIND) + " |")
        out.append("")
        out.append("memray and memory_profiler do not measure time.")
        out.append("")
    short = acc.get("cpu_short_calls") or {}
    if short:
        out.append(f"Short native calls: the same program with `native_gil_part` spending its "
                   f"time in calls of {accuracy.SHORT_CALL_US:g} us each (`CALL_US`), the shape of "
                   "numpy code made of small operations, regex and json work. Only the tools "
                   "that tell native from Python time are run. `native_gil_part` as reported "
                   "(percent of the four functions' total; Python / native / system) and the "
                   "largest split error of any function:")
        out.append("")
        out.append("| tool | split error (pts) | native_gil_part: Python / native / system (truth) |")
        out.append("| --- | --- | --- |")
        for t in accuracy.SHORT_CALL_TOOLS:
            r = short.get(t, {})
            if "error" in r:
                out.append(f"| {t} | failed: {r['error']} | |")
                continue
            if not r.get("split"):
                out.append(f"| {t} | cannot report | |")
                continue
            s = r["split"]["native_gil_part"]
            truth = r["truth_share"]["native_gil_part"]
            out.append(f"| {t} | {pts(r.get('max_split_error'))} | "
                       f"{s['python']:.1f} / {s['native']:.1f} / {s['system']:.1f} "
                       f"(0.0 / {truth:.1f} / 0.0) |")
        out.append("")
    out.append(MEM_METHOD)
    kt = [f for f in ("keep_small", "temp_big", "thread_alloc") if f in accuracy.MEM_TRUTH]
    kt_head = (" | " + " / ".join(kt) + " MB (truth " +
               " / ".join(f"{accuracy.MEM_TRUTH[f]['mb']:.0f}" for f in kt) + ")") if kt else ""
    out.append("| tool | MB error (max) | Python share error (max / whole, pts) | "
               "leaks found | false leaks | copy MB (truth 1200) | copy MB elsewhere (truth 0)" + kt_head + " |")
    out.append("| --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if kt else ""))
    for t in accuracy.MEM_TOOLS:
        r = acc["memory"].get(t, {})
        if "error" in r:
            out.append(f"| {t} | failed: {r['error']} | | | | | |" + (" |" if kt else ""))
            continue
        share = (f"{r['max_share_error_pts']:.1f} / {r['overall_share_error_pts']:+.1f}"
                 if "max_share_error_pts" in r else "cannot report")
        leaks = (f"{r['leaks_found']} of {r['leaks_total']}" if "leaks_found" in r
                 else "cannot report")
        false = (f"{r['false_leaks']} of {r['non_leaking']}" if "false_leaks" in r
                 else "cannot report")
        copy = f"{r['copy_mb']:.0f} ({r['copy_error_pct']:+.0f}%)" if "copy_mb" in r \
            else "cannot report"
        elsewhere = f"{r['copy_elsewhere_mb']:.1f}" if "copy_mb" in r else "cannot report"
        per = r.get("per_function", {})
        kt_cells = (" | " + " / ".join(f"{per.get(f, {}).get('mb', 0.0):.0f}" for f in kt)) if kt else ""
        out.append(f"| {t} | {r['max_mb_error_pct']:.1f}% | {share} | {leaks} | {false} | "
                   f"{copy} | {elsewhere}{kt_cells} |")
    out.append("")
    out.append("Allocated MB per function (truth: python_alloc 600, native_alloc 600, "
               "python_leak 60, native_leak 60), with the Python share where reported:")
    out.append("")
    fns = ["python_alloc", "native_alloc", "python_leak", "native_leak"]
    out.append("| tool | " + " | ".join(fns) + " |")
    out.append("| --- |" + " --- |" * len(fns))
    for t in accuracy.MEM_TOOLS:
        r = acc["memory"].get(t, {})
        if "per_function" not in r:
            continue
        cells = []
        for f in fns:
            p = r["per_function"][f]
            cell = f"{p['mb']:.0f} MB"
            if p.get("python") is not None:
                cell += f", {100 * p['python']:.0f}% Python"
            if p.get("leak"):
                cell += ", leak"
            cells.append(cell)
        out.append(f"| {t} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("py-spy, pyinstrument, cProfile and line_profiler do not measure memory. "
               "memory_profiler's figure is the change of the whole process's RSS "
               "while a line ran, not the volume it allocated: memory freed at once "
               "shows as nothing, and it reports no Python/native share, no leaks and no "
               "copies. memray records every allocation (no sampling) and reports "
               "no copy volume.")
    return "\n".join(out) + "\n"


def scale_section(sc: dict) -> str:
    d = sc["duration_s"]
    out = ["## Scale", "",
           f"`bench/scale.py`. **Long run**: one program looping over the same lines "
           f"(pure-Python work, allocation churn, a bounded cache) for {d / 4:.0f} s and "
           f"for {d:.0f} s under pyrometer's full profile"
           + (". " if d >= LONG_RUN_ASKED_S else
              f". The issue asks for a 10-minute run; this published run used {d:.0f} s "
              f"(`--duration {d:.0f}`) to fit the time available. ")
           + "Peak RSS is the whole process's (ru_maxrss).", "",
           "| run length | bare peak RSS (measured at the shorter length) | pyrometer peak RSS | profiler_memory_bytes | "
           "profile size | lines in profile |", "| --- | --- | --- | --- | --- | --- |"]
    for r in sc["long_run"]:
        out.append(f"| {r['duration_s']:.0f} s | {r['bare_rss_mb']:.1f} MB | "
                   f"{r['pyrometer_rss_mb']:.1f} MB | "
                   f"{r.get('profiler_memory_kb', 0):.0f} KiB | {r.get('output_kb') or 0:.0f} KiB | "
                   f"{r.get('lines', '-')} |" + (f" failed: {r['error']}" if r.get("error") else ""))
    out += ["", "**Many files**: a generated program of 100 or 1,000 modules (three small "
            "functions each, 11 lines per module), all called in a loop for 3 s, under "
            "pyrometer and Scalene (full profiles).", "",
            "| modules | bare peak RSS | pyrometer: peak RSS / profiler memory / profile size "
            "/ files, lines reported / slowdown | scalene: peak RSS / profile size / files, "
            "lines reported / slowdown |", "| --- | --- | --- | --- |"]
    for r in sc["many_files"]:
        p, s = r["pyrometer"], r["scalene"]
        out.append(
            f"| {r['modules']} | {r['bare_rss_mb']:.1f} MB | {p['rss_mb']:.1f} MB / "
            f"{p.get('profiler_memory_kb', 0):.0f} KiB / {p.get('output_kb') or 0:.0f} KiB / "
            f"{p.get('files', '-')}, {p.get('lines', '-')} / {p['seconds'] / r['bare_s']:.2f}x | "
            f"{s['rss_mb']:.1f} MB / {s.get('output_kb') or 0:.0f} KiB / {s.get('files', '-')}, "
            f"{s.get('lines', '-')} / {s['seconds'] / r['bare_s']:.2f}x |")
    out += ["", "The driver runs for a fixed 3 s, so a slowdown here is the extra "
            "start-up and profile-writing time, not slower execution. A tool reports "
            "only the files and lines it sampled.", "",
            f"**Sampling rate**: median slowdown over {sc['rate_rounds']} round(s) "
            f"(alternating, paired with bare in the same round).", ""]
    labels = list(sc["sampling_rate"])
    wl = scale.RATE_WORKLOADS
    out.append("| command | " + " | ".join(wl) + " |")
    out.append("| --- |" + " --- |" * len(wl))
    for label in labels:
        per = sc["sampling_rate"][label]
        out.append(f"| {label} | " + " | ".join(fx(per.get(w)) for w in wl) + " |")
    return "\n".join(out) + "\n"


TOOL_TEXT = {
    "scalene": "Scalene is the closest peer (same design: signals plus a preloaded "
               "allocator shim, Python/native/system split, memory and copy volume).",
    "py-spy": "py-spy samples from another process by reading the target's memory: "
              "the program itself runs untouched, so its overhead is mostly the "
              "sampler competing for a core; it reports stacks, not a Python/native/"
              "system split or memory.",
    "pyinstrument": "pyinstrument is a statistical profiler inside the process "
                    "(setstatprofile, 1 ms): call-stack wall time per function, no "
                    "line-level split, no memory.",
    "cProfile": "cProfile is the standard library's deterministic profiler: every "
                "call and return, function level only, exact call counts.",
    "line_profiler": "line_profiler traces every line of decorated functions: exact "
                     "hit counts and per-line time, only where the user decorated.",
    "memray": "memray traces every allocation (no sampling) into a file: exact "
              "volumes, Python vs system allocator, leaks at exit; no CPU and no "
              "copy volume.",
    "memory_profiler": "memory_profiler samples RSS at every line of decorated "
                       "functions: a process-wide figure, very slow.",
}


def tool_paragraphs(ov, acc, wins) -> str:
    med = medians(ov)
    out = ["## Tool by tool: where each wins, where pyrometer loses", ""]
    pcpu, pfull = overall(med.get("pyrometer", {})), overall(med.get("pyrometer-full", {}))
    pa_cpu, pa_mem = acc["cpu"].get("pyrometer", {}), acc["memory"].get("pyrometer", {})
    for t in CPU_PEERS + MEM_PEERS:
        base = t.removesuffix("-full")
        text = [f"**{t}**. " + TOOL_TEXT.get(base, "")]
        m = overall(med.get(t, {}))
        mine = pcpu if t in CPU_PEERS else pfull
        which = "pyrometer --cpu-only" if t in CPU_PEERS else "pyrometer's full profile"
        if m is not None and mine is not None:
            text.append(f"Median slowdown {m:.2f}x against {mine:.2f}x for {which}.")
        if wins.get(t):
            text.append("Faster than pyrometer on " + ", ".join(
                f"{w} ({x:.2f}x vs {p:.2f}x)" for w, x, p, _ in wins[t]) + ".")
        elif m is not None:
            text.append("Not faster than pyrometer on any workload in this run.")
        a = acc["cpu"].get(base, {})
        if "max_share_error" in a and "max_share_error" in pa_cpu:
            better = a["max_share_error"] < pa_cpu["max_share_error"]
            text.append(f"Time-share error {a['max_share_error']:.1f} pts vs pyrometer's "
                        f"{pa_cpu['max_share_error']:.1f}"
                        + (" (more accurate than pyrometer here)" if better else "") + ".")
        if "max_split_error" in a and "max_split_error" in pa_cpu:
            better = a["max_split_error"] < pa_cpu["max_split_error"]
            text.append(f"Split error {a['max_split_error']:.1f} pts vs pyrometer's "
                        f"{pa_cpu['max_split_error']:.1f}"
                        + (" (more accurate than pyrometer here)" if better else "") + ".")
        b = acc["memory"].get(base, {}) if t in MEM_PEERS or base == "scalene" else {}
        if "max_mb_error_pct" in b and "max_mb_error_pct" in pa_mem and t != "scalene":
            better = b["max_mb_error_pct"] < pa_mem["max_mb_error_pct"]
            text.append(f"Allocated-MB error {b['max_mb_error_pct']:.0f}% vs pyrometer's "
                        f"{pa_mem['max_mb_error_pct']:.0f}%"
                        + (" (more accurate than pyrometer here)" if better else "") + ".")
            if "leaks_found" in b:
                text.append(f"Leaks found {b['leaks_found']} of {b['leaks_total']} "
                            f"(pyrometer {pa_mem.get('leaks_found', '-')}), false leaks "
                            f"{b['false_leaks']} (pyrometer {pa_mem.get('false_leaks', '-')}).")
        out.append(" ".join(text))
        out.append("")
    return "\n".join(out)


def pyrometer_findings(ov, acc) -> str:
    """pyrometer against the mission's bar, in this run's figures."""
    out = ["## What this run says about pyrometer", ""]
    med = medians(ov) if ov else {}
    if med.get("pyrometer"):
        cpu = overall(med["pyrometer"])
        full = overall(med.get("pyrometer-full", {}))
        worst = max(med.get("pyrometer-full", {0: 0}).values())
        out.append(f"- Overhead: CPU-only median {cpu:.2f}x (bar 1.03x: "
                   f"{'met' if cpu <= 1.03 else 'not met'}); full median {full:.2f}x "
                   f"(bar 1.10x: {'met' if full <= 1.10 else 'not met'}), worst {worst:.2f}x "
                   f"(bar 1.5x: {'met' if worst <= 1.5 else 'not met'}). With "
                   f"{ov['rounds']} round(s) on a shared 2-core machine a few percent is "
                   "within the noise; py-spy, which leaves the program untouched, is the "
                   "floor to compare with.")
    c = acc["cpu"].get("pyrometer", {}) if acc else {}
    if "max_split_error" in c:
        out.append(f"- CPU split: largest error {c['max_split_error']:.1f} points (bar 5: "
                   f"{'met' if c['max_split_error'] <= 5 else 'not met'}).")
    m = acc["memory"].get("pyrometer", {}) if acc else {}
    if "per_function" in m:
        pf = m["per_function"]
        out.append(
            f"- Allocated MB per function: largest error {m['max_mb_error_pct']:.0f}% (bar "
            f"10%: {'met' if m['max_mb_error_pct'] <= 10 else 'not met'}). python_alloc "
            f"{pf['python_alloc']['mb']:.0f} MB of 600, native_alloc "
            f"{pf['native_alloc']['mb']:.0f} MB of 600, python_leak "
            f"{pf['python_leak']['mb']:.0f} of 60, native_leak {pf['native_leak']['mb']:.0f} "
            "of 60. pyrometer samples *net* allocation per thread, and a block of a window "
            "or more is a sample by itself (how-it-works.md), so these 1 MiB blocks are "
            "counted exactly on their own lines; memray, which traces every allocation, is "
            "exact on all four too."
            + ("" if m['max_mb_error_pct'] <= 10 else
               " Errors above the bar mean small volume pending from one line was charged "
               "to a neighbour that crossed the window."))
        if "leaks_found" in m:
            out.append(f"- Leaks: {m['leaks_found']} of {m['leaks_total']} leaking functions "
                       f"found, {m['false_leaks']} of {m['non_leaking']} non-leaking ones "
                       "flagged (bar: all found, none flagged"
                       + (": met)." if m['leaks_found'] == m['leaks_total']
                          and not m['false_leaks'] else ": not met).")
                       + ("" if m['leaks_found'] == m['leaks_total'] else
                          " The missed leak is the one whose volume is charged to its "
                          "neighbour (above)."))
        if "copy_mb" in m:
            out.append(f"- Copy volume: {m['copy_mb']:.0f} MB of 1,200 reported on the copying "
                       f"line ({m['copy_error_pct']:+.1f}%), {m['copy_elsewhere_mb']:.1f} MB "
                       "elsewhere (bar: none where nothing is copied).")
    return "\n".join(out) + "\n"


CPYTHON315 = """\
## CPython 3.15's own sampling profiler, on CPython 3.15

The strongest CPU-side peer from 3.15 on is the interpreter's own
`python -m profiling.sampling` (out of process, reading the target's memory
through its debug offsets; wall, CPU, GIL and exception modes; async-aware;
flame graph, Firefox export, live view). `bench/cpython315.py` measures it
beside pyrometer on a CPython 3.15 with pyrometer installed (here the Debian sid
chroot's, as tests/pythons.py makes it): the workloads above, alternated within
each round, and bench/accuracy.py's cpu_split program plus a two-thread GIL
program. The sampler has no Python/native split, so the kind of time is
scored as it reports it, on the CPU or off it (its `--mode cpu` against its
wall mode); its overhead counts its own process's CPU, as it is spent on the
user's machine. The bare runs are short (the bare column), so each tool's
start-up weighs in; two cores are shared by the program and an out-of-process
sampler, so its CPU ratio is what it costs the machine. The other peers on
3.14 and 3.15, tried there (Debian sid's 3.14.10 and 3.15.2): memray 1.20 has
wheels for both and runs (it meets the executables' canonical PLT entry for
`malloc` too, and corrects it: "Correcting symbol for malloc"); py-spy 0.4.3
installs but records 9 and 15 samples of a 0.5 s program at 100 Hz (about 50
expected), so its figures would not mean what they say; Scalene has a 3.14
wheel (2.4.0) but none for 3.15 (the newest that installs without a build,
1.1.15, does not start). They are left out of this table. Its results, as
`bench/cpython315.py` wrote them (bench/results/cpython315.md):

"""


def cpython315_section() -> str:
    """The 3.15 sampler's comparison (bench/cpython315.py's last results), if any."""
    path = RESULTS / "cpython315.md"
    return CPYTHON315 + path.read_text() if path.exists() else ""


# Sections measured by scripts of their own, as they wrote them in
# bench/results (each file holds its heading), after the study's own:
# pyperformance's programs (bench/run.py --suite pyperformance --write, and
# what they say, written by hand) and the pytest plugin (bench/pytest_plugin.py,
# its summary written by hand).
OWN_SECTIONS = ["pyperformance.md", "pyperformance-notes.md", "pytest-plugin.md"]

MISSING = """\
## What this study does not cover

- The study's headline, chart and accuracy use its own workloads (some of
  them pyperformance's programs rewritten: chaos, fannkuch, json, nbody,
  pprint, raytrace, regex, richards); pyperformance's own programs have
  their overhead tables above, not in the headline.
- memory_profiler runs on three workloads, one round, capped: its figures
  are lower bounds where killed.
- The accuracy programs are single-threaded; the CPU split of threads and of
  C threads without Python state is covered by the test suite, not here.
- GPU profiling is not compared (no GPU on this machine). Nor is the kernel
  tier's overhead (`--gpu-kernels`, CUPTI) measured: the issue's bar for it is
  1.10x on a GPU training loop and on a launch-heavy loop of small kernels, and
  it stays off by default until that is measured on a GPU. Through the CUPTI
  test double, pyrometer's own part of a launch (the callback, the note, the
  record's charge) was about 0.1 us of CPU (perf, 200,000 launches); CUPTI's
  own cost is what remains to be measured.
- The sampling-rate comparison uses three workloads{short_run}.
"""
# The scale study's long run that the issue asks for (10 minutes).
LONG_RUN_ASKED_S = 600


def render(res: dict) -> str:
    ov, acc, sc = res.get("overhead"), res.get("accuracy"), res.get("scale")
    m = res["machine"]
    parts = [INTRO.format(minutes=round(res.get("elapsed_s", 0) / 60), date=m["date"])]
    if res.get("accuracy_rerun"):
        # One part measured again alone (bench/accuracy.py), e.g. after a fix.
        parts.append("Exception: the accuracy section was measured again on its own, "
                     + res["accuracy_rerun"] + ".\n")
    parts.append(f"Machine: {m['cpu']}, {m['cpus']} usable CPUs, {m['memory']} memory, "
                 f"{m['os']}; Python {m['python']}, numpy {m['numpy']}. Load average "
                 f"{res.get('load_before', 0):.2f} before the study, "
                 f"{res.get('load_after', 0):.2f} after (the machine is shared with "
                 f"other engineers' test runs). Versions: "
                 + ", ".join(f"{t} {v}" for t, v in sorted(res.get("versions", {}).items()))
                 + ".\n")
    wins: dict = {}
    if ov:
        parts.append(headline(ov))
        tables = overhead_tables(ov)
        parts.append(METHOD.format(n=len(ov["workloads"]), commands=commands_block(ov),
                                   mprof=", ".join(bench.MPROF_WORKLOADS),
                                   cap=bench.MPROF_TIMEOUT))
        parts.append("## CPU profiling overhead\n")
        parts.append(bench.markers("cpu")[0] + "\n" + tables["cpu"] + bench.markers("cpu")[1]
                     + "\n")
        parts.append("## Full (CPU + memory) profiling overhead\n")
        parts.append(bench.markers("memory")[0] + "\n" + tables["memory"]
                     + bench.markers("memory")[1] + "\n")
        rerun = res.get("overhead_rerun")
        if rerun and (RESULTS / rerun["file"]).exists():
            # The overhead of some tools measured again alone (bench/run.py --tools
            # ...), e.g. after a change to pyrometer; its tables as run.py printed them.
            parts.append("## Overhead measured again: " + rerun["title"] + "\n\n" + rerun["note"]
                         + "\n\n" + (RESULTS / rerun["file"]).read_text().strip() + "\n")
        text, wins = peer_wins(ov)
        parts.append(text)
    if acc:
        parts.append(accuracy_section(acc))
    if sc:
        parts.append(scale_section(sc))
    if ov and acc:
        parts.append(pyrometer_findings(ov, acc))
        parts.append(tool_paragraphs(ov, acc, wins))
    if cpython315_section():
        parts.append(cpython315_section())
    for name in OWN_SECTIONS:
        if (RESULTS / name).exists():
            parts.append((RESULTS / name).read_text())
    short = sc and sc["duration_s"] < LONG_RUN_ASKED_S
    parts.append(MISSING.format(short_run=", and the scale study's long run is shorter than "
                                "the 10 minutes the issue asks for (the duration is above)"
                                if short else ""))
    return "\n".join(parts)


def draw_chart(ov: dict, path: Path) -> str | None:
    med = medians(ov)
    capped = sorted({t for per in ov.get("capped", {}).values() for t in per})
    src = RESULTS / "chart-input.json"
    src.write_text(json.dumps({"tools": ov["tools"][1:], "medians": med, "capped": capped,
                               "title": f"Slowdown per tool, {len(ov['workloads'])} workloads, "
                                        f"{ov['rounds']} round(s), BENCH_SCALE={ov['scale']:g}"}))
    proc = subprocess.run([str(bench.venv_bin("python")), str(bench.BENCH_DIR / "chart.py"),
                           str(src), str(path)], capture_output=True, text=True)
    src.unlink()
    return None if proc.returncode == 0 else bench.short(proc.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Run the whole benchmark study.")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of the scale study's long run (default 120; 20 with --quick)")
    ap.add_argument("--skip", default="", help="comma-separated: overhead,accuracy,scale")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite docs/benchmarks.md from bench/results/study.json")
    ap.add_argument("--write", action="store_true",
                    help="with --quick: still rewrite docs/benchmarks.md")
    args = ap.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    store = RESULTS / ("quick.json" if args.quick else "study.json")
    if args.render_only:
        res = json.loads(store.read_text())
    else:
        skip = {s.strip() for s in args.skip.split(",") if s.strip()}
        rounds = args.rounds or (1 if args.quick else bench.DEFAULT_ROUNDS)
        sc_ = bench.QUICK_SCALE if args.quick else 1.0
        duration = args.duration or (20.0 if args.quick else 120.0)
        res = {"machine": machine(), "load_before": os.getloadavg()[0]}
        started = time.perf_counter()
        if args.quick:
            bench.MPROF_TIMEOUT = 10.0
        if "overhead" not in skip:
            res["overhead"] = measure_overhead(rounds, sc_, args.timeout,
                                               0.0 if args.quick else bench.MIN_SECONDS)
            store.write_text(json.dumps(res, indent=1))
        if "accuracy" not in skip:
            res["accuracy"] = accuracy.study()
            store.write_text(json.dumps(res, indent=1))
        if "scale" not in skip:
            res["scale"] = scale.study(duration, 1 if args.quick else 2, sc_)
        res["elapsed_s"] = time.perf_counter() - started
        res["load_after"] = os.getloadavg()[0]
        versions = {}
        if "overhead" in res:
            versions = {t: i["version"] for t, i in res["overhead"]["tool_info"].items()
                        if t != "bare" and not t.endswith("-full")}
        elif "accuracy" in res:
            versions = res["accuracy"]["versions"]
        res["versions"] = versions
        store.write_text(json.dumps(res, indent=1))
        log(f"study: {res['elapsed_s'] / 60:.1f} min; results in {store}")
    doc = render(res)
    if args.quick and not args.write:
        print(doc)
        if res.get("overhead"):
            err = draw_chart(res["overhead"], RESULTS / "quick-slowdowns.png")
            if err:
                log(f"chart failed: {err}")
        return 0
    if res.get("overhead"):
        err = draw_chart(res["overhead"], CHART)
        if err:
            log(f"chart failed: {err}")
    DOC.write_text(doc)
    log(f"wrote {DOC.relative_to(bench.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
