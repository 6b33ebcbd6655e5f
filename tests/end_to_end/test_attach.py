"""The memory library attached to a running interpreter (csrc/memhooks/got.c,
preload.attach): a memory run starts one interpreter, and the blocks Python
made before the library came are sized right when they are freed after it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import program_env


def test_a_memory_run_starts_one_interpreter(tmp_path, groundtruth_dir):
    """Each interpreter start imports site once (-X importtime says so on
    stderr); re-executing with the library preloaded made two."""
    (tmp_path / "prog.py").write_text("block = bytearray(8 << 20)  # @block\n")
    out = tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pyrometer", "--quiet", "--json",
                           "--outfile", out, "prog.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=program_env(groundtruth_dir), timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    sites = [line for line in proc.stderr.splitlines() if line.startswith("import time:") and line.endswith("| site")]
    assert len(sites) == 1, proc.stderr[-3000:]
    profile = json.loads(out.read_text())
    assert profile["memory"] is True
    (line,) = [e for f in profile["files"].values() for e in f["lines"] if e["lineno"] == 1]
    assert line["n_malloc_mb"] == pytest.approx(8.4, rel=0.05), line


# Python blocks made before the library is attached: small ones in pymalloc's
# pools (arenas the library never saw made) and large ones from malloc.  Freed
# after, each must be sized from the place it lives in: a pool's header for
# the first, malloc_usable_size for the second (which must never see a pool
# block: ASan reports it, tests/sanitized.py runs this test).
BEFORE_AND_AFTER = """
import gc, json, sys
from pyrometer.core import preload
from pyrometer.integrations.inprocess import profile_this
small = [str(i) * 3 for i in range(300_000)]       # about 20 MB in pymalloc's pools
large = [bytes(600 + i % 300) for i in range(20_000)]  # about 15 MB of malloc blocks
problem = preload.attach()
assert problem is None, problem

def work():
    global small, large
    del small, large
    gc.collect()
    return [bytearray(2 << 20) for _ in range(10)]  # @kept

_, profile = profile_this(work)
lines = {e["lineno"]: e for f in profile["files"].values() for e in f["lines"]}
kept = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# @kept"))
json.dump({"memory": profile["memory"], "notices": profile.get("notices", []),
           "kept": lines.get(kept, {}).get("n_malloc_mb", 0),
           "max_footprint_mb": profile.get("max_footprint_mb")}, open(sys.argv[1], "w"))
"""


def test_blocks_made_before_the_attach_are_freed_after_it(tmp_path, groundtruth_dir):
    (tmp_path / "prog.py").write_text(BEFORE_AND_AFTER)
    seen = tmp_path / "seen.json"
    proc = subprocess.run([sys.executable, "prog.py", seen], cwd=tmp_path, capture_output=True, text=True,
                          env=program_env(groundtruth_dir), timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(seen.read_text())
    assert record["memory"] is True, record
    # 10 blocks of 2 MiB kept: each over the 1 MiB window, so each is a sample
    # of its own size and the line's figure is exact, 21 MB.
    assert record["kept"] == pytest.approx(21.0, rel=0.05), record
    # The footprint counts from the profile's start: the ~40 MB freed first
    # take it below zero, and the 21 MB kept after do not bring it back, so its
    # peak stays near its start.  Frees left uncounted (blocks not sized) would
    # put the peak at the 21 MB kept.
    assert record["max_footprint_mb"] < 8, record
