#!/usr/bin/env python3
"""Fuzz target for reading saved profiles: bytes -> pyrometer.model.loads (the
JSON reader, then model.check) -> every renderer (text plain and coloured,
wide and narrow; JSON; the web page; each also of the reduced profile).

    python tests/fuzz/fuzz_view.py [libFuzzer options] [CORPUS_DIR ...]
    python tests/fuzz/fuzz_view.py crash-<sha1>       # run one input again

What may happen to an input: model.ProfileError (what `pyrometer view` turns
into its one-line message and exit status 2), or every report is rendered,
can be written as UTF-8, and the terminal report holds no control character
but its own newlines and styles.  Anything else is a bug: libFuzzer stops and
writes the input as crash-<sha1> (see -artifact_prefix).  tests/unit/test_fuzz.py
runs this for a bounded time.

Inputs are read two ways, chosen by their first byte.  Even: the rest is the
file's bytes as they are; seeded with real profiles (test_fuzz.py does), the
mutations libFuzzer makes to the text reach the JSON reader and, where the
text stays JSON, the check.  Odd: the rest drives structural changes to a
small valid profile (a field anywhere replaced by another JSON value, removed,
or renamed), which reach the check's and the renderers' corners far sooner
than changed bytes do.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: synthetic.py
from synthetic import make_profile  # noqa: E402

with atheris.instrument_imports():
    from pyrometer import model
    from pyrometer.render import html, json_out, text

BASES = [make_profile(2, 6, memory=True, seed=1), make_profile(1, 5, memory=False, seed=2)]
for _base in BASES:
    _base["files"][next(iter(_base["files"]))]["leaks"] = {"3": {"likelihood": 0.99, "velocity_mb_s": 0.5,
                                                                 "growth_mb": 30.0}}
for _base in BASES:
    # Call stacks (docs/profile-schema.md): two frames, a stack through both, the empty stack.
    _first = next(iter(_base["files"]))
    _figures = {"python_sec": 0.5, "native_sec": 0.25, "system_sec": 0.0, "gil_wait_sec": 0.0, "cpu_wait_sec": 0.0,
                "samples": 50, **({"malloc_bytes": 1 << 20, "python_malloc_bytes": 1 << 19, "free_bytes": 0,
                                   "copy_bytes": 4096} if _base["memory"] else {})}
    _base["call_stacks"] = {
        "frames": [{"filename": _first, "function": "main", "first_lineno": 1, "lineno": 3},
                   {"filename": _first, "function": "Class0.function_26", "first_lineno": 26, "lineno": 27}],
        "stacks": [dict(_figures, path=[0, 1]), dict(_figures, path=[0]), dict(_figures, path=[])],
        "other": dict(_figures, samples=0), "cap": 20000, "max_depth": 128}
# What the terminal report may hold: its own styles, and no other control
# character than the newline (render/text.py, visible()).
STYLES = re.compile(r"\x1b\[[0-9]+m")
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
STRINGS = ["", "0", "12", "-1", "x", "<b>&</b>", "\x1b[2J", "\x9b1m", "\t\r\n", "\u202e", "\udcff", "\x00",
           "files", "lines", "lineno", "memory", "漢字", "e\u0301", "1e400", "NaN", "/", "..", "a" * 300]
NUMBERS = [0, 1, -1, 2, 255, 256, 0.5, -0.5, 1.5, 100.0, 1e308, -1e308, 2 ** 31, 2 ** 63, 2 ** 64, 10 ** 30,
           float("nan"), float("inf"), float("-inf"), True, False]


def _paths(value, path=()):
    """Every place in a profile: (path to its container, key or index)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path, k
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield path, i
            yield from _paths(v, path + (i,))


def _value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.PickValueInList(NUMBERS)
    if kind == 2:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 10))
    if kind == 3:
        return fdp.ConsumeRegularFloat()
    if kind == 4:
        return fdp.PickValueInList(STRINGS)
    if kind == 5:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))
    if kind == 6 and depth < 4:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    if kind == 7 and depth < 4:
        return {fdp.PickValueInList(STRINGS): _value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))}
    if kind == 8:
        return [fdp.PickValueInList(NUMBERS), fdp.PickValueInList(NUMBERS)]
    return fdp.ConsumeIntInRange(-3, 40)


def _mutated(fdp: atheris.FuzzedDataProvider) -> bytes:
    profile = copy.deepcopy(BASES[fdp.ConsumeIntInRange(0, len(BASES) - 1)])
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        places = list(_paths(profile))
        path, key = places[fdp.ConsumeIntInRange(0, len(places) - 1)]
        container = profile
        for step in path:
            container = container[step]
        action = fdp.ConsumeIntInRange(0, 5)
        if action == 0 and isinstance(container, dict):
            del container[key]
        elif action == 1 and isinstance(container, dict):
            container[fdp.PickValueInList(STRINGS)] = container.pop(key)
        elif action == 2 and isinstance(container, list):
            container.append(copy.deepcopy(container[key]))
        else:
            container[key] = _value(fdp)
    return json.dumps(profile, allow_nan=True).encode("utf-8", "surrogatepass")


def _render_all(profile: dict) -> None:
    for p in (profile, model.reduced(profile)):
        for color, width in ((False, 1 << 20), (True, 60)):
            out = text.render(p, color=color, width=width)
            bad = CONTROL.search(STYLES.sub("", out) if color else out)
            if bad:
                raise AssertionError(f"the text report holds {bad.group()!r}: {out[max(0, bad.start() - 40):][:80]!r}")
            out.encode("utf-8")
        json_out.render(p).encode("utf-8")
    html.render(profile).encode("utf-8")


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    if data[0] % 2:
        data = _mutated(atheris.FuzzedDataProvider(data[1:]))
    else:
        data = data[1:]
    try:
        profile = model.loads(data, "fuzz.json")
    except model.ProfileError as e:
        message = str(e)
        if "\n" in message or CONTROL.search(message):
            raise AssertionError(f"a ProfileError message that is not one printable line: {message!r}") from None
        return
    _render_all(profile)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
