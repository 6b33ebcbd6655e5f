"""The terminal report of `pyrometer diff`: the runs' totals before and after,
then the findings (changes beyond noise) by kind, largest first, then what
was inserted, removed and edited.  Reads only the diff (pyrometer.diff), and
lays its tables out as the profile's text report does (render/text.py)."""

from __future__ import annotations

import re
import time

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..model.units import display_name
from .text import BOLD, DIM, RED, _Painter, _table, _wrapped, cut, visible

GREEN = "\x1b[32m"

# Findings listed per kind in the terminal (--json and --html have them all).
FINDING_ROWS = 20
# New, removed and edited lines listed by their text.
CHANGED_ROWS = 12


def _amount(value: float, unit: str, signed: bool = False) -> str:
    sign = "+" if signed and value > 0 else ""
    if unit == "s":
        return f"{sign}{value:.3f} s"
    if unit == "MB":
        return f"{sign}{value:.1f} MB"
    if unit == "%":
        return f"{sign}{value:.1f}%"
    return f"{sign}{value:,.0f}"


def _ratio(before: float, after: float) -> str:
    """How many times: always 1 or more, the direction said by the section."""
    if before <= 0:
        return "new"
    if after <= 0:
        return "gone"
    r = max(before, after) / min(before, after)
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def _lines(a: int | None, b: int | None) -> str:
    if a is None:
        return str(b)
    if b is None or a == b:
        return str(a)
    return f"{a}→{b}"


def _run_line(label: str, run: dict[str, Any]) -> str:
    args = " ".join(run["args"])
    when = ""
    if run.get("start_time_absolute"):
        when = " · " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run["start_time_absolute"]))
    what = "CPU + memory" if run["memory"] else "CPU only"
    if run["gpu"]:
        what += " + GPU"
    return (f"{label} {run['path']}: {run['program']}{' ' + args if args else ''}{when} · {what} · "
            f"{run['cpu_samples']} samples")


def _where(f: dict[str, Any]) -> str:
    name = display_name(f["file_after"] or f["file_before"])
    where = f"{name}:{_lines(f['lineno_before'], f['lineno_after'])}"
    if f["kind"] == "function":
        return f"{where} function {f['text']}"
    status = "" if f["status"] in ("same", "moved") else f" [{f['status']}]"
    return f"{where}{status}  {f['text'].strip()}"


def render(diff: dict[str, Any], color: bool = False, width: int = 132) -> str:
    paint = _Painter(color)
    out: list[str] = []
    said: set[str] = set()

    def add(text: str, *styles: str) -> None:
        out.extend(paint(line, *styles) for line in _wrapped(visible(text), width))

    add(f"pyrometer diff: {diff['before']['path']} → {diff['after']['path']}", BOLD)
    add(_run_line("before", diff["before"]))
    add(_run_line("after ", diff["after"]))
    for notice in diff["notices"]:
        add("notice: " + notice, BOLD)

    out.append("")
    out.extend(_totals(diff["totals"], width, paint))

    sections: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in diff["findings"]:
        sections.setdefault((f["figure"], f["direction"]), []).append(f)
    units = {t["figure"]: t["unit"] for t in diff["totals"]}
    units.update(time_sec="s", peak_mb="MB", growth_mb="MB")
    if not sections:
        out.append("")
        add("No change beyond noise: every line and function is within its sampling noise "
            "(see docs/diff.md).", BOLD)
    for (figure, direction), rows in sorted(sections.items(), key=lambda kv: _section_order(kv[0])):
        rows = sorted(rows, key=lambda f: -abs(f["change"]))
        out.append("")
        good = direction in ("faster", "allocates less", "peak smaller", "keeps less", "copies less",
                             "GPU faster", "GPU memory smaller")
        add(f"{direction[:1].upper() + direction[1:]}: {len(rows)} beyond noise", BOLD, GREEN if good else RED)
        unit = units.get(figure, "")
        table = [[_ratio(f["before"], f["after"]), _amount(f["before"], unit), _amount(f["after"], unit),
                  _amount(f["change"], unit, True), "±" + _amount(f["noise"], unit), visible(_where(f))]
                 for f in rows[:FINDING_ROWS]]
        out.extend(_without_blank_names(_table(table, ["ratio", "before", "after", "change", "noise", "where"], 5,
                                               width, [()] * len(table), paint, said)))
        if len(rows) > FINDING_ROWS:
            add(f"... and {len(rows) - FINDING_ROWS} more (--json or --html lists them all)", DIM)

    out.append("")
    out.extend(_changed_lines(diff, width, paint))
    noise = diff["within_noise"]
    if noise["lines"] or noise["functions"]:
        add(f"Within noise: {_count(noise['lines'], 'line')} and {_count(noise['functions'], 'function')} "
            f"changed by less than their noise ({diff['noise']['z']:g} standard errors): not findings.", DIM)
    for f in diff["files"]:
        t = f["figures"]["time_sec"]
        times = f"time {_amount(t['before'], 's')} → {_amount(t['after'], 's')}"
        verdict = f", {', '.join(f['verdict'])}" if f["verdict"] else ""
        if f["status"] != "matched":
            add(f"{'New' if f['status'] == 'new' else 'Removed'} file: {display_name(f['after'] or f['before'])} "
                f"({times})")
        elif f["matched_by"] != "path" or f["verdict"]:
            how = {"path": "", "suffix": ", matched by its path's end", "source": ", matched by its source"}
            names = (display_name(f["after"]) if f["before"] == f["after"]
                     else f"{display_name(f['before'])} ↔ {display_name(f['after'])}")
            add(f"File {names} ({times}{verdict}{how[f['matched_by']]})")
    out.append("")
    return "\n".join(out)


