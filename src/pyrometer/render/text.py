"""The terminal report: per file, the annotated source with its time columns, then
a function summary.  Reads only the finished profile (pyrometer.model)."""

from __future__ import annotations

import collections
import textwrap
import unicodedata

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..model import (CHURN_SHOWN_MB, SHOWN_FROM, gpu_columns, mark, sampling, shown_error, shows_awaits,
                     shows_waits, significant, thresholds, time_share, wait_share)
from ..model.units import display_name
from ..visible import terminal_columns, visible


BOLD, RED, YELLOW, DIM, RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[2m", "\x1b[0m"
# How model.mark's marks are painted.
MARK_STYLES = {"hot": (BOLD, RED), "warm": (YELLOW,), "": ()}


def terminal_width() -> int:
    return max(60, terminal_columns(132))


def _cleaned(value: Any) -> Any:
    """value with every string in it (keys too) made visible."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible(k): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    return value


def _printable(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile with every string the report can show made visible, so that none
    reaches the terminal raw.  Lines and functions are the bulk of a big
    profile and their only string is `line` (model.check makes sure of that,
    and this does not count on it): those are copied only where it changes."""
    out = _cleaned({k: v for k, v in profile.items() if k != "files"})
    files = out["files"] = {}
    for name, f in profile["files"].items():
        f = files[visible(name)] = _cleaned({k: v for k, v in f.items() if k not in ("lines", "functions")}) | {
            kind: f[kind] for kind in ("lines", "functions")}
        for kind in ("lines", "functions"):
            original = entries = f[kind]
            for i, e in enumerate(original):
                line = e.get("line")
                text = visible(line) if isinstance(line, str) else _cleaned(line)
                if text != line:
                    if entries is original:
                        entries = f[kind] = list(original)
                    entries[i] = dict(e, line=text)
    return out


def _char_width(c: str) -> int:
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def cut(text: str, width: int) -> str:
    """text cut to `width` terminal columns (wide characters count two), with an
    ellipsis where it was cut: long lines are cut, never wrapped."""
    if len(text) * 2 <= width or (len(text) <= width and text.isascii()):
        return text  # fits whatever its characters are
    used = 0
    for i, c in enumerate(text):
        used += _char_width(c)
        if used > width:
            # make room for the ellipsis
            out = text[:i]
            while out and sum(_char_width(ch) for ch in out) > width - 1:
                out = out[:-1]
            return out + "…"
    return text


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
    if value < SHOWN_FROM:
        return ""
    return f"{value:.0f}M" if value < 10000 else f"{value / 1024:.0f}G"


class _Timeline(str):
    """The timeline / % cell: a sparkline and the line's share of allocation
    activity.  A str (its widest form, which sizes the column in the widest
    layout) that a narrow layout renders again with a shorter sparkline."""

    def __new__(cls, values: list[float], usage: float):
        cell = super().__new__(cls, cls._form(values, usage, SPARK_WIDTH))
        cell.values, cell.usage = values, usage
        return cell

    @staticmethod
    def _form(values: list[float], usage: float, spark: int) -> str:
        return f"{sparkline(values, spark)} {usage:.0f}%"

    def at(self, spark: int) -> str:
        return self._form(self.values, self.usage, spark)


# The memory timeline of a line, in characters: in the widest layout, and in the
# narrowest (_LAYOUTS).
SPARK_WIDTH, SPARK_NARROW = 8, 4


def _memory_cells(entry: dict[str, Any]) -> list[str]:
    if entry.get("n_malloc_mb", 0.0) < SHOWN_FROM and entry.get("n_copy_mb_s", 0.0) < SHOWN_FROM:
        return ["", "", "", ""]
    usage = entry["n_usage_fraction"] * 100
    return [
        f"{entry['n_python_fraction'] * 100:.0f}%" if entry["n_malloc_mb"] >= SHOWN_FROM else "",
        _mb(entry["n_peak_mb"]),
        _Timeline([mb for _, mb in entry["memory_samples"]], usage) if entry["n_malloc_mb"] >= SHOWN_FROM else "",
        f"{entry['n_copy_mb_s']:.0f}" if entry["n_copy_mb_s"] >= SHOWN_FROM else "",
    ]


def _gpu_cells(entry: dict[str, Any]) -> list[str]:
    """GPU: the line's share of the run's GPU busy time; GPU memory: the most
    this process held on the GPU while it ran."""
    peak = entry.get("n_gpu_peak_memory_mb", 0.0)
    return [_pct(entry.get("n_gpu_percent", 0.0)), _mb(peak) if peak >= SHOWN_FROM else ""]


def _kernel_cells(entry: dict[str, Any]) -> list[str]:
    """The kernel tier's: the device time of the kernels the line launched, the
    bytes it copied (every direction), the device memory it allocated."""
    sec, copy, alloc = (entry.get("n_gpu_kernel_sec", 0.0), entry.get("n_gpu_copy_mb", 0.0),
                        entry.get("n_gpu_alloc_mb", 0.0))
    return [_seconds(sec) if sec >= 0.0005 else "", _mb(copy) if copy >= SHOWN_FROM else "",
            _mb(alloc) if alloc >= SHOWN_FROM else ""]


def _seconds(sec: float) -> str:
    return f"{sec * 1000:.0f}ms" if sec < 1.0 else f"{sec:.2f}s"


def _gpu_header(profile: dict[str, Any]) -> list[str]:
    whose = ("this process's share of shared GPUs" if profile.get("gpu_utilization_source") == "process"
             else "whole-device utilisation")
    lines = [f"GPU: {profile.get('gpu_device', '?')} · busy {profile.get('gpu_time_sec', 0.0):.3f} s "
            f"({whose}) · peak GPU memory {profile.get('gpu_peak_memory_mb', 0.0):.1f} MB"]
    tier = profile.get("gpu_kernel_tier", "off")
    if tier == "on":
        lines.append(f"GPU kernels: {profile['gpu_kernels']} ({profile['gpu_kernel_time_sec']:.3f} s on the device)"
                 f" · copies: {profile['gpu_copies']} (HtoD {profile['gpu_copy_htod_mb']:.1f} MB, "
                 f"DtoH {profile['gpu_copy_dtoh_mb']:.1f} MB, DtoD {profile['gpu_copy_dtod_mb']:.1f} MB)"
                     f" · allocations: {profile['gpu_allocations']}")
    return lines


def _pct(value: float, error: float = 0.0) -> str:
    if value < SHOWN_FROM:
        return ""
    return f"{value:.0f}%" + (f"±{error:.0f}" if shown_error(value, error) else "")


def _time_cells(entry: dict[str, Any], waits: bool = False, awaits: bool = False) -> list[str]:
    e = entry.get
    cells = [_pct(entry["n_cpu_percent_python"], e("n_cpu_percent_python_error", 0.0)),
             _pct(entry["n_cpu_percent_c"], e("n_cpu_percent_c_error", 0.0)),
             _pct(entry["n_sys_percent"], e("n_sys_percent_error", 0.0))]
    if waits:
        cells.append(_pct(*wait_share(entry)))
    if awaits:
        cells.append(_pct(entry.get("n_await_percent", 0.0)))
    return cells


_share = time_share


class _Painter:
    def __init__(self, color: bool):
        self.color = color

    def __call__(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        return "".join(styles) + text + RESET


# How a table fits the terminal.  Every figure column is always shown (a
# figure dropped for want of room is a figure the reader never learns was
# there); what gives way is the room around the figures and the source.  Each
# layout is tried in turn and the first that fits is used:
#   wide     column names on one row, " │ " between columns, the source beside;
#   compact  names on two rows ("Time" over "Python"), "│" between columns,
#            a shorter sparkline;
#   tight    names abbreviated ("Py", "nat"), with a legend under the table;
#   stacked  as tight, the source on a line of its own under its figures.
# The source is cut to what is left (with an ellipsis), never the figures.
# At 80 columns, memory on, that is compact (tight when the wait column is
# shown); at 60, tight or stacked.
# A named tuple, not a dataclass: importing dataclasses costs every start ~5 ms
# (structs.py).  Its fields: name; two_rows (names on two rows); pad and after
# (before and after each figure); before_source; min_source (columns the source
# needs beside the figures; 0: on a line of its own); spark (sparkline
# characters); abbreviate (short names, and a legend).
_Layout = collections.namedtuple(
    "_Layout", "name two_rows pad after before_source min_source spark abbreviate")


_LAYOUTS = (
    _Layout("wide", False, "", " │ ", "", 32, SPARK_WIDTH, False),
    _Layout("compact", True, " ", "│", " ", 24, SPARK_NARROW, False),
    _Layout("tight", True, "", "│", " ", 12, SPARK_NARROW, True),
    _Layout("stacked", True, "", "│", " ", 0, SPARK_NARROW, True),
)

# The tight layout's names, and the legend that spells them out.
_SHORT = {"Python": "Py", "native": "nat", "system": "sys", "await": "awt", "Memory": "Mem",
          "timeline": "tl", "parent": "ppid"}
_LEGEND = {short: name for name, short in _SHORT.items()}

# A stacked row's source is indented this much under its figures.
_STACKED_INDENT = "    "


def _name_rows(name: str, layout: _Layout) -> tuple[str, str]:
    """A column's name as (top row, bottom row): split at its first space in
    the two-row layouts ("Time Python" -> "Time" over "Python")."""
    if not layout.two_rows:
        return "", name
    top, _, bottom = name.partition(" ") if " " in name else ("", "", name)
    if layout.abbreviate:
        top, bottom = _SHORT.get(top, top), _SHORT.get(bottom, bottom)
    return top, bottom


def _cell(value: str, layout: _Layout) -> str:
    return value.at(layout.spark) if isinstance(value, _Timeline) else value


def _table(rows: list[list[str]], header: list[str], right: int, width: int,
           styles: list[tuple[str, ...]], paint: _Painter, said: set[str] | None = None) -> list[str]:
    """Columns 0..right-1 right-aligned figures, the last column (source, name
    or command) cut to what the width leaves: in the first of _LAYOUTS that fits.
    said: the abbreviations a legend of this report has spelled out already."""
    for layout in _LAYOUTS:
        names = [_name_rows(h, layout) for h in header[:right]]
        cells = [[_cell(r[i], layout) for i in range(right)] for r in rows]
        widths = [max(len(top), len(bottom), *(len(c[i]) for c in cells)) for i, (top, bottom) in
                  enumerate(names)]
        figures = sum(widths) + (len(layout.pad) + len(layout.after)) * right
        if figures + len(layout.before_source) + layout.min_source <= width:
            break
    # The last layout is used even where it does not fit: only a terminal
    # narrower than terminal_width() allows could get there.

    def left(values: list[str]) -> str:
        return "".join(layout.pad + values[i].rjust(widths[i]) + layout.after for i in range(right))

    def line(values: list[str], source: str) -> list[str]:
        if layout is not _LAYOUTS[0]:
            # Where the source has little room, its indentation takes half as
            # much: nesting still shows, and more of the code does.
            body = source.lstrip(" ")
            source = " " * ((len(source) - len(body) + 1) // 2) + body
        if layout.min_source:
            return [cut(left(values) + layout.before_source + source, width)]
        figures_line = left(values).rstrip(" ")
        return [figures_line, cut(_STACKED_INDENT + source, width)] if source else [figures_line]

    out = []
    if layout.two_rows:
        out.append(paint(left([top for top, _ in names]).rstrip("│ "), BOLD))
    out.extend(paint(text, BOLD) for text in line([bottom for _, bottom in names], header[right]))
    ruled = len(left([""] * right).rstrip(" ")) + (
        len(layout.before_source) + len(header[right]) if layout.min_source else 0)
    out.append("─" * min(width, ruled))
    for cells_, row, s in zip(cells, rows, styles):
        out.extend(paint(text, *s) for text in line(cells_, row[right]))
    if layout.abbreviate:
        said = set() if said is None else said
        used = [w for w in _LEGEND if any(w in pair for pair in names)]
        if not said.issuperset(used):
            said.update(used)
            out.extend(paint(text, DIM) for text in _wrapped(
                "(" + ", ".join(f"{w}: {_LEGEND[w]}" for w in used) + "; a wider terminal shows "
                "the names in full)", width))
    return out


def _wrapped(text: str, width: int, indent: str = "  ") -> list[str]:
    """text on as many lines as the width needs, broken at spaces (the next
    lines indented), each line cut only where one word is wider than the
    terminal.  Headers and notes are wrapped, never cut: what they say is
    read in full."""
    if len(text) <= width and text.isascii():
        return [text]
    # A word wider than the terminal (a long path) is broken, not cut.
    lines = textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return [cut(line, width) for line in lines]


def _options_words(profile: dict[str, Any]) -> str:
    """How the profile was taken, in the options' own words."""
    o = profile["options"]
    parts = ["CPU + memory" if profile.get("memory") else "CPU only"]
    if profile.get("gpu"):
        parts.append("GPU")
    parts.append(f"--cpu-sampling-rate {o['cpu_sampling_rate']:g}")
    parts.append(f"--cpu-percent-threshold {o['cpu_percent_threshold']:g}")
    if profile.get("memory"):
        parts.append(f"--malloc-threshold {o['malloc_threshold']:g}")
        window = profile.get("allocation_sampling_window_bytes", o.get("allocation_sampling_window"))
        if window:
            parts.append(f"--allocation-sampling-window {window}")
        if o.get("leak_detector") is False:
            parts.append("--no-leak-detector")
    for flag in ("use_virtual_time", "profile_all", "reduced_profile", "off"):
        if o.get(flag):
            parts.append("--" + flag.replace("_", "-"))
    for flag in ("profile_only", "profile_exclude"):
        if o.get(flag):
            parts.append(f"--{flag.replace('_', '-')} {','.join(o[flag])}")
    if o.get("profile_interval"):
        parts.append(f"--profile-interval {o['profile_interval']:g}")
    return " · ".join(parts)


# The terminal's process table shows this many processes (the first, then the
# ones that used most CPU); the JSON and the web page have them all.
PROCESS_ROWS = 40


def _seconds_or_blank(value: Any) -> str:
    return "" if value is None else f"{value:.3f}"


def _processes(profile: dict[str, Any], width: int, paint: _Painter) -> list[str]:
    """The per-process table: the first process and its children."""
    import shlex
    rows = profile["processes"]
    shown = rows[:1] + sorted(rows[1:], key=lambda r: -(r["cpu_sec"] or 0.0))[:PROCESS_ROWS - 1]
    out = ["", paint(f"Processes: {profile['process_count']}", BOLD)]
    header = ["pid", "parent", "wall s", "CPU s", "peak MB", "exit", "how", "command"]
    table = []
    for r in shown:
        how = r["started_by"] + ("" if r["profiled"] else ", not profiled")
        exit_ = "" if r["exit_status"] is None else str(r["exit_status"])
        if r["ended_by"] not in (None, "exit"):
            exit_ += f" ({r['ended_by']})" if exit_ else r["ended_by"]
        command = shlex.join(r["command"]) if r["command"] else "?"
        if r.get("note"):
            command += f"  [{r['note']}]"
        table.append([str(r["pid"]), "" if r["ppid"] is None else str(r["ppid"]), _seconds_or_blank(r["wall_sec"]),
                      _seconds_or_blank(r["cpu_sec"]), "" if r["peak_mb"] is None else f"{r['peak_mb']:.1f}", exit_,
                      how, visible(command)])
    out.extend(_table(table, header, len(header) - 1, width, [()] * len(table), paint))
    hidden = profile["process_count"] - len(shown)
    if hidden > 0:
        out.append(cut(f"... and {hidden:,} more (the JSON and the web report list them)", width))
    return out


class _Out:
    """The report's lines as they are written: each wrapped to the width and
    painted, and the abbreviations a table's legend has spelled out."""

    def __init__(self, color: bool, width: int):
        self.lines: list[str] = []
        self.paint = _Painter(color)
        self.width = width
        self.said: set[str] = set()

    def add(self, text: str, *styles: str) -> None:
        self.lines.extend(self.paint(line, *styles) for line in _wrapped(text, self.width))

    def blank(self) -> None:
        self.lines.append("")


def render(profile: dict[str, Any], color: bool = False, width: int = 132) -> str:
    profile = _printable(profile)
    out = _Out(color, width)
    threshold, _ = thresholds(profile)
    brief = _header(profile, out)
    # With @profile, the files left are the ones the program asked for: shown
    # whatever their share, as the web page shows every file.
    focused = bool(profile.get("profiled_functions"))
    shown = 0
    for filename, f in sorted(profile["files"].items(), key=lambda kv: -kv[1]["percent_cpu_time"]):
        if _file_shown(profile, f, brief, focused):
            shown += 1
            _file_section(profile, filename, f, out)
    if profile.get("memory", False):
        _memory_lists(profile, out)
    if profile.get("process_count", 1) > 1:
        out.lines.extend(_processes(profile, width, out.paint))
    if shown == 0 and profile["cpu_samples"] > 0:
        out.blank()
        out.add(f"No file of the program reached {threshold:g}% of the run time "
                "(try --profile-all to include libraries).")
    out.blank()
    return "\n".join(out.lines)


def _header(profile: dict[str, Any], out: _Out) -> bool:
    """The run's lines above the files; whether the run was too brief to be
    sampled (its files are then shown whatever they hold)."""
    cpu = profile["cpu_time_sec"]
    samples = profile["cpu_samples"]
    title = f"pyrometer: {profile['program']}"
    if profile["args"]:
        title += " " + " ".join(profile["args"])
    add = out.add
    add(visible(title), BOLD)
    verdict = profile.get("verdict")
    if verdict:
        add("verdict: " + verdict["summary"], BOLD, *((YELLOW,) if verdict["bound"] not in ("none", "unknown") else ()))
    threads = profile["threads"]
    add(
        f"elapsed {profile['elapsed_time_sec']:.3f} s"
        + (f" (paused {profile['paused_sec']:.3f} s, not charged)" if profile.get("paused_sec", 0.0) >= 0.0005 else "")
        + f" · {samples} sample{'s' if samples != 1 else ''}"
        + (f" (every {profile['sampling_interval_sec'] * 1e3:.2f} ms on average)" if samples else "")
        + (f", {profile['cpu_peeks']} peeks" if profile.get("cpu_peeks") else "")
        + f" · {threads} thread{'s' if threads != 1 else ''}"
        + (f" · {profile['process_count']} processes" if profile.get("process_count", 1) > 1 else "")
        + ("" if profile.get("exit_status") is None else f" · exit status {profile['exit_status']}"))
    waits = "".join(f" · {label} {cpu[key]:.3f} s" for key, label in (("gil_wait", "GIL wait"),
                                                                        ("cpu_wait", "CPU wait"))
                    if cpu.get(key, 0.0) >= 0.0005)
    add(f"Python {cpu['python']:.3f} s · native {cpu['native']:.3f} s · system {cpu['system']:.3f} s{waits}")
    if shows_awaits(profile):
        add(f"coroutines suspended at awaits {profile['await_time_sec']:.3f} s (task time: the await "
            f"column's total) · event loop idle {profile.get('event_loop_idle_sec', 0.0):.3f} s "
            "(in no percentage)")
    add("options: " + _options_words(profile))
    for notice in profile.get("notices", []):
        add(visible("notice: " + str(notice)), BOLD)
    if profile.get("exit_status", 0) is None and profile.get("ended_by") is None:
        add("A snapshot taken while the program was still running (--profile-interval).")
    brief = _sampling_lines(profile, out)
    if profile.get("gpu"):
        for line in _gpu_header(profile):
            add(line)
    if profile.get("memory", False):
        spark = sparkline([mb for _, mb in profile["samples"]], 40)
        where = profile["max_footprint_where"]
        at = f" at {display_name(where['filename'])}:{where['lineno']}" if where else ""
        add(f"memory: peak {profile['max_footprint_mb']:.1f} MB{at} · "
            f"growth {profile['growth_rate_mb_s']:.1f} MB/s · footprint {spark}")
        native = profile["native_threads"]
        if native["malloc_mb"] >= SHOWN_FROM:
            add(f"threads without Python frames allocated {native['malloc_mb']:.0f} MB (native)")
    return brief


def _sampling_lines(profile: dict[str, Any], out: _Out) -> bool:
    """What the report says when the samples were none or few; whether none."""
    said_of_samples = sampling(profile)
    samples = profile["cpu_samples"]
    if said_of_samples == "none":
        rate = profile["options"]["cpu_sampling_rate"]
        out.add(
            f"The program ran too briefly to be sampled ({profile['elapsed_time_sec']:.3f} s, one sample "
            f"every {rate * 1e3:g} ms on average): no time could be attributed to its lines"
            + (" (what memory sampling saw is below)." if profile.get("memory") else ".")
            + " A lower --cpu-sampling-rate or a longer run gives a profile.", YELLOW)
    elif said_of_samples == "few":
        taken = "1 sample was" if samples == 1 else f"{samples} samples were"
        out.add(f"Only {taken} taken: the percentages below are rough.", YELLOW)
    return said_of_samples == "none"


def _file_shown(profile: dict[str, Any], f: dict[str, Any], brief: bool, focused: bool) -> bool:
    """Whether a file gets its tables: one that reached a threshold, every one
    with @profile, and in a run too brief to be sampled whatever was recorded."""
    threshold, malloc_threshold = thresholds(profile)
    if brief:
        return any(_share(e) > 0 or e.get("n_malloc_mb", 0.0) >= SHOWN_FROM for e in f["lines"])
    return focused or f["percent_cpu_time"] >= threshold or any(
        significant(e, threshold, malloc_threshold) for e in f["lines"])


def _file_section(profile: dict[str, Any], filename: str, f: dict[str, Any], out: _Out) -> None:
    """A file's heading, its lines' table, its functions' and its leaks."""
    threshold, malloc_threshold = thresholds(profile)
    memory = profile.get("memory", False)
    out.blank()
    out.add(visible(f"{display_name(filename)}: % of time = {f['percent_cpu_time']:.1f}% "
                    f"({f['cpu_time_sec']:.3f} s) out of {profile['total_time_sec']:.3f} s"), BOLD)
    show_waits = shows_waits(profile)
    show_awaits = shows_awaits(profile)
    header = (["Line", "Time Python", "native", "system"] + (["wait"] if show_waits else [])
              + (["await"] if show_awaits else []))
    gpu, kernels = gpu_columns(profile)
    if gpu:
        header += ["GPU", "GPU memory"]
    if kernels:
        header += ["GPU kernel", "GPU copy", "GPU alloc"]
    if memory:
        header += ["Memory Python", "peak", "timeline / %", "Copy MB/s"]

    def cells(e: dict[str, Any]) -> list:
        return [*_time_cells(e, show_waits, show_awaits), *(_gpu_cells(e) if gpu else ()),
                *(_kernel_cells(e) if kernels else ()), *(_memory_cells(e) if memory else ())]
    rows, styles = [], []
    for e in f["lines"]:
        if profile["options"]["reduced_profile"] and not significant(e, threshold, malloc_threshold):
            continue
        rows.append([str(e["lineno"]), *cells(e), visible(e["line"])])
        styles.append(MARK_STYLES[mark(e, threshold, malloc_threshold)])
    out.lines.extend(_table(rows, header + ["source"], len(header), out.width, styles, out.paint, out.said))
    funcs = [e for e in f["functions"] if _share(e) >= SHOWN_FROM or e.get("n_await_percent", 0.0) >= SHOWN_FROM
             or e.get("n_malloc_mb", 0.0) >= SHOWN_FROM or e.get("n_gpu_percent", 0.0) >= SHOWN_FROM
             or e.get("n_gpu_kernel_sec", 0.0) >= 0.0005]
    if funcs:
        out.blank()
        rows = [[str(e["lineno"]), *cells(e), visible(e["line"])] for e in funcs]
        styles = [(BOLD, RED) if mark(e, threshold, malloc_threshold) == "hot" else () for e in funcs]
        out.lines.extend(_table(rows, header + ["function summary"], len(header), out.width, styles, out.paint,
                                out.said))
    for lineno, leak in sorted(f.get("leaks", {}).items(), key=lambda kv: -kv[1]["velocity_mb_s"]):
        out.add(f"possible leak at line {lineno}: {leak['growth_mb']:.1f} MB not freed, "
                f"{leak['velocity_mb_s']:.2f} MB/s (likelihood {leak['likelihood'] * 100:.1f}%)", BOLD, RED)


def _memory_lists(profile: dict[str, Any], out: _Out) -> None:
    """The top allocating lines and the lines that churn."""
    if profile["top_allocations"]:
        out.blank()
        out.lines.append(out.paint("Top allocating lines", BOLD))
        for t in profile["top_allocations"][:5]:
            error = t.get("n_malloc_mb_error", 0.0)
            # The sampling error where it is large (a 95% interval: docs/how-it-works.md).
            within = f" ± {error:.0f}" if error >= max(0.1 * t["n_malloc_mb"], 1.0) else ""
            out.add(visible(f"  {display_name(t['filename'])}:{t['lineno']}: {t['n_malloc_mb']:.0f}{within} MB "
                            f"({t['n_python_fraction'] * 100:.0f}% Python)"))
    churning = sorted(((e.get("n_churn_mb", 0.0), name, e["lineno"]) for name, f in profile["files"].items()
                       for e in f["lines"] if e.get("n_churn_mb", 0.0) >= CHURN_SHOWN_MB), reverse=True)[:3]
    if churning:
        out.blank()
        out.lines.append(out.paint("Churn of tiny temporaries", BOLD) +
                         " (small Python objects made and freed at once: allocator traffic, not memory held)")
        for mb, name, lineno in churning:
            out.add(visible(f"  {display_name(name)}:{lineno}: {mb:.0f} MB"))
