"""Child processes: every Python child of the profiled program is profiled by the
same machinery, with the same options, and its profile merged into the first
process's (docs/how-it-works.md, "Child processes").

The first process (the top) makes a private run directory (mkdtemp, mode 0700)
holding the settings (settings.json: the options the measuring core starts
with) and a `boot` folder with only a sitecustomize.py, and puts that folder
first on the PYTHONPATH its children inherit (the one change to their
environment besides LD_PRELOAD).  A Python child started by an exec
(subprocess, the spawn and forkserver start methods, os.exec*) imports it while
it starts up; it takes itself out of sys.path, runs the sitecustomize it hides
(the user's, if there is one) and starts profiling (start_exec_child).
A child made by os.fork (the fork start method, Pool and ProcessPoolExecutor
workers under it) has the parent's profiler, stopped by the fork: an
os.register_at_fork hook resets the core in the child and starts a fresh
profile there (after_fork_in_child), so that the child's profile holds only
what it did after the fork.

Each child writes a start record when it starts and its partial profile (the
core's raw aggregates, as JSON) when it ends: at exit, at os._exit (multiprocessing
workers end that way), before an exec, and on a termination signal.  The top
merges the partial profiles at its end, one file at a time into sums keyed by
line (Merger), so that its memory follows the distinct lines, not the number
of children.  A child without a partial profile (killed, or still running when
the top ends) is listed all the same from its start record; a child that is
not Python (or a Python that could not be profiled) is listed from the
subprocess module's record of what it started.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
import weakref

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from .. import messages, private_files
from ..installed import PACKAGE_PARENT
from ..core import document, preload
from ..model import processes
from ..model.stacks import StackSums

_BOOT = "boot"
_SETTINGS_FILE = "settings.json"
# A pause or resume from outside (pyrometer --off/--on --pid), recorded by the
# processes it reached (csrc/control/control.c), for those that start later.
CONTROL_FILE = "control"
# The per-process table keeps this many rows; the count beyond is kept exact.
PROCESS_TABLE_MAX = 1000

BOOTSTRAP = '''\
# Written by pyrometer for one profiled run (pyrometer/children.py): starts
# profiling in this Python child process, then runs the sitecustomize that this
# one hides, if there is one.
def _pyrometer_bootstrap():
    import os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if p != here]  # the program's imports are its own
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # the user's own: its errors are reported as python reports them
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        sys.modules["sitecustomize"] = ours  # the import that runs this one expects it there
    finally:
        _pyrometer_start(os, sys, here)  # never raises: the user's error, if any, goes on


def _pyrometer_start(os, sys, here):
    # The top's own pyrometer, when this interpreter can load its measuring
    # core (the same version); otherwise this interpreter's own, if any.
    # Written in by the top (RunDirectory), so that nothing is imported before
    # the mark that keeps pyrometer's objects out of the child's collections
    # (core/gc_aside.py).
    package = _PACKAGE_
    same = package["cache_tag"] == sys.implementation.cache_tag
    if same:
        sys.path.insert(0, package["parent"])
    gc_aside = None
    try:
        try:
            from pyrometer.core import gc_aside
        except ImportError:  # this interpreter's own pyrometer, an older one
            pass
        if gc_aside is not None:
            gc_aside.mark()
        from pyrometer.run import children
        children.start_exec_child(os.path.join(os.path.dirname(here), "settings.json"))
    except BaseException as e:
        try:
            import json
            name = os.path.join(os.path.dirname(here), "n-%d-%s.json" % (os.getpid(), os.urandom(6).hex()))
            with open(name + ".tmp", "w", encoding="utf-8") as f:
                json.dump({"pid": os.getpid(), "ppid": os.getppid(), "command": list(sys.orig_argv),
                           "note": "not profiled: this Python cannot start pyrometer (%s: %s)"
                                   % (type(e).__name__, e)}, f)
            os.rename(name + ".tmp", name)
        except BaseException:
            pass
    finally:
        if gc_aside is not None:
            try:
                gc_aside.set_aside()
            except BaseException:
                pass
        if same and sys.path and sys.path[0] == package["parent"]:
            del sys.path[0]


_pyrometer_bootstrap()
del _pyrometer_bootstrap
'''


# ---------------------------------------------------------------------------
# The top process: the run directory and the environment.
# ---------------------------------------------------------------------------

class RunDirectory:
    """The private directory the children write into, and the PYTHONPATH entry
    that sends them there.  Removed by remove(), on every way the top ends."""

    current: "RunDirectory | None" = None

    def __init__(self, settings: dict[str, Any]):
        preload.sweep_stale()  # what runs that were killed left behind
        self.path = private_files.make_directory(preload.private_parent(), "pyrometer-run-")  # mode 0700
        preload.mark_owner(self.path)
        self.owner = os.getpid()
        boot = os.path.join(self.path, _BOOT)
        os.mkdir(boot, 0o700)
        package = {"parent": PACKAGE_PARENT,
                   "cache_tag": sys.implementation.cache_tag}
        with open(os.path.join(boot, "sitecustomize.py"), "w", encoding="utf-8") as f:
            f.write(BOOTSTRAP.replace("_PACKAGE_", repr(package)))
        self.settings = dict(settings, run_dir=self.path, boot=boot, package=package)
        with open(os.path.join(self.path, _SETTINGS_FILE), "w", encoding="utf-8") as f:
            json.dump(self.settings, f)
        previous = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = boot + (os.pathsep + previous if previous else "")
        RunDirectory.current = self

    def remove(self) -> None:
        """Removes the directory and puts the environment back; only in the top."""
        if os.getpid() != self.owner or self.path is None:
            return
        restore_environment(os.environ)
        private_files.remove_tree(self.path)
        self.path = None


def _boot() -> str | None:
    """The boot folder this process sends its children to, if any."""
    if RunDirectory.current is not None and RunDirectory.current.path is not None:
        return RunDirectory.current.settings["boot"]
    if ChildSession.current is not None:
        return ChildSession.current.settings["boot"]
    return None


def restore_environment(env) -> None:
    """env (a mapping like os.environ) without what sends children to the run
    directory: for the processes pyrometer itself starts, and after the run."""
    boot = _boot()
    if boot is None or "PYTHONPATH" not in env:
        return
    paths = [p for p in env["PYTHONPATH"].split(os.pathsep) if p != boot]
    if any(paths):
        env["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        del env["PYTHONPATH"]


# ---------------------------------------------------------------------------
# What every profiled process notes about the processes it starts and reaps.
# ---------------------------------------------------------------------------

class _Family:
    """Processes this process started through the subprocess module (pid,
    command, the Popen for its exit status) and children it reaped (pid ->
    exit status), written with its partial profile so that a child that was
    not profiled is still listed."""
    spawned: list = []
    pending: list = []  # [command, weakref to its Popen]: started, pid not yet read
    reaped: dict[int, int] = {}
    installed = False

    @classmethod
    def forget(cls) -> None:
        cls.spawned, cls.pending, cls.reaped = [], [], {}

    @classmethod
    def resolve(cls) -> None:
        """The pids of the Popens started since: each has one once
        _execute_child has returned, and is alive at least until its child
        is reaped (subprocess keeps a Popen whose child still runs)."""
        still = []
        for command, ref in cls.pending:
            popen = ref()
            pid = getattr(popen, "pid", None)
            if pid is not None:
                cls.spawned.append([pid, command, ref])
            elif popen is not None:
                still.append([command, ref])  # still in _execute_child (another thread's)
        cls.pending = still

    @classmethod
    def records(cls) -> tuple[list, dict[int, int]]:
        spawned = []
        cls.resolve()
        for pid, command, ref in cls.spawned:
            popen = ref()
            status = popen.returncode if popen is not None else None
            spawned.append([pid, command, _status_code(status) if isinstance(status, int) else None])
        return spawned, dict(cls.reaped)


def _status_code(code: int) -> int:
    """An exit status as the profile writes it: 0-255, 128 + n for signal n."""
    return 128 + (-code) if code < 0 else code & 0xFF


def _install_family_wrappers() -> None:
    """Notes what this process starts through subprocess (the
    "subprocess.Popen" audit event, raised in Popen._execute_child: nothing of
    subprocess is replaced, and it need not be imported) and what it reaps
    (stand-ins for os.waitpid and os.wait, csrc/unseen/stand_in.h).  Once per
    interpreter: a forked child has them."""
    if _Family.installed:
        return
    _Family.installed = True
    from .. import _core
    _core.audit_watch("subprocess.Popen", _on_popen)
    for name in ("waitpid", "wait"):
        _core.stand_in(("os", "posix"), name, None, _on_reaped)


def _on_popen(event: str, args: tuple) -> None:
    """Popen._execute_child is about to start args[1] (the command as it will
    run, the shell's words included): the Popen is that frame's self, whose pid
    is read once it has one (_Family.records)."""
    popen = sys._getframe(1).f_locals.get("self")
    if popen is None or len(args) < 2:
        return
    try:
        words = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args[1]]
        _Family.pending.append([words, weakref.ref(popen)])
    except Exception:
        pass


def in_popen() -> bool:
    """Whether this thread is inside Popen's fork-and-exec (its fork, with a
    preexec_fn, runs the fork hooks: not a profiled child)."""
    subprocess = sys.modules.get("subprocess")
    code = getattr(getattr(getattr(subprocess, "Popen", None), "_execute_child", None), "__code__", None)
    frame = sys._getframe(1)
    while code is not None and frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _on_reaped(result, args: tuple, kwargs: dict) -> None:
    _Family.resolve()
    _note_reaped(*result)


def _note_reaped(pid: int, status: int) -> None:
    if pid > 0:
        try:
            _Family.reaped[pid] = code = _status_code(os.waitstatus_to_exitcode(status))
        except ValueError:  # stopped, not ended
            return
        child = ChildSession.current
        if child is not None:
            # Said at once, not only with this process's own profile: a process
            # that outlives the run's end (multiprocessing's forkserver, the
            # default from 3.14, reaps the workers it forks and ends after the
            # run) would say it too late for the merge.
            _write_json(os.path.join(child.settings["run_dir"], f"r-{pid}-{os.urandom(6).hex()}.json"),
                        {"pid": pid, "exit_status": code})


# ---------------------------------------------------------------------------
# A profiled child.
# ---------------------------------------------------------------------------

def _include_for(settings: dict[str, Any]) -> list[str]:
    """The top's program directory, and this child's own script's directory
    (a child that runs another script reports that script's files too)."""
    include = list(settings["include"])
    argv = list(getattr(sys, "orig_argv", []))[1:]
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in ("-c", "-") or word.startswith("-c"):
            return include
        if word == "-m" or word.startswith("-m"):
            directory = os.getcwd()
            break
        if word in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        directory = os.path.dirname(os.path.realpath(word))
        break
    else:
        return include
    sep = directory.rstrip(os.sep) + os.sep
    return sorted(set(include) | {sep})


class ChildSession:
    """This process's own profile, as a child of the profiled run."""

    current: "ChildSession | None" = None

    def __init__(self, settings: dict[str, Any], started_by: str, include: list[str]):
        self.settings = settings
        self.started_by = started_by
        self.include = include
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.token = os.urandom(6).hex()
        self.start_time = time.time()
        self.t0 = time.perf_counter()
        self.written = False
        self.writing: int | None = None
        self.lock = threading.Lock()
        self.endings = None

    def _path(self, kind: str) -> str:
        return os.path.join(self.settings["run_dir"], f"{kind}-{self.pid}-{self.token}.json")

    def start(self, exclude: list[str], own: list[str], start_off: int | None = None) -> None:
        """start_off: -1 for a fork, which keeps its parent's pause state
        (pyrometer.control); else the run's --off, and the control file."""
        from .. import _core
        from .endings import Endings
        from ..core.session import start_core
        s = self.settings
        # A child started afresh attaches the library itself (a forked one has
        # its parent's); one preloaded by the run (preload.py's fallback) has it.
        window = s["memory_window"] if s["memory_window"] and preload.attach() is None else 0
        self.memory_lost = bool(s["memory_window"]) and not window
        _core.reset()
        start_core(s, exclude=exclude, own=own, control_file=os.path.join(s["run_dir"], CONTROL_FILE),
                   include=self.include, memory_window=window, gpu=self._gpu(),
                   **({} if start_off is None else {"start_off": start_off}))
        _core.ending_install(self._on_termination_signal, child=True)
        from ..core import focus
        focus.install_builtin()  # a profiled child is the program too: its @profile counts
        self.endings = Endings(self.write, _core.ending_signal, _core.ending_reinstall, _core.ending_die)
        self.endings.install()
        ChildSession.current = self
        _write_json(self._path("s"), self._record())

    def _gpu(self) -> int:
        """A child started afresh (exec, spawn) profiles its own GPU use; a forked
        one does not: the parent's GPU library state (its locks, its threads)
        is not usable after a fork, and CUDA is not either."""
        return 0 if self.started_by == "fork" else self.settings.get("gpu", 0)

    def _record(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "command": list(getattr(sys, "orig_argv", sys.argv)),
                "started_by": self.started_by, "start_time": self.start_time,
                "python": sys.version.split()[0]}

    def _on_termination_signal(self, signum: int) -> bool:
        from .endings import by_signal
        return self.write(*by_signal(signum)) is not None

    def write(self, status: int | None, ended_by: str) -> bool | None:
        """The partial profile, written once: at the end, os._exit, exec or a
        termination signal.  None when this thread is writing it already."""
        if os.getpid() != self.pid:
            return False
        me = threading.get_ident()
        if self.writing == me:
            return None
        with self.lock:
            if self.written:
                return True
            self.writing = me
            try:
                return self._write(status, ended_by)
            finally:
                self.writing = None

    def _write(self, status: int | None, ended_by: str) -> bool:
        from .. import _core
        from ..core import focus
        wall = time.perf_counter() - self.t0
        raw = focus.collect_into(_core.collect())
        spawned, reaped = _Family.records()
        record = self._record()
        record.update(processes.measured(raw, wall), exit_status=status, ended_by=ended_by,
                      memory_lost=self.memory_lost,
                      raw=document.plain(raw), spawned=spawned, reaped=reaped)
        self.written = True
        return _write_json(self._path("p"), record)

    def at_exit(self) -> None:
        """The end of the child's run (atexit, the main thread); nothing in a
        process forked from it, which has its own."""
        if os.getpid() != self.pid:
            return
        from .. import _core
        # The last drain of memory samples, before the write's lock: stopping
        # joins the sampler thread, which may be waiting for the lock to write
        # on a termination signal.
        _core.stop()
        self.endings.at_end(None)
        self.endings.die_if_signalled()


def detach() -> None:
    """pyrometer run inside a profiled run (a program that profiles a program):
    this process stops being the outer run's child, silently, so that its own
    run can start the core; the outer run does not list it."""
    child = ChildSession.current
    if child is None or child.pid != os.getpid():
        return
    from .. import _core
    with child.lock:
        child.written = True  # nothing is written at its end
    if _core.running():
        _core.stop()
    _core.ending_uninstall()
    if child.endings is not None:
        child.endings.uninstall()
    try:
        os.unlink(child._path("s"))
    except OSError:
        pass
    restore_environment(os.environ)  # nor are this run's children the outer run's
    ChildSession.current = None


def _write_json(path: str, data: Any) -> bool:
    """Written whole or not at all (a temporary name, then a rename), so that
    the merge never reads half a file; False when the run directory is gone
    (the top ended first) or full."""
    try:
        # dumps, not dump: dump encodes in Python, chunk by chunk; dumps in C,
        # several times faster on a child's profile.
        text = json.dumps(data, separators=(",", ":"))
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.rename(path + ".tmp", path)
        return True
    except (OSError, ValueError, TypeError):
        try:
            os.unlink(path + ".tmp")
        except OSError:
            pass
        return False


def _start_child(settings: dict[str, Any], started_by: str) -> None:
    from ..core.session import _installation_directories, own_prefixes
    include = _include_for(settings)
    child = ChildSession(settings, started_by, include)
    child.start(_installation_directories(), own_prefixes())
    atexit.register(child.at_exit)
    _install_family_wrappers()
    os.register_at_fork(after_in_child=after_fork_in_child)


def start_exec_child(settings_path: str) -> None:
    """From the bootstrap sitecustomize: profile this process, a Python started
    by an exec in the profiled run.  Never raises: a child that cannot be
    profiled runs unprofiled (and says why in its record)."""
    try:
        with open(settings_path, encoding="utf-8") as f:
            settings = json.load(f)
    except (OSError, ValueError):
        return  # the run is over: a grandchild that outlived it
    try:
        _start_child(settings, "exec")
    except Exception as e:
        _write_json(os.path.join(settings["run_dir"], f"n-{os.getpid()}-{os.urandom(6).hex()}.json"),
                    {"pid": os.getpid(), "ppid": os.getppid(), "command": list(getattr(sys, "orig_argv", sys.argv)),
                     "note": f"not profiled: {type(e).__name__}: {e}"})
        return
    _follow_main_code()


# The program's top-level code in a child started by an exec, kept alive.
_MAIN_CODE: list = []


def _follow_main_code() -> None:
    """The child's own program (the script, -m module or -c code) is run by
    Python itself, not by the launcher, so the profiler met its top-level code
    only at a snapshot, and that code is freed when it ends, before the
    profile is written.  A child shorter than a snapshot (or with --cpu-sampling-rate 1)
    lost its module-level memory: samples taken without the GIL named a code
    that was gone by the last drain (a 512 MB np.zeros), and those of a deep
    import were cut before reaching it (numpy's 24-31 MB).  A profile function
    catches the first frame of __main__'s code as it starts (the top level runs
    as a frame, which reports a 'call'), has the profiler follow it from then
    on (as the launcher does for the first process), keeps it alive to the end,
    and removes itself."""
    from .. import _core

    def catch(frame, event, arg):
        if event != "call" or frame.f_globals.get("__name__") != "__main__":
            return  # site's last imports, runpy's frames for -m
        sys.setprofile(None)
        if frame.f_code.co_name == "<module>":
            _MAIN_CODE.append(frame.f_code)
            _core.follow_code(frame.f_code)

    sys.setprofile(catch)


class _Forks:
    """Whether this process is being profiled (then its forks are too), and with what."""
    settings: dict[str, Any] | None = None
    profiling = False
    registered = False


def profile_forks(settings: dict[str, Any]) -> None:
    """In the top: its forks, from now on, profile themselves."""
    _Forks.settings = settings
    _Forks.profiling = True
    _install_family_wrappers()
    if not _Forks.registered:
        os.register_at_fork(after_in_child=after_fork_in_child)
        _Forks.registered = True


def stop_profiling_forks() -> None:
    _Forks.profiling = False


def after_fork_in_child() -> None:
    """A fork of a profiled process: a fresh profile of the child's own, unless
    the fork is the subprocess module's, about to exec (its preexec_fn runs
    the fork hooks), or the parent was not profiling."""
    if in_popen():
        return
    parent = ChildSession.current
    settings = parent.settings if parent is not None else (_Forks.settings if _Forks.profiling else None)
    if settings is None:
        return
    if parent is not None and parent.written:
        return  # forked after its own profile was written
    _Family.forget()
    _Forks.profiling = False  # the top's flag, inherited: this process is a child now
    ChildSession.current = None
    try:
        from ..core.session import _installation_directories, own_prefixes
        child = ChildSession(settings, "fork", parent.include if parent is not None else list(settings["include"]))
        child.start(_installation_directories(), own_prefixes(), start_off=-1)
        atexit.register(child.at_exit)
    except Exception:
        pass  # the child runs unprofiled; the parent lists it as not profiled


# ---------------------------------------------------------------------------
# The merge, in the top.
# ---------------------------------------------------------------------------

_SCALARS_SUMMED = ("snapshots", "main_snapshots", "spreads", "spread_peeks", "threads_seen", "process_cpu_ns", "sampler_cpu_ns",
                   "untracked_native_ns", "periodic_cpu_ns", "code_objects_seen", "functions_overflowed")
_MEMORY_SUMMED = ("unattributed_alloc_bytes", "unattributed_python_bytes", "unattributed_free_bytes",
                  "unattributed_churn_bytes",
                  "unattributed_copy_bytes", "native_thread_alloc_bytes", "native_thread_free_bytes",
                  "native_thread_copy_bytes", "dropped_samples", "dropped_bytes", "queued_samples")
_LINE_SUMMED = ("alloc_bytes", "python_bytes", "free_bytes", "churn_bytes", "window_sampled_bytes",
                "python_window_sampled_bytes", "freed_window_sampled_bytes",
                "freed_python_window_sampled_bytes", "copy_bytes",
                "alloc_samples",
                "free_samples",
                "copy_samples", "net_bytes", "watched", "watched_freed", "watched_evicted")


def _place(line) -> tuple:
    """A _core.CpuLine's or GpuLine's place, the key its sums add up by."""
    return line.filename, line.lineno, line.qualname, line.first_lineno


class Merger:
    """The top's raw aggregates with its children's added, one child at a time:
    sums keyed by line and function, so that memory follows distinct lines."""

    def __init__(self, raw: dict[str, Any], start_time: float):
        """raw: the first collection, in process or a document (core/document.py)."""
        self.raw = raw = document.named(raw)
        self.start_time = start_time
        self.records: dict[tuple, Any] = {}  # a line's place -> its CPU sums (_core.CpuSums)
        for r in raw["records"]:
            self._add_cpu(r)
        self.unattributed = raw["unattributed"]
        # @profile's functions, of every process: a child may decorate its own.
        self.focus: dict[tuple, int] = {}
        self._add_focus(raw)
        self.memory = raw.get("memory")
        self.gpu_lines: dict[tuple, list] = {}
        gpu = raw.get("gpu")
        if gpu is not None and gpu["status"] == "ok":
            for r in gpu["lines"]:
                self.gpu_lines[_place(r)] = r.gpu
            raw["gpu"] = dict(gpu, devices=[dict(d) for d in gpu["devices"]])
        self.mem_lines: dict[tuple, dict[str, Any]] = {}
        if self.memory:
            for r in self.memory["lines"]:
                self._add_memory_line(r, 0.0)
        # Call stacks, keyed by their frames' keys: equal paths add up.
        self.stacks = StackSums()
        self.stacks.add_raw(raw)

    def _add_cpu(self, line) -> None:
        """A _core.CpuLine's sums added to its line's."""
        key = _place(line)
        sums = self.records.get(key)
        self.records[key] = line.cpu if sums is None else document.add(sums, line.cpu)

    def _add_focus(self, raw: dict[str, Any]) -> None:
        for filename, qualname, first, last in raw.get("profiled_functions", []):
            key = (str(filename), str(qualname), int(first))
            self.focus[key] = max(self.focus.get(key, 0), int(last))

    def _add_memory_line(self, r: dict[str, Any], offset: float) -> None:
        key = (r["filename"], r["lineno"], r["function"], r["function_lineno"])
        m = self.mem_lines.get(key)
        if m is None:
            m = self.mem_lines[key] = dict(r, timeline=[])
            for name in _LINE_SUMMED:
                m[name] = 0
            m["peak_bytes"] = 0
        for name in _LINE_SUMMED:
            m[name] += r[name]
        m["peak_bytes"] = max(m["peak_bytes"], r["peak_bytes"])
        if len(r["timeline"]) > len(m["timeline"]):  # as model.build does for code objects
            m["timeline"] = [[t + offset, mb] for t, mb in r["timeline"]]

    def add(self, child: dict[str, Any]) -> None:
        raw = document.named(child["raw"])  # ValueError: another layout, not merged
        offset = child.get("start_time", self.start_time) - self.start_time
        self._add_focus(raw)  # first: a child of another shape fails here, before any sum
        stacks = StackSums()
        stacks.add_raw(raw)  # likewise: read whole before it is added
        self.stacks.merge(stacks)
        for r in raw["records"]:
            self._add_cpu(r)
        self.unattributed = document.add(self.unattributed, raw["unattributed"])
        for name in _SCALARS_SUMMED:
            self.raw[name] = self.raw.get(name, 0) + raw.get(name, 0)
        self._add_gpu(raw.get("gpu"))
        memory = raw.get("memory")
        if memory and self.memory:
            for r in memory["lines"]:
                self._add_memory_line(r, offset)
            for name in _MEMORY_SUMMED:
                self.memory[name] = self.memory.get(name, 0) + memory.get(name, 0)
            # The run's peak: the largest of any one process (processes' peaks
            # need not coincide in time; each process's is in the table).
            if memory["max_footprint_bytes"] > self.memory["max_footprint_bytes"]:
                self.memory["max_footprint_bytes"] = memory["max_footprint_bytes"]
                self.memory["max_footprint_where"] = memory["max_footprint_where"]
                self.memory["max_footprint_time_sec"] = max(memory["max_footprint_time_sec"] + offset, 0.0)
            if not memory.get("python_memory_profiled", True):
                self.memory["python_memory_profiled"] = False
                self.memory.setdefault("python_memory_why", memory.get("python_memory_why"))

    def _add_gpu(self, gpu: dict[str, Any] | None) -> None:
        """A child's GPU aggregates (each process samples its own GPU use):
        busy time and memory samples add up per line; a device's figures add up
        by its name; the run's peak is the largest of any one process."""
        if gpu is None:
            return
        mine = self.raw.get("gpu")
        if mine is None or (mine["status"] != "ok" and gpu["status"] == "ok"):
            self.raw["gpu"] = mine = dict(gpu, lines=[], devices=[], notices=list(mine["notices"]) if mine else [],
                                          unattributed_busy_ns=0.0, peak_memory_bytes=0, kernels=None)
        if gpu["status"] != "ok":
            return
        for r in gpu["lines"]:
            key = _place(r)
            sums = self.gpu_lines.get(key)
            # Sums add up, except the peak, the largest of any process.
            self.gpu_lines[key] = r.gpu if sums is None else document.add(sums, r.gpu,
                                                                          largest=("memory_peak_bytes",))
        names = {d["name"]: d for d in mine["devices"]}
        for d in gpu["devices"]:
            have = names.get(d["name"])
            if have is None:
                mine["devices"].append(dict(d))
                names[d["name"]] = mine["devices"][-1]
            else:
                have["busy_ns"] += d["busy_ns"]
                have["samples"] += d["samples"]
                have["peak_memory_bytes"] = max(have["peak_memory_bytes"], d["peak_memory_bytes"])
                have["shared"] = have["shared"] or d["shared"]
                if d["source"] == "process":
                    have["source"] = "process"
        mine["kernels"] = _merge_kernel_tier(mine.get("kernels"), gpu.get("kernels"))
        mine["unattributed_busy_ns"] += gpu["unattributed_busy_ns"]
        mine["peak_memory_bytes"] = max(mine["peak_memory_bytes"], gpu["peak_memory_bytes"])
        mine["notices"] = list(dict.fromkeys([*mine["notices"], *gpu["notices"]]))

    def result(self) -> dict[str, Any]:
        raw = dict(self.raw)
        if raw.get("gpu") is not None and raw["gpu"]["status"] == "ok":
            raw["gpu"] = dict(raw["gpu"], lines=[document.gpu_line(*key, sums) for key, sums in self.gpu_lines.items()])
        raw["records"] = [document.cpu_line(*key, sums) for key, sums in self.records.items()]
        raw["unattributed"] = self.unattributed
        raw["profiled_functions"] = [[*key, last] for key, last in self.focus.items()]
        if self.memory:
            raw["memory"] = dict(self.memory, lines=list(self.mem_lines.values()))
        self.stacks.to_raw(raw)
        return raw


def merge(run_dir: str, raw: dict[str, Any], top: dict[str, Any], start_time: float,
          top_spawned: list, top_reaped: dict[int, int]) -> tuple[dict[str, Any], list[dict], int, list[str]]:
    """The top's raw aggregates with every child's partial profile in run_dir
    added: (raw, the process table, how many processes in all, notices)."""
    merger = Merger(raw, start_time)
    family = _ProcessTable(top, top_spawned, top_reaped)
    try:
        names = sorted(os.listdir(run_dir))
    except OSError:
        names = []
    for name in names:
        if not name.endswith(".json") or name[:2] not in ("p-", "s-", "n-", "r-"):
            continue
        try:
            with open(os.path.join(run_dir, name), encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        family.read(name[:2], name[2:], record, merger)
        del record  # one child's aggregates at a time
    family.close()
    return merger.result(), family.table, family.count, sorted(family.notes)


class _ProcessTable:
    """The process table of a merge: a row for every process a record in the
    run directory or the top's own record names, profiled or not, with how
    each ended; `count` all of them, `table` the first PROCESS_TABLE_MAX."""

    def __init__(self, top: dict[str, Any], spawned: list, reaped: dict[int, int]):
        self.top = top
        self.table = [top]
        self.count = 1
        self.images: set[int] = {top["pid"]}  # pids with a record of their own
        self.reaped = dict(reaped)
        self.spawned = list(spawned)
        self.started: dict[str, dict] = {}
        self.finished: set[str] = set()
        self.notes: set[str] = set()

    def add_row(self, row: dict[str, Any]) -> None:
        self.count += 1
        if len(self.table) < PROCESS_TABLE_MAX:
            self.table.append(row)

    def read(self, kind: str, key: str, record: Any, merger: Merger) -> None:
        """One file of the run directory: kind "r-" a child reaped by another
        child (_note_reaped), "s-" a child's start, "n-" a child that is not
        profiled, "p-" a child's partial profile, merged."""
        if kind == "r-":
            if isinstance(record, dict) and isinstance(record.get("pid"), int) and \
                    isinstance(record.get("exit_status"), int):
                self.reaped[record["pid"]] = record["exit_status"]
            return
        if kind == "s-":
            self.started[key] = record
            return
        self.images.add(record.get("pid", 0))
        if kind == "n-":
            self.add_row(_row(record, profiled=False))
            return
        self.finished.add(key)
        try:
            merger.add(record)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            # Not the shape this pyrometer writes (a child run by another
            # interpreter's pyrometer, a file cut short): listed, not merged,
            # never the end of the whole profile.
            self.notes.add("a child process's profile could not be merged (written by another version of "
                           "pyrometer?); its figures are left out")
            pid = record.get("pid") if isinstance(record, dict) else None
            self.add_row(processes.row(pid=pid if isinstance(pid, int) and pid > 0 else 0, started_by="unknown",
                                       profiled=False, note="profile not merged: not the shape this pyrometer writes"))
            return
        if record.get("memory_lost"):
            self.notes.add("some child processes were profiled without memory (the memory library could not "
                           "be loaded in them)")
        self.spawned.extend(record.get("spawned", []))
        self.reaped.update({int(k): v for k, v in record.get("reaped", {}).items()})
        self.add_row(_row(record, profiled=True))

    def close(self) -> None:
        """After every file: the children that started and wrote no profile,
        those started but never profiled, and how each ended."""
        for key, record in self.started.items():
            if key in self.finished:
                continue
            self.images.add(record.get("pid", 0))
            self.add_row(_row(record, profiled=True, note=NO_PROFILE))
        for pid, command, status in self.spawned:
            if pid in self.images:
                continue
            self.images.add(pid)
            self.add_row(processes.row(pid=pid, command=command, started_by="subprocess", profiled=False,
                                       exit_status=status if status is not None else self.reaped.get(pid),
                                       note="not profiled: not a Python program, or one that ignores "
                                            "PYTHONPATH (-E, -I)"))
        for row in self.table:
            self._ended(row)
        if self.count > len(self.table):
            self.notes.add(f"{self.count:,} processes: the process table lists the first {len(self.table):,}")

    def _ended(self, row: dict[str, Any]) -> None:
        if row["exit_status"] is None and row["pid"] in self.reaped and row is not self.top:
            row["exit_status"] = self.reaped[row["pid"]]
        if row["note"] == NO_PROFILE and isinstance(row["exit_status"], int) and row["exit_status"] > 128:
            name = _signal_name(row["exit_status"] - 128)
            row["note"] = f"no profile: it died of {name}"
            if row["exit_status"] - 128 in _CRASHES:
                # Said here, by the top, on its own stream: the child's own
                # stderr is the program's (csrc/ending/ending.c says nothing there).
                said = (f"the program's child process {row['pid']} crashed ({name}): its own profile is lost, "
                        "a crashed process cannot write it (the run's profile lists it)")
                messages.say("pyrometer: " + said)


# The signals of a crash (csrc/ending/ending.c catches the same).
_CRASHES = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT})

