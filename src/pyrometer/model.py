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
    __slots__ = ("python", "native", "system", "busy", "samples")

    def __init__(self) -> None:
        self.python = self.native = self.system = self.busy = 0.0
        self.samples = 0

    def add(self, cpu: tuple) -> None:
        python, native, system, busy, samples = cpu
        self.python += python * NS
        self.native += native * NS
        self.system += system * NS
        self.busy += busy * NS
        self.samples += samples

    @property
    def total(self) -> float:
        return self.python + self.native + self.system

    def fields(self, denominator: float) -> dict[str, Any]:
        pct = (100.0 / denominator) if denominator > 0 else 0.0
        return {
            "n_cpu_percent_python": self.python * pct,
            "n_cpu_percent_c": self.native * pct,
            "n_sys_percent": self.system * pct,
            "n_core_utilization": (self.busy / self.total) if self.total > 0 else 0.0,
            "n_cpu_python_sec": self.python,
            "n_cpu_native_sec": self.native,
            "n_sys_sec": self.system,
            "n_samples": self.samples,
        }


def _significant(entry: dict[str, Any], threshold: float) -> bool:
    return (entry["n_cpu_percent_python"] + entry["n_cpu_percent_c"] + entry["n_sys_percent"]) >= threshold


def build(raw: dict[str, Any], *, program: str, argv: list[str], options: dict[str, Any],
          elapsed: float, start_time: float, exit_status: int | None) -> dict[str, Any]:
    lines: dict[str, dict[int, _Sums]] = defaultdict(lambda: defaultdict(_Sums))
    functions: dict[str, dict[tuple[str, int], _Sums]] = defaultdict(lambda: defaultdict(_Sums))
    for filename, lineno, qualname, firstlineno, cpu in raw["records"]:
        lines[filename][lineno].add(cpu)
        functions[filename][(qualname, firstlineno)].add(cpu)

    unattributed = _Sums()
    unattributed.add(raw["unattributed"])
    every_line = _Sums()
    for per_line in lines.values():
        for s in per_line.values():
            every_line.python += s.python
            every_line.native += s.native
            every_line.system += s.system
    # The denominator of every percentage: all time charged to reported lines, plus
    # CPU that ran where no reported line was on the stack.  Idle time of threads
    # that never touch the program's code (a pool waiting for work) is left out.
    denominator = every_line.total + unattributed.python + unattributed.native
    threshold = options["cpu_percent_threshold"]
    reduced = options["reduced_profile"]

    files: dict[str, Any] = {}
    for filename in sorted(lines):
        per_line = lines[filename]
        source = _source_lines(filename)
        n = max(len(source), max(per_line, default=0))
        line_entries = []
        for lineno in range(1, n + 1):
            entry = {"lineno": lineno, "line": source[lineno - 1] if lineno <= len(source) else ""}
            entry.update((per_line.get(lineno) or _Sums()).fields(denominator))
            if not reduced or _significant(entry, threshold):
                line_entries.append(entry)
        function_entries = []
        for (qualname, firstlineno), s in sorted(functions[filename].items(), key=lambda kv: kv[0][1]):
            entry = {"lineno": firstlineno, "line": qualname}
            entry.update(s.fields(denominator))
            if not reduced or _significant(entry, threshold):
                function_entries.append(entry)
        file_total = _Sums()
        for s in per_line.values():
            file_total.python += s.python
            file_total.native += s.native
            file_total.system += s.system
        files[filename] = {
            "percent_cpu_time": file_total.total * 100.0 / denominator if denominator else 0.0,
            "cpu_time_sec": file_total.total,
            "lines": line_entries,
            "functions": function_entries,
            "imports": [],
            "leaks": {},
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
        "total_time_sec": denominator,
        "cpu_time_sec": {
            "python": every_line.python + unattributed.python,
            "native": every_line.native + unattributed.native,
            "system": every_line.system,
        },
        "unattributed": {
            "python_sec": unattributed.python,
            "native_sec": unattributed.native,
            "system_sec": unattributed.system,
        },
        "memory": False,
        "gpu": False,
        "files": files,
    }


def significant(entry: dict[str, Any], threshold: float) -> bool:
    """Whether a line or function reaches the CPU threshold (percent of run time)."""
    return _significant(entry, threshold)


def display_name(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
