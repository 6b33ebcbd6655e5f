#!/usr/bin/env python3
"""Scale study: how pyrometer's own memory and its output grow with the
length of a run and with the number of files, and how its overhead changes
with the sampling rate.

    python3 bench/scale.py [--duration S] [--rounds N] [--json OUT]

- Long run: one program (a mix of pure-Python work, allocation churn and a
  slowly growing cache, looping over the same lines) runs for DURATION/4
  and for DURATION seconds under pyrometer (full profile), and bare for
  DURATION/4 (its footprint does not grow with time). For
  each: profiler_memory_bytes from the profile, the whole process's peak
  RSS (ru_maxrss from wait4), and the size of the JSON profile. Both should
  stay flat with time: the program has the same lines at any length.
- Many files: a generated program of 100 and of 1,000 modules (three
  functions each, all called in a loop for about 3 s), bare and under
  pyrometer and Scalene (full profiles): the same figures, which should grow
  with the number of distinct lines, not more.
- Sampling rate: three workloads from bench/workloads, bare and under
  pyrometer (CPU-only and full) at --cpu-sampling-rate 0.01 (its default)
  and 0.001, with Scalene (--cpu-sampling-rate) and py-spy (-r 1000) at
  the same 1 ms interval for comparison; slowdown vs bare in the same round.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402

LONG_PROGRAM = '''
import os, time
DURATION = float(os.environ["SCALE_DURATION"])
cache = {}

def python_work(n):
    return sum((i * i) % 13 for i in range(n))

def churn(n):
    rows = [{"id": i, "name": "x" * (i % 40), "vals": list(range(i % 20))} for i in range(n)]
    return len(rows)

def grow(i):
    # A bounded cache: grows for a while, then entries are replaced.
    cache[i % 5000] = bytes(200)

def main():
    end = time.monotonic() + DURATION
    i = 0
    while time.monotonic() < end:
        python_work(20_000)
        churn(2_000)
        grow(i)
        i += 1
    print("long run", i > 0)

main()
'''

MODULE = '''
def f{i}_a(n):
    t = 0
    for k in range(n):
        t += k * {i} % 7
    return t

def f{i}_b(n):
    return [str(k) for k in range(n)]

def f{i}_c(n):
    return {{k: k * 2 for k in range(n)}}
'''

DRIVER = '''
import importlib, sys, time
N = {n}
mods = [importlib.import_module(f"gen.m{{i}}") for i in range(N)]
end = time.monotonic() + 3.0
rounds = 0
while time.monotonic() < end:
    for i, m in enumerate(mods):
        getattr(m, f"f{{i}}_a")(50)
        getattr(m, f"f{{i}}_b")(20)
        getattr(m, f"f{{i}}_c")(20)
    rounds += 1
print("many files", rounds > 0)
'''

RATE_WORKLOADS = ["raytrace", "numpy_work", "threaded"]
RATE_COMMANDS = {
    "bare": lambda w, o: [sys.executable, str(w)],
    "pyrometer --cpu-only, 10 ms": lambda w, o: [
        sys.executable, "-m", "pyrometer", "--cpu-only", "--json", "--outfile", str(o), str(w)],
    "pyrometer --cpu-only, 1 ms": lambda w, o: [
        sys.executable, "-m", "pyrometer", "--cpu-only", "--cpu-sampling-rate", "0.001",
        "--json", "--outfile", str(o), str(w)],
    "pyrometer full, 10 ms": lambda w, o: [
        sys.executable, "-m", "pyrometer", "--json", "--outfile", str(o), str(w)],
    "pyrometer full, 1 ms": lambda w, o: [
        sys.executable, "-m", "pyrometer", "--cpu-sampling-rate", "0.001", "--json",
        "--outfile", str(o), str(w)],
    "scalene --cpu-only, 1 ms": lambda w, o: [
        str(bench.venv_bin("python")), "-m", "scalene", "run", "--cpu-only",
        "--cpu-sampling-rate", "0.001", "-o", str(o), str(w)],
    "py-spy, 1 ms": lambda w, o: [
        str(bench.venv_bin("py-spy")), "record", "-r", "1000", "-o", str(o), "--",
        sys.executable, str(w)],
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# On Linux a forked child's ru_maxrss starts at its parent's peak RSS (the
# high-water mark survives fork and exec), so a command started straight
# from this (large) process would report at least this process's peak. A
# small launcher (python -S, about 10 MB) forks the command and reports the
# command's own ru_maxrss (its largest waited-for descendant included).
LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def measure(cmd: list, env: dict, cwd: Path, timeout: float = 900) -> dict:
    """Wall time, peak RSS (MB, of the command alone) and exit status."""
    rss_file = cwd / ".maxrss"
    rss_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-S", "-c", LAUNCHER, str(rss_file), *map(str, cmd)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    try:
        maxrss = int(rss_file.read_text()) / 1024
    except (OSError, ValueError):
        maxrss = usage.ru_maxrss / 1024
    return {"seconds": time.perf_counter() - start, "maxrss_mb": maxrss,
            "status": proc.returncode,
            "error": bench.short(err) if proc.returncode else None}


def profile_figures(out: Path, scalene: bool = False) -> dict:
    if not out.exists():
        return {"output_kb": None}
    fig = {"output_kb": out.stat().st_size / 1024}
    try:
        data = json.loads(out.read_text())
    except ValueError:
        return fig
    fig["files"] = len(data.get("files", {}))
    fig["lines"] = sum(len(f.get("lines", [])) for f in data.get("files", {}).values())
    if not scalene:
        fig["profiler_memory_kb"] = data.get("profiler_memory_bytes", 0) / 1024
    return fig


def long_run(duration: float, work: Path, env: dict) -> list:
    prog = work / "long_run.py"
    prog.write_text(textwrap.dedent(LONG_PROGRAM).lstrip())
    rows = []
    for d in (duration / 4, duration):
        denv = dict(env, SCALE_DURATION=str(d))
        if d == duration / 4:   # the bare footprint does not change with time
            bare = measure([sys.executable, str(prog)], denv, work)
        out = work / "long.json"
        out.unlink(missing_ok=True)
        prof = measure([sys.executable, "-m", "pyrometer", "--json", "--outfile",
                        str(out), str(prog)], denv, work)
        row = {"duration_s": d, "bare_rss_mb": bare["maxrss_mb"],
               "pyrometer_rss_mb": prof["maxrss_mb"], "error": prof["error"],
               **profile_figures(out)}
        log(f"scale: long run {d:.0f} s: {row}")
        rows.append(row)
    return rows


def many_files(work: Path, env: dict) -> list:
    rows = []
    for n in (100, 1000):
        d = work / f"files{n}"
        (d / "gen").mkdir(parents=True, exist_ok=True)
        (d / "gen" / "__init__.py").write_text("")
        for i in range(n):
            (d / "gen" / f"m{i}.py").write_text(textwrap.dedent(MODULE.format(i=i)).lstrip())
        prog = d / "driver.py"
        prog.write_text(textwrap.dedent(DRIVER.format(n=n)).lstrip())
        bare = measure([sys.executable, str(prog)], env, d)
        row = {"modules": n, "bare_rss_mb": bare["maxrss_mb"], "bare_s": bare["seconds"]}
        out = d / "p.json"
        prof = measure([sys.executable, "-m", "pyrometer", "--json", "--outfile", str(out),
                        str(prog)], env, d)
        row["pyrometer"] = {"rss_mb": prof["maxrss_mb"], "seconds": prof["seconds"],
                            "error": prof["error"], **profile_figures(out)}
        out = d / "s.json"
        sc = measure([str(bench.venv_bin("python")), "-m", "scalene", "run", "-o", str(out),
                      str(prog)], env, d)
        row["scalene"] = {"rss_mb": sc["maxrss_mb"], "seconds": sc["seconds"],
                          "error": sc["error"], **profile_figures(out, scalene=True)}
        log(f"scale: {n} files: {row}")
        rows.append(row)
    return rows


def sampling_rate(rounds: int, scale: float, work: Path, env: dict) -> dict:
    env = dict(env, BENCH_SCALE=str(scale), OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    rng = random.Random()
    ratios: dict = {}
    for rnd in range(rounds):
        for name in RATE_WORKLOADS:
            w = bench.WORKLOADS_DIR / f"{name}.py"
            order = list(RATE_COMMANDS)
            rng.shuffle(order)
            secs = {}
            for label in order:
                out = work / "rate.out"
                out.unlink(missing_ok=True)
                r = measure(RATE_COMMANDS[label](w, out), env, work)
                if r["status"] == 0:
                    secs[label] = r["seconds"]
                log(f"scale: rate round {rnd + 1} {name} {label}: "
                    f"{r['seconds']:.2f} s" + (f" FAILED {r['error']}" if r["status"] else ""))
            for label, s in secs.items():
                if label != "bare" and "bare" in secs:
                    ratios.setdefault(label, {}).setdefault(name, []).append(s / secs["bare"])
    return {label: {name: statistics.median(v) for name, v in ratios[label].items()}
            for label in RATE_COMMANDS if label in ratios}


def study(duration: float, rounds: int, scale: float = 1.0) -> dict:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="pyrometer-scale-") as tmp:
        work = Path(tmp)
        return {"duration_s": duration,
                "long_run": long_run(duration, work, env),
                "many_files": many_files(work, env),
                "sampling_rate": sampling_rate(rounds, scale, work, env),
                "rate_rounds": rounds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120.0,
                    help="seconds of the long run (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="BENCH_SCALE")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    res = study(args.duration, args.rounds, args.scale)
    text = json.dumps(res, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
