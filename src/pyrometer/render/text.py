"""The terminal report: per file, the annotated source with its time columns, then
a function summary.  Reads only the finished profile (pyrometer.model)."""

from __future__ import annotations

import shutil
from typing import Any

from ..model import display_name, significant

# A line is highlighted as hot when it takes this many times the CPU threshold.
HOT_FACTOR = 5.0

BOLD, RED, YELLOW, DIM, RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[2m", "\x1b[0m"


def terminal_width() -> int:
    return max(60, shutil.get_terminal_size((132, 24)).columns)


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 10) -> str:
    """A unicode sparkline of at most `width` characters (values resampled)."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [max(values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)]) for i in range(width)]
    low, high = min(min(values), 0.0), max(values)
    if high <= low:
        return SPARKS[0] * len(values)
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - low) / (high - low) * (len(SPARKS) - 1) + 0.5))]
                   for v in values)


def _mb(value: float) -> str:
    if value < 0.5:
        return ""
    return f"{value:.0f}M" if value < 10000 else f"{value / 1024:.0f}G"


def _memory_cells(entry: dict[str, Any]) -> list[str]:
    if entry.get("n_malloc_mb", 0.0) < 0.5 and entry.get("n_copy_mb_s", 0.0) < 0.5:
        return ["", "", "", ""]
    spark = sparkline([mb for _, mb in entry["memory_samples"]], 8)
    usage = entry["n_usage_fraction"] * 100
    return [
        f"{entry['n_python_fraction'] * 100:.0f}%" if entry["n_malloc_mb"] >= 0.5 else "",
        _mb(entry["n_peak_mb"]),
        f"{spark} {usage:.0f}%" if entry["n_malloc_mb"] >= 0.5 else "",
        f"{entry['n_copy_mb_s']:.0f}" if entry["n_copy_mb_s"] >= 0.5 else "",
    ]


def _pct(value: float) -> str:
    if value < 0.5:
        return ""
    return f"{value:.0f}%"


def _time_cells(entry: dict[str, Any]) -> list[str]:
    return [_pct(entry["n_cpu_percent_python"]), _pct(entry["n_cpu_percent_c"]), _pct(entry["n_sys_percent"])]


def _share(entry: dict[str, Any]) -> float:
    return entry["n_cpu_percent_python"] + entry["n_cpu_percent_c"] + entry["n_sys_percent"]


class _Painter:
    def __init__(self, color: bool):
        self.color = color

    def __call__(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        return "".join(styles) + text + RESET


def _table(rows: list[list[str]], header: list[str], right: int, width: int,
           styles: list[tuple[str, ...]], paint: _Painter) -> list[str]:
    """Columns 0..right-1 right-aligned, the last column (source/name) cut to width."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
              for i in range(right)]
    def line(cells: list[str]) -> str:
        left = " │ ".join(c.rjust(w) for c, w in zip(cells[:right], widths))
        out = f"{left} │ {cells[right]}"
        return out if len(out) <= width else out[: width - 1] + "…"
    out = [paint(line(header), BOLD)]
    out.append("─" * min(width, len(line(header))))
    for r, s in zip(rows, styles):
        out.append(paint(line(r), *s))
    return out


