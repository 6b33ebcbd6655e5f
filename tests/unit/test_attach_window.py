"""What an attached program writes as its window ends, and the profile the
command builds of it (attached.window_data, attached.window_profile): the
program's part is its raw collection, so that a program whose threads keep the
GIL from its attach thread is not kept building a profile there.  These need
no sys.remote_exec (CPython 3.14+): an in-process run stands for the window."""

import os
import pickle

import pytest

from pyrometer.integrations.attached import window_data, window_profile
from pyrometer.integrations.inprocess import InProcessRun, default_options


WORK = """
def busy():
    total = 0
    for i in range(3_000_000):
        total += i % 7  # BUSY_LINE
    return total
busy()
"""


def _window(tmp_path) -> bytes:
    work = tmp_path / "work.py"
    work.write_text(WORK)
    run = InProcessRun(default_options(cpu_only=True), "the program", program_directory=str(tmp_path))
    run.start()
    exec(compile(WORK, str(work), "exec"), {})
    return window_data(run, run.collect(), "the command ended the window")


def test_the_command_builds_the_programs_window(tmp_path):
    profile = window_profile(_window(tmp_path))
    assert profile["program"] == "the program"
    assert profile["processes"][0]["pid"] == os.getpid()
    assert any(n.startswith(f"attached to pid {os.getpid()} for ") and n.endswith("the command ended the window")
               for n in profile["notices"]), profile["notices"]
    lines = profile["files"][str(tmp_path / "work.py")]["lines"]
    busy = next(e for e in lines if "BUSY_LINE" in e["line"])
    assert busy.get("n_cpu_python_sec", 0) > 0, busy
    assert 0 < profile["elapsed_time_sec"] < 60


class _Runs:
    def __reduce__(self):
        return (os.system, ("echo ran > ran",))


def test_data_naming_any_other_class_is_refused_unrun(tmp_path, monkeypatch):
    """The command may be root, the program another user's: its file names the
    core's record types and nothing else."""
    monkeypatch.chdir(tmp_path)
    for data in (pickle.dumps(_Runs()), pickle.dumps({"raw": _Runs(), "built_with": {}, "cwd": "."}),
                 b"not a pickle", pickle.dumps({"raw": {}}), b""):
        with pytest.raises(ValueError, match="not an attached window's data"):
            window_profile(data)
    assert not (tmp_path / "ran").exists()
