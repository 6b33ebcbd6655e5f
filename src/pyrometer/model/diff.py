"""Comparing two profiles (`pyrometer diff BEFORE.json AFTER.json`): the model
of the difference, which the diff's renderers (render/diff_text.py,
render/diff_html.py, and its JSON as it is) read without deriving numbers of
their own.  docs/diff.md describes the matching and the noise rule.

Matching.  Files by path, else by the longest common path suffix (the two runs
were made in different directories), else by their source (a renamed file).
Lines by their text, not their number: the two listings are aligned as a text
diff aligns them (difflib), so lines inserted above a function move its lines'
numbers without changing what they are matched to; repeated text (`return
total`) is told apart by where it stands among its neighbours.  Lines left
over (code moved elsewhere) are matched again within the function that
encloses them, by qualified name, then as blocks anywhere in the file; lines
whose text was edited are paired with their old text by similarity.  What is
still left over is new (AFTER only) or removed (BEFORE only).  Functions are
matched by qualified name within matched files; a name defined twice in a file
by where its first line went.

Noise.  A profile's times and volumes are sampled: a line's time is the sum of
the sampling windows charged to it, a line's allocation the windows of bytes
sampled there, so a figure built from k samples is uncertain by about
sqrt(k) samples (a Poisson count).  Two runs of the same program also differ
by a little more than that (the machine, caches, the clock), a run-to-run
share of each figure.  A change is a finding only when it is more than
NOISE_Z standard errors of the difference; smaller ones are marked as within
noise."""

from __future__ import annotations

import ast
import difflib
import math
import os

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any, Callable

from .rules import time_share
from .schema import ProfileError
from .units import MB

# The diff's own format (the --json output): raised when a field is removed or
# changes its meaning, as pyrometer_schema is for profiles.
DIFF_SCHEMA_VERSION = 1

# A change is a finding when it is more than this many standard errors of the
# difference (both runs' sampling errors and run-to-run shares, in quadrature).
# At 3 a figure that did not change is reported as changed about 3 times in a
# thousand, were the errors normal; docs/diff.md has the rate measured on two
# runs of the same programs.
NOISE_Z = 3.0
# Run-to-run variation of a figure, as a share of it, beyond its sampling error:
# CPU time of the same code differs by a few percent between runs (frequency,
# caches, other processes), wall time off CPU more; sampled memory much less.
RUN_SHARE_TIME = 0.06
RUN_SHARE_MEMORY = 0.02
RUN_SHARE_GPU = 0.10
# NVML's utilisation windows (how-it-works.md, "GPU"): the grain of GPU time.
GPU_WINDOW_SEC = 0.2
# A run whose time changed beyond noise while each of its functions holding at
# least UNIFORM_SHARE of it changed by the run's own factor, within
# UNIFORM_SPREAD, changed as a whole: what the machine's speed does (on CI a
# second run of the same program took 1.30-1.61x the first's CPU time, function
# by function: another tenant on the core's other hyperthread) as much as code.
UNIFORM_SHARE, UNIFORM_SPREAD = 0.05, 1.3


class DiffError(Exception):
    """Two profiles that cannot be compared; the message says why."""


# ---------------------------------------------------------------------------
# Figures: what is compared, per line, function, file and run.
# ---------------------------------------------------------------------------

def _time(e: dict[str, Any]) -> float:
    """The time a line spent in its own work: Python, native and system (off
    CPU in native code: sleeping, I/O, a lock).  The waits, for the GIL and
    for a CPU, are compared on their own but make no findings: they are the
    machine's load as much as the program's.  On a busy machine (load 12 on 2
    cores) one function measured 0.42 to 0.45 s of Python CPU over five runs,
    while the wall time charged to it, waits included, went from 1.27 to 1.56 s,
    and a program of one thread was charged up to 0.6 s of GIL wait (the
    sampler's own thread holding the GIL when it was descheduled)."""
    return e["n_cpu_python_sec"] + e["n_cpu_native_sec"] + e["n_sys_sec"]


def _copy_mb(e: dict[str, Any], elapsed: float) -> float:
    if "n_copy_bytes" in e:
        return e["n_copy_bytes"] / MB
    return e.get("n_copy_mb_s", 0.0) * elapsed  # an older profile: the rate only


class Figure:
    """One figure compared: its name in the diff, unit, how it is read from a
    line or function entry, its kind (what its noise is made of), and the
    words for a rise and a fall.  headline: a change beyond noise is a finding
    (the others are the breakdown of a headline figure)."""
    __slots__ = ("name", "unit", "read", "kind", "headline", "up", "down", "label")

    def __init__(self, name: str, label: str, unit: str, read: Callable[[dict[str, Any], float], float],
                 kind: str, headline: bool, up: str = "", down: str = ""):
        self.name, self.label, self.unit, self.read, self.kind = name, label, unit, read, kind
        self.headline, self.up, self.down = headline, up, down


