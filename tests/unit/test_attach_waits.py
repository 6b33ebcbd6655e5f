"""attach.py's two waits on the program, read from its run directory: for the
profile to start, and for the profile once told to stop.  Each way a wait ends
is one line on stderr and an exit status; a program that may still run the
script later is left one that only removes the run directory.  These need no
sys.remote_exec (CPython 3.14+): the files are written here, as the program
would, and the process waited on is this one (alive) or one that has ended."""

import os
import subprocess
import sys

import pytest

from pyrometer.integrations import attach
from pyrometer.integrations.attached import ERROR, OUT, PROFILE, STARTED


def _run(tmp_path, pid):
    _, _, options = attach.parse([str(pid)])
    run = attach._AttachedRun(pid, None, options, None)
    run.run_dir = str(tmp_path)
    run.script = str(tmp_path / "attach.py")
    run.out = str(tmp_path / OUT)
    os.mkdir(run.out)
    (tmp_path / "attach.py").write_text("the loader\n")
    return run


def _ended_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _error(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("pyrometer: error: ")
    return lines[0][len("pyrometer: error: "):]


def _left_a_cleanup_script(run) -> bool:
    script = open(run.script).read()
    return run.keep_run_dir and "shutil.rmtree" in script and repr(run.run_dir) in script


def test_the_start_is_seen(tmp_path, capsys):
    run = _run(tmp_path, os.getpid())
    (tmp_path / OUT / STARTED).write_text("")
    assert run._wait_for_start() is None
    assert capsys.readouterr().err == ""
    assert not run.keep_run_dir


def test_the_programs_error_is_said_and_the_run_directory_not_left(tmp_path, capsys):
    run = _run(tmp_path, os.getpid())
    (tmp_path / OUT / ERROR).write_text("the program runs CPython 3.14.0\n")
    assert run._wait_for_start() == 1
    assert _error(capsys) == f"cannot profile process {os.getpid()}: the program runs CPython 3.14.0"
    assert not run.keep_run_dir and open(run.script).read() == "the loader\n"


def test_a_program_that_ended_before_the_start(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(attach, "ATTACH_TIMEOUT", 5.0)  # seen at once: a failure need not wait 30 s
    pid = _ended_pid()
    run = _run(tmp_path, pid)
    assert run._wait_for_start() == 1
    assert _error(capsys) == f"process {pid} ended before pyrometer could attach"
    assert not run.keep_run_dir


def test_a_program_that_never_runs_the_script_is_left_one_that_cleans_up(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(attach, "ATTACH_TIMEOUT", 0.1)
    run = _run(tmp_path, os.getpid())
    assert run._wait_for_start() == 1
    assert _error(capsys).startswith(f"process {os.getpid()} did not run pyrometer's attach script within 0.1 s: ")
    assert _left_a_cleanup_script(run)


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, attach._Interrupted])
def test_ctrl_c_or_sigterm_before_the_start_leaves_one_that_cleans_up(tmp_path, capsys, monkeypatch, interruption):
    def interrupted(path):
        raise interruption()
    run = _run(tmp_path, os.getpid())
    monkeypatch.setattr(attach, "_read", interrupted)
    assert run._wait_for_start() == 1
    assert _error(capsys) == f"interrupted before process {os.getpid()} ran pyrometer's attach script"
    assert _left_a_cleanup_script(run)


def test_the_profile_is_read(tmp_path, capsys):
    run = _run(tmp_path, os.getpid())
    (tmp_path / OUT / PROFILE).write_bytes(b'{"a": 1}')
    assert run._wait_for_profile() is None
    assert run.data == b'{"a": 1}' and capsys.readouterr().err == ""


def test_the_programs_error_instead_of_its_profile(tmp_path, capsys):
    run = _run(tmp_path, os.getpid())
    (tmp_path / OUT / ERROR).write_text("OSError: no space left\n")
    assert run._wait_for_profile() == 1
    assert _error(capsys) == f"process {os.getpid()}: OSError: no space left"


def test_a_program_that_ended_without_its_profile(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(attach, "PROFILE_TIMEOUT", 5.0)  # seen at once: a failure need not wait 120 s
    pid = _ended_pid()
    run = _run(tmp_path, pid)
    assert run._wait_for_profile() == 1
    assert _error(capsys) == f"process {pid} ended during the window without writing its profile (killed by a signal?)"


def test_a_profile_that_does_not_come(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(attach, "PROFILE_TIMEOUT", 0.1)
    run = _run(tmp_path, os.getpid())
    assert run._wait_for_profile() == 1
    assert _error(capsys) == f"process {os.getpid()} did not write its profile within 0.1 s"


def test_sigterm_while_the_profile_is_written(tmp_path, capsys, monkeypatch):
    def interrupted(path):
        raise attach._Interrupted()
    run = _run(tmp_path, os.getpid())
    monkeypatch.setattr(attach, "_read", interrupted)
    assert run._wait_for_profile() == 1
    assert _error(capsys) == f"interrupted while process {os.getpid()} wrote its profile (it is profiled no more)"
