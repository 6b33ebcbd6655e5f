"""Renderers: each turns the finished profile (pyrometer.model) into one format."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

FORMATS = ("text", "json", "html")


def report(profile: dict[str, Any], fmt: str, *, color: bool = False, width: int = 1 << 20) -> str:
    """The profile rendered in one of FORMATS (colour and width: text only)."""
    if fmt == "json":
        from . import json_out
        return json_out.render(profile)
    if fmt == "html":
        from . import html
        return html.render(profile)
    from . import text
    return text.render(profile, color=color, width=width)


# The exports of the call stacks (docs/exports.md): the option that asks for each,
# and its module in this package.
EXPORTS = ("pprof", "speedscope", "collapsed", "firefox")


def export(profile: dict[str, Any], fmt: str, *, metric: str = "time", path: str = "the profile") -> str | bytes:
    """The profile's call stacks in one of EXPORTS (metric: --collapsed-metric);
    stacks.ExportError when the profile has no stacks (or not that metric's)."""
    import importlib
    module = importlib.import_module(f".{fmt}", __name__)
    if fmt == "collapsed":
        return module.render(profile, metric, path)
    return module.render(profile, path)
