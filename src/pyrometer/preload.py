"""Memory profiling needs the preloaded library (libpyrometer_memhooks.so) in the
process from its first allocation, so the command re-executes itself with the
library in LD_PRELOAD.  This module decides that before anything heavy is
imported: the first process should cost one interpreter start and nothing more.
"""

from __future__ import annotations

import os
import sys

MEMHOOKS_LIBRARY = "libpyrometer_memhooks.so"
_REEXEC_MARK = "PYROMETER_MEMHOOKS_PRELOADED"
_OWN_DIRECTORY = os.path.dirname(os.path.abspath(__file__))


def memhooks_library() -> str | None:
    """The library shipped beside the extension (in the package, or in the build
    folder of an editable install)."""
    path = os.path.join(_OWN_DIRECTORY, MEMHOOKS_LIBRARY)
    if os.path.exists(path):
        return path
    from . import _core
    path = os.path.join(os.path.dirname(os.path.abspath(_core.__file__)), MEMHOOKS_LIBRARY)
    return path if os.path.exists(path) else None


def _preloaded(library: str | None) -> bool:
    if library is None or library not in os.environ.get("LD_PRELOAD", "").split(":"):
        return False
    from . import _core
    return _core.memory_available()


def ensure_memhooks_preloaded() -> str | None:
    """Re-execute this same command (same pid, same standard streams) with the
    library first in LD_PRELOAD, unless it is there already.  Returns an error
    message when that cannot be done."""
    library = memhooks_library()
    if _preloaded(library):
        os.environ.pop(_REEXEC_MARK, None)
        return None
    if os.environ.get(_REEXEC_MARK):
        return "could not preload the memory library (is LD_PRELOAD ignored here?); use --no-memory"
    if library is None:
        return f"{MEMHOOKS_LIBRARY} is missing from the installation; reinstall pyrometer or use --no-memory"
    env = dict(os.environ)
    env["LD_PRELOAD"] = library + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    return "exec failed"  # not reached


def environment_without_memhooks() -> dict[str, str]:
    """This process's environment without the memory library in LD_PRELOAD: for
    the processes pyrometer itself starts (report writers, the browser)."""
    env = dict(os.environ)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and not p.endswith(MEMHOOKS_LIBRARY)]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    return env
