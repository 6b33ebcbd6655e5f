"""The C unit tests (tests/c) for the measuring core.

Builds them with tests/c/Makefile into a temporary folder and runs them:

- test_units, the pure-C pieces: plain, under AddressSanitizer +
  UndefinedBehaviorSanitizer, and under valgrind;
- test_memhooks, the preloaded memory library (libpyrometer_memhooks.so): with the
  library preloaded, plain, with a variant whose first lookup allocates (the
  bootstrap heap), built with UndefinedBehaviorSanitizer, and under valgrind (why
  not ASan: see tests/c/Makefile);
- real programs (python3 with numpy, sqlite3, ctypes, a subprocess; ls; git) with
  the library preloaded and started (tests/c/memhooks/autostart.c), which must
  print what they print without it.

Each known-bug test runs on its own as a strict xfail: it turns into a failure the
day its bug is fixed, so that it is moved into the ordinary tests.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

C_TESTS = pathlib.Path(__file__).resolve().parent

# Known-bug tests in tests/c (UNIT_KNOWN_BUG), by name; kept equal to each binary's
# own list by test_known_bug_list_is_current and test_memhooks_known_bug_list_is_current.
KNOWN_BUGS: dict[str, str] = {}
MEMHOOKS_KNOWN_BUGS: dict[str, str] = {}

# once: C built by gcc, the same whichever CPython runs pytest (tests/pythons.py
# runs them in one suite).
pytestmark = [pytest.mark.once, pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("make") is None,
    reason="the C unit tests need gcc and make",
)]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("c_units")


def make(build_dir: pathlib.Path, target: str, args: str = "") -> subprocess.CompletedProcess[str]:
    command = ["make", "-s", "-C", str(C_TESTS), f"BUILD={build_dir}", "CC=gcc", target]
    if args:
        command.append(f"ARGS={args}")
    # Generous: the valgrind run takes about 20 s; a hang (a table that never finds a
    # free slot) should still end as a failure.
    return subprocess.run(command, capture_output=True, text=True, timeout=540)


def assert_passed(result: subprocess.CompletedProcess[str]) -> None:
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(result.args)} exited with {result.returncode}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}",
            pytrace=False,
        )


def sanitizers_available(build_dir: pathlib.Path, sanitizers: str = "address,undefined") -> bool:
    source = build_dir / "probe.c"
    source.write_text("int main(void) { return 0; }\n")
    result = subprocess.run(
        ["gcc", f"-fsanitize={sanitizers}", "-o", str(build_dir / "probe"), str(source)],
        capture_output=True,
    )
    return result.returncode == 0


def test_plain(build_dir: pathlib.Path) -> None:
    assert_passed(make(build_dir, "check-plain"))


def test_asan_ubsan(build_dir: pathlib.Path) -> None:
    if not sanitizers_available(build_dir):
        pytest.skip("gcc here cannot link -fsanitize=address,undefined (libasan/libubsan missing)")
    assert_passed(make(build_dir, "check-asan"))


def test_valgrind(build_dir: pathlib.Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    assert_passed(make(build_dir, "check-valgrind"))


def test_known_bug_list_is_current(build_dir: pathlib.Path) -> None:
    listed = make(build_dir, "check-plain", "--list-known-bugs")
    assert_passed(listed)
    assert sorted(listed.stdout.split()) == sorted(KNOWN_BUGS)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=why)) for name, why in KNOWN_BUGS.items()],
)
def test_known_bug(build_dir: pathlib.Path, name: str) -> None:
    assert_passed(make(build_dir, "check-plain", f"--known-bug {name}"))


# ---- memhooks: the preloaded library ------------------------------------------------

def test_memhooks_plain(build_dir: pathlib.Path) -> None:
    assert_passed(make(build_dir, "check-memhooks-plain"))


def test_memhooks_bootstrap(build_dir: pathlib.Path) -> None:
    # A library whose first dlsym allocates: blocks from the bootstrap heap.
    assert_passed(make(build_dir, "check-memhooks-bootstrap"))


def test_memhooks_ubsan(build_dir: pathlib.Path) -> None:
    if not sanitizers_available(build_dir, "undefined"):
        pytest.skip("gcc here cannot link -fsanitize=undefined (libubsan missing)")
    assert_passed(make(build_dir, "check-memhooks-ubsan"))


def test_memhooks_valgrind(build_dir: pathlib.Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    assert_passed(make(build_dir, "check-memhooks-valgrind"))


def test_memhooks_known_bug_list_is_current(build_dir: pathlib.Path) -> None:
    listed = make(build_dir, "check-memhooks-plain", "--list-known-bugs")
    assert_passed(listed)
    names = [line for line in listed.stdout.split() if line.startswith("memhooks_")]
    assert sorted(names) == sorted(MEMHOOKS_KNOWN_BUGS)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=why))
     for name, why in MEMHOOKS_KNOWN_BUGS.items()],
)
def test_memhooks_known_bug(build_dir: pathlib.Path, name: str) -> None:
    assert_passed(make(build_dir, "check-memhooks-plain", f"--known-bug {name}"))


# Real programs, run twice: as they are, and with the library preloaded and started
# by libmemhooks_autostart.so (window 4 KiB, every sampled block watched).  Same
# output, exit status 0, and the autostart report shows that the hooks counted.

NUMPY = """
import numpy as np
a = (np.arange(1_000_000) % 7).astype(np.float64)
b = a.reshape(1000, 1000)
c = b @ b.T
d = np.concatenate([a, a[::-1]])
d.sort()
print(int(c.sum()), int(d[-10:].sum()), float(np.linalg.norm(np.ones(100))))
"""

SQLITE = """
import sqlite3
con = sqlite3.connect(":memory:")
con.execute("create table t (a integer, b text)")
con.executemany("insert into t values (?, ?)", ((i, str(i) * 10) for i in range(20000)))
con.execute("create index t_b on t (b)")
print(con.execute("select count(*), sum(a), max(length(b)) from t").fetchone())
print(con.execute("select a from t where b = ?", ("1234" * 10,)).fetchone())
"""

CTYPES = """
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.realloc.restype = ctypes.c_void_p
libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
p = libc.malloc(1 << 20)
ctypes.memset(p, 65, 1 << 20)
p = libc.realloc(p, 4 << 20)
buf = ctypes.create_string_buffer(16)
ctypes.memmove(buf, p + (1 << 20) - 15, 15)
libc.free(p)
print(buf.value, ctypes.sizeof(ctypes.c_void_p))
"""

SUBPROCESS = """
import subprocess, sys
child = subprocess.run([sys.executable, "-c", "print(sum(range(10**6)))"],
                       capture_output=True, text=True, check=True)
