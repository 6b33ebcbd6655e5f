"""The part of `pyrometer attach PID` that runs inside the attached program
(attach.py is the other part, in the command).

sys.remote_exec (PEP 768, CPython 3.14+) has the program's main thread run a
small script between two bytecodes; the script loads this module from the
attaching installation (attach.SCRIPT) and calls begin().  begin() starts an
in-process profile (inprocess.InProcessRun: CPU, memory with the library
attached as for profile_this, GPU where there is one) and a thread that waits
on the run directory's FIFO for the command to say stop (or to go away: the
command killed, the FIFO's writer closed), then stops the profile, writes it
to the run directory, detaches the memory library (every object's allocator
calls put back as they were) and ends.  If the program exits first, an atexit
hook does the same.

The program's part does as little as it can once told to stop: the attach
thread needs the GIL for each step, which threads running Python keep from it
(3.15, the main thread calling os.path.exists between 1 ms loops beside a
thread spinning in Python: the profile built in the program took 1-85 s, the
whole end of a 1.5 s window 2-105 s).  It writes the window's raw collection
(window_data, pickled: the core's records are tuples of types of its own) and
the command builds and renders the profile (window_profile).

Nothing here may write to the program's standard streams or raise into its
main thread: whatever goes wrong is written to the run directory's `out/error`
file, in one line, for the command to say (a Ctrl-C meant for the program that
lands here is given back to it).  The memory library is taken out again only
where this window attached it: one that was there before (profile_this's,
a preloaded one) stays as it was.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading

# The run directory's files (attach.py makes the directory, the FIFO and OUT).
CONTROL = "control"   # FIFO: the command holds its writing end open for the window
OUT = "out"           # the folder the program writes into (its user's, when root attaches)
PROFILE = "window.pickle"  # window_data: what the command builds the profile of
ERROR = "error"
STARTED = "started"
STOP = b"stop\n"
GO_TIMEOUT_MS = 10_000


def _write_file(run_dir: str, name: str, data: bytes) -> None:
    """name in the run directory's OUT, whole or not at all (a rename), unless
    the command has removed the directory meanwhile."""
    temporary = os.path.join(run_dir, OUT, f".{name}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, os.path.join(run_dir, OUT, name))
    except OSError:
        pass


# Whether this window attached the memory library (it was not there before:
# then it goes again; one that was, profile_this's or a preloaded one, stays).
_attached_memory = False


def _memory_there() -> bool:
    try:
        from .. import _core
        return bool(_core.memory_available())
    except ImportError:
        return False


def _detach_memory() -> None:
    """The memory library taken out of every loaded object again, if this
    window attached it."""
    global _attached_memory
    if not _attached_memory:
        return
    _attached_memory = False
    try:
        from .. import _core
        _core.detach_memory()
    except (ImportError, OSError, RuntimeError):
        pass


def _fail(run_dir: str, message: str) -> None:
    _write_file(run_dir, ERROR, message.splitlines()[0].encode("utf-8", "replace") if message else b"failed")


class _Attached:
    """One attached window: the profile, the thread that ends it, the hook that
    ends it at exit."""

    def __init__(self, run_dir: str, run, control_fd: int):
        self.run_dir = run_dir
        self.run = run
        self.control_fd = control_fd
        self.pid = os.getpid()
        # Held for the whole of finish: at exit, the main thread waits for a
        # finish the attach thread has begun, before the interpreter ends it.
        self.done = threading.Lock()
        self.finished = False
        self.thread = threading.Thread(target=self._wait, name="pyrometer-attach", daemon=True)

    def _wait(self) -> None:
        import select
        poller = select.poll()
        poller.register(self.control_fd, select.POLLIN)
        try:
            # The command says "go" once it has seen `started`: if it does not
            # (it gave up waiting as the script began), the window is dropped.
            if not poller.poll(GO_TIMEOUT_MS):
                self.finish(None)
                return
            while True:
                poller.poll()  # no timeout: the command's close wakes it (POLLHUP)
                data = os.read(self.control_fd, 64)
                if not data or STOP in data:
                    break
        except OSError:
            pass
        self.finish("the command ended the window")

    def at_exit(self) -> None:
        if os.getpid() == self.pid:  # not in a child forked during the window
            self.finish("the program exited during the window")

    def finish(self, why: str | None) -> None:
        """Stops the window; why: what ended it, for the profile's notices, or
        None when nobody waits for the profile (it is dropped, with the run
        directory)."""
        with self.done:
            if self.finished:
                return
            self.finished = True
            import atexit
            atexit.unregister(self.at_exit)
            try:
                if why is None:
                    self.run.session.stop()
                else:
                    data = window_data(self.run, self.run.collect(), why)
                    _detach_memory()
                    _write_file(self.run_dir, PROFILE, data)
            except BaseException as e:  # never into the program
                _fail(self.run_dir, f"the profile could not be made: {type(e).__name__}: {e}")
            finally:
                _detach_memory()
                try:
                    os.close(self.control_fd)
                except OSError:
                    pass
                _Attached.current = None
                if why is None:
                    import shutil
                    shutil.rmtree(self.run_dir, ignore_errors=True)

    current = None


def window_data(run, raw: dict, why: str) -> bytes:
    """The program's part of the profile: the window's raw collection and
    what the command builds the profile with (window_profile)."""
    # The command paused the program as the window ended (a signal,
    # control.h: at that moment, whenever this thread gets the GIL after it);
    # that tail is not the window's.  And the window is the core's, from the
    # moment it began sampling: starting it here may wait long for the GIL
    # (threads running Python), which the session's clock counts (both clocks
    # are CLOCK_MONOTONIC).
    tail = raw.get("paused_at_end_ns", 0)
    raw["paused_ns"] = max(0, raw.get("paused_ns", 0) - tail)
    session = run.session
    began, ended = raw["start_wall_ns"] * 1e-9, (raw["stop_wall_ns"] - tail) * 1e-9
    if tail and raw.get("process_cpu_at_pause_ns"):
        raw["process_cpu_ns"] = raw["process_cpu_at_pause_ns"]
    if session.t0 <= began < ended:
        session.start_time += began - session.t0
        session.elapsed = ended - began
    else:
        session.elapsed = max(0.0, session.elapsed - tail * 1e-9)
    from .inprocess import process_row, program_sources
    notices = list(run.notices) + [f"attached to pid {os.getpid()} for {session.elapsed:.1f} s; {why}"]
    built_with = {"program": run.program, "options": run.options.as_profile_options(), "elapsed": session.elapsed,
                  "start_time": session.start_time, "notices": notices,
                  "sources": program_sources(run.program_prefixes), "process": process_row(raw, session.elapsed)}
    return pickle.dumps({"raw": raw, "built_with": built_with}, protocol=pickle.HIGHEST_PROTOCOL)


class _WindowLoader(pickle.Unpickler):
    """Loads what window_data wrote and nothing else: the core's record types
    are the only classes it names.  The command may be root, attached to
    another user's program, which writes the file: a pickle naming any other
    class is refused (pickle's own advice for data not trusted)."""

    def find_class(self, module: str, name: str):
        from .. import _core
        record = getattr(_core, name, None) if module == _core.__name__ else None
        if isinstance(record, type) and issubclass(record, tuple) and record.__module__ == module:
            return record  # a record type (records.c): made from its fields, nothing run
        raise pickle.UnpicklingError(f"{module}.{name} is not a profile's")


def window_profile(data: bytes) -> dict:
    """The profile of an attached window, from what its program wrote
    (window_data); ValueError when that is no window's data."""
    import io
    from .inprocess import build_profile
    try:
        window = _WindowLoader(io.BytesIO(data)).load()
        raw, built_with = window["raw"], window["built_with"]
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"not an attached window's data ({type(e).__name__}: {e})") from None
    return build_profile(raw, **built_with)


