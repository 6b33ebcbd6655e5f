"""pyrometer top (--live): a terminal view, redrawn every second, of the lines
and functions taking time and memory now, while the program runs.

It is a consumer of the periodic reports (periodic.py, csrc/periodic/periodic.c):
the C core hands the aggregates every REFRESH_S to a separate, niced process,
the view, which builds the profile with the model, takes what changed since
the previous one (model.since) and draws it (render/live.py) on the terminal's
alternate screen.  The program never waits for a frame to be drawn.

The program's own output: the view owns the terminal while the program runs,
so the program's standard output and error, where they are that terminal, are
moved onto a pseudo-terminal (still a terminal to the program: isatty, line
buffering, its size, colours).  The view reads it, shows its last lines under
the tables and keeps all of it in a file; when the run ends it leaves the
alternate screen and writes that output, byte for byte, onto the normal screen,
where it stays after the exit, followed by the usual report.  Standard input
stays the terminal.

The terminal is given back on every way out: the program's end, Ctrl-C (the
view is in a process group of its own and only the program gets it), the
program crashing (its traceback is part of its output), a termination signal
(the profile is written on the way: cli.py), the program replacing itself
(exec), and the view's own errors (it leaves the alternate screen, shows what
was held and passes the output through from then on).  Where the view process
itself had to be killed, this process leaves the alternate screen and writes
the held output instead.  Where this process dies without a word (SIGKILL), the
view sees its input end and gives the terminal back, with a line saying so; the
shell wakes at the same moment, and a prompt it prints before that is drawn on
the alternate screen and lost (press Enter for another).

The view does not change the terminal's modes (no raw mode, nothing read from
the keyboard): a process outside the terminal's foreground group may write to
it (SIGTTOU is ignored for when the terminal asks otherwise), but not change it.
"""

from __future__ import annotations

import fcntl
import marshal
import os
import re
import select
import signal
import sys
import tempfile
import termios
import time

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from .periodic import PeriodicWriter, _build, _read_exactly

REFRESH_S = 1.0

# The view process's descriptors besides its socket (0 and 1): the terminal,
# the pseudo-terminal the program writes to, and the file that holds the
# program's output until the end.
TERMINAL_FD, OUTPUT_FD, HELD_FD = 3, 4, 5

ENTER = b"\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"  # alternate screen, cursor hidden, cleared
LEAVE = b"\x1b[0m\x1b[?25h\x1b[?1049l"        # plain attributes, cursor shown, normal screen

# After the end, output still arriving (from a child process the program left
# running) is awaited this long after its last bytes, and this long in all.
DRAIN_IDLE_S, DRAIN_S = 0.2, 2.0
# The output pane is redrawn between snapshots at most this often.
OUTPUT_REDRAW_S = 0.25


def terminal_problem() -> str | None:
    """Why the live view cannot be shown here, or None."""
    if not os.isatty(1):
        return ("pyrometer top draws on a terminal and standard output is not one: run it in a "
                "terminal (for a report rewritten while the program runs, use --profile-interval "
                "SECONDS)")
    return None


def _same_terminal(fd: int, terminal: int) -> bool:
    try:
        a, b = os.fstat(fd), os.fstat(terminal)
    except OSError:
        return False
    return os.isatty(fd) and (a.st_rdev, a.st_dev) == (b.st_rdev, b.st_dev)


