"""The command's entry point.  A run with memory profiling (the default) starts
twice: the first process only re-executes itself with the memory library
preloaded (preload.py).  Whether to do that depends on a few options only, so
they are read here, from the command line as it is, without argparse, and the
re-execution happens before the parser and the rest of pyrometer are imported:
that first process then costs one interpreter start and little more (about
5 ms less per run than parsing everything first: the median of 20 alternated
starts of an empty script, 113.0 ms against 118.4 ms).

Whatever this reading is unsure of (another command, an unknown or abbreviated
option, an option that turns memory profiling off, no program, a library that
is not beside the package) is left to
cli.main, which decides as it always did.  The re-executed process parses the
whole command line again and reports any mistake in it, with the same words
and status as without this shortcut."""

from __future__ import annotations

import os
import sys

# The command's other commands, left to cli.main (cli.SUBCOMMANDS and top;
# tests/test_early.py checks the two lists agree).
COMMANDS = frozenset({"top", "view", "diff", "kernel"})
# The options of a run (options.build_parser) that take a value, and those that
# take none and leave memory profiling on; tests/test_early.py checks both
# against the parser.  --cpu-only and --no-memory turn memory off; --help,
# --version, --pid and --on do not run a program: none of them is here.
WITH_VALUE = frozenset({
    "--allocation-sampling-window", "--collapsed", "--collapsed-metric", "--cpu-percent-threshold",
    "--cpu-sampling-rate", "--firefox", "--malloc-threshold", "--outfile", "--pprof",
    "--profile-exclude", "--profile-interval", "--profile-only", "--speedscope",
})
WITHOUT_VALUE = frozenset({
    "--cli", "--force-version", "--gpu", "--gpu-kernels", "--html", "--json", "--live", "--memory",
    "--no-children", "--no-gpu", "--no-gpu-kernels", "--no-leak-detector", "--off", "--profile-all",
    "--quiet", "--reduced-profile", "--use-virtual-time", "--web",
})


def runs_with_memory(argv: list[str]) -> bool:
    """Whether argv (without the command's name) surely asks to run a program
    with memory profiling; False where unsure."""
    if argv and argv[0] in COMMANDS:
        return False
    if argv and argv[0] == "run":
        argv = argv[1:]
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return i + 1 < len(argv)
        if word == "-" or not word.startswith("-"):
            return True  # the program: a script, a directory or archive, or standard input
        if word in ("-m", "-c"):
            return i + 1 < len(argv)
        if not word.startswith("--") and word[1] in "mc":
            return True  # -mmod, -ccode
        name, equals, _ = word.partition("=")
        if name in WITH_VALUE:
            i += 1 if equals else 2
        elif word in WITHOUT_VALUE:
            i += 1
        else:
            return False
    return False


def main() -> int:
    argv = sys.argv[1:]
    if runs_with_memory(argv):
        from . import preload
        if preload.should_reexecute_early():
            preload.ensure_memhooks_preloaded()  # returns only where it failed: cli says why
    from .cli import main as cli_main
    return cli_main(argv)
