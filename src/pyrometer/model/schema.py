"""The profile's schema, and the reading of a saved profile (pyrometer view)
against it.

A saved profile may come from another machine or another version, may be
damaged, or crafted to attack whoever views it (markup for the web page, escape
sequences for the terminal).  Every field the model writes is checked for its
type and range, so the renderers only ever see well-formed profiles; every
problem becomes a ProfileError with a message a user can act on.  The renderers
escape every string all the same: a string may hold anything."""

from __future__ import annotations

import operator
import re
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..settings import OPTION_DEFAULTS
from .stacks import MEMORY_FIGURES, TIME_FIGURES

SCHEMA_VERSION = 1


class QuietLine(dict):
    """A line's entry with nothing measured on it (model.build): the members of
    any line's entry, every figure zero, those figures the very objects of one
    dict shared by the build's quiet lines (`figures`; each line has its own
    `memory_samples` list).  Most of a listing's lines are quiet, and making and
    encoding each entry took most of the time between the program's end and
    its profile on disk (regex_v8's 130 KB source: 1,790 entries, 35 ms to
    build, 28 to encode, of a 2.4 s run; a 50,000-line program 0.11 and 0.27
    s): json_out writes them from one encoding of the shared figures, as long
    as an entry still holds them (QuietLine.unchanged).  A dict for everything
    else; check() takes it as one."""
    __slots__ = ("figures",)

    @classmethod
    def of(cls, lineno: int, line: str, figures: dict) -> "QuietLine":
        entry = cls(lineno=lineno, line=line)
        entry.update(figures)
        if "memory_samples" in figures:
            entry["memory_samples"] = []  # its own list: a reader may add to it
        entry.figures = figures
        return entry

    def unchanged(self) -> bool:
        """Whether every member after lineno and line is still the shared
        figures' own object (equal is not enough: 0, 0.0, -0.0 and False are
        equal and written apart), memory_samples an empty list."""
        figures = self.figures
        if len(self) != len(figures) + 2:
            return False
        members = iter(self.items())
        if next(members)[0] != "lineno" or next(members)[0] != "line":
            return False
        for (key, value), (shared_key, shared) in zip(members, figures.items()):
            if key != shared_key or (value is not shared and not (
                    key == "memory_samples" and type(value) is list and not value)):
                return False
        return True


# What check() takes for an object: a line's entry may be a QuietLine.
_OBJECT_TYPES = (dict, QuietLine)


class ProfileError(Exception):
    """A file that cannot be shown as a pyrometer profile."""


class _Leaf:
    """A scalar field: its JSON type(s) and, for numbers, its range (bounds
    included).  Types are compared exactly, so that true is not taken for 1."""
    __slots__ = ("types", "low", "high", "what")

    def __init__(self, types: tuple, what: str, low: float | None = None, high: float | None = None):
        self.types, self.what, self.low, self.high = types, what, low, high


_FLOAT_MAX = sys.float_info.max  # finite bounds also refuse NaN and the infinities
_LINENO_MAX = (1 << 31) - 1
_COUNT_MAX = (1 << 63) - 1


def _number(low: float = -_FLOAT_MAX, high: float = _FLOAT_MAX) -> _Leaf:
    if low == -_FLOAT_MAX:
        what = "a finite number"
    elif high == _FLOAT_MAX:
        what = f"a number of at least {low:g}"
    else:
        what = f"a number from {low:g} to {high:g}"
    return _Leaf((int, float), what, low, high)


def _whole(low: int, high: int) -> _Leaf:
    return _Leaf((int,), f"a whole number from {low} to {high}", low, high)


_ANY_NUMBER = _number()
_NONNEG = _number(0.0)      # seconds, percentages, MB, rates that cannot be negative
_FRACTION = _number(0.0, 1.0)
_COUNT = _whole(0, _COUNT_MAX)
_LINENO = _whole(0, _LINENO_MAX)
_STR = _Leaf((str,), "a string")
_BOOL = _Leaf((bool,), "true or false")


class _Null:
    """null, or what `kind` describes."""
    __slots__ = ("kind",)

    def __init__(self, kind: Any):
        self.kind = kind


class _List:
    """A list of `item`s, or, with `length`, exactly that many."""
    __slots__ = ("item", "length")

    def __init__(self, item: Any, length: int | None = None):
        self.item, self.length = item, length


