"""Synthetic profiles of any size, shaped like pyrometer's own (schema 1), for
testing and timing the renderers without running a program that big.

    python3 tests/synthetic.py 200 250 big.json   # 200 files x 250 lines
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

WORDS = ["total", "value", "items", "result", "data", "index", "count", "buffer", "frame", "matrix"]


def _entry(rng: random.Random, lineno: int, text: str, hot: float, memory: bool, elapsed: float) -> dict[str, Any]:
    py, native, system = (hot * rng.random(), hot * rng.random() * 0.5, hot * rng.random() * 0.2) if hot else (0, 0, 0)
    e: dict[str, Any] = {
        "lineno": lineno, "line": text,
        "n_cpu_percent_python": py, "n_cpu_percent_c": native, "n_sys_percent": system,
        "n_core_utilization": rng.random() if hot else 0.0,
        "n_cpu_python_sec": py * elapsed / 100, "n_cpu_native_sec": native * elapsed / 100,
        "n_sys_sec": system * elapsed / 100, "n_samples": int(hot * 10),
    }
    if memory:
        allocates = hot and rng.random() < 0.25
        mb = rng.random() * 200 if allocates else 0.0
        t0 = rng.random() * elapsed * 0.5
        timeline = [[round(t0 + i * elapsed / 200, 6), round(mb * (0.5 + 0.5 * rng.random()) * i / 99, 3)]
                    for i in range(100)] if allocates else []
        e.update({
            "n_malloc_mb": mb, "n_python_fraction": rng.random() if allocates else 0.0,
            "n_peak_mb": mb * 0.8, "n_growth_mb": mb * 0.1, "n_avg_mb": 1.0 if allocates else 0.0,
            "n_mallocs": int(mb), "n_usage_fraction": mb / 20000, "n_copy_mb_s": rng.random() * 50 if allocates else 0.0,
            "n_malloc_bytes": int(mb * 1048576), "n_free_bytes": int(mb * 943718), "n_copy_bytes": 0,
            "memory_samples": timeline,
        })
    return e


def make_profile(n_files: int = 200, lines_per_file: int = 250, memory: bool = True, seed: int = 1,
                 elapsed: float = 60.0, samples: int | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    files = {}
    n_hot = max(1, n_files * lines_per_file // 5)  # one line in five carries time
    share = 100.0 / n_hot
    for fi in range(n_files):
        name = f"/home/someone/project/pkg{fi % 7}/module_{fi:03d}.py"
        lines, functions = [], []
        for n in range(1, lines_per_file + 1):
            if n % 25 == 1:
                text = f"def {rng.choice(WORDS)}_{n}(self, {rng.choice(WORDS)}):"
            else:
                text = "    " * rng.randint(1, 3) + f"{rng.choice(WORDS)} = {rng.choice(WORDS)}[{n}] * {n}  # <b>&"
            hot = share * rng.random() * 2 if rng.random() < 0.2 else 0.0
            lines.append(_entry(rng, n, text, hot, memory, elapsed))
        for n in range(1, lines_per_file + 1, 25):
            functions.append(_entry(rng, n, f"Class{fi}.function_{n}", share * 5, memory, elapsed))
        f = {"percent_cpu_time": sum(e["n_cpu_percent_python"] + e["n_cpu_percent_c"] + e["n_sys_percent"]
                                     for e in lines),
             "lines": lines, "functions": functions, "imports": [], "leaks": {}}
        f["cpu_time_sec"] = f["percent_cpu_time"] * elapsed / 100
        if memory and fi % 50 == 0:
            f["leaks"] = {"12": {"likelihood": 0.99, "velocity_mb_s": 0.5, "growth_mb": 30.0}}
        files[name] = f
    profile: dict[str, Any] = {
        "pyrometer_schema": 1, "program": "synthetic.py", "args": ["--size", "big"], "python_version": "3.12.0",
        "platform": "linux", "start_time_absolute": 1.7e9, "elapsed_time_sec": elapsed, "exit_status": 0,
        "options": {"cpu_only": not memory, "profile_all": False, "profile_only": [], "profile_exclude": [],
                    "use_virtual_time": False, "cpu_percent_threshold": 1.0, "cpu_sampling_rate": 0.01,
                    "reduced_profile": False, "memory": memory, "malloc_threshold": 100.0,
                    "allocation_sampling_window": 1048576},
        "cpu_sampling_rate": 0.01, "sampling_interval_sec": 0.0101,
        "cpu_samples": int(elapsed * 100) if samples is None else samples, "cpu_samples_main_thread": 5000,
        "threads": 3, "n_cpus": 8, "process_cpu_time_sec": elapsed * 0.9, "profiler_cpu_time_sec": 0.2,
        "untracked_native_sec": 0.0, "profiler_memory_bytes": 1 << 24, "code_objects": 10, "code_objects_seen": 12, "total_time_sec": elapsed,
        "cpu_time_sec": {"python": elapsed * 0.6, "native": elapsed * 0.3, "system": elapsed * 0.1},
        "unattributed": {"python_sec": 0.0, "native_sec": 0.0, "system_sec": 0.0},
        "memory": memory, "gpu": False, "files": files,
    }
    if memory:
        first = next(iter(files))
        profile.update({
            "max_footprint_mb": 812.5, "max_footprint_where": {"filename": first, "lineno": 3},
            "max_footprint_time_sec": elapsed / 2, "footprint_mb": 120.0, "growth_rate_mb_s": 2.0,
            "samples": [[round(i * elapsed / 300, 4), round(400 + 400 * rng.random(), 3)] for i in range(300)],
            "top_allocations": [{"filename": name, "lineno": 5, "n_malloc_mb": 300.0 - i, "n_python_fraction": 0.5}
                                for i, name in enumerate(list(files)[:10])],
            "native_threads": {"malloc_mb": 0.0, "free_mb": 0.0, "copy_mb": 0.0},
            "unattributed_memory": {"malloc_mb": 0.0, "python_mb": 0.0, "free_mb": 0.0, "copy_mb": 0.0},
            "allocation_sampling_window_bytes": 1048576, "memory_samples_dropped": 0,
            "python_allocator": "pymalloc", "python_memory_profiled": True, "memory_samples_queued": 0,
        })
    return profile


def _rename_first_file(profile: dict[str, Any], name: str) -> None:
    old = next(iter(profile["files"]))
    profile["files"] = {name if k == old else k: v for k, v in profile["files"].items()}
    profile["max_footprint_where"]["filename"] = name


def _verdict(profile: dict[str, Any], summary: str = "Python CPU bounds this run.",
             filename: str = "/src/app.py") -> None:
    profile["verdict"] = {"bound": "python_cpu", "own_bound": "python_cpu", "summary": summary, "evidence": {},
                          "lines": [{"filename": filename, "lineno": 3, "line": "x = 1", "value": 1.5, "unit": "s",
                                     "percent": 60.0, "shown": True}]}


def _hot_line(profile: dict[str, Any], text: str) -> None:
    entry = next(iter(profile["files"].values()))["lines"][0]
    entry.update(line=text, n_cpu_percent_python=60.0)


# Every string a profile holds, by where it is: name -> plant(profile, text).
# The hostile-input tests put markup or escape sequences into each in turn.
STRING_FIELDS = {
    "program": lambda p, s: p.update(program=s),
    "args": lambda p, s: p.update(args=["--flag", s]),
    "python_version": lambda p, s: p.update(python_version=s),
    "platform": lambda p, s: p.update(platform=s),
    "notices": lambda p, s: p.update(notices=[s]),
    "options.profile_only": lambda p, s: p["options"].update(profile_only=[s]),
    "options.profile_exclude": lambda p, s: p["options"].update(profile_exclude=[s]),
    "file name": _rename_first_file,
    "source line": _hot_line,
    "function name": lambda p, s: next(iter(p["files"].values()))["functions"][0].update(line=s),
    "max_footprint_where.filename": lambda p, s: p["max_footprint_where"].update(filename="/elsewhere/" + s),
    "top_allocations.filename": lambda p, s: p["top_allocations"][0].update(filename="/elsewhere/" + s),
    "python_allocator": lambda p, s: p.update(python_allocator=s),
    "a field of a newer pyrometer": lambda p, s: p.update(comment={"text": [s]}),
    "verdict.summary": lambda p, s: _verdict(p, summary=s),
    "verdict.lines.filename": lambda p, s: _verdict(p, filename="/elsewhere/" + s),
}
# Those the terminal report shows (the others are in the web page only).
SHOWN_IN_TEXT = {"program", "args", "notices", "options.profile_only", "options.profile_exclude", "file name",
                 "source line", "function name", "max_footprint_where.filename", "top_allocations.filename",
                 "verdict.summary"}


if __name__ == "__main__":
    n_files, per_file, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    with open(out, "w") as f:
        json.dump(make_profile(n_files, per_file), f)
