"""The profile's call stacks as Brendan Gregg's folded stacks, one line per
stack: "frame;frame;frame value", root first, for flamegraph.pl, inferno,
speedscope and most flame graph tools.  One metric per file (--collapsed-metric,
"time" by default): the format has one value per line.  Time is in whole
nanoseconds, bytes in bytes; a frame is "function (file.py:line)" (Stacks.labels),
the synthetic frames of render/stacks.py as they are named there."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs 5-9 ms (render/__init__.py)
if TYPE_CHECKING:
    from typing import Any

from .stacks import Stacks, metric as metric_of

SCALE = {"seconds": 1e9, "bytes": 1}
DEFAULT_METRIC = "time"


def _clean(text: str) -> str:
    """A frame's text without what would end it: ";" separates frames and a
    line ends a stack."""
    return text.replace(";", ",").replace("\n", " ").replace("\r", " ")


def render(profile: dict[str, Any], metric: str = DEFAULT_METRIC, path: str = "the profile") -> str:
    stacks = Stacks(profile, path)
    m = metric_of(profile, metric, path)
    names = [_clean(name) for name in stacks.labels()]
    lines: dict[str, int] = {}
    for stack, value in stacks.weighted(m):
        folded = ";".join(names[f] for f in stack)
        # two stacks may fold to the same text (two functions of one name on one line)
        lines[folded] = lines.get(folded, 0) + round(value * SCALE[m.unit])
    return "".join(f"{folded} {value}\n" for folded, value in lines.items() if value > 0)
