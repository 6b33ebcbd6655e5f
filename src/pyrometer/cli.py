"""The pyrometer command: parse the command line, run the program under the
profiler, write the report, and exit with the program's own status.

The memory library is attached to this same process (preload.py), so what the
run does not need is imported where it is used: every import is start-up time."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time

from .options import Options, UsageError, add_export_options, exports_of, parse


def _error(message: str, status: int = 2) -> int:
    from .render.visible import visible  # a message may quote a file name: nothing raw to the terminal
    print(f"pyrometer: error: {visible(message)}", file=sys.stderr)
    return status


def _report_stream():
    """The program may have replaced or closed sys.stdout, or closed its
    descriptor (os.close(1)); report to the real one, else to stderr."""
    for stream in (sys.stdout, sys.__stdout__, sys.stderr):
        if stream is not None and not getattr(stream, "closed", False) and _descriptor_open(stream):
            return stream
    return None


def _descriptor_open(stream) -> bool:
    """Whether the stream's descriptor is still open (one without a descriptor,
    an io.StringIO the program put there: yes)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return True
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def report_path(fmt: str, outfile: str | None, periodic: bool = False,
                stdout_shared: bool = True) -> str | None:
    """Where the report goes: --outfile; else a default file for the web page,
    for periodic reports (which need a file to replace) and for JSON while a
    program runs (stdout_shared): the program's own standard output is no place
    for a file that json.load must read, and whether the program writes to it
    cannot be known before it has run; else (the text report, and JSON from
    pyrometer view) standard output."""
    if outfile is not None:
        return outfile
    if fmt == "html" or periodic or (fmt == "json" and stdout_shared):
        from .render.json_out import chosen_name
        return chosen_name(DEFAULT_FILES[fmt])
    return None


DEFAULT_FILES = {"html": "pyrometer-profile.html", "json": "pyrometer-profile.json", "text": "pyrometer-profile.txt"}


def write_report(profile: dict, fmt: str, path: str | None, web: bool = False) -> bool | None:
    """The report, rendered and written to path (None: standard output).  For
    --web, whether a browser was opened; None otherwise."""
    from .render import json_out, report
    if path is None:
        from .render import text
        stream = _report_stream()
        to_terminal = (stream or sys.stderr).isatty()
        # A terminal's width is respected; a file or a pipe gets the lines whole
        # (a pager or an editor shows them as wide as it likes).
        rendered = report(profile, fmt, color=to_terminal and "NO_COLOR" not in os.environ,
                          width=text.terminal_width() if to_terminal else 1 << 20)
        if stream is not None:
            stream.write(rendered)
            stream.flush()
        return None
    json_out.write_report(path, report(profile, fmt))
    return _open_page(path) if web else None


def where_written(fmt: str, shown: str, path: str, *, opened: bool | None = None,
                  interval: float | None = None) -> str:
    """The one line that says where a report written to a file went and how to
    look at it.  shown: the path as the user gave it (relative to the directory
    pyrometer was started in, which is the shell's, whatever the program did
    with its own); path: the same, absolute."""
    import shlex
    from .render.json_out import written_in_place
    from .render.visible import visible
    what = {"json": "profile", "html": "web report", "text": "report"}[fmt]
    line = f"pyrometer: {what} written to {visible(shown)}"
    if interval is not None:
        line += f", also every {interval:g} s while the program ran"
    if written_in_place(path):
        return line  # a FIFO or a device (/dev/stdout, /dev/null): nothing to look at again
    quoted = visible(shlex.quote(shown))
    if fmt == "json":
        return line + f" (view: pyrometer view {quoted})"
    if fmt == "text":
        return line + f" (view: less -S {quoted})"
    if opened:
        return line + " and opened in a browser"
    if opened is False:
        return line + f" (no browser to open it here: the page is {visible(path)})"
    return line + " (view: open it in a browser)"


# ---- exports of the call stacks (docs/exports.md) ----

# How to look at each export, for the line that says where it went.
EXPORT_VIEWERS = {"pprof": ("pprof profile", "go tool pprof -http=: {}"),
                  "speedscope": ("speedscope profile", "open it at https://www.speedscope.app"),
                  "collapsed": ("folded stacks", "flamegraph.pl {} > flame.svg"),
                  "firefox": ("Firefox Profiler profile", "load it at https://profiler.firefox.com")}