def _high(fd: int) -> int:
    """fd moved above the view's fixed descriptors (posix_spawn's dup2s must not
    overwrite a source before it is copied)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class LiveView(PeriodicWriter):
    """The view process, started like the periodic writer, with the terminal
    and the program's output besides."""
    CHILD = "pyrometer.run.top"
    # The view replays the held output before it ends: a lot of it takes time.
    EXIT_S = 30.0

    def __init__(self, job: dict[str, Any]):
        super().__init__(REFRESH_S, job)
        self._terminal = self._output = self._held = -1
        self._moved: dict[int, int] = {}  # 1, 2 -> the terminal, kept while they are the pseudo-terminal

    def spawn(self) -> None:
        try:
            self._terminal = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 10)
            master, slave = os.openpty()
            self._output = _high(master)
            held, name = tempfile.mkstemp(prefix="pyrometer-top-")
            os.unlink(name)
            self._held = _high(held)
        except OSError as e:
            self.error = f"cannot start the live view: {e}"
            self._close_own()
            return
        try:
            # The program's terminal as it was: its modes and size.
            termios.tcsetattr(slave, termios.TCSANOW, termios.tcgetattr(1))
            fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(1, termios.TIOCGWINSZ, b"\0" * 8))
        except (OSError, termios.error):
            pass  # a pseudo-terminal's defaults
        super().spawn()
        os.close(self._output)  # the view's now
        self._output = -1
        if self._pid == 0:
            os.close(slave)
            self._close_own()
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        for fd in (1, 2):
            if _same_terminal(fd, self._terminal):
                self._moved[fd] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
                os.dup2(slave, fd)
        os.close(slave)

    def _announced(self) -> list[str]:
        return []  # no file of snapshots to find

    def _more_descriptors(self) -> list[tuple]:
        return [(os.POSIX_SPAWN_DUP2, self._terminal, TERMINAL_FD),
                (os.POSIX_SPAWN_DUP2, self._output, OUTPUT_FD),
                (os.POSIX_SPAWN_DUP2, self._held, HELD_FD)]

    def _patience(self, quiet: bool) -> float:
        return self.EXIT_S  # the view gives the terminal back before it ends

    def stop(self) -> None:
        """The program's output back on the terminal, then the view told the run
        is over: it gives the terminal back and shows what it held."""
        self._give_back_output()
        super().stop()
        if self._held >= 0 and not self.ended_itself:
            # Killed before it gave the terminal back: done here, the output too.
            try:
                _write_all(self._terminal, LEAVE)
                _replay(self._held, self._terminal)
            except OSError:
                pass
        self._close_own()

    def _give_back_output(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        for fd, terminal in self._moved.items():
            os.dup2(terminal, fd)
            os.close(terminal)
        self._moved.clear()

    def _close_own(self) -> None:
        for fd in (self._terminal, self._output, self._held):
            if fd >= 0:
                os.close(fd)
        self._terminal = self._output = self._held = -1


def _replay(held: int, terminal: int) -> None:
    """The program's output held so far, onto the terminal, and let go."""
    os.lseek(held, 0, os.SEEK_SET)
    while chunk := os.read(held, 1 << 16):
        _write_all(terminal, chunk)
    os.ftruncate(held, 0)
    os.lseek(held, 0, os.SEEK_SET)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


def _draw(fd: int, change: dict[str, Any] | None, program: str, output: list[str],
          note: str | None = None) -> os.terminal_size:
    """One frame on the terminal fd; its size."""
    from ..render.live import frame
    size = os.get_terminal_size(fd)
    if not size.columns or not size.lines:  # a terminal that does not say
        size = os.terminal_size((80, 24))
    lines = frame(change, program=program, output=output, width=size.columns, height=size.lines,
                  color="NO_COLOR" not in os.environ, note=note)
    # Home, each line cleared to its end, the rest of the screen cleared: no
    # flicker, and no newline after the last row (it would scroll).
    _write_all(fd, ("\x1b[H" + "\x1b[K\n".join(lines) + "\x1b[K\x1b[J").encode("utf-8", "replace"))
    return size


# What the output pane leaves out of the program's lines: escape sequences
# (colours, cursor moves), which would act on the view's screen.
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")


def output_lines(tail: bytes) -> list[str]:
    """The last lines of the program's output as the pane shows them: decoded,
    escape sequences left out, a line rewritten with carriage returns (a
    progress bar) as it last stood."""
    text = _ESCAPES.sub("", tail.decode("utf-8", "replace"))
    lines = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n")]
    if lines and not lines[-1]:
        lines.pop()
    return lines


class _View:
    """The view process's state: the screen, the program's output, the last profile."""

    def __init__(self) -> None:
        self.on_screen = False
        self.output_open = True
        self.passthrough = False  # after an error of the view's own: the output goes straight through
        self.abrupt = False       # the program's process ended without saying the run was over
        self.tail = b""
        self.before: dict[str, Any] | None = None
        self.change: dict[str, Any] | None = None  # what the screen shows
        self.drawn = 0.0
        self.stale = False  # output arrived that the screen does not show yet
        self.program = ""
        self.size = os.terminal_size((0, 0))

    def enter(self) -> None:
        os.set_blocking(OUTPUT_FD, False)
        _write_all(TERMINAL_FD, ENTER)
        self.on_screen = True
        self.draw(None)

    def run(self) -> None:
        """Until the run is over (or the program's process is gone)."""
        while True:
            # The output pane is redrawn between snapshots, at most every
            # OUTPUT_REDRAW_S: new output waits for that.
            wait = max(self.drawn + OUTPUT_REDRAW_S - time.monotonic(), 0.0) if self.stale and self.on_screen else None
            ready, _, _ = select.select([0] + ([OUTPUT_FD] if self.output_open else []), [], [], wait)
            if OUTPUT_FD in ready:
                self.read_output()
            if self.stale and self.on_screen and time.monotonic() - self.drawn >= OUTPUT_REDRAW_S:
                self.draw(self.change)
            if 0 not in ready:
                continue
            header = _read_exactly(0, 8)
            if not header:
                self.abrupt = True
                return
            size = int.from_bytes(header, "little")
            if size == 0:
                return  # the run is over; its report is the program's process's to write
            job = marshal.loads(_read_exactly(0, size))
            self.show(job)
            try:
                os.write(1, b"ok\n")
            except OSError:
                self.abrupt = True
                return

    def show(self, job: dict[str, Any]) -> None:
        if self.passthrough:
            return
        from .. import model
        try:
            profile = _build(model, job, ended_by=None)
            self.change = model.since(self.before, profile)
            self.before = profile
            self.program = job["program"]
            self.draw(self.change)
        except Exception as e:  # the view's own error: the terminal back, the run goes on
            self.fail(f"{type(e).__name__}: {e}")

    def draw(self, change: dict[str, Any] | None) -> None:
        size = _draw(TERMINAL_FD, change, self.program, output_lines(self.tail),
                     "Ctrl-C ends the program; its profile is written as it ends")
        if size != self.size:
            self.size = size
            try:  # the program's terminal takes the new size too
                fcntl.ioctl(OUTPUT_FD, termios.TIOCSWINSZ, fcntl.ioctl(TERMINAL_FD, termios.TIOCGWINSZ, b"\0" * 8))
            except OSError:
                pass
        self.drawn = time.monotonic()
        self.stale = False

    def read_output(self) -> None:
        while True:
            try:
                data = os.read(OUTPUT_FD, 1 << 16)
            except BlockingIOError:
                return
            except OSError:  # EIO: nothing has the pseudo-terminal open any more
                data = b""
            if not data:
                self.output_open = False
                return
            if self.passthrough:
                _write_all(TERMINAL_FD, data)
            else:
                _write_all(HELD_FD, data)
                self.tail = (self.tail + data)[-8192:]
                self.stale = True

    def drain(self) -> None:
        """Output written before the end, and from child processes still running, bounded."""
        deadline = time.monotonic() + DRAIN_S
        while self.output_open:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([OUTPUT_FD], [], [], min(DRAIN_IDLE_S, left))[0]:
                return
            self.read_output()

    def leave(self) -> None:
        """The normal screen back, with the program's output held so far on it."""
        if not self.on_screen:
            return
        self.on_screen = False
        _write_all(TERMINAL_FD, LEAVE)
        _replay(HELD_FD, TERMINAL_FD)

    def fail(self, why: str) -> None:
        self.leave()
        self.passthrough = True
        _write_all(TERMINAL_FD, f"pyrometer: the live view stopped ({why}); the program's output "
                                f"follows as it comes, and its profile is written at the end\n".encode())


def child_main() -> None:
    """The view process (started by LiveView.spawn)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the program's
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # draw from outside the foreground group
    try:
        os.nice(10)
    except OSError:
        pass
    view = _View()
    try:
        while True:
            try:
                if not view.on_screen and not view.passthrough:
                    view.enter()
                view.run()
                break
            except Exception as e:
                # The view's own error: the terminal back, and the program's
                # output passed through while it runs on (this process must
                # live: the program writes to the pseudo-terminal it reads).
                if view.passthrough:
                    raise
                view.fail(f"{type(e).__name__}: {e}")
    finally:
        view.drain()
        view.leave()
    if view.abrupt:
        _write_all(TERMINAL_FD, b"pyrometer: the program ended without writing its profile (killed, or a "
                                b"crash in native code)\n")


# ---------------------------------------------------------------------------
# pyrometer top --pid N: the view of a program already running under pyrometer,
# from a second terminal.  Such a program writes its profile every few seconds
# where it was started with --profile-interval S --json; the view reads each
# new one and shows what changed since the one before, as above, until the
# program's final profile arrives.  The program's own terminal is untouched.
# ---------------------------------------------------------------------------

# How often the snapshot file is looked at.
ATTACH_POLL_S = 0.1


def snapshots_of(pid: int) -> tuple[str, str] | None:
    """The format and path of the report that pyrometer's process pid rewrites
    while its program runs, from its periodic writer's arguments
    (PeriodicWriter._announced), or None."""
    from .remote import _descendants, _proc
    for child in _descendants(pid):
        argv = (_proc(child, "cmdline") or "").split("\0")
        if len(argv) >= 7 and "from pyrometer.run.periodic import child_main" in argv[4]:
            return argv[5], argv[6]
    return None


def attach(pid: int) -> int:
    from .. import model
    from ..messages import error, say
    from .remote import why_not_profiled
    try:
        from .. import _core
        signum = _core.CONTROL_SIGNAL
    except (ImportError, AttributeError) as e:  # an interpreter pyrometer cannot run on
        return error(str(e).splitlines()[0] if str(e) else "no measuring core")
    problem = terminal_problem() or why_not_profiled(pid, signum)
    if problem is not None:
        return error(problem)
    found = snapshots_of(pid)
    if found is None or found[0] != "json":
        return error(f"process {pid} writes no JSON snapshots to show: start the program with "
                      "pyrometer --profile-interval 1 --json PROG (or run it with pyrometer top PROG)")
    from ..visible import visible
    path = found[1]
    shown = visible(path)
    note = f"process {pid} · its snapshots in {path} · Ctrl-C here leaves it running"
    before, seen, program, how = None, None, "", "gone"
    _write_all(1, ENTER)
    try:
        _draw(1, None, program, [], note)
        while how == "gone":
            try:
                st = os.stat(path)
                key: tuple | None = (st.st_ino, st.st_mtime_ns, st.st_size)
            except OSError:
                key = None
            if key is not None and key != seen:
                try:
                    profile = model.load(path)
                except model.ProfileError:
                    profile = None  # replaced meanwhile: the next look reads the new one
                if profile is not None:
                    seen = key
                    change = model.since(before, profile)
                    before, program = profile, profile["program"]
                    _draw(1, change, program, [], note)
                    if profile["ended_by"] is not None:
                        how = "ended"
                        break
            if not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(ATTACH_POLL_S)
    except KeyboardInterrupt:
        how = "left"
    finally:
        _write_all(1, LEAVE)
    if how == "ended":
        say(f"pyrometer: process {pid} ended; its profile is in {shown} (view: pyrometer view {shown})")
    elif how == "left":
        say(f"pyrometer: left the live view of process {pid}, which runs on")
    else:
        say(f"pyrometer: process {pid} ended without its final profile; its last snapshot is in {shown}")
    return 0
