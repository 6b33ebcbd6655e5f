"""pyrometer: a high-precision, low-overhead CPU, GPU and memory profiler for Python."""

from .focus import profile  # @profile: a no-op decorator unless pyrometer runs the program

__version__ = "0.1.0"
__all__ = ["profile"]