TIME_FIGURES = [
    Figure("time_sec", "time", "s", lambda e, _: _time(e), "time", True, "slower", "faster"),
    Figure("python_sec", "Python", "s", lambda e, _: e["n_cpu_python_sec"], "time", False),
    Figure("native_sec", "native", "s", lambda e, _: e["n_cpu_native_sec"], "time", False),
    Figure("system_sec", "system", "s", lambda e, _: e["n_sys_sec"], "time", False),
    Figure("gil_wait_sec", "GIL wait", "s", lambda e, _: e.get("n_gil_wait_sec", 0.0), "time", False),
    Figure("cpu_wait_sec", "CPU wait", "s", lambda e, _: e.get("n_cpu_wait_sec", 0.0), "time", False),
    Figure("python_percent", "Python %", "%", lambda e, _: e["n_cpu_percent_python"], "percent", False),
    Figure("native_percent", "native %", "%", lambda e, _: e["n_cpu_percent_c"], "percent", False),
    Figure("system_percent", "system %", "%", lambda e, _: e["n_sys_percent"], "percent", False),
    Figure("percent", "% of time", "%", lambda e, _: time_share(e), "percent", False),
]
MEMORY_FIGURES = [
    Figure("allocated_mb", "allocated", "MB", lambda e, _: e.get("n_malloc_mb", 0.0), "memory", True,
           "allocates more", "allocates less"),
    Figure("peak_mb", "peak", "MB", lambda e, _: e.get("n_peak_mb", 0.0), "memory", True,
           "peak bigger", "peak smaller"),
    Figure("growth_mb", "growth", "MB", lambda e, _: e.get("n_growth_mb", 0.0), "memory", True,
           "keeps more", "keeps less"),
    Figure("copy_mb", "copied", "MB", _copy_mb, "copy", True, "copies more", "copies less"),
]
GPU_FIGURES = [
    Figure("gpu_sec", "GPU", "s", lambda e, _: e.get("n_gpu_sec", 0.0), "gpu", True,
           "GPU slower", "GPU faster"),
    Figure("gpu_peak_memory_mb", "GPU memory", "MB", lambda e, _: e.get("n_gpu_peak_memory_mb", 0.0), "gpu_memory",
           True, "GPU memory bigger", "GPU memory smaller"),
]


class _Run:
    """What the noise of one profile's figures is made of."""

    def __init__(self, profile: dict[str, Any]):
        self.profile = profile
        self.elapsed = profile["elapsed_time_sec"]
        self.total = profile["total_time_sec"]
        samples = profile.get("cpu_samples", 0)
        interval = profile.get("sampling_interval_sec", 0.0) or profile["options"]["cpu_sampling_rate"]
        # The mean window one snapshot charges (threads: each its own window).
        self.window = self.total / samples if samples and self.total > 0 else interval
        self.alloc_window = (profile.get("allocation_sampling_window_bytes")
                             or profile["options"].get("allocation_sampling_window") or 1 << 20) / MB

    def sample_weight(self, entry: dict[str, Any] | None, kind: str, value: float) -> float:
        """What one sample of this figure of this entry weighs, in its unit."""
        if kind in ("time", "percent"):
            n = entry.get("n_samples", 0) if entry else 0
            if n and value > 0:
                return value / n
            # Never sampled: one of the run's windows.
            weight = self.window
            return weight * 100.0 / self.total if kind == "percent" and self.total > 0 else weight
        if kind == "memory":
            n = entry.get("n_mallocs", 0) if entry else 0
            alloc = entry.get("n_malloc_mb", 0.0) if entry else 0.0
            return alloc / n if n and alloc > 0 else self.alloc_window
        if kind == "copy":
            return self.alloc_window  # copies are sampled every window bytes copied
        if kind == "gpu":
            return GPU_WINDOW_SEC
        return 0.0  # GPU memory: read, not sampled (every 20 ms)

    def error(self, value: float, entry: dict[str, Any] | None, kind: str) -> float:
        """The standard error of one figure of one entry: its sampling error
        and its run-to-run share."""
        v = abs(value)
        w = self.sample_weight(entry, kind, v)
        if kind in ("time", "percent"):
            # The run's windows are split among its lines: a line with a share
            # p of N windows gets Np(1 - p) of them, give or take (a binomial
            # count), and the windows are exponential (their squares average
            # two squared means).  One window more: a line never sampled may
            # still have run.
            p = min(v / (100.0 if kind == "percent" else self.total), 1.0) if self.total > 0 else 0.0
            sampling = 2.0 * w * (v * (1.0 - p) + w)
            share = RUN_SHARE_TIME
        elif kind in ("memory", "copy"):
            sampling = (v + w) * w
            share = RUN_SHARE_MEMORY
        elif kind == "gpu":
            # GPU time is not a count: each utilisation window's busy time is
            # spread over the lines that ran in it, so a line's time is off by
            # what the windows at its edges put on its neighbours, a window at most.
            sampling = w * w
            share = RUN_SHARE_GPU
        else:
            sampling = 0.0
            share = RUN_SHARE_GPU
        run = share * v
        return math.sqrt(sampling + run * run)  # inf, not OverflowError, past the largest float