def begin(run_dir: str, settings: dict) -> None:
    """Called by the attach script in the program's main thread.  settings: the
    command's Options fields that apply (attach.py)."""
    try:
        _begin(run_dir, settings)
    except KeyboardInterrupt:
        # The program's Ctrl-C, landed in pyrometer's start: given back to it.
        _fail(run_dir, "the program was interrupted (Ctrl-C) as the profile started")
        _detach_memory()
        import _thread
        _thread.interrupt_main()
    except BaseException as e:  # never into the program
        _fail(run_dir, f"{type(e).__name__}: {e}")
        _detach_memory()


def _begin(run_dir: str, settings: dict) -> None:
    if not os.path.isdir(run_dir):
        return  # the command gave up waiting and left: nothing to do
    previous = _Attached.current
    if previous is not None and previous.finished:
        # The last window's profile is written, and its thread still detaching:
        # a command attaching again at once waits for that, not a refusal.
        with previous.done:
            pass
    if _Attached.current is not None:
        _fail(run_dir, "pyrometer attach is already profiling this program")
        return
    from .inprocess import AlreadyProfiling, CannotProfile, InProcessRun
    from ..model import processes  # noqa: F401 (window_data's: no module read while the window ends)
    from ..settings import Options
    options = Options(children=False)
    for name, value in settings.items():
        setattr(options, name, value)
    program = " ".join(getattr(sys, "orig_argv", sys.argv)) or f"pid {os.getpid()}"
    global _attached_memory
    there = _memory_there()
    try:
        run = InProcessRun(options, program,
                           no_memory_notice="memory was not profiled: {}")
        _attached_memory = not there and _memory_there()
    except CannotProfile as e:
        _fail(run_dir, str(e))
        return
    try:
        control_fd = os.open(os.path.join(run_dir, CONTROL), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        _fail(run_dir, f"cannot open the command's FIFO: {e}")
        _detach_memory()  # InProcessRun attached it
        return
    try:
        run.start()
    except AlreadyProfiling as e:
        os.close(control_fd)
        _fail(run_dir, f"{e}; pyrometer attach adds nothing there")
        return
    except BaseException:
        os.close(control_fd)
        raise  # begin says it, and takes the memory library out again
    attached = _Attached.current = _Attached(run_dir, run, control_fd)
    import atexit
    atexit.register(attached.at_exit)
    # The command times the window from `started`: written before the thread
    # starts, which waits until the new thread first gets the GIL (1 s, where
    # threads running Python kept it from it: 3.15), a second the window had
    # more than asked.
    _write_file(run_dir, STARTED, str(os.getpid()).encode())
    attached.thread.start()