class _Object:
    """An object with these fields: name -> (kind, default).  The default
    _REQUIRED makes a field required; _OPTIONAL checks it only when present;
    any other default is given to a profile that lacks the field (one written
    by an older pyrometer of the same schema).  Fields not named here are
    allowed (a newer pyrometer of the same schema may add some) but must be
    plain JSON: see _plain."""
    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, tuple[Any, Any]]):
        self.fields = fields


class _Keyed:
    """An object keyed by line numbers written as decimal strings (leaks)."""
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


_REQUIRED, _OPTIONAL = object(), object()
REQUIRED = _REQUIRED
_TIMELINE = _List(_List(_ANY_NUMBER, 2))   # [seconds since the start, MB]; MB may be negative (net)
_MB_BY_KIND = _Object({"malloc_mb": (_NONNEG, 0.0), "free_mb": (_NONNEG, 0.0), "copy_mb": (_NONNEG, 0.0),
                       "python_mb": (_NONNEG, _OPTIONAL)})

_OPTIONS = _Object({
    "cpu_percent_threshold": (_number(0.0, 100.0), OPTION_DEFAULTS["cpu_percent_threshold"]),
    "reduced_profile": (_BOOL, False),
    "malloc_threshold": (_NONNEG, OPTION_DEFAULTS["malloc_threshold"]),
    "cpu_sampling_rate": (_number(1e-9), OPTION_DEFAULTS["cpu_sampling_rate"]),
    "cpu_only": (_BOOL, False),
    "profile_all": (_BOOL, False),
    "profile_only": (_List(_STR), []),
    "profile_exclude": (_List(_STR), []),
    "use_virtual_time": (_BOOL, False),
    "memory": (_BOOL, _OPTIONAL),
    "allocation_sampling_window": (_Null(_COUNT), _OPTIONAL),
    "leak_detector": (_BOOL, _OPTIONAL),
    "profile_interval": (_Null(_NONNEG), _OPTIONAL),
    "children": (_BOOL, _OPTIONAL),
    "gpu": (_Null(_BOOL), _OPTIONAL),
    "gpu_kernels": (_BOOL, _OPTIONAL),
    "off": (_BOOL, _OPTIONAL),
})

_TIME_ENTRY = _Object({
    "lineno": (_LINENO, _REQUIRED),
    "line": (_STR, _REQUIRED),
    "n_cpu_percent_python": (_NONNEG, _REQUIRED),
    "n_cpu_percent_c": (_NONNEG, _REQUIRED),
    "n_sys_percent": (_NONNEG, _REQUIRED),
    "n_gil_wait_percent": (_NONNEG, 0.0),
    "n_cpu_wait_percent": (_NONNEG, 0.0),
    "n_await_percent": (_number(0.0, 100.0), 0.0),
    "n_core_utilization": (_NONNEG, 0.0),
    "n_cpu_python_sec": (_NONNEG, 0.0),
    "n_cpu_native_sec": (_NONNEG, 0.0),
    "n_sys_sec": (_NONNEG, 0.0),
    "n_gil_wait_sec": (_NONNEG, 0.0),
    "n_cpu_wait_sec": (_NONNEG, 0.0),
    "n_await_sec": (_NONNEG, 0.0),
    "n_samples": (_COUNT, 0),
    # Each share's sampling error (model/build.py, _TIME_ERRORS).
    "n_time_percent_error": (_NONNEG, 0.0),
    "n_cpu_percent_python_error": (_NONNEG, 0.0),
    "n_cpu_percent_c_error": (_NONNEG, 0.0),
    "n_sys_percent_error": (_NONNEG, 0.0),
    "n_gil_wait_percent_error": (_NONNEG, 0.0),
    "n_cpu_wait_percent_error": (_NONNEG, 0.0),
    "n_gpu_percent": (_number(0.0, 100.0), _OPTIONAL),
    "n_gpu_sec": (_NONNEG, _OPTIONAL),
    "n_gpu_avg_memory_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_peak_memory_mb": (_NONNEG, _OPTIONAL),
    # The kernel tier's (gpu_kernel_tier "on").
    "n_gpu_kernel_sec": (_NONNEG, _OPTIONAL),
    "n_gpu_kernels": (_COUNT, _OPTIONAL),
    "n_gpu_copy_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_copy_htod_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_copy_dtoh_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_copy_dtod_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_memset_mb": (_NONNEG, _OPTIONAL),
    "n_gpu_alloc_mb": (_NONNEG, _OPTIONAL),
})
# With memory profiled, entries also have these (an entry lacking them gets zeros).
_MEMORY_ENTRY = _Object({
    "n_malloc_mb": (_NONNEG, 0.0),
    "n_python_fraction": (_FRACTION, 0.0),
    "n_peak_mb": (_NONNEG, 0.0),
    "n_growth_mb": (_ANY_NUMBER, 0.0),
    "n_avg_mb": (_NONNEG, 0.0),
    "n_mallocs": (_COUNT, 0),
    "n_usage_fraction": (_FRACTION, 0.0),
    "n_copy_mb_s": (_NONNEG, 0.0),
    "n_malloc_bytes": (_COUNT, _OPTIONAL),
    "n_free_bytes": (_COUNT, _OPTIONAL),
    "n_churn_mb": (_NONNEG, _OPTIONAL),
    "n_malloc_mb_error": (_NONNEG, _OPTIONAL),
    "n_growth_mb_error": (_NONNEG, _OPTIONAL),
    "n_copy_bytes": (_COUNT, _OPTIONAL),
    "memory_samples": (_TIMELINE, []),
})