def _ratio(before: float, after: float) -> float | None:
    """after / before; None where before is 0 (or the ratio is beyond a float)."""
    if before <= 0:
        return None
    r = after / before
    return r if math.isfinite(r) else None


def _compare(figure: Figure, a: dict[str, Any] | None, b: dict[str, Any] | None,
             run_a: _Run, run_b: _Run) -> dict[str, Any]:
    """One figure of one entry in both runs (None: not in that run, read as 0)."""
    x = figure.read(a, run_a.elapsed) if a is not None else 0.0
    y = figure.read(b, run_b.elapsed) if b is not None else 0.0
    noise = NOISE_Z * math.hypot(run_a.error(x, a, figure.kind), run_b.error(y, b, figure.kind))
    change = y - x
    return {"before": x, "after": y, "change": change, "ratio": _ratio(x, y),
            "noise": noise, "significant": abs(change) > noise}


# ---------------------------------------------------------------------------
# Matching.
# ---------------------------------------------------------------------------

def _key(text: str) -> str:
    """A line's text as matched: whitespace collapsed, so that re-indenting
    (code put under an `if`) does not unmatch it."""
    return " ".join(text.split())


def match_files(before: list[str], after: list[str],
                lines_of: Callable[[str, str], list[str]]) -> tuple[list[tuple[str, str, str]], list[str], list[str]]:
    """Pairs (before, after, how: "path", "suffix", "source"), then the files
    of BEFORE only and of AFTER only.  lines_of(side, name): a file's line texts."""
    left = [f for f in before if f not in after]
    right = [f for f in after if f not in before]
    pairs = [(f, f, "path") for f in before if f in after]
    # The longest common suffix of path components: /a/x/pkg/util.py and
    # /b/y/pkg/util.py; a tie (two candidates as close) is left unmatched.
    candidates = []
    for f in left:
        parts = _components(f)
        for g in right:
            common = _common_suffix(parts, _components(g))
            if common:
                candidates.append((common, f, g))
    candidates.sort(key=lambda c: -c[0])
    taken_a: set[str] = set()
    taken_b: set[str] = set()
    for common, f, g in candidates:
        if f in taken_a or g in taken_b:
            continue
        rivals = [c for c in candidates if c[0] == common and (c[1] == f) != (c[2] == g)
                  and c[1] not in taken_a and c[2] not in taken_b]
        if rivals:
            continue
        pairs.append((f, g, "suffix"))
        taken_a.add(f)
        taken_b.add(g)
    left = [f for f in left if f not in taken_a]
    right = [g for g in right if g not in taken_b]
    # A renamed file: most of its lines are the same.
    scored = []
    for f in left:
        keys_a = {_key(t) for t in lines_of("before", f)} - {""}
        if not keys_a:
            continue
        for g in right:
            keys_b = {_key(t) for t in lines_of("after", g)} - {""}
            if keys_b:
                overlap = len(keys_a & keys_b) / len(keys_a | keys_b)
                if overlap >= 0.5:
                    scored.append((overlap, f, g))
    for overlap, f, g in sorted(scored, key=lambda s: -s[0]):
        if f not in taken_a and g not in taken_b:
            pairs.append((f, g, "source"))
            taken_a.add(f)
            taken_b.add(g)
    return (pairs, [f for f in left if f not in taken_a], [g for g in right if g not in taken_b])


def _components(path: str) -> list[str]:
    return [p for p in path.replace("\\", "/").split("/") if p]


def _common_suffix(a: list[str], b: list[str]) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


class _QualnameVisitor(ast.NodeVisitor):
    """Each function's span (its first decorator to its last line) and
    qualified name, named as CPython names its code (`C.m`, `f.<locals>.g`)."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int, str]] = []
        self.stack: list[str] = []

    def _scope(self, node: Any, is_function: bool) -> None:
        qualname = ".".join([*self.stack, node.name])
        if is_function:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            self.spans.append((first, node.end_lineno or node.lineno, qualname))
        self.stack.append(node.name + (".<locals>" if is_function else ""))
        self.generic_visit(node)
        self.stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scope(node, True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scope(node, True)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope(node, False)


def _enclosing(entries: list[dict[str, Any]], functions: list[dict[str, Any]]) -> list[str]:
    """The qualified name of the function each line is in ("" at module level):
    from the source itself where the profile holds it whole and it parses,
    else from the profile's functions (the last one starting at or above)."""
    names = [""] * len(entries)
    if entries and all(e["lineno"] == i + 1 for i, e in enumerate(entries)):
        try:
            tree = ast.parse("\n".join(e["line"] for e in entries))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            visitor = _QualnameVisitor()
            visitor.visit(tree)
            # Outer spans first: an inner function's lines end up with its name.
            for first, last, qualname in sorted(visitor.spans, key=lambda s: (s[0], -s[1])):
                for n in range(first, min(last, len(entries)) + 1):
                    names[n - 1] = qualname
            return names
    starts = sorted((f["lineno"], f["line"]) for f in functions)
    i = -1
    for k, e in enumerate(entries):
        while i + 1 < len(starts) and starts[i + 1][0] <= e["lineno"]:
            i += 1
        names[k] = starts[i][1] if i >= 0 else ""
    return names


