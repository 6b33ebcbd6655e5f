"""Runs the user's program in this interpreter, exactly as `python prog.py` or
`python -m module` would: same sys.argv, sys.path[0], __main__, __file__, exit
status, traceback and standard streams.  The profiler starts just before the
program's first line and stops after its threads and atexit handlers finish."""

from __future__ import annotations

import atexit
import builtins
import importlib.machinery
import importlib.util
import linecache
import os
import runpy
import _signal
import signal
import sys
import threading
import tokenize
import types

from ..structs import record

# The ways python starts a program (Modules/main.c), each run here as python runs it.
SCRIPT = "script"    # python prog.py
MAIN_PATH = "path"   # python dir/ or python app.pyz: its __main__ module, through sys.path[0]
MODULE = "module"    # python -m pkg.mod
COMMAND = "command"  # python -c CODE
STDIN = "stdin"      # python - (a script piped in)


class ProgramNotFound(Exception):
    """The program cannot be started: the message python itself prints (the caller
    prints it as is) and python's exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


@record
class Target:
    """What to run and how, the program's argv, and what of it is reported."""
    kind: str
    name: str        # the script, directory or archive as given; the module; the -c code
    argv: list[str]  # sys.argv as the program starts
    source: bytes = b""  # a script's or standard input's bytes, read before the run
    # Where the named program lives, reported even inside the standard library or
    # site-packages (the package of a -m module).
    program_prefixes: list[str] = []  # a new list for each (structs.py)
    # -c and standard input: the code objects compiled from the program's source,
    # reported by identity (csrc/profile/filter.h), and kept alive here so that
    # their addresses cannot be reused while the run is profiled.
    codes: list[types.CodeType] = []  # a new list for each (structs.py)
    code: types.CodeType | None = None  # compiled before the run (-c, a script, stdin)
    sources: dict[str, str] = {}  # a new dict for each (structs.py)  # pseudo-file -> its text, for the report
    stdin_fd: int | None = None  # standard input, when it is a file python would read itself
    # A command found on PATH (a console script: `pyrometer gunicorn app:app`),
    # as the user named it; "" for a file named by its path.
    command_name: str = ""
    started_in: str = ""  # the working directory pyrometer started in (a script's)

    @property
    def display(self) -> str:
        return {MODULE: f"-m {self.name}", COMMAND: "-c", STDIN: "-"}.get(self.kind, self.name)

    @property
    def directory(self) -> str:
        """The program's own directory: its files are the ones reported by default
        (sys.path[0], as python sets it; the current directory where that is '')."""
        if self.kind == SCRIPT:
            return os.path.dirname(os.path.realpath(self.name))
        if self.kind == MAIN_PATH:
            return os.path.abspath(self.name)
        return os.getcwd()


def _cant_open(path: str, e: OSError) -> ProgramNotFound:
    # Modules/main.c's words, naming the interpreter as runpy's messages do.
    return ProgramNotFound(f"{sys.executable}: can't open file {os.path.abspath(path)!r}: "
                           f"[Errno {e.errno}] {e.strerror}", 2)


def resolve(script: str | None, module: str | None, args: list[str], command: str | None = None) -> Target:
    """The program to run, found as python finds it; raises ProgramNotFound with
    python's message where python would stop before running anything."""
    if module is not None:
        return Target(MODULE, module, ["-m", *args], program_prefixes=_module_prefixes(module))
    if command is not None:
        return Target(COMMAND, command, ["-c", *args], sources={"<string>": command})
    assert script is not None
    if script == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise ProgramNotFound("pyrometer: error: standard input is a terminal: pipe the program "
                                  "in (pyrometer - < prog.py) or name its file", 2)
        # Read here for the report's source lines; the run reads it again as
        # python does (_run_source): from the descriptor where it can seek back
        # (a file), else from these bytes as from a pipe.
        fd = sys.stdin.fileno()
        try:
            where: int | None = os.lseek(fd, 0, os.SEEK_CUR)
        except OSError:
            where = None
        source = sys.stdin.buffer.read()
        if where is not None:
            os.lseek(fd, where, os.SEEK_SET)
        return Target(STDIN, script, [script, *args], source=source, stdin_fd=None if where is None else fd,
                      program_prefixes=["<stdin>"], sources={"<stdin>": _decoded(source)})
    # A directory or a zip archive that an import hook takes is run by its
    # __main__ module (main.c's pymain_get_importer), anything else as a script.
    absolute = os.path.abspath(script)
    command_name = ""
    if os.sep not in script and not os.path.exists(absolute):
        found = _python_command(script)
        if found is not None:
            absolute, command_name = found, script
    if _path_importer(absolute) is not None:
        return Target(MAIN_PATH, script, [script, *args],
                      program_prefixes=sorted({_with_sep(absolute), _with_sep(os.path.realpath(absolute))}))
    try:
        with open(absolute, "rb") as f:
            source = f.read()
    except OSError as e:
        raise _cant_open(script, e) from None
    if command_name:  # started as the shell would: argv[0] is the path found
        return Target(SCRIPT, absolute, [absolute, *args], source=source, command_name=command_name,
                      started_in=os.getcwd(), program_prefixes=sorted({absolute, os.path.realpath(absolute)}))
    return Target(SCRIPT, script, [script, *args], source=source, started_in=os.getcwd(),
                  program_prefixes=sorted({absolute, os.path.realpath(absolute)}))