def _optional(kind: _Object) -> dict[str, tuple[Any, Any]]:
    return {name: (k, _OPTIONAL) for name, (k, _) in kind.fields.items()}


_ENTRY_WITH_MEMORY = _Object({**_TIME_ENTRY.fields, **_MEMORY_ENTRY.fields})
# Without memory profiled, the memory fields are not expected, but where they are
# they have their types all the same: a renderer may read one it finds.
_ENTRY_CPU_ONLY = _Object({**_TIME_ENTRY.fields, **_optional(_MEMORY_ENTRY)})


class _Entries:
    """The lines or functions of a file (checked by _check_entries)."""
    __slots__ = ("entry",)

    def __init__(self, entry: _Object):
        self.entry = entry


def _file(entry: _Object) -> _Object:
    return _Object({
        "percent_cpu_time": (_NONNEG, _REQUIRED),
        "cpu_time_sec": (_NONNEG, _REQUIRED),
        "lines": (_Entries(entry), _REQUIRED),
        "functions": (_Entries(entry), []),
        "imports": (_List(_OPTIONAL), []),  # Scalene's field, always empty here: any plain JSON
        "leaks": (_Keyed(_Object({"likelihood": (_FRACTION, _REQUIRED),
                                  "velocity_mb_s": (_ANY_NUMBER, _REQUIRED),
                                  "growth_mb": (_ANY_NUMBER, _REQUIRED)})), {}),
    })


_FILE_CPU_ONLY, _FILE_WITH_MEMORY = _file(_ENTRY_CPU_ONLY), _file(_ENTRY_WITH_MEMORY)