# The least similarity (difflib's ratio) of an edited line to its old text.
EDITED_SIMILARITY = 0.6
# Lines moved out of order are matched as blocks of at least this many lines
# (within the same function: any block).
MOVED_BLOCK = 3
# An edited line's old text is looked for among the next few lines of the
# stretch the alignment replaced (an edit keeps a line about where it was;
# comparing every pair would be quadratic in the stretch).
EDITED_LOOKAHEAD = 8
# A stretch replaced whole beyond this many lines a side is a rewrite: its
# lines are new and removed, not edited one by one.
EDITED_STRETCH = 40
# Longer lines are matched only by equality (the similarity is quadratic in
# the length of the text, and a profile may hold lines of any length).
EDITED_CHARS = 400


def match_lines(a: list[dict[str, Any]], b: list[dict[str, Any]], context_a: list[str],
                context_b: list[str]) -> list[tuple[int | None, int | None, str]]:
    """Pairs of indices into a and b (None: no partner) with the status of
    the pair: "same" (same text, in order), "moved" (same text, out of
    order), "edited", "new", "removed"; in AFTER's order, removed lines where
    they stood."""
    keys_a = [_key(e["line"]) for e in a]
    keys_b = [_key(e["line"]) for e in b]
    partner_a: dict[int, tuple[int, str]] = {}
    partner_b: dict[int, int] = {}

    def pair(i: int, j: int, status: str) -> None:
        partner_a[i] = (j, status)
        partner_b[j] = i

    matcher = difflib.SequenceMatcher(lambda k: k == "", keys_a, keys_b)
    opcodes = matcher.get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            for k in range(i2 - i1):
                pair(i1 + k, j1 + k, "same")

    def free_a() -> list[int]:
        return [i for i in range(len(a)) if i not in partner_a and keys_a[i]]

    def free_b() -> list[int]:
        return [j for j in range(len(b)) if j not in partner_b and keys_b[j]]

    # Moved lines, first within the function of the same name, then as blocks.
    by_function: dict[str, tuple[list[int], list[int]]] = {}
    for i in free_a():
        by_function.setdefault(context_a[i], ([], []))[0].append(i)
    for j in free_b():
        by_function.setdefault(context_b[j], ([], []))[1].append(j)
    for name, (ia, jb) in by_function.items():
        if ia and jb:
            _match_blocks(ia, jb, keys_a, keys_b, 1 if name else MOVED_BLOCK, pair)
    ia, jb = free_a(), free_b()
    if ia and jb:
        _match_blocks(ia, jb, keys_a, keys_b, MOVED_BLOCK, pair)
    # Edited lines: within each stretch the alignment replaced, in order.
    for tag, i1, i2, j1, j2 in opcodes:
        if tag != "replace" or i2 - i1 > EDITED_STRETCH or j2 - j1 > EDITED_STRETCH:
            continue
        after = j1
        for i in range(i1, i2):
            if i in partner_a or not keys_a[i] or len(keys_a[i]) > EDITED_CHARS:
                continue
            best, best_j = EDITED_SIMILARITY, None
            candidates = [j for j in range(after, j2) if j not in partner_b and keys_b[j]
                          and len(keys_b[j]) <= EDITED_CHARS][:EDITED_LOOKAHEAD]
            for j in candidates:
                s = difflib.SequenceMatcher(None, keys_a[i], keys_b[j])
                if s.real_quick_ratio() >= best and s.quick_ratio() >= best and s.ratio() >= best:
                    best, best_j = s.ratio(), j
            if best_j is not None:
                pair(i, best_j, "edited")
                after = best_j + 1

    out: list[tuple[int | None, int | None, str]] = []
    i = 0
    for j in range(len(b)):
        if j in partner_b:
            # the removed lines that stood before this one's partner (in order)
            mate = partner_b[j]
            while i < mate:
                if i not in partner_a:
                    out.append((i, None, "removed"))
                i += 1
            if i == mate:
                i += 1
            out.append((mate, j, partner_a[mate][1]))
        else:
            out.append((None, j, "new"))
    out.extend((k, None, "removed") for k in range(i, len(a)) if k not in partner_a)
    return out


