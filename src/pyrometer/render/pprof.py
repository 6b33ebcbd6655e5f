"""The profile's call stacks as pprof's profile.proto (google/pprof,
proto/profile.proto), gzipped: what `go tool pprof`, Grafana Pyroscope and
Parca read.  Written by the small protobuf encoder below (varints and
length-delimited fields are all profile.proto needs), so pyrometer needs no
protobuf package.

One sample type per metric of render/frames.py (time in nanoseconds, bytes in
bytes); "time" (all kinds together) is the default one.  Each reported line is
a Location with one Line, whose Function has the name, file and first line of
the function; a stack is one Sample per kind of time it holds, the kind's
synthetic leaf frame ("[native]", ...) at the leaf, with the values of the
other kinds zero."""

from __future__ import annotations

import functools
import gzip
TYPE_CHECKING = False  # not typing's: importing typing costs 5-9 ms (render/__init__.py)
if TYPE_CHECKING:
    from typing import Any

from .frames import Stacks, Strings, metrics

# profile.proto's field numbers.
PROFILE_SAMPLE_TYPE, PROFILE_SAMPLE, PROFILE_MAPPING, PROFILE_LOCATION, PROFILE_FUNCTION = 1, 2, 3, 4, 5
PROFILE_STRING_TABLE, PROFILE_TIME_NANOS, PROFILE_DURATION_NANOS = 6, 9, 10
PROFILE_PERIOD_TYPE, PROFILE_PERIOD, PROFILE_COMMENT, PROFILE_DEFAULT_SAMPLE_TYPE = 11, 12, 13, 14
VALUE_TYPE_TYPE, VALUE_TYPE_UNIT = 1, 2
SAMPLE_LOCATION_ID, SAMPLE_VALUE = 1, 2
MAPPING_ID, MAPPING_FILENAME, MAPPING_HAS_FUNCTIONS, MAPPING_HAS_FILENAMES, MAPPING_HAS_LINE_NUMBERS = 1, 5, 7, 8, 9
LOCATION_ID, LOCATION_MAPPING_ID, LOCATION_LINE = 1, 2, 4
LINE_FUNCTION_ID, LINE_LINE = 1, 2
FUNCTION_ID, FUNCTION_NAME, FUNCTION_SYSTEM_NAME, FUNCTION_FILENAME, FUNCTION_START_LINE = 1, 2, 3, 4, 5

VARINT, LENGTH_DELIMITED = 0, 2

# pprof's names for the metrics (render/frames.py METRICS), with their units.
SAMPLE_TYPES = {"time": "time", "python": "python_cpu", "native": "native_cpu", "system": "system",
                "gil_wait": "gil_wait", "cpu_wait": "cpu_wait", "alloc": "alloc_space", "copy": "copy_space",
                "gpu": "gpu_time"}
UNITS = {"seconds": "nanoseconds", "bytes": "bytes"}
SCALE = {"seconds": 1e9, "bytes": 1}


def _append_varint(out: bytearray, value: int) -> None:
    """A protobuf varint appended to out; a negative int64 as its 64-bit two's
    complement (10 bytes)."""
    if 0 <= value < 0x80:  # most tags, lengths and ids: one byte
        out.append(value)
        return
    value &= (1 << 64) - 1
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def varint(value: int) -> bytes:
    out = bytearray()
    _append_varint(out, value)
    return bytes(out)


_id_varint = functools.lru_cache(maxsize=1 << 16)(varint)


