"""Call stacks: the C core's stack table (csrc/profile/stacks.h) as the profile's
`call_stacks` field (docs/profile-schema.md), and the sums of several processes'
stacks (children.Merger).

The C core gives its stacks by id ("nodes": _core.StackNode records, a
parent id, a frame index and CPU sums, each at its id),
and the memory and GPU sides theirs by the same ids.  Here a stack is its path
of frames, each frame its four keys (FrameKey), so that processes' stacks add up
whatever their ids, and its sums are named as the core's records name them
(_Sums).
"""

from __future__ import annotations

from collections import namedtuple  # not typing.NamedTuple: see TYPE_CHECKING

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..core import document

NS = 1e-9
# The C core's id of the bucket of stacks past the cap (STACK_TABLE_OTHER).
OTHER_ID = (1 << 32) - 1

# A stack's figures in the profile, each with the field of the core's record
# it sums: its kinds of time from _core.CpuSums (ns), its bytes from
# _core.MemoryStackSums (churn out: _Sums.add_memory).  Its samples are
# CpuSums's samples, its gpu_sec the GPU side's busy time.
_TIMES = {"python_sec": "python_ns", "native_sec": "native_ns", "system_sec": "system_ns",
          "gil_wait_sec": "gil_wait_ns", "cpu_wait_sec": "cpu_wait_ns"}
_BYTES = {"malloc_bytes": "alloc_bytes", "python_malloc_bytes": "python_bytes", "free_bytes": "free_bytes",
          "copy_bytes": "copy_bytes"}
TIME_FIGURES = tuple(_TIMES)
MEMORY_FIGURES = tuple(_BYTES)
_CPU_FIELDS = (*_TIMES.values(), "samples")  # what a stack keeps of a CpuSums

# A frame's keys: the core's (filename, qualname, first line, line), named as
# the profile's frames name them.
FrameKey = namedtuple("FrameKey", ("filename", "function", "first_lineno", "lineno"))


def _frame_key(frame) -> FrameKey:
    """A frame as the core gives it (a tuple; a list from a child's JSON), its
    keys of one type whatever carried them, so that equal frames are one key."""
    f = FrameKey._make(frame)
    return FrameKey(str(f.filename), str(f.function), int(f.first_lineno), int(f.lineno))


class _Sums:
    """One stack's sums (or the bucket's of the stacks past the cap), each
    under the name of the core's field it sums, and the GPU's busy time."""

    __slots__ = (*_CPU_FIELDS, *_BYTES.values(), "gpu_busy_ns")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in self.__slots__)

    def add(self, more: Any, names: tuple[str, ...] = __slots__) -> None:
        """more's figures of these names added (another _Sums's, by default
        all of them; a CpuSums's: _CPU_FIELDS)."""
        for name in names:
            setattr(self, name, getattr(self, name) + getattr(more, name))

    def add_memory(self, sums: Any) -> None:
        """A _core.MemoryStackSums added without churn, as the lines' figures
        (model._Memory): churn out of the allocated, Python's and freed bytes.
        A record written back by to_raw has none left."""
        churn = sums.churn_bytes
        self.alloc_bytes += sums.alloc_bytes - churn
        self.python_bytes += sums.python_bytes - churn
        self.free_bytes += sums.free_bytes - churn
        self.copy_bytes += sums.copy_bytes

    def cpu_sums(self) -> Any:
        """As a record's CPU sums (_core.CpuSums)."""
        return document.cpu_sums(**{name: getattr(self, name) for name in _CPU_FIELDS})

    def memory_sums(self) -> Any:
        """As a stack's memory sums (_core.MemoryStackSums), churn out already."""
        return document.memory_stack_sums(**{field: getattr(self, field) for field in _BYTES.values()})

    def figures(self, memory: bool, gpu: bool) -> dict[str, Any]:
        """As a stack's figures in the profile."""
        out: dict[str, Any] = {figure: getattr(self, field) * NS for figure, field in _TIMES.items()}
        out["samples"] = int(self.samples)
        if memory:
            out.update((figure, int(getattr(self, field))) for figure, field in _BYTES.items())
        if gpu:
            out["gpu_sec"] = self.gpu_busy_ns * NS
        return out


