"""The C unit tests (tests/c) for the pure-C pieces of the measuring core.

Builds them with tests/c/Makefile into a temporary folder and runs them plain,
under AddressSanitizer + UndefinedBehaviorSanitizer, and under valgrind.  Each
known-bug test runs on its own as a strict xfail: it turns into a failure the day
its bug is fixed, so that it is moved into the ordinary tests.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

C_TESTS = pathlib.Path(__file__).resolve().parent / "c"

# Known-bug tests in tests/c (UNIT_KNOWN_BUG), by name; kept equal to the binary's
# own list by test_known_bug_list_is_current.
KNOWN_BUGS: dict[str, str] = {}

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("make") is None,
    reason="the C unit tests need gcc and make",
)


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


def sanitizers_available(build_dir: pathlib.Path) -> bool:
    source = build_dir / "probe.c"
    source.write_text("int main(void) { return 0; }\n")
    result = subprocess.run(
        ["gcc", "-fsanitize=address,undefined", "-o", str(build_dir / "probe"), str(source)],
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
