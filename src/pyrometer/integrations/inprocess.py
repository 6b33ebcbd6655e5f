"""Profiling a region of the running process, with no `pyrometer` command around
it: `profile_this(func, *args, **kwargs)` from any program, and the notebook
magics (jupyter.py).

The measuring core is the one the command uses (core.session.Session); what differs
is what the process has.  CPU is always there.  Memory needs the memory library
(libpyrometer_memhooks.so), which the first profile attaches to the running
process (preload.attach: every loaded object's allocator calls are pointed at
it, and the arenas pymalloc made before are found, csrc/memhooks/got.c and
pymalloc_arenas.c).  Where it cannot be attached the profile is CPU-only and
says why.

What is "the program" here: the code the caller names (the function's code,
a notebook cell), every cell of the notebook, and the files under the
program's directory (the script's, else the current one), never the
installation's (the standard library, site-packages: IPython, ipykernel)."""

from __future__ import annotations

import linecache
import os
import sys
import types
from typing import Any, Callable, NamedTuple

from ..settings import Options

NO_MEMORY_LIBRARY = ("memory was not profiled: {}; run it under `pyrometer` or, in Jupyter, in a kernel "
                     "installed with `pyrometer kernel install`")


class ProfileResult(NamedTuple):
    """What profile_this returns: the function's result and the profile (the
    document every renderer reads: pyrometer.render.report(profile, "text"))."""
    result: Any
    profile: dict[str, Any]


class CannotProfile(RuntimeError):
    """This interpreter cannot be profiled (pyrometer's core refuses it); the
    message says why, in one line."""


class AlreadyProfiling(RuntimeError):
    """The measuring core is already running in this process (a program run by
    the pyrometer command, or a profile in progress): one at a time."""


def memory_available() -> bool:
    """Whether this process has the memory library preloaded and loaded."""
    from .. import _core
    return bool(_core.memory_available())


def _program_directory() -> str:
    """Where the user's own files are: the running script's directory, as python
    puts it first on sys.path, else the current directory: in an interactive
    interpreter, and where __main__ is not the user's (ipykernel_launcher, our
    own kernel launcher, a tool's entry point in site-packages)."""
    from ..core.session import _installation_directories
    from ..installed import PACKAGE_DIR
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path) or _ipython_shell() is not None:
        return os.getcwd()
    directory = os.path.dirname(os.path.realpath(path))
    ours = (PACKAGE_DIR, os.path.realpath(PACKAGE_DIR))
    theirs = [*_installation_directories(), *(os.path.join(d, "") for d in ours)]
    return os.getcwd() if any((directory + os.sep).startswith(d) for d in theirs) else directory


