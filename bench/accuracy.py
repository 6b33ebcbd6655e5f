#!/usr/bin/env python3
"""Accuracy study: programs whose truth is known, profiled by pyrometer and
by every peer, each tool's answer parsed from its own output.

    python3 bench/accuracy.py [--json OUT]

Two programs, both built on the test-only C extension tests/groundtruth
(built with the test suite's own build code, tests/conftest.py):

- cpu_split.py: four functions, each doing one kind of work, called in turn:
  pure-Python arithmetic, C code holding the GIL (spin_gil), C code with the
  GIL released (spin_nogil) and blocking with the GIL released (sleep_nogil).
  The truth: each function's share of the wall time, measured by the
  program itself with perf_counter in the same profiled run (so that a
  tool's slowing of one kind of work, or the machine's load, does not count
  as misattribution), and each function's kind (100% Python, native or
  system). The bare run's shares (median of 3) are recorded beside it.
- the same program with CALL_US=40 (the "short calls" variant): native_gil_part
  spends its time in calls of 40 us each instead of one 15 ms call, the shape
  of numpy code made of small operations, regex and json work.  A profiler that
  tells native from Python by how long the main thread takes to answer calls
  them Python.
- memory.py: functions that allocate known volumes: Python-domain blocks
  (bytearray of 1 MiB, dropped), native blocks (malloc_free of 1 MiB), a
  Python leak and a native leak (1 MiB per call, kept), and a known copy
  volume (memcpy_bytes), with no copying anywhere else; a 200 KB bytearray
  kept beside a 500 KB one dropped, in turn (keep_small, temp_big: under the
  window, where sampling the net volume misplaces growth); and 2 MiB malloc'd
  without the GIL by a thread that ends at once (thread_alloc).

Everything is compared per function (a tool's line figures are summed over
the function's lines), so that line-level and function-level tools are
measured alike.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (bench/run.py: tools, venv, decorated copies)

REPO = bench.REPO
MB = 1 << 20

CPU_PROGRAM = '''
import json, os, time
import _groundtruth as gt

ROUNDS = 40
MS = 15
HOT = ["python_part", "native_gil_part", "native_nogil_part", "system_part"]


def python_part(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total


CALL_US = float(os.environ.get("CALL_US", "0"))


def native_gil_part(ms):
    if CALL_US:  # the short-calls variant: the same time in calls of CALL_US us
        for _ in range(int(ms * 1000 / CALL_US)):
            gt.spin_gil(CALL_US / 1000)
    else:
        gt.spin_gil(ms)


def native_nogil_part(ms):
    gt.spin_nogil(ms)


def system_part(ms):
    gt.sleep_nogil(ms)


def main():
    spent = dict.fromkeys(HOT, 0.0)
    pc = time.perf_counter
    for _ in range(ROUNDS):
        t0 = pc()
        python_part(180_000)
        t1 = pc()
        native_gil_part(MS)
        t2 = pc()
        native_nogil_part(MS)
        t3 = pc()
        system_part(MS)
        t4 = pc()
        for name, a, b in zip(HOT, (t0, t1, t2, t3), (t1, t2, t3, t4)):
            spent[name] += b - a
    if os.environ.get("TRUTH_OUT"):
        with open(os.environ["TRUTH_OUT"], "w") as f:
            json.dump(spent, f)
    print("cpu_split done")


main()
'''

MEMORY_PROGRAM = '''
import threading
import _groundtruth as gt

ROUNDS = 60
MIB = 1 << 20
HOT = ["python_alloc", "native_alloc", "python_leak", "native_leak",
       "copy_part", "keep_small", "temp_big", "thread_alloc"]
kept = []
handles = []


def python_alloc(n):
    for _ in range(n):
        block = bytearray(MIB)
        del block


def native_alloc(n):
    for _ in range(n):
        gt.malloc_free(MIB)


def python_leak():
    kept.append(bytearray(MIB))


def native_leak():
    handles.append(gt.malloc_bytes(MIB))


def copy_part(total):
    gt.memcpy_bytes(total, 64 * 1024)


def keep_small():
    kept.append(bytearray(200_000))


def temp_big():
    block = bytearray(500_000)
    return len(block)


def thread_alloc():
    handles.append(gt.malloc_bytes_nogil(2 * MIB))


def main():
    for _ in range(ROUNDS):
        python_alloc(10)
        native_alloc(10)
        python_leak()
        native_leak()
        copy_part(20 * MIB)
        for _ in range(5):
            keep_small()
            temp_big()
        worker = threading.Thread(target=thread_alloc)
        worker.start()
        worker.join()
        gt.sleep_nogil(20)
    print("memory done", len(kept), len(handles))


main()
'''

# The truth for memory.py, per function: MB allocated, Python share, leaks,
# MB copied. memcpy_bytes allocates its two 64 KiB buffers once per call.
MEM_ROUNDS = 60
MEM_TRUTH = {
    "python_alloc": {"mb": 10 * MEM_ROUNDS, "python": 1.0, "leak": False, "copy_mb": 0.0},
    "native_alloc": {"mb": 10 * MEM_ROUNDS, "python": 0.0, "leak": False, "copy_mb": 0.0},
    "python_leak": {"mb": MEM_ROUNDS, "python": 1.0, "leak": True, "copy_mb": 0.0},
    "native_leak": {"mb": MEM_ROUNDS, "python": 0.0, "leak": True, "copy_mb": 0.0},
    "copy_part": {"mb": 2 * 64 / 1024 * MEM_ROUNDS, "python": 0.0, "leak": False,
                  "copy_mb": 20.0 * MEM_ROUNDS},
    # A small kept buffer beside a bigger freed temporary, both under the 1 MiB
    # window: net-volume sampling charged the growth to the temporary.
    "keep_small": {"mb": 5 * 200_000 / (1 << 20) * MEM_ROUNDS, "python": 1.0, "leak": True, "copy_mb": 0.0},
    "temp_big": {"mb": 5 * 500_000 / (1 << 20) * MEM_ROUNDS, "python": 1.0, "leak": False, "copy_mb": 0.0},
    # 2 MiB malloc'd with the GIL released by a thread that ends at once.
    "thread_alloc": {"mb": 2 * MEM_ROUNDS, "python": 0.0, "leak": True, "copy_mb": 0.0},
}
CPU_KIND = {"python_part": "python", "native_gil_part": "native",
            "native_nogil_part": "native", "system_part": "system"}

CPU_TOOLS = ["pyrometer", "scalene", "py-spy", "pyinstrument", "cProfile",
             "line_profiler"]
MEM_TOOLS = ["pyrometer", "scalene", "memray", "memory_profiler"]
# The short-calls variant: only the tools that tell native from Python time.
SHORT_CALL_TOOLS = ["pyrometer", "scalene", "py-spy"]
SHORT_CALL_US = 40
PARTS = {"cpu", "memory"}  # --parts: which programs to run


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_extension(out_dir: Path) -> Path:
    """Build _groundtruth with tests/conftest.py's build_groundtruth."""
    spec = importlib.util.spec_from_file_location(
        "pyrometer_tests_conftest", REPO / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = conftest   # dataclasses look the module up
    spec.loader.exec_module(conftest)
    return conftest.build_groundtruth(out_dir)


def function_ranges(program: Path) -> dict:
    """name -> (first, last) line of each top-level function."""
    tree = ast.parse(program.read_text())
    return {n.name: (n.lineno, n.end_lineno) for n in tree.body
            if isinstance(n, ast.FunctionDef)}


def function_of(ranges: dict, lineno: int) -> str | None:
    for name, (a, b) in ranges.items():
        if a <= lineno <= b:
            return name
    return None


def run(cmd: list, env: dict, cwd: Path, timeout: float = 300):
    proc = subprocess.run(cmd, env=env, cwd=str(cwd), capture_output=True,
                          text=True, errors="replace", timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"exit status {proc.returncode}: "
                           + bench.short(proc.stderr or proc.stdout))
    return proc


def venv_json(code: str, *args) -> object:
    """Run code in bench/.venv's python (where the peers' readers live)."""
    proc = subprocess.run([str(bench.venv_bin("python")), "-c", code,
                           *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(bench.short(proc.stderr))
    return json.loads(proc.stdout)


def file_entry(files: dict, program: Path) -> dict:
    for key, entry in files.items():
        if Path(key).name == program.name:
            return entry
    raise RuntimeError(f"{program.name} not in the profile's files")


# ------------------------------------------------------------ the profiles --
# Each reader returns, per function: for CPU {"python","native","system"}
# seconds (a tool without the split gives {"total"}), for memory {"mb",
# "python" (share or None), "leak" (bool or None), "copy_mb" (or None)}.

def pyrometer_lines(program, prof):
    return file_entry(prof["files"], program)


def by_function(program, entry, memory, line_figures):
    """Per-function sums of a Scalene-format file entry (pyrometer's and Scalene's
    JSON share the layout); line_figures(line) gives (python_s, native_s,
    system_s, mb, copy_mb) of one line in the tool's own units."""
    ranges = function_ranges(program)
    res: dict = {}
    for ln in entry["lines"]:
        f = function_of(ranges, ln["lineno"])
        if f is None:
            continue
        r = res.setdefault(f, {"python": 0.0, "native": 0.0, "system": 0.0,
                               "mb": 0.0, "pymb": 0.0, "copy_mb": 0.0,
                               "leak": False})
        python, native, system, mb, copy_mb = line_figures(ln)
        r["python"] += python
        r["native"] += native
        r["system"] += system
        if memory:
            r["mb"] += mb
            r["pymb"] += mb * ln.get("n_python_fraction", 0.0)
            r["copy_mb"] += copy_mb
    for lineno in entry.get("leaks", {}) or {}:
        f = function_of(ranges, int(lineno))
        if f:
            res.setdefault(f, {"mb": 0.0, "pymb": 0.0, "copy_mb": 0.0})["leak"] = True
    return finish_memory(res) if memory else res


def read_pyrometer(program, work, env, memory):
    out = work / "pyrometer.json"
    run([sys.executable, "-m", "pyrometer", "--json", "--outfile", str(out),
         str(program)], env, work)
    prof = json.loads(out.read_text())
    return by_function(program, pyrometer_lines(program, prof), memory, lambda ln: (
        ln.get("n_cpu_python_sec", 0.0), ln.get("n_cpu_native_sec", 0.0),
        ln.get("n_sys_sec", 0.0), ln.get("n_malloc_bytes", 0) / MB,
        ln.get("n_copy_bytes", 0) / MB))


def finish_memory(res):
    for r in res.values():
        r["python"] = r["pymb"] / r["mb"] if r.get("mb") else None
        r.setdefault("leak", False)
    return res


def read_scalene(program, work, env, memory):
    out = work / "scalene.json"
    run([str(bench.venv_bin("python")), "-m", "scalene", "run",
         *([] if memory else ["--cpu-only"]), "-o", str(out), str(program)],
        env, work)
    prof = json.loads(out.read_text())
    elapsed = prof.get("elapsed_time_sec") or prof.get("elapsed_time_seconds") or 0
    share = elapsed / 100  # Scalene's percentages are of the elapsed time
    return by_function(program, file_entry(prof["files"], program), memory, lambda ln: (
        ln.get("n_cpu_percent_python", 0.0) * share, ln.get("n_cpu_percent_c", 0.0) * share,
        ln.get("n_sys_percent", 0.0) * share, ln.get("n_malloc_mb", 0.0),
        ln.get("n_copy_mb_s", 0.0) * elapsed))


SYSTEM_LEAF = re.compile(r"sleep|poll|select|wait|futex|recv|read\b|accept",
                         re.IGNORECASE)


def read_pyspy(program, work, env, memory):
    """py-spy --native --idle --format raw: collapsed stacks with counts.

    The innermost frame in the program's file gives the function; the leaf
    frame gives the kind: a frame of a .py file is Python, a native frame
    named like a blocking call (sleep, poll, wait, futex, recv, read) is
    system, any other native frame is native. This classification is ours:
    py-spy itself reports stacks, not a split.
    """
    out = work / "pyspy.txt"
    run([str(bench.venv_bin("py-spy")), "record", "--native", "--idle",
         "--format", "raw", "-r", "100", "-o", str(out), "--",
         sys.executable, str(program)], env, work)
    ranges = function_ranges(program)
    res: dict = {}
    frame_re = re.compile(r"^(.*) \((.*?)(?::(\d+))?\)$")
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        func = None
        for fr in frames:
            m = frame_re.match(fr.strip())
            if m and m.group(2).endswith(program.name) and m.group(3):
                func = function_of(ranges, int(m.group(3))) or func
        if func is None:
            continue
        leaf = frame_re.match(frames[-1].strip())
        if leaf and leaf.group(2).endswith(".py"):
            kind = "python"
        elif SYSTEM_LEAF.search(frames[-1].split(" (")[0]):
            kind = "system"
        else:
            kind = "native"
        r = res.setdefault(func, {"python": 0.0, "native": 0.0, "system": 0.0})
        r[kind] += int(count) * 0.01
    return res


def read_pyinstrument(program, work, env, memory):
    out = work / "pyinstrument.json"
    run([str(bench.venv_bin("python")), "-m", "pyinstrument", "-r", "json",
         "-o", str(out), str(program)], env, work)
    data = json.loads(out.read_text())
    res: dict = {}

    def walk(node):
        name = node.get("function")
        if name in CPU_KIND and str(node.get("file_path", "")).endswith(program.name):
            res.setdefault(name, {"total": 0.0})["total"] += node.get("time", 0.0)
            return
        for child in node.get("children", []):
            walk(child)

    walk(data.get("root_frame", data))
    return res


def read_cprofile(program, work, env, memory):
    import pstats
    out = work / "cprofile.pstats"
    run([sys.executable, "-m", "cProfile", "-o", str(out), str(program)],
        env, work)
    res: dict = {}
    for (filename, _, name), (_, _, _, cumtime, _) in pstats.Stats(str(out)).stats.items():
        if name in CPU_KIND and filename.endswith(program.name):
            res[name] = {"total": cumtime}
    return res


LPROF_READER = r'''
import json, sys
from line_profiler import load_stats
st = load_stats(sys.argv[1])
out = {}
for (filename, first, name), rows in st.timings.items():
    out[name] = sum(t for _, _, t in rows) * st.unit
print(json.dumps(out))
'''


def read_line_profiler(program, work, env, memory):
    out = work / "prog.lprof"
    copy = bench.decorated_copy(program, work)
    run([str(bench.venv_bin("kernprof")), "-l", "-o", str(out), str(copy)],
        env, work)
    per = venv_json(LPROF_READER, out)
    return {name: {"total": t} for name, t in per.items() if name in CPU_KIND}


MEMRAY_READER = r'''
import json, sys
from memray import FileReader, AllocatorType as A
r = FileReader(sys.argv[1])
py = {A.PYMALLOC_MALLOC, A.PYMALLOC_CALLOC, A.PYMALLOC_REALLOC}
dealloc = {A.FREE, A.PYMALLOC_FREE, A.MUNMAP}
def where(rec):
    for fn, filename, lineno in rec.stack_trace():
        if filename.endswith(sys.argv[2]):
            return fn
    return None
out = {}
for rec in r.get_allocation_records():
    if rec.allocator in dealloc:
        continue
    fn = where(rec)
    if fn is None:
        continue
    o = out.setdefault(fn, {"bytes": 0, "py": 0, "leak_bytes": 0})
    o["bytes"] += rec.size
    if rec.allocator in py:
        o["py"] += rec.size
for rec in r.get_leaked_allocation_records(merge_threads=True):
    fn = where(rec)
    if fn is not None:
        out.setdefault(fn, {"bytes": 0, "py": 0, "leak_bytes": 0})["leak_bytes"] += rec.size
print(json.dumps(out))
'''


def read_memray(program, work, env, memory):
    """memray run --trace-python-allocators: every allocation, with the
    allocator that made it (pymalloc or the system's), read with memray's
    FileReader. A function counts as leaking when at least 1 MiB it
    allocated is still live at the end (memray's leaks view)."""
    out = work / "memray.bin"
    run([str(bench.venv_bin("memray")), "run", "--force",
         "--trace-python-allocators", "-o", str(out), str(program)], env, work)
    per = venv_json(MEMRAY_READER, out, program.name)
    res = {}
    for fn, o in per.items():
        res[fn] = {"mb": o["bytes"] / MB,
                   "python": o["py"] / o["bytes"] if o["bytes"] else None,
                   "leak": o["leak_bytes"] >= MB, "copy_mb": None}
    return res


def read_memory_profiler(program, work, env, memory):
    """python -m memory_profiler on a copy with @profile on the functions:
    its "Increment" column (change of the process's RSS, MiB) summed over
    each function's lines. It reports neither a Python/native share, nor
    leaks, nor copies."""
    copy = bench.decorated_copy(program, work)
    proc = run([str(bench.venv_bin("python")), "-m", "memory_profiler",
                str(copy)], env, work, timeout=600)
    ranges = function_ranges(copy)
    res: dict = {}
    row = re.compile(r"^\s*(\d+)\s+[\d.]+ MiB\s+(-?[\d.]+) MiB\s+\d+")
    for line in proc.stdout.splitlines():
        m = row.match(line)
        if not m:
            continue
        f = function_of(ranges, int(m.group(1)))
        if f:
            r = res.setdefault(f, {"mb": 0.0, "python": None, "leak": None,
                                   "copy_mb": None})
            r["mb"] += float(m.group(2))
    return res


READERS = {"pyrometer": read_pyrometer, "scalene": read_scalene,
           "py-spy": read_pyspy, "pyinstrument": read_pyinstrument,
           "cProfile": read_cprofile, "line_profiler": read_line_profiler,
           "memray": read_memray, "memory_profiler": read_memory_profiler}


# --------------------------------------------------------------- scoring --

def cpu_scores(truth: dict, reported: dict) -> dict:
    """Split error and time-share error, in points of the four functions'
    total time."""
    t_total = sum(truth.values())
    t_share = {f: truth[f] / t_total for f in CPU_KIND}
    if not reported:
        return {"error": "no function reported"}
    has_split = all("total" not in r for r in reported.values())
    tot = {f: (sum(reported.get(f, {}).values())) for f in CPU_KIND}
    r_total = sum(tot.values()) or 1.0
    share_err = {f: 100 * (tot[f] / r_total - t_share[f]) for f in CPU_KIND}
    out = {"share": {f: 100 * tot[f] / r_total for f in CPU_KIND},
           "truth_share": {f: 100 * t_share[f] for f in CPU_KIND},
           "share_error": share_err,
           "max_share_error": max(abs(v) for v in share_err.values())}
    if has_split:
        split_err = {}
        split = {}
        for f, kind in CPU_KIND.items():
            r = reported.get(f, {})
            split[f] = {k: 100 * r.get(k, 0.0) / r_total
                        for k in ("python", "native", "system")}
            split_err[f] = {k: split[f][k] - (100 * t_share[f] if k == kind else 0.0)
                            for k in ("python", "native", "system")}
        out["split"] = split
        out["split_error"] = split_err
        out["max_split_error"] = max(abs(v) for e in split_err.values()
                                     for v in e.values())
    return out


def memory_scores(reported: dict) -> dict:
    per = {}
    for f, t in MEM_TRUTH.items():
        r = reported.get(f, {})
        mb = r.get("mb", 0.0) if r else 0.0
        per[f] = {"mb": mb, "mb_error_pct": 100 * (mb - t["mb"]) / t["mb"],
                  "python": r.get("python") if r else None,
                  "leak": r.get("leak") if r else False,
                  "copy_mb": r.get("copy_mb") if r else 0.0}
    big = [f for f in MEM_TRUTH if MEM_TRUTH[f]["mb"] >= 10]
    out = {"per_function": per,
           "max_mb_error_pct": max(abs(per[f]["mb_error_pct"]) for f in big)}
    shares = [(per[f]["python"], MEM_TRUTH[f]["python"]) for f in big
              if per[f]["python"] is not None]
    if shares and any(per[f]["python"] is not None for f in big):
        out["max_share_error_pts"] = max(100 * abs(a - b) for a, b in shares)
        tot = sum(per[f]["mb"] for f in big) or 1.0
        pymb = sum(per[f]["mb"] * (per[f]["python"] or 0.0) for f in big)
        t_tot = sum(MEM_TRUTH[f]["mb"] for f in big)
        t_py = sum(MEM_TRUTH[f]["mb"] * MEM_TRUTH[f]["python"] for f in big)
        out["overall_share_error_pts"] = 100 * (pymb / tot - t_py / t_tot)
    if any(per[f]["leak"] is not None for f in per):
        leaks = [f for f in per if MEM_TRUTH[f]["leak"]]
        fine = [f for f in per if not MEM_TRUTH[f]["leak"]]
        out["leaks_found"] = sum(bool(per[f]["leak"]) for f in leaks)
        out["leaks_total"] = len(leaks)
        out["false_leaks"] = sum(bool(per[f]["leak"]) for f in fine)
        out["non_leaking"] = len(fine)
    if per["copy_part"]["copy_mb"] is not None:
        truth = MEM_TRUTH["copy_part"]["copy_mb"]
        out["copy_mb"] = per["copy_part"]["copy_mb"]
        out["copy_error_pct"] = 100 * (out["copy_mb"] - truth) / truth
        out["copy_elsewhere_mb"] = sum(per[f]["copy_mb"] or 0.0 for f in per
                                       if f != "copy_part")
    return out


# ------------------------------------------------------------------ main --

def study(log_to=log) -> dict:
    tool_info = bench.peer_tools(CPU_TOOLS + MEM_TOOLS)
    results = {"cpu": {}, "memory": {}, "truth": {},
               "versions": {t: i.version for t, i in tool_info.items()}}
    with tempfile.TemporaryDirectory(prefix="pyrometer-accuracy-") as tmp:
        work = Path(tmp)
        ext = build_extension(work)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ext)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cpu_prog = work / "cpu_split.py"
        cpu_prog.write_text(textwrap.dedent(CPU_PROGRAM).lstrip())
        mem_prog = work / "memory.py"
        mem_prog.write_text(textwrap.dedent(MEMORY_PROGRAM).lstrip())

        truths = []
        for i in range(3 if "cpu" in PARTS else 0):
            tenv = dict(env, TRUTH_OUT=str(work / f"truth{i}.json"))
            run([sys.executable, str(cpu_prog)], tenv, work)
            truths.append(json.loads((work / f"truth{i}.json").read_text()))
        truth = {f: statistics.median(t[f] for t in truths) for f in CPU_KIND} if truths else {}
        results["truth"]["cpu_seconds"] = truth
        results["truth"]["memory"] = MEM_TRUTH
        if truth:
            log_to(f"accuracy: CPU truth (bare, median of 3): "
                   + ", ".join(f"{f} {s:.2f} s" for f, s in truth.items()))

        variants = [("cpu", CPU_TOOLS, {}),
                    ("cpu_short_calls", SHORT_CALL_TOOLS, {"CALL_US": str(SHORT_CALL_US)})]
        if "cpu" not in PARTS:
            variants = []
        for key, tools, extra in variants:
            results[key] = {}
            for tool in tools:
                if tool != "pyrometer" and tool_info.get(tool) and tool_info[tool].error:
                    results[key][tool] = {"error": tool_info[tool].error}
                    continue
                try:
                    truth_file = work / f"truth-{key}-{tool}.json"
                    tenv = dict(env, TRUTH_OUT=str(truth_file), **extra)
                    rep = READERS[tool](cpu_prog, work, tenv, memory=False)
                    in_run = json.loads(truth_file.read_text())
                    results[key][tool] = cpu_scores(in_run, rep)
                    results[key][tool]["truth_seconds"] = in_run
                    results[key][tool]["reported"] = rep
                except Exception as e:  # a tool's failure is a result
                    results[key][tool] = {"error": f"{type(e).__name__}: {e}"}
                log_to(f"accuracy: {key} {tool}: "
                       + json.dumps({k: v for k, v in results[key][tool].items()
                                     if k.startswith("max") or k == "error"}))
        for tool in (MEM_TOOLS if "memory" in PARTS else []):
            try:
                rep = READERS[tool](mem_prog, work, env, memory=True)
                results["memory"][tool] = memory_scores(rep)
            except Exception as e:
                results["memory"][tool] = {"error": f"{type(e).__name__}: {e}"}
            log_to(f"accuracy: memory {tool}: "
                   + json.dumps({k: v for k, v in results["memory"][tool].items()
                                 if k != "per_function"}))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--tools", default=None,
                    help="comma-separated tools to run (default: all)")
    ap.add_argument("--parts", default="cpu,memory",
                    help="comma-separated: cpu, memory (default: both)")
    args = ap.parse_args(argv)
    PARTS.clear()
    PARTS.update(p for p in args.parts.split(",") if p)
    if args.tools:
        keep = set(args.tools.split(","))
        for name in ("CPU_TOOLS", "MEM_TOOLS", "SHORT_CALL_TOOLS"):
            globals()[name] = [t for t in globals()[name] if t in keep]
    res = study()
    text = json.dumps(res, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
