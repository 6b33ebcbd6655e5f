"""Command-line options: one table that drives parsing, validation, --help and the
profile header, so every option has exactly one definition; a command line is
parsed into settings.Options, whose defaults settings.py says."""

from __future__ import annotations

import argparse
import math
import re

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from .settings import EXPORT_OPTIONS, OPTION_DEFAULTS, Options
from .structs import fields
from .visible import terminal_columns


class UsageError(Exception):
    """A bad command line: reported as one line on stderr with exit status 2."""


# Options that later work will implement: accepted by the parser so that a user
# gets a clear "not available yet" instead of "unrecognized arguments".
NOT_YET = {
}
NOT_YET_WITH_VALUE: set[str] = set()


def _float_in(low: float, high: float, unit: str, low_open: bool = True):
    """A number within [low, high] (low excluded when low_open).  The messages
    name no option: argparse puts the option's name in front (_Parser.error)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number{unit}, not {text!r}") from None
        too_low = value <= low if low_open else value < low
        if math.isnan(value) or too_low or value > high:
            bound = f"greater than {low:g}" if low_open else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"must be {bound} and at most {high:g}{unit}, not {text}")
        return value
    return parse


# The CPU sampler's limits: below 0.1 ms between samples the sampler's own work
# becomes a visible share of the program's time; above 1 s a run of a few
# seconds gets too few samples to say anything.
CPU_SAMPLING_RATE_MIN, CPU_SAMPLING_RATE_MAX = 1e-4, 1.0


def _sampling_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if math.isnan(value) or not CPU_SAMPLING_RATE_MIN <= value <= CPU_SAMPLING_RATE_MAX:
        raise argparse.ArgumentTypeError(f"must be between {CPU_SAMPLING_RATE_MIN:g} and "
                                         f"{CPU_SAMPLING_RATE_MAX:g} seconds, not {text}")
    return value


def _window(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, not {text!r}") from None
    if value < 4096 or value > (1 << 34):
        raise argparse.ArgumentTypeError(f"must be between 4096 bytes and 16 GiB (17179869184), not {text}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a process id, not {text!r}") from None
    if value <= 0 or value >= 1 << 31:
        raise argparse.ArgumentTypeError(f"expected a process id (a positive number), not {text}")
    return value


def _substrings(text: str) -> list[str]:
    parts = [p for p in text.split(",") if p]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected one or more comma-separated substrings, not {text!r}")
    return parts


# argparse's "argument --x: message", which a message that names the option
# again would make "argument --x: --x must be...".
_ARGUMENT_MESSAGE = re.compile(r"argument ([^:]+): (.*)", re.DOTALL)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2
        named = _ARGUMENT_MESSAGE.fullmatch(message)
        if named:
            option, what = named.groups()
            option = option.split("/")[-1]  # "-o/--outfile": the long name
            message = f"{option} {what}" if what.startswith("must ") else f"{option}: {what}"
        raise UsageError(message)


class _HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default where it says something.  Never for a flag: its
    "default" is the value of the flag's variable (--no-leak-detector's is True,
    the detector being on), which reads as if the flag itself were on; a flag's
    help says what is the default in words.  Not where the help names the
    default itself, nor for options that are off (None) or empty lists."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        # argparse makes a formatter for every add_argument on the parser; its
        # own default width imports shutil (terminal_columns).
        if width is None:
            width = terminal_columns(80) - 2
        super().__init__(prog, indent_increment, max_help_position, width)

    def _fill_text(self, text, width, indent):
        # Paragraphs of one line are filled; one of several lines (the list of
        # other commands) is kept as written.
        return "\n\n".join(super(_HelpFormatter, self)._fill_text(para, width, indent) if "\n" not in para
                             else "\n".join(indent + line for line in para.splitlines())
                             for para in text.split("\n\n"))

    def _split_lines(self, text, width):
        # Not at hyphens: a file name (pyrometer-profile.json) or an option
        # (--profile-interval) broken across lines cannot be copied.
        import textwrap
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.nargs != 0 and action.default not in (None, False, [], argparse.SUPPRESS)
                and "default" not in text):
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    """The command's parser; its groups are added in the order --help lists them."""
    from ._version import __version__
    p = _Parser(
        prog="pyrometer",
        usage="pyrometer [run] [options] (prog.py | dir | app.pyz | -m module | -c code | -) [args...]",
        description="A high-precision, low-overhead CPU, GPU and memory profiler for Python.",
        formatter_class=_HelpFormatter,
        add_help=True,
    )
    p.add_argument("--version", action="version", version=f"pyrometer {__version__}")
    _add_output_options(p)
    add_export_options(p)
    _add_what_to_profile(p)
    _add_sampling_options(p)
    _add_pause_options(p)
    _add_not_yet_options(p)
    p.epilog = EPILOG
    return p


