"""Writing what a run produced: the report in its format (to a file or the
real standard output), the exports of the call stacks, and the line that says
where each went and how to look at it."""

from __future__ import annotations

import os
import sys

from ..messages import error, say, unwritable


# The standard output and error pyrometer had before the program ran
# (hold_streams): the program runs in this process and may leave sys.stdout
# replaced (a tee into its own log, io.StringIO or os.devnull to be quiet, a
# wrapper without isatty), and the report is not the program's output.
_held: dict[str, object] = {}


def hold_streams() -> None:
    """Notes the standard streams as they are before the program runs."""
    _held["stdout"], _held["stderr"] = sys.stdout, sys.stderr


def report_stream():
    """Where a report on standard output goes: the standard output pyrometer
    had before the program ran (hold_streams; else the current one), else the
    process's own, else the program's (it detached the first from its buffer to
    wrap it again: `io.TextIOWrapper(sys.stdout.detach(), ...)`), else standard
    error (the program closed its descriptor, os.close(1))."""
    for stream in (_held.get("stdout", sys.stdout), sys.__stdout__, sys.stdout, _held.get("stderr", sys.stderr),
                   sys.__stderr__):
        if _usable(stream):
            return stream
    return None


def _usable(stream) -> bool:
    """Whether stream can be written to, as far as can be told before writing:
    not closed, not detached (whose `closed` raises ValueError), its descriptor
    open."""
    try:
        return stream is not None and not getattr(stream, "closed", False) and _descriptor_open(stream)
    except Exception:
        return False


def is_terminal(stream) -> bool:
    """Whether stream is a terminal; a stream that cannot say is not one."""
    try:
        return bool(stream.isatty())
    except Exception:
        return False


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
        from .json_out import chosen_name
        return chosen_name(DEFAULT_FILES[fmt])
    return None


DEFAULT_FILES = {"html": "pyrometer-profile.html", "json": "pyrometer-profile.json", "text": "pyrometer-profile.txt"}


def write_report(profile: dict, fmt: str, path: str | None, web: bool = False) -> bool | None:
    """The report, rendered and written to path (None: standard output).  For
    --web, whether a browser was opened; None otherwise."""
    from . import json_out, report
    if path is None:
        from . import text
        stream = report_stream()
        to_terminal = stream is not None and is_terminal(stream)
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
    from ..private_files import written_in_place
    from ..visible import visible
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
        problem = unwritable(path)
        if problem is not None:
            return None, problem.replace("the report", f"the --{fmt} export", 1)
        out[fmt] = (path, os.path.abspath(path))
    return out, None


def write_exports(profile: dict, exports: dict[str, tuple[str, str]], metric: str, quiet: bool,
                  name: str = "the profile") -> bool:
    """Each export asked for, written to its file; False (having said why) when
    one could not be.  name: the profile, for the messages."""
    import shlex
    from . import export
    from ..private_files import written_in_place
    from .json_out import write_report as write_file
    from .frames import ExportError
    from ..visible import visible
    ok = True
    for fmt, (shown, path) in exports.items():
        try:
            write_file(path, export(profile, fmt, metric=metric, path=name))
        except ExportError as e:
            error(f"--{fmt}: {e}", 1)
            ok = False
            continue
        except OSError as e:
            error(f"cannot write the --{fmt} export: {e}", 1)
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
    from ..core.preload import environment_without_memhooks
    from . import html
    # The browser must not inherit the memory library.
    clean = environment_without_memhooks()
    os.environ.pop("LD_PRELOAD", None)
    if "pyrometer.run.children" in sys.modules:  # nor is it one of the program's children
        sys.modules["pyrometer.run.children"].restore_environment(os.environ)
    os.environ.update(clean)
    return bool(html.open_in_browser(path))
