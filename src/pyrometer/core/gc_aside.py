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

import gc

# Where the measuring core cannot do it (a CPython it does not support, whose
# _core refuses to load, and which the command then refuses itself): the mark
# only where nothing is frozen, by gc.freeze() alone.
_plain_marked = False


def _core_module():
    try:
        from .. import _core
    except ImportError:
        return None
    return _core if hasattr(_core, "gc_mark") else None


def mark() -> None:
    """Where pyrometer's own objects start: call before importing them."""
    global _plain_marked
    core = _core_module()
    if core is not None:
        core.gc_mark()
    elif not _plain_marked and gc.get_freeze_count() == 0:
        gc.freeze()
        _plain_marked = True


def set_aside() -> int:
    """Pyrometer's objects made since mark() out of the collections, the
    interpreter's back in them; how many objects are frozen now (0 without a
    mark)."""
    core = _core_module()
    if core is not None:
        return core.gc_set_aside()
    release()
    return 0


def release() -> None:
    """The mark undone, where the program never ran."""
    global _plain_marked
    core = _core_module()
    if core is not None:
        core.gc_release()
    elif _plain_marked:
        _plain_marked = False
        gc.unfreeze()