def _match_blocks(ia: list[int], jb: list[int], keys_a: list[str], keys_b: list[str], least: int,
                  pair: Callable[[int, int, str], None]) -> None:
    """Align the lines left over (subsequences ia, jb) and pair blocks of at
    least `least` lines."""
    # autojunk (difflib's default): a text that fills more than 1% of a long
    # side anchors no match (it is matched beside others), which keeps the
    # alignment near linear where thousands of lines read alike.
    sub = difflib.SequenceMatcher(None, [keys_a[i] for i in ia], [keys_b[j] for j in jb])
    for block in sub.get_matching_blocks():
        if block.size >= least:
            for k in range(block.size):
                pair(ia[block.a + k], jb[block.b + k], "moved")


def _match_functions(fa: list[dict[str, Any]], fb: list[dict[str, Any]],
                     line_map: dict[int, int]) -> list[tuple[int | None, int | None]]:
    """Functions paired by qualified name; a name that occurs more than once
    (two definitions, lambdas, comprehensions) by where its first line went."""
    by_name_b: dict[str, list[int]] = {}
    for j, e in enumerate(fb):
        by_name_b.setdefault(e["line"], []).append(j)
    taken: set[int] = set()
    pairs: list[tuple[int | None, int | None]] = []
    later = []
    for i, e in enumerate(fa):
        candidates = by_name_b.get(e["line"], [])
        mapped = line_map.get(e["lineno"])
        exact = [j for j in candidates if fb[j]["lineno"] == mapped and j not in taken]
        if exact:
            pairs.append((i, exact[0]))
            taken.add(exact[0])
        else:
            later.append(i)
    for i in later:
        free = [j for j in by_name_b.get(fa[i]["line"], []) if j not in taken]
        if free:
            pairs.append((i, free[0]))
            taken.add(free[0])
        else:
            pairs.append((i, None))
    pairs.extend((None, j) for j in range(len(fb)) if j not in taken)
    return pairs


# ---------------------------------------------------------------------------
# The diff.
# ---------------------------------------------------------------------------

def _run_fields(path: str, p: dict[str, Any]) -> dict[str, Any]:
    return {"path": path, "program": p["program"], "args": p["args"],
            "start_time_absolute": p.get("start_time_absolute"), "python_version": p.get("python_version"),
            "memory": bool(p.get("memory")), "gpu": bool(p.get("gpu")), "cpu_samples": p.get("cpu_samples", 0),
            "sampling_interval_sec": p.get("sampling_interval_sec", 0.0),
            "allocation_sampling_window_bytes": p.get("allocation_sampling_window_bytes"),
            "reduced_profile": bool(p["options"].get("reduced_profile")),
            "profiled_functions": len(p.get("profiled_functions", []))}


def _figures_for(memory: bool, gpu: bool) -> list[Figure]:
    return TIME_FIGURES + (MEMORY_FIGURES if memory else []) + (GPU_FIGURES if gpu else [])


def _verdict(figures: dict[str, dict[str, Any]], headline: list[Figure]) -> list[str]:
    return [(f.up if figures[f.name]["change"] > 0 else f.down) for f in headline
            if figures[f.name]["significant"]]


def _sum_entries(entries: list[dict[str, Any]], figures: list[Figure], elapsed: float) -> dict[str, float]:
    return {f.name: sum(f.read(e, elapsed) for e in entries) for f in figures}


def _run_totals(p: dict[str, Any], memory: bool, gpu: bool) -> dict[str, float]:
    """The header's figures of one run, from the profile's own totals."""
    cpu = p["cpu_time_sec"]
    out = {
        "elapsed_sec": p["elapsed_time_sec"],
        "time_sec": cpu["python"] + cpu["native"] + cpu["system"],
        "python_sec": cpu["python"], "native_sec": cpu["native"], "system_sec": cpu["system"],
        "gil_wait_sec": cpu.get("gil_wait", 0.0), "cpu_wait_sec": cpu.get("cpu_wait", 0.0),
        "cpu_samples": float(p.get("cpu_samples", 0)),
    }
    if memory:
        lines = [e for f in p["files"].values() for e in f["lines"]]
        native = p.get("native_threads", {})
        other = p.get("unattributed_memory", {})
        out["max_footprint_mb"] = p["max_footprint_mb"]
        out["footprint_mb"] = p.get("footprint_mb", 0.0)
        out["allocated_mb"] = (sum(e.get("n_malloc_mb", 0.0) for e in lines) + native.get("malloc_mb", 0.0)
                               + other.get("malloc_mb", 0.0))
        out["copy_mb"] = (sum(_copy_mb(e, p["elapsed_time_sec"]) for e in lines) + native.get("copy_mb", 0.0)
                          + other.get("copy_mb", 0.0))
    if gpu:
        out["gpu_sec"] = p.get("gpu_time_sec", 0.0)
        out["gpu_peak_memory_mb"] = p.get("gpu_peak_memory_mb", 0.0)
    return out