_RUN = _Object({
    "pyrometer_schema": (_whole(1, SCHEMA_VERSION), _REQUIRED),
    "program": (_STR, _REQUIRED),
    "args": (_List(_STR), _REQUIRED),
    "python_version": (_STR, "?"),
    "platform": (_STR, "?"),
    "start_time_absolute": (_NONNEG, _OPTIONAL),
    "elapsed_time_sec": (_NONNEG, _REQUIRED),
    "paused_sec": (_NONNEG, 0.0),
    "exit_status": (_Null(_Leaf((int,), "a whole number from 0 to 255, or null", 0, 255)), None),
    "ended_by": (_Null(_STR), None),
    "options": (_OPTIONS, _REQUIRED),
    "cpu_sampling_rate": (_number(1e-9), _OPTIONAL),
    "sampling_interval_sec": (_NONNEG, 0.0),
    "cpu_samples": (_COUNT, 0),
    "cpu_samples_main_thread": (_COUNT, _OPTIONAL),
    "cpu_peeks": (_COUNT, _OPTIONAL),
    "cpu_spreads": (_COUNT, _OPTIONAL),
    "threads": (_COUNT, 0),
    "n_cpus": (_COUNT, 0),
    "process_cpu_time_sec": (_NONNEG, _OPTIONAL),
    "profiler_cpu_time_sec": (_NONNEG, _OPTIONAL),
    "untracked_native_sec": (_NONNEG, _OPTIONAL),
    "profiler_memory_bytes": (_COUNT, _OPTIONAL),
    "code_objects": (_COUNT, _OPTIONAL),
    "code_objects_seen": (_COUNT, _OPTIONAL),
    "total_time_sec": (_NONNEG, _REQUIRED),
    "cpu_time_sec": (_Object({"python": (_NONNEG, _REQUIRED), "native": (_NONNEG, _REQUIRED),
                              "system": (_NONNEG, _REQUIRED), "gil_wait": (_NONNEG, _OPTIONAL),
                              "cpu_wait": (_NONNEG, _OPTIONAL)}), _REQUIRED),
    "await_time_sec": (_NONNEG, 0.0),
    "event_loop_idle_sec": (_NONNEG, 0.0),
    "unattributed": (_Object({name: (_NONNEG, _OPTIONAL) for name in
                              ("python_sec", "native_sec", "system_sec", "gil_wait_sec", "cpu_wait_sec",
                               "await_sec")}),
                     _OPTIONAL),
    "memory": (_BOOL, False),
    "gpu": (_BOOL, False),
    "gpu_status": (_STR, _OPTIONAL),
    "gpu_device": (_STR, _OPTIONAL),
    "gpu_utilization_source": (_STR, _OPTIONAL),  # "device" or "process": checked by check()
    "gpu_time_sec": (_NONNEG, _OPTIONAL),
    "gpu_unattributed_sec": (_NONNEG, _OPTIONAL),
    "gpu_peak_memory_mb": (_NONNEG, _OPTIONAL),
    "gpu_devices": (_List(_Object({"name": (_STR, _REQUIRED), "busy_sec": (_NONNEG, _REQUIRED),
                                   "peak_memory_mb": (_NONNEG, 0.0), "utilization_source": (_STR, "device"),
                                   "shared": (_BOOL, False), "samples": (_COUNT, 0)})), _OPTIONAL),
    "gpu_kernel_tier": (_STR, _OPTIONAL),  # "off", "on", "absent", "busy", "failed": checked by check()
    "gpu_kernel_library": (_STR, _OPTIONAL),
    "gpu_kernels": (_COUNT, _OPTIONAL),
    "gpu_copies": (_COUNT, _OPTIONAL),
    "gpu_memsets": (_COUNT, _OPTIONAL),
    "gpu_allocations": (_COUNT, _OPTIONAL),
    "gpu_kernel_time_sec": (_NONNEG, _OPTIONAL),
    "gpu_kernel_unattributed_sec": (_NONNEG, _OPTIONAL),
    "gpu_copy_htod_mb": (_NONNEG, _OPTIONAL),
    "gpu_copy_dtoh_mb": (_NONNEG, _OPTIONAL),
    "gpu_copy_dtod_mb": (_NONNEG, _OPTIONAL),
    "gpu_kernel_records_lost": (_COUNT, _OPTIONAL),
    "notices": (_List(_STR), []),
    "files": (_Leaf((dict,), "an object"), _REQUIRED),  # each file: _FILE_*, checked by check()
})
# With memory profiled, the top level also has these.
_MEMORY_TOP = _Object({
    "max_footprint_mb": (_NONNEG, _REQUIRED),
    "max_footprint_where": (_Null(_Object({"filename": (_STR, _REQUIRED), "lineno": (_LINENO, _REQUIRED)})),
                            None),
    "max_footprint_time_sec": (_NONNEG, 0.0),
    "footprint_mb": (_ANY_NUMBER, 0.0),
    "growth_rate_mb_s": (_ANY_NUMBER, _REQUIRED),
    "allocated_mb": (_NONNEG, _OPTIONAL),  # older profiles lack it
    "churn_mb": (_NONNEG, _OPTIONAL),
    # Scalene's names (checked against max_footprint_where by check()); older
    # profiles lack them.
    "growth_rate": (_ANY_NUMBER, _OPTIONAL),
    "max_footprint_fname": (_Null(_STR), _OPTIONAL),
    "max_footprint_lineno": (_Null(_whole(1, _LINENO_MAX)), _OPTIONAL),
    "samples": (_TIMELINE, _REQUIRED),
    "top_allocations": (_List(_Object({"filename": (_STR, _REQUIRED), "lineno": (_LINENO, _REQUIRED),
                                       "n_malloc_mb": (_NONNEG, _REQUIRED),
                                       "n_malloc_mb_error": (_NONNEG, _OPTIONAL),
                                       "n_python_fraction": (_FRACTION, _REQUIRED)})), _REQUIRED),
    "native_threads": (_MB_BY_KIND, {"malloc_mb": 0.0, "free_mb": 0.0, "copy_mb": 0.0}),
    "unattributed_memory": (_MB_BY_KIND, _OPTIONAL),
    "allocation_sampling_window_bytes": (_COUNT, _OPTIONAL),
    "python_sampling_window_bytes": (_COUNT, _OPTIONAL),
    "memory_samples_dropped": (_COUNT, _OPTIONAL),
    "memory_dropped_mb": (_NONNEG, _OPTIONAL),
    "memory_samples_queued": (_COUNT, _OPTIONAL),
    "python_allocator": (_STR, _OPTIONAL),
    "python_memory_profiled": (_BOOL, _OPTIONAL),
    "python_memory_why": (_STR, _OPTIONAL),
})
_EXIT_STATUS = _Leaf((int,), "a whole number from 0 to 255, or null", 0, 255)
_PID = _whole(0, (1 << 31) - 1)
# A process's row in the process table (model/processes.py makes each).
PROCESS = _Object({
    "pid": (_PID, _REQUIRED),
    "ppid": (_Null(_PID), None),
    "command": (_List(_STR), []),
    "started_by": (_STR, "?"),
    "profiled": (_BOOL, True),
    "wall_sec": (_Null(_NONNEG), None),
    "paused_sec": (_Null(_NONNEG), None),
    "cpu_sec": (_Null(_NONNEG), None),
    "peak_mb": (_Null(_NONNEG), None),
    "exit_status": (_Null(_EXIT_STATUS), None),
    "ended_by": (_Null(_STR), None),
    "note": (_Null(_STR), None),
})
_RUN.fields.update({
    "process_count": (_COUNT, 1),
    "children_merge_sec": (_NONNEG, 0.0),
    "processes": (_List(PROCESS), []),
    # @profile's functions (Focus): the files' entries hold only their lines.
    "profiled_functions": (_List(_Object({"filename": (_STR, _REQUIRED), "function": (_STR, _REQUIRED),
                                          "lineno": (_LINENO, _REQUIRED), "end_lineno": (_LINENO, _REQUIRED)})),
                           []),
})
# call_stacks (stacks.py): each stack's path is checked by _check_paths.
_STACK_FIGURES = {**{name: (_NONNEG, _REQUIRED) for name in TIME_FIGURES}, "samples": (_COUNT, _REQUIRED),
                  **{name: (_COUNT, _OPTIONAL) for name in MEMORY_FIGURES}, "gpu_sec": (_NONNEG, _OPTIONAL)}
