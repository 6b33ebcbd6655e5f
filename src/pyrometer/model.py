"""The profile model: the C core's aggregates turned into the one document that
every renderer reads (terminal, JSON, and later HTML).  Field names follow
Scalene's JSON where Scalene reports the same quantity; docs/profile-schema.md
lists every field with its unit.  Renderers never recompute these numbers."""

from __future__ import annotations

import math
import operator
import os
import re
import sys
import tokenize
from collections import defaultdict

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from . import contract
from .units import MB, display_name
from .stacks import MEMORY_FIGURES, TIME_FIGURES, call_stacks

SCHEMA_VERSION = 1
NS = 1e-9


def _source_lines(filename: str, sources: dict[str, str] | None = None) -> list[str]:
    """A reported file's lines: the text kept for a pseudo-file (-c, standard
    input), the file, or the member of the zip archive it is in (a zipapp)."""
    if sources and filename in sources:
        return sources[filename].splitlines()
    try:
        with tokenize.open(filename) as f:  # honours the file's coding line
            return [line.rstrip("\r\n") for line in f]
    except (OSError, SyntaxError, UnicodeDecodeError):
        return _zip_member_lines(filename)


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


class _Sums:
    __slots__ = ("python", "native", "system", "gil_wait", "cpu_wait", "busy", "samples", "loop_idle",
                 "await_")

    def __init__(self) -> None:
        self.python = self.native = self.system = self.gil_wait = self.cpu_wait = self.busy = 0.0
        self.loop_idle = self.await_ = 0.0
        self.samples = 0

    def add(self, cpu: tuple) -> None:
        """cpu: a record's CPU sums (contract.CPU_SUMS)."""
        self.python += cpu[contract.PYTHON] * NS
        self.native += cpu[contract.NATIVE] * NS
        self.system += cpu[contract.SYSTEM] * NS
        self.gil_wait += cpu[contract.GIL_WAIT] * NS
        self.cpu_wait += cpu[contract.CPU_WAIT] * NS
        self.loop_idle += cpu[contract.LOOP_IDLE] * NS
        self.await_ += cpu[contract.AWAIT] * NS
        self.busy += cpu[contract.BUSY] * NS
        self.samples += cpu[contract.SAMPLES]

    def merge(self, other: "_Sums") -> None:
        for name in ("python", "native", "system", "gil_wait", "cpu_wait", "loop_idle", "await_"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

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


# The kernel tier's sums of a line, after NVML's (contract.GPU_LINE_SUMS).
GPU_KERNEL_SUMS = len(contract.GPU_LINE_SUMS) - contract.GPU_KERNEL_NS


class _Gpu:
    """GPU samples of one line or function (csrc/gpu/gpu.h): busy device-time,
    and the process's GPU memory at the polls that found the program there;
    with the kernel tier, what the line launched (kernel device time, copies by
    direction, memsets, allocations)."""
    __slots__ = ("busy", "memory_sum", "memory_samples", "peak", "launched")

    def __init__(self) -> None:
        self.busy = self.memory_sum = 0.0
        self.memory_samples = self.peak = 0
        self.launched = [0] * GPU_KERNEL_SUMS

    def add(self, sums) -> None:
        """A line's GPU sums from the core (contract.GPU_LINE_SUMS); a child's
        of an older pyrometer may lack the kernel tier's."""
        self.busy += sums[contract.GPU_BUSY] * NS
        self.memory_sum += sums[contract.GPU_MEMORY_SUM]
        self.memory_samples += sums[contract.GPU_MEMORY_SAMPLES]
        self.peak = max(self.peak, sums[contract.GPU_PEAK])
        for i, value in enumerate(sums[contract.GPU_KERNEL_NS:]):
            self.launched[i] += value

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


def time_share(entry: dict[str, Any]) -> float:
    """A line's or function's share of the run's time, in percent, of every kind."""
    return (entry["n_cpu_percent_python"] + entry["n_cpu_percent_c"] + entry["n_sys_percent"]
            + entry.get("n_gil_wait_percent", 0.0) + entry.get("n_cpu_wait_percent", 0.0))


def _significant(entry: dict[str, Any], threshold: float, malloc_threshold: float | None = None) -> bool:
    cpu = (time_share(entry) >= threshold or entry.get("n_await_percent", 0.0) >= threshold
           or entry.get("n_gpu_percent", 0.0) >= threshold)
    return cpu or (malloc_threshold is not None and entry.get("n_malloc_mb", 0.0) >= malloc_threshold)


def build(raw: dict[str, Any], *, program: str, argv: list[str], options: dict[str, Any],
          elapsed: float, start_time: float, exit_status: int | None,
          ended_by: str | None = "exit", notices: list[str] | None = None,
          sources: dict[str, str] | None = None,
          processes: list[dict[str, Any]] | None = None, process_count: int | None = None,
          listing: bool = True) -> dict[str, Any]:
    """ended_by: how the run ended ("exit", "exec", "os._exit", a signal's name,
    "unknown"), None for a snapshot of a run still going; notices: lines a reader
    must see, besides those the data itself calls for; sources: the text of
    pseudo-files that are the program's own (-c: "<string>", standard input:
    "<stdin>"), which no file holds; processes: the process table (the first
    process, then its children: children.merge), whose aggregates raw already
    holds; process_count: how many processes in all (the table may be cut);
    listing: False for a profile read by code, never shown (the pytest plugin's
    per-test summaries): each file's entries are its lines with data only, not
    its whole source listing (a test file of 5,000 lines made 500 entries per
    test, 70% of the plugin's cost per test)."""
    lines: dict[str, dict[int, _Sums]] = defaultdict(lambda: defaultdict(_Sums))
    functions: dict[str, dict[tuple[str, int], _Sums]] = defaultdict(lambda: defaultdict(_Sums))
    for filename, lineno, qualname, firstlineno, cpu in raw["records"]:
        lines[filename][lineno].add(cpu)
        functions[filename][(qualname, firstlineno)].add(cpu)

    memory = raw.get("memory")
    mem_lines: dict[str, dict[int, _Memory]] = defaultdict(lambda: defaultdict(_Memory))
    mem_functions: dict[str, dict[tuple[str, int], _Memory]] = defaultdict(lambda: defaultdict(_Memory))
    activity = 0
    for r in (memory or {}).get("lines", []):
        mem_lines[r["filename"]][r["lineno"]].add(r)
        mem_functions[r["filename"]][(r["function"], r["function_lineno"])].add(r)
        activity += r["alloc_bytes"] + r["free_bytes"] - 2 * _churn(r)
        lines[r["filename"]]  # a file with memory samples only is still reported

    gpu_used, gpu_top, gpu_notices = _gpu_run(raw.get("gpu"), options)
    gpu_lines: dict[str, dict[int, _Gpu]] = defaultdict(lambda: defaultdict(_Gpu))
    gpu_functions: dict[str, dict[tuple[str, int], _Gpu]] = defaultdict(lambda: defaultdict(_Gpu))
    gpu_total = 0.0
    gpu_kernels = gpu_top.get("gpu_kernel_tier") == "on"
    if gpu_used:
        for filename, lineno, qualname, firstlineno, *sums in raw["gpu"]["lines"]:
            gpu_lines[filename][lineno].add(sums)
            gpu_functions[filename][(qualname, firstlineno)].add(sums)
            lines[filename]  # a file with GPU samples only is still reported
        # The denominator of GPU percentages: all busy time charged, to lines or not.
        gpu_total = sum(g.busy for per in gpu_lines.values() for g in per.values()) \
            + raw["gpu"]["unattributed_busy_ns"] * NS

    unattributed = _Sums()
    unattributed.add(raw["unattributed"])
    every_line = _Sums()
    for per_line in lines.values():
        for s in per_line.values():
            every_line.merge(s)
    # The denominator of every percentage: all time charged to reported lines, plus
    # CPU that ran where no reported line was on the stack.  Idle time of threads
    # that never touch the program's code (a pool waiting for work) is left out.
    denominator = every_line.total + unattributed.python + unattributed.native
    # Await shares are of the await time charged to the program's lines; tasks
    # whose await chain has no reported frame (a library's own tasks) are left out.
    await_total = every_line.await_
    threshold, malloc_threshold = _limits(options, bool(memory))
    reduced = options["reduced_profile"]
    footprint_grew = bool(memory) and memory["footprint_bytes"] >= memory["window_bytes"]
    leak_detector = bool(memory) and memory["leak_detector"]
    focus = Focus(raw.get("profiled_functions", []))

    files: dict[str, Any] = {}
    # Every line with figures, shown or not (@profile, --reduced-profile): the
    # verdict is about the whole run.
    every_entry: list[tuple[str, dict[str, Any]]] = []
    for filename in sorted(lines):
        if not focus.covers_file(filename):
            every_entry.extend(_hidden_entries(filename, lines[filename], mem_lines.get(filename, {}),
                                               gpu_lines.get(filename, {}), lambda n: False, denominator,
                                               await_total, memory, activity, elapsed, gpu_used, gpu_total,
                                               sources))
            continue
        per_line = lines[filename]
        per_line_mem = mem_lines.get(filename, {})
        source = _source_lines(filename, sources)
        line_entries = []
        leaks = {}
        shown = focus.lines_of(filename)
        per_line_gpu = gpu_lines.get(filename, {})
        every_entry.extend(_hidden_entries(filename, per_line, per_line_mem, per_line_gpu, shown, denominator,
                                           await_total, memory, activity, elapsed, gpu_used, gpu_total,
                                           sources, source))
        with_data = set(per_line) | set(per_line_mem) | set(per_line_gpu)
        for lineno in _lines_to_report(len(source), with_data) if listing else sorted(with_data):
            if not shown(lineno):
                continue
            entry = {"lineno": lineno, "line": source[lineno - 1] if lineno <= len(source) else ""}
            entry.update((per_line.get(lineno) or _Sums()).fields(denominator, await_total))
            if gpu_used:
                entry.update(per_line_gpu.get(lineno, _NO_GPU).fields(gpu_total, gpu_kernels))
            if memory:
                m = per_line_mem.get(lineno, _NO_MEMORY)
                entry.update(m.fields(activity, elapsed, memory))
                likelihood = m.leak_likelihood()
                if (leak_detector and footprint_grew and m.net > 0 and m.watched - m.evicted >= LEAK_MIN_SAMPLES
                        and likelihood >= LEAK_LIKELIHOOD):
                    leaks[str(lineno)] = {"likelihood": likelihood,
                                          "velocity_mb_s": m.net / MB / elapsed if elapsed > 0 else 0.0,
                                          "growth_mb": m.net / MB}
            if lineno in per_line or lineno in per_line_mem or lineno in per_line_gpu:
                every_entry.append((filename, entry))
            if not reduced or _significant(entry, threshold, malloc_threshold):
                line_entries.append(entry)
        function_entries = []
        # A decorated function is listed even when all its time is in code
        # defined inside it (a comprehension, on 3.11): the table names it.
        keys = (set(functions[filename]) | set(mem_functions.get(filename, {})) | set(gpu_functions.get(filename, {}))
                | focus.functions_in(filename))
        for qualname, firstlineno in sorted(keys, key=lambda k: (k[1], k[0])):
            if not shown(firstlineno):  # a decorated function, or one defined inside it
                continue
            entry = {"lineno": firstlineno, "line": qualname}
            entry.update(functions[filename].get((qualname, firstlineno), _Sums()).fields(denominator, await_total))
            if gpu_used:
                entry.update(gpu_functions.get(filename, {}).get((qualname, firstlineno), _NO_GPU)
                             .fields(gpu_total, gpu_kernels))
            if memory:
                entry.update(mem_functions[filename].get((qualname, firstlineno), _NO_MEMORY)
                             .fields(activity, elapsed, memory))
            if not reduced or _significant(entry, threshold, malloc_threshold):
                function_entries.append(entry)
        file_total = _Sums()
        for lineno, s in per_line.items():
            if shown(lineno):
                file_total.merge(s)
        files[filename] = {
            "percent_cpu_time": file_total.total * 100.0 / denominator if denominator else 0.0,
            "cpu_time_sec": file_total.total,
            "lines": line_entries,
            "functions": function_entries,
            "imports": [],
            "leaks": leaks,
        }

    profile = {
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
        "threads": raw["threads_seen"],
        "n_cpus": raw["n_cpus"],
        "process_cpu_time_sec": raw["process_cpu_ns"] * NS,
        "profiler_cpu_time_sec": raw["sampler_cpu_ns"] * NS,
        "untracked_native_sec": raw["untracked_native_ns"] * NS,
        "profiler_memory_bytes": raw["profiler_memory_bytes"],
        "code_objects": raw["code_objects"],
        "code_objects_seen": raw["code_objects_seen"],
        "total_time_sec": denominator,
        "cpu_time_sec": {
            "python": every_line.python + unattributed.python,
            "native": every_line.native + unattributed.native,
            "system": every_line.system,
            "gil_wait": every_line.gil_wait,
            "cpu_wait": every_line.cpu_wait,
        },
        "await_time_sec": await_total,
        "event_loop_idle_sec": every_line.loop_idle + unattributed.loop_idle,
        "unattributed": {
            "python_sec": unattributed.python,
            "native_sec": unattributed.native,
            "system_sec": unattributed.system,
            "gil_wait_sec": unattributed.gil_wait,
            "cpu_wait_sec": unattributed.cpu_wait,
            "await_sec": unattributed.await_,
        },
        "memory": bool(memory),
        "gpu": gpu_used,
        **gpu_top,
        "process_count": process_count if process_count is not None else len(processes or []) or 1,
        "children_merge_sec": raw.get("merge_ns", 0) * NS,
        "processes": processes or [],
        "notices": [*(notices or []), *_notices(memory, raw["functions_overflowed"]), *gpu_notices, *focus.notices(
            lambda f, first, last: any(first <= n <= last for n in (*lines.get(f, ()), *mem_lines.get(f, ()))))],
        **(_run_memory(memory, focus.memory_lines(mem_lines), elapsed) if memory else {}),
        "profiled_functions": focus.fields(),
        # The whole run's, even with @profile: a stack passes through lines
        # outside the decorated functions.
        **({"call_stacks": stacks} if (stacks := call_stacks(raw, bool(memory), gpu_used)) is not None else {}),
        "files": files,
    }
    from .verdict import decide
    profile["verdict"] = decide(profile, every_entry,
                                lambda filename, lineno: focus.covers_file(filename) and focus.lines_of(filename)(lineno))
    return profile


def _hidden_entries(filename: str, per_line: dict, per_line_mem: dict, per_line_gpu: dict, shown,
                    denominator: float, await_total: float, memory: Any, activity: float, elapsed: float,
                    gpu_used: bool, gpu_total: float, sources: dict[str, str] | None,
                    source: list[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Entries, for the verdict only, of the lines with figures that the
    report does not show (outside the @profile functions)."""
    out = []
    for lineno in sorted(set(per_line) | set(per_line_mem) | set(per_line_gpu)):
        if shown(lineno):
            continue
        if source is None:
            source = _source_lines(filename, sources)
        entry = {"lineno": lineno, "line": source[lineno - 1] if 0 < lineno <= len(source) else ""}
        entry.update((per_line.get(lineno) or _Sums()).fields(denominator, await_total))
        if gpu_used:
            entry.update(per_line_gpu.get(lineno, _NO_GPU).fields(gpu_total))
        if memory:
            entry.update(per_line_mem.get(lineno, _NO_MEMORY).fields(activity, elapsed, memory))
        out.append((filename, entry))
    return out


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


def _lines_to_report(source_length: int, with_data: set[int]) -> list[int]:
    """The lines a file's entries cover, in order: its whole source listing (up to
    SOURCE_LINES_MAX lines) and every line with data, with a little context
    around those beyond the listing that the source has text for.  Never one
    entry per number up to the highest line seen: code compiled with two million
    leading newlines under a program's name would make that a 557 MB report."""
    listing = min(source_length, SOURCE_LINES_MAX)
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


def significant(entry: dict[str, Any], threshold: float, malloc_threshold: float | None = None) -> bool:
    """Whether a line or function reaches the CPU threshold (percent of run time,
    of await time, of GPU time) or, when memory was profiled, the malloc
    threshold (MB allocated): what --reduced-profile and the page's reduced
    view keep."""
    return _significant(entry, threshold, malloc_threshold)


# A line or function is hot, the reports' strongest mark, at this many times
# the CPU threshold.
HOT_FACTOR = 5.0


def mark(entry: dict[str, Any], threshold: float, malloc_threshold: float | None = None) -> str:
    """How the terminal and the page mark a line or function: "hot" at
    HOT_FACTOR times the CPU threshold of the run's time, "warm" at the
    threshold or at the malloc threshold, else "".  Decided here once: the
    page's script had a copy of this rule and of significant()'s, and its
    copy of significant() left out GPU time (a GPU-only line kept by
    --reduced-profile showed in the terminal and not on the page)."""
    share = time_share(entry)
    if share >= threshold * HOT_FACTOR:
        return "hot"
    if share >= threshold or (malloc_threshold is not None and entry.get("n_malloc_mb", 0.0) >= malloc_threshold):
        return "warm"
    return ""


def thresholds(profile: dict[str, Any]) -> tuple[float, float | None]:
    """The run's CPU threshold and its malloc threshold (None: memory was not
    profiled), as significant() and mark() take them."""
    return _limits(profile["options"], bool(profile.get("memory")))


def _limits(options: dict[str, Any], memory: bool) -> tuple[float, float | None]:
    malloc = options.get("malloc_threshold", _OPTIONS.fields["malloc_threshold"][1])
    return options["cpu_percent_threshold"], malloc if memory else None


# The seconds of an entry that make up its share of the run's time (time_share).
_TIME_SECONDS = ("n_cpu_python_sec", "n_cpu_native_sec", "n_sys_sec", "n_gil_wait_sec", "n_cpu_wait_sec")


def since(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """What one run did between two of its snapshots (the live view, pyrometer
    top): each line's and function's seconds of each kind and MB allocated in
    between ("now"), beside its totals so far.  before None: since the start.
    Entries are matched by file and line (functions: file, first line and name);
    only those with time or allocation so far are listed, busiest now first.

    A line's seconds are not only added to as the run goes on: the estimated
    part of each sample is counted in units whose size is the whole run's
    (csrc/module.c, sums_tuple), so every line's seconds move a little with each
    snapshot.  What a line did now is therefore its seconds' change only where
    it was sampled in between (n_samples grew), and nothing where it was not;
    the time now, the percentages' denominator, is the sum of the lines' now
    and of the change in time on no reported line."""
    def entries(profile: dict[str, Any] | None, kind: str) -> dict[tuple, dict[str, Any]]:
        if profile is None:
            return {}
        return {(filename, e["lineno"], e["line"] if kind == "functions" else ""): e
                for filename, f in profile["files"].items() for e in f[kind]}

    def seconds(e: dict[str, Any] | None) -> list[float]:
        return [e.get(k, 0.0) if e else 0.0 for k in _TIME_SECONDS]

    def unattributed(profile: dict[str, Any] | None) -> float:
        u = (profile or {}).get("unattributed") or {}
        return u.get("python_sec", 0.0) + u.get("native_sec", 0.0)

    interval = after["elapsed_time_sec"] - (before["elapsed_time_sec"] if before else 0.0)
    out: dict[str, Any] = {"interval_sec": max(interval, 0.0), "elapsed_sec": after["elapsed_time_sec"],
                           "total_time_sec": after["total_time_sec"], "memory": bool(after.get("memory"))}
    for kind in ("lines", "functions"):
        old = entries(before, kind)
        rows = []
        for key, e in entries(after, kind).items():
            total = seconds(e)
            was = old.get(key)
            sampled = e.get("n_samples", 0) > (was.get("n_samples", 0) if was else 0)
            now = [max(a - b, 0.0) for a, b in zip(total, seconds(was))] if sampled else [0.0] * len(total)
            malloc_total = e.get("n_malloc_mb", 0.0)
            malloc_now = max(malloc_total - (was.get("n_malloc_mb", 0.0) if was else 0.0), 0.0)
            if sum(total) <= 0 and malloc_total <= 0:
                continue
            rows.append({
                "filename": key[0], "lineno": key[1], "line": e["line"],
                "python_sec": now[0], "native_sec": now[1], "system_sec": now[2], "wait_sec": now[3] + now[4],
                "time_sec": sum(now),
                "malloc_mb": malloc_now,
                "total_time_sec": sum(total),
                "total_percent": time_share(e),
                "total_malloc_mb": malloc_total,
            })
        rows.sort(key=lambda r: (-r["time_sec"], -r["malloc_mb"], -r["total_time_sec"], -r["total_malloc_mb"],
                                 r["filename"], r["lineno"]))
        out[kind] = rows
    out["time_sec"] = sum(r["time_sec"] for r in out["lines"]) + max(unattributed(after) - unattributed(before), 0.0)
    scale = 100.0 / out["time_sec"] if out["time_sec"] > 0 else 0.0  # seconds now -> percent of now
    for kind in ("lines", "functions"):
        for r in out[kind]:
            r.update(percent=r["time_sec"] * scale, python_percent=r["python_sec"] * scale,
                     native_percent=r["native_sec"] * scale, system_percent=r["system_sec"] * scale,
                     wait_percent=r["wait_sec"] * scale)
    return out


def reduced(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile as --reduced-profile would have written it: only the lines and
    functions at or above the thresholds."""
    options = dict(profile["options"], reduced_profile=True)
    threshold, malloc_threshold = thresholds(profile)
    files = {name: dict(f, lines=[e for e in f["lines"] if _significant(e, threshold, malloc_threshold)],
                        functions=[e for e in f["functions"] if _significant(e, threshold, malloc_threshold)])
             for name, f in profile["files"].items()}
    return dict(profile, options=options, files=files)


# ---------------------------------------------------------------------------
# Reading a saved profile (pyrometer view): possibly from another machine or
# another version, possibly damaged, possibly crafted to attack whoever views it
# (markup for the web page, escape sequences for the terminal).  Every field
# the model writes is checked for its type and range, so the renderers only
# ever see well-formed profiles; every problem becomes a ProfileError with a
# message a user can act on.  The renderers escape every string all the same:
# a string may hold anything.
# ---------------------------------------------------------------------------

class ProfileError(Exception):
    """A file that cannot be shown as a pyrometer profile."""


class _Leaf:
    """A scalar field: its JSON type(s) and, for numbers, its range (bounds
    included).  Types are compared exactly, so that true is not taken for 1."""
    __slots__ = ("types", "low", "high", "what")

    def __init__(self, types: tuple, what: str, low: float | None = None, high: float | None = None):
        self.types, self.what, self.low, self.high = types, what, low, high


_FLOAT_MAX = sys.float_info.max  # finite bounds also refuse NaN and the infinities
_LINENO_MAX = (1 << 31) - 1
_COUNT_MAX = (1 << 63) - 1


def _number(low: float = -_FLOAT_MAX, high: float = _FLOAT_MAX) -> _Leaf:
    if low == -_FLOAT_MAX:
        what = "a finite number"
    elif high == _FLOAT_MAX:
        what = f"a number of at least {low:g}"
    else:
        what = f"a number from {low:g} to {high:g}"
    return _Leaf((int, float), what, low, high)


def _whole(low: int, high: int) -> _Leaf:
    return _Leaf((int,), f"a whole number from {low} to {high}", low, high)


_ANY_NUMBER = _number()
_NONNEG = _number(0.0)      # seconds, percentages, MB, rates that cannot be negative
_FRACTION = _number(0.0, 1.0)
_COUNT = _whole(0, _COUNT_MAX)
_LINENO = _whole(0, _LINENO_MAX)
_STR = _Leaf((str,), "a string")
_BOOL = _Leaf((bool,), "true or false")


class _Null:
    """null, or what `kind` describes."""
    __slots__ = ("kind",)

    def __init__(self, kind: Any):
        self.kind = kind


class _List:
    """A list of `item`s, or, with `length`, exactly that many."""
    __slots__ = ("item", "length")

    def __init__(self, item: Any, length: int | None = None):
        self.item, self.length = item, length


class _Object:
    """An object with these fields: name -> (kind, default).  The default
    _REQUIRED makes a field required; _OPTIONAL checks it only when present;
    any other default is given to a profile that lacks the field (one written
    by an older pyrometer of the same schema).  Fields not named here are
    allowed (a newer pyrometer of the same schema may add some) but must be
    plain JSON: see _plain."""
    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, tuple[Any, Any]]):
        self.fields = fields


class _Keyed:
    """An object keyed by line numbers written as decimal strings (leaks)."""
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


_REQUIRED, _OPTIONAL = object(), object()
_TIMELINE = _List(_List(_ANY_NUMBER, 2))   # [seconds since the start, MB]; MB may be negative (net)
_MB_BY_KIND = _Object({"malloc_mb": (_NONNEG, 0.0), "free_mb": (_NONNEG, 0.0), "copy_mb": (_NONNEG, 0.0),
                       "python_mb": (_NONNEG, _OPTIONAL)})

_OPTIONS = _Object({
    "cpu_percent_threshold": (_number(0.0, 100.0), 1.0),
    "reduced_profile": (_BOOL, False),
    "malloc_threshold": (_NONNEG, 100.0),
    "cpu_sampling_rate": (_number(1e-9), 0.01),
    "cpu_only": (_BOOL, False),
    "profile_all": (_BOOL, False),
    "profile_only": (_List(_STR), []),
    "profile_exclude": (_List(_STR), []),
    "use_virtual_time": (_BOOL, False),
    "memory": (_BOOL, _OPTIONAL),
    "allocation_sampling_window": (_Null(_COUNT), _OPTIONAL),
    "leak_detector": (_BOOL, _OPTIONAL),
    "profile_interval": (_Null(_NONNEG), _OPTIONAL),
    "children": (_BOOL, _OPTIONAL),
    "gpu": (_Null(_BOOL), _OPTIONAL),
    "gpu_kernels": (_BOOL, _OPTIONAL),
    "off": (_BOOL, _OPTIONAL),
})

_TIME_ENTRY = _Object({
    "lineno": (_LINENO, _REQUIRED),
    "line": (_STR, _REQUIRED),
    "n_cpu_percent_python": (_NONNEG, _REQUIRED),
    "n_cpu_percent_c": (_NONNEG, _REQUIRED),
    "n_sys_percent": (_NONNEG, _REQUIRED),
    "n_gil_wait_percent": (_NONNEG, 0.0),
    "n_cpu_wait_percent": (_NONNEG, 0.0),
    "n_await_percent": (_number(0.0, 100.0), 0.0),
    "n_core_utilization": (_NONNEG, 0.0),
    "n_cpu_python_sec": (_NONNEG, 0.0),
    "n_cpu_native_sec": (_NONNEG, 0.0),
    "n_sys_sec": (_NONNEG, 0.0),
    "n_gil_wait_sec": (_NONNEG, 0.0),
    "n_cpu_wait_sec": (_NONNEG, 0.0),
    "n_await_sec": (_NONNEG, 0.0),
    "n_samples": (_COUNT, 0),
    "n_gpu_percent": (_number(0.0, 100.0), _OPTIONAL),
    "n_gpu_sec": (_NONNEG, _OPTIONAL),
    "n_gpu_avg_memory_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_peak_memory_mb": (_NONNEG, _OPTIONAL),
    # The kernel tier's (gpu_kernel_tier "on").
    "n_gpu_kernel_sec": (_NONNEG, _OPTIONAL),
    "n_gpu_kernels": (_COUNT, _OPTIONAL),
    "n_gpu_copy_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_copy_htod_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_copy_dtoh_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_copy_dtod_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_memset_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_alloc_mb": (_NONNEG, _OPTIONAL),
})
# With memory profiled, entries also have these (an entry lacking them gets zeros).
_MEMORY_ENTRY = _Object({
    "n_malloc_mb": (_NONNEG, 0.0),
    "n_python_fraction": (_FRACTION, 0.0),
    "n_peak_mb": (_NONNEG, 0.0),
    "n_growth_mb": (_ANY_NUMBER, 0.0),
    "n_avg_mb": (_NONNEG, 0.0),
    "n_mallocs": (_COUNT, 0),
    "n_usage_fraction": (_FRACTION, 0.0),
    "n_copy_mb_s": (_NONNEG, 0.0),
    "n_malloc_bytes": (_COUNT, _OPTIONAL),
    "n_free_bytes": (_COUNT, _OPTIONAL),
    "n_churn_mb": (_NONNEG, _OPTIONAL),
    "n_malloc_mb_error": (_NONNEG, _OPTIONAL),
    "n_growth_mb_error": (_NONNEG, _OPTIONAL),
    "n_copy_bytes": (_COUNT, _OPTIONAL),
    "memory_samples": (_TIMELINE, []),
})



def _optional(kind: _Object) -> dict[str, tuple[Any, Any]]:
    return {name: (k, _OPTIONAL) for name, (k, _) in kind.fields.items()}


_ENTRY_WITH_MEMORY = _Object({**_TIME_ENTRY.fields, **_MEMORY_ENTRY.fields})
# Without memory profiled, the memory fields are not expected, but where they are
# they have their types all the same: a renderer may read one it finds.
_ENTRY_CPU_ONLY = _Object({**_TIME_ENTRY.fields, **_optional(_MEMORY_ENTRY)})


class _Entries:
    """The lines or functions of a file (checked by _check_entries)."""
    __slots__ = ("entry",)

    def __init__(self, entry: _Object):
        self.entry = entry


def _file(entry: _Object) -> _Object:
    return _Object({
        "percent_cpu_time": (_NONNEG, _REQUIRED),
        "cpu_time_sec": (_NONNEG, _REQUIRED),
        "lines": (_Entries(entry), _REQUIRED),
        "functions": (_Entries(entry), []),
        "imports": (_List(_OPTIONAL), []),  # Scalene's field, always empty here: any plain JSON
        "leaks": (_Keyed(_Object({"likelihood": (_FRACTION, _REQUIRED),
                                  "velocity_mb_s": (_ANY_NUMBER, _REQUIRED),
                                  "growth_mb": (_ANY_NUMBER, _REQUIRED)})), {}),
    })


_FILE_CPU_ONLY, _FILE_WITH_MEMORY = _file(_ENTRY_CPU_ONLY), _file(_ENTRY_WITH_MEMORY)

_RUN = _Object({
    "pyrometer_schema": (_whole(1, SCHEMA_VERSION), _REQUIRED),
    "program": (_STR, _REQUIRED),
    "args": (_List(_STR), _REQUIRED),
    "python_version": (_STR, "?"),
    "platform": (_STR, "?"),
    "start_time_absolute": (_NONNEG, _OPTIONAL),
    "elapsed_time_sec": (_NONNEG, _REQUIRED),
    "paused_sec": (_NONNEG, 0.0),
    "exit_status": (_Null(_Leaf((int,), "a whole number from 0 to 255, or null", 0, 255)), None),
    "ended_by": (_Null(_STR), None),
    "options": (_OPTIONS, _REQUIRED),
    "cpu_sampling_rate": (_number(1e-9), _OPTIONAL),
    "sampling_interval_sec": (_NONNEG, 0.0),
    "cpu_samples": (_COUNT, 0),
    "cpu_samples_main_thread": (_COUNT, _OPTIONAL),
    "threads": (_COUNT, 0),
    "n_cpus": (_COUNT, 0),
    "process_cpu_time_sec": (_NONNEG, _OPTIONAL),
    "profiler_cpu_time_sec": (_NONNEG, _OPTIONAL),
    "untracked_native_sec": (_NONNEG, _OPTIONAL),
    "profiler_memory_bytes": (_COUNT, _OPTIONAL),
    "code_objects": (_COUNT, _OPTIONAL),
    "code_objects_seen": (_COUNT, _OPTIONAL),
    "total_time_sec": (_NONNEG, _REQUIRED),
    "cpu_time_sec": (_Object({"python": (_NONNEG, _REQUIRED), "native": (_NONNEG, _REQUIRED),
                              "system": (_NONNEG, _REQUIRED), "gil_wait": (_NONNEG, _OPTIONAL),
                              "cpu_wait": (_NONNEG, _OPTIONAL)}), _REQUIRED),
    "await_time_sec": (_NONNEG, 0.0),
    "event_loop_idle_sec": (_NONNEG, 0.0),
    "unattributed": (_Object({name: (_NONNEG, _OPTIONAL) for name in
                              ("python_sec", "native_sec", "system_sec", "gil_wait_sec", "cpu_wait_sec",
                               "await_sec")}),
                     _OPTIONAL),
    "memory": (_BOOL, False),
    "gpu": (_BOOL, False),
    "gpu_status": (_STR, _OPTIONAL),
    "gpu_device": (_STR, _OPTIONAL),
    "gpu_utilization_source": (_STR, _OPTIONAL),  # "device" or "process": checked by check()
    "gpu_time_sec": (_NONNEG, _OPTIONAL),
    "gpu_unattributed_sec": (_NONNEG, _OPTIONAL),
    "gpu_peak_memory_mb": (_NONNEG, _OPTIONAL),
    "gpu_devices": (_List(_Object({"name": (_STR, _REQUIRED), "busy_sec": (_NONNEG, _REQUIRED),
                                   "peak_memory_mb": (_NONNEG, 0.0), "utilization_source": (_STR, "device"),
                                   "shared": (_BOOL, False), "samples": (_COUNT, 0)})), _OPTIONAL),
    "gpu_kernel_tier": (_STR, _OPTIONAL),  # "off", "on", "absent", "busy", "failed": checked by check()
    "gpu_kernels": (_COUNT, _OPTIONAL),
    "gpu_copies": (_COUNT, _OPTIONAL),
    "gpu_memsets": (_COUNT, _OPTIONAL),
    "gpu_allocations": (_COUNT, _OPTIONAL),
    "gpu_kernel_time_sec": (_NONNEG, _OPTIONAL),
    "gpu_kernel_unattributed_sec": (_NONNEG, _OPTIONAL),
    "gpu_copy_htod_mb": (_NONNEG, _OPTIONAL),
    "gpu_copy_dtoh_mb": (_NONNEG, _OPTIONAL),
    "gpu_copy_dtod_mb": (_NONNEG, _OPTIONAL),
    "gpu_kernel_records_lost": (_COUNT, _OPTIONAL),
    "notices": (_List(_STR), []),
    "files": (_Leaf((dict,), "an object"), _REQUIRED),  # each file: _FILE_*, checked by check()
})
# With memory profiled, the top level also has these.
_MEMORY_TOP = _Object({
    "max_footprint_mb": (_NONNEG, _REQUIRED),
    "max_footprint_where": (_Null(_Object({"filename": (_STR, _REQUIRED), "lineno": (_LINENO, _REQUIRED)})),
                            None),
    "max_footprint_time_sec": (_NONNEG, 0.0),
    "footprint_mb": (_ANY_NUMBER, 0.0),
    "growth_rate_mb_s": (_ANY_NUMBER, _REQUIRED),
    "allocated_mb": (_NONNEG, _OPTIONAL),  # older profiles lack it
    "churn_mb": (_NONNEG, _OPTIONAL),
    # Scalene's names (checked against max_footprint_where by check()); older
    # profiles lack them.
    "growth_rate": (_ANY_NUMBER, _OPTIONAL),
    "max_footprint_fname": (_Null(_STR), _OPTIONAL),
    "max_footprint_lineno": (_Null(_whole(1, _LINENO_MAX)), _OPTIONAL),
    "samples": (_TIMELINE, _REQUIRED),
    "top_allocations": (_List(_Object({"filename": (_STR, _REQUIRED), "lineno": (_LINENO, _REQUIRED),
                                       "n_malloc_mb": (_NONNEG, _REQUIRED),
                                       "n_malloc_mb_error": (_NONNEG, _OPTIONAL),
                                       "n_python_fraction": (_FRACTION, _REQUIRED)})), _REQUIRED),
    "native_threads": (_MB_BY_KIND, {"malloc_mb": 0.0, "free_mb": 0.0, "copy_mb": 0.0}),
    "unattributed_memory": (_MB_BY_KIND, _OPTIONAL),
    "allocation_sampling_window_bytes": (_COUNT, _OPTIONAL),
    "python_sampling_window_bytes": (_COUNT, _OPTIONAL),
    "memory_samples_dropped": (_COUNT, _OPTIONAL),
    "memory_samples_queued": (_COUNT, _OPTIONAL),
    "python_allocator": (_STR, _OPTIONAL),
    "python_memory_profiled": (_BOOL, _OPTIONAL),
    "python_memory_why": (_STR, _OPTIONAL),
})
_EXIT_STATUS = _Leaf((int,), "a whole number from 0 to 255, or null", 0, 255)
_PID = _whole(0, (1 << 31) - 1)
_PROCESS = _Object({
    "pid": (_PID, _REQUIRED),
    "ppid": (_Null(_PID), None),
    "command": (_List(_STR), []),
    "started_by": (_STR, "?"),
    "profiled": (_BOOL, True),
    "wall_sec": (_Null(_NONNEG), None),
    "paused_sec": (_Null(_NONNEG), None),
    "cpu_sec": (_Null(_NONNEG), None),
    "peak_mb": (_Null(_NONNEG), None),
    "exit_status": (_Null(_EXIT_STATUS), None),
    "ended_by": (_Null(_STR), None),
    "note": (_Null(_STR), None),
})
_RUN.fields.update({
    "process_count": (_COUNT, 1),
    "children_merge_sec": (_NONNEG, 0.0),
    "processes": (_List(_PROCESS), []),
    # @profile's functions (Focus): the files' entries hold only their lines.
    "profiled_functions": (_List(_Object({"filename": (_STR, _REQUIRED), "function": (_STR, _REQUIRED),
                                          "lineno": (_LINENO, _REQUIRED), "end_lineno": (_LINENO, _REQUIRED)})),
                           []),
})
# call_stacks (stacks.py): each stack's path is checked by _check_paths.
_STACK_FIGURES = {**{name: (_NONNEG, _REQUIRED) for name in TIME_FIGURES}, "samples": (_COUNT, _REQUIRED),
                  **{name: (_COUNT, _OPTIONAL) for name in MEMORY_FIGURES}, "gpu_sec": (_NONNEG, _OPTIONAL)}
_STACK_DEPTH_MAX = 1 << 16
_CALL_STACKS = _Object({
    "frames": (_List(_Object({"filename": (_STR, _REQUIRED), "function": (_STR, _REQUIRED),
                              "first_lineno": (_LINENO, _REQUIRED), "lineno": (_LINENO, _REQUIRED)})), _REQUIRED),
    "stacks": (_Entries(_Object({"path": (_List(_LINENO), _REQUIRED), **_STACK_FIGURES})), _REQUIRED),
    "other": (_Object(_STACK_FIGURES), _REQUIRED),
    "cap": (_COUNT, _REQUIRED),
    "max_depth": (_whole(0, _STACK_DEPTH_MAX), _REQUIRED),
})
_RUN.fields["call_stacks"] = (_CALL_STACKS, _OPTIONAL)

# The verdict (verdict.py); a profile of an older pyrometer lacks it and gets
# one made from its own figures (check()).
_VERDICT = _Object({
    "bound": (_STR, _REQUIRED),  # one of verdict.BOUNDS, as own_bound: checked by check()
    "own_bound": (_STR, _OPTIONAL),
    "summary": (_STR, _REQUIRED),
    "evidence": (_Object({name: (_Null(_NONNEG), _OPTIONAL) for name in (
        "total_time_sec", "event_loop_idle_sec", "overlapped_wait_sec", "judged_time_sec", "own_time_sec", "python_percent", "native_percent",
        "system_percent", "gil_wait_percent", "cpu_wait_percent", "allocated_mb_per_cpu_sec",
        "freed_fraction", "copy_mb_per_cpu_sec", "gpu_busy_percent", "lines_percent")}
        | {"samples": (_COUNT, _OPTIONAL)}), {}),
    "lines": (_List(_Object({"filename": (_STR, _REQUIRED), "lineno": (_LINENO, _REQUIRED),
                             "line": (_STR, ""), "value": (_NONNEG, _REQUIRED), "unit": (_STR, "s"),
                             "percent": (_number(0.0, 100.0), 0.0), "shown": (_BOOL, True)})), []),
})
_RUN.fields["verdict"] = (_VERDICT, _OPTIONAL)
_TOP_WITH_MEMORY = _Object({**_RUN.fields, **_MEMORY_TOP.fields})
_TOP_CPU_ONLY = _Object({**_RUN.fields, **_optional(_MEMORY_TOP)})

# Fields no pyrometer of this schema writes may still be there (a newer one may
# add some); they must be plain JSON that every renderer can write out again:
# finite numbers, nested no deeper than this.
_PLAIN_DEPTH = 32
_LEAK_KEY = re.compile(r"[0-9]{1,10}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a field name shown as it is in messages


def _shown(value: Any) -> str:
    """A value as an error message shows it: short, and with every control
    character escaped (repr), since the message goes to a terminal."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shown_name(name: str) -> str:
    """A file name in a message: escaped like _shown, its end kept when long."""
    text = repr(name)
    return text if len(text) <= 100 else "'..." + text[-96:]


def _type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def _plain(value: Any, where: str) -> None:
    """A field this pyrometer does not know: plain JSON, finite, not too deep.
    Walked without recursion: the limit is the point."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > _PLAIN_DEPTH:
            raise ProfileError(f"{where} is nested more than {_PLAIN_DEPTH} levels deep")
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, float) and not -_FLOAT_MAX <= v <= _FLOAT_MAX:
            raise ProfileError(f"{where} holds {v!r}, not a finite number")


def _check_value(value: Any, kind: Any, where: str) -> Any:
    """value checked against kind; returns it (objects: with their defaults)."""
    cls = type(kind)
    if cls is _Leaf:
        if type(value) not in kind.types:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be {kind.what}")
        if kind.low is not None and not kind.low <= value <= kind.high:
            raise ProfileError(f"{where} is out of range ({_shown(value)}): it must be {kind.what}")
    elif cls is _Object:
        if type(value) is not dict:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be an object")
        _check_fields(value, kind, where + ".")
    elif cls is _List:
        if type(value) is not list:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be a list")
        if kind.length is not None and len(value) != kind.length:
            raise ProfileError(f"{where} has {len(value)} items: it must have {kind.length}")
        item = kind.item
        if item is _OPTIONAL:
            _plain(value, where)
        else:
            for i, v in enumerate(value):
                _check_value(v, item, f"{where}[{i}]")
    elif cls is _Null:
        if value is not None:
            _check_value(value, kind.kind, where)
    elif cls is _Entries:
        if type(value) is not list:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be a list")
        _check_entries(value, kind.entry, where)
    elif cls is _Keyed:
        if type(value) is not dict:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be an object")
        for key, v in value.items():
            if not _LEAK_KEY.fullmatch(key) or int(key) > _LINENO_MAX:
                raise ProfileError(f"{where} has the key {_shown(key)}: its keys must be line numbers")
            _check_value(v, kind.value, f"{where}[{key!r}]")
    else:  # pragma: no cover - a kind this module does not define
        raise TypeError(f"unknown kind {kind!r}")
    return value


def _check_fields(obj: dict, kind: _Object, where: str) -> None:
    fields = kind.fields
    for name, (field_kind, default) in fields.items():
        value = obj.get(name, _REQUIRED)
        if value is _REQUIRED:
            if default is _REQUIRED:
                raise ProfileError(f"{where}{name} is missing")
            if default is not _OPTIONAL:
                # a copy: the profile may be changed later (reduced())
                obj[name] = type(default)(default) if isinstance(default, (list, dict)) else default
            continue
        _check_value(value, field_kind, where + name)
    if len(obj) > len(fields) or any(name not in fields for name in obj):
        for name, value in obj.items():
            if name not in fields:
                _plain(value, where + (name if _NAME.fullmatch(name) else _shown(name)))


def _timeline_ok(samples: list) -> bool:
    for point in samples:
        if type(point) is not list or len(point) != 2:
            return False
        t, mb = point
        if type(t) not in _NUMBER_TYPES or type(mb) not in _NUMBER_TYPES or not (
                -_FLOAT_MAX <= t <= _FLOAT_MAX and -_FLOAT_MAX <= mb <= _FLOAT_MAX):
            return False
    return True


_NUMBER_TYPES = frozenset((int, float))


def _entry_plan(keys: tuple, kind: _Object) -> list | None:
    """How to check entries with exactly these fields, in this order, at C speed:
    their scalar fields grouped by kind, each group taken with one itemgetter.
    None when a field is unknown or a required one missing: those entries take
    the slow path, which says what is wrong or gives the defaults."""
    fields = kind.fields
    if any(name not in fields for name in keys) or any(
            default is not _OPTIONAL and name not in keys for name, (_, default) in fields.items()):
        return None
    groups: dict[int, tuple[_Leaf, list[str]]] = {}
    for name in keys:
        leaf = fields[name][0]
        if type(leaf) is _Leaf:
            groups.setdefault(id(leaf), (leaf, []))[1].append(name)
    plan = []
    for leaf, names in groups.values():
        get = operator.itemgetter(*names)
        plan.append((get if len(names) > 1 else (lambda e, get=get: (get(e),)), frozenset(leaf.types),
                     leaf.low, leaf.high))
    return plan


def _check_entries(entries: list, kind: _Object, where: str) -> None:
    """The lines or functions of a file: the bulk of a big profile (50,000
    entries and more), so the usual entry is checked a group of fields at a
    time (one type set, one min, one max, one sum for NaN) and only an unusual
    one takes _check_value's path, which names the field that is wrong."""
    plans: dict[tuple, list | None] = {}
    timeline = "memory_samples" in kind.fields
    for i, e in enumerate(entries):
        if type(e) is dict:
            keys = tuple(e)
            plan = plans[keys] if keys in plans else plans.setdefault(keys, _entry_plan(keys, kind))
            if plan is not None:
                for get, types, low, high in plan:
                    values = get(e)
                    if not types.issuperset(map(type, values)):
                        break
                    if low is not None:
                        total = sum(values)
                        if total != total or min(values) < low or max(values) > high:
                            break
                else:
                    samples = e.get("memory_samples", _OPTIONAL) if timeline else _OPTIONAL
                    if samples is _OPTIONAL or (type(samples) is list and _timeline_ok(samples)):
                        continue
        _check_value(e, kind, f"{where}[{i}]")


def _check_scalene_footprint_names(profile: dict[str, Any], where: str) -> None:
    """max_footprint_fname and _lineno say again what max_footprint_where says
    (Scalene's names for it): where both are there they must agree, and a
    profile without them (an older pyrometer's) gets them from it."""
    peak = profile.get("max_footprint_where")
    expected = {"max_footprint_fname": peak["filename"] if peak else None,
                "max_footprint_lineno": peak["lineno"] if peak and peak["lineno"] > 0 else None}
    for name, value in expected.items():
        if name not in profile:
            profile[name] = value
        elif profile[name] != value:
            raise ProfileError(f"{where}{name} is {_shown(profile[name])}, but max_footprint_where "
                               f"says {_shown(value)}")


def _check_paths(stacks: dict[str, Any], where: str) -> None:
    """Every stack's path: indices of frames (the fast entry check leaves lists
    out), no deeper than the profile's max_depth."""
    frames = len(stacks["frames"])
    depth = stacks["max_depth"]
    for i, entry in enumerate(stacks["stacks"]):
        path = entry["path"]
        here = f"{where}call_stacks.stacks[{i}].path"
        if type(path) is not list:
            raise ProfileError(f"{here} has the wrong type ({_type_name(path)}): it must be a list")
        if len(path) > depth:
            raise ProfileError(f"{here} has {len(path)} frames, more than max_depth ({depth})")
        for j, index in enumerate(path):
            if type(index) is not int or not 0 <= index < frames:
                raise ProfileError(f"{here}[{j}] is {_shown(index)}: it must be the index of one of the "
                                   f"{frames} frames")


def load(path: str) -> dict[str, Any]:
    """A saved profile, checked: ProfileError says what is wrong with it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProfileError(f"cannot read {path}: {e.strerror or e}") from None
    return loads(data, path)


def loads(data: bytes, path: str = "the profile") -> dict[str, Any]:
    """A profile from the bytes of a saved one, checked (path: for messages)."""
    import json
    try:
        profile = json.loads(data)
    except UnicodeDecodeError:
        raise ProfileError(f"{path} is not a pyrometer profile (not JSON text)") from None
    except json.JSONDecodeError as e:
        if not data.strip():
            raise ProfileError(f"{path} is empty, not a pyrometer profile") from None
        if e.pos >= len(data.rstrip()):
            raise ProfileError(f"{path} is truncated: the JSON ends after {len(data)} bytes, "
                               f"in the middle of the profile") from None
        raise ProfileError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise ProfileError(f"{path} is not a pyrometer profile (nested too deeply)") from None
    except ValueError as e:  # an integer of more digits than int() converts
        raise ProfileError(f"{path} is not a pyrometer profile ({e})") from None
    return check(profile, path)


def check(profile: Any, path: str = "the profile") -> dict[str, Any]:
    """profile, as json.loads read it, checked field by field against what
    pyrometer writes (docs/profile-schema.md), with defaults for the optional
    fields an older pyrometer did not write; ProfileError otherwise."""
    if not isinstance(profile, dict) or "pyrometer_schema" not in profile:
        scalene = isinstance(profile, dict) and "files" in profile and "elapsed_time_sec" in profile
        raise ProfileError(f"{path} is not a pyrometer profile (no pyrometer_schema field"
                           + ("; it looks like Scalene's JSON)" if scalene else ")"))
    version = profile["pyrometer_schema"]
    if type(version) is not int or version < 1:
        raise ProfileError(f"{path} is not a pyrometer profile (pyrometer_schema is {_shown(version)})")
    if version > SCHEMA_VERSION:
        raise ProfileError(f"{path} was written by a newer pyrometer (profile schema {_shown(version)}; this one "
                           f"reads schema {SCHEMA_VERSION}): upgrade pyrometer to view it")
    where = f"{path} is damaged: "
    memory = profile.get("memory") is True
    _check_fields(profile, _TOP_WITH_MEMORY if memory else _TOP_CPU_ONLY, where)
    # Paused time is part of the run's wall time (the clocks differ: a little slack).
    if profile["paused_sec"] > profile["elapsed_time_sec"] * 1.01 + 0.01:
        raise ProfileError(f"{where}paused_sec ({profile['paused_sec']:g}) is more than the run's "
                           f"elapsed_time_sec ({profile['elapsed_time_sec']:g})")
    if memory:
        _check_scalene_footprint_names(profile, where)
    source = profile.get("gpu_utilization_source")
    if source is not None and source not in ("device", "process"):
        raise ProfileError(f"{where}gpu_utilization_source is {_shown(source)}: it must be \"device\" or \"process\"")
    if "call_stacks" in profile:
        _check_paths(profile["call_stacks"], where)
    tier = profile.get("gpu_kernel_tier")
    if tier is not None and tier not in ("off", "on", "absent", "busy", "failed"):
        raise ProfileError(f"{where}gpu_kernel_tier is {_shown(tier)}: it must be one of off, on, absent, busy, "
                           "failed")
    file_kind = _FILE_WITH_MEMORY if memory else _FILE_CPU_ONLY
    for name, f in profile["files"].items():
        _check_value(f, file_kind, f"{where}files[{_shown_name(name)}]")
    from .verdict import BOUNDS, decide
    verdict = profile.get("verdict")
    if verdict is None:
        # An older pyrometer's profile: the verdict from the figures it has.  Its
        # lines are those the profile kept (with @profile, only the decorated
        # functions'; with --reduced-profile, the significant ones).
        made = decide(profile, ((name, e) for name, f in profile["files"].items() for e in f["lines"]))
        try:
            _check_value(made, _VERDICT, "verdict")
        except ProfileError:
            # Each figure is finite, but their sums or ratios are not.
            raise ProfileError(f"{where}its times and volumes are too large to add up (a verdict made from "
                               "them is not finite)") from None
        profile["verdict"] = made
    else:
        for name in ("bound", "own_bound"):
            if verdict.get(name, "none") not in BOUNDS:
                raise ProfileError(f"{where}verdict.{name} is {_shown(verdict[name])}: it must be one of "
                                   + ", ".join(BOUNDS))
    return profile