def _ipython_shell():
    """The running IPython shell (a notebook's kernel, terminal IPython), if any;
    IPython is never imported here."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def program_sources(prefixes: list[str]) -> dict[str, str]:
    """The text of the pseudo-files among prefixes (a notebook's cells), which no
    file holds: IPython keeps each cell in linecache under its name."""
    out = {}
    for filename, entry in list(linecache.cache.items()):
        if any(filename.startswith(p) for p in prefixes) and len(entry) >= 3 and entry[2]:
            out[filename] = "".join(entry[2])
    return out


class InProcessRun:
    """One profiled region: start(), the code, finish().  The magics drive it
    around a cell; profile_this around a call."""

    def __init__(self, options: Options, program: str, *, program_prefixes: list[str] = (),
                 program_codes: list[types.CodeType] = (), notices: list[str] = (),
                 no_memory_notice: str = NO_MEMORY_LIBRARY, program_directory: str | None = None):
        from ..messages import interpreter_problem  # the command's own words
        problem = interpreter_problem(force_version=False)
        if problem is not None:
            raise CannotProfile(problem)
        from ..core.session import Session
        self.options = options
        self.program = program
        self.notices = list(notices)
        self.program_prefixes = list(program_prefixes)
        if options.memory:
            from ..core.preload import attach
            why = attach()  # the library into this running process, once (preload.py)
            if why is not None:
                options.memory = False
                self.notices.append(no_memory_notice.format(why))
        # The codes stay referenced here for the run: the filter knows them by
        # address, which must not be reused meanwhile.
        self.session = Session(options, program_directory or _program_directory(), self.program_prefixes,
                               list(program_codes))

    def start(self) -> None:
        from .. import _core
        if _core.running():
            raise AlreadyProfiling("pyrometer is already profiling this process (a program run by the "
                                   "pyrometer command is profiled from start to end)")
        self.session.start()

    def finish(self, error: BaseException | None = None) -> dict[str, Any]:
        """Stop and build the profile; error: what the code raised, if anything."""
        return self.build(self.collect(), error)

    def collect(self, keep_thread: bool = False) -> dict[str, Any]:
        """Stop; the core's raw aggregates (children.Merger adds several up).
        keep_thread: Session.stop's."""
        self.session.stop(keep_thread)  # asked now: Session.stop's default
        return self.session.collect()

    def build(self, raw: dict[str, Any], error: BaseException | None = None, listing: str = "whole") -> dict[str, Any]:
        """The profile of raw, collected by this run or merged from several
        (listing: model.build's)."""
        notices = list(self.notices)
        if error is not None:
            notices.append(f"the code raised {type(error).__name__}: {error}"[:300])
        return build_profile(raw, program=self.program, options=self.options.as_profile_options(),
                             elapsed=self.session.elapsed, start_time=self.session.start_time, notices=notices,
                             sources=program_sources(self.program_prefixes),
                             process=process_row(raw, self.session.elapsed), listing=listing)


def build_profile(raw: dict[str, Any], *, program: str, options: dict[str, Any], elapsed: float, start_time: float,
                  notices: list[str], sources: dict[str, str], process: dict[str, Any],
                  listing: str = "whole") -> dict[str, Any]:
    """The profile of an in-process run's raw aggregates, built where it ran
    or, for an attached window, in the command (attached.window_profile).
    options: Options.as_profile_options(); process: its row (process_row)."""
    from .. import model
    return model.build(raw, program=program, argv=[program], options=options, elapsed=elapsed,
                       start_time=start_time, exit_status=None, ended_by="exit", notices=notices, sources=sources,
                       processes=[process], process_count=1, listing=listing)


def process_row(raw: dict[str, Any], elapsed: float, started_by: str = "in-process") -> dict[str, Any]:
    """This process's row in a profile's process table, from its raw aggregates."""
    from ..model import processes
    return processes.this_process(raw, elapsed, started_by, ended_by="exit")


def default_options(**changes: Any) -> Options:
    """The command's defaults for an in-process run: no child processes (there is
    no run directory to merge them from)."""
    options = Options(children=False)
    for name, value in changes.items():
        setattr(options, name, value)
    return options


def profile_this(func: Callable[..., Any], *args: Any, **kwargs: Any) -> ProfileResult:
    """Call func(*args, **kwargs) under the profiler in this process and return
    ProfileResult(result, profile).  Memory too: the memory library is attached
    to this process at the first call; where it cannot be, the profile is
    CPU-only, with a notice that says why.  Under the `pyrometer` command, whose
    own profile covers the whole run already, this raises AlreadyProfiling.  If
    func raises, the profiling stops and the exception propagates.

    Render the profile with pyrometer.render.report(profile, "text" | "html" | "json")."""
    code = getattr(func, "__code__", None)
    prefixes, codes = [], []
    if isinstance(code, types.CodeType):
        from ..run.launcher import code_tree
        codes = code_tree(code)
        if os.path.isabs(code.co_filename):
            prefixes.append(code.co_filename)  # the function's file is the program's, wherever it is
    shell = _ipython_shell()
    if shell is not None:  # in a notebook or IPython, every cell run so far is the program's too
        from .cells import program_cells
        prefixes += program_cells(shell)
    name = getattr(func, "__qualname__", None) or repr(func)
    run = InProcessRun(default_options(), f"profile_this({name})", program_prefixes=prefixes, program_codes=codes)
    run.start()
    try:
        result = func(*args, **kwargs)
    except BaseException:
        run.session.stop()
        raise
    return ProfileResult(result, run.finish())
