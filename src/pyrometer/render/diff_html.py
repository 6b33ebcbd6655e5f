"""The web page of `pyrometer diff`: one self-contained HTML file, with the
web report's style (render/assets/report.css) and a little of its own
(assets/diff.css).  It needs no script: the findings, and per file every line
and function with data, are tables written here, and each file is a
<details> element the reader opens.  Every string of the diff (file names,
source lines, function names come from the profiles, which anyone may have
written) goes into the page escaped, and the page's policy allows no script
and no request at all."""

from __future__ import annotations

import html

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..model.units import display_name
from .diff_text import _SECTIONS, _amount, _lines, _ratio, _spans
from .html import _SURROGATE, _asset

GOOD = {"faster", "allocates less", "peak smaller", "keeps less", "copies less", "GPU faster",
        "GPU memory smaller"}


def _e(value: Any) -> str:
    """Text for the page: escaped, and a lone surrogate (a file name that was
    not UTF-8) written as the replacement character."""
    return html.escape(_SURROGATE.sub("\ufffd", str(value)))


def _figure_cells(v: dict[str, Any], unit: str) -> str:
    cls = "" if v["significant"] else " class=\"noise\""
    mark = "" if v["significant"] or v["change"] == 0 else " ~"
    return (f"<td>{_e(_amount(v['before'], unit))}</td><td>{_e(_amount(v['after'], unit))}</td>"
            f"<td{cls}>{_e(_amount(v['change'], unit, True))}{mark}</td>")


def _header(diff: dict[str, Any]) -> list[str]:
    out = [f"<h1>pyrometer diff <span class=\"args\">{_e(diff['before']['path'])} → "
           f"{_e(diff['after']['path'])}</span></h1>"]
    for label, run in (("before", diff["before"]), ("after", diff["after"])):
        what = ("CPU + memory" if run["memory"] else "CPU only") + (" + GPU" if run["gpu"] else "")
        out.append(f"<div class=\"meta\">{label}: <code>{_e(run['path'])}</code>: {_e(run['program'])} "
                   f"{_e(' '.join(run['args']))} · {_e(what)} · {run['cpu_samples']} samples</div>")
    out.extend(f"<div class=\"note\">{_e(n)}</div>" for n in diff["notices"])
    return out


def _totals(diff: dict[str, Any]) -> list[str]:
    out = ["<h2>The runs</h2>", "<table class=\"diff totals\"><thead><tr><th>figure</th><th>before</th>"
           "<th>after</th><th>change</th><th>ratio</th><th>noise</th></tr></thead><tbody>"]
    for t in diff["totals"]:
        ratio = f"{t['ratio']:.2f}x" if t["ratio"] is not None else ""
        noise = "" if t["figure"] == "cpu_samples" else "±" + _amount(t["noise"], t["unit"])
        out.append(f"<tr><th>{_e(t['label'])}</th>{_figure_cells(t, t['unit'])}<td>{_e(ratio)}</td>"
                   f"<td class=\"muted\">{_e(noise)}</td></tr>")
    out.append("</tbody></table>")
    out.append("<p class=\"muted\">ratio: after / before · ~: a change within noise "
               f"({diff['noise']['z']:g} standard errors of the difference; docs/diff.md)</p>")
    return out


def _findings(diff: dict[str, Any]) -> list[str]:
    units = {t["figure"]: t["unit"] for t in diff["totals"]}
    units.update(time_sec="s", peak_mb="MB", growth_mb="MB")
    sections: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in diff["findings"]:
        sections.setdefault((f["figure"], f["direction"]), []).append(f)
    out = ["<h2>Findings</h2>"]
    if not sections:
        out.append("<p>No change beyond noise: every line and function is within its sampling noise.</p>")
    order = sorted(sections, key=lambda k: (_SECTIONS.index(k[0]) if k[0] in _SECTIONS else 99, k[1]))
    for key in order:
        figure, direction = key
        rows = sorted(sections[key], key=lambda f: -abs(f["change"]))
        unit = units.get(figure, "")
        cls = "good" if direction in GOOD else "bad"
        out.append(f"<h3 class=\"{cls}\">{_e(direction[:1].upper() + direction[1:])}: {len(rows)}</h3>")
        out.append("<table class=\"diff findings\"><thead><tr><th>ratio</th><th>before</th><th>after</th>"
                   "<th>change</th><th>noise</th><th class=\"where\">where</th><th class=\"src\">what</th>"
                   "</tr></thead><tbody>")
        for f in rows:
            name = display_name(f["file_after"] or f["file_before"])
            where = f"{name}:{_lines(f['lineno_before'], f['lineno_after'])}"
            what = (f"<span class=\"muted\">function</span> <code>{_e(f['text'])}</code>" if f["kind"] == "function"
                    else f"<code>{_e(f['text'].strip())}</code>"
                    + (f" <span class=\"muted\">[{_e(f['status'])}]</span>" if f["status"] not in ("same", "moved")
                       else ""))
            out.append(f"<tr class=\"{cls}\"><td>{_e(_ratio(f['before'], f['after']))}</td>"
                       f"<td>{_e(_amount(f['before'], unit))}</td><td>{_e(_amount(f['after'], unit))}</td>"
                       f"<td>{_e(_amount(f['change'], unit, True))}</td>"
                       f"<td class=\"muted\">±{_e(_amount(f['noise'], unit))}</td>"
                       f"<td class=\"where\">{_e(where)}</td><td class=\"src\">{what}</td></tr>")
        out.append("</tbody></table>")
    noise = diff["within_noise"]
    out.append(f"<p class=\"muted\">Within noise (not findings): {noise['lines']} lines, "
               f"{noise['functions']} functions.</p>")
    return out