class StackSums:
    """Stacks keyed by their paths of frame keys, with their summed figures."""

    def __init__(self) -> None:
        self.frames: dict[FrameKey, int] = {}
        self.frame_keys: list[FrameKey] = []
        self.stacks: dict[tuple, _Sums] = {}
        self.other = _Sums()
        self.cap = 0
        self.max_depth = 0
        self.present = False

    def _frame(self, frame) -> int:
        key = _frame_key(frame)
        index = self.frames.get(key)
        if index is None:
            index = self.frames[key] = len(self.frame_keys)
            self.frame_keys.append(key)
        return index

    def _sums(self, path: tuple) -> _Sums:
        sums = self.stacks.get(path)
        if sums is None:
            sums = self.stacks[path] = _Sums()
        return sums

    def add_raw(self, raw: dict[str, Any]) -> None:
        """One process's collection (or a merged one, in the same form)."""
        table = raw.get("stacks")
        if not table:
            return
        self.present = True
        self.cap = max(self.cap, int(table["cap"]))
        self.max_depth = max(self.max_depth, int(table["max_depth"]))
        paths = self._add_nodes(table)
        self.other.add(table["other"], _CPU_FIELDS)
        self._add_by_id(raw, paths)

    def _add_nodes(self, table: dict[str, Any]) -> list[tuple]:
        """The CPU sums of the table's nodes added at their paths; each node's
        path, at its id."""
        frame_index = [self._frame(f) for f in table["frames"]]
        paths: list[tuple] = []
        for node in table["nodes"]:
            path = () if node.parent < 0 else paths[node.parent] + (frame_index[node.frame],)
            paths.append(path)
            if node.cpu is not None:
                self._sums(path).add(node.cpu, _CPU_FIELDS)
        return paths

    def _add_by_id(self, raw: dict[str, Any], paths: list[tuple]) -> None:
        """The memory and GPU sides' sums, given by the stacks' ids (paths:
        each id's path)."""
        def by_id(stack_id: int) -> _Sums:
            return self.other if stack_id >= OTHER_ID else self._sums(paths[stack_id])

        memory = raw.get("memory")
        if memory and "stacks" in memory:
            for stack_id, sums in memory["stacks"]:
                by_id(stack_id).add_memory(sums)
            self.other.add_memory(memory["other_stacks"])
        gpu = raw.get("gpu")
        if gpu and gpu.get("status") == "ok":
            for stack_id, busy in gpu.get("stacks", []):
                by_id(stack_id).gpu_busy_ns += busy

    def merge(self, other: StackSums) -> None:
        """Another process's stacks added (frames re-interned by their keys)."""
        if not other.present:
            return
        self.present = True
        self.cap = max(self.cap, other.cap)
        self.max_depth = max(self.max_depth, other.max_depth)
        index = [self._frame(key) for key in other.frame_keys]
        for path, sums in other.stacks.items():
            self._sums(tuple(index[i] for i in path)).add(sums)
        self.other.add(other.other)

    def _tree(self) -> tuple[dict[tuple, int], list[tuple[int, int]]]:
        """New ids for the stacks and their prefixes, a parent's before its
        children's (the root's 0): each path's id, and each id's parent id and
        frame index."""
        ids: dict[tuple, int] = {(): 0}
        places: list[tuple[int, int]] = [(-1, -1)]
        for path in sorted(self.stacks, key=len):
            for depth in range(1, len(path) + 1):
                prefix = path[:depth]
                if prefix not in ids:
                    ids[prefix] = len(places)
                    places.append((ids[prefix[:-1]], prefix[-1]))
        return ids, places

    def to_raw(self, raw: dict[str, Any]) -> None:
        """Written back into raw in the C core's form (ids are new), so that
        model.build reads one form, merged or not."""
        if not self.present:
            return
        ids, places = self._tree()
        cpu: list = [None] * len(places)
        memory_stacks, gpu_stacks = [], []
        for path, sums in self.stacks.items():
            stack_id = ids[path]
            cpu[stack_id] = sums.cpu_sums()
            memory_stacks.append((stack_id, sums.memory_sums()))
            gpu_stacks.append((stack_id, sums.gpu_busy_ns))
        nodes = [document.stack_node(parent, frame, sums) for (parent, frame), sums in zip(places, cpu)]
        raw["stacks"] = {"frames": [tuple(key) for key in self.frame_keys], "nodes": nodes,
                         "other": self.other.cpu_sums(), "cap": self.cap, "max_depth": self.max_depth}
        if raw.get("memory"):
            raw["memory"] = dict(raw["memory"], stacks=memory_stacks, other_stacks=self.other.memory_sums())
        if raw.get("gpu") and raw["gpu"].get("status") == "ok":
            raw["gpu"] = dict(raw["gpu"], stacks=gpu_stacks + [(OTHER_ID, self.other.gpu_busy_ns)])

    def fields(self, memory: bool, gpu: bool) -> dict[str, Any]:
        """The profile's call_stacks field: the stacks charged anything, their
        frames numbered in the order the stacks, sorted, first use them."""
        used: dict[int, int] = {}
        stacks = []
        for path in sorted(self.stacks):
            sums = self.stacks[path]
            if sums:
                stacks.append({"path": [used.setdefault(i, len(used)) for i in path], **sums.figures(memory, gpu)})
        frames: list = [None] * len(used)
        for i, j in used.items():
            frames[j] = self.frame_keys[i]._asdict()
        return {"frames": frames, "stacks": stacks, "other": self.other.figures(memory, gpu),
                "cap": self.cap, "max_depth": self.max_depth}


def call_stacks(raw: dict[str, Any], memory: bool, gpu: bool) -> dict[str, Any] | None:
    """The call_stacks field of a collection (None: the core kept no stacks)."""
    sums = StackSums()
    sums.add_raw(raw)
    return sums.fields(memory, gpu) if sums.present else None
