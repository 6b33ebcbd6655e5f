"""Ends of a run that are not a return from the program, caught where Python sees
them, so that the profile is still written (see also csrc/ending/ending.h, for
signals, and docs/how-it-works.md, "How a run ends").

While profiling, in the profiled process only (a forked child passes through):
- an exec (os.execv and os.execve, which the others call; the "os.exec" audit
  event, so no function is replaced): the profile up to the exec is written,
  then the exec goes ahead; the new program's exit status is the run's.  An
  exec that fails (execvp tries each directory of PATH) goes back to the
  program, still profiled, and the profile is written again at the end.
- os._exit(n): the profile is written with exit status n, then the process ends
  (a stand-in, csrc/unseen/stand_in.h: it looks like the builtin it replaces).
- signal.signal(sig, SIG_DFL) for a termination signal: the signal is caught
  again (ending_reinstall), so that the program putting back what it believes
  was there does not lose the profile.  The stand-in is _signal.signal's, the
  builtin that signal.signal calls: signal.signal itself is not touched.

Not caught: references to os._exit taken before profiling started (none of
the program's: it starts after), and exec or _exit called from C (an
extension, ctypes): there the process is gone before any Python can run, and
a library preloaded for that (only present with memory profiling) could not
write a profile without the GIL either.  With --profile-interval, the writer
process still says that the profile stops at its last report.
"""

from __future__ import annotations

import os
import signal

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Callable

class Endings:
    """Installs the watch and the stand-ins; write(status, ended_by) writes the
    profile and returns whether it could."""

    def __init__(self, write: Callable[[int | None, str], bool], termination_signal: Callable[[], int],
                 reinstall: Callable[[int], None], die: Callable[[int], None]):
        self._write = write
        self._signal = termination_signal
        self._reinstall = reinstall
        self._die = die
        self._owner = os.getpid()
        self._stand_ins: list[int] = []

    def install(self) -> None:
        from .. import _core
        _core.audit_watch("os.exec", self._on_exec)
        for modules, name, before, after in ((("os", "posix"), "_exit", self._on_exit, None),
                                             (("_signal",), "signal", None, self._on_signal)):
            handle = _core.stand_in(modules, name, before, after)
            if handle is not None:
                self._stand_ins.append(handle)

    def uninstall(self) -> None:
        from .. import _core
        _core.audit_watch("os.exec", None)
        for handle in self._stand_ins:
            _core.stand_in_take_back(handle)
        self._stand_ins.clear()

    def _ours(self) -> bool:
        return os.getpid() == self._owner

    def at_end(self, status: int | None) -> None:
        """The program's end: the profile written as a return, or as the
        termination signal caught before the sampler thread acted on it (a
        program that raises one on its last line, as CPython's test_posix
        setsigdef test does); die_if_signalled then ends the process of it."""
        signum = self._signal()
        if signum:
            self._write(*by_signal(signum))
        else:
            self._write(status, "exit")

    def die_if_signalled(self) -> None:
        """A termination signal that came before or while the profile was being
        written: its turn now (the profile is written)."""
        signum = self._signal()
        if signum and self._ours():
            self._die(signum)

    def _on_exec(self, event: str, args: tuple) -> None:
        if self._ours() and args and _may_execute(args[0]):
            self._write(None, "exec")
            self.die_if_signalled()

    def _on_exit(self, args: tuple, kwargs: dict) -> None:
        status = args[0] if args else kwargs.get("status")
        if self._ours() and isinstance(status, int):
            self._write(status & 0xFF, "os._exit")
            self.die_if_signalled()

    def _on_signal(self, previous, args: tuple, kwargs: dict) -> None:
        if len(args) == 2 and args[1] == signal.SIG_DFL and self._ours():
            self._reinstall(int(args[0]))


def by_signal(signum: int) -> tuple[int, str]:
    """The exit status and ended_by of a run a termination signal ends: the
    status a shell shows for it (128 + n), the signal's name."""
    return 128 + signum, signal.Signals(signum).name


def _may_execute(path) -> bool:
    """Whether an exec of path can succeed, as the kernel will judge it (effective
    ids): execvp tries every directory of PATH, and a profile written for each
    attempt that fails would cost a render each.  A descriptor (fexecve): yes."""
    if isinstance(path, int):
        return True
    try:
        return os.access(path, os.X_OK, effective_ids=os.access in os.supports_effective_ids) \
            and not os.path.isdir(path)
    except (TypeError, ValueError, OSError):
        return True  # let the exec itself say what is wrong
