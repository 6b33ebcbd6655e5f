"""pyrometer's own objects kept out of the program's garbage collections.

The command imports about 50 modules the program would not have and makes its
session before the program's first line: about 2,400 objects the collector
tracks, 22% more than an empty program has (CPython 3.11), which every full
collection of the program's would visit (pyperformance's gc_collect read
1.10-1.15x for that alone).  mark() freezes what the interpreter made before
pyrometer (gc.freeze(); what was frozen before, as 3.12's 375 start-up
objects, is held aside and stays frozen); set_aside(), just before the
program's first line, puts pyrometer's objects in the permanent generation and
the interpreter's back where the program's collections visit them
(csrc/cpython/gc_aside.c says how).  A run that never reaches the program
gives the frozen objects back (release()).

Only the command and the children it profiles do this: a program profiled from
inside (pyrometer.start(), the pytest plugin, a notebook) made its objects
before pyrometer's and keeps its collector as it is."""

from __future__ import annotations

def _core_module():
    """The measuring core, where it loads and can (on a CPython it does not
    support it refuses to, and the command then refuses the run: nothing to
    set aside)."""
    try:
        from .. import _core
    except ImportError:
        return None
    return _core if hasattr(_core, "gc_mark") else None


def mark() -> None:
    """Where pyrometer's own objects start: call before importing them."""
    core = _core_module()
    if core is not None:
        core.gc_mark()


def set_aside() -> None:
    """Pyrometer's objects made since mark() out of the collections, the
    interpreter's back in them (nothing without a mark)."""
    core = _core_module()
    if core is not None:
        core.gc_set_aside()


def release() -> None:
    """The mark undone, where the program never ran."""
    core = _core_module()
    if core is not None:
        core.gc_release()
