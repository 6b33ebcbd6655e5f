"""pyrometer's overhead counted in instructions (callgrind), per program of a
suite: a figure this machine's noise does not move, beside bench/run.py's
wall and CPU times.

    python3 bench/instructions.py [--suite pyperformance|own] [--only A,B]
                                  [--scale 0.1] [--jobs 2] [--write]

Each program runs under `valgrind --tool=callgrind` bare, under pyrometer
--cpu-only and under pyrometer's full profile, and the instructions each
executed (every thread and every process, pyrometer's own included) are
compared.  Under callgrind a program runs tens of times slower than natively,
while pyrometer's sampler keeps its clock: left alone, it would take tens of
times more samples per unit of the program's work than in a real run.  So
each program's slowdown under callgrind is measured first (its bare run
there against its bare run natively, wall time), and pyrometer's sampling
interval is that many times its default (10 ms) for the program: each
profile's `cpu_samples` is reported beside the number a native run takes
(the native bare time over 10 ms), which shows how near the scaling came.
Memory is sampled by bytes allocated, which callgrind does not change.

Each program is counted twice, short and long, to keep callgrind's hours to
minutes: pyperformance's programs at one loop and at --scale of their loops
(0.1: about 0.25 s natively; at least two loops), bench/workloads' at half
of --scale and at --scale.  Each command's instructions are a line through
the two counts: what grows with the work is counted per unit of it, the rest
(start-up, imports, the profile's making and writing) once, and the ratio is
given at the program's full length (bench/run.py's loops, about 2.5 s
natively).  An empty program is counted too, for start-up and exit alone.
What a profile costs to make and write grows with what it holds (its call
stacks, its lines with data), which grows with the work but less and less:
the line through a short and a long count puts that growth in every unit and
overstates a long run (regex_v8's full profile read 1.218x that way from 1
and 7 loops, and 1.134x counted at its full 67).  `--scale 1` makes the long
count the full-length run itself (pyperformance: some two hours of two
CPUs for the suite), so that the ratios are counted, not drawn.

Where the instructions go: callgrind's self cost per object file (the
interpreter, libc, pyrometer's core `_core*.so` and its memory library
`libpyrometer_memhooks.so`), the tool's run less bare's per object.

Instructions are not time (cache misses, branch mispredictions and the
kernel's work are not in them, and pyrometer's system calls are counted by
their user-space side only).  Nor are they free of noise: memory sampling is
random (each process seeds it afresh), and the interpreter's own work moves
with where its objects lie (its type attribute cache is indexed by
addresses, and a profiler's imports move the program's objects): in one
run richards read 1.038x under --cpu-only and 1.000x under the full profile,
which does all that --cpu-only does and more; a loop of it cost 6.8% more
under --cpu-only in one pair of runs and less than bare in another.  The
columns of pyrometer's own code (its core, its memory library) are what it
executes itself; --repeat counts each profiled command several times
(median).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import run as bench_run  # bench/run.py: its workloads, commands and environment

DEFAULT_INTERVAL = 0.01   # pyrometer's --cpu-sampling-rate default, seconds
INTERVAL_MIN, INTERVAL_MAX = 0.0001, 1.0  # what --cpu-sampling-rate takes
SAMPLES_TOLERANCE = 0.15  # samples under callgrind against a native run's
DEFAULT_SCALE = 0.1
TOOLS = ["pyrometer", "pyrometer-full"]
OBJECTS = {  # callgrind's object files, grouped: name -> what the file name contains
    "core": "_core.",
    "memhooks": "libpyrometer_memhooks",
    "python": "python3",  # the interpreter's binary or libpython3.x.so
    "libc": "libc.so",
}
RESULTS = bench_run.BENCH_DIR / "results"


def log(msg: str) -> None:
    print(f"instructions: {msg}", file=sys.stderr, flush=True)


def callgrind_self_cost(path: Path) -> dict[str, int]:
    """Instructions executed in each object file of one callgrind output file
    (self cost: a call's inclusive cost line, after `calls=`, is skipped)."""
    names: dict[str, str] = {}
    per_object: dict[str, int] = {}
    current = "?"
    skip_next = False
    with open(path, errors="replace") as f:
        for line in f:
            if skip_next:
                skip_next = False
                continue
            c = line[:1]
            if c.isdigit() or c in "+-*":
                fields = line.split()
                if len(fields) >= 2:
                    per_object[current] = per_object.get(current, 0) + int(fields[1])
            elif line.startswith(("ob=", "cob=")):
                # An object's name is given once, where it is first met (an
                # `ob=` or a call's `cob=`), and by its number after that.
                m = re.match(r"c?ob=(\(\d+\))?\s*(.*)", line.rstrip("\n"))
                ident, name = m.group(1), m.group(2)
                if ident and name:
                    names[ident] = name
                if line.startswith("ob="):
                    current = names.get(ident, name) if ident else name
            elif line.startswith("calls="):
                skip_next = True
    return per_object


def group_objects(per_object: dict[str, int]) -> dict[str, int]:
    out = {"total": sum(per_object.values())}
    for group, needle in OBJECTS.items():
        out[group] = sum(n for ob, n in per_object.items()
                         if needle in os.path.basename(ob))
    return out


def command(tool: str, script: Path, outdir: Path, interval: float) -> tuple[list, Path | None]:
    """bench/run.py's command for tool, with pyrometer's sampling interval set."""
    cmd, profile = bench_run.command_for(tool, script, outdir)
    if tool in TOOLS:
        at = cmd.index("pyrometer") + 1
        cmd[at:at] = ["--cpu-sampling-rate", f"{interval:.6g}"]
    return cmd, profile


def native_seconds(script: Path, env: dict, outdir: Path) -> float:
    """The shortest of three native bare runs' wall time."""
    best = float("inf")
    for _ in range(3):
        cmd, _ = bench_run.command_for("bare", script, outdir)
        start = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=outdir, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - start)
    return best


