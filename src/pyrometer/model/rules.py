"""The rules every report follows, decided once here: a line's share of the
run's time, what is significant (kept by --reduced-profile and the page's
reduced view), what is hot or warm, and whether the samples were too few to
trust the shares, and which of the GPU's columns are shown.  The terminal
calls them; the web page reads their
outcomes from its page data (render/html.py), so that no renderer has a copy
of a rule (tests/end_to_end/test_html.py checks the page against them)."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

import math

from ..settings import OPTION_DEFAULTS


# The kinds of time, each as a line's (or function's) share field and seconds
# field: its time is theirs together (neither await time nor an event loop's
# idle time is in it).  The last two are the waits, for the GIL and for a CPU.
TIME_KINDS = (("n_cpu_percent_python", "n_cpu_python_sec"), ("n_cpu_percent_c", "n_cpu_native_sec"),
              ("n_sys_percent", "n_sys_sec"), ("n_gil_wait_percent", "n_gil_wait_sec"),
              ("n_cpu_wait_percent", "n_cpu_wait_sec"))
_WAITS = TIME_KINDS[3:]


def time_share(entry: dict[str, Any]) -> float:
    """A line's or function's share of the run's time, in percent, of every kind."""
    return sum(entry.get(share, 0.0) for share, _ in TIME_KINDS)


def wait_share(entry: dict[str, Any]) -> tuple[float, float]:
    """A line's or function's share of the run's time waiting (for the GIL or
    for a CPU: the reports' one wait column), and its error, the two waits'
    errors taken as apart (their sampling is one)."""
    share = sum(entry.get(name, 0.0) for name, _ in _WAITS)
    return share, math.sqrt(sum(entry.get(name + "_error", 0.0) ** 2 for name, _ in _WAITS))


def shows_waits(profile: dict[str, Any]) -> bool:
    """Whether the reports show the wait column: when waiting for the GIL or a
    CPU is 1% of the run or more; otherwise it is only noise in the table."""
    cpu, total = profile["cpu_time_sec"], profile["total_time_sec"]
    return total > 0 and (cpu.get("gil_wait", 0.0) + cpu.get("cpu_wait", 0.0)) >= 0.01 * total


def shows_awaits(profile: dict[str, Any]) -> bool:
    """Whether the reports show the await column: for a program whose
    coroutines awaited."""
    return profile.get("await_time_sec", 0.0) > 0


def significant(entry: dict[str, Any], threshold: float, malloc_threshold: float | None = None) -> bool:
    """Whether a line or function reaches the CPU threshold (percent of run time,
    of await time, of GPU time) or, when memory was profiled, the malloc
    threshold (MB allocated): what --reduced-profile and the page's reduced
    view keep."""
    cpu = (time_share(entry) >= threshold or entry.get("n_await_percent", 0.0) >= threshold
           or entry.get("n_gpu_percent", 0.0) >= threshold)
    return cpu or (malloc_threshold is not None and entry.get("n_malloc_mb", 0.0) >= malloc_threshold)


# A line or function is hot, the reports' strongest mark, at this many times
# the CPU threshold.
def shown_error(value: float, error: float) -> bool:
    """Whether a time share (in points) is shown with its sampling error: where
    the error is a tenth of the figure or more, and would not round to 0 (the
    shares are shown whole); render/assets/report.js's errorOf reads the same
    cut-off from its page data (SHOWN_FROM)."""
    return value >= SHOWN_FROM and error >= max(0.1 * value, SHOWN_FROM)


# A figure the reports show whole (a share in points, megabytes, a rate) is
# left blank below this: it would read 0.  The page gets it in its data.
SHOWN_FROM = 0.5
# The lines that churn (allocate and free tiny temporaries) are shown, in the
# churn column and the text report's list, from this many MB of churn.
CHURN_SHOWN_MB = 1.0