_STACK_DEPTH_MAX = 1 << 16
_CALL_STACKS = _Object({
    "frames": (_List(_Object({"filename": (_STR, _REQUIRED), "function": (_STR, _REQUIRED),
                              "first_lineno": (_LINENO, _REQUIRED), "lineno": (_LINENO, _REQUIRED)})), _REQUIRED),
    "stacks": (_Entries(_Object({"path": (_List(_LINENO), _REQUIRED), **_STACK_FIGURES})), _REQUIRED),
    "other": (_Object(_STACK_FIGURES), _REQUIRED),
    "cap": (_COUNT, _REQUIRED),
    "max_depth": (_whole(0, _STACK_DEPTH_MAX), _REQUIRED),
})
_RUN.fields["call_stacks"] = (_CALL_STACKS, _OPTIONAL)

# The verdict (verdict.py); a profile of an older pyrometer lacks it and gets
# one made from its own figures (check()).
_VERDICT = _Object({
    "bound": (_STR, _REQUIRED),  # one of verdict.BOUNDS, as own_bound: checked by check()
    "own_bound": (_STR, _OPTIONAL),
    "summary": (_STR, _REQUIRED),
    "evidence": (_Object({name: (_Null(_NONNEG), _OPTIONAL) for name in (
        "total_time_sec", "event_loop_idle_sec", "overlapped_wait_sec", "judged_time_sec", "own_time_sec", "python_percent", "native_percent",
        "system_percent", "gil_wait_percent", "cpu_wait_percent", "allocated_mb_per_cpu_sec",
        "freed_fraction", "copy_mb_per_cpu_sec", "gpu_busy_percent", "lines_percent")}
        | {"samples": (_COUNT, _OPTIONAL)}), {}),
    "lines": (_List(_Object({"filename": (_STR, _REQUIRED), "lineno": (_LINENO, _REQUIRED),
                             "line": (_STR, ""), "value": (_NONNEG, _REQUIRED), "unit": (_STR, "s"),
                             "percent": (_number(0.0, 100.0), 0.0), "shown": (_BOOL, True)})), []),
})
_RUN.fields["verdict"] = (_VERDICT, _OPTIONAL)
_TOP_WITH_MEMORY = _Object({**_RUN.fields, **_MEMORY_TOP.fields})
_TOP_CPU_ONLY = _Object({**_RUN.fields, **_optional(_MEMORY_TOP)})