# What --help says after the options: how the program is given, and the other commands.
EPILOG = ("The program is started as python starts it: a script, a directory or zip "
          "archive with a __main__.py, -m MODULE, -c CODE, or - for a script on standard "
          "input. Everything after it is passed to the program unchanged. Use -- to end "
          "pyrometer's options explicitly.\n\n"
          "other commands:\n"
          "  pyrometer view PROFILE.json    a saved profile as a report, or an export\n"
          "  pyrometer diff BEFORE AFTER    what changed between two saved profiles\n"
          "  pyrometer top PROG [args...]   a live view of the lines busy now (--live)\n"
          "  pyrometer attach PID           profile a running program for a while (3.14+)\n"
          "  pyrometer kernel install       a Jupyter kernel with memory profiling\n"
          "  pytest --pyrometer             each test profiled (the pytest plugin)")


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("--outfile", metavar="FILE", default=None,
                     help="write the report to FILE (default: standard output for the text "
                          "report, pyrometer-profile.json for --json, pyrometer-profile.html "
                          "for --html and --web)")
    out.add_argument("--json", action="store_true",
                     help="write the profile as JSON, to --outfile or pyrometer-profile.json "
                          "(never into the program's standard output)")
    out.add_argument("--cli", action="store_true", help="write the report as annotated text (the default)")
    out.add_argument("--html", action="store_true",
                     help="write the report as one self-contained web page, to --outfile or "
                          "pyrometer-profile.html")
    out.add_argument("--web", action="store_true",
                     help="write the web page like --html and open it in a browser when there is one")
    out.add_argument("--profile-interval", metavar="SECONDS", default=None,
                     type=_float_in(0.0, 1e9, " seconds"),
                     help="also write the report every SECONDS while the program runs, to --outfile "
                          "or pyrometer-profile.txt, .json or .html (default: off, one report at the end)")
    # pyrometer top PROG is pyrometer --live PROG (cli.main).
    out.add_argument("--live", action="store_true",
                     help="while the program runs, show the lines and functions taking time and memory "
                          "now, redrawn every second on the terminal's alternate screen (the program's "
                          "output is shown again when it ends), then write the report as usual; also "
                          "pyrometer top PROG")
    out.add_argument("--reduced-profile", action="store_true",
                     help="show only lines at or above the thresholds")
    out.add_argument("--malloc-threshold", metavar="MB", default=OPTION_DEFAULTS["malloc_threshold"],
                     type=_float_in(0.0, 1e9, " MB", low_open=False),
                     help="megabytes allocated on a line for it to count as significant for memory")
    out.add_argument("--cpu-percent-threshold", metavar="PCT", default=OPTION_DEFAULTS["cpu_percent_threshold"],
                     type=_float_in(0.0, 100.0, "", low_open=False),
                     help="percent of run time at which a line counts as significant (0 to 100)")
    out.add_argument("--quiet", action="store_true",
                     help="do not say on standard error where the report was written")


def _add_what_to_profile(parser: argparse.ArgumentParser) -> None:
    """-m and -c, what is measured, and which processes and files are reported."""
    what = parser.add_argument_group("what to profile")
    what.add_argument("-m", dest="module", metavar="MODULE", default=None,
                      help="run a library module as the program, like python -m; "
                           "what follows is the module's argv")
    what.add_argument("-c", dest="command", metavar="CODE", default=None,
                      help="run CODE as the program, like python -c; what follows is its argv")
    _add_measured(what)
    _add_processes_and_files(what)