def counted(tool: str, script: Path, env: dict, outdir: Path, interval: float,
            tag: str) -> dict:
    """One run of tool on script under callgrind: instructions per object
    group (every process), wall seconds, and pyrometer's cpu_samples."""
    cmd, profile = command(tool, script, outdir, interval)
    prefix = outdir / f"cg.{script.stem}.{tool}.{tag}"
    for old in outdir.glob(prefix.name + ".*"):
        old.unlink()
    vg = ["valgrind", "--tool=callgrind", "--trace-children=yes",
          f"--callgrind-out-file={prefix}.%p", "--dump-instr=no", "--dump-line=no"]
    start = time.perf_counter()
    proc = subprocess.run(vg + cmd, env=dict(env, PYTHONHASHSEED="0"), cwd=outdir,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, errors="replace")
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        # Not callgrind's own lines (its summary ends every process's output):
        # what the command said, which is what tells why.
        said = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("==")).strip()
        raise RuntimeError(f"{tool} on {script.name} under callgrind ({' '.join(map(str, cmd))}): "
                           f"exit status {proc.returncode}: {said[-1500:] or bench_run.short(proc.stderr, 400)}")
    per_object: dict[str, int] = {}
    for out in sorted(outdir.glob(prefix.name + ".*")):
        for ob, n in callgrind_self_cost(out).items():
            per_object[ob] = per_object.get(ob, 0) + n
        out.unlink()
    result = {"seconds": seconds, "instructions": group_objects(per_object)}
    if profile is not None:
        data = json.loads(profile.read_text())
        result["cpu_samples"] = data.get("cpu_samples")
    return result


