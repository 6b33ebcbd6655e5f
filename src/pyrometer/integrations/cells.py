"""How IPython and Jupyter name the code of their cells, so that the cells run
in a session are taken for the program's code: for the %pyrometer magics
(jupyter.py) and for profile_this in a notebook (inprocess.py).  IPython
itself is never imported here."""

from __future__ import annotations

import linecache
import os
import re


def cell_prefixes(shell) -> list[str]:
    """The start of the names under which the shell compiles cells: ipykernel
    names them /tmp/ipykernel_<pid>/<hash>.py, terminal IPython
    <ipython-input-<n>-<hash>>."""
    try:
        name = shell.compile.get_code_name("", "", 0)
    except (AttributeError, TypeError):
        return ["<ipython-input-"]
    if os.path.isabs(name):
        return [os.path.dirname(name).rstrip(os.sep) + os.sep]
    match = re.fullmatch(r"(<.*-)0-[^>]*>", name)  # <ipython-input-0-abc> -> <ipython-input-
    return [match.group(1) if match else name]


def program_cells(shell, body: str | None = None, magic_cell: str | None = None) -> list[str]:
    """The program of a profiled cell: its body, and every cell run before it (its
    functions may be called), by name.  A %%pyrometer cell is all magic: its own
    name (magic_cell) is left out, or the magic's call would show as a line of
    the program, charged with the profiler's start and stop.  A %pyrometer line
    shares its cell with the user's code, which stays."""
    prefixes = cell_prefixes(shell)
    names = [n for n in list(linecache.cache) if any(n.startswith(p) for p in prefixes) and n != magic_cell]
    return sorted({*names, *([body] if body else [])})
