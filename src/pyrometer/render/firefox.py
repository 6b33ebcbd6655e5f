"""The profile's call stacks for the Firefox Profiler (profiler.firefox.com): its
processed profile format (version 57, strings shared across threads), the kind
CPython 3.15's sampling profiler writes with --gecko, with the columns of that
version only (the profiler's docs-developer/CHANGELOG-formats.md).

The Firefox Profiler shows threads; here each measure is one "thread" (track)
whose samples are the stacks weighted by it: time (all kinds, told apart by the
categories of their leaf frames) in milliseconds ("tracing-ms"), allocated and
copied bytes ("bytes"), GPU time.  The call tree, the
flame graph and the inverted tree are exact.  A profile aggregates stacks and
has no timeline, so the samples' times only place the stacks one after another
(each as long as its weight, for time).  Frames are categorised (Python,
native, system, waiting) so that the category graph shows the split."""

from __future__ import annotations

import json
import os
TYPE_CHECKING = False  # not typing's: importing typing costs 5-9 ms (render/__init__.py)
if TYPE_CHECKING:
    from typing import Any

from .frames import CPU_WAIT, GIL_WAIT, NATIVE, OTHER, SYSTEM, UNATTRIBUTED, Stacks, Strings, metrics

FORMAT_VERSION = 32
PROCESSED_VERSION = 57

CATEGORIES = [
    {"name": "Other", "color": "grey", "subcategories": ["Other"]},
    {"name": "Python", "color": "yellow", "subcategories": ["Other"]},
    {"name": "Native", "color": "blue", "subcategories": ["Other"]},
    {"name": "System", "color": "orange", "subcategories": ["Other"]},
    {"name": "Waiting", "color": "green", "subcategories": ["Other"]},
]
OTHER_CATEGORY, PYTHON_CATEGORY = 0, 1
SYNTHETIC_CATEGORY = {NATIVE: 2, SYSTEM: 3, GIL_WAIT: 4, CPU_WAIT: 4, UNATTRIBUTED: OTHER_CATEGORY,
                      OTHER: OTHER_CATEGORY}
WEIGHT = {"seconds": ("tracing-ms", 1e3), "bytes": ("bytes", 1)}
TRACKS = ("time", "alloc", "copy", "gpu")  # the metrics (render/frames.py) shown as tracks


def _tables(stacks: Stacks, strings: Strings) -> tuple[dict, dict, dict, dict]:
    """The function, frame and resource tables of every frame (frame i of the
    profile is frame i here), and an empty stack table to fill."""
    funcs = {"name": [], "isJS": [], "relevantForJS": [], "resource": [], "fileName": [], "lineNumber": [],
             "columnNumber": [], "length": 0}
    # Version 57's columns: no "implementation" (gone in 54), no "optimizations" (45).
    frames = {"address": [], "category": [], "subcategory": [], "func": [], "innerWindowID": [],
              "line": [], "column": [], "inlineDepth": [], "nativeSymbol": [], "length": 0}
    resources = {"lib": [], "name": [], "host": [], "type": [], "length": 0}
    func_of: dict[tuple[str, str, int], int] = {}
    resource_of: dict[str, int] = {}
    for f in stacks.frames:
        key = (f.function, f.filename, f.first_lineno)
        fi = func_of.get(key)
        if fi is None:
            fi = func_of[key] = len(funcs["name"])
            resource = -1
            if f.filename:
                resource = resource_of.get(f.filename, -1)
                if resource < 0:
                    resource = resource_of[f.filename] = len(resources["name"])
                    resources["lib"].append(None)
                    resources["name"].append(strings(os.path.basename(f.filename) or f.filename))
                    resources["host"].append(None)
                    resources["type"].append(1)  # a library, as CPython's collector says for files
            funcs["name"].append(strings(f.function))
            funcs["isJS"].append(not f.synthetic)  # "JS": the interpreted language's own frames
            funcs["relevantForJS"].append(not f.synthetic)
            funcs["resource"].append(resource)
            funcs["fileName"].append(strings(f.filename) if f.filename else None)
            funcs["lineNumber"].append(f.first_lineno or None)
            funcs["columnNumber"].append(None)
        frames["address"].append(-1)
        frames["category"].append(SYNTHETIC_CATEGORY[f.function] if f.synthetic else PYTHON_CATEGORY)
        frames["subcategory"].append(0)
        frames["func"].append(fi)
        frames["innerWindowID"].append(None)
        frames["line"].append(f.lineno or None)
        frames["column"].append(None)
        frames["inlineDepth"].append(0)
        frames["nativeSymbol"].append(None)
    funcs["length"] = len(funcs["name"])
    frames["length"] = len(frames["func"])
    resources["length"] = len(resources["name"])
    # A stack's category is its frame's (the stack table's own columns went in 53).
    return funcs, frames, resources, {"frame": [], "prefix": [], "length": 0}