def _add_measured(what: argparse._ArgumentGroup) -> None:
    """What is measured: memory, the GPU, its kernels, leaks."""
    what.add_argument("--cpu-only", action="store_true",
                      help="profile CPU time only (no memory, copy or leak profiling)")
    what.add_argument("--memory", dest="memory_on", action="store_true",
                      help="profile memory, copy volume and leaks (the default, unless --cpu-only)")
    what.add_argument("--no-memory", dest="memory_off", action="store_true",
                      help="do not profile memory")
    what.add_argument("--gpu", dest="gpu_on", action="store_true",
                      help="profile GPU utilisation and GPU memory per line (NVIDIA, through NVML); "
                           "the default when an NVIDIA GPU is found, unless --cpu-only")
    what.add_argument("--no-gpu", dest="gpu_off", action="store_true",
                      help="do not profile the GPU")
    what.add_argument("--gpu-kernels", dest="gpu_kernels_on", action="store_true",
                      help="with GPU profiling: also charge each kernel's device time, each copy's bytes "
                           "(by direction) and each device allocation to the line that launched it "
                           "(NVIDIA, through CUPTI); off by default until its overhead is measured")
    what.add_argument("--no-gpu-kernels", dest="gpu_kernels_off", action="store_true",
                      help="do not trace GPU kernels (the default)")
    what.add_argument("--no-leak-detector", dest="leak_detector", action="store_false",
                      help="with memory profiling: do not report leaks (leaks are reported by default)")


def _add_processes_and_files(what: argparse._ArgumentGroup) -> None:
    """Which processes are profiled and which files reported."""
    what.add_argument("--no-children", dest="children", action="store_false",
                      help="profile the first process only, not its child processes (fork, "
                           "multiprocessing, subprocess of Python), which are profiled and merged "
                           "by default")
    what.add_argument("--profile-all", action="store_true",
                      help="report all files, including the standard library and site-packages "
                           "(default: the program's own files)")
    what.add_argument("--profile-only", metavar="SUBSTRINGS", type=_substrings, default=[],
                      help="report only files whose path contains one of these comma-separated "
                           "substrings (default: every file that is reported otherwise)")
    what.add_argument("--profile-exclude", metavar="SUBSTRINGS", type=_substrings, default=[],
                      help="never report files whose path contains one of these comma-separated "
                           "substrings (default: none excluded)")


def _add_sampling_options(parser: argparse.ArgumentParser) -> None:
    how = parser.add_argument_group("sampling")
    how.add_argument("--cpu-sampling-rate", metavar="SECONDS", default=OPTION_DEFAULTS["cpu_sampling_rate"],
                     type=_sampling_rate,
                     help=f"mean time between CPU samples, in seconds, from {CPU_SAMPLING_RATE_MIN:g} "
                          f"to {CPU_SAMPLING_RATE_MAX:g}")
    how.add_argument("--allocation-sampling-window", metavar="BYTES",
                     default=OPTION_DEFAULTS["allocation_sampling_window"], type=_window,
                     help="net bytes a thread allocates (or frees, or copies) between memory samples, "
                          "from 4096 to 17179869184 (16 GiB)")
    how.add_argument("--use-virtual-time", action="store_true",
                     help="count CPU time only: no time sleeping, waiting or blocked in I/O")
    how.add_argument("--force-version", action="store_true",
                     help="run on a CPython version pyrometer has not been tested on, where this "
                          "installation was built for it anyway (see the README)")


def _add_pause_options(parser: argparse.ArgumentParser) -> None:
    control = parser.add_argument_group("pause and resume")
    control.add_argument("--off", action="store_true",
                         help="start paused: only regions the program marks with pyrometer.start() / "
                              "pyrometer.profiling() are profiled; with --pid N: pause that running program")
    control.add_argument("--on", action="store_true",
                         help="with --pid N: resume that running program")
    control.add_argument("--pid", metavar="N", type=_pid, default=None,
                         help="the process of a program that runs under pyrometer, and its child "
                              "processes, to pause (--off) or resume (--on); with --live (pyrometer "
                              "top): to show live, from the snapshots it writes (--profile-interval "
                              "with --json)")