_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _without_blank_names(lines: list[str]) -> list[str]:
    """A table whose column names are all one word has, in the layouts that
    put names on two rows, an empty first row: left out."""
    return lines[1:] if lines and not _ESCAPE.sub("", lines[0]).strip() else lines


_SECTIONS = ["time_sec", "allocated_mb", "peak_mb", "growth_mb", "copy_mb", "gpu_sec", "gpu_peak_memory_mb"]


def _section_order(key: tuple[str, str]) -> tuple[int, str]:
    figure, direction = key
    return (_SECTIONS.index(figure) if figure in _SECTIONS else len(_SECTIONS), direction)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _totals(totals: list[dict[str, Any]], width: int, paint: _Painter) -> list[str]:
    """The runs' figures side by side; a change within noise is marked ~."""
    rows = []
    for t in totals:
        unit = t["unit"]
        mark = "" if t["figure"] == "cpu_samples" else ("" if t["significant"] else "~")
        ratio = f"{t['ratio']:.2f}x" if t["ratio"] is not None else ""
        rows.append([_amount(t["before"], unit), _amount(t["after"], unit), _amount(t["change"], unit, True),
                     ratio, mark, t["label"]])
    out = _without_blank_names(_table(rows, ["before", "after", "change", "ratio", "", "run"], 5, width,
                                      [()] * len(rows), paint))
    out.append(paint(cut("(~: within noise; ratio: after / before)", width), DIM))
    return out


def _changed_lines(diff: dict[str, Any], width: int, paint: _Painter) -> list[str]:
    """New, removed and edited lines: runs of line numbers per file, and the
    text of those with data (or the first few)."""
    out = []
    for status, title in (("new", "New lines"), ("removed", "Removed lines"), ("edited", "Edited lines"),
                          ("moved", "Moved lines")):
        for f in diff["files"]:
            entries = [e for e in f["lines"] if e["status"] == status]
            if not entries:
                continue
            name = display_name(f["after"] or f["before"])
            numbers = [e["lineno_after"] if status != "removed" else e["lineno_before"] for e in entries]
            with_data = sum(1 for e in entries if e["has_data"])
            out.extend(paint(line) for line in _wrapped(visible(
                f"{title} in {name}: {_spans(numbers)} ({_count(len(entries), 'line')}, "
                f"{with_data or 'none'} with data)"), width))
            shown = [e for e in entries if e["has_data"]] or [e for e in entries if e["line"].strip()]
            for e in shown[:CHANGED_ROWS]:
                text = f"  {_lines(e['lineno_before'], e['lineno_after'])}: {e['line'].strip()}"
                if status == "edited":
                    text += f"  (was: {e['line_before'].strip()})"
                out.append(cut(visible(text), width))
            if len(shown) > CHANGED_ROWS:
                out.append(paint(cut(f"  ... and {len(shown) - CHANGED_ROWS} more", width), DIM))
    return out


def _spans(numbers: list[int]) -> str:
    """1, 2, 3, 7 -> "1-3, 7"."""
    numbers = sorted(set(numbers))
    parts = []
    start = prev = None
    for n in numbers + [None]:
        if start is not None and (n is None or n != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    text = ", ".join(parts)
    return text if len(parts) <= 8 else ", ".join(parts[:8]) + ", ..."