def document(profile: dict[str, Any], path: str = "the profile") -> dict[str, Any]:
    stacks = Stacks(profile, path)
    strings = Strings()
    funcs, frames, resources, stack_table = _tables(stacks, strings)
    stack_of: dict[tuple[int | None, int], int] = {}

    def stack_index(stack: tuple[int, ...]) -> int:
        prefix = None
        for f in stack:  # root first
            at = stack_of.get((prefix, f))
            if at is None:
                at = stack_of[(prefix, f)] = len(stack_table["frame"])
                stack_table["frame"].append(f)
                stack_table["prefix"].append(prefix)
            prefix = at
        return prefix

    interval_ms = (profile.get("sampling_interval_sec") or 0.01) * 1e3
    threads = []
    # One track per measure: the kinds of time are one ("time"), told apart by
    # their leaf frames' categories, so the file holds the stacks once for time.
    for m in (m for m in metrics(profile) if m.name in TRACKS):
        weighted = list(stacks.weighted(m))
        if not weighted and m.name != "time":
            continue
        weight_type, scale = WEIGHT[m.unit]
        samples = {"stack": [], "time": [], "weight": [], "weightType": weight_type, "eventDelay": [], "length": 0}
        at = 0.0
        for stack, value in weighted:
            samples["stack"].append(stack_index(stack))
            samples["time"].append(at)
            samples["weight"].append(value * scale)
            samples["eventDelay"].append(None)
            at += value * scale if m.unit == "seconds" else interval_ms
        samples["length"] = len(samples["stack"])
        threads.append({
            "name": m.label, "isMainThread": m.name == "time", "processStartupTime": 0,
            "processShutdownTime": None, "registerTime": 0, "unregisterTime": None, "pausedRanges": [],
            "pid": str((profile.get("processes") or [{}])[0].get("pid", 0)),
            "tid": len(threads), "processType": "default", "processName": str(profile.get("program", "")),
            "samples": samples, "stackTable": stack_table, "frameTable": frames, "funcTable": funcs,
            "resourceTable": resources,
            "nativeSymbols": {"libIndex": [], "address": [], "name": [], "functionSize": [], "length": 0},
            "markers": {"data": [], "name": [], "startTime": [], "endTime": [], "phase": [], "category": [],
                        "length": 0},
        })
    stack_table["length"] = len(stack_table["frame"])
    return {
        "meta": {
            "interval": interval_ms, "startTime": (profile.get("start_time_absolute") or 0) * 1e3,
            "abi": "", "misc": "pyrometer", "oscpu": str(profile.get("platform", "")),
            "platform": str(profile.get("platform", "")), "processType": 0, "categories": CATEGORIES,
            "stackwalk": 0, "toolkit": "", "version": FORMAT_VERSION,
            "preprocessedProfileVersion": PROCESSED_VERSION, "appBuildID": "",
            "physicalCPUs": profile.get("n_cpus", 0), "logicalCPUs": profile.get("n_cpus", 0), "CPUName": "",
            "product": f"pyrometer: {profile.get('program', '')}", "symbolicated": True, "markerSchema": [],
            "importedFrom": "pyrometer",
            "extensions": {"id": [], "name": [], "baseURL": [], "length": 0},
        },
        "libs": [],
        "threads": threads,
        "pages": [],
        "shared": {"stringArray": strings.table},
    }


def render(profile: dict[str, Any], path: str = "the profile") -> str:
    return json.dumps(document(profile, path), separators=(",", ":"), allow_nan=False) + "\n"
