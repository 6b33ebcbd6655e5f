"""The web report: one self-contained HTML page (no request leaves it when opened,
from file:// or anywhere) that draws the finished profile with hand-written
JavaScript and SVG from render/assets/.

The profile travels inside the page as compact JSON: per file the source lines,
and only the lines that carry data, as rows of numbers in the order of `fields`
(the profile's own field names, so the page shows the model's numbers, rounded
to 4 significant digits, and never derives new ones).  The page builds each
file's table when it is opened, so a profile of hundreds of files and tens of
thousands of lines opens without a freeze; docs/web-report.md has the design
and the measurements."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
import re

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..model import (SHOWN_FROM, gpu_columns, mark, sampling, shows_awaits, shows_churn, shows_waits, significant,
                     thresholds, time_share, wait_share)
from ..model.units import display_name

DEFAULT_OUTFILE = "pyrometer-profile.html"

# Per-line and per-function numbers shipped to the page, in this order.
TIME_FIELDS = ["n_cpu_percent_python", "n_cpu_percent_c", "n_sys_percent", "n_cpu_python_sec",
               "n_cpu_native_sec", "n_sys_sec", "n_core_utilization", "n_samples",
               "n_gil_wait_percent", "n_cpu_wait_percent", "n_time_percent_error", "n_cpu_percent_python_error",
               "n_cpu_percent_c_error", "n_sys_percent_error", "n_gil_wait_percent_error", "n_cpu_wait_percent_error"]
MEMORY_FIELDS = ["n_malloc_mb", "n_python_fraction", "n_peak_mb", "n_growth_mb", "n_mallocs",
                 "n_usage_fraction", "n_copy_mb_s", "n_malloc_mb_error", "n_growth_mb_error", "n_churn_mb"]
# Coroutines' await time; shipped only when the program had any.
AWAIT_FIELDS = ["n_await_percent", "n_await_sec"]
# Scalene's names for the GPU columns; shipped only when a GPU was profiled.
GPU_FIELDS = ["n_gpu_percent", "n_gpu_peak_memory_mb", "n_gpu_avg_memory_mb", "n_gpu_sec"]
# The kernel tier's; shipped only when it ran (gpu_kernel_tier "on").
GPU_KERNEL_FIELDS = ["n_gpu_kernel_sec", "n_gpu_kernels", "n_gpu_copy_mb", "n_gpu_copy_htod_mb",
                     "n_gpu_copy_dtoh_mb", "n_gpu_copy_dtod_mb", "n_gpu_memset_mb", "n_gpu_alloc_mb"]

# A line's memory timeline is drawn about 60 pixels wide: more points than this
# only add bytes to the page.
SPARK_POINTS = 48


ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")


def _asset(name: str) -> str:
    with open(os.path.join(ASSETS, name), encoding="utf-8") as f:
        return f.read()


def _round(value: Any) -> Any:
    if isinstance(value, float):
        if value == 0.0 or value != value:
            return 0
        rounded = float(f"{value:.4g}")
        # 4 digits of a number near the largest float round past it, to infinity
        return rounded if abs(rounded) != math.inf else value
    return value


def _spark(samples: list) -> list[float]:
    """[t, MB] pairs flattened, at most SPARK_POINTS of them: each kept point is
    the largest of its stretch, so peaks survive the thinning."""
    if len(samples) > SPARK_POINTS:
        step = len(samples) / SPARK_POINTS
        samples = [max(samples[int(i * step):max(int((i + 1) * step), int(i * step) + 1)],
                       key=lambda s: s[1]) for i in range(SPARK_POINTS)]
    return [_round(float(x)) for point in samples for x in point]


def _entries(entries: list[dict[str, Any]], fields: list[str], with_text: bool,
             limits: tuple[float, float | None]) -> dict[str, Any]:
    """Lines (or functions) as columns: their text, their numbers where any is not
    zero, their memory timelines, and the model's verdict on each (limits:
    model.thresholds): each one's share of the run's time (`shares`: what its
    bar and the page's order by time read) and of it waiting with its error
    (`waits`: the wait column and the bar's part), which reach a threshold
    (`significant`: the reduced view keeps them) and how each is marked
    (`marks`: hot, warm)."""
    text, numbers, sparks, linenos, kept, marks, shares, waits = [], [], {}, [], [], {}, {}, {}
    contiguous = True
    for i, e in enumerate(entries):
        text.append(e.get("line", ""))
        linenos.append(e["lineno"])
        if e["lineno"] != i + 1:
            contiguous = False
        values = [_round(e.get(name, 0)) for name in fields]
        if any(values):
            numbers.append([i, *values])
            share = _round(time_share(e))
            if share:
                shares[str(i)] = share
            wait, error = wait_share(e)
            if wait:
                waits[str(i)] = [_round(wait), _round(error)]
            if significant(e, *limits):
                kept.append(i)
            m = mark(e, *limits)
            if m:
                marks[str(i)] = m
        if e.get("memory_samples"):
            sparks[str(i)] = _spark(e["memory_samples"])
    out: dict[str, Any] = {"text": text, "rows": numbers, "sparks": sparks, "significant": kept, "marks": marks,
                           "shares": shares, "waits": waits}
    if not contiguous or not with_text:
        out["lineno"] = linenos
    return out


# A frame's kind in the flame graph (its colour): a line of the program, or one
# of the synthetic frames of render/frames.py.
FLAME_KINDS = {None: 0, "[native]": 1, "[system]": 2, "[GIL wait]": 3, "[CPU wait]": 3,
               "[unattributed]": 4, "[other stacks]": 4}
FLAME_METRICS = ("time", "alloc")


def flame_data(profile: dict[str, Any]) -> dict[str, Any] | None:
    """The call stacks for the flame graph, or None (a profile without them):
    frames as [function, file as shown, line, kind] and stacks as [path, time
    in seconds, bytes allocated] with the synthetic leaf frames in the paths
    (render/frames.py), so that the page only adds them up into its tree."""
    from .frames import ExportError, Stacks, metrics
    try:
        stacks = Stacks(profile)
    except ExportError:
        return None
    wanted = [m for m in metrics(profile) if m.name in FLAME_METRICS]
    rows: dict[tuple[int, ...], list[Any]] = {}
    for i, m in enumerate(wanted):
        for path, value in stacks.weighted(m):
            row = rows.get(path)
            if row is None:
                row = rows[path] = [list(path)] + [0] * len(wanted)
            row[1 + i] += value
    frames = [[f.function, display_name(f.filename) if f.filename else "", f.lineno,
               FLAME_KINDS[f.function if f.synthetic else None]] for f in stacks.frames]
    return {"metrics": [[m.name, m.label, m.unit] for m in wanted], "frames": frames,
            "stacks": [[row[0], *(_round(float(v)) for v in row[1:])] for row in rows.values()]}


def page_data(profile: dict[str, Any]) -> dict[str, Any]:
    """What the page script reads: the run's summary fields as they are, and each
    file in compact form, hottest first."""
    fields = list(TIME_FIELDS)
    if shows_awaits(profile):
        fields += AWAIT_FIELDS
    if profile.get("memory"):
        fields += MEMORY_FIELDS
    gpu, kernels = gpu_columns(profile)  # the page's GPU columns are those of the fields shipped
    if gpu:
        fields += GPU_FIELDS
    if kernels:
        fields += GPU_KERNEL_FIELDS
    summary = {k: v for k, v in profile.items() if k not in ("files", "call_stacks")}
    limits = thresholds(profile)
    files = []
    for name, f in sorted(profile["files"].items(), key=lambda kv: (-kv[1]["percent_cpu_time"], kv[0])):
        files.append({
            "name": name,
            "display": display_name(name),
            "percent_cpu_time": _round(f["percent_cpu_time"]),
            "cpu_time_sec": _round(f["cpu_time_sec"]),
            "lines": _entries(f["lines"], fields, True, limits),
            "functions": _entries(f["functions"], fields, False, limits),
            "leaks": f.get("leaks", {}),
        })
    # Which columns the page shows and the cut-off below which it leaves a
    # figure blank: the model's rules (model/rules.py), as the terminal's.
    columns = {"waits": shows_waits(profile), "awaits": shows_awaits(profile), "churn": shows_churn(profile)}
    return {"fields": fields, "summary": summary, "files": files, "flame": flame_data(profile),
            "sampling": sampling(profile), "columns": columns, "shown_from": SHOWN_FROM}


# Lone surrogates (from a file name that was not UTF-8) cannot be written as
# UTF-8: inside the page's JSON they stay escapes, which JSON.parse reads back.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_for_script(data: Any) -> str:
    """JSON that cannot end the <script> element it sits in, whatever the source
    lines contain ("</script>", "<!--")."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def render(profile: dict[str, Any]) -> str:
    script = _asset("report.js")
    style = _asset("report.css")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    # The policy forbids every fetch: even a bug in the page cannot reach the network.
    policy = (f"default-src 'none'; script-src 'sha256-{digest}'; "
              "style-src 'unsafe-inline'; img-src data:")
    title = f"pyrometer: {profile.get('program', '')}"
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        f"<title>{html.escape(_SURROGATE.sub(chr(0xfffd), title))}</title>\n",
        f"<style>\n{style}</style>\n</head>\n<body>\n",
        "<noscript>This report is drawn by JavaScript; enable it, or use "
        "<code>pyrometer view PROFILE.json --cli</code>.</noscript>\n",
        "<div id=\"app\"></div>\n",
        "<script type=\"application/json\" id=\"pyrometer-data\">",
        _json_for_script(page_data(profile)),
        "</script>\n",
        f"<script>{script}</script>\n</body>\n</html>\n",
    ])


def open_in_browser(path: str) -> bool:
    """Open the page in the user's browser; False when there is none to use.

    On Linux without a display, Python's webbrowser would fall back to a console
    browser (lynx, w3m) that takes over the terminal, so there we only try when a
    display or $BROWSER says a browser can be shown."""
    import sys
    import webbrowser
    if sys.platform.startswith("linux") and not any(
            os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")):
        return False
    try:
        return bool(webbrowser.open("file://" + os.path.abspath(path)))
    except Exception:  # a broken browser set-up is no reason to fail the run
        return False
