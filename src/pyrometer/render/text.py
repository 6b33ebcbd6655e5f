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
    out.append("─" * min(width, max(len(line(header)), sum(widths) + 3 * right + 20)))
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
    shown = 0
    for filename, f in sorted(profile["files"].items(), key=lambda kv: -kv[1]["percent_cpu_time"]):
        if f["percent_cpu_time"] < threshold and not any(significant(e, threshold) for e in f["lines"]):
            continue
        shown += 1
        out.append("")
        out.append(paint(f"{display_name(filename)}: % of time = {f['percent_cpu_time']:.1f}% "
                         f"({f['cpu_time_sec']:.3f} s) out of {profile['total_time_sec']:.3f} s", BOLD))
        rows, styles = [], []
        for e in f["lines"]:
            share = _share(e)
            if profile["options"]["reduced_profile"] and share < threshold:
                continue
            rows.append([str(e["lineno"]), *_time_cells(e), e["line"].expandtabs(4)])
            styles.append((BOLD, RED) if share >= hot else (YELLOW,) if share >= threshold else ())
        out.extend(_table(rows, ["Line", "Time Python", "native", "system", "source"], 4, width, styles, paint))
        funcs = [e for e in f["functions"] if _share(e) >= 0.5]
        if funcs:
            out.append("")
            rows = [[str(e["lineno"]), *_time_cells(e), e["line"]] for e in funcs]
            styles = [(BOLD, RED) if _share(e) >= hot else () for e in funcs]
            out.extend(_table(rows, ["Line", "Time Python", "native", "system", "function summary"], 4,
                              width, styles, paint))
    if shown == 0 and profile["cpu_samples"] > 0:
        out.append("")
        out.append(f"No file of the program reached {threshold:g}% of the run time "
                   "(try --profile-all to include libraries).")
    out.append("")
    return "\n".join(out)
