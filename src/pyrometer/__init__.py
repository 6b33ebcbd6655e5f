"""pyrometer: a high-precision, low-overhead CPU, GPU and memory profiler for Python."""

__version__ = "0.1.0"

from .control import profiling, start, stop  # noqa: E402  (regions: docs/how-it-works.md, "Pause and resume")
