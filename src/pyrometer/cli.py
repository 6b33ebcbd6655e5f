"""The pyrometer command: parse the command line, run the program under the
profiler, write the report, and exit with the program's own status."""

from __future__ import annotations

import os
import signal
import sys

from . import launcher, model
from .options import Options, UsageError, parse
from .profiler import Session, ensure_memhooks_preloaded
from .render import json_out, text


def _error(message: str, status: int = 2) -> int:
    print(f"pyrometer: error: {message}", file=sys.stderr)
    return status


def _report_stream():
    """The program may have replaced or closed sys.stdout; report to the real one."""
    for stream in (sys.stdout, sys.__stdout__, sys.stderr):
        if stream is not None and not getattr(stream, "closed", False):
            return stream
    return None


def write_report(profile: dict, options: Options) -> None:
    if options.json:
        rendered = json_out.render(profile)
    else:
        to_terminal = options.outfile is None and (_report_stream() or sys.stderr).isatty()
        rendered = text.render(profile, color=to_terminal and "NO_COLOR" not in os.environ,
                               width=text.terminal_width() if to_terminal else 1 << 20)
    if options.outfile is not None:
        json_out.write_atomically(options.outfile, rendered)
        return
    stream = _report_stream()
    if stream is not None:
        stream.write(rendered)
        stream.flush()


def _profile(options: Options) -> int:
    script = None if options.module is not None else options.program[0]
    args = options.program if options.module is not None else options.program[1:]
    try:
        target = launcher.resolve(script, options.module, args)
    except launcher.ProgramNotFound as e:
        return _error(str(e))
    if options.memory:
        problem = ensure_memhooks_preloaded()
        if problem is not None:
            return _error(problem, 1)
    session = Session(options, target.directory)
    parent = os.getpid()
    outcome = launcher.run(target, session.start, session.stop)
    if os.getpid() != parent:
        return outcome.status  # a child forked by the program: the parent reports
    profile = model.build(session.collect(), program=target.display, argv=target.argv,
                          options=options.as_profile_options(), elapsed=session.elapsed,
                          start_time=session.start_time, exit_status=outcome.status)
    try:
        write_report(profile, options)
    except OSError as e:
        _error(f"cannot write the report: {e}", 1)
        if outcome.status == 0:
            outcome.status = 1
    if outcome.interrupted:
        # Exit the way Python does on Ctrl-C: killed by SIGINT, so that shells and
        # parent processes see the interruption.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return outcome.status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":
        argv = argv[1:]
    elif argv and argv[0] == "view":
        return _error("pyrometer view is not available yet")
    try:
        options = parse(argv)
    except UsageError as e:
        return _error(str(e))
    return _profile(options)
