"""The profile built: the C core's aggregates turned into the one document that
every renderer reads (terminal, JSON, web page, exports).  Field names follow
Scalene's JSON where Scalene reports the same quantity; docs/profile-schema.md
lists every field with its unit.  Renderers never recompute these numbers."""

from __future__ import annotations

import math
import os
import sys
import tokenize
from collections import defaultdict

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from .units import MB, display_name
from .rules import limits, significant
from .schema import SCHEMA_VERSION, QuietLine
from .stacks import call_stacks

NS = 1e-9


# A file's lines as last read, by name, with the (mtime, size) they were read
# at: a process that builds many profiles (one per test under pytest
# --pyrometer) read the same test file again for each (more-itertools'
# test_more.py, 6,000 lines: 1.5 ms a test, a third of the plugin's cost).
_FILE_LINES: dict[str, tuple[tuple[int, int], list[str]]] = {}
_FILE_LINES_MAX = 256


def _source_lines(filename: str, sources: dict[str, str] | None = None) -> list[str]:
    """A reported file's lines (the caller reads them, never changes them): the
    text kept for a pseudo-file (-c, standard input), the file, or the member
    of the zip archive it is in (a zipapp)."""
    if sources and filename in sources:
        return sources[filename].splitlines()
    try:
        st = os.stat(filename)
        version = (st.st_mtime_ns, st.st_size)
        kept = _FILE_LINES.get(filename)
        if kept is not None and kept[0] == version:
            return kept[1]
        with tokenize.open(filename) as f:  # honours the file's coding line
            lines = [line.rstrip("\r\n") for line in f]
    except (OSError, SyntaxError, UnicodeDecodeError):
        return _zip_member_lines(filename)
    if len(_FILE_LINES) >= _FILE_LINES_MAX:
        _FILE_LINES.pop(next(iter(_FILE_LINES)))
    _FILE_LINES[filename] = (version, lines)
    return lines


def _zip_member_lines(filename: str) -> list[str]:
    """The lines of archive/member (as zipimport names the files it imports)."""
    import io
    import zipfile
    archive = filename
    while True:
        parent = os.path.dirname(archive)
        if parent == archive:
            return []
        archive = parent
        if os.path.isfile(archive):
            break
    member = os.path.relpath(filename, archive).replace(os.sep, "/")
    try:
        with zipfile.ZipFile(archive) as z:
            data = z.read(member)
        return data.decode(tokenize.detect_encoding(io.BytesIO(data).readline)[0]).splitlines()
    except (OSError, KeyError, SyntaxError, UnicodeDecodeError, LookupError, zipfile.BadZipFile, ValueError):
        return []


# Each time figure's sampling variance, from the core's (the CPU sums'
# fields of the five kinds and their total, in ns^2), and the field of its
# stated error.
_TIME_ERRORS = (("python_var", "n_cpu_percent_python_error"), ("native_var", "n_cpu_percent_c_error"),
                ("system_var", "n_sys_percent_error"), ("gil_wait_var", "n_gil_wait_percent_error"),
                ("cpu_wait_var", "n_cpu_wait_percent_error"), ("time_var", "n_time_percent_error"))


