"""pyrometer's own objects kept out of the program's garbage collections.

The command imports about 50 modules the program would not have and makes its
session before the program's first line: about 2,400 objects the collector
tracks, 22% more than an empty program has (CPython 3.11), which every full
collection of the program's would visit (pyperformance's gc_collect read
1.10-1.15x for that alone).  mark() freezes what the interpreter made before
pyrometer (gc.freeze()); set_aside(), just before the program's first line,
puts pyrometer's objects in the permanent generation and the interpreter's
back where the program's collections visit them (csrc/cpython/gc_aside.c says
how).  A run that never reaches the program gives the frozen objects back
(release()).

Only the command does this, when nothing was frozen before it: a program
profiled from inside (pyrometer.start(), the pytest plugin, a notebook) made
its objects before pyrometer's and keeps its collector as it is."""

from __future__ import annotations

import gc

_marked = False


def mark(frozen_by_caller: bool = False) -> None:
    """Where pyrometer's own objects start: call before importing them.
    frozen_by_caller: the caller did the gc.freeze() itself, before it could
    import this module (a child's bootstrap, which reads where pyrometer is
    with json first)."""
    global _marked
    if frozen_by_caller:
        _marked = True
    elif not _marked and gc.get_freeze_count() == 0:
        gc.freeze()
        _marked = True


def set_aside() -> int:
    """Pyrometer's objects made since mark() out of the collections, the
    interpreter's back in them; how many were set aside (0 without a mark)."""
    global _marked
    if not _marked:
        return 0
    _marked = False
    from .. import _core
    if not hasattr(_core, "gc_set_aside"):  # the extension of an unsupported CPython
        gc.unfreeze()
        return 0
    return _core.gc_set_aside()


def release() -> None:
    """The mark undone, where the program never ran."""
    global _marked
    if _marked:
        _marked = False
        gc.unfreeze()
