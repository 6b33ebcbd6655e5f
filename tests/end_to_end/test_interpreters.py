"""Which interpreters pyrometer runs on, and how it behaves on the others.

- Every Python allocator CPython offers (PYTHONMALLOC): the same figures as
  under pymalloc, or, where block sizes cannot be read (mimalloc), a one-line
  notice and native memory only; never a crash.
- A free-threaded CPython: one line and exit status 2 from the command, and an
  ImportError with the same words from the extension, which leaves the GIL off.
  Needs a free-threaded interpreter with pyrometer installed, named by
  PYROMETER_FREETHREADED_PYTHON (tests/pythons.py builds one); skipped without.
- A CPython version pyrometer was not tested on: refused in one line, unless
  --force-version; a build for it without a frame layout refuses on import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO_ROOT, _compiler, write_program

MB = 1 << 20
N_KEPT = 500_000
# Each element is one bytes object of 100 bytes: 133 bytes asked of Python's
# object allocator.  Everything the line allocates is on that one line (no int
# per element: itertools.repeat), the bytes and the list's growth: lines that
# allocate and free in turn are issue 11's subject, not the allocator's.
KEPT_MB = N_KEPT * sys.getsizeof(bytes(100)) / MB
# The list grows by about 1/8 each time it is full, and a move is counted as a
# free and an allocation: up to 9 times its final size in all, which is itself
# 1/8 over its 4 MB of pointers (about 40 MB; with the 68.7 MB of 144-byte
# pymalloc blocks, the line truly allocates about 108 MB).
LIST_GROWTH_MB = 9 * 1.125 * N_KEPT * 8 / MB
# Memory is sampled by bytes, one sample per window on average: an estimate of
# V bytes is uncertain by sqrt(V * window).  The line's 108 MB read 102-106 MB
# in nine runs on 3.14 and 3.15 (about 1,100 samples each) and once 112.9 MB
# on CI: the allowance below is four such standard errors.
WINDOW = 65536
SAMPLING_MB = 4 * ((KEPT_MB + LIST_GROWTH_MB) * WINDOW / MB) ** 0.5

ALLOCATORS = ["pymalloc", "malloc", "debug", "pymalloc_debug", "malloc_debug"]

KEEP_PROGRAM = f"""
import time
from itertools import repeat
kept = [bytes(100) for _ in repeat(None, {N_KEPT})]  # @keep
for round in range(10):
    temp = [bytes(100) for _ in repeat(None, {N_KEPT // 5})]  # @temp
    del temp
time.sleep(0.05)
print("done", len(kept))
"""


def _allocator_profile(profile_program, allocator: str):
    # A 64 KiB window: about 1,500 samples on the kept line, so that what differs
    # between allocators is their rounding, not the sampling's spread.
    return profile_program(KEEP_PROGRAM, options=["--allocation-sampling-window", str(WINDOW)],
                           env={"PYTHONMALLOC": allocator})


@pytest.mark.accuracy
def test_python_allocators_give_the_same_figures(profile_program):
    kept_mb = {}
    for allocator in ALLOCATORS:
        p = _allocator_profile(profile_program, allocator)
        assert p.proc.stdout.startswith(f"done {N_KEPT}"), p.proc.stdout
        assert p.profile["python_allocator"] == ("pymalloc_debug" if allocator == "debug" else allocator)
        assert p.profile["python_memory_profiled"] is True
        assert p.profile["notices"] == []
        keep = p.line("@keep")
        kept_mb[allocator] = keep["n_malloc_mb"]
        # What the line asked for, within the allocator's rounding (pymalloc:
        # 16-byte classes, malloc: its chunk overhead), the list's growth and
        # the sampling's spread.
        assert 0.9 * KEPT_MB - SAMPLING_MB <= keep["n_malloc_mb"] <= 1.15 * KEPT_MB + LIST_GROWTH_MB + SAMPLING_MB, (
            allocator, keep["n_malloc_mb"], KEPT_MB)
        assert keep["n_python_fraction"] >= 0.95, keep
        # The footprint holds what is kept plus one round of temporaries, never
        # the sum of everything allocated: frees are counted with the sizes their
        # allocations were counted with.
        temp_total = 10 * (N_KEPT // 5) * sys.getsizeof(bytes(100)) / MB
        footprint = p.profile["max_footprint_mb"]
        assert 0.9 * KEPT_MB <= footprint <= 0.6 * (KEPT_MB + temp_total), (allocator, footprint, KEPT_MB)
    # The allocators differ only in rounding.
    assert max(kept_mb.values()) <= 1.15 * min(kept_mb.values()), kept_mb


@pytest.mark.skipif(sys.version_info < (3, 13), reason="PYTHONMALLOC=mimalloc exists from CPython 3.13 on")
def test_mimalloc_is_a_notice_not_a_crash(profile_program):
    p = _allocator_profile(profile_program, "mimalloc")
    assert p.proc.stdout.startswith(f"done {N_KEPT}"), p.proc.stdout
    assert p.profile["python_allocator"] == "mimalloc"
    assert p.profile["python_memory_profiled"] is False
    assert len(p.profile["notices"]) == 1 and "not profiled" in p.profile["notices"][0]
    # No Python memory is claimed for the line (mimalloc's memory is its own mmaps).
    assert p.line("@keep").get("n_python_fraction", 0.0) == 0.0
    # The notice is in the text report too, on one line.
    text = subprocess.run([sys.executable, "-m", "pyrometer", "view", str(p.program.parent / "profile.json")],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert sum(line.startswith("notice: Python's allocator (mimalloc)") for line in text.stdout.splitlines()) == 1


# ---------------------------------------------------------------------------
# Interpreters pyrometer cannot read
# ---------------------------------------------------------------------------

FREE_THREADED = os.environ.get("PYROMETER_FREETHREADED_PYTHON")


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("pyrometer: error: "), lines[0]
    return lines[0][len("pyrometer: error: "):]


@pytest.mark.skipif(not FREE_THREADED, reason="no free-threaded CPython with pyrometer installed "
                    "(PYROMETER_FREETHREADED_PYTHON; tests/pythons.py builds one)")
def test_free_threaded_build_is_refused(tmp_path):
    python = FREE_THREADED
    gil = subprocess.run([python, "-c", "import sys; print(sys._is_gil_enabled())"],
                         capture_output=True, text=True, timeout=60)
    assert gil.stdout.strip() == "False", f"{python} is not a free-threaded build: {gil.stdout}{gil.stderr}"
    write_program(tmp_path, "open('ran', 'w').write('yes')\n")
    for args in (["-m", "pyrometer", "prog.py"], ["-m", "pyrometer", "--cpu-only", "prog.py"]):
        proc = subprocess.run([python, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc
        assert proc.stdout == ""
        message = _one_error_line(proc)
        assert "free-threaded" in message and "3.10 to 3.15" in message, message
        assert not (tmp_path / "ran").exists(), "the program ran although pyrometer refused"
    # The extension says the same, and importing it leaves the GIL off.
    imp = subprocess.run([python, "-c", """
import sys
try:
    import pyrometer._core
except ImportError as e:
    print(e)
print(sys._is_gil_enabled())
"""], capture_output=True, text=True, timeout=60)
    said, gil_after = imp.stdout.strip().splitlines()
    assert said == message
    assert gil_after == "False", imp.stderr
    # Saved profiles can still be read there: `view` needs no measuring core.
    assert subprocess.run([python, "-m", "pyrometer", "view", "--help"], capture_output=True,
                          timeout=60).returncode == 0


def _package_with_core(tmp_path: Path, core_sources: list[Path], defines: list[str]) -> Path:
    """A copy of the installed pyrometer package whose _core is built from the
    given sources with gcc: the same files meson would pick for another build."""
    import pyrometer
    root = tmp_path / "pkg"
    package = root / "pyrometer"
    shutil.copytree(Path(pyrometer.__file__).parent, package,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    include = sysconfig.get_paths()["include"]
    target = package / ("_core" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [*_compiler(), "-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
           f"-I{include}", *defines, *map(str, core_sources), "-o", str(target)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return root


def test_version_without_frame_layout_is_refused(tmp_path):
    """What a CPython with no layout file gets (meson builds module_unsupported.c
    for it): pip install works, the command says which versions are supported."""
    root = _package_with_core(tmp_path, [REPO_ROOT / "csrc" / "module_unsupported.c"],
                              ['-DPYROMETER_TESTED_VERSIONS="3.10 to 3.13"'])
    write_program(tmp_path, "open('ran', 'w').write('yes')\n")
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "prog.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    message = _one_error_line(proc)
    v = sys.version_info
    assert message.startswith(f"pyrometer supports CPython 3.10 to 3.13; this is CPython "
                              f"{v.major}.{v.minor}.{v.micro}"), message
    assert "-Dforce_version=true" in message
    assert not (tmp_path / "ran").exists()


def test_untested_version_needs_force_version(tmp_path):
    """A build for an untested version made with -Dforce_version=true: refused
    unless the run says --force-version, then profiled."""
    script = f"""
import sys
import pyrometer._core as core
core.VERSION_TESTED = 0  # as a -Dforce_version=true build on an untested version
from pyrometer.cli import main
sys.exit(main(sys.argv[1:]))
"""
    write_program(tmp_path, "x = sum(i * i for i in range(10**5))\nprint('ran')\n")
    run = lambda *args: subprocess.run([sys.executable, "-c", script, *args], cwd=tmp_path,
                                       capture_output=True, text=True, timeout=60)
    refused = run("--cpu-only", "prog.py")
    assert refused.returncode == 2 and refused.stdout == ""
    message = _one_error_line(refused)
    assert "untested" in message and "--force-version" in message and "3.10 to 3.15" in message, message
    forced = run("--cpu-only", "--force-version", "prog.py")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.startswith("ran\n") and "pyrometer: prog.py" in forced.stdout
