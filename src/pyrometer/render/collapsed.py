"""The profile's call stacks as Brendan Gregg's folded stacks, one line per
stack: "frame;frame;frame value", root first, for flamegraph.pl, inferno,
speedscope and most flame graph tools.  One metric per file (--collapsed-metric,
"time" by default): the format has one value per line.  Time is in whole
nanoseconds, bytes in bytes; a frame is "function (file.py:line)" (Stacks.labels),
the synthetic frames of render/frames.py as they are named there."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs 5-9 ms (render/__init__.py)
if TYPE_CHECKING:
    from typing import Any

from .frames import Stacks, metric as metric_of

SCALE = {"seconds": 1e9, "bytes": 1}
DEFAULT_METRIC = "time"
# Bounds on what one stack writes.  Folded stacks spell every frame out, so a
# stack costs its depth times its names' length, where the other exports index
# their frames: a 293 KB profile with one 4 KB name in a stack 65,536 frames
# deep (the depth the schema allows) wrote 263 MB here, in 528 MB of memory.
# No flame graph shows a frame name of more than a few hundred characters, or
# a thousand frames one above the other.
FRAME_TEXT_MAX = 300
STACK_FRAMES_MAX = 1000


def _clean(text: str) -> str:
    """A frame's text without what would end it (";" separates frames and a
    line ends a stack), cut to FRAME_TEXT_MAX characters."""
    text = text.replace(";", ",").replace("\n", " ").replace("\r", " ")
    return text if len(text) <= FRAME_TEXT_MAX else text[:FRAME_TEXT_MAX - 1] + "…"


def _bounded(names: list[str]) -> list[str]:
    """A stack's frames, root first: a deeper one than STACK_FRAMES_MAX keeps
    its root's and its leaf's ends, and one frame that says how many are left
    out between them (the leaf's end holds the time; the root's, the way in)."""
    if len(names) <= STACK_FRAMES_MAX:
        return names
    keep = STACK_FRAMES_MAX - 1
    root, leaf = keep // 2, keep - keep // 2
    return [*names[:root], f"[{len(names) - root - leaf} frames left out]", *names[len(names) - leaf:]]


def render(profile: dict[str, Any], metric: str = DEFAULT_METRIC, path: str = "the profile") -> str:
    stacks = Stacks(profile, path)
    m = metric_of(profile, metric, path)
    names = [_clean(name) for name in stacks.labels()]
    lines: dict[str, int] = {}
    for stack, value in stacks.weighted(m):
        folded = ";".join(_bounded([names[f] for f in stack]))
        # two stacks may fold to the same text (two functions of one name on one line)
        lines[folded] = lines.get(folded, 0) + round(value * SCALE[m.unit])
    return "".join(f"{folded} {value}\n" for folded, value in lines.items() if value > 0)
