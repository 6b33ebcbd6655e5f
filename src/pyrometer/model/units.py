"""What the profile's figures are counted in and how it names files, for the
model and for the rules it calls (verdict.py), which must not import the
model back: MB, the unit of every memory figure, and display_name, a file as
the reports show it."""

from __future__ import annotations

import os

MB = 1048576.0


def display_name(filename: str) -> str:
    """filename relative to the working directory where it lies below it, else
    as it is."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
