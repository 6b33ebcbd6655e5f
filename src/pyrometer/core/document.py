"""The raw profile as it travels: what one process measured (`_core.collect`,
with @profile's functions added by focus.py), in the one form every transport
carries, in process, in a periodic report (marshal), in a child's file (JSON)
and in a merge of them.  One writer, `plain`, and one reader, `named`.

In process the sums the core hands over are named records, tuples with a
name for each field (csrc/records.c's tables): `_core.CpuSums` for each
line, stack node and the unattributed time, `_core.MemoryStackSums` for each
call stack's bytes, `_core.GpuLineSums` for each line's GPU figures.  The
model, the merge and the call stacks read them by those names only.  marshal
cannot carry such a record and JSON makes it a list, so a document carries
them as plain tuples, with the field names it was written with and its
format number; `named` makes them records again and refuses a document of
another format or other fields (a child run by another pyrometer) rather
than read a figure as another."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

# The layout of a document; one more whenever a reader of the old one would
# read it wrongly.
FORMAT = 1


def _record(kind: str, figures: dict[str, float]) -> Any:
    """A named record of the core's (its type's name in _core) from figures
    named as its fields (the rest 0); TypeError for a name it has not."""
    from .. import _core
    record = getattr(_core, kind)
    unknown = set(figures) - set(record.__match_args__)
    if unknown:
        raise TypeError(f"not fields of {kind}: {', '.join(sorted(unknown))}")
    return record([figures.get(name, 0) for name in record.__match_args__])


def cpu_sums(**figures: float) -> Any:
    """A CpuSums record (a line's, a stack's, the unattributed time's)."""
    return _record("CpuSums", figures)


def memory_stack_sums(**figures: float) -> Any:
    """A MemoryStackSums record (a call stack's bytes)."""
    return _record("MemoryStackSums", figures)


def add(a: Any, b: Any, largest: tuple[str, ...] = ()) -> Any:
    """Two records of one kind added field by field; the fields named in
    largest take the larger of the two (a peak)."""
    return type(a)([max(x, y) if name in largest else x + y
                    for name, x, y in zip(a.__match_args__, a, b, strict=True)])


def _convert(raw: dict[str, Any], cpu, memory_stack, gpu_line) -> dict[str, Any]:
    """raw with every named record made by the function for its kind (a
    shallow copy; the parts it changes are new)."""
    out = dict(raw)
    out["records"] = [(filename, lineno, qualname, first, cpu(sums))
                      for filename, lineno, qualname, first, sums in raw["records"]]
    out["unattributed"] = cpu(raw["unattributed"])
    stacks = raw.get("stacks")
    if stacks:
        out["stacks"] = dict(stacks, nodes=[(parent, frame, None if sums is None else cpu(sums))
                                            for parent, frame, sums in stacks["nodes"]],
                             other=cpu(stacks["other"]))
    memory = raw.get("memory")
    if memory and "stacks" in memory:
        out["memory"] = dict(memory, stacks=[(stack_id, memory_stack(sums)) for stack_id, sums in memory["stacks"]],
                             other_stacks=memory_stack(memory["other_stacks"]))
    gpu = raw.get("gpu")
    if gpu and gpu.get("lines"):
        out["gpu"] = dict(gpu, lines=[(filename, lineno, qualname, first, gpu_line(sums))
                                      for filename, lineno, qualname, first, sums in gpu["lines"]])
    return out


# What each kind of record is called in a document's header: its fields' names.
_KINDS = (("cpu_sums", "CpuSums"), ("memory_stack_sums", "MemoryStackSums"), ("gpu_line_sums", "GpuLineSums"))


def plain(raw: dict[str, Any]) -> dict[str, Any]:
    """The document of an in-process collection: what marshal and JSON carry."""
    from .. import _core
    out = _convert(raw, tuple, tuple, tuple)
    out["document"] = {"format": FORMAT,
                       **{key: list(getattr(_core, kind).__match_args__) for key, kind in _KINDS}}
    return out


def named(doc: dict[str, Any]) -> dict[str, Any]:
    """A collection from a document (`plain`'s, read back by marshal or JSON,
    or one already in process); ValueError when it was written in another
    format or with other fields."""
    from .. import _core
    header = doc.get("document")
    if header is not None:
        if header.get("format") != FORMAT or any(tuple(header.get(key, ())) != getattr(_core, kind).__match_args__
                                                 for key, kind in _KINDS):
            raise ValueError(f"a raw profile of another layout ({header!r}; this pyrometer writes format "
                             f"{FORMAT})")
        doc = {k: v for k, v in doc.items() if k != "document"}
        return _convert(doc, _core.CpuSums, _core.MemoryStackSums, _core.GpuLineSums)
    if not isinstance(doc["unattributed"], _core.CpuSums):
        raise ValueError("a raw profile without its document header")
    return doc  # a collection in process: its records are named already
