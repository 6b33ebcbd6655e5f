"""The profile as JSON (schema: docs/profile-schema.md), and writing a report to
its file."""

from __future__ import annotations

import json
import os
import stat
import tempfile


# Containers nested less deep than this are laid out one member per line (the
# profile's sections, each file, each line and function entry); deeper ones, and
# lists of plain values, are written on one line by the json module's C encoder.
# json.dumps with indent= encodes in Python instead, which took a third of the
# time between the program's end and the profile on disk (a small profile: 37 ms
# of 48 under cProfile); a profile of thousands of lines took seconds.
_LAID_OUT_DEPTH = 4
_encode = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode


def render(profile: dict) -> str:
    parts: list[str] = []
    _lay_out(profile, 0, parts)
    parts.append("\n")
    return "".join(parts)


def _lay_out(value, depth: int, parts: list[str]) -> None:
    if depth >= _LAID_OUT_DEPTH or not value:
        parts.append(_encode(value))
    elif isinstance(value, dict):
        _members(parts, depth, "{", "}", [(_encode(str(k)) + ": ", v) for k, v in value.items()])
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        _members(parts, depth, "[", "]", [("", v) for v in value])
    else:
        parts.append(_encode(value))


def _members(parts: list[str], depth: int, open_: str, close: str, members: list) -> None:
    inner = "\n" + " " * (depth + 1)
    parts.append(open_)
    for i, (key, v) in enumerate(members):
        parts.append(inner if i == 0 else "," + inner)
        parts.append(key)
        _lay_out(v, depth + 1, parts)
    parts.append("\n" + " " * depth + close)
