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

from .messages import error, interpreter_problem, say, unwritable
from .options import UsageError, add_export_options, exports_of, parse
from .settings import Options
from .render.output import export_paths, hold_streams, report_path, where_written, write_exports, write_report


def _profile(options: Options) -> int:
    """`pyrometer [options] program`: the program run profiled, its report
    written at its end (or wherever it ends), its exit status returned."""
    if "pyrometer.run.children" in sys.modules:
        # pyrometer started by a program that pyrometer profiles: this run is
        # its own, not a child of the outer one.
        sys.modules["pyrometer.run.children"].detach()
    problem = interpreter_problem(options.force_version)
    if problem is not None:
        return error(problem)
    if options.memory:
        from .core.preload import ensure_memhooks_loaded
        problem = ensure_memhooks_loaded()  # returns only when the library is in
        if problem is not None:
            return error(problem, 1)
    from .run import launcher
    named = options.module is not None or options.command is not None
    script = None if named else options.program[0]
    args = options.program if named else options.program[1:]
    try:
        target = launcher.resolve(script, options.module, args, command=options.command)
    except launcher.ProgramNotFound as e:
        print(e, file=sys.stderr)  # python's own words: the caller compares them with python's
        return e.status
    launcher.prepare(target)
    if options.live:  # pyrometer top (run/top.py)
        from .run.top import terminal_problem
        problem = terminal_problem()
        if problem is not None:
            return error(problem)
    run = _ProfiledRun(options, target)
    problem_status = run.prepare()
    if problem_status is not None:
        return problem_status
    return run.run()


