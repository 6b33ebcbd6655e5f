"""`pyrometer attach PID [--duration S] [options]`: profile a Python program
that is already running, unmodified, for S seconds or until Ctrl-C, then leave
it running as it was (CPython 3.14+, through sys.remote_exec, PEP 768).

How (attached.py is the part inside the program):
1. Checks that can be made from outside, each refused with one line: this
   interpreter has sys.remote_exec; the process exists, is not this one, and
   belongs to this user (or this is root); the kernel lets this process trace
   it (Yama's kernel.yama.ptrace_scope).
2. A private run directory (0700) with a FIFO and a script; sys.remote_exec
   has the program's main thread run the script between two bytecodes.  The
   script loads pyrometer from *this* installation (by path, without touching
   the program's sys.path), checks that the program's CPython is the one this
   installation was built for, and calls attached.begin: the profile starts
   there, in the program (memory through the library attached as for
   profile_this, csrc/memhooks/got.c).
3. The command waits for the profile to start (the `started` file, or an
   `error` file with the reason), holds the FIFO's writing end for the window,
   then writes `stop`; the program's thread stops the profile, detaches the
   memory library (every loaded object's allocator slots put back), writes
   the window's raw collection into the run directory and ends.  The command
   builds the profile and renders it as a run's report would be (text,
   --json, --html/--web, exports) and removes the run directory.  If the command dies, its end of the FIFO closes and the
   program ends the window by itself; if the program exits first, its atexit
   hook writes the profile.

The script runs only when the main thread next runs Python: a main thread
blocked in a long call (thread.join() without a timeout, a C library's wait)
is not reached, and after ATTACH_TIMEOUT the command gives up, leaving a
script that, if it runs later, only removes the run directory.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import tempfile
import time

from ..installed import PACKAGE_DIR
from ..messages import error, say, unwritable
from ..options import UsageError
from ..render.output import export_paths, report_path, where_written, write_exports, write_report
from .attached import CONTROL, ERROR, OUT, PROFILE, STARTED, STOP, window_profile

ATTACH_TIMEOUT = 30.0   # seconds for the program's main thread to run the script
PROFILE_TIMEOUT = 120.0  # seconds for the program to write the profile once told to stop
# Options of a run that an attached window has no use for.
NOT_FOR_ATTACH = {"profile_interval": "--profile-interval", "live": "--live", "off": "--off",
                  "on": "--on", "pid": "--pid", "force_version": "--force-version"}
# The Options fields that the program's side gets (attached.begin).
SETTINGS = ("cpu_only", "profile_all", "profile_only", "profile_exclude", "use_virtual_time",
            "cpu_percent_threshold", "cpu_sampling_rate", "reduced_profile", "memory", "gpu", "gpu_kernels",
            "malloc_threshold", "allocation_sampling_window", "leak_detector")

# Run by the program's main thread (sys.remote_exec).  It runs in __main__'s
# namespace (CPython gh-132859): one call of exec in a namespace of its own, so
# that no name of the program's is touched.
SCRIPT = 'exec(compile({code!r}, "<pyrometer attach>", "exec"), {{"__name__": "__pyrometer_attach__"}})\n'
LOADER = '''
def attach(run_dir, package, settings, built_for):
    import os, sys
    if not os.path.isdir(run_dir):
        return  # the command gave up and left
    def fail(message):
        temporary = os.path.join(run_dir, "out", ".error.tmp")
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(message)
            os.replace(temporary, os.path.join(run_dir, "out", "error"))
        except OSError:
            pass
    try:
        import sysconfig
        mine = (sys.implementation.cache_tag, bool(sysconfig.get_config_var("Py_GIL_DISABLED")))
        if list(mine) != list(built_for):
            v = sys.version_info
            fail(f"the program runs CPython {{v.major}}.{{v.minor}}.{{v.micro}}"
                 f"{{' (free-threaded)' if mine[1] else ''}} ({{sys.executable}}); this pyrometer is "
                 f"installed for {{built_for[0]}}{{' (free-threaded)' if built_for[1] else ''}}: "
                 f"attach with a pyrometer installed for the program's Python")
            return
        package_dir = os.path.realpath(package)
        loaded = sys.modules.get("pyrometer")
        if loaded is not None:
            theirs = os.path.realpath(os.path.dirname(getattr(loaded, "__file__", "") or ""))
            if theirs != package_dir:
                fail(f"the program has imported another pyrometer ({{theirs}}): attach with that "
                     f"installation's pyrometer command")
                return
        else:
            import importlib.util
            spec = importlib.util.spec_from_file_location(
                "pyrometer", os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir])
            module = importlib.util.module_from_spec(spec)
            sys.modules["pyrometer"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["pyrometer"]
                raise
        import importlib
        importlib.import_module("pyrometer.integrations.attached").begin(run_dir, settings)
    except KeyboardInterrupt:  # the program's Ctrl-C, landed here: given back to it
        fail("the program was interrupted (Ctrl-C) as pyrometer loaded")
        import _thread
        _thread.interrupt_main()
    except BaseException as e:
        fail(f"{{type(e).__name__}}: {{e}}")

attach({run_dir!r}, {package!r}, {settings!r}, {built_for!r})
'''
CLEANUP = '''
import shutil
shutil.rmtree({run_dir!r}, ignore_errors=True)
'''


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def _pause(pid: int) -> None:
    """Pauses the attached program's profile now (the command of `--off --pid`,
    remote.py), so that its window ends when asked; nothing where it cannot be
    sent (the program is gone, or no longer catches the signal)."""
    try:
        from .. import _core
        from ..run.remote import why_not_profiled
        if why_not_profiled(pid, _core.CONTROL_SIGNAL) is None:
            _core.control_send(pid, False)
    except (ImportError, AttributeError, OSError):
        pass


def _duration(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if not (value > 0 and value < 1e9):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def parse(argv: list[str]):
    """(pid, duration or None, Options) from `pyrometer attach`'s arguments; the
    report and measuring options are the run's own (options.py)."""
    from ..options import _pid, parse as parse_run
    own = _Parser(prog="pyrometer attach", add_help=False)
    own.add_argument("pid", type=_pid, nargs="?")
    own.add_argument("--duration", type=_duration, default=None)
    own.add_argument("-h", "--help", action="store_true")
    ns, rest = own.parse_known_args(argv)
    if ns.help:
        return None, None, None
    if ns.pid is None:
        raise UsageError("attach needs the process id of a running Python program: pyrometer attach PID")
    extra = [w for w in rest if not w.startswith("-")]
    options = parse_run([*rest, "--", "attached"])  # the run's options, defined once
    if options.module is not None or options.command is not None or options.program != ["attached"]:
        raise UsageError(f"attach profiles a running program: it takes no program to run ({' '.join(extra)})")
    for field, flag in NOT_FOR_ATTACH.items():
        if getattr(options, field):
            raise UsageError(f"{flag} does not apply to pyrometer attach")
    options.children = False
    return ns.pid, ns.duration, options


