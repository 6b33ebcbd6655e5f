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