def console_script_notice(target: Target) -> list[str]:
    """For a program that is a console script (named as a command, or a file
    in the interpreter's scripts directory): what the report leaves out, and
    how to see it.  Its own code is an installed package's."""
    if target.kind != SCRIPT:
        return []
    import sysconfig
    where = os.path.dirname(os.path.realpath(target.name))
    scripts = sysconfig.get_path("scripts")
    if not target.command_name and (not scripts or where != os.path.realpath(scripts)):
        return []
    name = target.command_name or os.path.basename(target.name)
    return [f"{name} is a console script: reported are its own file and the files under the working "
            f"directory ({target.started_in}); the installed packages it runs are not (their time is on the "
            "lines of yours that call them, else on the script's): --profile-all shows their lines"]


def _python_command(name: str) -> str | None:
    """A command on PATH that is a Python script (its first line starts it
    with a python: a console script such as gunicorn, uvicorn, celery, flask,
    pytest), as the shell would find it; None when there is no such command.
    One that is not a Python program is an error: pyrometer runs Python."""
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(directory or ".", name)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        try:
            with open(path, "rb") as f:
                first = f.readline(512)
        except OSError:
            continue
        if first.startswith(b"#!") and b"python" in first:
            return os.path.abspath(path)
        what = ("a native executable" if first.startswith(b"\x7fELF") else
                f"a script for {first[2:].decode(errors='replace').split()[0]}" if first.startswith(b"#!") and
                first[2:].split() else "not a Python script")
        raise ProgramNotFound(f"pyrometer: error: {name} is {path}, {what}: pyrometer profiles Python "
                              "programs (a script, -m module, or a command written in Python such as a "
                              "console script)", 2)
    return None


def _path_importer(path: str):
    """The import hook that takes path, as sys.path would (main.c's
    pymain_get_importer; pkgutil.get_importer, whose module imports typing, a
    cost every run would pay: structs.py)."""
    try:
        return sys.path_importer_cache[path]
    except KeyError:
        pass
    for hook in sys.path_hooks:
        try:
            importer = hook(path)
        except ImportError:
            continue
        sys.path_importer_cache[path] = importer
        return importer
    return None


def _with_sep(path: str) -> str:
    return path.rstrip(os.sep) + os.sep


def _module_prefixes(module: str) -> list[str]:
    """Where a -m module's top-level package lives (or the module's own file, for a
    top-level module): all of it is the program the user named, even in the
    standard library or site-packages.  Only the top-level name is looked up,
    which imports nothing; runpy finds the module itself during the run."""
    top = module.split(".")[0]
    sys.path.insert(0, os.getcwd())  # where python -m looks first
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    finally:
        sys.path.pop(0)
    if spec is None:
        return []
    places = [_with_sep(d) for d in (spec.submodule_search_locations or [])]
    if not places and spec.has_location and spec.origin:
        places = [spec.origin]
    return sorted({p for place in places for p in (place, _with_sep(os.path.realpath(place))
                                                    if place.endswith(os.sep) else os.path.realpath(place))})


def _decoded(source: bytes) -> str:
    """Standard input's text for the report, decoded as python decodes a script
    (its coding line, else UTF-8); what cannot be decoded fails to compile anyway."""
    try:
        encoding, _ = tokenize.detect_encoding(iter(source.splitlines(keepends=True)).__next__)
        return source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return ""


def code_tree(code: types.CodeType) -> list[types.CodeType]:
    """A code object and every code object nested in it (functions, classes, lambdas)."""
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out.extend(code_tree(const))
    return out


