"""CPython's own regression tests pass profiled as bare (issue 46): the
corpus of tests/regrtest_corpus.py (16 modules, bare and profiled, compared
test by test) on this interpreter, the full profile on every CPython
(tests/pythons.py: three of them, for CI's time) and --cpu-only on one.  Where the
interpreter has no test package the test skips, saying so, unless
PYROMETER_REQUIRE_REGRTEST=1 (tests/pythons.py sets it: pyenv's builds ship
Lib/test, and the Debian chroot gets libpython3.1x-testsuite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.alone  # it spreads its own runs over the cores

CORPUS = Path(__file__).resolve().parents[1] / "regrtest_corpus.py"
sys.path.insert(0, str(CORPUS.parent))
from regrtest_corpus import MODULES, NOTHING_RUN  # noqa: E402  (tests/ is not a package)
sys.path.pop(0)

# Before 3.12 regrtest cannot split test_concurrent_futures into parts that
# run side by side: on 2 cores it is about 150 s of each of the three runs
# (3.10: 10 minutes for the corpus, three runs of 190-210 s).  Here, for the suite's
# time, it is left out there; `python3 tests/regrtest_corpus.py` runs it
# (it passes profiled as bare on 3.10: test_children.py's forked-worker crash
# test keeps what it found).
IN_THE_SUITE = [m for m in MODULES if not (m == "test_concurrent_futures" and sys.version_info < (3, 12))]


def corpus(tmp_path, modes: str) -> None:
    proc = subprocess.run([sys.executable, str(CORPUS), "-j", str(os.cpu_count() or 2),
                           "--modules", ",".join(IN_THE_SUITE), "--modes", modes,
                           "--json", str(tmp_path / "corpus.json")],
                          capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
    if proc.returncode == NOTHING_RUN:
        if os.environ.get("PYROMETER_REQUIRE_REGRTEST") == "1":
            pytest.fail(proc.stderr)
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]


def test_cpythons_own_tests_pass_under_the_full_profile_as_bare(tmp_path):
    elsewhere = os.environ.get("PYROMETER_REGRTEST_ELSEWHERE")
    if elsewhere is not None:
        pytest.skip(f"run under CPython {elsewhere} in this run of tests/pythons.py (REGRTEST_VERSIONS)")
    corpus(tmp_path, "full")


@pytest.mark.once
def test_cpythons_own_tests_pass_under_cpu_only_as_bare(tmp_path):
    """--cpu-only on one CPython only, for the suite's time (3-7 minutes a
    version for each mode): the full profile has all it has, and in runs on
    3.10-3.13 every difference it showed the full profile showed too, but
    for one that went on its rerun (test_gc's test_get_objects_arguments)."""
    corpus(tmp_path, "cpu-only")