def export_paths(exports: dict[str, str]) -> tuple[dict[str, tuple[str, str]] | None, str | None]:
    """The exports' files as (shown, absolute), or why one cannot be written."""
    out = {}
    for fmt, path in exports.items():
        problem = _unwritable(path)
        if problem is not None:
            return None, problem.replace("the report", f"the --{fmt} export", 1)
        out[fmt] = (path, os.path.abspath(path))
    return out, None


def write_exports(profile: dict, exports: dict[str, tuple[str, str]], metric: str, quiet: bool,
                  name: str = "the profile") -> bool:
    """Each export asked for, written to its file; False (having said why) when
    one could not be.  name: the profile, for the messages."""
    import shlex
    from .render import export
    from .render.json_out import write_report as write_file, written_in_place
    from .render.stacks import ExportError
    from .render.visible import visible
    ok = True
    for fmt, (shown, path) in exports.items():
        try:
            write_file(path, export(profile, fmt, metric=metric, path=name))
        except ExportError as e:
            _error(f"--{fmt}: {e}", 1)
            ok = False
            continue
        except OSError as e:
            _error(f"cannot write the --{fmt} export: {e}", 1)
            ok = False
            continue
        if not quiet:
            what, how = EXPORT_VIEWERS[fmt]
            line = f"pyrometer: {what} written to {visible(shown)}"
            say(line if written_in_place(path) else f"{line} (view: {how.format(visible(shlex.quote(shown)))})")
    return ok


# ---- end of exports ----


def _open_page(path: str) -> bool:
    """--web: whether a browser was opened; never an error."""
    from .preload import environment_without_memhooks
    from .render import html
    # The browser must not inherit the memory library.
    clean = environment_without_memhooks()
    os.environ.pop("LD_PRELOAD", None)
    if "pyrometer.children" in sys.modules:  # nor is it one of the program's children
        sys.modules["pyrometer.children"].restore_environment(os.environ)
    os.environ.update(clean)
    return bool(html.open_in_browser(path))


