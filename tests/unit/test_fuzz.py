"""The fuzz target tests/fuzz/fuzz_view.py (saved profile -> loader -> check ->
every renderer), run for a bounded time: PYROMETER_FUZZ_SECONDS, default 30.

atheris has binary wheels for CPython 3.10-3.14 on x86-64 Linux only
(pyproject.toml's test extra installs it there).  Where it cannot be imported
the test is skipped, saying why, unless PYROMETER_REQUIRE_FUZZ=1, which
tests/pythons.py sets for those versions: there a missing atheris is a failure,
so that CI cannot skip the fuzzing everywhere without anyone noticing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic import make_profile

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"

# once: the loader and renderers are Python whose branches do not depend on the
# CPython running them (tests/pythons.py fuzzes in one suite).
pytestmark = pytest.mark.once


def test_fuzz_view(tmp_path):
    try:
        import atheris  # noqa: F401
    except ImportError as e:
        reason = f"atheris cannot be imported ({e}): pip install atheris (x86-64 Linux, CPython 3.10-3.14)"
        if os.environ.get("PYROMETER_REQUIRE_FUZZ") == "1":
            pytest.fail(f"PYROMETER_REQUIRE_FUZZ=1 but {reason}")
        pytest.skip(reason)
    seconds = int(os.environ.get("PYROMETER_FUZZ_SECONDS", "30"))
    corpus, seeds = tmp_path / "corpus", tmp_path / "seeds"
    corpus.mkdir()
    seeds.mkdir()
    # Seeds: real-shaped profiles as they are (first byte even: raw) and one
    # input of each kind for the structural changes (first byte odd).
    for i, profile in enumerate([make_profile(2, 6, memory=True, seed=1), make_profile(1, 5, memory=False)]):
        (seeds / f"raw-{i}").write_bytes(b"\0" + json.dumps(profile).encode())
        (seeds / f"changed-{i}").write_bytes(bytes([1, i]) + bytes(range(64)))
    proc = subprocess.run(
        [sys.executable, str(FUZZ / "fuzz_view.py"), f"-max_total_time={seconds}", "-timeout=30",
         "-rss_limit_mb=4096", f"-dict={FUZZ / 'json.dict'}", f"-artifact_prefix={tmp_path}/",
         str(corpus), str(seeds)],
        cwd=tmp_path, capture_output=True, text=True, timeout=seconds + 300)
    crashes = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*")) + sorted(tmp_path.glob("oom-*"))
    found = "".join(f"\n{c.name}: {c.read_bytes()[:2000]!r}" for c in crashes)
    assert proc.returncode == 0 and not crashes, (
        f"the fuzzer found a failure (exit status {proc.returncode}); run it again with "
        f"python tests/fuzz/fuzz_view.py CRASH_FILE\n{proc.stderr[-6000:]}{found}")
    done = re.search(r"Done (\d+) runs in", proc.stderr)
    assert done, f"the fuzzer did not run:\n{proc.stderr[-3000:]}"
    # Not an empty run: even under load, a run of a few seconds is thousands of inputs.
    assert int(done.group(1)) >= min(200, 10 * seconds), proc.stderr[-3000:]
