"""What pyrometer says to the user on standard error: its errors, its one-line
notes, and the problems it finds before a program runs (an interpreter it
cannot profile, a report it could not write), in the same words wherever they
arise (the command, attach, diff, the live view, in-process profiling, the
pytest plugin)."""

from __future__ import annotations

import os
import sys


def error(message: str, status: int = 2) -> int:
    from .visible import visible  # a message may quote a file name: nothing raw to the terminal
    print(f"pyrometer: error: {visible(message)}", file=sys.stderr)
    return status


def say(line: str) -> None:
    """One line for the user on the real standard error: the program may have
    replaced sys.stderr with an object of its own (which must not get
    pyrometer's words), or closed it."""
    for stream in (sys.__stderr__, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.write(line + "\n")
            stream.flush()
            return
        except (OSError, ValueError):
            continue


def interpreter_problem(force_version: bool) -> str | None:
    """Why this interpreter cannot be profiled, in one line, or None.  The
    measuring core says it: for a free-threaded build or a version without a
    frame layout it is built as a module that refuses to load, with the reason."""
    try:
        from . import _core
    except ImportError as e:
        return str(e).splitlines()[0] if str(e) else "pyrometer's measuring core cannot be loaded"
    if not _core.VERSION_TESTED and not force_version:
        v = sys.version_info
        return (f"pyrometer supports CPython {_core.TESTED_VERSIONS}; this is CPython "
                f"{v.major}.{v.minor}.{v.micro}, untested (this build reads its frames with the "
                f"{_core.FRAME_LAYOUT} layout): add --force-version to try anyway")
    return None


def unwritable(path: str) -> str | None:
    """Why the report could not be written to path, checked before the program
    runs rather than after it."""
    from .private_files import written_in_place
    if os.path.isdir(path):
        return f"cannot write the report to {path}: it is a directory"
    if written_in_place(path):  # a FIFO or a device: written into, not replaced
        return None if os.access(path, os.W_OK) else f"cannot write the report to {path}: it is not writable"
    # A regular file, new or replaced, is made in its directory (a link's: its target's)
    directory = os.path.dirname(os.path.abspath(os.path.realpath(path) if os.path.islink(path) else path))
    if not os.path.isdir(directory):
        return f"cannot write the report to {path}: no directory {directory}"
    if not os.access(directory, os.W_OK):
        return f"cannot write the report to {path}: {directory} is not writable"
    return None
