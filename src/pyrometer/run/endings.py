"""Ends of a run that are not a return from the program, caught where Python sees
them, so that the profile is still written (see also csrc/ending/ending.h, for
signals, and docs/how-it-works.md, "How a run ends").

While profiling, in the profiled process only (a forked child passes through):
- os.execv and os.execve (os.execl, execle, execlp, execlpe, execvp and execvpe
  call them by name): the profile up to the exec is written, then the exec goes
  ahead; the new program's exit status is the run's.  An exec that fails (execvp
  tries each directory of PATH) goes back to the program, still profiled, and
  the profile is written again at the end.
- os._exit(n): the profile is written with exit status n, then the process ends.
- signal.signal(sig, SIG_DFL) for a termination signal: the signal is caught
  again (ending_reinstall), so that the program putting back what it believes
  was there does not lose the profile.

Not caught, because they do not go through these module attributes: references
taken before profiling started (none of the program's: it starts after), posix.*
called directly, and exec or _exit called from C (an extension, ctypes): there
the process is gone before any Python can run, and a library preloaded for that
(only present with memory profiling) could not write a profile without the GIL
either.  With --profile-interval, the writer process still says that the profile
stops at its last report.
"""

from __future__ import annotations

import os
import signal

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Callable

_EXECS = ("execv", "execve")


class Endings:
    """Installs the wrappers; write(status, ended_by) writes the profile and
    returns whether it could."""

    def __init__(self, write: Callable[[int | None, str], bool], termination_signal: Callable[[], int],
                 reinstall: Callable[[int], None], die: Callable[[int], None]):
        self._write = write
        self._signal = termination_signal
        self._reinstall = reinstall
        self._die = die
        self._owner = os.getpid()
        self._originals: dict[str, Callable] = {}
        self._signal_signal: Callable | None = None

    def install(self) -> None:
        for name in _EXECS:
            self._originals[name] = getattr(os, name)
            setattr(os, name, self._exec_wrapper(name, self._originals[name]))
        self._originals["_exit"] = os._exit
        os._exit = self._exit_wrapper(os._exit)
        self._signal_signal = signal.signal
        signal.signal = self._signal_wrapper(signal.signal)

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(os, name, original)
        self._originals.clear()
        if self._signal_signal is not None:
            signal.signal = self._signal_signal
            self._signal_signal = None

    def _ours(self) -> bool:
        return os.getpid() == self._owner

    def _die_if_signalled(self) -> None:
        """A termination signal that came while the profile was being written:
        its turn now (the profile is written)."""
        signum = self._signal()
        if signum:
            self._die(signum)

    def _exec_wrapper(self, name: str, original: Callable) -> Callable:
        def exec_(path, *args, **kwargs):
            if self._ours() and _may_execute(path):
                self._write(None, "exec")
                self._die_if_signalled()
            return original(path, *args, **kwargs)
        exec_.__name__ = exec_.__qualname__ = name
        exec_.__doc__ = original.__doc__
        return exec_

    def _exit_wrapper(self, original: Callable) -> Callable:
        def _exit(status, *args, **kwargs):
            if self._ours() and isinstance(status, int):
                self._write(status & 0xFF, "os._exit")
                self._die_if_signalled()
            return original(status, *args, **kwargs)
        _exit.__doc__ = original.__doc__
        return _exit

    def _signal_wrapper(self, original: Callable) -> Callable:
        def signal_(signalnum, handler):
            previous = original(signalnum, handler)
            if handler == signal.SIG_DFL and self._ours():
                self._reinstall(int(signalnum))
            return previous
        signal_.__name__ = signal_.__qualname__ = "signal"
        signal_.__doc__ = original.__doc__
        return signal_


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