# Fields no pyrometer of this schema writes may still be there (a newer one may
# add some); they must be plain JSON that every renderer can write out again:
# finite numbers, nested no deeper than this.
_PLAIN_DEPTH = 32
_LEAK_KEY = re.compile(r"[0-9]{1,10}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a field name shown as it is in messages


def _shown(value: Any) -> str:
    """A value as an error message shows it: short, and with every control
    character escaped (repr), since the message goes to a terminal."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shown_name(name: str) -> str:
    """A file name in a message: escaped like _shown, its end kept when long."""
    text = repr(name)
    return text if len(text) <= 100 else "'..." + text[-96:]


def _type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def _plain(value: Any, where: str) -> None:
    """A field this pyrometer does not know: plain JSON, finite, not too deep.
    Walked without recursion: the limit is the point."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > _PLAIN_DEPTH:
            raise ProfileError(f"{where} is nested more than {_PLAIN_DEPTH} levels deep")
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, float) and not -_FLOAT_MAX <= v <= _FLOAT_MAX:
            raise ProfileError(f"{where} holds {v!r}, not a finite number")


def _check_value(value: Any, kind: Any, where: str) -> Any:
    """value checked against kind; returns it (objects: with their defaults)."""
    cls = type(kind)
    if cls is _Leaf:
        if type(value) not in kind.types:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be {kind.what}")
        if kind.low is not None and not kind.low <= value <= kind.high:
            raise ProfileError(f"{where} is out of range ({_shown(value)}): it must be {kind.what}")
    elif cls is _Object:
        if type(value) not in _OBJECT_TYPES:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be an object")
        _check_fields(value, kind, where + ".")
    elif cls is _List:
        if type(value) is not list:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be a list")
        if kind.length is not None and len(value) != kind.length:
            raise ProfileError(f"{where} has {len(value)} items: it must have {kind.length}")
        item = kind.item
        if item is _OPTIONAL:
            _plain(value, where)
        else:
            for i, v in enumerate(value):
                _check_value(v, item, f"{where}[{i}]")
    elif cls is _Null:
        if value is not None:
            _check_value(value, kind.kind, where)
    elif cls is _Entries:
        if type(value) is not list:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be a list")
        _check_entries(value, kind.entry, where)
    elif cls is _Keyed:
        if type(value) is not dict:
            raise ProfileError(f"{where} has the wrong type ({_type_name(value)}): it must be an object")
        for key, v in value.items():
            if not _LEAK_KEY.fullmatch(key) or int(key) > _LINENO_MAX:
                raise ProfileError(f"{where} has the key {_shown(key)}: its keys must be line numbers")
            _check_value(v, kind.value, f"{where}[{key!r}]")
    else:  # pragma: no cover - a kind this module does not define
        raise TypeError(f"unknown kind {kind!r}")
    return value


def _check_fields(obj: dict, kind: _Object, where: str) -> None:
    fields = kind.fields
    for name, (field_kind, default) in fields.items():
        value = obj.get(name, _REQUIRED)
        if value is _REQUIRED:
            if default is _REQUIRED:
                raise ProfileError(f"{where}{name} is missing")
            if default is not _OPTIONAL:
                # a copy: the profile may be changed later (reduced())
                obj[name] = type(default)(default) if isinstance(default, (list, dict)) else default
            continue
        _check_value(value, field_kind, where + name)
    if len(obj) > len(fields) or any(name not in fields for name in obj):
        for name, value in obj.items():
            if name not in fields:
                _plain(value, where + (name if _NAME.fullmatch(name) else _shown(name)))


