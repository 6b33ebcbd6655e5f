"""A corpus of programs that use widely used native libraries the way users
do (tests/corpus/: numpy, pandas, scipy, pyarrow, lxml, Pillow, cryptography,
the standard library's native modules and glibc's NSS plugins, grpcio and its
own threads), each run bare and under pyrometer with memory on, the memory
library attached (the default) and preloaded: the same output and exit
status, memory profiled without a notice of anything lost, and where the
program knows its truth (a line marked `# @truth MB`), the line's allocation
within 10% of it.

The libraries come from the `corpus` extra (pyproject.toml), installed by
tests/pythons.py on the CPythons of its CORPUS_VERSIONS, which set
PYROMETER_REQUIRE_CORPUS=1: there a library missing is a failure, elsewhere
its program is skipped."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import program_env

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
# Each program and the modules it needs.
PROGRAMS = {
    "numpy_arrays.py": ["numpy"],
    "pandas_frames.py": ["pandas"],
    "scipy_numerics.py": ["scipy"],
    "pyarrow_tables.py": ["pyarrow"],
    "lxml_documents.py": ["lxml"],
    "pillow_images.py": ["PIL"],
    "cryptography_keys.py": ["cryptography"],
    "stdlib_native.py": [],
    "grpc_threads.py": ["grpc"],
}
WAYS = {"bare": None, "attached": {}, "preloaded": {"PYROMETER_MEMORY_BY_PRELOAD": "1"}}
TIMEOUT_S = 120


def test_every_corpus_program_is_listed():
    assert sorted(PROGRAMS) == sorted(p.name for p in CORPUS.glob("*.py"))


def _run(cmd: list[str], tmp_path: Path, extra: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=program_env(None, extra),
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_program_runs_as_bare(tmp_path, name):
    missing = [m for m in PROGRAMS[name] if importlib.util.find_spec(m) is None]
    if missing:
        if os.environ.get("PYROMETER_REQUIRE_CORPUS") == "1":
            pytest.fail(f"{name} needs {', '.join(missing)}: the corpus extra was to install it")
        pytest.skip(f"{', '.join(missing)} not installed (pip install .[corpus])")
    program = CORPUS / name
    bare = _run([sys.executable, str(program)], tmp_path, {})
    assert bare.returncode == 0, bare.stderr[-3000:]
    truths = {i: float(m.group(1)) for i, text in enumerate(program.read_text().splitlines(), 1)
              if (m := re.search(r"# @truth ([0-9.]+)", text))}
    for way, extra in WAYS.items():
        if extra is None:
            continue
        out = tmp_path / f"{way}.json"
        proc = _run([sys.executable, "-m", "pyrometer", "--quiet", "--json", "--outfile", str(out), str(program)],
                    tmp_path, extra)
        assert (proc.returncode, proc.stdout, proc.stderr) == (bare.returncode, bare.stdout, bare.stderr), way
        profile = json.loads(out.read_text())
        assert profile["memory"] is True and profile["python_memory_profiled"] is True, way
        assert profile["notices"] == [], (way, profile["notices"])
        lines = {e["lineno"]: e for f, v in profile["files"].items() if Path(f).name == name for e in v["lines"]}
        for lineno, mb in truths.items():
            got = lines.get(lineno, {}).get("n_malloc_mb", 0.0)
            assert got == pytest.approx(mb, rel=0.10), (way, lineno, lines.get(lineno))
