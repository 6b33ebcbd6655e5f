"""What one run did between two of its snapshots: the live view's figures
(pyrometer top), each line's and function's time and allocation now beside its
totals so far."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from .rules import TIME_KINDS, time_share


# The seconds of an entry that make up its share of the run's time (time_share).
_TIME_SECONDS = tuple(seconds for _, seconds in TIME_KINDS)


def since(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """What one run did between two of its snapshots (the live view, pyrometer
    top): each line's and function's seconds of each kind and MB allocated in
    between ("now"), beside its totals so far.  before None: since the start.
    Entries are matched by file and line (functions: file, first line and name);
    only those with time or allocation so far are listed, busiest now first.

    A line's seconds are not only added to as the run goes on: the estimated
    part of each sample is counted in units whose size is the whole run's
    (csrc/module.c, cpu_sums_record), so every line's seconds move a little with each
    snapshot.  What a line did now is therefore its seconds' change only where
    it was sampled in between (n_samples grew), and nothing where it was not;
    the time now, the percentages' denominator, is the sum of the lines' now
    and of the change in time on no reported line."""
    def entries(profile: dict[str, Any] | None, kind: str) -> dict[tuple, dict[str, Any]]:
        if profile is None:
            return {}
        return {(filename, e["lineno"], e["line"] if kind == "functions" else ""): e
                for filename, f in profile["files"].items() for e in f[kind]}

    def seconds(e: dict[str, Any] | None) -> list[float]:
        return [e.get(k, 0.0) if e else 0.0 for k in _TIME_SECONDS]

    def unattributed(profile: dict[str, Any] | None) -> float:
        u = (profile or {}).get("unattributed") or {}
        return u.get("python_sec", 0.0) + u.get("native_sec", 0.0)

    interval = after["elapsed_time_sec"] - (before["elapsed_time_sec"] if before else 0.0)
    out: dict[str, Any] = {"interval_sec": max(interval, 0.0), "elapsed_sec": after["elapsed_time_sec"],
                           "total_time_sec": after["total_time_sec"], "memory": bool(after.get("memory"))}
    for kind in ("lines", "functions"):
        old = entries(before, kind)
        rows = []
        for key, e in entries(after, kind).items():
            total = seconds(e)
            was = old.get(key)
            sampled = e.get("n_samples", 0) > (was.get("n_samples", 0) if was else 0)
            now = [max(a - b, 0.0) for a, b in zip(total, seconds(was))] if sampled else [0.0] * len(total)
            malloc_total = e.get("n_malloc_mb", 0.0)
            malloc_now = max(malloc_total - (was.get("n_malloc_mb", 0.0) if was else 0.0), 0.0)
            if sum(total) <= 0 and malloc_total <= 0:
                continue
            rows.append({
                "filename": key[0], "lineno": key[1], "line": e["line"],
                "python_sec": now[0], "native_sec": now[1], "system_sec": now[2], "wait_sec": now[3] + now[4],
                "time_sec": sum(now),
                "malloc_mb": malloc_now,
                "total_time_sec": sum(total),
                "total_percent": time_share(e),
                "total_malloc_mb": malloc_total,
            })
        rows.sort(key=lambda r: (-r["time_sec"], -r["malloc_mb"], -r["total_time_sec"], -r["total_malloc_mb"],
                                 r["filename"], r["lineno"]))
        out[kind] = rows
    out["time_sec"] = sum(r["time_sec"] for r in out["lines"]) + max(unattributed(after) - unattributed(before), 0.0)
    scale = 100.0 / out["time_sec"] if out["time_sec"] > 0 else 0.0  # seconds now -> percent of now
    for kind in ("lines", "functions"):
        for r in out[kind]:
            r.update(percent=r["time_sec"] * scale, python_percent=r["python_sec"] * scale,
                     native_percent=r["native_sec"] * scale, system_percent=r["system_sec"] * scale,
                     wait_percent=r["wait_sec"] * scale)
    return out
