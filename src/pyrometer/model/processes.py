"""A profile's process table: each row made here, with the fields and
defaults the schema gives a process (schema.py, PROCESS), for every process a
run saw: this one, a child that wrote its profile (run/children.py), one
whose profile could not be merged, and one started but never profiled."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from .schema import PROCESS, REQUIRED

MB = 1048576.0


def row(**fields: Any) -> dict[str, Any]:
    """A process's row: the fields given, the schema's defaults for the rest;
    TypeError for a field the schema has not, or a required one left out."""
    unknown = set(fields) - set(PROCESS.fields)
    if unknown:
        raise TypeError(f"not a process's field: {', '.join(sorted(unknown))}")
    out = {}
    for name, (_, default) in PROCESS.fields.items():
        if name in fields:
            out[name] = fields[name]
        elif default is REQUIRED:
            raise TypeError(f"a process's row needs its {name}")
        else:
            out[name] = list(default) if isinstance(default, list) else default
    return out


def measured(raw: dict[str, Any], wall_sec: float) -> dict[str, Any]:
    """The figures of this process's row that its own collection gives."""
    memory = raw.get("memory")
    return {"wall_sec": wall_sec, "paused_sec": raw.get("paused_ns", 0) * 1e-9,
            "cpu_sec": raw["process_cpu_ns"] * 1e-9,
            "peak_mb": max(memory["max_footprint_bytes"], 0) / MB if memory else None}


def this_process(raw: dict[str, Any], wall_sec: float, started_by: str, **fields: Any) -> dict[str, Any]:
    """This process's row, from its collection (raw) and wall time."""
    return row(pid=os.getpid(), ppid=os.getppid(), command=list(getattr(sys, "orig_argv", sys.argv)),
               started_by=started_by, profiled=True, **measured(raw, wall_sec), **fields)
