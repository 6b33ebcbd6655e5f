"""IPython and Jupyter: `%load_ext pyrometer`, then `%pyrometer [options]
statement` and `%%pyrometer [options]` over a cell profile that code in the
kernel (inprocess.py) and show the report.

The web report is shown inside an <iframe srcdoc=... sandbox="allow-scripts">:
 - the page is self-contained (its script, style and data inline; its own
   Content-Security-Policy forbids every fetch), so it needs no server, no
   file and no network, and works in a notebook saved and opened elsewhere;
 - sandboxed without allow-same-origin, the page runs in an opaque origin: its
   script can touch neither the notebook, its cookies nor the kernel, so a
   profile's text (source lines, file names: the program's, not ours) can never
   act on the notebook, whatever the frontend's sanitising does;
 - inserted as output, a <script> would run (or not, under the frontend's CSP or
   trust rules) in the notebook's own page; a frame gives the report its own
   document, its own policy and style that cannot leak into the notebook's.
A text/plain version of the text report goes beside it, for frontends that show
no HTML (jupyter console, nbconvert to text, a terminal).

Only this module imports IPython; `import pyrometer` does not."""

from __future__ import annotations

import argparse
import ast
import html
import os
import re
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from . import inprocess
from .cells import cell_prefixes, program_cells
from ..options import UsageError as CommandUsageError, _Parser, option_actions

NO_MEMORY_IN_KERNEL = ("memory was not profiled: {}; for CPU and memory, use a kernel installed with "
                       "`pyrometer kernel install`")
FRAME_HEIGHT_PX = 620
# Where the last profile is left in the notebook's namespace, for code that wants
# its numbers (pyrometer.render.report(_pyrometer_profile, "json")).
PROFILE_VARIABLE = "_pyrometer_profile"


class _MagicParser(_Parser):
    def error(self, message: str):  # the command's one-line wording, for the magic
        try:
            super().error(message)
        except CommandUsageError as e:  # the command's, into IPython's (shown without a traceback)
            raise UsageError(f"%pyrometer: {e}") from None


# The command's options that mean something for code run in the kernel.
MAGIC_OPTIONS = {"html", "cli", "json", "outfile", "reduced_profile", "cpu_only", "leak_detector",
                 "profile_all", "profile_only", "profile_exclude", "cpu_sampling_rate",
                 "cpu_percent_threshold", "malloc_threshold", "allocation_sampling_window",
                 "use_virtual_time"}


def _parser() -> argparse.ArgumentParser:
    """The magics' options, defined by the command's own table (options.py): the
    same names, checks, limits and defaults.  The report is the web page unless
    --cli or --json says otherwise; --outfile also writes it to a file."""
    p = _MagicParser(prog="%pyrometer", add_help=False,
                     usage="%pyrometer [options] statement  |  %%pyrometer [options] (then the cell)")
    for action in option_actions(MAGIC_OPTIONS):
        p._add_action(action)
    return p


def split_options(line: str) -> tuple[list[str], str]:
    """The magic's options and the statement after them, as the command splits
    its own from the program's: the first word that is not one of our options
    starts the statement, which is kept verbatim (its quotes and spacing); --
    ends the options explicitly."""
    actions = _parser()._actions
    known = {s for a in actions for s in a.option_strings}
    takes_value = {s for a in actions for s in a.option_strings if a.nargs != 0}
    options: list[str] = []
    rest = line.strip()
    while rest.startswith("-"):
        word, after = _first_word(rest)
        if word == "--":
            return options, after
        name = word.split("=", 1)[0]
        if name not in known:
            if re.fullmatch(r"--[a-z][a-z-]+", name):  # not Python either: a misspelt option
                raise UsageError(f"%pyrometer: unknown option {name} (-- before a statement "
                                 "that starts with it)")
            break  # a statement that starts with a minus sign (-x)
        options.append(word)
        rest = after
        if name in takes_value and "=" not in word:
            value, rest = _first_word(rest)
            options.append(value)
    return options, rest


