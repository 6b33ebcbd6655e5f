"""Runs the user's program in this interpreter, exactly as `python prog.py` or
`python -m module` would: same sys.argv, sys.path[0], __main__, __file__, exit
status, traceback and standard streams.  The profiler starts just before the
program's first line and stops after its threads and atexit handlers finish."""

from __future__ import annotations

import atexit
import importlib.util
import os
import runpy
import signal
import sys
import threading
import traceback
import types
from dataclasses import dataclass


class ProgramNotFound(Exception):
    """The script or module to profile does not exist."""


@dataclass
class Target:
    """What to run: a script path or a module name, and the program's argv."""
    script: str | None
    module: str | None
    argv: list[str]

    @property
    def display(self) -> str:
        return self.script if self.script is not None else f"-m {self.module}"

    @property
    def directory(self) -> str:
        """The program's own directory: its files are the ones reported by default."""
        if self.script is not None:
            return os.path.dirname(os.path.realpath(self.script))
        return os.getcwd()


def resolve(script: str | None, module: str | None, args: list[str]) -> Target:
    if module is not None:
        sys.path.insert(0, os.getcwd())
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as e:
            spec = None
            reason = str(e)
        else:
            reason = "no module named " + repr(module)
        finally:
            sys.path.pop(0)
        if spec is None:
            raise ProgramNotFound(f"cannot run -m {module}: {reason}")
        return Target(None, module, [module, *args])
    assert script is not None
    if not os.path.exists(script):
        raise ProgramNotFound(f"can't open file {os.path.abspath(script)!r}: No such file or directory")
    if os.path.isdir(script):
        raise ProgramNotFound(f"{script!r} is a directory, not a Python script")
    return Target(script, None, [script, *args])


@dataclass
class Outcome:
    """How the program ended: the exit status the python command would give, and
    whether it ended by Ctrl-C (then the caller re-raises SIGINT after reporting)."""
    status: int
    interrupted: bool = False


def _strip_own_frames(tb: types.TracebackType | None, program_file: str | None):
    """The traceback from the program's first frame on, as Python would print it."""
    here = os.path.dirname(os.path.abspath(__file__))
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if program_file is not None and name == program_file:
            break
        if not (name.startswith(here) or name in (runpy.__file__, "<frozen runpy>")):
            break
        tb = tb.tb_next
    return tb


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code & 0xFF
    # sys.exit("message"): Python prints the message to stderr and exits with 1.
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _run_script(path: str) -> None:
    absolute = os.path.abspath(path)
    with open(absolute, "rb") as f:  # bytes: compile() honours the PEP 263 coding line
        source = f.read()
    code = compile(source, absolute, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = absolute
    main.__builtins__ = __builtins__
    main.__cached__ = None
    sys.modules["__main__"] = main  # stays: atexit handlers and pickling see it
    exec(code, main.__dict__)


def _run_module(name: str) -> None:
    runpy._run_module_as_main(name, alter_argv=True)  # what `python -m` itself calls


def run(target: Target, start, stop) -> Outcome:
    """Run the program between start() and stop() and return how it ended."""
    sys.argv = list(target.argv)
    program_file = None
    if target.script is not None:
        program_file = os.path.abspath(target.script)
        sys.path[0] = os.path.dirname(program_file)
    else:
        sys.path[0] = os.getcwd()
    start()
    try:
        outcome = _run_program(target, program_file)
    except KeyboardInterrupt:
        # A Ctrl-C that landed in the launcher's own steps between the program's
        # (printing its traceback, say): it interrupted the program all the same.
        outcome = Outcome(130, interrupted=True)
    finally:
        # The program is over: from here on the time is pyrometer's, and a Ctrl-C
        # must not stop the profile from being written (cli._interrupts_held, for
        # the rest).
        _hold_interrupts()
        stop()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    return outcome


def _run_program(target: Target, program_file: str | None) -> Outcome:
    outcome = Outcome(0)
    try:
        if target.script is not None:
            _run_script(target.script)
        else:
            _run_module(target.module)
    except SystemExit as e:
        outcome.status = _exit_status(e)
    except KeyboardInterrupt as e:
        tb = _strip_own_frames(e.__traceback__, program_file)
        traceback.print_exception(type(e), e.with_traceback(tb), tb)
        outcome = Outcome(130, interrupted=True)
    except BaseException as e:
        # The exception must carry the stripped traceback itself: excepthook
        # prints e.__traceback__ when it has one, whatever tb it is given.
        tb = _strip_own_frames(e.__traceback__, program_file)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        outcome.status = 1
    # What the interpreter does on the way out, done while still profiling:
    # wait for non-daemon threads, then run the atexit handlers (once).
    try:
        threading._shutdown()
    except KeyboardInterrupt:
        outcome = Outcome(130, interrupted=True)
    atexit._run_exitfuncs()
    return outcome


def _ignore(signum, frame) -> None:
    pass


def _hold_interrupts() -> None:
    """Ctrl-C is ignored from now on (a handler, not SIG_IGN, which programs
    started later, such as a browser for --web, would inherit).  Retried should
    a Ctrl-C that came just before land in it."""
    if threading.current_thread() is not threading.main_thread():
        return
    while True:
        try:
            signal.signal(signal.SIGINT, _ignore)
            return
        except KeyboardInterrupt:
            continue
