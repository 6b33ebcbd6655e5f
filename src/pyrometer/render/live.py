"""The live view's screen (pyrometer top): the lines and functions busiest over
the last refresh interval ("now") beside their totals so far, from
model.since, drawn with the text report's table and helpers; under them the
last lines the program printed.  One frame is a list of at most `height`
lines, none wider than `width`."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..model.units import display_name
from .text import BOLD, DIM, RED, YELLOW, _Painter, _pct, _table, cut, visible

# The program's last lines of output shown under the tables.
OUTPUT_LINES = 4


def _mb(value: float) -> str:
    if value < 0.05:
        return ""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _rows(entries: list[dict[str, Any]], memory: bool, name) -> tuple[list[list[str]], list[tuple[str, ...]]]:
    rows, styles = [], []
    for e in entries:
        cells = [_pct(e["percent"]), _pct(e["python_percent"]), _pct(e["native_percent"]),
                 _pct(e["system_percent"]), _pct(e["wait_percent"])]
        if memory:
            cells.append(_mb(e["malloc_mb"]))
        cells.append(_pct(e["total_percent"]))
        if memory:
            cells.append(_mb(e["total_malloc_mb"]))
        rows.append([*cells, visible(name(e))])
        styles.append((BOLD, RED) if e["percent"] >= 50 else (YELLOW,) if e["percent"] >= 5 else ())
    return rows, styles


def _section(title: str, entries: list[dict[str, Any]], memory: bool, name, room: int, width: int,
             paint: _Painter) -> list[str]:
    """A table of the entries that fits in `room` lines (its title included)."""
    if room < 4:
        return []
    header = ["Now %", "Python", "native", "system", "wait"] + (["Now MB"] if memory else []) + ["Total %"] \
        + (["Total MB"] if memory else [])
    rows, styles = _rows(entries[:room - 4], memory, name)
    if not rows:
        return [paint(title, BOLD), paint("  nothing yet", DIM)]
    table = _table(rows, header + [title], len(header), width, styles, paint)
    return table[:room]


def frame(change: dict[str, Any] | None, *, program: str, output: list[str], width: int, height: int,
          color: bool = False, note: str | None = None) -> list[str]:
    """The screen: change is model.since's result for the last interval (None
    before the first snapshot); output the program's last lines (made visible
    here)."""
    paint = _Painter(color)
    out = []
    if change is None:
        out.append(paint(cut("pyrometer top: waiting for the first snapshot", width), BOLD))
    else:
        out.append(paint(cut(f"pyrometer top: {visible(program)} · running {change['elapsed_sec']:.1f} s · "
                             f"now = the last {change['interval_sec']:.1f} s", width), BOLD))
        out.append(cut(f"time charged now {change['time_sec']:.2f} s · in all {change['total_time_sec']:.2f} s",
                       width))
    if note:
        out.append(paint(cut(visible(note), width), DIM))
    tail = output[-OUTPUT_LINES:]
    footer = [paint(cut("program output (all of it is shown again when the program ends):", width), DIM)] \
        + [cut("  " + visible(line), width) for line in tail] if tail else []
    room = height - len(out) - len(footer) - (1 if footer else 0)
    if change is not None:
        memory = change["memory"]
        line_room = room * 3 // 5
        out.append("")
        out.extend(_section("line (now)", change["lines"], memory,
                            lambda e: f"{display_name(e['filename'])}:{e['lineno']}  {e['line'].strip()}",
                            line_room - 1, width, paint))
        out.append("")
        out.extend(_section("function (now)", change["functions"], memory,
                            lambda e: f"{display_name(e['filename'])}:{e['lineno']}  {e['line']}",
                            height - len(out) - len(footer) - (1 if footer else 0) - 1, width, paint))
    if footer:
        out.append("")
        out.extend(footer)
    return out[:height]
