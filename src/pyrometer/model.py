"""The profile model: the C core's aggregates turned into the one document that
every renderer reads (terminal, JSON, and later HTML).  Field names follow
Scalene's JSON where Scalene reports the same quantity; docs/profile-schema.md
lists every field with its unit.  Renderers never recompute these numbers."""

from __future__ import annotations

import os
import sys
import tokenize
from collections import defaultdict
from typing import Any

SCHEMA_VERSION = 1
NS = 1e-9


def _source_lines(filename: str) -> list[str]:
    try:
        with tokenize.open(filename) as f:  # honours the file's coding line
            return [line.rstrip("\r\n") for line in f]
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []


class _Sums:
    __slots__ = ("python", "native", "system", "gil_wait", "cpu_wait", "busy", "samples")

    def __init__(self) -> None:
        self.python = self.native = self.system = self.gil_wait = self.cpu_wait = self.busy = 0.0
        self.samples = 0

    def add(self, cpu: tuple) -> None:
        python, native, system, busy, samples, gil_wait, cpu_wait = cpu
        self.python += python * NS
        self.native += native * NS
        self.system += system * NS
        self.gil_wait += gil_wait * NS
        self.cpu_wait += cpu_wait * NS
        self.busy += busy * NS
        self.samples += samples

    def merge(self, other: "_Sums") -> None:
        for name in ("python", "native", "system", "gil_wait", "cpu_wait"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def total(self) -> float:
        return self.python + self.native + self.system + self.gil_wait + self.cpu_wait

    def fields(self, denominator: float) -> dict[str, Any]:
        pct = (100.0 / denominator) if denominator > 0 else 0.0
        return {
            "n_cpu_percent_python": self.python * pct,
            "n_cpu_percent_c": self.native * pct,
            "n_sys_percent": self.system * pct,
            "n_gil_wait_percent": self.gil_wait * pct,
            "n_cpu_wait_percent": self.cpu_wait * pct,
            "n_core_utilization": (self.busy / self.total) if self.total > 0 else 0.0,
            "n_cpu_python_sec": self.python,
            "n_cpu_native_sec": self.native,
            "n_sys_sec": self.system,
            "n_gil_wait_sec": self.gil_wait,
            "n_cpu_wait_sec": self.cpu_wait,
            "n_samples": self.samples,
        }


MB = 1048576.0
# A line is reported as leaking when the chance that its next sampled allocation
# is never freed (Laplace's rule of succession over its watched samples) is at
# least this, while the run's footprint grew.
LEAK_LIKELIHOOD = 0.95
LEAK_MIN_SAMPLES = 3


class _Memory:
    """Memory samples of one line or function, from the C core's records."""
    __slots__ = ("alloc", "python", "free", "copy", "mallocs", "net", "peak",
                 "watched", "freed", "evicted", "timeline")

    def __init__(self) -> None:
        self.alloc = self.python = self.free = self.copy = 0
        self.mallocs = self.net = self.peak = 0
        self.watched = self.freed = self.evicted = 0
        self.timeline: list = []

    def add(self, r: dict[str, Any]) -> None:
        self.alloc += r["alloc_bytes"]
        self.python += r["python_bytes"]
        self.free += r["free_bytes"]
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

    def leak_likelihood(self) -> float:
        watched = self.watched - self.evicted
        return 1.0 - (self.freed + 1) / (watched + 2) if watched >= 0 else 0.0

    def fields(self, activity: float, elapsed: float) -> dict[str, Any]:
        return {
            "n_malloc_mb": self.alloc / MB,
            "n_python_fraction": self.python / self.alloc if self.alloc else 0.0,
            "n_peak_mb": max(self.peak, self.net, 0) / MB,  # what is live at the end was live at once
            "n_growth_mb": self.net / MB,
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


def time_share(entry: dict[str, Any]) -> float:
    """A line's or function's share of the run's time, in percent, of every kind."""
    return (entry["n_cpu_percent_python"] + entry["n_cpu_percent_c"] + entry["n_sys_percent"]
            + entry.get("n_gil_wait_percent", 0.0) + entry.get("n_cpu_wait_percent", 0.0))


def _significant(entry: dict[str, Any], threshold: float, malloc_threshold: float | None = None) -> bool:
    cpu = time_share(entry) >= threshold
    return cpu or (malloc_threshold is not None and entry.get("n_malloc_mb", 0.0) >= malloc_threshold)


def build(raw: dict[str, Any], *, program: str, argv: list[str], options: dict[str, Any],
          elapsed: float, start_time: float, exit_status: int | None,
          ended_by: str | None = "exit", notices: list[str] | None = None) -> dict[str, Any]:
    """ended_by: how the run ended ("exit", "exec", "os._exit", a signal's name,
    "unknown"), None for a snapshot of a run still going; notices: lines a reader
    must see, besides those the data itself calls for."""
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
        activity += r["alloc_bytes"] + r["free_bytes"]
        lines[r["filename"]]  # a file with memory samples only is still reported

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
    threshold = options["cpu_percent_threshold"]
    malloc_threshold = options["malloc_threshold"] if memory else None
    reduced = options["reduced_profile"]
    footprint_grew = bool(memory) and memory["footprint_bytes"] >= memory["window_bytes"]
    leak_detector = bool(memory) and memory["leak_detector"]

    files: dict[str, Any] = {}
    for filename in sorted(lines):
        per_line = lines[filename]
        per_line_mem = mem_lines.get(filename, {})
        source = _source_lines(filename)
        line_entries = []
        leaks = {}
        for lineno in _lines_to_report(len(source), set(per_line) | set(per_line_mem)):
            entry = {"lineno": lineno, "line": source[lineno - 1] if lineno <= len(source) else ""}
            entry.update((per_line.get(lineno) or _Sums()).fields(denominator))
            if memory:
                m = per_line_mem.get(lineno, _NO_MEMORY)
                entry.update(m.fields(activity, elapsed))
                likelihood = m.leak_likelihood()
                if (leak_detector and footprint_grew and m.net > 0 and m.watched - m.evicted >= LEAK_MIN_SAMPLES
                        and likelihood >= LEAK_LIKELIHOOD):
                    leaks[str(lineno)] = {"likelihood": likelihood,
                                          "velocity_mb_s": m.net / MB / elapsed if elapsed > 0 else 0.0,
                                          "growth_mb": m.net / MB}
            if not reduced or _significant(entry, threshold, malloc_threshold):
                line_entries.append(entry)
        function_entries = []
        keys = set(functions[filename]) | set(mem_functions.get(filename, {}))
        for qualname, firstlineno in sorted(keys, key=lambda k: (k[1], k[0])):
            entry = {"lineno": firstlineno, "line": qualname}
            entry.update(functions[filename].get((qualname, firstlineno), _Sums()).fields(denominator))
            if memory:
                entry.update(mem_functions[filename].get((qualname, firstlineno), _NO_MEMORY).fields(activity, elapsed))
            if not reduced or _significant(entry, threshold, malloc_threshold):
                function_entries.append(entry)
        file_total = _Sums()
        for s in per_line.values():
            file_total.merge(s)
        files[filename] = {
            "percent_cpu_time": file_total.total * 100.0 / denominator if denominator else 0.0,
            "cpu_time_sec": file_total.total,
            "lines": line_entries,
            "functions": function_entries,
            "imports": [],
            "leaks": leaks,
        }

    return {
        "pyrometer_schema": SCHEMA_VERSION,
        "program": program,
        "args": argv[1:],
        "python_version": sys.version.split()[0],
        "platform": sys.platform,
        "start_time_absolute": start_time,
        "elapsed_time_sec": elapsed,
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
        "unattributed": {
            "python_sec": unattributed.python,
            "native_sec": unattributed.native,
            "system_sec": unattributed.system,
            "gil_wait_sec": unattributed.gil_wait,
            "cpu_wait_sec": unattributed.cpu_wait,
        },
        "memory": bool(memory),
        "gpu": False,
        "notices": [*(notices or []), *_notices(memory, raw["functions_overflowed"])],
        **(_run_memory(memory, mem_lines, elapsed) if memory else {}),
        "files": files,
    }


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
    return {
        "max_footprint_mb": max(memory["max_footprint_bytes"], 0) / MB,
        "max_footprint_where": {"filename": where[0], "lineno": where[1]} if where else None,
        "max_footprint_time_sec": memory["max_footprint_time_sec"],
        "footprint_mb": memory["footprint_bytes"] / MB,
        "growth_rate_mb_s": memory["footprint_bytes"] / MB / elapsed if elapsed > 0 else 0.0,
        "samples": [[round(t, 6), round(mb, 3)] for t, mb in memory["footprint"]],
        "top_allocations": [{"filename": f, "lineno": n, "n_malloc_mb": a / MB,
                             "n_python_fraction": m.python / a if a else 0.0}
                            for a, f, n, m in top if a > 0],
        "native_threads": {"malloc_mb": memory["native_thread_alloc_bytes"] / MB,
                           "free_mb": memory["native_thread_free_bytes"] / MB,
                           "copy_mb": memory["native_thread_copy_bytes"] / MB},
        "unattributed_memory": {"malloc_mb": memory["unattributed_alloc_bytes"] / MB,
                                "python_mb": memory["unattributed_python_bytes"] / MB,
                                "free_mb": memory["unattributed_free_bytes"] / MB,
                                "copy_mb": memory["unattributed_copy_bytes"] / MB},
        "allocation_sampling_window_bytes": memory["window_bytes"],
        "memory_samples_dropped": memory["dropped_samples"],
        "memory_samples_queued": memory.get("queued_samples", 0),
        "python_allocator": memory["python_allocator"],
        "python_memory_profiled": bool(memory["python_memory_profiled"]),
    }


def _notices(memory: dict[str, Any] | None, functions_overflowed: int = 0) -> list[str]:
    """What a reader must know to read the profile right, one line each."""
    out = []
    if functions_overflowed:
        out.append(f"more than {SITES_MAX:,} distinct functions: {functions_overflowed:,} code objects "
                   "of further ones are reported together as <other functions>")
    if memory and not memory["python_memory_profiled"]:
        name = memory["python_allocator"]
        what = "was replaced by another tool" if name == "unknown" else f"({name}) does not tell its block sizes"
        out.append(f"Python's allocator {what}: Python memory is not profiled, only native memory "
                   "(under PYTHONMALLOC=pymalloc, malloc or debug it would be)")
    return out


def significant(entry: dict[str, Any], threshold: float, malloc_threshold: float | None = None) -> bool:
    """Whether a line or function reaches the CPU threshold (percent of run time)
    or, when memory was profiled, the malloc threshold (MB allocated)."""
    return _significant(entry, threshold, malloc_threshold)


def display_name(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def reduced(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile as --reduced-profile would have written it: only the lines and
    functions at or above the thresholds."""
    options = dict(profile["options"], reduced_profile=True)
    threshold = options["cpu_percent_threshold"]
    malloc_threshold = options.get("malloc_threshold") if profile.get("memory") else None
    files = {name: dict(f, lines=[e for e in f["lines"] if _significant(e, threshold, malloc_threshold)],
                        functions=[e for e in f["functions"] if _significant(e, threshold, malloc_threshold)])
             for name, f in profile["files"].items()}
    return dict(profile, options=options, files=files)


# ---------------------------------------------------------------------------
# Reading a saved profile (pyrometer view): possibly from another machine or
# another version, possibly damaged.  Every problem becomes a ProfileError with
# a message a user can act on; the renderers then only see well-formed profiles.
# ---------------------------------------------------------------------------

class ProfileError(Exception):
    """A file that cannot be shown as a pyrometer profile."""


_NUMBER = (int, float)
# What the renderers read, by where it is: field -> type.  Optional fields get a
# default when missing (profiles of an older pyrometer of the same schema).
_TOP = {"program": str, "args": list, "elapsed_time_sec": _NUMBER, "options": dict,
        "cpu_time_sec": dict, "files": dict, "total_time_sec": _NUMBER}
_TOP_DEFAULTS = {"cpu_samples": 0, "sampling_interval_sec": 0.0, "threads": 0, "memory": False, "gpu": False,
                 "notices": [],
                 "exit_status": None, "ended_by": None, "python_version": "?", "platform": "?", "n_cpus": 0}
_OPTION_DEFAULTS = {"cpu_percent_threshold": 1.0, "reduced_profile": False, "malloc_threshold": 100.0,
                    "cpu_sampling_rate": 0.01, "cpu_only": False, "profile_all": False, "profile_only": [],
                    "profile_exclude": [], "use_virtual_time": False}
_MEMORY_TOP = {"max_footprint_mb": _NUMBER, "growth_rate_mb_s": _NUMBER, "samples": list,
               "top_allocations": list}
_MEMORY_TOP_DEFAULTS = {"max_footprint_where": None, "native_threads": {"malloc_mb": 0.0, "free_mb": 0.0,
                                                                        "copy_mb": 0.0},
                        "footprint_mb": 0.0, "max_footprint_time_sec": 0.0}
_ENTRY = {"lineno": int, "line": str, "n_cpu_percent_python": _NUMBER, "n_cpu_percent_c": _NUMBER,
          "n_sys_percent": _NUMBER}
_ENTRY_DEFAULTS = {"n_cpu_python_sec": 0.0, "n_cpu_native_sec": 0.0, "n_sys_sec": 0.0,
                   "n_gil_wait_percent": 0.0, "n_cpu_wait_percent": 0.0, "n_gil_wait_sec": 0.0,
                   "n_cpu_wait_sec": 0.0,
                   "n_core_utilization": 0.0, "n_samples": 0}
_MEMORY_ENTRY_DEFAULTS = {"n_malloc_mb": 0.0, "n_python_fraction": 0.0, "n_peak_mb": 0.0, "n_growth_mb": 0.0,
                          "n_avg_mb": 0.0, "n_mallocs": 0, "n_usage_fraction": 0.0, "n_copy_mb_s": 0.0,
                          "memory_samples": []}


def _check(obj: dict, required: dict, defaults: dict, where: str) -> None:
    for key, kind in required.items():
        if key not in obj:
            raise ProfileError(f"{where}{key} is missing")
        value = obj[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is _NUMBER:
            raise ProfileError(f"{where}{key} has the wrong type ({type(value).__name__})")
    for key, value in defaults.items():
        obj.setdefault(key, value)


def load(path: str) -> dict[str, Any]:
    """A saved profile, checked: ProfileError says what is wrong with it."""
    import json
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProfileError(f"cannot read {path}: {e.strerror or e}") from None
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
    return check(profile, path)


def check(profile: Any, path: str = "the profile") -> dict[str, Any]:
    if not isinstance(profile, dict) or "pyrometer_schema" not in profile:
        scalene = isinstance(profile, dict) and "files" in profile and "elapsed_time_sec" in profile
        raise ProfileError(f"{path} is not a pyrometer profile (no pyrometer_schema field"
                           + ("; it looks like Scalene's JSON)" if scalene else ")"))
    version = profile["pyrometer_schema"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ProfileError(f"{path} is not a pyrometer profile (pyrometer_schema is {version!r})")
    if version > SCHEMA_VERSION:
        raise ProfileError(f"{path} was written by a newer pyrometer (profile schema {version}; this one "
                           f"reads schema {SCHEMA_VERSION}): upgrade pyrometer to view it")
    where = f"{path} is damaged: "
    _check(profile, _TOP, _TOP_DEFAULTS, where)
    _check(profile["options"], {}, _OPTION_DEFAULTS, where + "options.")
    _check(profile["cpu_time_sec"], {"python": _NUMBER, "native": _NUMBER, "system": _NUMBER}, {},
           where + "cpu_time_sec.")
    memory = bool(profile["memory"])
    if memory:
        _check(profile, _MEMORY_TOP, _MEMORY_TOP_DEFAULTS, where)
    for name, f in profile["files"].items():
        at = f"{where}files[{name!r}]."
        if not isinstance(f, dict):
            raise ProfileError(f"{at[:-1]} is not an object")
        _check(f, {"percent_cpu_time": _NUMBER, "cpu_time_sec": _NUMBER, "lines": list},
               {"functions": [], "leaks": {}, "imports": []}, at)
        for kind in ("lines", "functions"):
            for i, e in enumerate(f[kind]):
                if not isinstance(e, dict):
                    raise ProfileError(f"{at}{kind}[{i}] is not an object")
                _check(e, _ENTRY, _ENTRY_DEFAULTS, f"{at}{kind}[{i}].")
                if memory:
                    _check(e, {}, _MEMORY_ENTRY_DEFAULTS, f"{at}{kind}[{i}].")
    return profile