def _timeline_ok(samples: list) -> bool:
    for point in samples:
        if type(point) is not list or len(point) != 2:
            return False
        t, mb = point
        if type(t) not in _NUMBER_TYPES or type(mb) not in _NUMBER_TYPES or not (
                -_FLOAT_MAX <= t <= _FLOAT_MAX and -_FLOAT_MAX <= mb <= _FLOAT_MAX):
            return False
    return True


_NUMBER_TYPES = frozenset((int, float))


def _entry_plan(keys: tuple, kind: _Object) -> list | None:
    """How to check entries with exactly these fields, in this order, at C speed:
    their scalar fields grouped by kind, each group taken with one itemgetter.
    None when a field is unknown or a required one missing: those entries take
    the slow path, which says what is wrong or gives the defaults."""
    fields = kind.fields
    if any(name not in fields for name in keys) or any(
            default is not _OPTIONAL and name not in keys for name, (_, default) in fields.items()):
        return None
    groups: dict[int, tuple[_Leaf, list[str]]] = {}
    for name in keys:
        leaf = fields[name][0]
        if type(leaf) is _Leaf:
            groups.setdefault(id(leaf), (leaf, []))[1].append(name)
    plan = []
    for leaf, names in groups.values():
        get = operator.itemgetter(*names)
        plan.append((get if len(names) > 1 else (lambda e, get=get: (get(e),)), frozenset(leaf.types),
                     leaf.low, leaf.high))
    return plan


def _check_entries(entries: list, kind: _Object, where: str) -> None:
    """The lines or functions of a file: the bulk of a big profile (50,000
    entries and more), so the usual entry is checked a group of fields at a
    time (one type set, one min, one max, one sum for NaN) and only an unusual
    one takes _check_value's path, which names the field that is wrong."""
    plans: dict[tuple, list | None] = {}
    timeline = "memory_samples" in kind.fields
    for i, e in enumerate(entries):
        if type(e) in _OBJECT_TYPES:
            keys = tuple(e)
            plan = plans[keys] if keys in plans else plans.setdefault(keys, _entry_plan(keys, kind))
            if plan is not None:
                for get, types, low, high in plan:
                    values = get(e)
                    if not types.issuperset(map(type, values)):
                        break
                    if low is not None:
                        total = sum(values)
                        if total != total or min(values) < low or max(values) > high:
                            break
                else:
                    samples = e.get("memory_samples", _OPTIONAL) if timeline else _OPTIONAL
                    if samples is _OPTIONAL or (type(samples) is list and _timeline_ok(samples)):
                        continue
        _check_value(e, kind, f"{where}[{i}]")


def _check_scalene_footprint_names(profile: dict[str, Any], where: str) -> None:
    """max_footprint_fname and _lineno say again what max_footprint_where says
    (Scalene's names for it): where both are there they must agree, and a
    profile without them (an older pyrometer's) gets them from it."""
    peak = profile.get("max_footprint_where")
    expected = {"max_footprint_fname": peak["filename"] if peak else None,
                "max_footprint_lineno": peak["lineno"] if peak and peak["lineno"] > 0 else None}
    for name, value in expected.items():
        if name not in profile:
            profile[name] = value
        elif profile[name] != value:
            raise ProfileError(f"{where}{name} is {_shown(profile[name])}, but max_footprint_where "
                               f"says {_shown(value)}")


def _check_paths(stacks: dict[str, Any], where: str) -> None:
    """Every stack's path: indices of frames (the fast entry check leaves lists
    out), no deeper than the profile's max_depth."""
    frames = len(stacks["frames"])
    depth = stacks["max_depth"]
    for i, entry in enumerate(stacks["stacks"]):
        path = entry["path"]
        here = f"{where}call_stacks.stacks[{i}].path"
        if type(path) is not list:
            raise ProfileError(f"{here} has the wrong type ({_type_name(path)}): it must be a list")
        if len(path) > depth:
            raise ProfileError(f"{here} has {len(path)} frames, more than max_depth ({depth})")
        for j, index in enumerate(path):
            if type(index) is not int or not 0 <= index < frames:
                raise ProfileError(f"{here}[{j}] is {_shown(index)}: it must be the index of one of the "
                                   f"{frames} frames")