def say(line: str) -> None:
    """One line for the user on the real standard error: the program may have
    replaced sys.stderr with an object of its own (which must not get
    pyrometer's words), or closed it."""
    for stream in (sys.__stderr__, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.write(line + "\n")
            stream.flush()
            return
        except (OSError, ValueError):
            continue


def _interpreter_problem(force_version: bool) -> str | None:
    """Why this interpreter cannot be profiled, in one line, or None.  The
    measuring core says it: for a free-threaded build or a version without a
    frame layout it is built as a module that refuses to load, with the reason."""
    try:
        from . import _core
    except ImportError as e:
        return str(e).splitlines()[0] if str(e) else "pyrometer's measuring core cannot be loaded"
    if not _core.VERSION_TESTED and not force_version:
        v = sys.version_info
        return (f"pyrometer supports CPython {_core.TESTED_VERSIONS}; this is CPython "
                f"{v.major}.{v.minor}.{v.micro}, untested (this build reads its frames with the "
                f"{_core.FRAME_LAYOUT} layout): add --force-version to try anyway")
    return None


def _profile(options: Options) -> int:
    if "pyrometer.children" in sys.modules:
        # pyrometer started by a program that pyrometer profiles: this run is
        # its own, not a child of the outer one.
        sys.modules["pyrometer.children"].detach()
    problem = _interpreter_problem(options.force_version)
    if problem is not None:
        return _error(problem)
    if options.memory:
        from .preload import ensure_memhooks_loaded
        problem = ensure_memhooks_loaded()  # returns only when the library is in
        if problem is not None:
            return _error(problem, 1)
    from . import _core, launcher, model
    from .endings import Endings
    from .periodic import PeriodicWriter
    from .profiler import Session
    named = options.module is not None or options.command is not None
    script = None if named else options.program[0]
    args = options.program if named else options.program[1:]
    try:
        target = launcher.resolve(script, options.module, args, command=options.command)
    except launcher.ProgramNotFound as e:
        print(e, file=sys.stderr)  # python's own words: the caller compares them with python's
        return e.status
    launcher.prepare(target)
    if options.live:  # pyrometer top (live.py)
        from .live import terminal_problem
        problem = terminal_problem()
        if problem is not None:
            return _error(problem)
    fmt = options.format
    path = report_path(fmt, options.outfile, periodic=options.profile_interval is not None)
    shown = path  # as the user gave it, for the line that says where it went
    if path is not None:
        problem = _unwritable(path)
        if problem is not None:
            return _error(problem)
        path = os.path.abspath(path)  # the program may change directory
    exports, problem = export_paths(options.exports())
    if problem is not None:
        return _error(problem)
    session = Session(options, target.directory, target.program_prefixes, target.codes)
    run = None
    if options.children:
        from . import children
        try:
            run = _RunDirectory.run = children.RunDirectory(session.core_settings())
        except OSError as e:
            return _error(f"cannot make a private directory for the child processes' profiles: "
                          f"{e.strerror or e} (or use --no-children)", 1)
        session.control_file = os.path.join(run.path, children.CONTROL_FILE)
    writer = None
    endings = None
    warned: set[str] = set()
    writing = threading.Lock()
    writing_thread: int | None = None

    def write_profile(status: int | None, ended_by: str) -> bool | None:
        """The profile as it stands, written: at the end of the run, or where the
        run ends without returning (exec, os._exit, a termination signal), from
        whichever thread.  Whether it could be written; None when this thread is
        already writing it (a signal's request answered inside that write: the
        write under way ends the process of the signal when done, endings.py)."""
        nonlocal writing_thread
        me = threading.get_ident()
        if writing_thread == me:
            return None
        with writing, _interrupts_held():
            writing_thread = me
            try:
                return _write(status, ended_by)
            finally:
                writing_thread = None

    def _write(status: int | None, ended_by: str) -> bool:
        elapsed = session.elapsed_now()
        notices = []
        if writer is not None:
            writer.stop()  # its last write must not replace this report
            if writer.error is not None:
                notices.append(writer.error)
                if writer.error not in warned:
                    warned.add(writer.error)
                    print(f"pyrometer: warning: {writer.error}", file=sys.stderr, flush=True)
        if ended_by == "exec":
            notices.append("the program replaced itself with another (exec): the profile ends there, "
                           "and the other program's exit status is the run's")
        elif ended_by != "exit":
            notices.append(f"the program ended by {ended_by}")
        if not options.profile_all and not options.profile_only:
            notices.extend(launcher.console_script_notice(target))
        raw = session.collect()
        top = {"pid": os.getpid(), "ppid": os.getppid(), "command": list(sys.orig_argv),
               "started_by": "command", "profiled": True, "wall_sec": elapsed,
               "paused_sec": raw.get("paused_ns", 0) * 1e-9,
               "cpu_sec": raw["process_cpu_ns"] * 1e-9,
               "peak_mb": max(raw["memory"]["max_footprint_bytes"], 0) / 1048576.0 if raw.get("memory") else None,
               "exit_status": status, "ended_by": ended_by, "note": None}
        processes, count = [top], 1
        if run is not None and run.path is not None:
            began = time.perf_counter()
            raw, processes, count, more = children.merge(run.path, raw, top, session.start_time,
                                                         *children.family_records())
            raw["merge_ns"] = int((time.perf_counter() - began) * 1e9)
            notices.extend(more)
            if ended_by != "exit":
                run.remove()  # the process ends now (a signal, os._exit, exec)
        elif not options.children:
            notices.append("child processes were not profiled (--no-children): this is the first "
                           "process only")
        profile = model.build(raw, program=target.display, argv=target.argv,
                              options=options.as_profile_options(), elapsed=elapsed,
                              start_time=session.start_time, exit_status=status, ended_by=ended_by,
                              notices=notices, sources=target.sources, processes=processes,
                              process_count=count)
        try:
            # Only a run that ended by itself opens a browser: not one about to be
            # replaced or to die of a signal.
            opened = write_report(profile, fmt, path, web=options.web and ended_by == "exit")
        except OSError as e:
            _error(f"cannot write the report: {e}", 1)
            return False
        if path is not None and not options.quiet:
            say(where_written(fmt, shown, path, opened=opened, interval=options.profile_interval))
        return write_exports(profile, exports, options.collapsed_metric, options.quiet, "this run's profile")

    def on_termination_signal(signum: int) -> bool:
        """Called by the core (csrc/ending) on a termination signal; it then dies of
        it, unless this returns False (this thread is writing the profile already)."""
        return write_profile(128 + signum, signal.Signals(signum).name) is not None

    def start() -> None:
        nonlocal writer, endings
        if options.profile_interval is not None:
            writer = PeriodicWriter(options.profile_interval, {
                "program": target.display, "argv": target.argv, "options": options.as_profile_options(),
                "format": fmt, "path": path, "sources": target.sources})
            writer.spawn()
        elif options.live:  # pyrometer top: the same snapshots, drawn on the terminal (live.py)
            from .live import LiveView
            writer = LiveView({"program": target.display, "argv": target.argv,
                               "options": options.as_profile_options(), "format": fmt, "path": path,
                               "sources": target.sources})
            writer.spawn()
        if run is not None:
            children.profile_forks(run.settings)  # before the start: what it imports is not the program's
        session.start()
        _core.ending_install(on_termination_signal)
        endings = Endings(write_profile, _core.ending_signal, _core.ending_reinstall, _core.ending_die)
        endings.install()
        if writer is not None:
            writer.begin(session.start_time, session.t0)

    def stop() -> None:
        if run is not None:
            children.stop_profiling_forks()
        if endings is not None:
            endings.uninstall()
        session.stop()  # the writer, driven by the sampler, is stopped when the profile is written

    parent = os.getpid()
    outcome = launcher.run(target, start, stop)
    if os.getpid() != parent:
        return outcome.status  # a child forked by the program: the parent reports
    if not outcome.ran:
        # python stopped before the program's first line and said why: a profile
        # of nothing would only bury that (periodic reports end unwritten).
        if writer is not None:
            writer.stop()
    else:
        # A report that could not be written is said on stderr (_write); the
        # run's exit status stays the program's, which scripts and CI act on.
        write_profile(outcome.status, "exit")
    if run is not None:
        run.remove()
    _core.ending_uninstall()
    signum = _core.ending_signal()
    if signum:
        # A termination signal during the end of the run: the profile is written,
        # now the death it asked for.
        _core.ending_die(signum)
    if outcome.interrupted:
        if options.memory:
            from .preload import remove_private_link
            remove_private_link()  # main's finally does not run after the kill
        # Exit the way Python does on Ctrl-C: killed by SIGINT, so that shells and
        # parent processes see the interruption.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return outcome.status


@contextlib.contextmanager
def _interrupts_held():
    """Ctrl-C while pyrometer writes the profile (not the program's time) is
    ignored: it must not leave the profile unwritten, nor show a traceback of
    pyrometer's own.  A handler rather than SIG_IGN, which a browser opened by
    --web would inherit.  Only the main thread can change it; elsewhere the
    program's handler stays."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _ignore)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ignore(signum, frame) -> None:
    pass


class _RunDirectory:
    """The children's run directory of this command, for main to remove on
    every way out."""
    run = None


def _unwritable(path: str) -> str | None:
    """Why the report could not be written to path, checked before the program
    runs rather than after it."""
    from .render.json_out import written_in_place
    if os.path.isdir(path):
        return f"cannot write the report to {path}: it is a directory"
    if written_in_place(path):  # a FIFO or a device: written into, not replaced
        return None if os.access(path, os.W_OK) else f"cannot write the report to {path}: it is not writable"
    # A regular file, new or replaced, is made in its directory (a link's: its target's)
    directory = os.path.dirname(os.path.abspath(os.path.realpath(path) if os.path.islink(path) else path))
    if not os.path.isdir(directory):
        return f"cannot write the report to {path}: no directory {directory}"
    if not os.access(directory, os.W_OK):
        return f"cannot write the report to {path}: {directory} is not writable"
    return None


class _ViewParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2
        raise UsageError(message)


def _view(argv: list[str]) -> int:
    from . import model
    parser = _ViewParser(
        prog="pyrometer view",
        usage="pyrometer view PROFILE.json [--cli | --json | --html | --web] [-o FILE] [--reduced-profile] [--quiet] "
              "[--pprof FILE] [--speedscope FILE] [--collapsed FILE [--collapsed-metric M]] [--firefox FILE]",
        description="Render a profile saved with pyrometer --json, also one made on another machine "
                    "(the source lines come from the profile).")
    parser.add_argument("profile", metavar="PROFILE.json",
                        help="the saved profile; - (or /dev/stdin) reads it from standard input")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--cli", action="store_true", help="the annotated text report (the default)")
    what.add_argument("--json", action="store_true", help="the profile as JSON again (with --reduced-profile: reduced)")
    what.add_argument("--html", action="store_true",
                      help="the self-contained web page, to -o FILE (default pyrometer-profile.html)")
    what.add_argument("--web", action="store_true", help="the web page, opened in a browser when there is one")
    parser.add_argument("-o", "--outfile", metavar="FILE", default=None, help="write the report to FILE")
    parser.add_argument("--reduced-profile", action="store_true",
                        help="show only lines at or above the thresholds")
    parser.add_argument("--quiet", action="store_true",
                        help="do not say on standard error where the report was written")
    add_export_options(parser)
    try:
        ns = parser.parse_args(argv)
        exports, problem = export_paths(exports_of(ns))
    except UsageError as e:
        return _error(str(e))
    if problem is not None:
        return _error(problem)
    fmt = "json" if ns.json else "html" if (ns.html or ns.web) else "text"
    # Only the exports when only they are asked for; the report too when its
    # format is named.
    report_too = not exports or ns.cli or ns.json or ns.html or ns.web or ns.outfile is not None
    # No program shares the standard output here: JSON may go there.
    path = report_path(fmt, ns.outfile, stdout_shared=False)
    if path is not None and report_too:
        problem = _unwritable(path)
        if problem is not None:
            return _error(problem)
    try:
        # "-": standard input, like /dev/stdin (both are read to their end,
        # never seeked: a pipe works).
        profile = (model.loads(sys.stdin.buffer.read(), "standard input") if ns.profile == "-"
                   else model.load(ns.profile))
        if ns.reduced_profile:
            profile = model.reduced(profile)
        if exports and not write_exports(profile, exports, ns.collapsed_metric, ns.quiet,
                                         "standard input" if ns.profile == "-" else ns.profile):
            return 1
        if not report_too:
            return 0
        opened = write_report(profile, fmt, path, web=ns.web)
    except model.ProfileError as e:
        return _error(str(e))
    except OSError as e:
        return _error(f"cannot write the report: {e}", 1)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # check() let through something a renderer cannot use: still one line.
        return _error(f"{ns.profile} is damaged: {type(e).__name__}: {e}")
    if path is not None and not ns.quiet:
        say(where_written(fmt, path, os.path.abspath(path), opened=opened))
    return 0


def _diff(argv: list[str]) -> int:
    from .diff import command  # compare two saved profiles
    return command(argv)


def _kernel(argv: list[str]) -> int:
    from .kernel import command  # Jupyter kernels with memory profiling
    return command(argv)


def _attach(argv: list[str]) -> int:
    from .attach import command  # profile a running program (CPython 3.14+)
    return command(argv)


# The commands that are not a run; `top` is a run (the live view).
SUBCOMMANDS = {"view": _view, "diff": _diff, "kernel": _kernel, "attach": _attach}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    if argv and argv[0] == "run":
        argv = argv[1:]
    elif argv and argv[0] == "top":
        argv = ["--live", *argv[1:]]  # pyrometer top PROG: the live view (live.py)
    try:
        options = parse(argv)
    except UsageError as e:
        return _error(str(e))
    if options.pid is not None and options.live:
        from . import live  # pyrometer top --pid N
        return live.attach(options.pid)
    if options.pid is not None:
        from . import remote
        return remote.main(options.pid, resume=options.on)
    try:
        return _profile(options)
    finally:
        if _RunDirectory.run is not None:
            _RunDirectory.run.remove()  # the children's run directory, on the ways _profile did not
        if options.memory:
            from .preload import remove_private_link
            remove_private_link()  # the library's link, when its path could not be preloaded
