"""Memory profiling needs the memory library (libpyrometer_memhooks.so) in the
process.  It is attached to the running process (attach: the library is loaded
with dlopen and put in every loaded object's tables, csrc/memhooks/got.c), so a
run starts one interpreter.  Where that fails (an interpreter that cannot load
it: no room left for its thread-local counters, an object whose tables cannot
be written), the command re-executes itself with the library in LD_PRELOAD,
as every run did before: a second interpreter start (about 35 ms here).

The dynamic loader splits LD_PRELOAD at every space and colon, with no way to
quote one, so a library installed under such a path (a virtual environment in
"My Projects", a directory named "a:b") is preloaded through a symbolic link to
it in a private directory (mkdtemp, mode 0700) whose path has neither.  The
profiled program's children inherit LD_PRELOAD, so the link lives as long as
the command: the re-executed process removes it when it ends
(remove_private_link).

tempfile is imported only where it is used (private_files.py says why).
"""

from __future__ import annotations

import os
import stat
import sys

MEMHOOKS_LIBRARY = "libpyrometer_memhooks.so"
_REEXEC_MARK = "PYROMETER_MEMHOOKS_PRELOADED"
# Set (to anything but empty) by the user: the library is preloaded by
# re-executing, never attached (where attaching misbehaves).
BY_PRELOAD = "PYROMETER_MEMORY_BY_PRELOAD"
# Set for the re-executed process only: the private directory of the link it
# must remove when it ends.
_LINK_DIRECTORY = "PYROMETER_MEMHOOKS_LINK_DIRECTORY"
# What the dynamic loader takes for the end of a path in LD_PRELOAD (glibc's
# elf/rtld.c splits the list at " :").
_PRELOAD_SEPARATORS = (" ", ":")


def memhooks_library() -> str | None:
    """The library shipped beside the extension (in the package, or in the build
    folder of an editable install)."""
    from ..installed import PACKAGE_DIR
    path = os.path.join(PACKAGE_DIR, MEMHOOKS_LIBRARY)
    if os.path.exists(path):
        return path
    from .. import _core
    path = os.path.join(os.path.dirname(os.path.abspath(_core.__file__)), MEMHOOKS_LIBRARY)
    return path if os.path.exists(path) else None


def _preloaded(library: str | None) -> bool:
    """Whether the library (itself, or through the private link) is in
    LD_PRELOAD and loaded."""
    if library is None:
        return False
    named = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if os.path.basename(p) == MEMHOOKS_LIBRARY]
    if library not in named and not any(os.path.realpath(p) == os.path.realpath(library) for p in named):
        return False
    from .. import _core
    return _core.memory_available()


def _owned_private_directory(path: str) -> bool:
    """A real directory (not a link) of this user that nobody else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def private_parent() -> str | None:
    """Where pyrometer's private directories go (the children's run directory,
    the library's link): a directory only this user may write, so that once one
    is removed nobody else can make one at the same path (children that outlive
    the run keep those paths in PYTHONPATH and LD_PRELOAD, and a sitecustomize
    or a library planted there would run as this user).  $XDG_RUNTIME_DIR,
    else ~/.cache/pyrometer/run (made 0700); None (the temporary directory, a
    place others can write: the residual risk is documented) when neither is
    usable."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and _owned_private_directory(runtime):
        return runtime
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if os.path.isabs(cache):
        path = os.path.join(cache, "pyrometer", "run")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            return None
        if _owned_private_directory(path) and _owned_private_directory(os.path.dirname(path)):
            return path
    return None


# Each private directory names the process that owns it (pid and start time,
# which tell it from a later process given the same pid) in this file, so that
# a directory left by a run that was killed (SIGKILL, a crash of the
# interpreter: nothing of pyrometer runs then) is removed by the next run.
_OWNER_FILE = ".owner"
_PRIVATE_PREFIXES = ("pyrometer-run-", "pyrometer-preload-")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field
    22), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
    except OSError:
        return None
    fields = stat_line[stat_line.rfind(b")") + 2:].split()  # the name may hold spaces and ")"
    return fields[19].decode() if len(fields) > 19 else None


def mark_owner(directory: str) -> None:
    """Names this process as the owner of directory (see _OWNER_FILE)."""
    pid = os.getpid()
    try:
        with open(os.path.join(directory, _OWNER_FILE), "w", encoding="utf-8") as f:
            f.write(f"{pid} {_start_time(pid)}\n")
    except OSError:
        pass


def sweep_stale() -> int:
    """Removes the private directories whose owner is gone; how many.  Only in
    private_parent() (this user's own directory: nobody else can put one
    there), and only those with an owner file whose process no longer runs."""
    parent = private_parent()
    if parent is None:
        return 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    removed = 0
    for name in names:
        if not name.startswith(_PRIVATE_PREFIXES):
            continue
        path = os.path.join(parent, name)
        try:
            with open(os.path.join(path, _OWNER_FILE), encoding="utf-8") as f:
                pid_text, started = f.read().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue  # being made right now, or not ours to judge
        if pid > 0 and _start_time(pid) != started:
            from ..private_files import remove_tree
            remove_tree(path)
            removed += 1
    return removed