def _add_not_yet_options(parser: argparse.ArgumentParser) -> None:
    """NOT_YET's options, in a group of their own; none while there are none."""
    if not NOT_YET:
        return
    later = parser.add_argument_group("not available yet (accepted, then refused with a message)")
    for flag in NOT_YET:
        if flag in NOT_YET_WITH_VALUE:
            later.add_argument(flag, metavar="N", default=None, dest=flag.strip("-").replace("-", "_"),
                               help=f"{NOT_YET[flag]} (not available yet)")
        else:
            later.add_argument(flag, action="store_true", dest=flag.strip("-").replace("-", "_"),
                               help=f"{NOT_YET[flag]} (not available yet)")


# ---- exports of the call stacks (docs/exports.md), for the run and for pyrometer view ----

def add_export_options(parser: argparse.ArgumentParser) -> None:
    from .render.frames import METRICS
    group = parser.add_argument_group("exports of the call stacks (docs/exports.md)")
    group.add_argument("--pprof", metavar="FILE", default=None,
                       help="write the call stacks as a gzipped pprof profile (go tool pprof, Pyroscope, "
                            "Parca): time, Python/native/system CPU, waits, allocated and copied bytes")
    group.add_argument("--speedscope", metavar="FILE", default=None,
                       help="write the call stacks in speedscope's format (speedscope.app), one profile "
                            "per metric")
    group.add_argument("--collapsed", metavar="FILE", default=None,
                       help="write the call stacks as folded stacks (flamegraph.pl), one metric: "
                            "--collapsed-metric")
    group.add_argument("--collapsed-metric", metavar="METRIC", default="time", choices=list(METRICS),
                       help="the metric of --collapsed: " + ", ".join(METRICS) + " (time in ns, memory in bytes)")
    group.add_argument("--firefox", metavar="FILE", default=None,
                       help="write the call stacks for the Firefox Profiler (profiler.firefox.com)")


def exports_of(ns: Any) -> dict[str, str]:
    """format -> file of the exports a command line asks for (its namespace or
    Options); UsageError for a contradiction."""
    from .render.frames import METRICS
    exports = {fmt: getattr(ns, fmt) for fmt in EXPORT_OPTIONS if getattr(ns, fmt) is not None}
    if ns.collapsed_metric != "time" and "collapsed" not in exports:
        raise UsageError("--collapsed-metric needs --collapsed FILE")
    # A run that will not measure the metric is refused before it starts (view
    # finds out from the profile: these flags are the run's).
    needs = METRICS[ns.collapsed_metric].needs
    off = [flag for flag, on in (("--cpu-only", getattr(ns, "cpu_only", False)),
                                 ("--no-memory", needs == "memory" and getattr(ns, "memory_off", False)),
                                 ("--no-gpu", needs == "gpu" and getattr(ns, "gpu_off", False))) if on]
    if needs and off:
        raise UsageError(f"--collapsed-metric {ns.collapsed_metric}: {off[0]} does not measure it")
    files: dict[str, str] = {}
    for fmt, path in exports.items():
        if path in files:
            raise UsageError(f"--{files[path]} and --{fmt} both write {path}: give each its own file")
        files[path] = fmt
    return exports


# ---- end of exports ----


def option_actions(dests: set[str]) -> list[argparse.Action]:
    """The command's own definitions (flags, type and limits, default, help) of
    the options whose destinations are given: for a parser that takes a subset
    of them (the notebook magics, jupyter.py), so that each option is defined
    once."""
    return [a for a in build_parser()._actions if a.dest in dests]


