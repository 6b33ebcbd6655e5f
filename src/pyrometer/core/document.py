"""The raw profile as it travels: what one process measured (`_core.collect`,
with @profile's functions added by focus.py), in the one form every transport
carries, in process, in a periodic report (marshal), in a child's file (JSON)
and in a merge of them.  One writer, `plain`, and one reader, `named`.

In process the records the core hands over are named records, tuples with
a name for each field (csrc/records.c's tables): `_core.CpuLine` for each
line's place and its `_core.CpuSums`, `_core.StackNode` for each call
stack's node (its parent, its frame and its CpuSums), a CpuSums for the
unattributed time, `_core.MemoryStackSums` for each call stack's bytes,
`_core.GpuLine` for each line's place and its `_core.GpuLineSums`.  The
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
# read it wrongly (2: lines and stack nodes named records too).
FORMAT = 2


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


def cpu_line(filename: str, lineno: int, qualname: str, first_lineno: int, cpu: Any) -> Any:
    """A CpuLine record: a line's place and its CpuSums."""
    from .. import _core
    return _core.CpuLine((filename, lineno, qualname, first_lineno, cpu))


def gpu_line(filename: str, lineno: int, qualname: str, first_lineno: int, gpu: Any) -> Any:
    """A GpuLine record: a line's place and its GpuLineSums."""
    from .. import _core
    return _core.GpuLine((filename, lineno, qualname, first_lineno, gpu))


def stack_node(parent: int, frame: int, cpu: Any) -> Any:
    """A StackNode record (parent and frame -1: the root; cpu None: nothing
    charged there)."""
    from .. import _core
    return _core.StackNode((parent, frame, cpu))


def add(a: Any, b: Any, largest: tuple[str, ...] = ()) -> Any:
    """Two records of one kind added field by field; the fields named in
    largest take the larger of the two (a peak)."""
    return type(a)([max(x, y) if name in largest else x + y
                    for name, x, y in zip(a.__match_args__, a, b, strict=True)])


def _convert(raw: dict[str, Any], make: dict[str, Any]) -> dict[str, Any]:
    """raw with every record made by the function for its kind (make: the
    record types' names in _core -> a function of a sequence), records inside
    records first (a shallow copy; the parts it changes are new)."""
    def cpu(sums):
        return make["CpuSums"](sums)

    out = dict(raw)
    out["records"] = [make["CpuLine"]((*place, cpu(sums))) for *place, sums in raw["records"]]
    out["unattributed"] = cpu(raw["unattributed"])
    stacks = raw.get("stacks")
    if stacks:
        out["stacks"] = dict(stacks, nodes=[make["StackNode"]((parent, frame, None if sums is None else cpu(sums)))
                                            for parent, frame, sums in stacks["nodes"]],
                             other=cpu(stacks["other"]))
    memory = raw.get("memory")
    if memory and "stacks" in memory:
        memory_stack = make["MemoryStackSums"]
        out["memory"] = dict(memory, stacks=[(stack_id, memory_stack(sums)) for stack_id, sums in memory["stacks"]],
                             other_stacks=memory_stack(memory["other_stacks"]))
    gpu = raw.get("gpu")
    if gpu and gpu.get("lines"):
        out["gpu"] = dict(gpu, lines=[make["GpuLine"]((*place, make["GpuLineSums"](sums)))
                                      for *place, sums in gpu["lines"]])
    return out


# What each kind of record is called in a document's header: its fields' names.
_KINDS = (("cpu_sums", "CpuSums"), ("memory_stack_sums", "MemoryStackSums"), ("gpu_line_sums", "GpuLineSums"),
          ("cpu_line", "CpuLine"), ("gpu_line", "GpuLine"), ("stack_node", "StackNode"))


def plain(raw: dict[str, Any]) -> dict[str, Any]:
    """The document of an in-process collection: what marshal and JSON carry."""
    from .. import _core
    out = _convert(raw, {kind: tuple for _, kind in _KINDS})
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
        return _convert(doc, {kind: getattr(_core, kind) for _, kind in _KINDS})
    if not isinstance(doc["unattributed"], _core.CpuSums):
        raise ValueError("a raw profile without its document header")
    return doc  # a collection in process: its records are named already