def _first_word(text: str) -> tuple[str, str]:
    """The first whitespace-separated word of text, and what follows it."""
    parts = text.split(None, 1)
    return (parts[0], parts[1].lstrip() if len(parts) > 1 else "") if parts else ("", "")


def _calling_cell(prefixes: list[str]) -> str | None:
    """The name of the cell whose code called the magic: the nearest frame
    compiled from a cell."""
    f = sys._getframe(1)
    while f is not None:
        if any(f.f_code.co_filename.startswith(p) for p in prefixes):
            return f.f_code.co_filename
        f = f.f_back
    return None


APP_ELEMENT = '<div id="app"></div>'  # what the page's script fills (render/html.py)


def frame(page: str, text: str, height: int = FRAME_HEIGHT_PX) -> str:
    """The web report in a sandboxed frame (see the module's docstring), with
    the text report inside the element its script draws into: a frontend whose
    own policy forbids inline scripts forbids them in the frame too (a srcdoc
    document inherits its parent's policy), and then the frame shows the text
    report instead of a blank page."""
    page = page.replace(APP_ELEMENT, f'<div id="app"><pre>{html.escape(text, quote=False)}</pre></div>', 1)
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
            f'title="pyrometer profile" style="width:100%;height:{height}px;border:1px solid #ccc;'
            f'resize:vertical"></iframe>')


def _text_width() -> int:
    """A kernel has no terminal: COLUMNS when it is set, else no limit (as the
    command writes to a file): a notebook scrolls a wide line, and a cut one
    would lose figures or source."""
    try:
        return max(int(os.environ["COLUMNS"]), 40)
    except (KeyError, ValueError):
        return 1 << 20


def show(profile: dict[str, Any], fmt: str = "html") -> None:
    """Display the profile as rich output: the web report with the text report
    as its plain-text version ("html"), or the text or JSON alone."""
    from ..render import report
    if fmt == "json":
        display({"text/plain": report(profile, "json")}, raw=True)
        return
    text = report(profile, "text", width=_text_width())
    if fmt == "text":
        display({"text/plain": text}, raw=True)
        return
    display({"text/html": frame(report(profile, "html"), text), "text/plain": text}, raw=True)