# The header's figures: name, label, unit, noise kind (None: measured, not
# sampled: only the run-to-run share).
TOTALS = [
    ("elapsed_sec", "elapsed", "s", None),
    ("time_sec", "time", "s", "time"),
    ("python_sec", "Python", "s", "time"),
    ("native_sec", "native", "s", "time"),
    ("system_sec", "system", "s", "time"),
    ("gil_wait_sec", "GIL wait", "s", "time"),
    ("cpu_wait_sec", "CPU wait", "s", "time"),
    ("cpu_samples", "samples", "", None),
    ("max_footprint_mb", "peak memory", "MB", "memory"),
    ("footprint_mb", "growth", "MB", "memory"),
    ("allocated_mb", "allocated", "MB", "memory"),
    ("copy_mb", "copied", "MB", "copy"),
    ("gpu_sec", "GPU", "s", "gpu"),
    ("gpu_peak_memory_mb", "GPU memory", "MB", "gpu_memory"),
]


def _totals(a: dict[str, Any], b: dict[str, Any], run_a: _Run, run_b: _Run,
            memory: bool, gpu: bool) -> list[dict[str, Any]]:
    ta, tb = _run_totals(a, memory, gpu), _run_totals(b, memory, gpu)
    out = []
    for name, label, unit, kind in TOTALS:
        if name not in ta:
            continue
        x, y = ta[name], tb[name]
        if kind is None:
            share = RUN_SHARE_TIME if unit == "s" else 0.0
            noise = NOISE_Z * share * math.hypot(x, y)
        else:
            # The run as one entry: its windows are the run's mean window.
            noise = NOISE_Z * math.hypot(run_a.error(x, None, kind), run_b.error(y, None, kind))
        out.append({"figure": name, "label": label, "unit": unit, "before": x, "after": y, "change": y - x,
                    "ratio": _ratio(x, y), "noise": noise,
                    "significant": name != "cpu_samples" and abs(y - x) > noise})
    return out


class _Compared:
    """Two runs' files compared, one pair at a time (compare): each line's,
    function's and file's figures side by side, and the findings, the
    changes past their noise, gathered as they are met."""

    def __init__(self, figures: list, headline: list, run_a: _Run, run_b: _Run):
        self.figures, self.headline, self.run_a, self.run_b = figures, headline, run_a, run_b
        self.findings: list[dict[str, Any]] = []
        self.within_noise = {"lines": 0, "functions": 0}

    def file(self, fa: dict[str, Any], fb: dict[str, Any], name_a: str | None, name_b: str | None,
             how: str | None) -> dict[str, Any]:
        la, lb = fa["lines"], fb["lines"]
        ctx_a, ctx_b = _enclosing(la, fa.get("functions", [])), _enclosing(lb, fb.get("functions", []))
        matched = match_lines(la, lb, ctx_a, ctx_b)
        line_map = {la[i]["lineno"]: lb[j]["lineno"] for i, j, _ in matched if i is not None and j is not None}
        counts = {"same": 0, "moved": 0, "edited": 0, "new": 0, "removed": 0}
        lines = []
        for i, j, status in matched:
            counts[status] += 1
            entry = self._line(la[i] if i is not None else None, lb[j] if j is not None else None, status,
                               ctx_b[j] if j is not None else ctx_a[i])
            if entry is not None:
                lines.append(entry)
                _collect(self.findings, self.within_noise, "lines", entry, self.headline, name_a, name_b)
        functions = []
        mapped_after = set(line_map.values())
        for i, j in _match_functions(fa.get("functions", []), fb.get("functions", []), line_map):
            entry = self._function(fa["functions"][i] if i is not None else None,
                                   fb["functions"][j] if j is not None else None, line_map, mapped_after)
            functions.append(entry)
            _collect(self.findings, self.within_noise, "functions", entry, self.headline, name_a, name_b)
        file_figures = self._sums(la, lb)
        return {"before": name_a, "after": name_b, "matched_by": how,
                "status": "matched" if how else ("removed" if name_a else "new"),
                "figures": file_figures, "verdict": _verdict(file_figures, self.headline),
                "line_counts": counts, "lines": lines, "functions": functions}

    def _line(self, ea: dict[str, Any] | None, eb: dict[str, Any] | None, status: str,
              function: str) -> dict[str, Any] | None:
        """A matched line's entry; None for an unchanged line with nothing measured (not listed)."""
        has_data = ((ea is not None and any(f.read(ea, self.run_a.elapsed) for f in self.figures))
                    or (eb is not None and any(f.read(eb, self.run_b.elapsed) for f in self.figures)))
        if status == "same" and not has_data:
            return None
        values = {f.name: _compare(f, ea, eb, self.run_a, self.run_b) for f in self.figures}
        entry = {"status": status,
                 "lineno_before": ea["lineno"] if ea else None,
                 "lineno_after": eb["lineno"] if eb else None,
                 "line": (eb or ea)["line"],
                 "function": function,
                 "figures": values, "verdict": _verdict(values, self.headline), "has_data": has_data}
        if status == "edited":
            entry["line_before"] = ea["line"]
        return entry

    def _function(self, ea: dict[str, Any] | None, eb: dict[str, Any] | None, line_map: dict[int, int],
                  mapped_after: set[int]) -> dict[str, Any]:
        values = {f.name: _compare(f, ea, eb, self.run_a, self.run_b) for f in self.figures}
        # A function listed in one run only may just not have been sampled
        # in the other: it is new or removed only when its first line is.
        if ea and eb or (ea and ea["lineno"] in line_map) or (eb and eb["lineno"] in mapped_after):
            status = "same"
        else:
            status = "new" if eb else "removed"
        return {"status": status,
                "lineno_before": ea["lineno"] if ea else None,
                "lineno_after": eb["lineno"] if eb else None,
                "function": (eb or ea)["line"], "figures": values, "verdict": _verdict(values, self.headline)}

    def _sums(self, la: list, lb: list) -> dict[str, Any]:
        """A file's figures: its lines' added up, before and after, with their noise."""
        sums_a = _sum_entries(la, self.figures, self.run_a.elapsed)
        sums_b = _sum_entries(lb, self.figures, self.run_b.elapsed)
        out = {}
        for f in self.figures:
            x, y = sums_a[f.name], sums_b[f.name]
            noise = NOISE_Z * math.hypot(self.run_a.error(x, None, f.kind), self.run_b.error(y, None, f.kind))
            out[f.name] = {"before": x, "after": y, "change": y - x, "ratio": _ratio(x, y),
                           "noise": noise, "significant": abs(y - x) > noise}
        return out


