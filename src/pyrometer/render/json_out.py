"""The profile as JSON (schema: docs/profile-schema.md), and writing a report to
its file."""

from __future__ import annotations

import json
import os
import stat

from .. import private_files
from ..private_files import written_in_place


# The profile is laid out one member per line down to its records (a line or
# function entry, a frame, a stack, a process: objects that hold no object),
# each of which, like every list of plain values, is written on one line by the
# json module's C encoder.  json.dumps with indent= encodes in Python instead:
# 2-4 times as long on an ordinary profile (37 ms of the 48 between the program's
# end and the profile on disk, under cProfile), 4-5 times on 20,000 call stacks,
# and the file 1.2-1.5 times as big.
_encode = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode


def render(profile: dict) -> str:
    global _QuietLine
    if _QuietLine is None:
        from ..model.schema import QuietLine  # here: importing json_out alone (chosen_name) stays cheap
        _QuietLine = QuietLine
    parts: list[str] = []
    _lay_out(profile, 0, parts)
    parts.append("\n")
    return "".join(parts)


_QuietLine = None
# The encoding of the members after lineno and line of the last quiet lines'
# shared figures (model.schema.QuietLine): (figures, "...}") or (figures, None)
# where a figure holds an object, which the general layout puts on lines of
# its own.
_quiet_tail: tuple[dict, str | None] | None = None


def _quiet(entry) -> str | None:
    """A quiet line written from its shared figures' encoding; None where
    the entry no longer holds them (written as any entry)."""
    global _quiet_tail
    figures = entry.figures
    if _quiet_tail is None or _quiet_tail[0] is not figures:
        tail = None if not figures or any(_holds_objects(v) for v in figures.values()) else _encode(figures)[1:]
        _quiet_tail = (figures, tail)
    tail = _quiet_tail[1]
    if tail is None or not entry.unchanged():
        return None
    return f'{{"lineno": {_encode(entry["lineno"])}, "line": {_encode(entry["line"])}, {tail}'


def _holds_objects(value) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, list) and any(isinstance(v, dict) for v in value)


def _lay_out(value, depth: int, parts: list[str]) -> None:
    if type(value) is _QuietLine:
        quiet = _quiet(value)
        if quiet is not None:
            parts.append(quiet)
            return
    if not value:
        parts.append(_encode(value))
    elif isinstance(value, dict) and any(_holds_objects(v) for v in value.values()):
        _members(parts, depth, "{", "}", [(_key(k), v) for k, v in value.items()])
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        _members(parts, depth, "[", "]", [("", v) for v in value])
    else:
        parts.append(_encode(value))  # a record, a plain value, or a list of them


def _key(key) -> str:
    """A member's key and its colon, as json writes it (a number or None
    becomes a string: 1 -> "1", None -> "null")."""
    if isinstance(key, str):
        return _encode(key) + ": "
    return _encode({key: 0})[1:-2]  # {"1": 0} -> "1": 


def _members(parts: list[str], depth: int, open_: str, close: str, members: list) -> None:
    inner = "\n" + " " * (depth + 1)
    parts.append(open_)
    for i, (key, v) in enumerate(members):
        parts.append(inner if i == 0 else "," + inner)
        parts.append(key)
        _lay_out(v, depth + 1, parts)
    parts.append("\n" + " " * depth + close)


# The files whose names pyrometer chose itself (a default, not a name the user
# gave), by absolute path: chosen_name().
_CHOSEN: set[str] = set()


def chosen_name(path: str) -> str:
    """Marks path as a name pyrometer chose (pyrometer-profile.json, ...):
    write_report replaces whatever is there, a symbolic link or a FIFO
    included, and never writes through it: someone else's link planted in a
    shared working directory must not make pyrometer replace its target."""
    _CHOSEN.add(os.path.abspath(path))
    return path


def write_report(path: str, content: str | bytes) -> None:
    """Write a report to path.  A regular file, or a new one, is replaced
    atomically (write_atomically).  For a name the user gave, a symbolic link
    stays and what it points to is written, and a FIFO or a device is written
    in place; a name pyrometer chose (chosen_name) is always replaced."""
    if os.path.abspath(path) in _CHOSEN:
        write_atomically(path, content)
        return
    if written_in_place(path):
        with (open(path, "wb") if isinstance(content, bytes) else open(path, "w", encoding="utf-8")) as f:
            f.write(content)
        return
    write_atomically(os.path.realpath(path) if os.path.islink(path) else path, content)


def write_atomically(path: str, content: str | bytes) -> None:
    """Write to a private temporary file beside path, then rename over it: a reader
    sees the old file or the new one, never half of one.  What was at path is
    replaced, never followed (write_report decides what path is).  A regular
    file replaced keeps its permissions (a 0600 file stays 0600); a new one
    gets those any new file gets."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        before = os.lstat(path)
        mode = stat.S_IMODE(before.st_mode) if stat.S_ISREG(before.st_mode) else None
    except OSError:
        mode = None
    fd, tmp = private_files.make_file(directory, ".pyrometer-", ".tmp")
    try:
        # bytes: the gzipped --pprof export
        with (os.fdopen(fd, "wb") if isinstance(content, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(content)
            f.flush()
            # mkstemp makes the file 0600; the report gets the mode any new file
            # gets.  Set on the descriptor, with the umask read, not set: the
            # program's threads may still run, and would create their own files
            # under whatever umask we set, however briefly.
            os.fchmod(f.fileno(), mode if mode is not None else 0o666 & ~umask(directory))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def umask(directory: str | None = None) -> int:
    """This process's umask, without changing it (os.umask() can only set it).
    Linux (4.7 and later) shows it in /proc/self/status; elsewhere it is what a
    file created with mode 0666 (in directory, or a private temporary one) lacks."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    probe_dir = private_files.make_directory(directory, ".pyrometer-umask-")
    probe = os.path.join(probe_dir, "probe")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        try:
            return 0o666 & ~os.fstat(fd).st_mode
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass
        os.rmdir(probe_dir)