class _ProfiledRun:
    """One profiled run of the program: where its report goes, its session,
    its children's run directory, and the writing of its profile at its end,
    or wherever it ends (exec, os._exit, a termination signal), from
    whichever thread."""

    def __init__(self, options: Options, target) -> None:
        self.options, self.target = options, target
        self.fmt = options.format
        self.path = self.shown = None  # shown: as the user gave it, for the line that says where it went
        self.exports: list = []
        self.session = None
        self.run_dir = None
        self.writer = None  # the periodic reports' writer or the live view
        self.endings = None
        self.warned: set[str] = set()
        self.writing = threading.Lock()
        self.writing_thread: int | None = None

    def prepare(self) -> int | None:
        """Where the report goes, the session and the run directory; an exit
        status when the run cannot be made (said on stderr), else None."""
        # What the run uses at its end, imported before the program's first
        # line (then only looked up): an import at the end could wait for a
        # lock the program held when a signal ended it, and would be its time.
        from . import _core, model  # noqa: F401
        from .core import gc_aside  # noqa: F401
        from .core.session import Session
        from .model import processes  # noqa: F401
        from .run import endings, periodic  # noqa: F401
        options = self.options
        self.path = self.shown = report_path(self.fmt, options.outfile, periodic=options.profile_interval is not None)
        if self.path is not None:
            problem = unwritable(self.path)
            if problem is not None:
                return error(problem)
            self.path = os.path.abspath(self.path)  # the program may change directory
        self.exports, problem = export_paths(options.exports())
        if problem is not None:
            return error(problem)
        self.session = Session(options, self.target.directory, self.target.program_prefixes, self.target.codes)
        if options.children:
            from .run import children
            try:
                self.run_dir = _RunDirectory.run = children.RunDirectory(self.session.core_settings())
            except OSError as e:
                return error(f"cannot make a private directory for the child processes' profiles: "
                              f"{e.strerror or e} (or use --no-children)", 1)
            self.session.control_file = os.path.join(self.run_dir.path, children.CONTROL_FILE)
        return None

    # ---- the profile, written once, from whichever thread ----------------------

    def write_profile(self, status: int | None, ended_by: str) -> bool | None:
        """The profile as it stands, written: at the end of the run, or where the
        run ends without returning (exec, os._exit, a termination signal), from
        whichever thread.  Whether it could be written; None when this thread is
        already writing it (a signal's request answered inside that write: the
        write under way ends the process of the signal when done, endings.py)."""
        me = threading.get_ident()
        if self.writing_thread == me:
            return None
        with self.writing, _interrupts_held():
            self.writing_thread = me
            try:
                return self._write(status, ended_by)
            finally:
                self.writing_thread = None

    def _notices(self, ended_by: str) -> list[str]:
        """What the report must say of how the run went, the writer's trouble first."""
        from .run import launcher
        notices = []
        writer = self.writer
        if writer is not None:
            writer.stop()  # its last write must not replace this report
            if writer.error is not None:
                notices.append(writer.error)
                if writer.error not in self.warned:
                    self.warned.add(writer.error)
                    print(f"pyrometer: warning: {writer.error}", file=sys.stderr, flush=True)
        if ended_by == "exec":
            notices.append("the program replaced itself with another (exec): the profile ends there, "
                           "and the other program's exit status is the run's")
        elif ended_by != "exit":
            notices.append(f"the program ended by {ended_by}")
        if not self.options.profile_all and not self.options.profile_only:
            notices.extend(launcher.console_script_notice(self.target))
        return notices

    def _collect(self, status: int | None, ended_by: str, elapsed: float,
                 notices: list[str]) -> tuple[dict, list, int]:
        """This process's collection with its children's merged: (raw, the
        process table, how many processes in all)."""
        from .model import processes as processes_model
        raw = self.session.collect()
        top = processes_model.this_process(raw, elapsed, "command", exit_status=status, ended_by=ended_by)
        if self.run_dir is not None and self.run_dir.path is not None:
            from .run import children
            began = time.perf_counter()
            raw, table, count, more = children.merge(self.run_dir.path, raw, top, self.session.start_time,
                                                     *children.family_records())
            raw["merge_ns"] = int((time.perf_counter() - began) * 1e9)
            notices.extend(more)
            if ended_by != "exit":
                self.run_dir.remove()  # the process ends now (a signal, os._exit, exec)
            return raw, table, count
        if not self.options.children:
            notices.append("child processes were not profiled (--no-children): this is the first "
                           "process only")
        return raw, [top], 1

    def _write(self, status: int | None, ended_by: str) -> bool:
        from . import model
        options, target = self.options, self.target
        elapsed = self.session.elapsed_now()
        notices = self._notices(ended_by)
        raw, table, count = self._collect(status, ended_by, elapsed, notices)
        profile = model.build(raw, program=target.display, argv=target.argv,
                              options=options.as_profile_options(), elapsed=elapsed,
                              start_time=self.session.start_time, exit_status=status, ended_by=ended_by,
                              notices=notices, sources=target.sources, processes=table, process_count=count)
        try:
            # Only a run that ended by itself opens a browser: not one about to be
            # replaced or to die of a signal.
            opened = write_report(profile, self.fmt, self.path, web=options.web and ended_by == "exit")
        except OSError as e:
            error(f"cannot write the report: {e}", 1)
            return False
        if self.path is not None and not options.quiet:
            say(where_written(self.fmt, self.shown, self.path, opened=opened, interval=options.profile_interval))
        return write_exports(profile, self.exports, options.collapsed_metric, options.quiet, "this run's profile")

    def on_termination_signal(self, signum: int) -> bool:
        """Called by the core (csrc/ending) on a termination signal; it then dies of
        it, unless this returns False (this thread is writing the profile already)."""
        from .run.endings import by_signal
        return self.write_profile(*by_signal(signum)) is not None

    # ---- around the program -------------------------------------------------------

    def start(self) -> None:
        from . import _core
        from .core import gc_aside
        from .run.endings import Endings
        options, target = self.options, self.target
        job = {"program": target.display, "argv": target.argv, "options": options.as_profile_options(),
               "format": self.fmt, "path": self.path, "sources": target.sources}
        if options.profile_interval is not None:
            from .run.periodic import PeriodicWriter
            self.writer = PeriodicWriter(options.profile_interval, job)
            self.writer.spawn()
        elif options.live:  # pyrometer top: the same snapshots, drawn on the terminal (run/top.py)
            from .run.top import LiveView
            self.writer = LiveView(job)
            self.writer.spawn()
        if self.run_dir is not None:
            from .run import children
            children.profile_forks(self.run_dir.settings)  # before the start: what it imports is not the program's
        self.session.start()
        _core.ending_install(self.on_termination_signal)
        self.endings = Endings(self.write_profile, _core.ending_signal, _core.ending_reinstall, _core.ending_die)
        self.endings.install()
        if self.writer is not None:
            self.writer.begin(self.session.start_time, self.session.t0)
        gc_aside.set_aside()  # the last step before the program's first line

    def stop(self) -> None:
        asked_ns = time.monotonic_ns()  # the program's end: Session.stop
        if self.run_dir is not None:
            from .run import children
            children.stop_profiling_forks()
        if self.endings is not None:
            self.endings.uninstall()
        self.session.stop(asked_ns=asked_ns)  # the writer, driven by the sampler, is stopped when the profile is written

    def run(self) -> int:
        """The program, profiled; its exit status (or its death, by the signal
        that ended it)."""
        from . import _core
        from .run import launcher
        parent = os.getpid()
        hold_streams()  # the report's, whatever the program does with sys.stdout
        outcome = launcher.run(self.target, self.start, self.stop)
        if os.getpid() != parent:
            return outcome.status  # a child forked by the program: the parent reports
        if not outcome.ran:
            # python stopped before the program's first line and said why: a profile
            # of nothing would only bury that (periodic reports end unwritten).
            if self.writer is not None:
                self.writer.stop()
        else:
            # A report that could not be written is said on stderr (_write); the
            # run's exit status stays the program's, which scripts and CI act on.
            self.endings.at_end(outcome.status)
        if self.run_dir is not None:
            self.run_dir.remove()
        _core.ending_uninstall()
        if self.endings is not None:
            # A termination signal before or during the end of the run: the profile
            # is written, now the death it asked for.
            self.endings.die_if_signalled()
        if outcome.interrupted:
            if self.options.memory:
                from .core.preload import remove_private_link
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
        return error(str(e))
    if problem is not None:
        return error(problem)
    fmt = "json" if ns.json else "html" if (ns.html or ns.web) else "text"
    # Only the exports when only they are asked for; the report too when its
    # format is named.
    report_too = not exports or ns.cli or ns.json or ns.html or ns.web or ns.outfile is not None
    # No program shares the standard output here: JSON may go there.
    path = report_path(fmt, ns.outfile, stdout_shared=False)
    if path is not None and report_too:
        problem = unwritable(path)
        if problem is not None:
            return error(problem)
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
        return error(str(e))
    except OSError as e:
        return error(f"cannot write the report: {e}", 1)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # check() let through something a renderer cannot use: still one line.
        return error(f"{ns.profile} is damaged: {type(e).__name__}: {e}")
    if path is not None and not ns.quiet:
        say(where_written(fmt, path, os.path.abspath(path), opened=opened))
    return 0