def prepare(target: Target) -> None:
    """Compile what python compiles before running (-c, a script), outside the
    profile.  A script compile() cannot take is left for the run, where the
    interpreter's own file reader gives python's very error (_run_source)."""
    if target.kind == COMMAND:
        # As main.c runs -c: the string, not bytes, so a coding line is ignored.
        try:
            target.code = compile(target.name, "<string>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return
        if sys.version_info >= (3, 13) and hasattr(linecache, "_register_code"):
            # 3.13's tracebacks show -c lines: the interpreter registers the source so.
            linecache._register_code(target.code, target.name, "<string>")
        target.codes = code_tree(target.code)
    elif target.kind == SCRIPT:
        try:
            target.code = compile(target.source, os.path.abspath(target.name), "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return
    # Standard input is never compiled here: python's file reader takes a coding
    # line from a pipe as an error that compile() would not raise.


@record
class Outcome:
    """How the program ended: the exit status the python command would give, and
    whether it ended by Ctrl-C (then the caller re-raises SIGINT after reporting)."""
    status: int
    interrupted: bool = False
    # False when python would have stopped before the program's first line (it
    # cannot be compiled, its module or __main__ is not found): nothing to report.
    ran: bool = True


def _strip_own_frames(tb: types.TracebackType | None, interrupted: bool = False):
    """The traceback as Python would print it: from the first frame that is not
    pyrometer's (runpy's frames stay for -m and directories: python shows
    them).  interrupted (a KeyboardInterrupt): pyrometer's frames further in
    are unlinked too (in place), where a Ctrl-C lands while the program waits
    in a call pyrometer wraps (os.waitpid, to note what it reaps); any other
    exception keeps them, so that one raised by pyrometer's own code shows
    where."""
    from ..installed import PACKAGE_DIR

    def own(t: types.TracebackType) -> bool:
        return t.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR)
    while tb is not None and own(tb):
        tb = tb.tb_next
    at = tb if interrupted else None
    while at is not None:
        while at.tb_next is not None and own(at.tb_next):
            at.tb_next = at.tb_next.tb_next
        at = at.tb_next
    return tb


def _program_ran(tb: types.TracebackType | None) -> bool:
    """Whether any code of the program ran before this exception: not when python
    itself stopped first (a syntax error, a module or __main__ not found), where
    the traceback holds only runpy's and the import system's frames, or none."""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name not in (runpy.__file__, "<frozen runpy>") and not name.startswith("<frozen importlib"):
            return True
        tb = tb.tb_next
    return False


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


def _fresh_main(loader) -> types.ModuleType:
    """A __main__ module as the interpreter makes it (pylifecycle's add_main_module):
    not pyrometer's own, whose globals a program must not see."""
    main = types.ModuleType("__main__")
    main.__loader__ = loader
    if sys.version_info < (3, 14):  # 3.14 no longer gives __main__ an __annotations__
        main.__annotations__ = {}
    main.__builtins__ = builtins
    sys.modules["__main__"] = main  # stays: atexit handlers and pickling see it
    from .. import _core
    _core.follow_program(main.__dict__)  # its functions, once their frames have returned
    return main


def _follow(code) -> None:
    """The profiler knows the program's top-level code before it runs
    (_core.follow_code says why)."""
    from .. import _core
    _core.follow_code(code)


def _run_source(target: Target) -> None:
    """A script, -c or standard input, as main.c runs them (pythonrun.c)."""
    if target.kind == COMMAND:
        main = _fresh_main(importlib.machinery.BuiltinImporter)
        if target.code is None:  # compile again: its SyntaxError is python's
            target.code = compile(target.name, "<string>", "exec", dont_inherit=True)
        _follow(target.code)
        exec(target.code, main.__dict__)
        return
    if target.kind == STDIN:
        filename = "<stdin>"
        main = _fresh_main(importlib.machinery.BuiltinImporter)
    else:
        filename = os.path.abspath(target.name)
        main = _fresh_main(importlib.machinery.SourceFileLoader("__main__", filename))
    # For the run only: python takes them away before the atexit handlers.
    main.__file__ = filename
    if sys.version_info < (3, 15):  # 3.15 no longer sets __main__.__cached__
        main.__cached__ = None
    try:
        if target.code is not None:
            _follow(target.code)
            exec(target.code, main.__dict__)
        else:
            from .. import _core
            if target.kind == STDIN:
                _core.run_file(target.stdin_fd if target.stdin_fd is not None else target.source,
                               filename, main.__dict__)
            else:
                fd = os.open(filename, os.O_RDONLY)  # its own descriptor: a coding line works
                try:
                    _core.run_file(fd, filename, main.__dict__)
                finally:
                    os.close(fd)
    finally:
        main.__dict__.pop("__file__", None)
        main.__dict__.pop("__cached__", None)


def _run_main(target: Target) -> None:
    """-m, a directory or a zip archive: runpy, as main.c calls it (its messages,
    its frames in tracebacks)."""
    _fresh_main(importlib.machinery.BuiltinImporter)
    if target.kind == MODULE:
        runpy._run_module_as_main(target.name, alter_argv=True)
    else:
        runpy._run_module_as_main("__main__", alter_argv=False)


def _path0(target: Target) -> str:
    """sys.path[0] as python sets it for this way of starting."""
    if target.kind == SCRIPT:
        return os.path.dirname(os.path.realpath(target.name))  # a link's target's directory
    if target.kind == MAIN_PATH:
        return os.path.abspath(target.name)
    if target.kind == MODULE:
        return os.getcwd()
    return ""  # -c, standard input: the current directory, whatever it becomes


def run(target: Target, start, stop) -> Outcome:
    """Run the program between start() and stop() and return how it ended."""
    from ..core import focus
    # @profile, for the program only.  Left in place after the run: a daemon
    # thread of the program may still decorate while the report is written.
    focus.install_builtin()
    sys.argv = list(target.argv)
    if getattr(sys.flags, "safe_path", False):
        # python -P (3.11+) puts nothing before the standard library, except the
        # directory or archive it runs, which must be importable.
        if target.kind == MAIN_PATH:
            sys.path.insert(0, _path0(target))
    else:
        sys.path[0] = _path0(target)  # the entry python made for pyrometer itself
    start()
    try:
        outcome = _run_program(target)
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


def _run_program(target: Target) -> Outcome:
    outcome = Outcome(0)
    try:
        if target.kind in (MODULE, MAIN_PATH):
            _run_main(target)
        else:
            _run_source(target)
    except SystemExit as e:
        outcome.status = _exit_status(e)
        outcome.ran = _program_ran(_strip_own_frames(e.__traceback__))
    except KeyboardInterrupt as e:
        outcome = Outcome(130, interrupted=True)
        again = _print_interrupt(e)
        if again:
            # A second Ctrl-C (a terminal's, or `timeout`'s to the process and
            # then its group) ends the way out as it ends python's: the
            # non-daemon threads are not waited for; atexit still runs.
            atexit._run_exitfuncs()
            return outcome
    except BaseException as e:
        # The exception must carry the stripped traceback itself: excepthook
        # prints e.__traceback__ when it has one, whatever tb it is given.
        tb = _strip_own_frames(e.__traceback__)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        outcome.status = 1
        outcome.ran = _program_ran(tb)
    # What the interpreter does on the way out, done while still profiling:
    # wait for non-daemon threads, then run the atexit handlers (once).
    try:
        threading._shutdown()
    except KeyboardInterrupt:
        outcome = Outcome(130, interrupted=True)
    atexit._run_exitfuncs()
    return outcome


# Tries at printing the program's KeyboardInterrupt through its hook before
# python's own printer is used (a hook that raises it every time).
_PRINT_TRIES = 3


def _print_interrupt(e: KeyboardInterrupt) -> bool:
    """Prints the program's KeyboardInterrupt as python does: through
    sys.excepthook (C, unless the program set its own: a Ctrl-C cannot cut
    it), and a hook's own error as python reports it.  A second Ctrl-C that
    lands first, in pyrometer's steps before it, would lose the traceback:
    the print is made again, a few times, then by python's own printer.
    Whether one came."""
    again = False
    tb = None
    for _ in range(_PRINT_TRIES):
        try:
            tb = _strip_own_frames(e.__traceback__, interrupted=True)
            hook = sys.excepthook
            try:
                hook(type(e), e.with_traceback(tb), tb)
            except KeyboardInterrupt:
                raise
            except Exception as err:
                if hook is sys.__excepthook__:
                    raise
                print("Error in sys.excepthook:", file=sys.stderr)
                err.__context__ = None  # python prints the hook's error alone, then the original
                err_tb = _strip_own_frames(err.__traceback__)
                sys.__excepthook__(type(err), err.with_traceback(err_tb), err_tb)
                print("\nOriginal exception was:", file=sys.stderr)
                sys.__excepthook__(type(e), e, tb)
            return again
        except KeyboardInterrupt:
            again = True
    sys.__excepthook__(type(e), e.with_traceback(tb), tb)
    return again


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
            # The C function itself: signal.signal is Python code (signal.py),
            # which a sample taken before stop() would show as the program's.
            _signal.signal(signal.SIGINT, _ignore)
            return
        except KeyboardInterrupt:
            continue
