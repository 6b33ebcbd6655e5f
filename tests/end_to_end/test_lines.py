"""The line of an instruction: read from the code's line table one
instruction at a time at first, then, from a code's fourth instruction asked,
for all of its instructions in one pass (csrc/profile/codes.c, fill_lines).
The pass must give every instruction the line the first way gives it, on
every CPython's line table format (3.10's, and 3.11's on), the compiler's
instructions without a line and the loops' jumps back included."""

from __future__ import annotations

import importlib
import sys
import textwrap
import types

import pytest

from pyrometer import _core

# Modules whose code covers what the compiler emits: loops of every kind, with
# and try blocks, comprehensions, match, async code, huge and tiny functions.
MODULES = ["argparse", "typing", "_pydecimal", "email.message", "json.decoder",
           "asyncio.base_events", "inspect", "dataclasses", "tarfile", "zipfile",
           "pickle", "ast", "enum", "collections", "subprocess", "threading",
           "unittest.case", "logging", "difflib", "sre_parse" if sys.version_info < (3, 11) else "re._parser"]


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _disagreements(code: types.CodeType) -> list[tuple[int, int, int]]:
    asked, filled = _core.code_lines(code)
    assert len(asked) == len(filled) == len(code.co_code) // 2
    return [(unit, a, f) for unit, (a, f) in enumerate(zip(asked, filled)) if a != f]


@pytest.mark.parametrize("name", MODULES)
def test_one_pass_gives_every_instruction_its_line(name):
    module = importlib.import_module(name)
    with open(module.__file__, encoding="utf-8") as f:
        top = compile(f.read(), module.__file__, "exec")
    wrong = {c.co_qualname if hasattr(c, "co_qualname") else c.co_name: d[:3]
             for c in _codes(top) if (d := _disagreements(c))}
    assert not wrong, f"(instruction, line asked, line filled) in {name}: {wrong}"


def test_one_pass_in_a_function_of_thousands_of_lines():
    """A generated function of thousands of lines (regex_v8 has such), with loops whose jump back
    targets another loop's head, blocks whose exits have no line, and lines
    far apart (a long string between them)."""
    body = []
    for i in range(250):
        gap = "\n" * (i % 7)  # a string over i % 7 lines: the next line is that far on
        body += [f"for a{i} in range(2):",
                 f"    while a{i}:",
                 f"        a{i} -= 1",
                 f"    with ctx() as c{i}:",
                 "        try:",
                 f"            x = [j * {i} for j in range(3) if j]",
                 "        except ValueError:",
                 "            pass",
                 "        finally:",
                 "            x = None",
                 f"s{i} = \"\"\"{gap}\"\"\""]
    source = "def huge(ctx):\n" + "".join(f"    {line}\n" for line in body) + "    return x\n"
    code = next(c for c in compile(source, "huge.py", "exec").co_consts if isinstance(c, types.CodeType))
    assert code.co_name == "huge" and len(code.co_code) // 2 > 12_000
    assert not _disagreements(code)


def test_memory_of_a_huge_function_lands_on_its_lines(profile_program):
    """Each of 300 lines of one function keeps a block over the sampling
    window (always sampled, each by itself): every sample's line was asked
    after the code's fourth, so all but three of them came from the one-pass
    fill, and each must be its own line, none of its neighbours'."""
    lines = "".join(f"    keep.append(bytearray(300_000))  # block {i};\n" for i in range(300))
    run = profile_program("keep = []\ndef huge():\n" + lines + "huge()\nprint(len(keep))\n")
    assert run.proc.stdout.strip() == "300"
    for i in (0, 1, 2, 3, 4, 150, 298, 299):
        entry = run.line(f"# block {i};")
        assert 0.25 <= entry["n_malloc_mb"] <= 0.35, (i, entry["n_malloc_mb"])
    entries = [e for e in run.file()["lines"] if e.get("n_malloc_mb", 0) > 0.2]
    assert len(entries) == 300, sorted(e["lineno"] for e in entries)