def _split(parser: argparse.ArgumentParser,
           argv: list[str]) -> tuple[list[str], str | None, str | None, list[str]]:
    """Split argv into pyrometer's options, the module (-m) or code (-c), and the
    program's argv, the way the python command does: the first word that is not
    an option ends ours, so the program's own options are never taken for
    pyrometer's."""
    takes_value = {s for a in parser._actions for s in a.option_strings if a.nargs != 0}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[:i], None, None, argv[i + 1:]
        for flag, what in (("-m", "a module name"), ("-c", "the code to run")):
            if word == flag:
                if i + 1 >= len(argv):
                    raise UsageError(f"{flag}: expected {what}")
                named, rest = argv[i + 1], argv[i + 2:]
            elif word.startswith(flag) and not word.startswith("--"):
                named, rest = word[2:], argv[i + 1:]  # -mmod, -ccode: as python takes them
            else:
                continue
            return (argv[:i], named, None, rest) if flag == "-m" else (argv[:i], None, named, rest)
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            i += 2 if (name in takes_value and "=" not in word) else 1
            continue
        return argv[:i], None, None, argv[i:]
    return argv, None, None, []


def parse(argv: list[str]) -> Options:
    parser = build_parser()
    own, module, command, program = _split(parser, argv)
    ns = parser.parse_args(own)
    for flag in NOT_YET:
        value = getattr(ns, flag.strip("-").replace("-", "_"))
        if value not in (None, False):
            raise UsageError(f"{flag}: {NOT_YET[flag]} is not available yet")
    if ns.pid is not None and ns.live:  # pyrometer top --pid N (live.attach)
        if ns.on or ns.off or module is not None or command is not None or program:
            raise UsageError("pyrometer top --pid N shows a program already running: it takes no "
                             "program to run, nor --on or --off")
        return Options(live=True, pid=ns.pid)
    if ns.pid is not None:
        if ns.on == ns.off:
            raise UsageError("--pid N needs --off (pause) or --on (resume): pyrometer --off --pid N")
        if module is not None or command is not None or program:
            raise UsageError("--pid N controls a program already running: it takes no program to run")
        return Options(off=ns.off, on=ns.on, pid=ns.pid)
    if ns.on:
        raise UsageError("--on needs --pid N: it resumes a running program (a run is profiled from "
                         "its start unless --off)")
    if ns.memory_on and (ns.memory_off or ns.cpu_only):
        raise UsageError("--memory contradicts " + ("--no-memory" if ns.memory_off else "--cpu-only"))
    if ns.gpu_on and ns.gpu_off:
        raise UsageError("--gpu contradicts --no-gpu")
    if ns.live and ns.profile_interval is not None:
        raise UsageError("--live (pyrometer top) and --profile-interval are exclusive: the live view "
                         "takes the program's snapshots every second")
    if ns.gpu_kernels_on and ns.gpu_kernels_off:
        raise UsageError("--gpu-kernels contradicts --no-gpu-kernels")
    if ns.gpu_kernels_on and (ns.gpu_off or (ns.cpu_only and not ns.gpu_on)):
        raise UsageError(f"--gpu-kernels contradicts {'--no-gpu' if ns.gpu_off else '--cpu-only'} "
                         "(--cpu-only --gpu --gpu-kernels profiles CPU and GPU)")
    formats = [flag for flag, on in (("--json", ns.json), ("--cli", ns.cli), ("--html", ns.html),
                                     ("--web", ns.web)) if on]
    if len(formats) > 1 and set(formats) != {"--html", "--web"}:
        raise UsageError(f"{' and '.join(formats)} are exclusive: choose one report format")
    if module is None and command is None and not program:
        raise UsageError("no program to profile: give a script (pyrometer prog.py), a directory or "
                         "zip archive with a __main__.py, a module (-m mod), code (-c code) or - "
                         "for a script on standard input")
    exports_of(ns)
    opts = Options(**{f: getattr(ns, f) for f in fields(Options)
                      if f not in ("program", "module", "command", "memory", "gpu", "gpu_kernels")},
                   module=module, command=command, program=program, memory=not (ns.cpu_only or ns.memory_off),
                   gpu=True if ns.gpu_on else False if (ns.gpu_off or ns.cpu_only) else None,
                   gpu_kernels=ns.gpu_kernels_on)
    return opts