def compare(before: dict[str, Any], after: dict[str, Any], before_path: str = "BEFORE",
            after_path: str = "AFTER") -> dict[str, Any]:
    """The diff of two checked profiles (model.load), as the document that
    --json writes (docs/diff.md lists its fields)."""
    run_a, run_b = _Run(before), _Run(after)
    memory = bool(before.get("memory")) and bool(after.get("memory"))
    gpu = bool(before.get("gpu")) and bool(after.get("gpu"))
    figures = _figures_for(memory, gpu)
    headline = [f for f in figures if f.headline]
    notices = _notices(before, after, before_path, after_path)

    def lines_of(side: str, name: str) -> list[str]:
        p = before if side == "before" else after
        return [e["line"] for e in p["files"][name]["lines"]]

    pairs, only_a, only_b = match_files(sorted(before["files"]), sorted(after["files"]), lines_of)
    compared = _Compared(figures, headline, run_a, run_b)
    files = [compared.file(before["files"][name_a] if name_a else {"lines": [], "functions": []},
                           after["files"][name_b] if name_b else {"lines": [], "functions": []}, name_a, name_b, how)
             for name_a, name_b, how in [*pairs, *((f, None, None) for f in only_a),
                                         *((None, g, None) for g in only_b)]]
    findings, within_noise = compared.findings, compared.within_noise

    totals = _totals(before, after, run_a, run_b, memory, gpu)
    uniform = _uniform_change(totals, files)
    if uniform:
        notices.append(uniform)
    scale = _scales(before, after, memory, gpu)
    for finding in findings:
        finding["share"] = abs(finding["change"]) / scale[finding["figure"]] if scale[finding["figure"]] > 0 else 0.0
    findings.sort(key=lambda f: (-f["share"], f["where"]))
    files.sort(key=lambda f: -max((abs(v["change"]) for k, v in f["figures"].items() if k == "time_sec"),
                                  default=0.0))
    return {
        "pyrometer_diff": DIFF_SCHEMA_VERSION,
        "before": _run_fields(before_path, before),
        "after": _run_fields(after_path, after),
        "compared": {"memory": memory, "gpu": gpu},
        "noise": {"z": NOISE_Z, "run_share_time": RUN_SHARE_TIME, "run_share_memory": RUN_SHARE_MEMORY,
                  "run_share_gpu": RUN_SHARE_GPU,
                  "window_sec_before": run_a.window, "window_sec_after": run_b.window,
                  "allocation_window_mb_before": run_a.alloc_window,
                  "allocation_window_mb_after": run_b.alloc_window},
        "totals": totals,
        "findings": findings,
        "within_noise": within_noise,
        "files": files,
        "notices": notices,
    }


def _collect(findings: list, within_noise: dict[str, int], what: str, entry: dict[str, Any],
             headline: list[Figure], name_a: str | None, name_b: str | None) -> None:
    """An entry's findings (its headline figures beyond noise); an entry that
    changed, but only within noise, is counted."""
    changed = False
    for f in headline:
        v = entry["figures"][f.name]
        if v["significant"]:
            findings.append({
                "kind": "line" if what == "lines" else "function",
                "figure": f.name, "direction": f.up if v["change"] > 0 else f.down,
                "file_before": name_a, "file_after": name_b,
                "lineno_before": entry["lineno_before"], "lineno_after": entry["lineno_after"],
                "status": entry["status"],
                "text": entry.get("line", entry.get("function")), "function": entry["function"],
                "before": v["before"], "after": v["after"], "change": v["change"], "ratio": v["ratio"],
                "noise": v["noise"],
                "where": f"{name_b or name_a}:{entry['lineno_after'] or entry['lineno_before']}",
            })
        elif v["change"] != 0:
            changed = True
    if changed and not entry["verdict"]:
        within_noise[what] += 1


