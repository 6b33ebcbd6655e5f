"""The program's garbage collector as in a bare run: pyrometer's own objects
are not among what the program's collections visit (core/gc_aside.py,
csrc/cpython/gc_aside.c), and the interpreter's start-up objects still are.

Before, an empty program's collector tracked about 2,400 more objects under
the command than bare (pyrometer's modules and session), and pyperformance's
gc_collect read 1.10-1.15x for that alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROGRAM_TIMEOUT_S, program_env, write_program

# What the program's collector holds, as the program sees it.  Its own cycles
# are made and collected; the interpreter's start-up objects are checked by two
# made before any program runs (the sys module's dict and the os module).
PROGRAM = """
import gc, json, os, sys

class Node:
    pass

gc.collect()
tracked = gc.get_objects()
ids = {id(o) for o in tracked}
ring = [Node() for _ in range(100)]
for a, b in zip(ring, ring[1:] + ring[:1]):
    a.next = b
del ring, a, b
collected = gc.collect()
json.dump({"tracked": len(tracked), "frozen": gc.get_freeze_count(), "collected": collected,
           "sys_dict": id(sys.__dict__) in ids, "os": id(os) in ids,
           "os_referred": any(r is sys.modules for r in gc.get_referrers(os))},
          open(sys.argv[1], "w"))
"""

# Objects the command may still add where the program sees them: those of
# `import pyrometer` and runpy, made before the mark, which the program's own
# imports (json, os) mostly share, the program's argv and its __main__ (about
# 300 in all on 3.11, against about 2,400 before).
EXTRA_AT_MOST = 600


def _seen(command: list[str], tmp_path: Path, name: str) -> dict:
    prog = write_program(tmp_path, PROGRAM)
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([*command, str(prog), str(out)], cwd=tmp_path, capture_output=True, text=True,
                          env=program_env(None), timeout=PROGRAM_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "pyrometer"
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable}")
    return [str(script)]


@pytest.mark.parametrize("mode", [["--cpu-only"], []], ids=["cpu-only", "full"])
@pytest.mark.parametrize("entry", ["module", "console_script"])
def test_program_collector_sees_what_a_bare_run_sees(tmp_path, mode, entry):
    bare = _seen([sys.executable], tmp_path, "bare")
    command = [sys.executable, "-m", "pyrometer"] if entry == "module" else _console_script()
    seen = _seen([*command, "--quiet", "--json", "--outfile", str(tmp_path / "p.json"), *mode], tmp_path, "seen")
    assert seen["tracked"] - bare["tracked"] <= EXTRA_AT_MOST, (bare, seen)
    # pyrometer's own objects are in the permanent generation, which no
    # collection visits, beside what the interpreter froze itself (3.12
    # starts with 375 objects frozen).
    assert seen["frozen"] - bare["frozen"] >= 1000, (bare, seen)
    # The interpreter's start-up objects are where collections visit them, and
    # the program's own cycles are collected as bare.
    for key in ("sys_dict", "os", "os_referred"):
        assert seen[key] and bare[key], (key, bare, seen)
    assert seen["collected"] == bare["collected"] >= 100, (bare, seen)


def test_objects_frozen_before_pyrometer_stay_as_they_were(tmp_path):
    """A process that froze objects before pyrometer started (a sitecustomize
    doing gc.freeze()): what it froze stays frozen, and pyrometer's objects
    are set aside beside it."""
    prog = write_program(tmp_path, PROGRAM)
    out = tmp_path / "seen.json"
    starter = ("import gc, sys; gc.freeze(); n = gc.get_freeze_count(); sys.argv = sys.argv[1:]; "
               "from pyrometer.__main__ import main; status = main(); "
               "assert gc.get_freeze_count() > n + 1000, (gc.get_freeze_count(), n); sys.exit(status)")
    proc = subprocess.run([sys.executable, "-c", starter, "pyrometer", "--quiet", "--cpu-only", "--json",
                           "--outfile", str(tmp_path / "p.json"), str(prog), str(out)],
                          cwd=tmp_path, capture_output=True, text=True, env=program_env(None),
                          timeout=PROGRAM_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(out.read_text())
    # What the starter froze (the interpreter's start-up objects: 4,800 on
    # 3.10, 11,200 on 3.11) is still frozen, pyrometer's objects beside it (the
    # starter's assertion); the program's own cycles are collected.
    assert seen["frozen"] > 1000 and not seen["sys_dict"] and seen["collected"] >= 100, seen


def test_program_that_freezes_and_unfreezes_itself(profile_program):
    """A program's own gc.freeze() and gc.unfreeze() (a server's pre-fork
    pattern) work as bare: after its unfreeze nothing is frozen, and its
    garbage is collected."""
    p = profile_program("""
        import gc
        gc.freeze()
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        x = []
        x.append(x)
        del x
        print(frozen > 0, gc.get_freeze_count(), gc.collect() >= 1)
    """, ["--cpu-only"])
    assert p.proc.stdout.split() == ["True", "0", "True"], p.proc.stdout


def test_child_process_collector_sees_what_a_bare_child_sees(tmp_path):
    """A Python child of the profiled program (started by an exec, profiled
    through the run's bootstrap) sets pyrometer's objects aside as the first
    process does: its collector holds about what a bare child's holds."""
    child = write_program(tmp_path, PROGRAM, "child.py")
    parent = write_program(tmp_path, f"""
        import subprocess, sys
        subprocess.run([sys.executable, {str(child)!r}, sys.argv[1]], check=True)
    """, "parent.py")
    seen = {}
    for name, command in (("bare", [sys.executable]),
                          ("profiled", [sys.executable, "-m", "pyrometer", "--quiet", "--cpu-only", "--json",
                                        "--outfile", str(tmp_path / "p.json")])):
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([*command, str(parent), str(out)], cwd=tmp_path, capture_output=True, text=True,
                              env=program_env(None), timeout=PROGRAM_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        seen[name] = json.loads(out.read_text())
    profile = json.loads((tmp_path / "p.json").read_text())
    assert profile["process_count"] == 2, profile["processes"]
    bare, profiled = seen["bare"], seen["profiled"]
    assert profiled["tracked"] - bare["tracked"] <= EXTRA_AT_MOST, (bare, profiled)
    assert profiled["frozen"] - bare["frozen"] >= 1000, (bare, profiled)
    assert profiled["sys_dict"] and profiled["os"] and profiled["collected"] == bare["collected"], (bare, profiled)