USAGE = """usage: pyrometer attach PID [--duration SECONDS] [report and sampling options]

Profile the running Python program PID (CPython 3.14 or later, the same version
as this pyrometer's) for SECONDS, or until Ctrl-C: CPU, memory and GPU as a run
under pyrometer would be, then leave the program running as it was and write the
report (text by default; --json, --html, --web, --outfile FILE and the exports
as for a run; see pyrometer --help)."""


def _uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[2])  # effective
    except (OSError, ValueError, IndexError):
        return None
    return None


def _is_ancestor(pid: int) -> bool:
    """Whether this process is an ancestor of pid (Yama's scope 1 lets a
    process trace its descendants)."""
    me, current = os.getpid(), pid
    for _ in range(4096):
        try:
            with open(f"/proc/{current}/stat", encoding="utf-8") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if parent == me:
            return True
        if parent <= 1:
            return False
        current = parent
    return False


def refusal(pid: int) -> str | None:
    """Why pid cannot be attached to, from outside, in one line; None if it may."""
    if not hasattr(sys, "remote_exec"):
        v = sys.version_info
        return (f"pyrometer attach needs CPython 3.14 or later (sys.remote_exec, PEP 768), for itself and "
                f"the program; this pyrometer runs on CPython {v.major}.{v.minor}.{v.micro}")
    from ..messages import interpreter_problem
    problem = interpreter_problem(force_version=False)
    if problem is not None:
        return problem
    if pid == os.getpid():
        return "cannot attach to pyrometer's own process"
    if not os.path.exists(f"/proc/{pid}"):
        return f"no process {pid}"
    uid = _uid_of(pid)
    root = os.geteuid() == 0
    if uid is None:
        return f"cannot read /proc/{pid}/status: is process {pid} still running?"
    if uid != os.geteuid() and not root:
        return (f"process {pid} belongs to another user (uid {uid}); attaching needs that user's "
                f"account or root")
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope", encoding="utf-8") as f:
            scope = int(f.read().strip() or "0")
    except (OSError, ValueError):
        scope = 0  # no Yama: the usual same-user rule only
    if scope >= 3:
        return "kernel.yama.ptrace_scope is 3: no process may attach to another until reboot"
    if scope == 2 and not root:
        return "kernel.yama.ptrace_scope is 2: only root may attach to a process (sudo pyrometer attach)"
    if scope == 1 and not root and not _is_ancestor(pid):
        return (f"kernel.yama.ptrace_scope is 1: only a parent process or root may attach to process {pid} "
                f"(sudo pyrometer attach {pid}, or sudo sysctl kernel.yama.ptrace_scope=0)")
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has ended: its status in /proc says so.
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _read(path: str) -> bytes | None:
    """A regular file's bytes, never through a link nor from a FIFO (the
    folder may be the program's user's: a root command must not be led
    elsewhere); None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_script(path: str, code: str) -> None:
    """The script, whole (a rename: the program may be reading the old one)."""
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(SCRIPT.format(code=code))
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


class _Interrupted(Exception):
    pass


def _interrupted(signum, frame):
    raise _Interrupted()


def command(argv: list[str]) -> int:
    try:
        pid, duration, options = parse(argv)
        if options is None:
            print(USAGE)
            return 0
        exports, problem = export_paths(options.exports())
    except UsageError as e:
        return error(str(e))
    if problem is not None:
        return error(problem)
    run = _AttachedRun(pid, duration, options, exports)
    status = run.check()
    if status is not None:
        return status
    return run.run()


class _AttachedRun:
    """One window on a running program: where its report goes, the run
    directory (the script, the FIFO, and OUT, where the program writes), and
    the steps from the script to the report.  A step that cannot go on says
    why on stderr and gives the exit status; None lets the next one go."""

    def __init__(self, pid: int, duration: float | None, options, exports) -> None:
        self.pid, self.duration, self.options, self.exports = pid, duration, options, exports
        self.fmt = options.format
        self.path = self.shown = None  # shown: as the user gave it, for the line that says where it went
        self.run_dir = self.script = self.out = None
        self.control = None  # the FIFO's writing end: held open for the window
        self.keep_run_dir = False  # left to the script, which the program may still run
        self.data = None  # the profile, as the program wrote it

    def check(self) -> int | None:
        """What is refused before anything is made: the process (refusal), then
        the report's file."""
        problem = refusal(self.pid)
        if problem is not None:
            return error(problem)
        self.path = self.shown = report_path(self.fmt, self.options.outfile, stdout_shared=False)
        if self.path is not None:
            problem = unwritable(self.path)
            if problem is not None:
                return error(problem)
            self.path = os.path.abspath(self.path)
        return None

    def run(self) -> int:
        """The window and its report; the run directory is removed on every way
        out but one (_wait_for_start), and SIGTERM is an interruption meanwhile."""
        self.run_dir = tempfile.mkdtemp(prefix="pyrometer-attach-")
        self.script = os.path.join(self.run_dir, "attach.py")
        self.out = os.path.join(self.run_dir, OUT)
        previous_term = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _interrupted)
        try:
            return self._attach_and_profile()
        finally:
            signal.signal(signal.SIGTERM, previous_term)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if not self.keep_run_dir:
                import shutil
                shutil.rmtree(self.run_dir, ignore_errors=True)

    def _attach_and_profile(self) -> int:
        self._prepare_run_dir()
        for step in (self._run_script, self._wait_for_start, self._begin_window):
            status = step()
            if status is not None:
                return status
        self._hold_window()
        self._end_window()
        status = self._wait_for_profile()
        if status is not None:
            return status
        return self._report()

    def _prepare_run_dir(self) -> None:
        """OUT, the FIFO and the script.  The run directory is this command's
        (0700; 0755 when root attaches to another user's program, which then
        reads the script and owns only the FIFO and OUT, where it writes)."""
        import sysconfig
        theirs = _uid_of(self.pid)
        fifo = os.path.join(self.run_dir, CONTROL)
        os.mkdir(self.out, 0o700)
        os.mkfifo(fifo, 0o600)
        if os.geteuid() == 0 and theirs not in (None, 0):
            os.chmod(self.run_dir, 0o755)
            os.chown(self.out, theirs, -1)
            os.chown(fifo, theirs, -1)
        built_for = [sys.implementation.cache_tag, bool(sysconfig.get_config_var("Py_GIL_DISABLED"))]
        settings = {name: getattr(self.options, name) for name in SETTINGS}
        _write_script(self.script, LOADER.format(run_dir=self.run_dir, package=PACKAGE_DIR,
                                                 settings=settings, built_for=built_for))

    def _run_script(self) -> int | None:
        """Has the program's main thread run the script, when it next runs Python."""
        try:
            sys.remote_exec(self.pid, self.script)
        except (OSError, RuntimeError, ValueError) as e:
            v = sys.version_info
            return error(f"cannot attach to process {self.pid}: {e} (attaching needs a CPython "
                          f"{v.major}.{v.minor} process, as this pyrometer's)", 1)
        return None

    def _wait_for_start(self) -> int | None:
        """Until the profile starts in the program (`started`), or why it did not:
        its `error`, its end, ATTACH_TIMEOUT or an interruption.  In the last two
        it may still run the script later: the script then only removes the run
        directory, which is left to it."""
        pid = self.pid
        deadline = time.monotonic() + ATTACH_TIMEOUT
        try:
            while time.monotonic() < deadline:
                written = _read(os.path.join(self.out, ERROR))
                if written is not None:
                    return error(f"cannot profile process {pid}: {written.decode('utf-8', 'replace').strip()}", 1)
                if _read(os.path.join(self.out, STARTED)) is not None:
                    return None
                if not _alive(pid):
                    return error(f"process {pid} ended before pyrometer could attach", 1)
                time.sleep(0.02)
            why = (f"process {pid} did not run pyrometer's attach script within {ATTACH_TIMEOUT:g} s: "
                   f"its main thread runs no Python code (blocked in a call?); sys.remote_exec runs "
                   f"code in the main thread only")
        except (KeyboardInterrupt, _Interrupted):
            why = f"interrupted before process {pid} ran pyrometer's attach script"
        _write_script(self.script, CLEANUP.format(run_dir=self.run_dir))
        self.keep_run_dir = True
        return error(why, 1)

    def _begin_window(self) -> int | None:
        """`go` on the FIFO, whose writing end is then held for the window."""
        try:
            self.control = os.open(os.path.join(self.run_dir, CONTROL),
                                   os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.write(self.control, b"go\n")
        except OSError:
            return error(f"process {self.pid} stopped waiting for pyrometer before the window began "
                          f"(the command was held up): nothing was profiled", 1)
        if not self.options.quiet:
            say(f"pyrometer: attached to process {self.pid}; profiling "
                + (f"for {self.duration:g} s" if self.duration else "until Ctrl-C"))
        return None

    def _hold_window(self) -> None:
        """Until the duration is over, Ctrl-C (or SIGTERM), or the program's end."""
        duration = self.duration
        ends = time.monotonic() + duration if duration else None
        try:
            while _alive(self.pid) and (ends is None or time.monotonic() < ends):
                time.sleep(min(0.05, max(0.0, ends - time.monotonic())) if ends else 0.05)
        except (KeyboardInterrupt, _Interrupted):
            pass

    def _end_window(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # while the profile is made: never half-done
        # The window ends now: a pause command (control.h) takes effect at the
        # moment it arrives, where the STOP below is acted on only once the
        # program's attach thread gets the GIL, which threads running Python
        # held from it for up to 8.5 s of a 1.5 s window.
        _pause(self.pid)
        try:
            os.write(self.control, STOP)
        except OSError:
            pass  # the program has gone
        os.close(self.control)

    def _wait_for_profile(self) -> int | None:
        """Until the program has written its profile (self.data), or why it has not."""
        pid = self.pid
        deadline = time.monotonic() + PROFILE_TIMEOUT
        try:
            while time.monotonic() < deadline:
                self.data = _read(os.path.join(self.out, PROFILE))
                if self.data is not None:
                    return None
                written = _read(os.path.join(self.out, ERROR))
                if written is not None:
                    return error(f"process {pid}: {written.decode('utf-8', 'replace').strip()}", 1)
                if not _alive(pid) and _read(os.path.join(self.out, PROFILE)) is None:
                    return error(f"process {pid} ended during the window without writing its profile "
                                  f"(killed by a signal?)", 1)
                time.sleep(0.02)
        except _Interrupted:
            return error(f"interrupted while process {pid} wrote its profile (it is profiled no more)", 1)
        return error(f"process {pid} did not write its profile within {PROFILE_TIMEOUT:g} s", 1)

    def _report(self) -> int:
        """The profile rendered as a run's would be: the exports, then the report."""
        pid, options = self.pid, self.options
        try:
            profile = window_profile(self.data)
        except ValueError as e:
            return error(f"process {pid}'s profile: {e}", 1)
        if self.exports and not write_exports(profile, self.exports, options.collapsed_metric, options.quiet,
                                              f"process {pid}'s profile"):
            return 1
        try:
            opened = write_report(profile, self.fmt, self.path, web=options.web)
        except OSError as e:
            return error(f"cannot write the report: {e}", 1)
        if self.path is not None and not options.quiet:
            say(where_written(self.fmt, self.shown, self.path, opened=opened))
        return 0
