"""The profile's call stacks in speedscope's file format
(https://www.speedscope.app/file-format-schema.json): one "sampled" profile per
metric of render/frames.py, each stack a sample weighted by the metric's
figure, the frames shared.  A profile aggregates stacks, it has no timeline, so
"sampled" (not "evented") is the type that fits: speedscope's left-heavy and
sandwich views are exact, its time order view shows the stacks one after
another, not when they ran."""

from __future__ import annotations

import json
TYPE_CHECKING = False  # not typing's: importing typing costs 5-9 ms (render/__init__.py)
if TYPE_CHECKING:
    from typing import Any

from .frames import Stacks, metrics

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def document(profile: dict[str, Any], path: str = "the profile") -> dict[str, Any]:
    stacks = Stacks(profile, path)
    frames = []
    for f in stacks.frames:
        frame: dict[str, Any] = {"name": f.function}
        if not f.synthetic:
            frame.update(file=f.filename, line=f.lineno)
        frames.append(frame)
    profiles = []
    for m in metrics(profile):
        weighted = list(stacks.weighted(m))
        if not weighted and m.name != "time":  # "time" always: it is the one shown first
            continue
        total = sum(value for _, value in weighted)
        profiles.append({"type": "sampled", "name": f"{profile.get('program', '')}: {m.label}",
                         "unit": m.unit, "startValue": 0, "endValue": total,
                         "samples": [list(stack) for stack, _ in weighted],
                         "weights": [value for _, value in weighted]})
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": f"pyrometer: {profile.get('program', '')}", "activeProfileIndex": 0,
            "exporter": "pyrometer"}


def render(profile: dict[str, Any], path: str = "the profile") -> str:
    return json.dumps(document(profile, path), separators=(",", ":"), allow_nan=False) + "\n"
