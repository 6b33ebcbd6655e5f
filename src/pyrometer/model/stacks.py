"""Call stacks: the C core's stack table (csrc/profile/stacks.h) as the profile's
`call_stacks` field (docs/profile-schema.md), and the sums of several processes'
stacks (children.Merger).

The C core gives its stacks by id ("nodes": _core.StackNode records, a
parent id, a frame index and CPU sums, each at its id),
and the memory and GPU sides theirs by the same ids.  Here a stack is its path
of frames, each frame its four keys (file, function, first line, line), so that
processes' stacks add up whatever their ids.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..core import document

NS = 1e-9
# The C core's id of the bucket of stacks past the cap (STACK_TABLE_OTHER).
OTHER_ID = (1 << 32) - 1

# One stack's figures, in the order of a sums vector.
TIME_FIGURES = ("python_sec", "native_sec", "system_sec", "gil_wait_sec", "cpu_wait_sec")
MEMORY_FIGURES = ("malloc_bytes", "python_malloc_bytes", "free_bytes", "copy_bytes")
_SAMPLES, _MEMORY, _GPU = 5, 6, 10
_WIDTH = 11


def _without_churn(sums) -> tuple:
    """A stack's memory sums (_core.MemoryStackSums) as the memory part of a
    sums vector (MEMORY_FIGURES): churn out of the allocated, Python and freed
    bytes.  A record written back by to_raw has no churn left in it."""
    churn = sums.churn_bytes
    return sums.alloc_bytes - churn, sums.python_bytes - churn, sums.free_bytes - churn, sums.copy_bytes


def _cpu_vector(cpu) -> list[float]:
    """A record's CPU sums (_core.CpuSums) as a sums vector."""
    return [cpu.python_ns, cpu.native_ns, cpu.system_ns, cpu.gil_wait_ns, cpu.cpu_wait_ns, cpu.samples,
            0, 0, 0, 0, 0.0]