# The columns of the per-file tables: the headline figures.
_COLUMNS = [("time_sec", "time", "s"), ("allocated_mb", "allocated", "MB"), ("peak_mb", "peak", "MB"),
            ("growth_mb", "growth", "MB"), ("copy_mb", "copied", "MB"), ("gpu_sec", "GPU", "s"),
            ("gpu_peak_memory_mb", "GPU memory", "MB")]


def _file(f: dict[str, Any]) -> list[str]:
    columns = [c for c in _COLUMNS if c[0] in f["figures"]]
    name_a = display_name(f["before"]) if f["before"] else None
    name_b = display_name(f["after"]) if f["after"] else None
    if f["status"] == "matched":
        title = name_b if name_a == name_b else f"{name_a} → {name_b}"
        how = {"path": "", "suffix": " (matched by its path's end)", "source": " (matched by its source)"}
        title += how[f["matched_by"]]
    else:
        title = f"{name_b or name_a} ({f['status']} file)"
    t = f["figures"]["time_sec"]
    verdict = ", ".join(f["verdict"])
    counts = f["line_counts"]
    found = bool(f["verdict"]) or any(e["verdict"] for e in f["lines"] + f["functions"])
    out = [f"<details class=\"file\"{' open' if found else ''}><summary><b>{_e(title)}</b> · "
           f"time {_e(_amount(t['before'], 's'))} → {_e(_amount(t['after'], 's'))}"
           + (f" · <span class=\"verdict\">{_e(verdict)}</span>" if verdict else "")
           + f" <span class=\"muted\">· lines: {counts['same'] + counts['moved']} matched, {counts['edited']} "
             f"edited, {counts['new']} new, {counts['removed']} removed</span></summary>"]
    head = "".join(f"<th colspan=\"3\">{_e(label)}</th>" for _, label, _ in columns)
    sub = "<th>before</th><th>after</th><th>change</th>" * len(columns)
    for kind, entries in (("lines", f["lines"]), ("functions", f["functions"])):
        if not entries:
            continue
        label = "line" if kind == "lines" else "function"
        out.append(f"<table class=\"diff entries\"><thead><tr><th rowspan=\"2\">{label}</th>"
                   f"<th rowspan=\"2\">status</th>{head}<th rowspan=\"2\" class=\"src\">"
                   f"{'source' if kind == 'lines' else 'name'}</th></tr><tr>{sub}</tr></thead><tbody>")
        for e in entries:
            cls = ("good" if e["verdict"] and all(v in GOOD for v in e["verdict"]) else
                   "bad" if e["verdict"] else "")
            cells = "".join(_figure_cells(e["figures"][name], unit) for name, _, unit in columns)
            text = e["line"] if kind == "lines" else e["function"]
            extra = ""
            if e.get("line_before") is not None:
                extra = f"<br><span class=\"muted\">was: <code>{_e(e['line_before'].strip())}</code></span>"
            out.append(f"<tr class=\"{cls} {e['status']}\"><td>{_e(_lines(e['lineno_before'], e['lineno_after']))}"
                       f"</td><td>{_e(e['status'])}</td>{cells}<td class=\"src\"><code>{_e(text)}</code>"
                       f"{extra}</td></tr>")
        out.append("</tbody></table>")
    new = [e["lineno_after"] for e in f["lines"] if e["status"] == "new"]
    if new:
        out.append(f"<p class=\"muted\">new lines: {_e(_spans(new))}</p>")
    out.append("</details>")
    return out


def render(diff: dict[str, Any]) -> str:
    # No script at all, and no request: the policy says so to the browser.
    policy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    title = f"pyrometer diff: {diff['before']['path']} → {diff['after']['path']}"
    body = [*_header(diff), *_totals(diff), *_findings(diff), "<h2>Files</h2>"]
    for f in diff["files"]:
        body.extend(_file(f))
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        f"<title>{_e(title)}</title>\n",
        f"<style>\n{_asset('report.css')}{_asset('diff.css')}</style>\n</head>\n<body>\n",
        "<div id=\"app\" class=\"diff-page\">\n", "\n".join(body), "\n</div>\n</body>\n</html>\n",
    ])