def median_run(runs: list[dict]) -> dict:
    """The run whose total is the median (its objects stay consistent)."""
    ordered = sorted(runs, key=lambda r: r["instructions"]["total"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["totals"] = [r["instructions"]["total"] for r in runs]
    return chosen


def measure(script: Path, env: dict, outdir: Path, repeat: int) -> dict:
    native = native_seconds(script, env, outdir)
    bare = counted("bare", script, env, outdir, DEFAULT_INTERVAL, "0")
    slowdown = bare["seconds"] / native
    interval = min(INTERVAL_MAX, DEFAULT_INTERVAL * slowdown)
    expected = bare["seconds"] / interval  # native / DEFAULT_INTERVAL, unless the interval was clamped
    # Under callgrind the sampler keeps less than its interval's share of
    # samples (each waits for the program's thread to be scheduled by
    # valgrind, which runs one thread at a time): one CPU-only count shows by
    # how much, and the interval is shortened to match once.
    first = counted("pyrometer", script, env, outdir, interval, "probe")
    got = first.get("cpu_samples") or 0
    if expected >= 10 and got and abs(got / expected - 1) > SAMPLES_TOLERANCE:
        # Within what the option takes (a program that kept more samples than
        # its share, xml_etree, had its interval raised past 1 s: pyrometer
        # refused it, exit status 2).
        interval = min(INTERVAL_MAX, max(INTERVAL_MIN, interval * got / expected))
        first = None
    out = {"native_seconds": native, "slowdown": slowdown, "interval": interval,
           "expected_samples": expected, "bare": bare}
    for tool in TOOLS:
        runs = [first] if tool == "pyrometer" and first is not None else []
        runs += [counted(tool, script, env, outdir, interval, str(i))
                 for i in range(len(runs), repeat)]
        out[tool] = median_run(runs)
    return out


def measure_short(script: Path, env: dict, outdir: Path, interval: float,
                  repeat: int) -> dict:
    """The same counts on the short run, at the long run's interval."""
    out = {"bare": counted("bare", script, env, outdir, interval, "s0")}
    for tool in TOOLS:
        out[tool] = median_run([counted(tool, script, env, outdir, interval, f"s{i}")
                                for i in range(repeat)])
    return out


def total(run: dict, group: str = "total") -> int:
    return run["instructions"][group]


def full_length(program: dict, tool: str, group: str = "total") -> dict:
    """tool's cost at the program's full length, from its two counts: the
    instructions of bare and of tool each a line through (units, count), so
    that what does not grow with the work (start-up, the imports, the
    profile's making and writing) is counted once and the rest per unit.
    Returns bare's and the tool's instructions at full length, and the
    tool's extra per unit of work and fixed."""
    short, long = program["short"], program["long"]
    n_s, n_l, n_full = program["units"]
    per_unit_bare = (total(long["bare"], group) - total(short["bare"], group)) / (n_l - n_s)
    extra_s = total(short[tool], group) - total(short["bare"], group)
    extra_l = total(long[tool], group) - total(long["bare"], group)
    per_unit_extra = (extra_l - extra_s) / (n_l - n_s)
    fixed = extra_s - per_unit_extra * n_s
    bare_full = total(short["bare"], group) + per_unit_bare * (n_full - n_s)
    return {"bare": bare_full, "extra": fixed + per_unit_extra * n_full,
            "per_unit_bare": per_unit_bare, "per_unit_extra": per_unit_extra,
            "fixed": fixed}


def fmt_m(n: float) -> str:
    return f"{n / 1e6:,.0f}"


def report(results: dict, empty: dict, repeat: int, suite: str, elapsed: float) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True,
                              text=True).stdout.strip()
    lines = [
        f"Instructions (callgrind), suite {suite}, {repeat} count(s) of each profiled "
        f"run (median). Run on {when}, {elapsed / 60:.1f} min in all.",
        "",
        f"- Machine: {bench_run.cpu_model()}, {bench_run.usable_cpus()} usable CPUs; "
        f"Python {platform.python_version()} ({sys.executable}); {valgrind}.",
        "- Commands: bench/run.py's `pyrometer` (--cpu-only) and `pyrometer-full`, "
        "with `--cpu-sampling-rate` scaled by the program's slowdown under callgrind, "
        "`PYTHONHASHSEED=0`.",
        "- Columns: the units of work (pyperformance: loops) of the two counted runs and "
        "of the full-length run (bench/run.py's); bare's instructions (millions) at "
        "full length; each command's ratio to bare at full length ("
        + ("counted there: the long count is the full-length run"
           if all(r["units"][1] == r["units"][2] for r in results.values()) else
           "from the two counts: what grows with the work per unit, the rest once; "
           "`--scale 1` counts it at full length instead") + "), its fixed cost "
        "(start-up, imports, the profile made and written; millions) and its samples "
        "against a native run's (the long count's); and the full profile's cost per "
        "unit of work, over bare's, by where it ran: pyrometer's core, its memory "
        "library, the interpreter (the program's own code slowed beside pyrometer's), "
        "libc.",
        "",
        "| program | units | bare (M) | CPU-only | fixed (M) | samples | full | fixed (M) "
        "| samples | full per unit: core | memory library | interpreter | libc |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ratios = {tool: {} for tool in TOOLS}
    for name, r in results.items():
        n_s, n_l, n_full = r["units"]
        cells = [name, f"{n_s:g}, {n_l:g} of {n_full:g}"]
        for tool in TOOLS:
            f = full_length(r, tool)
            ratios[tool][name] = (f["bare"] + f["extra"]) / f["bare"]
            if tool == TOOLS[0]:
                cells.append(fmt_m(f["bare"]))
            cells += [f"{ratios[tool][name]:.3f}x", fmt_m(f["fixed"]),
                      f"{r['long'][tool].get('cpu_samples')} / {r['expected_samples']:.0f}"]
        per_unit = full_length(r, "pyrometer-full")["per_unit_bare"]
        for group in OBJECTS:
            share = full_length(r, "pyrometer-full", group)["per_unit_extra"] / per_unit
            cells.append(f"{share * 100:+.1f}%")
        lines.append("| " + " | ".join(cells) + " |")

    def stat(tool, f) -> str:
        return f"{f(ratios[tool].values()):.3f}x" if ratios[tool] else ""
    lines.append(f"| **median** |  |  | **{stat('pyrometer', statistics.median)}** |  |  "
                 f"| **{stat('pyrometer-full', statistics.median)}** |  |  |  |  |  |  |")
    lines.append(f"| worst |  |  | {stat('pyrometer', max)} |  |  "
                 f"| {stat('pyrometer-full', max)} |  |  |  |  |  |  |")
    e = empty
    lines += [
        "",
        f"- The empty program (bench/run.py's): bare {fmt_m(total(e['bare']))} M; "
        + "; ".join(f"{t} +{fmt_m(total(e[t]) - total(e['bare']))} M" for t in TOOLS)
        + " (start-up and exit: what every run pays once).",
    ]
    spread = [(n, r[k][t]["totals"]) for n, r in results.items() for k in ("short", "long")
              for t in TOOLS if len(r[k][t]["totals"]) > 1]
    if spread:
        worst = max(spread, key=lambda x: (max(x[1]) - min(x[1])) / min(x[1]))
        lines.append(f"- Counts of one command moved by up to "
                     f"{(max(worst[1]) - min(worst[1])) / min(worst[1]) * 100:.1f}% "
                     f"({worst[0]}).")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", choices=bench_run.SUITES, default="pyperformance")
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                    help="BENCH_SCALE (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="counts of each profiled command, median taken (default 1)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="programs counted at once (callgrind uses one CPU each; "
                         "the slowdown that scales the interval is measured in "
                         "the same conditions; default 1)")
    ap.add_argument("--write", action="store_true",
                    help=f"write {RESULTS}/instructions-SUITE.md and .json "
                         "(instructions-SUITE-full-length.* with --scale 1)")
    args = ap.parse_args(argv)
    if args.scale <= 0 or args.repeat < 1 or args.jobs < 1:
        ap.error("--scale must be positive, --repeat and --jobs at least 1")
    if subprocess.run(["valgrind", "--version"], capture_output=True).returncode != 0:
        ap.error("valgrind is not installed (Debian: apt-get install valgrind)")
    tool = bench_run.pyrometer_tool()
    if tool.error:
        ap.error(tool.error)

    wanted = [n.strip().removeprefix("bm_").removesuffix(".py")
              for n in args.only.split(",") if n.strip()]
    # Each program's two counted runs, as (BENCH_SCALE, units of work), and its
    # full length in units.  pyperformance's loops are whole: one, and the
    # scale's share but at least two; bench/workloads' scale is continuous.
    plans = {}
    if args.suite == "pyperformance":
        import pyperf_suite
        scripts = pyperf_suite.prepare(bench_run.PYPERF_CACHE, wanted)
        loops = json.loads((bench_run.PYPERF_CACHE / "loops.json").read_text())
        for s in scripts:
            n = loops[s.stem.removeprefix("bm_")]
            long = max(2, round(n * args.scale))
            plans[s.stem] = ((1 / n, 1), (long / n, long), n)
    else:
        scripts = [s for s in sorted(bench_run.WORKLOADS_DIR.glob("*.py"))
                   if not wanted or s.stem in wanted]
        plans = {s.stem: ((args.scale / 2, 0.5), (args.scale, 1), 1 / args.scale)
                 for s in scripts}
    if not scripts:
        ap.error("no program to count")

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pyrometer-instructions-") as tmp:
        outdir = Path(tmp)
        empty_script = outdir / "empty.py"
        empty_script.write_text(bench_run.EMPTY_PROGRAM)
        empty = measure(empty_script, bench_run.workload_env(1, 1), outdir, args.repeat)

        failed: dict[str, str] = {}

        def one(script: Path) -> tuple[str, dict | None]:
            try:
                return counted_program(script)
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                # One program's failure (a command that failed under callgrind,
                # a profile not written) is reported, and the others counted.
                log(f"{script.stem}: FAILED: {e}")
                failed[script.stem] = str(e)
                return script.stem, None

        def counted_program(script: Path) -> tuple[str, dict]:
            own = outdir / script.stem
            own.mkdir()
            (scale_s, n_s), (scale_l, n_l), n_full = plans[script.stem]
            long = measure(script, bench_run.workload_env(scale_l, 1), own, args.repeat)
            short = measure_short(script, bench_run.workload_env(scale_s, 1), own,
                                  long["interval"], args.repeat)
            result = {"units": (n_s, n_l, n_full), "short": short, "long": long,
                      "expected_samples": long["expected_samples"]}
            log(f"{script.stem}: " + ", ".join(
                f"{t} {1 + full_length(result, t)['extra'] / full_length(result, t)['bare']:.3f}x"
                for t in TOOLS) + f" at full length (interval {long['interval'] * 1e3:.0f} ms)")
            return script.stem, result

        with ThreadPoolExecutor(args.jobs) as pool:
            results = {name: r for name, r in sorted(pool.map(one, scripts)) if r is not None}
    elapsed = time.perf_counter() - started
    text = report(results, empty, args.repeat, args.suite, elapsed)
    if failed:
        text += "".join(f"- {name} FAILED, not in the table: {bench_run.short(why, 600)}\n"
                        for name, why in sorted(failed.items()))
    print(text)
    if args.write:
        RESULTS.mkdir(exist_ok=True)
        name = f"instructions-{args.suite}" + ("-full-length" if args.scale == 1 else "")
        (RESULTS / f"{name}.md").write_text(
            f"# pyrometer's overhead in instructions: {args.suite}\n\n"
            f"`python3 bench/instructions.py {' '.join(argv or sys.argv[1:])}`\n\n" + text)
        (RESULTS / f"{name}.json").write_text(json.dumps(
            {"plans": plans, "empty": empty, "results": results, "failed": failed}, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
