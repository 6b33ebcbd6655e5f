"""Profiling a region of a program run under pyrometer: start(), stop() and
profiling(), as a context manager or a decorator.

The rule, kept by the measuring core (csrc/control/control.h) so that commands
from outside (``pyrometer --off/--on --pid N``) follow the same one:

* a count decides: the program is profiled while it is above zero;
* a run starts with 1 (profiled from its first line), or with 0 under ``--off``;
* start() adds one, stop() takes one away, never below zero: nested and
  repeated calls are counted, never an error.  So under ``--off`` only what runs
  inside ``with pyrometer.profiling():`` (or between start() and stop()) is
  profiled, and without it stop() pauses and start() resumes;
* ``pyrometer --off --pid N`` holds the program paused whatever its count says;
  ``pyrometer --on --pid N`` lifts the hold and raises a count of 0 to 1.

The count belongs to the process: a child started by fork has its parent's,
one started by exec begins as the run did (and paused, if paused from outside).

Outside pyrometer (the program run by plain ``python``) these do nothing and
return None: a program can keep its regions marked whether or not it is being
profiled.
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["start", "stop", "profiling"]


def _core():
    """The measuring core when this process is profiled by pyrometer, else None.
    Looked up, never imported: a program that is not profiled must not load it."""
    core = sys.modules.get("pyrometer._core")
    if core is None or not hasattr(core, "control_count") or not core.running():
        return None
    return core


def start() -> int | None:
    """Profile from here (count up); the new count, or None outside pyrometer."""
    core = _core()
    return core.control_count(True) if core is not None else None


def stop() -> int | None:
    """Stop profiling from here (count down, never below 0); the new count, or
    None outside pyrometer."""
    core = _core()
    return core.control_count(False) if core is not None else None


class profiling(contextlib.ContextDecorator):
    """``with pyrometer.profiling(): ...`` or ``@pyrometer.profiling()``: start()
    on the way in, stop() on the way out, exceptions included."""

    def __enter__(self) -> "profiling":
        start()
        return self

    def __exit__(self, *exc) -> bool:
        stop()
        return False