def _splits(path: str) -> bool:
    return any(c in path for c in _PRELOAD_SEPARATORS)


def _private_link(library: str) -> tuple[str | None, str]:
    """A symbolic link to library in a new private directory whose path LD_PRELOAD
    can carry; (its path, "") or (None, why not)."""
    import tempfile
    from ..private_files import make_directory, remove_tree
    candidates = [p for p in (private_parent(), tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm") if p]
    problem = "no temporary directory whose path has no space or colon"
    for parent in dict.fromkeys(candidates):  # in order, once each
        if _splits(parent) or not os.path.isdir(parent):
            continue
        try:
            directory = make_directory(parent, "pyrometer-preload-")
        except OSError as e:
            problem = f"cannot make a directory in {parent}: {e.strerror or e}"
            continue
        mark_owner(directory)  # the same process after the exec: same pid, same start time
        link = os.path.join(directory, MEMHOOKS_LIBRARY)
        try:
            os.symlink(library, link)
        except OSError as e:
            remove_tree(directory)
            problem = f"cannot make a link in {directory}: {e.strerror or e}"
            continue
        return link, ""
    return None, problem


class _PrivateLink:
    """The private link's directory, in the re-executed process that owns it."""
    directory: str | None = None
    owner = 0  # a process the program forks inherits this, not the duty to remove it


def _take_private_link() -> None:
    """Out of the environment (the program's children must not remove it) and
    into this process's hands: the link made before re-executing, if any."""
    directory = os.environ.pop(_LINK_DIRECTORY, None)
    if directory is not None:
        _PrivateLink.directory, _PrivateLink.owner = directory, os.getpid()


def remove_private_link() -> None:
    """Remove the private link made for this command, if any, in the process that
    owns it: called when the command ends."""
    if _PrivateLink.directory is not None and os.getpid() == _PrivateLink.owner:
        from ..private_files import remove_tree
        remove_tree(_PrivateLink.directory)
        _PrivateLink.directory = None


def attach() -> str | None:
    """Loads the memory library into this running process, unless it is there
    already: None, or why it could not be.  With the GIL held (the caller's)."""
    from .. import _core
    if _core.memory_available():
        return None
    if os.environ.get(BY_PRELOAD):
        return f"{BY_PRELOAD} is set: the memory library is preloaded, never attached"
    library = memhooks_library()
    if library is None:
        return f"{MEMHOOKS_LIBRARY} is missing from the installation; reinstall pyrometer or use --no-memory"
    try:
        _core.attach_memory(library)
    except OSError as e:
        return f"cannot attach {library}: {e}"
    return None


def ensure_memhooks_loaded() -> str | None:
    """The memory library in this process: there already, attached (attach), or
    else by re-executing this same command (same pid, same standard streams)
    with the library first in LD_PRELOAD.  Returns an error message when none
    of these can be done."""
    library = memhooks_library()
    _take_private_link()
    if _preloaded(library):
        os.environ.pop(_REEXEC_MARK, None)
        return None
    if not os.environ.get(_REEXEC_MARK) and attach() is None:
        return None
    if os.environ.get(_REEXEC_MARK):
        remove_private_link()
        return "could not preload the memory library (is LD_PRELOAD ignored here?); use --no-memory"
    if library is None:
        return f"{MEMHOOKS_LIBRARY} is missing from the installation; reinstall pyrometer or use --no-memory"
    env = dict(os.environ)
    preload = library
    if _splits(library):
        preload, problem = _private_link(library)
        if preload is None:
            return (f"cannot preload {library}: LD_PRELOAD cannot carry a path with a space or a colon, "
                    f"and a private link to it could not be made ({problem}); install pyrometer "
                    f"under a path without them, or use --no-memory")
        env[_LINK_DIRECTORY] = os.path.dirname(preload)
    env["LD_PRELOAD"] = preload + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as e:
        if _LINK_DIRECTORY in env:
            from ..private_files import remove_tree
            remove_tree(env[_LINK_DIRECTORY])
        return f"cannot run {sys.executable} again with the memory library preloaded: {e.strerror or e}"
    return "exec failed"  # not reached


def environment_without_memhooks() -> dict[str, str]:
    """This process's environment without the memory library in LD_PRELOAD: for
    the processes pyrometer itself starts (report writers, the browser)."""
    env = dict(os.environ)
    if "pyrometer.run.children" in sys.modules:  # nor are they the program's children, to profile
        sys.modules["pyrometer.run.children"].restore_environment(env)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and not p.endswith(MEMHOOKS_LIBRARY)]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    return env
