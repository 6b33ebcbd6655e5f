"""pyrometer: a high-precision, low-overhead CPU, GPU and memory profiler for Python."""

__version__ = "0.1.0"
