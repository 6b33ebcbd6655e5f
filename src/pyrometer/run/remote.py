"""``pyrometer --off --pid N`` and ``pyrometer --on --pid N``: pause or resume a
program that runs under pyrometer, and the child processes it profiles.

The command is a real-time signal (``_core.CONTROL_SIGNAL``) sent with sigqueue,
its value saying pause or resume; the measuring core's handler only records it,
and the program never sees it (csrc/control/control.c).  A real-time signal that
reaches a process without that handler kills it (its default action), so a
process gets one only once it is shown to be a profiled one:

* it belongs to this user (``/proc/N`` is ours: sigqueue would refuse anyway,
  but with a less useful message);
* pyrometer's measuring core is loaded in it (``/proc/N/maps`` names a
  ``pyrometer/_core`` module), so the handler it caught the signal with is ours
  and not the program's own;
* it catches the signal (``/proc/N/status``, ``SigCgt``): the core installs the
  handler when profiling starts and never removes it, so that a command arriving
  as the run ends is still harmless.

The children: every descendant of N (by the parent ids in ``/proc``) that passes
the same test.  A child started later reads the last command from the run
directory (children.CONTROL_FILE), which the processes reached write.
"""

from __future__ import annotations

import os
import sys


def _proc(pid: int, name: str) -> str | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _catches(status: str, signum: int) -> bool:
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            try:
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
            except (IndexError, ValueError):
                return False
    return False


def _core_loaded(maps: str) -> bool:
    """Whether a process's memory map has pyrometer's extension module: a
    `_core.*.so` under a directory whose path names pyrometer (the installed
    package's, or a build directory's in an editable install)."""
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue  # an anonymous mapping
        directory, name = os.path.split(fields[5].strip())
        if name.startswith("_core.") and ".so" in name and "pyrometer" in directory:
            return True
    return False


def why_not_profiled(pid: int, signum: int) -> str | None:
    """Why pid cannot be sent a command, in a few words, or None when it can."""
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return f"no process {pid}"
    except OSError as e:
        return f"cannot look at process {pid}: {e.strerror}"
    if owner != os.getuid():
        return f"process {pid} belongs to another user"
    maps = _proc(pid, "maps")
    status = _proc(pid, "status")
    if maps is None or status is None:
        return f"no process {pid}" if not os.path.exists(f"/proc/{pid}") else f"cannot look at process {pid}"
    if not _core_loaded(maps) or not _catches(status, signum):
        return f"process {pid} is not running under pyrometer"
    return None


def _descendants(pid: int) -> list[int]:
    """Every process below pid, parents before their children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _proc(int(entry), "stat")
        if stat is None:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in sorted(children.get(todo.pop(0), [])):
            out.append(child)
            todo.append(child)
    return out


def main(pid: int, resume: bool) -> int:
    from ..visible import visible
    try:
        from .. import _core
        signum = _core.CONTROL_SIGNAL
    except (ImportError, AttributeError) as e:  # an interpreter pyrometer cannot run on
        print(f"pyrometer: error: {visible(str(e).splitlines()[0] if str(e) else 'no measuring core')}",
              file=sys.stderr)
        return 2
    problem = why_not_profiled(pid, signum)
    if problem is not None:
        print(f"pyrometer: error: {visible(problem)}: nothing sent", file=sys.stderr)
        return 2
    try:
        _core.control_send(pid, resume)
    except OSError as e:
        print(f"pyrometer: error: cannot signal process {pid}: {e.strerror}", file=sys.stderr)
        return 1
    reached = 0
    for child in _descendants(pid):
        if why_not_profiled(child, signum) is None:
            try:
                _core.control_send(child, resume)
                reached += 1
            except OSError:
                pass  # it ended meanwhile
    also = f" and {reached} child process{'es' if reached != 1 else ''}" if reached else ""
    print(f"pyrometer: {'resumed' if resume else 'paused'} process {pid}{also}", file=sys.stderr)
    return 0