def load(path: str) -> dict[str, Any]:
    """A saved profile, checked: ProfileError says what is wrong with it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProfileError(f"cannot read {path}: {e.strerror or e}") from None
    return loads(data, path)


def loads(data: bytes, path: str = "the profile") -> dict[str, Any]:
    """A profile from the bytes of a saved one, checked (path: for messages)."""
    import json
    try:
        profile = json.loads(data)
    except UnicodeDecodeError:
        raise ProfileError(f"{path} is not a pyrometer profile (not JSON text)") from None
    except json.JSONDecodeError as e:
        if not data.strip():
            raise ProfileError(f"{path} is empty, not a pyrometer profile") from None
        if e.pos >= len(data.rstrip()):
            raise ProfileError(f"{path} is truncated: the JSON ends after {len(data)} bytes, "
                               f"in the middle of the profile") from None
        raise ProfileError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise ProfileError(f"{path} is not a pyrometer profile (nested too deeply)") from None
    except ValueError as e:  # an integer of more digits than int() converts
        raise ProfileError(f"{path} is not a pyrometer profile ({e})") from None
    return check(profile, path)


def check(profile: Any, path: str = "the profile") -> dict[str, Any]:
    """profile, as json.loads read it, checked field by field against what
    pyrometer writes (docs/profile-schema.md), with defaults for the optional
    fields an older pyrometer did not write; ProfileError otherwise."""
    if not isinstance(profile, dict) or "pyrometer_schema" not in profile:
        scalene = isinstance(profile, dict) and "files" in profile and "elapsed_time_sec" in profile
        raise ProfileError(f"{path} is not a pyrometer profile (no pyrometer_schema field"
                           + ("; it looks like Scalene's JSON)" if scalene else ")"))
    version = profile["pyrometer_schema"]
    if type(version) is not int or version < 1:
        raise ProfileError(f"{path} is not a pyrometer profile (pyrometer_schema is {_shown(version)})")
    if version > SCHEMA_VERSION:
        raise ProfileError(f"{path} was written by a newer pyrometer (profile schema {_shown(version)}; this one "
                           f"reads schema {SCHEMA_VERSION}): upgrade pyrometer to view it")
    where = f"{path} is damaged: "
    memory = profile.get("memory") is True
    _check_fields(profile, _TOP_WITH_MEMORY if memory else _TOP_CPU_ONLY, where)
    # Paused time is part of the run's wall time (the clocks differ: a little slack).
    if profile["paused_sec"] > profile["elapsed_time_sec"] * 1.01 + 0.01:
        raise ProfileError(f"{where}paused_sec ({profile['paused_sec']:g}) is more than the run's "
                           f"elapsed_time_sec ({profile['elapsed_time_sec']:g})")
    if memory:
        _check_scalene_footprint_names(profile, where)
    source = profile.get("gpu_utilization_source")
    if source is not None and source not in ("device", "process"):
        raise ProfileError(f"{where}gpu_utilization_source is {_shown(source)}: it must be \"device\" or \"process\"")
    if "call_stacks" in profile:
        _check_paths(profile["call_stacks"], where)
    tier = profile.get("gpu_kernel_tier")
    if tier is not None and tier not in ("off", "on", "absent", "busy", "failed"):
        raise ProfileError(f"{where}gpu_kernel_tier is {_shown(tier)}: it must be one of off, on, absent, busy, "
                           "failed")
    file_kind = _FILE_WITH_MEMORY if memory else _FILE_CPU_ONLY
    for name, f in profile["files"].items():
        _check_value(f, file_kind, f"{where}files[{_shown_name(name)}]")
    from .verdict import BOUNDS, decide
    verdict = profile.get("verdict")
    if verdict is None:
        # An older pyrometer's profile: the verdict from the figures it has.  Its
        # lines are those the profile kept (with @profile, only the decorated
        # functions'; with --reduced-profile, the significant ones).
        made = decide(profile, ((name, e) for name, f in profile["files"].items() for e in f["lines"]))
        try:
            _check_value(made, _VERDICT, "verdict")
        except ProfileError:
            # Each figure is finite, but their sums or ratios are not.
            raise ProfileError(f"{where}its times and volumes are too large to add up (a verdict made from "
                               "them is not finite)") from None
        profile["verdict"] = made
    else:
        for name in ("bound", "own_bound"):
            if verdict.get(name, "none") not in BOUNDS:
                raise ProfileError(f"{where}verdict.{name} is {_shown(verdict[name])}: it must be one of "
                                   + ", ".join(BOUNDS))
    return profile