class Message:
    """One protobuf message being written: fields appended in order."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def number(self, field: int, value: int) -> "Message":
        if value:  # proto3: a zero is the default, left out
            self.parts += (varint(field << 3 | VARINT), varint(value))
        return self

    def payload(self, field: int, data: bytes) -> "Message":
        self.parts += (varint(field << 3 | LENGTH_DELIMITED), varint(len(data)), data)
        return self

    def message(self, field: int, message: "Message") -> "Message":
        return self.payload(field, message.encode())

    def packed(self, field: int, values: list[int]) -> "Message":
        if values:
            data = bytearray()
            for v in values:
                _append_varint(data, v)
            return self.payload(field, bytes(data))
        return self

    def packed_ids(self, field: int, ids: list[int]) -> "Message":
        """packed() for ids (locations), which recur in every stack: their
        encodings are kept."""
        if ids:
            return self.payload(field, b"".join([_id_varint(i) for i in ids]))
        return self

    def encode(self) -> bytes:
        return b"".join(self.parts)


def encode(profile: dict[str, Any], path: str = "the profile") -> bytes:
    """The profile.proto message, not compressed."""
    stacks = Stacks(profile, path)
    kinds = metrics(profile)
    strings = Strings("")  # profile.proto's string table: index 0 is the empty string
    out = Message()
    for m in kinds:
        out.message(PROFILE_SAMPLE_TYPE, Message().number(VALUE_TYPE_TYPE, strings(SAMPLE_TYPES[m.name]))
                    .number(VALUE_TYPE_UNIT, strings(UNITS[m.unit])))

    # Samples: one per stack and kind of figure (its leaf frame), values summed.
    values: dict[tuple[int, ...], list[int]] = {}
    for i, m in enumerate(kinds):
        for stack, value in stacks.weighted(m):
            row = values.get(stack)
            if row is None:
                row = values[stack] = [0] * len(kinds)
            row[i] += round(value * SCALE[m.unit])
    used: set[int] = set()
    for stack, row in values.items():
        used.update(stack)
        out.message(PROFILE_SAMPLE, Message().packed_ids(SAMPLE_LOCATION_ID, [f + 1 for f in reversed(stack)])
                    .packed(SAMPLE_VALUE, row))

    out.message(PROFILE_MAPPING, Message().number(MAPPING_ID, 1).number(MAPPING_FILENAME, strings(profile.get("program", "")))
                .number(MAPPING_HAS_FUNCTIONS, 1).number(MAPPING_HAS_FILENAMES, 1).number(MAPPING_HAS_LINE_NUMBERS, 1))
    # A location per frame (a line of a function), a function per (name, file, first line).
    functions: dict[tuple[str, str, int], int] = {}
    for f in sorted(used):
        frame = stacks.frames[f]
        key = (frame.function, frame.filename, frame.first_lineno)
        fid = functions.get(key)
        if fid is None:
            fid = functions[key] = len(functions) + 1
        out.message(PROFILE_LOCATION, Message().number(LOCATION_ID, f + 1).number(LOCATION_MAPPING_ID, 1)
                    .message(LOCATION_LINE, Message().number(LINE_FUNCTION_ID, fid).number(LINE_LINE, frame.lineno)))
    for (name, filename, first_lineno), fid in functions.items():
        out.message(PROFILE_FUNCTION, Message().number(FUNCTION_ID, fid).number(FUNCTION_NAME, strings(name))
                    .number(FUNCTION_SYSTEM_NAME, strings(name)).number(FUNCTION_FILENAME, strings(filename))
                    .number(FUNCTION_START_LINE, first_lineno))

    out.number(PROFILE_TIME_NANOS, round(profile.get("start_time_absolute", 0) * 1e9))
    out.number(PROFILE_DURATION_NANOS, round(profile.get("elapsed_time_sec", 0) * 1e9))
    out.message(PROFILE_PERIOD_TYPE, Message().number(VALUE_TYPE_TYPE, strings("cpu"))
                .number(VALUE_TYPE_UNIT, strings("nanoseconds")))
    out.number(PROFILE_PERIOD, round(profile.get("sampling_interval_sec", 0) * 1e9))
    command = " ".join([str(profile.get("program", "")), *map(str, profile.get("args", []))])
    out.packed(PROFILE_COMMENT, [strings(f"pyrometer: {command}")])
    out.number(PROFILE_DEFAULT_SAMPLE_TYPE, strings(SAMPLE_TYPES["time"]))
    # The string table last: every index above is in it by now.
    for s in strings.table:
        # a lone surrogate (a file name that was not UTF-8) becomes "?"
        out.payload(PROFILE_STRING_TABLE, s.encode("utf-8", "replace"))
    return out.encode()


def render(profile: dict[str, Any], path: str = "the profile") -> bytes:
    # mtime 0: the same profile gives the same file.
    return gzip.compress(encode(profile, path), mtime=0)