class _Sums:
    __slots__ = ("python", "native", "system", "gil_wait", "cpu_wait", "busy", "samples", "loop_idle",
                 "await_", "variance")

    def __init__(self) -> None:
        self.python = self.native = self.system = self.gil_wait = self.cpu_wait = self.busy = 0.0
        self.loop_idle = self.await_ = 0.0
        self.samples = 0
        # seconds^2, in _TIME_ERRORS's order.  A function's is the sum of
        # its lines': as if their errors were apart, which overstates it
        # (a move between two of its lines is none of the function's).
        self.variance = [0.0] * len(_TIME_ERRORS)

    def add(self, cpu) -> None:
        """cpu: a record's CPU sums (_core.CpuSums, core/document.py)."""
        self.python += cpu.python_ns * NS
        self.native += cpu.native_ns * NS
        self.system += cpu.system_ns * NS
        self.gil_wait += cpu.gil_wait_ns * NS
        self.cpu_wait += cpu.cpu_wait_ns * NS
        self.loop_idle += cpu.loop_idle_ns * NS
        self.await_ += cpu.await_ns * NS
        self.busy += cpu.busy_ns * NS
        self.samples += cpu.samples
        for i, (field, _) in enumerate(_TIME_ERRORS):
            self.variance[i] += getattr(cpu, field) * NS * NS

    def merge(self, other: "_Sums") -> None:
        for name in ("python", "native", "system", "gil_wait", "cpu_wait", "loop_idle", "await_"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.variance = [a + b for a, b in zip(self.variance, other.variance)]

    @property
    def total(self) -> float:
        """The time in the percentages' denominator.  Neither an event loop's idle
        time nor await time is in it: await time is coroutines' time (task-seconds,
        overlapping each other and the loop's work), shown as its own share."""
        return self.python + self.native + self.system + self.gil_wait + self.cpu_wait

    def fields(self, denominator: float, await_total: float) -> dict[str, Any]:
        pct = (100.0 / denominator) if denominator > 0 else 0.0
        return {
            "n_cpu_percent_python": self.python * pct,
            "n_cpu_percent_c": self.native * pct,
            "n_sys_percent": self.system * pct,
            "n_gil_wait_percent": self.gil_wait * pct,
            "n_cpu_wait_percent": self.cpu_wait * pct,
            # Scalene's meaning: this line's share of all the await time charged
            # to the program's lines, not a share of the run time.
            "n_await_percent": min(100.0, self.await_ * 100.0 / await_total) if await_total > 0 else 0.0,
            "n_core_utilization": (self.busy / self.total) if self.total > 0 else 0.0,
            "n_cpu_python_sec": self.python,
            "n_cpu_native_sec": self.native,
            "n_sys_sec": self.system,
            "n_gil_wait_sec": self.gil_wait,
            "n_cpu_wait_sec": self.cpu_wait,
            "n_await_sec": self.await_,
            "n_samples": self.samples,
            # The half-width of each share's 95% interval, in points, as
            # memory's figures state theirs: the run's time, the
            # denominator, is measured whole; only its split is sampled.
            **{name: ERROR_SIGMAS * math.sqrt(max(v, 0.0)) * pct for (_, name), v in zip(_TIME_ERRORS,
                                                                                            self.variance)},
        }


# A line is reported as leaking when the chance that its next sampled allocation
# is never freed (Laplace's rule of succession over its watched samples) is at
# least this, while the run's footprint grew.
LEAK_LIKELIHOOD = 0.95
# A memory figure's stated error: the half-width of a 95% interval (1.96
# standard deviations of its sampling).
ERROR_SIGMAS = 1.96
LEAK_MIN_SAMPLES = 3


def _churn(r: dict[str, Any]) -> int:
    """A core record's churn: the weights of its sampled small Python blocks
    freed at once (memhooks.h, MEMHOOKS_CHURN_NS), which allocated, Python and
    freed all hold and no figure of memory allocated or held counts."""
    return r.get("churn_bytes", 0)


class _Memory:
    """Memory samples of one line or function, from the C core's records:
    allocated, Python's and freed without churn (_churn), which is apart."""
    __slots__ = ("alloc", "python", "free", "churn", "windowed", "python_windowed", "kept_windowed",
                 "kept_python_windowed", "copy", "mallocs", "net", "peak", "watched", "freed", "evicted", "timeline")

    def __init__(self) -> None:
        self.alloc = self.python = self.free = self.churn = self.copy = 0
        self.windowed = self.python_windowed = self.kept_windowed = self.kept_python_windowed = 0
        self.mallocs = self.net = self.peak = 0
        self.watched = self.freed = self.evicted = 0
        self.timeline: list = []

    def add(self, r: dict[str, Any]) -> None:
        churn = _churn(r)
        self.alloc += r["alloc_bytes"] - churn
        self.python += r["python_bytes"] - churn
        self.free += r["free_bytes"] - churn
        self.churn += churn
        self.windowed += r["window_sampled_bytes"]
        # Churn's samples are all of Python's window kind (small blocks).
        self.python_windowed += max(r["python_window_sampled_bytes"] - churn, 0)
        self.kept_windowed += max(r["window_sampled_bytes"] - r["freed_window_sampled_bytes"], 0)
        self.kept_python_windowed += max(r["python_window_sampled_bytes"] - r["freed_python_window_sampled_bytes"], 0)
        self.copy += r["copy_bytes"]
        self.mallocs += r["alloc_samples"]
        self.net += r["net_bytes"]
        # Lines: exact for one code object; a line run by several (functions
        # made at run time) and functions: the largest, raised to the net below.
        self.peak = max(self.peak, r["peak_bytes"])
        self.watched += r["watched"]
        self.freed += r["watched_freed"]
        self.evicted += r["watched_evicted"]
        if len(r["timeline"]) > len(self.timeline):
            self.timeline = r["timeline"]

    def errors(self, net: float, memory: dict[str, Any] | None) -> tuple[float, float]:
        """The half-widths of 95% intervals of the allocated bytes and of the
        growth `net` (ERROR_SIGMAS standard deviations).  The samples of a
        window each are a Poisson count (exponential distances between them):
        for an estimate of B bytes from them, a variance of B * window bytes
        squared, native blocks' and Python's each at their own window
        (memory["window_bytes"], memory["python_window_bytes"]); blocks of a
        window or more are their own exact samples.  The growth's are the
        samples not freed.  (Taking the growth's samples to be like all the
        allocated bytes', before, understated its error where exact blocks
        were freed: a dict's old tables, given back as it grew, made its
        kept small objects' interval miss the truth in 2 runs of 10.)"""
        if not memory or self.alloc <= 0:
            return 0.0, 0.0
        window, python_window = memory["window_bytes"], memory["python_window_bytes"]
        allocated = self.windowed * window + self.python_windowed * python_window
        kept = self.kept_windowed * window + self.kept_python_windowed * python_window
        # A growth bounded by the process's peak (fields) shrinks its error alike.
        if 0 < net < self.net:
            kept *= net / self.net
        return ERROR_SIGMAS * math.sqrt(allocated), ERROR_SIGMAS * math.sqrt(kept if net > 0 else 0.0)

    def leak_likelihood(self) -> float:
        watched = self.watched - self.evicted
        return 1.0 - (self.freed + 1) / (watched + 2) if watched >= 0 else 0.0

    def fields(self, activity: float, elapsed: float, memory: dict[str, Any] | None = None) -> dict[str, Any]:
        """memory: the run's memory figures, whose peak footprint bounds the
        line's own peak and growth, estimates from samples that weigh a window
        each: a line of short-lived small objects that had one sample live at a
        time read 1.0 MB of peak in a test whose footprint never grew, and a
        line that kept 62.5 MiB read a peak of 67-69 MB in a process whose peak
        was 62.4 MB.  What is live at the end was live at once: the peak is
        never below the growth."""
        net = self.net
        peak = max(self.peak, net, 0)
        if memory:
            top = max(memory["max_footprint_bytes"], 0)
            if memory.get("footprint_bytes", 0) >= 0:
                net = min(net, top)
                peak = min(peak, top)
            else:
                # The run freed more than it allocated (blocks made before the
                # profile, freed in it): a line may keep more than the
                # footprint ever rose, and its growth stands.
                peak = min(peak, max(top, net))
        malloc_error, growth_error = self.errors(net, memory)
        return {
            "n_malloc_mb": self.alloc / MB,
            "n_malloc_mb_error": malloc_error / MB,
            "n_churn_mb": self.churn / MB,
            "n_python_fraction": self.python / self.alloc if self.alloc else 0.0,
            "n_peak_mb": peak / MB,
            "n_growth_mb": net / MB,
            "n_growth_mb_error": growth_error / MB,
            "n_avg_mb": self.alloc / MB / self.mallocs if self.mallocs else 0.0,
            "n_mallocs": self.mallocs,
            "n_usage_fraction": (self.alloc + self.free) / activity if activity else 0.0,
            "n_copy_mb_s": self.copy / MB / elapsed if elapsed > 0 else 0.0,
            "n_malloc_bytes": self.alloc,
            "n_free_bytes": self.free,
            "n_copy_bytes": self.copy,
            "memory_samples": [[round(t, 6), round(mb, 3)] for t, mb in self.timeline],
        }


_NO_MEMORY = _Memory()


def _quiet_figures(denominator: float, await_total: float, gpu_used: bool, gpu_total: float,
                   gpu_kernels: bool, memory: dict[str, Any] | None, activity: float,
                   elapsed: float) -> dict[str, Any]:
    """The figures of a line with nothing measured (QuietLine), as every
    line's are made."""
    figures = _Sums().fields(denominator, await_total)
    if gpu_used:
        figures.update(_NO_GPU.fields(gpu_total, gpu_kernels))
    if memory:
        figures.update(_NO_MEMORY.fields(activity, elapsed, memory))
    return figures


# The kernel tier's sums of a line (_core.GpuLineSums's fields after NVML's),
# added up as they are.
GPU_LAUNCHED = ("kernel_ns", "kernels", "copy_htod_bytes", "copy_dtoh_bytes", "copy_dtod_bytes", "copy_other_bytes",
                "memset_bytes", "alloc_bytes")


class _Gpu:
    """GPU samples of one line or function (csrc/gpu/gpu.h): busy device-time,
    and the process's GPU memory at the polls that found the program there;
    with the kernel tier, what the line launched (kernel device time, copies by
    direction, memsets, allocations)."""
    __slots__ = ("busy", "memory_sum", "memory_samples", "peak", "launched")

    def __init__(self) -> None:
        self.busy = self.memory_sum = 0.0
        self.memory_samples = self.peak = 0
        self.launched = [0] * len(GPU_LAUNCHED)

    def add(self, sums) -> None:
        """A line's GPU sums from the core (_core.GpuLineSums)."""
        self.busy += sums.busy_ns * NS
        self.memory_sum += sums.memory_sum_bytes
        self.memory_samples += sums.memory_samples
        self.peak = max(self.peak, sums.memory_peak_bytes)
        for i, name in enumerate(GPU_LAUNCHED):
            self.launched[i] += getattr(sums, name)

    def fields(self, total_busy: float, kernels: bool = False) -> dict[str, Any]:
        out = {
            # Scalene's meaning: this line's share of the run's GPU busy time.
            "n_gpu_percent": min(100.0, self.busy * 100.0 / total_busy) if total_busy > 0 else 0.0,
            "n_gpu_sec": self.busy,
            "n_gpu_avg_memory_mb": self.memory_sum / self.memory_samples / MB if self.memory_samples else 0.0,
            "n_gpu_peak_memory_mb": self.peak / MB,
        }
        if kernels:
            kernel_ns, count, htod, dtoh, dtod, other, memset, alloc = self.launched
            out.update({
                "n_gpu_kernel_sec": kernel_ns * NS,
                "n_gpu_kernels": count,
                "n_gpu_copy_mb": (htod + dtoh + dtod + other) / MB,
                "n_gpu_copy_htod_mb": htod / MB,
                "n_gpu_copy_dtoh_mb": dtoh / MB,
                "n_gpu_copy_dtod_mb": dtod / MB,
                "n_gpu_memset_mb": memset / MB,
                "n_gpu_alloc_mb": alloc / MB,
            })
        return out


_NO_GPU = _Gpu()


def _gpu_run(gpu: dict[str, Any] | None, options: dict[str, Any]) -> tuple[bool, dict[str, Any], list[str]]:
    """Whether the profile has GPU data, the top-level GPU fields, and the
    notices about the GPU (one line when it was asked for and is missing, or
    when the library failed)."""
    if gpu is None:
        return False, {"gpu_status": "off"}, []
    status, why = gpu["status"], gpu.get("why", "")
    notices = list(gpu.get("notices", []))
    if status != "ok" or not gpu["devices"]:
        reason = why or "the GPU library was still starting when the program ended"
        if gpu.get("explicit") or status == "failed":
            notices.insert(0, f"GPU not profiled: {reason}")
        return False, {"gpu_status": reason}, notices
    devices = gpu["devices"]
    busy = sum(d["busy_ns"] for d in devices) * NS
    by_process = any(d["source"] == "process" for d in devices)
    return True, {**_gpu_kernel_run(gpu.get("kernels")),
        "gpu_status": "profiled",
        "gpu_device": ", ".join(d["name"] for d in devices),
        "gpu_utilization_source": "process" if by_process else "device",
        "gpu_time_sec": busy,
        "gpu_unattributed_sec": gpu["unattributed_busy_ns"] * NS,
        "gpu_peak_memory_mb": gpu["peak_memory_bytes"] / MB,
        "gpu_devices": [{"name": d["name"], "busy_sec": d["busy_ns"] * NS,
                         "peak_memory_mb": d["peak_memory_bytes"] / MB,
                         "utilization_source": d["source"], "shared": d["shared"],
                         "samples": d["samples"]} for d in devices],
    }, notices


def _gpu_kernel_run(kernels: dict[str, Any] | None) -> dict[str, Any]:
    """The kernel tier's top-level fields: its status always ("off" when not
    asked for), its totals when it ran."""
    if kernels is None:
        return {"gpu_kernel_tier": "off"}
    out: dict[str, Any] = {"gpu_kernel_tier": kernels["status"]}
    if kernels["status"] == "on":
        out.update({
            "gpu_kernel_library": kernels["library"],
            "gpu_kernels": kernels["kernels"],
            "gpu_copies": kernels["copies"],
            "gpu_memsets": kernels["memsets"],
            "gpu_allocations": kernels["allocations"],
            "gpu_kernel_time_sec": kernels["kernel_ns"] * NS,
            "gpu_kernel_unattributed_sec": kernels["unattributed_kernel_ns"] * NS,
            "gpu_copy_htod_mb": kernels["copy_htod_bytes"] / MB,
            "gpu_copy_dtoh_mb": kernels["copy_dtoh_bytes"] / MB,
            "gpu_copy_dtod_mb": kernels["copy_dtod_bytes"] / MB,
            # Launches too many to note, records whose launch was never noted,
            # records the library could not write: charged to no line, or lost.
            "gpu_kernel_records_lost": kernels["lost_launches"] + kernels["lost_records"]
            + kernels["dropped_records"],
        })
    return out


def build(raw: dict[str, Any], *, program: str, argv: list[str], options: dict[str, Any],
          elapsed: float, start_time: float, exit_status: int | None,
          ended_by: str | None = "exit", notices: list[str] | None = None,
          sources: dict[str, str] | None = None,
          processes: list[dict[str, Any]] | None = None, process_count: int | None = None,
          listing: str = "whole") -> dict[str, Any]:
    """ended_by: how the run ended ("exit", "exec", "os._exit", a signal's name,
    "unknown"), None for a snapshot of a run still going; notices: lines a reader
    must see, besides those the data itself calls for; sources: the text of
    pseudo-files that are the program's own (-c: "<string>", standard input:
    "<stdin>"), which no file holds; processes: the process table (the first
    process, then its children: children.merge), whose aggregates raw already
    holds; process_count: how many processes in all (the table may be cut);
    listing: which of a file's lines have entries: "whole" its whole source
    listing (what the reports show); "around" its lines with data and a little
    context around each (the pytest plugin's merged profile: more-itertools'
    13,238 listed lines, 337 of them with data, were 9.8 MB of JSON and a
    fifth of a second at the end of every run); "data" its lines with data
    only, and neither call stacks nor a verdict, for a profile read by code,
    never shown (the plugin's per-test summaries: a test file of 5,000 lines
    made 500 entries per test, 70% of the plugin's cost per test; the
    verdict and the stacks were 40% of what was left)."""
    if listing not in ("whole", "around", "data"):
        raise ValueError(f"listing must be whole, around or data, not {listing!r}")
    fig = _Figures(raw, options, elapsed)
    focus = Focus(raw.get("profiled_functions", []))
    shown = _Listing(fig, options, focus, listing, sources)
    files: dict[str, Any] = {}
    # Every line with figures, shown or not (@profile, --reduced-profile): the
    # verdict is about the whole run.
    every_entry: list[tuple[str, dict[str, Any]]] = []
    for filename in sorted(fig.lines):
        if focus.covers_file(filename):
            files[filename] = shown.file(filename, every_entry)
        else:
            every_entry.extend(shown.hidden(filename, lambda n: False))
    profile = _profile_fields(raw, fig, focus, files, program=program, argv=argv, options=options, elapsed=elapsed,
                              start_time=start_time, exit_status=exit_status, ended_by=ended_by, notices=notices,
                              processes=processes, process_count=process_count, listing=listing)
    if listing == "data":
        return profile
    from .verdict import decide
    profile["verdict"] = decide(profile, every_entry,
                                lambda filename, lineno: focus.covers_file(filename) and focus.lines_of(filename)(lineno))
    return profile


def _profile_fields(raw: dict[str, Any], fig: _Figures, focus: Focus, files: dict[str, Any], *, program: str,
                    argv: list[str], options: dict[str, Any], elapsed: float, start_time: float,
                    exit_status: int | None, ended_by: str | None, notices: list[str] | None,
                    processes: list[dict[str, Any]] | None, process_count: int | None,
                    listing: str) -> dict[str, Any]:
    """The profile: the run's fields around its files (build's arguments)."""
    return {
        "pyrometer_schema": SCHEMA_VERSION,
        "program": program,
        "args": argv[1:],
        "python_version": sys.version.split()[0],
        "platform": sys.platform,
        "start_time_absolute": start_time,
        "elapsed_time_sec": elapsed,
        # The first process's wall time paused (pyrometer.stop(), --off, --off --pid):
        # none of it is charged, so every percentage is of the time not paused.
        "paused_sec": raw.get("paused_ns", 0) * NS,
        "exit_status": exit_status,
        "ended_by": ended_by,
        "options": options,
        "cpu_sampling_rate": options["cpu_sampling_rate"],
        "sampling_interval_sec": raw["mean_interval_ns"] * NS,
        "cpu_samples": raw["snapshots"],
        "cpu_samples_main_thread": raw["main_snapshots"],
        "cpu_peeks": raw.get("spread_peeks", 0),
        "cpu_spreads": raw.get("spreads", 0),
        "threads": raw["threads_seen"],
        "n_cpus": raw["n_cpus"],
        "process_cpu_time_sec": raw["process_cpu_ns"] * NS,
        "profiler_cpu_time_sec": raw["sampler_cpu_ns"] * NS,
        "untracked_native_sec": raw["untracked_native_ns"] * NS,
        "profiler_memory_bytes": raw["profiler_memory_bytes"],
        "code_objects": raw["code_objects"],
        "code_objects_seen": raw["code_objects_seen"],
        "total_time_sec": fig.denominator,
        "cpu_time_sec": {
            "python": fig.every_line.python + fig.unattributed.python,
            "native": fig.every_line.native + fig.unattributed.native,
            "system": fig.every_line.system,
            "gil_wait": fig.every_line.gil_wait,
            "cpu_wait": fig.every_line.cpu_wait,
        },
        "await_time_sec": fig.await_total,
        "event_loop_idle_sec": fig.every_line.loop_idle + fig.unattributed.loop_idle,
        "unattributed": {
            "python_sec": fig.unattributed.python,
            "native_sec": fig.unattributed.native,
            "system_sec": fig.unattributed.system,
            "gil_wait_sec": fig.unattributed.gil_wait,
            "cpu_wait_sec": fig.unattributed.cpu_wait,
            "await_sec": fig.unattributed.await_,
        },
        "memory": bool(fig.memory),
        "gpu": fig.gpu_used,
        **fig.gpu_top,
        "process_count": process_count if process_count is not None else len(processes or []) or 1,
        "children_merge_sec": raw.get("merge_ns", 0) * NS,
        "processes": processes or [],
        "notices": [*(notices or []), *_notices(fig.memory, raw["functions_overflowed"]), *fig.gpu_notices, *focus.notices(
            lambda f, first, last: any(first <= n <= last for n in (*fig.lines.get(f, ()), *fig.mem_lines.get(f, ()))))],
        **(_run_memory(fig.memory, focus.memory_lines(fig.mem_lines), elapsed) if fig.memory else {}),
        "profiled_functions": focus.fields(),
        # The whole run's, even with @profile: a stack passes through lines
        # outside the decorated functions.
        **({"call_stacks": stacks} if listing != "data"
           and (stacks := call_stacks(raw, bool(fig.memory), fig.gpu_used)) is not None else {}),
        "files": files,
    }


class _Figures:
    """A collection's records summed per line and per function, by kind (CPU,
    memory, GPU), and the run-wide figures each entry's shares are of: what
    every line's and function's entry is made from (entry, function_entry)."""

    def __init__(self, raw: dict[str, Any], options: dict[str, Any], elapsed: float):
        self.elapsed = elapsed
        self.lines: dict[str, dict[int, _Sums]] = defaultdict(lambda: defaultdict(_Sums))
        self.functions: dict[str, dict[tuple[str, int], _Sums]] = defaultdict(lambda: defaultdict(_Sums))
        for r in raw["records"]:  # _core.CpuLine
            self.lines[r.filename][r.lineno].add(r.cpu)
            self.functions[r.filename][(r.qualname, r.first_lineno)].add(r.cpu)
        self._add_memory(raw.get("memory"))
        self._add_gpu(raw, options)
        self.unattributed = _Sums()
        self.unattributed.add(raw["unattributed"])
        self.every_line = _Sums()
        for per_line in self.lines.values():
            for s in per_line.values():
                self.every_line.merge(s)
        # The denominator of every percentage: all time charged to reported lines, plus
        # CPU that ran where no reported line was on the stack.  Idle time of threads
        # that never touch the program's code (a pool waiting for work) is left out.
        self.denominator = self.every_line.total + self.unattributed.python + self.unattributed.native
        # Await shares are of the await time charged to the program's lines; tasks
        # whose await chain has no reported frame (a library's own tasks) are left out.
        self.await_total = self.every_line.await_
        memory = self.memory
        self.footprint_grew = bool(memory) and memory["footprint_bytes"] >= memory["window_bytes"]
        self.leak_detector = bool(memory) and memory["leak_detector"]

    def _add_memory(self, memory: dict[str, Any] | None) -> None:
        self.memory = memory
        self.mem_lines: dict[str, dict[int, _Memory]] = defaultdict(lambda: defaultdict(_Memory))
        self.mem_functions: dict[str, dict[tuple[str, int], _Memory]] = defaultdict(lambda: defaultdict(_Memory))
        self.activity = 0
        for r in (memory or {}).get("lines", []):
            self.mem_lines[r["filename"]][r["lineno"]].add(r)
            self.mem_functions[r["filename"]][(r["function"], r["function_lineno"])].add(r)
            self.activity += r["alloc_bytes"] + r["free_bytes"] - 2 * _churn(r)
            self.lines[r["filename"]]  # a file with memory samples only is still reported

    def _add_gpu(self, raw: dict[str, Any], options: dict[str, Any]) -> None:
        self.gpu_used, self.gpu_top, self.gpu_notices = _gpu_run(raw.get("gpu"), options)
        self.gpu_lines: dict[str, dict[int, _Gpu]] = defaultdict(lambda: defaultdict(_Gpu))
        self.gpu_functions: dict[str, dict[tuple[str, int], _Gpu]] = defaultdict(lambda: defaultdict(_Gpu))
        self.gpu_total = 0.0
        self.gpu_kernels = self.gpu_top.get("gpu_kernel_tier") == "on"
        if self.gpu_used:
            for r in raw["gpu"]["lines"]:  # _core.GpuLine
                self.gpu_lines[r.filename][r.lineno].add(r.gpu)
                self.gpu_functions[r.filename][(r.qualname, r.first_lineno)].add(r.gpu)
                self.lines[r.filename]  # a file with GPU samples only is still reported
            # The denominator of GPU percentages: all busy time charged, to lines or not.
            self.gpu_total = sum(g.busy for per in self.gpu_lines.values() for g in per.values()) \
                + raw["gpu"]["unattributed_busy_ns"] * NS

    def with_data(self, filename: str) -> set[int]:
        """The lines of a file with figures of any kind."""
        return set(self.lines.get(filename, ())) | set(self.mem_lines.get(filename, ())) \
            | set(self.gpu_lines.get(filename, ()))

    def entry(self, filename: str, lineno: int, text: str, kernels: bool = True) -> dict[str, Any]:
        """A line's entry: its CPU figures, and its GPU (the kernel tier's
        too when kernels) and memory figures where those were measured."""
        entry = {"lineno": lineno, "line": text}
        entry.update((self.lines[filename].get(lineno) or _Sums()).fields(self.denominator, self.await_total))
        if self.gpu_used:
            entry.update(self.gpu_lines.get(filename, {}).get(lineno, _NO_GPU)
                         .fields(self.gpu_total, kernels and self.gpu_kernels))
        if self.memory:
            entry.update(self.mem_lines.get(filename, {}).get(lineno, _NO_MEMORY)
                         .fields(self.activity, self.elapsed, self.memory))
        return entry

    def function_entry(self, filename: str, qualname: str, firstlineno: int) -> dict[str, Any]:
        key = (qualname, firstlineno)
        entry = {"lineno": firstlineno, "line": qualname}
        entry.update(self.functions[filename].get(key, _Sums()).fields(self.denominator, self.await_total))
        if self.gpu_used:
            entry.update(self.gpu_functions.get(filename, {}).get(key, _NO_GPU)
                         .fields(self.gpu_total, self.gpu_kernels))
        if self.memory:
            entry.update(self.mem_functions[filename].get(key, _NO_MEMORY)
                         .fields(self.activity, self.elapsed, self.memory))
        return entry

    def function_keys(self, filename: str) -> set[tuple[str, int]]:
        return set(self.functions[filename]) | set(self.mem_functions.get(filename, {})) \
            | set(self.gpu_functions.get(filename, {}))

    def leak(self, filename: str, lineno: int) -> dict[str, Any] | None:
        """A line's leak report, when it is reported as leaking."""
        m = self.mem_lines.get(filename, {}).get(lineno)
        if m is None or not (self.leak_detector and self.footprint_grew and m.net > 0
                             and m.watched - m.evicted >= LEAK_MIN_SAMPLES):
            return None
        likelihood = m.leak_likelihood()
        if likelihood < LEAK_LIKELIHOOD:
            return None
        return {"likelihood": likelihood, "velocity_mb_s": m.net / MB / self.elapsed if self.elapsed > 0 else 0.0,
                "growth_mb": m.net / MB}

    def quiet(self) -> dict[str, Any]:
        """The figures of a line with nothing measured (QuietLine), as every
        line's are made."""
        return _quiet_figures(self.denominator, self.await_total, self.gpu_used, self.gpu_total, self.gpu_kernels,
                              self.memory, self.activity, self.elapsed)


class _Listing:
    """What a run's files show: which lines (listing: whole, around, data),
    which of them @profile leaves (focus), which --reduced-profile keeps,
    and the one quiet figures of every line with nothing measured."""

    def __init__(self, fig: _Figures, options: dict[str, Any], focus: Focus, listing: str,
                 sources: dict[str, str] | None):
        self.fig, self.focus, self.listing, self.sources = fig, focus, listing, sources
        self.threshold, self.malloc_threshold = limits(options, bool(fig.memory))
        self.reduced = options["reduced_profile"]
        self._quiet: dict[str, Any] | None = None  # made at the first quiet line (a listing of data has none)
        self._quiet_shown = False

    def keeps(self, entry: dict[str, Any]) -> bool:
        return not self.reduced or significant(entry, self.threshold, self.malloc_threshold)

    def quiet_line(self, lineno: int, text: str) -> QuietLine | None:
        if self._quiet is None:
            self._quiet = self.fig.quiet()
            self._quiet_shown = self.keeps(self._quiet)
        return QuietLine.of(lineno, text, self._quiet) if self._quiet_shown else None

    def hidden(self, filename: str, shown, source: list[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Entries, for the verdict only, of the lines with figures that the
        report does not show (outside the @profile functions)."""
        out = []
        for lineno in sorted(self.fig.with_data(filename)):
            if shown(lineno):
                continue
            if source is None:
                source = _source_lines(filename, self.sources)
            text = source[lineno - 1] if 0 < lineno <= len(source) else ""
            out.append((filename, self.fig.entry(filename, lineno, text, kernels=False)))
        return out

    def file(self, filename: str, every_entry: list) -> dict[str, Any]:
        """A file's part of the profile; every line with figures, shown or
        not, added to every_entry (the verdict's)."""
        fig, shown = self.fig, self.focus.lines_of(filename)
        source = _source_lines(filename, self.sources)
        every_entry.extend(self.hidden(filename, shown, source))
        with_data = fig.with_data(filename)
        line_entries, leaks = [], {}
        for lineno in _lines_to_report(len(source), with_data, self.listing == "whole") \
                if self.listing != "data" else sorted(with_data):
            if not shown(lineno):
                continue
            text = source[lineno - 1] if lineno <= len(source) else ""
            if lineno not in with_data:
                quiet = self.quiet_line(lineno, text)
                if quiet is not None:
                    line_entries.append(quiet)
                continue
            entry = fig.entry(filename, lineno, text)
            leak = fig.leak(filename, lineno) if fig.memory else None
            if leak is not None:
                leaks[str(lineno)] = leak
            every_entry.append((filename, entry))
            if self.keeps(entry):
                line_entries.append(entry)
        function_entries = []
        # A decorated function is listed even when all its time is in code
        # defined inside it (a comprehension, on 3.11): the table names it.
        keys = fig.function_keys(filename) | self.focus.functions_in(filename)
        for qualname, firstlineno in sorted(keys, key=lambda k: (k[1], k[0])):
            if not shown(firstlineno):  # a decorated function, or one defined inside it
                continue
            entry = fig.function_entry(filename, qualname, firstlineno)
            if self.keeps(entry):
                function_entries.append(entry)
        file_total = _Sums()
        for lineno, s in fig.lines[filename].items():
            if shown(lineno):
                file_total.merge(s)
        return {
            "percent_cpu_time": file_total.total * 100.0 / fig.denominator if fig.denominator else 0.0,
            "cpu_time_sec": file_total.total,
            "lines": line_entries,
            "functions": function_entries,
            "imports": [],
            "leaks": leaks,
        }


class Focus:
    """@profile (focus.py): when the program decorated any function, the report
    holds only the decorated functions: every line from a function's first
    (its first decorator's) to its last, code defined inside it included (a
    nested function, lambda or comprehension is written on the function's
    lines, and a line's figures cannot be split between code objects), and in
    the function tables the decorated functions and those defined inside them.
    The run's totals (the header, the denominator of every percentage, the
    peak) stay the whole run's.  The one place this is decided: every renderer,
    and `pyrometer view` of a saved profile, shows what build() kept."""

    def __init__(self, profiled: list):
        self.sites = sorted({(str(f), str(q), int(first), max(int(first), int(last)))
                             for f, q, first, last in profiled}, key=lambda s: (s[0], s[2], s[1]))
        self.spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for filename, _, first, last in self.sites:
            self.spans[filename].append((first, last))

    def covers_file(self, filename: str) -> bool:
        return not self.sites or filename in self.spans

    def lines_of(self, filename: str):
        """Whether a line of this file is shown."""
        if not self.sites:
            return lambda lineno: True
        spans = self.spans.get(filename, ())
        return lambda lineno: any(first <= lineno <= last for first, last in spans)

    def memory_lines(self, mem_lines: dict) -> dict:
        if not self.sites:
            return mem_lines
        out = {}
        for f, per in mem_lines.items():
            shown = self.lines_of(f)
            out[f] = {n: m for n, m in per.items() if shown(n)}
        return out

    def fields(self) -> list[dict[str, Any]]:
        return [{"filename": f, "function": q, "lineno": first, "end_lineno": last}
                for f, q, first, last in self.sites]

    def functions_in(self, filename: str) -> set[tuple[str, int]]:
        return {(q, first) for f, q, first, _ in self.sites if f == filename}

    def notices(self, measured) -> list[str]:
        """measured(filename, first line, last line): whether anything was
        measured on those lines (before --reduced-profile's thresholds)."""
        if not self.sites:
            return []
        n = len(self.sites)
        out = [f"@profile: only the {n} decorated function{'s' if n != 1 else ''} (and the code written "
               "inside them) are shown; the totals above are the whole run's"]
        missing = [(f, q, first) for f, q, first, last in self.sites if not measured(f, first, last)]
        if missing:
            named = ", ".join(f"{q} ({display_name(f)}:{first})" for f, q, first in missing[:3])
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            out.append(f"@profile: nothing was measured in {named}{more}: too brief to be sampled, or "
                       "not in a file pyrometer reports (--profile-all, --profile-only)")
        return out


SITES_MAX = 100_000  # csrc/profile/sites.h
SOURCE_LINES_MAX = 20_000  # a file's listing: every line up to here
CONTEXT_LINES = 2  # beyond it, around each line with data


def _lines_to_report(source_length: int, with_data: set[int], whole: bool = True) -> list[int]:
    """The lines a file's entries cover, in order: its whole source listing (up to
    SOURCE_LINES_MAX lines; none unless whole) and every line with data, with a
    little context around those beyond the listing that the source has text
    for.  Never one entry per number up to the highest line seen: code compiled
    with two million leading newlines under a program's name would make that a
    557 MB report."""
    listing = min(source_length, SOURCE_LINES_MAX) if whole else 0
    shown = set(range(1, listing + 1))
    for lineno in with_data:
        if lineno < 1:
            continue
        shown.add(lineno)
        if lineno > listing:
            shown.update(n for n in range(lineno - CONTEXT_LINES, lineno + CONTEXT_LINES + 1)
                         if listing < n <= source_length)
    return sorted(shown)


def _run_memory(memory: dict[str, Any], mem_lines: dict, elapsed: float) -> dict[str, Any]:
    top = sorted(((m.alloc, filename, lineno, m) for filename, per in mem_lines.items()
                  for lineno, m in per.items()), key=lambda x: -x[0])[:10]
    where = memory["max_footprint_where"]
    # Churn apart, as on the lines (_churn): the unattributed part's too, as
    # its call stack (the empty one) has it.
    elsewhere_churn = memory["unattributed_churn_bytes"]
    allocated = (sum(m.alloc for per in mem_lines.values() for m in per.values())
                 + memory["native_thread_alloc_bytes"] + memory["unattributed_alloc_bytes"] - elsewhere_churn)
    churn = sum(m.churn for per in mem_lines.values() for m in per.values()) + elsewhere_churn
    return {
        "max_footprint_mb": max(memory["max_footprint_bytes"], 0) / MB,
        "max_footprint_where": {"filename": where[0], "lineno": where[1]} if where else None,
        # The same facts under Scalene's names, for tools that read Scalene's
        # JSON (scalene view): growth_rate is net growth as a percentage of all
        # bytes allocated, not a rate in time (growth_rate_mb_s is that).
        "max_footprint_fname": where[0] if where else None,
        "max_footprint_lineno": where[1] if where and where[1] > 0 else None,
        "growth_rate": 100.0 * memory["footprint_bytes"] / allocated if allocated > 0 else 0.0,
        "allocated_mb": allocated / MB,  # every byte allocated in the run (sampled), freed or not, but churn
        "churn_mb": churn / MB,  # small Python objects made and freed at once (n_churn_mb of the lines)
        "max_footprint_time_sec": memory["max_footprint_time_sec"],
        "footprint_mb": memory["footprint_bytes"] / MB,
        "growth_rate_mb_s": memory["footprint_bytes"] / MB / elapsed if elapsed > 0 else 0.0,
        "samples": [[round(t, 6), round(mb, 3)] for t, mb in memory["footprint"]],
        "top_allocations": [{"filename": f, "lineno": n, "n_malloc_mb": a / MB,
                             "n_malloc_mb_error": m.errors(m.net, memory)[0] / MB,
                             "n_python_fraction": m.python / a if a else 0.0}
                            for a, f, n, m in top if a > 0],
        "native_threads": {"malloc_mb": memory["native_thread_alloc_bytes"] / MB,
                           "free_mb": memory["native_thread_free_bytes"] / MB,
                           "copy_mb": memory["native_thread_copy_bytes"] / MB},
        "unattributed_memory": {"malloc_mb": (memory["unattributed_alloc_bytes"] - elsewhere_churn) / MB,
                                "python_mb": (memory["unattributed_python_bytes"] - elsewhere_churn) / MB,
                                "free_mb": (memory["unattributed_free_bytes"] - elsewhere_churn) / MB,
                                "copy_mb": memory["unattributed_copy_bytes"] / MB},
        "allocation_sampling_window_bytes": memory["window_bytes"],
        "python_sampling_window_bytes": memory["python_window_bytes"],
        "memory_samples_dropped": memory["dropped_samples"],
        "memory_dropped_mb": memory.get("dropped_bytes", 0) / MB,
        "memory_samples_queued": memory.get("queued_samples", 0),
        "python_allocator": memory["python_allocator"],
        "python_memory_profiled": bool(memory["python_memory_profiled"]),
        **({"python_memory_why": memory["python_memory_why"]}
           if not memory["python_memory_profiled"] and "python_memory_why" in memory else {}),
    }


def _notices(memory: dict[str, Any] | None, functions_overflowed: int = 0) -> list[str]:
    """What a reader must know to read the profile right, one line each."""
    out = []
    if functions_overflowed:
        out.append(f"more than {SITES_MAX:,} distinct functions: {functions_overflowed:,} code objects "
                   "of further ones are reported together as <other functions>")
    if memory and memory["dropped_samples"]:
        out.append(f"{memory['dropped_samples']:,} memory samples ({memory.get('dropped_bytes', 0) / MB:,.1f} MB "
                   "allocated) were dropped: the queue of samples waiting for their line was full (a C call "
                   "that allocated without end in a function met for the first time, or threads allocating "
                   "without the GIL while the main thread was held up); the lines' memory figures are short "
                   "by that much (the footprint is not)")
    if memory and not memory["python_memory_profiled"]:
        name = memory["python_allocator"]
        why = memory.get("python_memory_why") or (
            "was replaced by another tool" if name == "unknown" else "does not tell its block sizes")
        if why == "does not tell its block sizes":  # mimalloc: another allocator would do
            why = f"({name}) {why}"
            hint = " (under PYTHONMALLOC=pymalloc, malloc or debug it would be)"
        else:
            hint = ""
        out.append(f"Python's allocator {why}: Python memory is not profiled, only native memory{hint}")
    return out
