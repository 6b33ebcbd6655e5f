"""The profile as JSON (schema: docs/profile-schema.md), and writing a report to
its file."""

from __future__ import annotations

import json
import os
import stat
import tempfile


def render(profile: dict) -> str:
    stacks = profile.get("call_stacks")
    if not isinstance(stacks, dict):
        return json.dumps(profile, indent=1, allow_nan=False) + "\n"
    rest = json.dumps({k: v for k, v in profile.items() if k != "call_stacks"}, indent=1, allow_nan=False)
    return rest[:-2] + ',\n "call_stacks": ' + _call_stacks(stacks) + "\n}\n"


def _call_stacks(stacks: dict) -> str:
    """call_stacks with one frame and one stack a line.  Its thousands of small
    objects take json's indenting encoder (written in Python) 4-5 times as long
    as its C encoder, one object at a time (20,000 stacks 20 frames deep: 0.43 s
    against 0.09 s), and come out 1.5 times as big."""
    dumps = json.JSONEncoder(allow_nan=False, separators=(", ", ": ")).encode  # one encoder for them all
    parts = []
    for name, value in stacks.items():
        if name in ("frames", "stacks") and isinstance(value, list) and value:
            parts.append(f"  {dumps(name)}: [\n   " + ",\n   ".join(map(dumps, value)) + "\n  ]")
        else:
            parts.append(f"  {dumps(name)}: {dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n }"


def written_in_place(path: str) -> bool:
    """Whether path (its links followed) is something other than a regular
    file: a FIFO, a device (/dev/null, /dev/stdout), a socket.  Those are
    written into, never replaced: renaming a file over them would put a
    regular file where they were."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # not there (or a dangling link): a new file
        return False


def write_report(path: str, content: str) -> None:
    """Write a report to path.  A regular file, or a new one, is replaced
    atomically (write_atomically); a symbolic link stays and what it points to
    is written; a FIFO or a device is written in place."""
    if written_in_place(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
        return
    write_atomically(os.path.realpath(path) if os.path.islink(path) else path, content)


def write_atomically(path: str, content: str) -> None:
    """Write to a private temporary file beside path, then rename over it: a reader
    sees the old file or the new one, never half of one.  path must be a regular
    file or not exist (write_report decides)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".pyrometer-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            # mkstemp makes the file 0600; the report gets the mode any new file
            # gets.  Set on the descriptor, with the umask read, not set: the
            # program's threads may still run, and would create their own files
            # under whatever umask we set, however briefly.
            os.fchmod(f.fileno(), 0o666 & ~umask(directory))
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
    probe_dir = tempfile.mkdtemp(prefix=".pyrometer-umask-", dir=directory)
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