def _scales(before: dict[str, Any], after: dict[str, Any], memory: bool, gpu: bool) -> dict[str, float]:
    """What a finding's change is a share of, to sort changes of every kind
    together: the larger of the two runs' totals of its figure."""
    ta, tb = _run_totals(before, memory, gpu), _run_totals(after, memory, gpu)
    scale = {"time_sec": max(ta["time_sec"], tb["time_sec"])}
    if memory:
        scale["allocated_mb"] = max(ta["allocated_mb"], tb["allocated_mb"])
        scale["peak_mb"] = scale["growth_mb"] = max(ta["max_footprint_mb"], tb["max_footprint_mb"])
        scale["copy_mb"] = max(ta["copy_mb"], tb["copy_mb"])
    if gpu:
        scale["gpu_sec"] = max(ta["gpu_sec"], tb["gpu_sec"])
        scale["gpu_peak_memory_mb"] = max(ta["gpu_peak_memory_mb"], tb["gpu_peak_memory_mb"])
    return scale


def _uniform_change(totals: list[dict[str, Any]], files: list[dict[str, Any]]) -> str | None:
    """A notice when the whole run got slower or faster by one factor, every
    function of weight alike: the findings may be the machine's, not the code's."""
    total = next(t for t in totals if t["figure"] == "time_sec")
    if not total["significant"] or not total["ratio"]:
        return None
    ratios = [v["ratio"] for f in files for e in f["functions"] if e["status"] == "same"
              for v in (e["figures"]["time_sec"],)
              if v["ratio"] and v["before"] >= UNIFORM_SHARE * total["before"]]
    if len(ratios) < 2 or not all(1 / UNIFORM_SPREAD <= r / total["ratio"] <= UNIFORM_SPREAD for r in ratios):
        return None
    how = "slower" if total["ratio"] > 1 else "faster"
    return (f"every function ran {how} by about the run's own factor ({total['ratio']:.2f}x; "
            f"{min(ratios):.2f}x to {max(ratios):.2f}x): a change of the machine's speed (load, "
            "clock, another program on the same cores) or of the interpreter does that as well as "
            "the code; profile both again on a quiet machine before reading the findings as the code's")


def _notices(a: dict[str, Any], b: dict[str, Any], path_a: str, path_b: str) -> list[str]:
    """What a reader must know to read the diff right."""
    out = []
    for what, key in (("memory", "memory"), ("the GPU", "gpu")):
        if bool(a.get(key)) != bool(b.get(key)):
            only = path_a if a.get(key) else path_b
            out.append(f"{what} was profiled only in {only}: it is not compared")
    if not a.get("cpu_samples") or not b.get("cpu_samples"):
        out.append("a run with no CPU samples: its times are all zero, so every time is a change")
    for path, p in ((path_a, a), (path_b, b)):
        if p["options"].get("reduced_profile"):
            out.append(f"{path} is a reduced profile (--reduced-profile): lines below its thresholds are "
                       "missing from it, and read as zero")
        if p.get("profiled_functions"):
            out.append(f"{path} holds only its @profile functions: the rest of the program is not compared")
    if a.get("python_version") != b.get("python_version"):
        out.append(f"the runs used different Pythons ({a.get('python_version')} and {b.get('python_version')})")
    rates = a["options"]["cpu_sampling_rate"], b["options"]["cpu_sampling_rate"]
    if rates[0] != rates[1]:
        out.append(f"the runs sampled at different rates ({rates[0]:g} s and {rates[1]:g} s): the noise "
                   "of each figure is its own run's")
    return out


def load_pair(before_path: str, after_path: str,
              load: Callable[[str], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two profiles, checked (load: model.load); DiffError or
    ProfileError with one line when they cannot be compared."""
    try:
        same = os.path.samefile(before_path, after_path)
    except OSError:
        same = False
    if same:
        raise DiffError(f"{before_path} and {after_path} are the same file: give the profiles of two runs")
    a = load(before_path)
    b = load(after_path)
    if a == b:
        raise DiffError(f"{before_path} and {after_path} hold the same profile (the same run): "
                        "give the profiles of two runs")
    return a, b


def finite(value: Any) -> bool:
    """Whether every number in value is finite (walked without recursion)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return True


__all__ = ["DiffError", "ProfileError", "compare", "load_pair", "match_files", "match_lines",
           "DIFF_SCHEMA_VERSION", "NOISE_Z", "finite"]
