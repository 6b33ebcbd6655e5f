"""pyrometer: a high-precision, low-overhead CPU, GPU and memory profiler for Python.

PYTEST_DONT_REWRITE: pytest marks the package of every plugin for assertion
rewriting, and warns (an error under `filterwarnings = error`) where it is
already imported, as it is when pyrometer runs pytest; pyrometer's own asserts
need no rewriting.
"""

from .core.focus import profile  # @profile: a no-op decorator unless pyrometer runs the program
from .core.control import profiling, start, stop  # regions: docs/how-it-works.md, "Pause and resume"

from ._version import __version__
__all__ = ["profile", "profile_this", "load_ipython_extension", "start", "stop", "profiling"]


def profile_this(func, *args, **kwargs):
    """Profile func(*args, **kwargs) in this process; returns (result, profile).
    See pyrometer.inprocess.profile_this."""
    from .integrations.inprocess import profile_this
    return profile_this(func, *args, **kwargs)


def load_ipython_extension(ipython):
    """%load_ext pyrometer: the %pyrometer and %%pyrometer magics (pyrometer.jupyter).
    Imported only then, so that `import pyrometer` does not import IPython."""
    from .integrations.jupyter import load_ipython_extension
    load_ipython_extension(ipython)
