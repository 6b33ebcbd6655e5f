"""The verdict: what bounds a run, in one or two sentences at the top of every
report.  Decided once, from the profile's own figures (the run's times, every
line's times, memory and copy volumes, GPU busy time), by model.build and, for
a saved profile written before there was a verdict, by model.check; the
renderers only show it.  The rule and the measurements its thresholds come
from are in docs/how-it-works.md ("The verdict")."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable

from .rules import FEW_SAMPLES  # too rough to name a bound, as the reports say
from .units import MB, display_name

# What can bound a run, in the words of the JSON's `bound` field.
BOUNDS = ("python_cpu", "native_cpu", "system", "gil_wait", "cpu_wait", "allocation_churn", "copying",
          "gpu_idle", "none", "unknown")

# A kind of time bounds the run when it is at least half of its time (the own
# time; for CPU wait, the judged time) and at least MARGIN times the next kind:
# a 51/48 split is no single bound, so sampling noise does not flip one bound
# into another.
MAJORITY = 50.0
MARGIN = 1.5
# Threads wait for the GIL: programs whose threads do not contend measure 0-1%,
# two and four threads running bytecode 41-77% of the own time (2-core machine
# at load 4-12).
GIL_WAIT = 20.0
# CPU work (Python + native) at least this share before its memory traffic is
# judged, and the rates (per second of CPU) that make churn or copying the bound:
# ordinary programs measure 0.03-1.1 GB/s allocated and 0-0.7 GB/s copied, loops
# that churn buffers or copy them 6-77 GB/s (how-it-works.md, "The verdict").
CPU_BOUND = 50.0
CHURN_MB_PER_CPU_SEC = 3072.0
CHURN_FREED = 0.5
COPY_MB_PER_CPU_SEC = 3072.0
# Copying rather than churn when the bytes copied are at least this share of
# the bytes allocated: a copy into a new object (bytes(buf), a.copy())
# allocates what it copies, and the copy is what a user removes.
COPY_OF_ALLOC = 0.5
# The GPU idles when it is busy less than this share of the run while the CPU works.
GPU_BUSY = 50.0
# The lines named, at most, and the least share of the bound's figure a named line has.
LINES = 3
LINE_MIN = 0.01
# The summary says the machine was busy when the program waited this share of
# its time for a CPU (and that is not the bound).
BUSY_NOTE = 10.0

_TIME_KINDS = (("python", "n_cpu_python_sec", "Python"), ("native", "n_cpu_native_sec", "native"),
               ("system", "n_sys_sec", "system"), ("gil_wait", "n_gil_wait_sec", "GIL wait"),
               ("cpu_wait", "n_cpu_wait_sec", "CPU wait"))


def _overlapped(run: dict[str, Any]) -> float:
    """The system time taken as overlapping the program's own work.
    Time is charged per thread (and per process), so a thread waiting in
    join(), a queue, a lock or pool.map() while others compute is system time
    as much as a sleep is; but it waits for the program's own work, which is
    then what bounds the run.  Each second a thread runs, or waits for the GIL
    or a CPU, covers at most one second of the run's wall time, so the wall
    time during which the program did nothing but wait in system calls is at
    least wall - (everything else); system time beyond that is taken as
    overlapping the program's own work.  Exact for one thread; with several,
    the time the program only waited is a lower bound, so the overlap may be
    more than the truth (how-it-works.md, "The verdict": known limits).
    With one thread in one process and no CPU of threads without Python
    state, nothing ran while the program waited: none (a one-thread
    program's lines summed over its wall on a busy machine, and the verdict
    said it left out 0.13 s that threads waited for)."""
    if (int(run.get("threads") or 0) <= 1 and int(run.get("process_count") or 1) <= 1
            and not run.get("untracked_native_sec")):
        return 0.0
    cpu = run["cpu_time_sec"]
    system = _system(run)
    busy = sum(cpu.get(k, 0.0) for k in ("python", "native", "gil_wait", "cpu_wait"))
    wall = max(run.get("elapsed_time_sec", 0.0) - run.get("paused_sec", 0.0), 0.0)
    return max(0.0, system - max(0.0, wall - busy))


def _system(run: dict[str, Any]) -> float:
    """Time off CPU waiting in system calls: the lines' system time and the
    time event loops sat idle waiting for their timers and sockets (in no
    line's and no share of the profile, but the same waiting: an asyncio
    program that awaits sleeps and sockets is bound by them)."""
    return run["cpu_time_sec"].get("system", 0.0) + run.get("event_loop_idle_sec", 0.0)


def _bytes(e: dict[str, Any], name: str, mb_name: str | None = None) -> float:
    if name in e:
        return float(e[name])
    return float(e.get(mb_name, 0.0)) * MB if mb_name else 0.0


def _pct(x: float) -> str:
    return f"{x:.0f}%" if x >= 1 or x == 0 else "<1%"


def _rate(mb: float) -> str:
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def decide(run: dict[str, Any], entries: Iterable[tuple[str, dict[str, Any]]],
           shown: Callable[[str, int], bool] | None = None) -> dict[str, Any]:
    """The verdict of a run.  run: the profile's top-level fields; entries:
    (filename, line entry) for every line with figures, in the profile's field
    names, the lines a report does not show (@profile) included where known;
    shown(filename, lineno): whether the report shows that line."""
    entries = [(f, e) for f, e in entries]
    n_cpus = int(run.get("n_cpus") or 0)
    t = _Times(run)
    samples = int(run.get("cpu_samples") or 0)
    evidence: dict[str, Any] = {
        "samples": samples,
        "total_time_sec": run["total_time_sec"],
        "event_loop_idle_sec": t.idle,
        "overlapped_wait_sec": t.overlapped,
        "judged_time_sec": t.judged,
        "own_time_sec": t.own,
        "cpu_wait_percent": t.cpu_wait,
        **{f"{k}_percent": v for k, v in t.share.items()},
        "allocated_mb_per_cpu_sec": None, "freed_fraction": None, "copy_mb_per_cpu_sec": None,
        "gpu_busy_percent": None,
    }
    if run.get("memory"):
        evidence.update(_memory_evidence(run, entries, t.cpu_sec))
    if run.get("gpu") and run.get("gpu_time_sec", 0.0) > 0:
        devices = max(1, len(run.get("gpu_devices") or ()))
        wall = max(run.get("elapsed_time_sec", 0.0) - run.get("paused_sec", 0.0), 0.0)
        evidence["gpu_busy_percent"] = min(100.0, 100.0 * run["gpu_time_sec"] / devices / wall) if wall > 0 else 0.0

    own_bound = _own_bound(t.share, t.cpu_share, evidence) if samples >= FEW_SAMPLES and t.own > 0 else "unknown"
    bound = own_bound
    if samples < FEW_SAMPLES or t.judged <= 0:
        bound = "unknown"
    elif t.cpu_wait >= MAJORITY and t.cpu_wait >= MARGIN * max(v * (100.0 - t.cpu_wait) / 100.0
                                                              for v in t.share.values()):
        # Waiting for a CPU bounds the run when it is most of the judged time, by a margin.
        bound = "cpu_wait"
    measure, unit = _MEASURES[bound]
    if bound == "cpu_wait" and t.folded:
        measure = _line_waits
    picked = _picked_lines(entries, measure, unit, shown) if measure is not None else []
    evidence["lines_percent"] = min(100.0, sum(p["percent"] for p in picked))
    own_words = _OWN_WORDS[own_bound](t.share, t.cpu_share, evidence) if own_bound in _OWN_WORDS else ""
    summary = _summary(bound, t.share, t.cpu_wait, t.cpu_share, evidence, picked, n_cpus, own_words)
    return {"bound": bound, "own_bound": own_bound, "summary": summary, "evidence": evidence, "lines": picked}


class _Times:
    """A run's time as the verdict judges it: each kind's seconds, the time
    judged (an event loop's idle time in, waits overlapped by other threads'
    work out), the program's own share of each kind and CPU wait's of the
    judged time."""

    def __init__(self, run: dict[str, Any]):
        cpu = run["cpu_time_sec"]
        self.idle = run.get("event_loop_idle_sec", 0.0)
        total = run["total_time_sec"] + self.idle
        self.overlapped = _overlapped(run)
        self.judged = max(total - self.overlapped, 0.0)
        seconds = {"python": cpu.get("python", 0.0), "native": cpu.get("native", 0.0),
                   "system": max(_system(run) - self.overlapped, 0.0),
                   "gil_wait": cpu.get("gil_wait", 0.0), "cpu_wait": cpu.get("cpu_wait", 0.0)}
        self.folded = (run.get("threads") or 0) <= max(1, run.get("process_count") or 1)
        if self.folded:
            # One thread per process waits for no GIL: what was read as GIL wait
            # there is time off the CPU that the kernel's run-queue count missed
            # (how-it-works.md, "A snapshot"), so on a busy machine it is CPU wait.
            # The sampler counts it so itself now (cpu_window.gil_alone); this
            # stays for profiles of older builds that pyrometer view reads.
            seconds["cpu_wait"] += seconds["gil_wait"]
            seconds["gil_wait"] = 0.0
        # CPU wait is the machine's doing: a share of the judged time.  The other
        # kinds are the program's own: shares of the time it ran or waited on its
        # own account, so that a busy machine does not hide what the program does.
        self.own = max(self.judged - seconds["cpu_wait"], 0.0)
        self.share = {k: (100.0 * v / self.own if self.own > 0 else 0.0) for k, v in seconds.items()
                      if k != "cpu_wait"}
        self.cpu_wait = 100.0 * seconds["cpu_wait"] / self.judged if self.judged > 0 else 0.0
        self.cpu_sec = seconds["python"] + seconds["native"]
        self.cpu_share = self.share["python"] + self.share["native"]


def _memory_evidence(run: dict[str, Any], entries: list, cpu_sec: float) -> dict[str, float]:
    """How much the run allocated, freed and copied per second of CPU: its
    lines', its threads' without Python frames and what went to no line."""
    threads = run.get("native_threads") or {}
    elsewhere = run.get("unattributed_memory") or {}
    allocated = sum(_bytes(e, "n_malloc_bytes", "n_malloc_mb") for _, e in entries) / MB
    freed = sum(_bytes(e, "n_free_bytes") for _, e in entries) / MB
    copied = sum(_bytes(e, "n_copy_bytes") for _, e in entries) / MB
    allocated += threads.get("malloc_mb", 0.0) + elsewhere.get("malloc_mb", 0.0)
    freed += threads.get("free_mb", 0.0) + elsewhere.get("free_mb", 0.0)
    copied += threads.get("copy_mb", 0.0) + elsewhere.get("copy_mb", 0.0)
    return {"allocated_mb_per_cpu_sec": allocated / cpu_sec if cpu_sec > 0 else 0.0,
            "freed_fraction": min(1.0, freed / allocated) if allocated > 0 else 0.0,
            "copy_mb_per_cpu_sec": copied / cpu_sec if cpu_sec > 0 else 0.0}


def _picked_lines(entries: list, measure: Callable, unit: str,
                  shown: Callable[[str, int], bool] | None) -> list[dict[str, Any]]:
    """The lines that hold most of what bounds the run (measure), LINES at most."""
    picked = []
    values = [(measure(e), f, e) for f, e in entries]
    of_bound = sum(v for v, _, _ in values)
    # A line with less than LINE_MIN of the figure makes nothing so: not named.
    values = sorted((x for x in values if x[0] > 0 and x[0] >= LINE_MIN * of_bound),
                    key=lambda x: (-x[0], x[1], x[2]["lineno"]))[:LINES]
    for value, filename, e in values:
        visible = True if shown is None else bool(shown(filename, e["lineno"]))
        picked.append({"filename": filename, "lineno": e["lineno"],
                       # A line the report does not show (@profile) is named by its place
                       # only: the report holds no source outside the decorated functions.
                       "line": str(e.get("line", "")).strip() if visible else "",
                       "value": value / MB if unit == "MB" else value, "unit": unit,
                       # (rounding can put a line holding all of it a hair above 100)
                       "percent": min(100.0, 100.0 * value / of_bound) if of_bound > 0 else 0.0,
                       "shown": visible})
    return picked


# The program's own bound in a few words, where a busy machine bounds the run.
_OWN_WORDS = {
    "python_cpu": lambda sh, c, ev: f"Python CPU ({_pct(sh['python'])} bytecode)",
    "native_cpu": lambda sh, c, ev: f"native CPU ({_pct(sh['native'])})",
    "system": lambda sh, c, ev: f"system time ({_pct(sh['system'])} off CPU in system calls)",
    "gil_wait": lambda sh, c, ev: f"waiting for the GIL ({_pct(sh['gil_wait'])})",
    "allocation_churn": lambda sh, c, ev: f"allocation churn ({_rate(ev['allocated_mb_per_cpu_sec'])} allocated "
                                          "per second of CPU)",
    "copying": lambda sh, c, ev: f"copying ({_rate(ev['copy_mb_per_cpu_sec'])} per second of CPU)",
    "gpu_idle": lambda sh, c, ev: f"the GPU idle ({_pct(ev['gpu_busy_percent'])} busy) while the CPU works",
    "none": lambda sh, c, ev: "no single bound (" + ", ".join(
        f"{dict((k, label) for k, _, label in _TIME_KINDS)[k]} {_pct(v)}"
        for k, v in sorted(sh.items(), key=lambda kv: -kv[1]) if v >= 5) + ")",
}


def _own_bound(share: dict[str, float], cpu_share: float, evidence: dict[str, Any]) -> str:
    """The program's own bound, CPU wait left out: the rule, first match wins
    (how-it-works.md, "The verdict")."""
    ranked = sorted(share.items(), key=lambda kv: -kv[1])
    (first, top), (_, second) = ranked[0], ranked[1]
    majority = top >= MAJORITY and top >= MARGIN * second
    gpu = evidence["gpu_busy_percent"]
    if gpu is not None and gpu < GPU_BUSY and cpu_share >= CPU_BOUND:
        return "gpu_idle"
    if share["gil_wait"] >= GIL_WAIT:
        return "gil_wait"
    if cpu_share >= CPU_BOUND and evidence["allocated_mb_per_cpu_sec"] is not None:
        allocated, copied = evidence["allocated_mb_per_cpu_sec"], evidence["copy_mb_per_cpu_sec"]
        if copied >= COPY_MB_PER_CPU_SEC and copied >= COPY_OF_ALLOC * allocated:
            return "copying"
        if allocated >= CHURN_MB_PER_CPU_SEC and evidence["freed_fraction"] >= CHURN_FREED:
            return "allocation_churn"
    if majority and first in ("python", "native", "system"):
        return {"python": "python_cpu", "native": "native_cpu", "system": "system"}[first]
    return "none"


def _seconds_of(field: str) -> Callable[[dict[str, Any]], float]:
    return lambda e: float(e.get(field, 0.0))


def _line_waits(e: dict[str, Any]) -> float:
    return float(e.get("n_cpu_wait_sec", 0.0)) + float(e.get("n_gil_wait_sec", 0.0))


def _line_time(e: dict[str, Any]) -> float:
    return sum(float(e.get(field, 0.0)) for _, field, _ in _TIME_KINDS)


# Per bound: the figure each line is ranked by, and its unit.
_MEASURES: dict[str, tuple[Callable[[dict[str, Any]], float] | None, str]] = {
    "python_cpu": (_seconds_of("n_cpu_python_sec"), "s"),
    "native_cpu": (_seconds_of("n_cpu_native_sec"), "s"),
    # With an event loop's idle time in the bound, the lines where its
    # coroutines wait (await time) are the lines that make it so.
    "system": (lambda e: float(e.get("n_sys_sec", 0.0)) + float(e.get("n_await_sec", 0.0)), "s"),
    "gil_wait": (_seconds_of("n_gil_wait_sec"), "s"),
    "cpu_wait": (_seconds_of("n_cpu_wait_sec"), "s"),
    "allocation_churn": (lambda e: _bytes(e, "n_malloc_bytes", "n_malloc_mb"), "MB"),
    "copying": (lambda e: _bytes(e, "n_copy_bytes"), "MB"),
    "gpu_idle": (lambda e: float(e.get("n_cpu_python_sec", 0.0)) + float(e.get("n_cpu_native_sec", 0.0)), "s"),
    "none": (_line_time, "s"),
    "unknown": (None, "s"),
}

_ADVICE = {
    "python_cpu": "Make those lines do less work, vectorise them (numpy) or move them to compiled code "
                  "(Cython, a C extension).",
    "native_cpu": "Call that native code less often or on less data, use a faster routine, or run it in "
                  "parallel (threads, if it releases the GIL, or processes).",
    "system": "Wait less there: batch or buffer the I/O, overlap it with work (threads, asyncio), or drop "
              "the sleeps.",
    "gil_wait": "Threads running Python take turns: use processes, or code that releases the GIL.",
    "cpu_wait": "Run it on a less loaded machine, or with fewer busy threads and processes than CPUs.",
    "allocation_churn": "Reuse buffers and arrays instead of building and dropping them (preallocate, "
                        "numpy's out=, in-place operations).",
    "copying": "Avoid the copies: slice with memoryview, work in place, use numpy views.",
    "gpu_idle": "Keep the GPU fed: move that work to the GPU, or overlap it with the GPU's (prefetch, "
                "load data asynchronously).",
}


def _where(picked: list[dict[str, Any]]) -> str:
    parts = []
    for p in picked:
        figure = _pct(p["percent"]) if p["unit"] == "s" else f"{_rate(p['value'])}, {_pct(p['percent'])}"
        parts.append(f"{display_name(p['filename'])}:{p['lineno']} ({figure})")
    return ", ".join(parts)


def _on_lines(picked: list[dict[str, Any]], evidence: dict[str, Any], what: str = "of it") -> str:
    if not picked:
        return ""
    n = len(picked)
    lines = "one line" if n == 1 else f"{('two', 'three')[n - 2] if n <= 3 else n} lines"
    hidden = "" if all(p["shown"] for p in picked) else " (not all of them in the @profile functions shown)"
    return f", {_pct(evidence['lines_percent'])} {what} on {lines}: {_where(picked)}{hidden}"


def _summary(bound: str, share: dict[str, float], cpu_wait: float, cpu_share: float, evidence: dict[str, Any],
             picked: list[dict[str, Any]], n_cpus: int, own_words: str) -> str:
    if bound == "unknown":
        return (f"Too few samples ({evidence['samples']}) to tell what bounds this run: a longer run or a "
                "lower --cpu-sampling-rate gives a verdict.")
    overlapped = evidence["overlapped_wait_sec"]
    of_time = "of the time"
    on = _on_lines(picked, evidence)
    if bound == "python_cpu":
        head = f"Python CPU bounds this run: {_pct(share['python'])} {of_time} is Python bytecode{on}."
    elif bound == "native_cpu":
        head = f"Native CPU bounds this run: {_pct(share['native'])} {of_time} is in native code{on}."
    elif bound == "system":
        judged = evidence["judged_time_sec"]
        idle = 100.0 * evidence["event_loop_idle_sec"] / judged if judged > 0 else 0.0  # percent, as share
        if idle >= share["system"] / 2:
            # Mostly an idle event loop: not system time, which the header
            # says apart (an asyncio program read "System time bounds this
            # run" above "system 0.000 s").
            calls = " and system calls" if share["system"] - idle >= 5 else ""
            head = (f"Waiting bounds this run: {_pct(share['system'])} {of_time} is spent off CPU, mostly in "
                    f"idle event loops (coroutines awaiting sleeps, I/O or other tasks){calls}{on}.")
        else:
            where = "system calls (sleep, I/O, locks)" + (" and idle event loops" if idle >= 5 else "")
            head = f"System time bounds this run: {_pct(share['system'])} {of_time} is spent off CPU in {where}{on}."
    elif bound == "gil_wait":
        head = f"Waiting for the GIL bounds this run: threads wait for it {_pct(share['gil_wait'])} {of_time}{on}."
    elif bound == "cpu_wait":
        cpus = f"{n_cpus} CPU{'s' if n_cpus != 1 else ''}" if n_cpus else "CPUs"
        head = (f"Waiting for a CPU bounds this run: {_pct(cpu_wait)} {of_time} its threads were "
                f"ready to run but the machine's {cpus} were busy{on}.")
    elif bound == "allocation_churn":
        head = (f"Allocation churn bounds this run: {_rate(evidence['allocated_mb_per_cpu_sec'])} allocated per "
                f"second of CPU ({_pct(cpu_share)} {of_time} is CPU) and "
                f"{_pct(100 * evidence['freed_fraction'])} of it freed again"
                f"{_on_lines(picked, evidence, 'of the allocation')}.")
    elif bound == "copying":
        head = (f"Copying bounds this run: {_rate(evidence['copy_mb_per_cpu_sec'])} copied (memcpy) per "
                f"second of CPU ({_pct(cpu_share)} {of_time} is CPU)"
                f"{_on_lines(picked, evidence, 'of the copying')}.")
    elif bound == "gpu_idle":
        head = (f"The GPU idles while the CPU works: the GPU was busy {_pct(evidence['gpu_busy_percent'])} of "
                f"the run while CPU work was {_pct(cpu_share)} {of_time}{_on_lines(picked, evidence, 'of that')}.")
    else:
        names = dict((k, label) for k, _, label in _TIME_KINDS)
        ranked = [f"{names[k]} {_pct(v)}" for k, v in sorted(share.items(), key=lambda kv: -kv[1]) if v >= 5]
        head = (f"No single bound: the time is split ({', '.join(ranked) or 'nothing dominates'})"
                + (f"; most of it on {_where(picked)}" if picked else "") + ".")
    tail = ""
    if bound != "cpu_wait" and cpu_wait >= BUSY_NOTE:
        tail = (f" The machine was busy besides: the program also waited for a CPU {_pct(cpu_wait)} of the "
                "time (not in the shares above).")
    if bound == "cpu_wait" and own_words:
        tail = f" Of the time it ran or waited on its own: {own_words}."
    if overlapped >= 0.05 * evidence["total_time_sec"]:
        tail += (f" Not counted: {overlapped:.2f} s that threads waited for the program's own work elsewhere "
                 "(join, queues, locks, child processes).")
    return head + tail if bound == "none" else f"{head} {_ADVICE[bound]}{tail}"