# A child that started profiled and wrote no profile, its end not known.
NO_PROFILE = "no profile: still running when the run ended, or killed"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name  # SIGSEGV: it crashed; SIGKILL: it was killed
    except ValueError:
        return f"signal {signum}"


def _row(record: dict[str, Any], profiled: bool, note: str | None = None) -> dict[str, Any]:
    """A child's row, from the record it wrote at its start or its end."""
    given = {name: record[name] for name in processes.PROCESS.fields if name in record}
    given.setdefault("started_by", "exec")
    given.setdefault("pid", None)
    return processes.row(**dict(given, profiled=profiled, note=note if note is not None else record.get("note")))


def family_records() -> tuple[list, dict[int, int]]:
    """The top's own record of what it started and reaped."""
    return _Family.records()


def _merge_kernel_tier(mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two processes' kernel tiers (csrc/gpu/gpu.c, kernels_dict): counts add up;
    the status is "on" when it ran in either, else the first one's."""
    if theirs is None:
        return mine
    if mine is None:
        return dict(theirs)
    merged = dict(mine)
    for name, value in theirs.items():
        if isinstance(value, int) and not isinstance(value, bool):
            merged[name] = merged.get(name, 0) + value
    if theirs["status"] == "on" and mine["status"] != "on":
        merged.update(status="on", why="", backend=theirs["backend"], library=theirs.get("library", ""))
    return merged
