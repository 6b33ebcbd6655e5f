"""What of a string may reach the terminal: the one escaping rule of every
message and report that shows the profile's strings (file names, source lines,
commands); and how wide the terminal is.  Apart from the text report, so that a
run writing JSON or a web page does not import the terminal report to print one
line."""

from __future__ import annotations

import os
import re
import sys

# Characters a string of the profile must not send to the terminal as they are:
# C0 and C1 controls (an escape sequence can rewrite the screen, set the window
# title or, on some terminals, answer back into the shell's input), DEL, lone
# surrogates (a file name that was not UTF-8; they cannot be written out), the
# line and paragraph separators, and the bidirectional controls that make text
# display in another order than it is read ("Trojan Source").
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str) -> str:
    """text as the terminal may show it: tabs expanded, every character above
    written as a visible escape (ESC as \\x1b), the way Python's repr does."""
    text = text.expandtabs(4)
    return _UNPRINTABLE.sub(_escape, text) if _UNPRINTABLE.search(text) else text


def terminal_columns(fallback: int) -> int:
    """The terminal's width as shutil.get_terminal_size reads it ($COLUMNS, else
    standard output's terminal, else fallback), without importing shutil, which
    brings zlib, bz2 and lzma (private_files.py says what that costs a run)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or fallback
    except (AttributeError, ValueError, OSError):
        return fallback