def shows_churn(profile: dict[str, Any]) -> bool:
    """Whether the page shows the churn column: memory was profiled and the
    run churned CHURN_SHOWN_MB or more."""
    return bool(profile.get("memory")) and profile.get("churn_mb", 0.0) >= CHURN_SHOWN_MB


HOT_FACTOR = 5.0


def mark(entry: dict[str, Any], threshold: float, malloc_threshold: float | None = None) -> str:
    """How the terminal and the page mark a line or function: "hot" at
    HOT_FACTOR times the CPU threshold of the run's time, "warm" at the
    threshold or at the malloc threshold, else "".  Decided here once: the
    page's script had a copy of this rule and of significant()'s, and its
    copy of significant() left out GPU time (a GPU-only line kept by
    --reduced-profile showed in the terminal and not on the page)."""
    share = time_share(entry)
    if share >= threshold * HOT_FACTOR:
        return "hot"
    if share >= threshold or (malloc_threshold is not None and entry.get("n_malloc_mb", 0.0) >= malloc_threshold):
        return "warm"
    return ""


def thresholds(profile: dict[str, Any]) -> tuple[float, float | None]:
    """The run's CPU threshold and its malloc threshold (None: memory was not
    profiled), as significant() and mark() take them."""
    return limits(profile["options"], bool(profile.get("memory")))


def limits(options: dict[str, Any], memory: bool) -> tuple[float, float | None]:
    """thresholds() from a run's options, before its profile is built."""
    malloc = options.get("malloc_threshold", OPTION_DEFAULTS["malloc_threshold"])
    return options["cpu_percent_threshold"], malloc if memory else None


def reduced(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile as --reduced-profile would have written it: only the lines and
    functions at or above the thresholds."""
    options = dict(profile["options"], reduced_profile=True)
    threshold, malloc_threshold = thresholds(profile)
    files = {name: dict(f, lines=[e for e in f["lines"] if significant(e, threshold, malloc_threshold)],
                        functions=[e for e in f["functions"] if significant(e, threshold, malloc_threshold)])
             for name, f in profile["files"].items()}
    return dict(profile, options=options, files=files)


# A line's GPU figures, NVML's and the kernel tier's.
_GPU_LINE_FIELDS = ("n_gpu_percent", "n_gpu_peak_memory_mb", "n_gpu_kernel_sec", "n_gpu_copy_mb",
                    "n_gpu_memset_mb", "n_gpu_alloc_mb")


def gpu_columns(profile: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the reports give the lines GPU columns, and the kernel tier's:
    when the GPU was measured and the program used it (busy time, memory held,
    a kernel, copy or allocation, on a line or in the run's totals).  A GPU is
    measured by default wherever one is found, so a program that never touched
    it would otherwise get columns of zeros, which push the source out of a
    narrow window; the run's GPU line (device, busy time) still says it was
    measured."""
    if not profile.get("gpu"):
        return False, False
    kernels = profile.get("gpu_kernel_tier") == "on"
    used = (profile.get("gpu_time_sec", 0.0) > 0 or profile.get("gpu_peak_memory_mb", 0.0) > 0
            or (kernels and any(profile.get(k, 0) for k in ("gpu_kernels", "gpu_copies", "gpu_memsets",
                                                            "gpu_allocations")))
            or any(e.get(k, 0.0) for f in profile["files"].values() for part in ("lines", "functions")
                   for e in f[part] for k in _GPU_LINE_FIELDS))
    return used, used and kernels


# Fewer CPU samples than this and the shares are rough: the reports say so,
# and the verdict does not judge what bounds the run.
FEW_SAMPLES = 20


def sampling(profile: dict[str, Any]) -> str:
    """What the reports say of the run's CPU samples: "none" (the run was too
    brief to be sampled), "few" (fewer than FEW_SAMPLES: the shares are
    rough) or "" (enough)."""
    samples = profile["cpu_samples"]
    return "none" if not samples else "few" if samples < FEW_SAMPLES else ""