print(child.stdout.strip())
print(subprocess.run(["ls", "/"], capture_output=True).returncode)
"""

THREADS = """
import threading
totals = [0] * 8
def work(i):
    for n in range(2000):
        totals[i] += len([bytes(n % 300) for _ in range(20)])
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sum(totals))
"""

PROGRAMS = {
    "python-numpy": ([sys.executable, "-c", NUMPY], True),
    "python-sqlite3": ([sys.executable, "-c", SQLITE], True),
    "python-ctypes": ([sys.executable, "-c", CTYPES], True),
    "python-subprocess": ([sys.executable, "-c", SUBPROCESS], True),
    "python-threads": ([sys.executable, "-c", THREADS], True),
    "ls": (["ls", "-la", "{listing}"], False),
    "git-version": (["git", "--version"], False),
}


@pytest.fixture(scope="module")
def memhooks_libraries(build_dir: pathlib.Path) -> str:
    built = make(build_dir, "memhooks-programs")
    assert_passed(built)
    return f"{build_dir / 'plain' / 'libpyrometer_memhooks.so'}:{build_dir / 'plain' / 'libmemhooks_autostart.so'}"


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_memhooks_real_program(memhooks_libraries: str, tmp_path: pathlib.Path, program: str) -> None:
    command, is_python = PROGRAMS[program]
    if command[0] != sys.executable and shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed")
    if program == "python-numpy" and importlib.util.find_spec("numpy") is None:
        pytest.skip("numpy is not installed")
    listing = tmp_path / "listing"
    listing.mkdir()
    for i in range(20):
        (listing / f"file{i}.txt").write_text("x" * i)
    command = [part.replace("{listing}", str(listing)) for part in command]
    report = tmp_path / "report.txt"
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    plain = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert plain.returncode == 0, plain.stderr
    preloaded = subprocess.run(
        command, capture_output=True, text=True, timeout=120,
        env={**env, "LD_PRELOAD": memhooks_libraries,
             "MEMHOOKS_AUTOSTART_WINDOW": "4096", "MEMHOOKS_AUTOSTART_REPORT": str(report)},
    )
    assert preloaded.returncode == 0, preloaded.stderr
    assert preloaded.stdout == plain.stdout
    # One line per process that ran with the hooks: pid ALLOC FREE COPY freed evicted footprint.
    lines = [[int(field) for field in line.split()] for line in report.read_text().splitlines()]
    assert lines, "the autostart library wrote no report: the hooks did not run"
    assert all(len(line) == 7 for line in lines)
    if is_python:
        assert max(line[1] for line in lines) > 10, lines  # ALLOC samples
        assert max(line[4] + line[5] for line in lines) > 0, lines  # watched blocks told