@magics_class
class PyrometerMagics(Magics):

    @line_cell_magic
    def pyrometer(self, line: str, cell: str | None = None):
        """Profile a statement (%pyrometer [options] statement) or a cell
        (%%pyrometer [options]) with pyrometer, and show the report.

        Options: --html (the default: the web report, and the text report for
        plain frontends), --cli (text), --json, --outfile FILE, --reduced-profile,
        --cpu-only, --no-leak-detector, --profile-all, --profile-only S,
        --profile-exclude S, --cpu-sampling-rate SECONDS, --cpu-percent-threshold
        PCT, --malloc-threshold MB, --allocation-sampling-window BYTES,
        --use-virtual-time.

        Memory (Python and native) is profiled in a kernel installed with
        `pyrometer kernel install`; any other kernel gets CPU only, and a note.
        The profile is left in the notebook as _pyrometer_profile."""
        __tracebackhide__ = True  # IPython leaves this frame out of the cell's traceback
        words, statement = split_options(line)
        if cell is not None:
            if statement:
                raise UsageError(f"%%pyrometer: unexpected {statement!r} after the options "
                                 "(the code to profile is the cell)")
            statement = cell
        if not statement.strip():
            raise UsageError("%pyrometer: nothing to profile: %pyrometer [options] statement, or "
                             "%%pyrometer [options] over a cell")
        ns = _parser().parse_args(words)
        formats = [flag for flag, on in (("--html", ns.html), ("--cli", ns.cli), ("--json", ns.json)) if on]
        if len(formats) > 1:
            raise UsageError(f"%pyrometer: {formats[0]} and {formats[1]} are exclusive")
        profile, value, error = self._profile(statement, ns, cell is not None)
        self.shell.user_ns[PROFILE_VARIABLE] = profile
        fmt = "json" if ns.json else "text" if ns.cli else "html"
        if ns.outfile is not None:
            from ..render import json_out, report
            try:
                json_out.write_report(os.path.abspath(ns.outfile), report(profile, fmt))
            except OSError as e:
                raise UsageError(f"%pyrometer: cannot write the report to {ns.outfile}: {e.strerror or e}") from None
        show(profile, fmt)
        if error is not None:
            raise error  # the report first, then the cell's traceback as usual
        return value  # shown as Out[n], as the cell's own last expression would be

    def _profile(self, source: str, ns: argparse.Namespace,
                 is_cell: bool) -> tuple[dict[str, Any], Any, BaseException | None]:
        """The profile of the code, its last expression's value, and what it raised."""
        __tracebackhide__ = True
        shell = self.shell
        code_text = shell.transform_cell(source)  # %magics, !commands: as a cell runs them
        calling = _calling_cell(cell_prefixes(shell))
        # The number of the cell that runs the magic, for its In [n]: the shell
        # counts it already (run_cell_async adds one before running it).
        number = getattr(shell.compile, "_filename_map", {}).get(calling, max(shell.execution_count - 1, 0))
        try:
            # Into linecache, under a cell's name: the report's source lines, and
            # tracebacks, come from there.
            filename = shell.compile.cache(code_text, number, raw_code=source)
        except TypeError:  # IPython before 8: no raw_code
            filename = shell.compile.cache(code_text, number)
        body, last = _compiled(code_text, filename, getattr(shell.compile, "flags", 0))
        options = inprocess.default_options(
            cpu_only=ns.cpu_only, memory=not ns.cpu_only, leak_detector=ns.leak_detector,
            profile_all=ns.profile_all, profile_only=ns.profile_only, profile_exclude=ns.profile_exclude,
            cpu_sampling_rate=ns.cpu_sampling_rate, cpu_percent_threshold=ns.cpu_percent_threshold,
            malloc_threshold=ns.malloc_threshold, allocation_sampling_window=ns.allocation_sampling_window,
            use_virtual_time=ns.use_virtual_time, reduced_profile=ns.reduced_profile)
        magic_cell = calling if is_cell else None
        try:
            run = inprocess.InProcessRun(options, f"In [{number}]",
                                         program_prefixes=program_cells(shell, filename, magic_cell),
                                         no_memory_notice=NO_MEMORY_IN_KERNEL)
            run.start()
        except (inprocess.AlreadyProfiling, inprocess.CannotProfile) as e:
            raise UsageError(f"%pyrometer: {e}") from None
        value = error = None
        try:
            exec(body, shell.user_global_ns, shell.user_ns)
            if last is not None:
                value = eval(last, shell.user_global_ns, shell.user_ns)
        except BaseException as e:  # KeyboardInterrupt too: the profile up to it is shown
            error = e
        return run.finish(error), value, error


def _compiled(code_text: str, filename: str, flags: int):
    """The code, with its last statement compiled apart when it is an expression
    (not silenced by a ';'): its value is shown as a cell's is.  A syntax error
    is raised here, before the profile starts, and shown as a cell's."""
    tree = ast.parse(code_text, filename)
    if any(isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)) for node in _outside_functions(tree)):
        raise UsageError("%pyrometer: a cell with top-level await cannot be profiled: put the awaits "
                         "in an async function and profile a call that runs it")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code_text.rstrip().endswith(";"):
        last = compile(ast.Expression(tree.body.pop().value), filename, "eval", flags=flags, dont_inherit=True)
    return compile(tree, filename, "exec", flags=flags, dont_inherit=True), last


def _outside_functions(tree: ast.AST):
    """The nodes of tree that are not inside a function or lambda (where a
    top-level await would be)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(PyrometerMagics)
