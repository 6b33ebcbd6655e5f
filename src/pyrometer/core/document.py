"""The raw profile as it travels: what one process measured (`_core.collect`,
with @profile's functions added by focus.py), in the one form every transport
carries, in process, in a periodic report (marshal), in a child's file (JSON)
and in a merge of them.  One writer, `plain`, and one reader, `named`.

In process the CPU sums of each line, stack node and of the unattributed time
are `_core.CpuSums` records: a tuple with a name for each field
(`_core.CPU_SUMS`, csrc/records.c's table), which the model, the merge and the
call stacks read by those names only.  marshal cannot carry such a record
and JSON makes it a list, so a document carries them as plain tuples, with
the field names it was written with and its format number; `named` makes
them records again and refuses a document of another format or other
fields (a child run by another pyrometer) rather than read a figure as
another."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

# The layout of a document; one more whenever a reader of the old one would
# read it wrongly.
FORMAT = 1


def cpu_sums(**figures: float) -> Any:
    """A CpuSums record from figures named as its fields (the rest 0)."""
    from .. import _core
    unknown = set(figures) - set(_core.CPU_SUMS)
    if unknown:
        raise TypeError(f"not CPU sums: {', '.join(sorted(unknown))}")
    return _core.CpuSums([figures.get(name, 0) for name in _core.CPU_SUMS])


def add_cpu_sums(a: Any, b: Any) -> Any:
    """Two records' sums added, field by field."""
    from .. import _core
    return _core.CpuSums([x + y for x, y in zip(a, b, strict=True)])


def _convert(raw: dict[str, Any], make) -> dict[str, Any]:
    """raw with every CPU sums record made by make (a shallow copy; the
    parts it changes are new)."""
    out = dict(raw)
    out["records"] = [(filename, lineno, qualname, first, make(cpu))
                      for filename, lineno, qualname, first, cpu in raw["records"]]
    out["unattributed"] = make(raw["unattributed"])
    stacks = raw.get("stacks")
    if stacks:
        out["stacks"] = dict(stacks, nodes=[(parent, frame, None if cpu is None else make(cpu))
                                            for parent, frame, cpu in stacks["nodes"]],
                             other=make(stacks["other"]))
    return out


def plain(raw: dict[str, Any]) -> dict[str, Any]:
    """The document of an in-process collection: what marshal and JSON carry."""
    from .. import _core
    out = _convert(raw, tuple)
    out["document"] = {"format": FORMAT, "cpu_sums": list(_core.CPU_SUMS)}
    return out


def named(doc: dict[str, Any]) -> dict[str, Any]:
    """A collection from a document (`plain`'s, read back by marshal or JSON,
    or one already in process); ValueError when it was written in another
    format or with other fields."""
    from .. import _core
    header = doc.get("document")
    if header is not None:
        if header.get("format") != FORMAT or tuple(header.get("cpu_sums", ())) != _core.CPU_SUMS:
            raise ValueError(f"a raw profile of another layout ({header!r}; this pyrometer writes format "
                             f"{FORMAT} with {len(_core.CPU_SUMS)} CPU sums)")
        doc = {k: v for k, v in doc.items() if k != "document"}
    elif doc["records"] and not isinstance(doc["records"][0][4], _core.CpuSums):
        raise ValueError("a raw profile without its document header")
    return _convert(doc, _core.CpuSums)