class StackSums:
    """Stacks keyed by their paths of frame keys, with their summed figures."""

    def __init__(self) -> None:
        self.frames: dict[tuple, int] = {}
        self.frame_keys: list[tuple] = []
        self.stacks: dict[tuple, list] = {}
        self.other = [0] * _WIDTH
        self.cap = 0
        self.max_depth = 0
        self.present = False

    def _frame(self, key) -> int:
        key = (str(key[0]), str(key[1]), int(key[2]), int(key[3]))
        index = self.frames.get(key)
        if index is None:
            index = self.frames[key] = len(self.frame_keys)
            self.frame_keys.append(key)
        return index

    def _sums(self, path: tuple) -> list:
        sums = self.stacks.get(path)
        if sums is None:
            sums = self.stacks[path] = [0] * _WIDTH
        return sums

    def add_raw(self, raw: dict[str, Any]) -> None:
        """One process's collection (or a merged one, in the same form)."""
        table = raw.get("stacks")
        if not table:
            return
        self.present = True
        self.cap = max(self.cap, int(table["cap"]))
        self.max_depth = max(self.max_depth, int(table["max_depth"]))
        frame_index = [self._frame(f) for f in table["frames"]]
        paths: list[tuple] = []
        for node in table["nodes"]:
            path = () if node.parent < 0 else paths[node.parent] + (frame_index[node.frame],)
            paths.append(path)
            if node.cpu is not None:
                _add(self._sums(path), _cpu_vector(node.cpu))
        _add(self.other, _cpu_vector(table["other"]))

        def by_id(stack_id: int) -> list:
            return self.other if stack_id >= OTHER_ID else self._sums(paths[stack_id])

        memory = raw.get("memory")
        if memory and "stacks" in memory:
            # Without churn, as the lines' figures (model._Memory); a child's
            # record written back by to_raw has none left.
            for stack_id, figures in memory["stacks"]:
                sums = by_id(stack_id)
                for i, v in enumerate(_without_churn(figures)):
                    sums[_MEMORY + i] += v
            for i, v in enumerate(_without_churn(memory["other_stacks"])):
                self.other[_MEMORY + i] += v
        gpu = raw.get("gpu")
        if gpu and gpu.get("status") == "ok":
            for stack_id, busy in gpu.get("stacks", []):
                by_id(stack_id)[_GPU] += busy

    def merge(self, other: "StackSums") -> None:
        """Another process's stacks added (frames re-interned by their keys)."""
        if not other.present:
            return
        self.present = True
        self.cap = max(self.cap, other.cap)
        self.max_depth = max(self.max_depth, other.max_depth)
        index = [self._frame(key) for key in other.frame_keys]
        for path, sums in other.stacks.items():
            _add(self._sums(tuple(index[i] for i in path)), sums)
        _add(self.other, other.other)

    def to_raw(self, raw: dict[str, Any]) -> None:
        """Written back into raw in the C core's form (ids are new), so that
        model.build reads one form, merged or not."""
        if not self.present:
            return
        ids: dict[tuple, int] = {(): 0}
        places: list[tuple[int, int]] = [(-1, -1)]  # each node's parent and frame
        for path in sorted(self.stacks, key=len):
            for depth in range(1, len(path) + 1):
                prefix = path[:depth]
                if prefix not in ids:
                    ids[prefix] = len(places)
                    places.append((ids[prefix[:-1]], prefix[-1]))
        cpu: list = [None] * len(places)
        memory_stacks, gpu_stacks = [], []
        for path, sums in self.stacks.items():
            stack_id = ids[path]
            cpu[stack_id] = _cpu_sums(sums)
            memory_stacks.append((stack_id, _memory_sums(sums)))
            gpu_stacks.append((stack_id, sums[_GPU]))
        nodes = [document.stack_node(parent, frame, sums) for (parent, frame), sums in zip(places, cpu)]
        raw["stacks"] = {"frames": list(self.frame_keys), "nodes": nodes, "other": _cpu_sums(self.other),
                         "cap": self.cap, "max_depth": self.max_depth}
        if raw.get("memory"):
            raw["memory"] = dict(raw["memory"], stacks=memory_stacks, other_stacks=_memory_sums(self.other))
        if raw.get("gpu") and raw["gpu"].get("status") == "ok":
            raw["gpu"] = dict(raw["gpu"], stacks=gpu_stacks + [(OTHER_ID, self.other[_GPU])])

    def fields(self, memory: bool, gpu: bool) -> dict[str, Any]:
        """The profile's call_stacks field."""
        used: dict[int, int] = {}
        stacks = []
        for path in sorted(self.stacks):
            sums = self.stacks[path]
            if not any(sums):
                continue
            entry = {"path": [used.setdefault(i, len(used)) for i in path]}
            entry.update(_figures(sums, memory, gpu))
            stacks.append(entry)
        frames = [None] * len(used)
        for i, j in used.items():
            filename, function, first, lineno = self.frame_keys[i]
            frames[j] = {"filename": filename, "function": function, "first_lineno": first, "lineno": lineno}
        return {"frames": frames, "stacks": stacks, "other": _figures(self.other, memory, gpu),
                "cap": self.cap, "max_depth": self.max_depth}


def _add(into: list, more: list) -> None:
    for i, v in enumerate(more):
        into[i] += v


def _memory_sums(sums: list):
    """A sums vector's memory part as a stack's memory sums (_core.MemoryStackSums),
    churn taken out already."""
    alloc, python, freed, copied = sums[_MEMORY:_GPU]
    return document.memory_stack_sums(alloc_bytes=alloc, python_bytes=python, free_bytes=freed, copy_bytes=copied)


def _cpu_sums(sums: list):
    """A sums vector's CPU part as a record's CPU sums (_core.CpuSums)."""
    return document.cpu_sums(python_ns=sums[0], native_ns=sums[1], system_ns=sums[2], gil_wait_ns=sums[3],
                             cpu_wait_ns=sums[4], samples=sums[_SAMPLES])


def _figures(sums: list, memory: bool, gpu: bool) -> dict[str, Any]:
    out: dict[str, Any] = {name: sums[i] * NS for i, name in enumerate(TIME_FIGURES)}
    out["samples"] = int(sums[_SAMPLES])
    if memory:
        out.update((name, int(sums[_MEMORY + i])) for i, name in enumerate(MEMORY_FIGURES))
    if gpu:
        out["gpu_sec"] = sums[_GPU] * NS
    return out


def call_stacks(raw: dict[str, Any], memory: bool, gpu: bool) -> dict[str, Any] | None:
    """The call_stacks field of a collection (None: the core kept no stacks)."""
    sums = StackSums()
    sums.add_raw(raw)
    return sums.fields(memory, gpu) if sums.present else None