class _DiffParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2
        raise UsageError(message)


def _diff(argv: list[str]) -> int:
    """`pyrometer diff BEFORE.json AFTER.json [--html FILE] [--json FILE]`: the
    text report on standard output, the web page and the JSON to their files;
    the exit status."""
    from . import model
    from .model.diff import DiffError, compare, finite, load_pair  # compare two saved profiles
    from .render.output import is_terminal, report_stream
    from .render import diff_text, json_out, text
    parser = _DiffParser(prog="pyrometer diff",
                         usage="pyrometer diff BEFORE.json AFTER.json [--html FILE] [--json FILE] [--quiet]",
                         description="Compare two profiles saved with pyrometer --json: per file, line and "
                                     "function, what got faster, slower, bigger or smaller, beyond sampling "
                                     "noise.")
    parser.add_argument("before", metavar="BEFORE.json", help="the profile of the run before the change")
    parser.add_argument("after", metavar="AFTER.json", help="the profile of the run after it")
    parser.add_argument("--html", metavar="FILE", help="also write the diff as a self-contained web page")
    parser.add_argument("--json", metavar="FILE", help="also write the diff as JSON (docs/diff.md)")
    parser.add_argument("--quiet", action="store_true", help="do not say on standard error where files went")
    try:
        ns = parser.parse_args(argv)
    except UsageError as e:
        return error(str(e))
    for path in (ns.html, ns.json):
        problem = unwritable(path) if path is not None else None
        if problem is not None:
            return error(problem)
    try:
        before, after = load_pair(ns.before, ns.after, model.load)
        result = compare(before, after, ns.before, ns.after)
    except (model.ProfileError, DiffError) as e:
        return error(str(e))
    except OverflowError:
        result = None
    if result is None or not finite(result):
        # Each figure of a checked profile is finite, but sums of figures near
        # the largest float are not.
        return error(f"{ns.before} and {ns.after} cannot be compared: their figures add up beyond any number")
    try:
        written = []
        if ns.json is not None:
            json_out.write_report(ns.json, json_out.render(result))
            written.append(("diff", ns.json))
        if ns.html is not None:
            from .render import diff_html
            json_out.write_report(ns.html, diff_html.render(result))
            written.append(("web page of the diff", ns.html))
    except OSError as e:
        return error(f"cannot write the diff: {e}", 1)
    stream = report_stream()
    if stream is not None:
        tty = is_terminal(stream)
        stream.write(diff_text.render(result, color=tty and "NO_COLOR" not in os.environ,
                                      width=text.terminal_width() if tty else 1 << 20))
        stream.flush()
    if not ns.quiet:
        for what, path in written:
            say(f"pyrometer: {what} written to {text.visible(path)}")
    return 0


def _kernel(argv: list[str]) -> int:
    from .integrations.kernel import command  # Jupyter kernels with memory profiling
    return command(argv)


def _attach(argv: list[str]) -> int:
    from .integrations.attach import command  # profile a running program (CPython 3.14+)
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
        argv = ["--live", *argv[1:]]  # pyrometer top PROG: the live view (run/top.py)
    try:
        options = parse(argv)
    except UsageError as e:
        return error(str(e))
    if options.pid is not None and options.live:
        from .run import top as live  # pyrometer top --pid N
        return live.attach(options.pid)
    if options.pid is not None:
        from .run import remote
        return remote.main(options.pid, resume=options.on)
    try:
        return _profile(options)
    finally:
        if _RunDirectory.run is not None:
            _RunDirectory.run.remove()  # the children's run directory, on the ways _profile did not
        if options.memory:
            from .core.preload import remove_private_link
            remove_private_link()  # the library's link, when its path could not be preloaded