def render(profile: dict[str, Any], color: bool = False, width: int = 132) -> str:
    paint = _Painter(color)
    threshold = profile["options"]["cpu_percent_threshold"]
    hot = threshold * HOT_FACTOR
    cpu = profile["cpu_time_sec"]
    out: list[str] = []
    title = f"pyrometer: {profile['program']}"
    if profile["args"]:
        title += " " + " ".join(profile["args"])
    out.append(paint(title, BOLD))
    out.append(
        f"elapsed {profile['elapsed_time_sec']:.3f} s · "
        f"Python {cpu['python']:.3f} s · native {cpu['native']:.3f} s · system {cpu['system']:.3f} s · "
        f"{profile['cpu_samples']} samples (every {profile['sampling_interval_sec'] * 1e3:.2f} ms on average) · "
        f"{profile['threads']} thread{'s' if profile['threads'] != 1 else ''}")
    if profile["cpu_samples"] == 0:
        out.append("The program ran too briefly to be sampled: no time could be attributed to its lines.")
    memory = profile.get("memory", False)
    malloc_threshold = profile["options"].get("malloc_threshold") if memory else None
    if memory:
        spark = sparkline([mb for _, mb in profile["samples"]], 40)
        where = profile["max_footprint_where"]
        at = f" at {display_name(where['filename'])}:{where['lineno']}" if where else ""
        out.append(f"memory: peak {profile['max_footprint_mb']:.1f} MB{at} · "
                   f"growth {profile['growth_rate_mb_s']:.1f} MB/s · footprint {spark}")
        native = profile["native_threads"]
        if native["malloc_mb"] >= 0.5:
            out.append(f"threads without Python frames allocated {native['malloc_mb']:.0f} MB (native)")
    shown = 0
    for filename, f in sorted(profile["files"].items(), key=lambda kv: -kv[1]["percent_cpu_time"]):
        if f["percent_cpu_time"] < threshold and not any(
                significant(e, threshold, malloc_threshold) for e in f["lines"]):
            continue
        shown += 1
        out.append("")
        out.append(paint(f"{display_name(filename)}: % of time = {f['percent_cpu_time']:.1f}% "
                         f"({f['cpu_time_sec']:.3f} s) out of {profile['total_time_sec']:.3f} s", BOLD))
        header = ["Line", "Time Python", "native", "system"]
        if memory:
            header += ["Memory Python", "peak", "timeline / %", "Copy MB/s"]
        cells = (lambda e: [*_time_cells(e), *_memory_cells(e)]) if memory else _time_cells
        rows, styles = [], []
        for e in f["lines"]:
            share = _share(e)
            if profile["options"]["reduced_profile"] and not significant(e, threshold, malloc_threshold):
                continue
            rows.append([str(e["lineno"]), *cells(e), e["line"].expandtabs(4)])
            heavy = malloc_threshold is not None and e.get("n_malloc_mb", 0.0) >= malloc_threshold
            styles.append((BOLD, RED) if share >= hot else (YELLOW,) if share >= threshold or heavy else ())
        out.extend(_table(rows, header + ["source"], len(header), width, styles, paint))
        funcs = [e for e in f["functions"] if _share(e) >= 0.5 or e.get("n_malloc_mb", 0.0) >= 0.5]
        if funcs:
            out.append("")
            rows = [[str(e["lineno"]), *cells(e), e["line"]] for e in funcs]
            styles = [(BOLD, RED) if _share(e) >= hot else () for e in funcs]
            out.extend(_table(rows, header + ["function summary"], len(header), width, styles, paint))
        for lineno, leak in sorted(f.get("leaks", {}).items(), key=lambda kv: -kv[1]["velocity_mb_s"]):
            out.append(paint(f"possible leak at line {lineno}: {leak['growth_mb']:.1f} MB not freed, "
                             f"{leak['velocity_mb_s']:.2f} MB/s (likelihood {leak['likelihood'] * 100:.1f}%)",
                             BOLD, RED))
    if memory and profile["top_allocations"]:
        out.append("")
        out.append(paint("Top allocating lines", BOLD))
        for t in profile["top_allocations"][:5]:
            out.append(f"  {display_name(t['filename'])}:{t['lineno']}: {t['n_malloc_mb']:.0f} MB "
                       f"({t['n_python_fraction'] * 100:.0f}% Python)")
    if shown == 0 and profile["cpu_samples"] > 0:
        out.append("")
        out.append(f"No file of the program reached {threshold:g}% of the run time "
                   "(try --profile-all to include libraries).")
    out.append("")
    return "\n".join(out)
