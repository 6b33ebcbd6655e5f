"""The command's entry point (early.py) re-executes a run with memory profiling
before it parses the command line: its reading of the options must agree with
the parser wherever it decides, and leave everything else to it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import program_env
from pyrometer import cli, early
from pyrometer.options import UsageError, build_parser, parse

# Options of the parser that early.py must not know: they turn memory off, or
# do not run a program.
LEFT_TO_THE_PARSER = {"--cpu-only", "--no-memory", "--help", "-h", "--version", "--pid", "--on", "-m", "-c"}


def test_its_options_are_the_parsers():
    parser = build_parser()
    with_value = {s for a in parser._actions for s in a.option_strings if a.nargs != 0}
    without_value = {s for a in parser._actions for s in a.option_strings if a.nargs == 0}
    assert early.WITH_VALUE == with_value - LEFT_TO_THE_PARSER
    assert early.WITHOUT_VALUE == without_value - LEFT_TO_THE_PARSER


def test_its_commands_are_the_commands():
    """The commands early.py leaves to cli.main are cli's: those that run no
    program, and top (a run that cli.main turns into one with --live)."""
    assert early.COMMANDS == set(cli.SUBCOMMANDS) | {"top"}


@pytest.mark.parametrize("argv, expected", [
    (["prog.py"], True),
    (["run", "prog.py", "--cpu-only"], True),  # the program's own option
    (["--json", "--outfile", "x.json", "prog.py"], True),
    (["--outfile=x.json", "--profile-only", "a,b", "prog.py", "arg"], True),
    (["--outfile", "--cpu-only", "prog.py"], True),  # a file named --cpu-only
    (["-m", "http.server"], True),
    (["-mhttp.server"], True),
    (["-c", "pass"], True),
    (["-"], True),
    (["--", "prog.py"], True),
    (["--cpu-only", "prog.py"], False),
    (["--no-memory", "prog.py"], False),
    (["--cpu-o", "prog.py"], False),  # argparse's abbreviation: the parser decides
    (["--json=1", "prog.py"], False),  # a value the option does not take: the parser's error
    (["--pid", "12", "--off"], False),
    (["--help"], False),
    (["-h"], False),
    (["--version"], False),
    (["--json"], False),  # no program
    (["--"], False),
    (["-m"], False),
    (["--outfile"], False),
    (["view", "p.json"], False),
    (["diff", "a.json", "b.json"], False),
    (["top", "prog.py"], False),
    ([], False),
])
def test_reading(argv, expected):
    assert early.runs_with_memory(argv) is expected


@pytest.mark.parametrize("argv", [
    ["prog.py"], ["--quiet", "--outfile", "o.json", "--json", "prog.py", "--cpu-only"],
    ["--profile-interval", "2", "--json", "--off", "prog.py"], ["-c", "pass", "x"],
    ["--gpu", "--gpu-kernels", "-m", "mod"], ["--no-gpu", "--html", "--web", "-"],
])
def test_where_it_decides_the_parser_agrees(argv):
    assert early.runs_with_memory(argv)
    options = parse(argv)
    assert options.memory and (options.program or options.module is not None or options.command is not None)


def test_a_contradiction_is_still_the_parsers_to_report():
    assert early.runs_with_memory(["--memory", "--cpu-only", "prog.py"]) is False
    assert early.runs_with_memory(["--live", "--profile-interval", "1", "prog.py"])  # re-executed first
    with pytest.raises(UsageError):
        parse(["--live", "--profile-interval", "1", "prog.py"])


def _first_process_imports(args, tmp_path, groundtruth_dir):
    """The modules the first process imports, from python -X importtime (each
    process prints its own; the second begins with its own site)."""
    prog = tmp_path / "prog.py"
    prog.write_text("pass\n")
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pyrometer", "--quiet", *args,
                           "--json", "--outfile", str(tmp_path / "p.json"), str(prog)],
                          capture_output=True, text=True, env=program_env(groundtruth_dir), timeout=120)
    assert done.returncode == 0, done.stderr
    processes = [[]]
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            processes[-1].append(name)
            if name == "site":
                processes.append([])
    return processes


def test_the_first_process_reexecutes_before_parsing(tmp_path, groundtruth_dir):
    processes = _first_process_imports([], tmp_path, groundtruth_dir)
    assert len(processes) == 3, processes  # two interpreters, each with its site
    first = processes[1]
    assert "pyrometer.early" in first and "pyrometer.preload" in first
    assert not {"argparse", "pyrometer.cli", "pyrometer.options", "pyrometer._core"} & set(first), first
    assert "pyrometer.cli" in processes[2]


def test_a_cpu_only_run_starts_once(tmp_path, groundtruth_dir):
    processes = _first_process_imports(["--cpu-only"], tmp_path, groundtruth_dir)
    assert len(processes) == 2 and "pyrometer.cli" in processes[1]
