"""The profile's call stacks (its "call_stacks" field, docs/profile-schema.md) as
every export reads them: the frame table with the synthetic frames the exports
add, and each metric's weighted stacks.  The exports (pprof.py, speedscope.py,
collapsed.py, firefox.py) and the web report's flame graph only lay these out
in their own format: one definition here of what a metric sums and where its
synthetic leaf frame goes.

Time that is not Python's own (native, system, waiting for the GIL or for a
CPU) is shown as one extra leaf frame under the stack's leaf ("[native]",
"[system]", "[GIL wait]", "[CPU wait]"); Python time, memory and GPU figures
are the leaf line's own.  A stack without any reported frame (the header's
"unattributed" part) is the frame "[unattributed]"; the stacks past the cap,
summed, are "[other stacks]"."""

from __future__ import annotations

# options.py reads METRICS on every run's start: this module imports nothing
# heavy (no dataclasses, no typing; structs.py says why).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterator

from ..structs import record


class ExportError(Exception):
    """A profile that cannot give the export asked for: one without call stacks
    (made by a pyrometer older than them), or without the figures of the metric
    asked for (memory of a --cpu-only run)."""


@record
class Frame:
    function: str
    filename: str       # "" for a synthetic frame
    first_lineno: int   # the function's first line; 0 for a synthetic frame
    lineno: int         # the line executing; 0 for a synthetic frame
    # One the exports add (SYNTHETIC).  Told by this flag, not by the empty file
    # name: code compiled with the file name "" is the program's own.
    synthetic: bool = False


NATIVE, SYSTEM, GIL_WAIT, CPU_WAIT = "[native]", "[system]", "[GIL wait]", "[CPU wait]"
UNATTRIBUTED, OTHER = "[unattributed]", "[other stacks]"
SYNTHETIC = (NATIVE, SYSTEM, GIL_WAIT, CPU_WAIT, UNATTRIBUTED, OTHER)


@record
class Metric:
    name: str        # the option value (--collapsed-metric) and the key in exports
    label: str       # what a viewer shows
    unit: str        # "seconds" or "bytes": the unit of the profile's figures
    parts: tuple     # (the stack's field, its synthetic leaf frame or None)
    needs: str | None = None  # the profile's flag the metric needs ("memory", "gpu")


# Each kind of time: the stack's field (docs/profile-schema.md) and its leaf frame.
TIME_PARTS = (("python_sec", None), ("native_sec", NATIVE), ("system_sec", SYSTEM),
              ("gil_wait_sec", GIL_WAIT), ("cpu_wait_sec", CPU_WAIT))

METRICS = {m.name: m for m in (
    Metric("time", "time (Python, native, system, waiting)", "seconds", TIME_PARTS),
    Metric("python", "Python CPU time", "seconds", (TIME_PARTS[0],)),
    Metric("native", "native CPU time", "seconds", (TIME_PARTS[1],)),
    Metric("system", "system time (blocked in I/O, sleep, locks)", "seconds", (TIME_PARTS[2],)),
    Metric("gil_wait", "time waiting for the GIL", "seconds", (TIME_PARTS[3],)),
    Metric("cpu_wait", "time waiting for a CPU", "seconds", (TIME_PARTS[4],)),
    Metric("alloc", "allocated bytes", "bytes", (("malloc_bytes", None),), "memory"),
    Metric("copy", "copied bytes (memcpy, memmove)", "bytes", (("copy_bytes", None),), "memory"),
    Metric("gpu", "GPU time", "seconds", (("gpu_sec", None),), "gpu"),
)}


def call_stacks(profile: dict[str, Any], path: str = "the profile") -> dict[str, Any]:
    """The profile's call_stacks; ExportError (with the one line to show) when it
    has none."""
    stacks = profile.get("call_stacks")
    if not isinstance(stacks, dict):
        raise ExportError(f"{path} has no call stacks (it was made by an older pyrometer): "
                          f"profile the program again with this one to export its stacks")
    return stacks


def metric(profile: dict[str, Any], name: str, path: str = "the profile") -> Metric:
    """The metric of that name, which this profile must have figures for."""
    m = METRICS[name]
    if m.needs and not profile.get(m.needs):
        why = "memory was not profiled" if m.needs == "memory" else "no GPU was profiled"
        raise ExportError(f"{path} has no {m.label}: {why} in that run")
    return m


def metrics(profile: dict[str, Any]) -> list[Metric]:
    """The metrics this profile has figures for (memory ones only when memory was
    profiled, GPU time only when the GPU was)."""
    return [m for m in METRICS.values() if m.needs is None or profile.get(m.needs)]


class Stacks:
    """The profile's stacks with the synthetic frames appended to its frame
    table (frames[i] for i < len(call_stacks["frames"]) are the profile's own)."""

    def __init__(self, profile: dict[str, Any], path: str = "the profile"):
        cs = call_stacks(profile, path)
        self.frames = [Frame(f["function"], f["filename"], f["first_lineno"], f["lineno"])
                       for f in cs["frames"]]
        self.synthetic = {}
        for name in SYNTHETIC:
            self.synthetic[name] = len(self.frames)
            self.frames.append(Frame(name, "", 0, 0, synthetic=True))
        # (path, figures) with path a tuple of frame indices, root first.
        n = len(cs["frames"])
        self.entries = []
        for s in cs["stacks"]:
            stack = tuple(s["path"])
            if not all(type(f) is int and 0 <= f < n for f in stack):
                raise ExportError(f"{path} is damaged: a call stack's path {stack[:8]!r} is not made of "
                                  f"indices into its {n} frames")
            self.entries.append((stack or (self.synthetic[UNATTRIBUTED],), s))
        other = cs.get("other")
        if other:
            self.entries.append(((self.synthetic[OTHER],), other))
        self.cap = cs.get("cap")

    def weighted(self, metric: Metric) -> Iterator[tuple[tuple[int, ...], float]]:
        """(path, value) for every stack with a non-zero value of the metric, the
        synthetic leaf frame of its kind appended (the profile's own unit)."""
        for path, figures in self.entries:
            for field, leaf in metric.parts:
                value = figures.get(field) or 0
                if value > 0:
                    yield (path + (self.synthetic[leaf],) if leaf else path), value

    def labels(self) -> list[str]:
        """Each frame in one string, for formats that name frames by text alone
        (folded stacks): "function (dir/file.py:17)", the file relative to the
        directory all the stacks' files are under (the same wherever the export
        is made); a synthetic frame by its name."""
        import os
        files = {f.filename for f in self.frames if not f.synthetic}
        try:
            common = os.path.commonpath([os.path.dirname(f) for f in files]) if files else ""
        except ValueError:  # relative and absolute names mixed (pseudo-files: "<string>")
            common = ""
        def short(filename: str) -> str:
            return os.path.relpath(filename, common) if common and filename.startswith(common + os.sep) else filename
        return [f.function if f.synthetic else f"{f.function} ({short(f.filename)}:{f.lineno})" for f in self.frames]

    def total(self, metric: Metric) -> float:
        return sum(value for _, value in self.weighted(metric))


class Strings:
    """A string table, as pprof's and the Firefox Profiler's formats keep one:
    calling it with a string gives the string's index, adding it the first time;
    `table` lists them in order, starting with `first` (pprof: "")."""

    def __init__(self, *first: str) -> None:
        self.table: list[str] = []
        self.index: dict[str, int] = {}
        for s in first:
            self(s)

    def __call__(self, s: str) -> int:
        at = self.index.get(s)
        if at is None:
            at = self.index[s] = len(self.table)
            self.table.append(s)
        return at
