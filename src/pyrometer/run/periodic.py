"""--profile-interval: the report, rewritten every N seconds while the program runs.

The work that needs the GIL is done by the thread that already holds it for a CPU
sample (csrc/periodic/periodic.h says why a thread of our own does not work): it
takes the C core's aggregates (`collect`), serialises them with `marshal`, and
sends them over a socket to a writer process (a separate, low-priority
interpreter started once with `posix_spawn`, without the memory hooks), which
builds the profile, renders it and replaces the file atomically (json_out.write_report),
then answers.
The C core leaves that work out of the program's CPU time and memory, and sends
a new report only once the previous one is answered.  Only the writer process
runs the standard library's json or tokenize, so no line of them shows up in the
report, even with --profile-all.

The writer never holds the program up: the send is bounded (csrc/periodic/periodic.c),
the last answer is awaited for a bounded time, and a writer that is stopped, hung
or dead costs one line (`error`), then is ended.  It runs in a process group of its
own, so that the terminal's Ctrl-C (sent to the foreground group) is the program's
alone; it ends when its input ends.  A program that ends without its final report
(SIGKILL, a crash, _exit from C) leaves the writer's input ended without the
empty message that says the final report is written: the writer then marks its
last report as the last word and says on stderr that the profile stops there.
"""

from __future__ import annotations

import marshal
import os
import signal
import sys
import time

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from ..render import json_out


class PeriodicWriter:
    # The module whose child_main() the writer process runs (run/top.py's view is
    # another consumer of the same reports), and how long a writer that was told
    # the run is over gets to end by itself.
    CHILD = "pyrometer.run.periodic"
    EXIT_S = 2.0

    def __init__(self, interval: float, job: dict[str, Any]):
        self.interval = interval
        self.job = job            # program, argv, options, format, path (start_time: begin)
        self.t0 = 0.0             # perf_counter() at the start of profiling
        self.writes = 0
        self.error: str | None = None
        self._pid = 0
        self._mine = -1           # this process's end of the socket to the writer
        self._begun = False

    def spawn(self) -> None:
        """Start the writer process (before profiling starts: not the program's work)."""
        from .. import _core  # not at the top: the writer process imports this module without it
        from ..core.preload import environment_without_memhooks
        from ..installed import PACKAGE_PARENT
        argv = [sys.executable, "-I", "-S", "-c",
                f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); "
                f"from {self.CHILD} import child_main; child_main()", *self._announced()]
        mine, theirs = _core.periodic_socketpair()
        try:
            self._pid = os.posix_spawn(argv[0], argv, environment_without_memhooks(),
                                       file_actions=[(os.POSIX_SPAWN_DUP2, theirs, 0),
                                                     (os.POSIX_SPAWN_DUP2, theirs, 1),
                                                     *self._more_descriptors()],
                                       setpgroup=0)
        except OSError as e:
            self.error = f"cannot start the periodic report writer: {e}"
            os.close(mine)
            return
        finally:
            os.close(theirs)
        self._mine = mine

    def _announced(self) -> list[str]:
        """The writer's arguments, which it does not read: the report's format and
        path, for pyrometer top --pid to find the snapshots (live.snapshots_of)."""
        return [self.job["format"], self.job["path"]]

    def _more_descriptors(self) -> list[tuple]:
        """posix_spawn file actions giving the writer more than its socket."""
        return []

    def begin(self, start_time: float, t0: float) -> None:
        """Start the reports; the sampler, which drives them, is running."""
        if self._mine < 0:
            return
        from .. import _core
        self.job["start_time"] = start_time
        self.t0 = t0
        _core.periodic_start(self.interval, self._mine, self._payload)
        self._begun = True

    def _payload(self) -> bytes:
        """Called by the C core, GIL held, memory counting paused: must not release
        the GIL (no I/O) and must not raise."""
        from .. import _core
        from ..core import document, focus
        return marshal.dumps({**self.job, "raw": document.plain(focus.collect_into(_core.collect())),
                              "elapsed": time.perf_counter() - self.t0})

    def stop(self) -> None:
        """After the sampler stopped, or where the run ends abruptly: wait, bounded,
        for the report in flight (its write must not replace the final report),
        then for the writer process to end; a writer that does not is ended."""
        quiet = False
        if self._mine >= 0:
            if self._begun:
                from .. import _core
                self.writes, error, quiet = _core.periodic_stop()  # closes the socket
                self.error = self.error or error
            else:
                os.close(self._mine)
                quiet = True
            self._mine = -1
        if self._pid != 0:
            self.ended_itself = self._reap(patience=self._patience(quiet))
            self._pid = 0

    ended_itself = True  # whether the writer process ended by itself (stop)

    def _patience(self, quiet: bool) -> float:
        """How long the writer gets to end by itself: none where it may be
        stopped or still writing a report (quiet False)."""
        return self.EXIT_S if quiet else 0.0

    def _reap(self, patience: float) -> bool:
        """Wait up to patience seconds for the writer to end, then end it: stopped
        or late, it must not write over the final report, nor outlive the run.
        Whether it ended by itself."""
        deadline = time.monotonic() + patience
        while True:
            try:
                pid, _ = os.waitpid(self._pid, os.WNOHANG)
            except ChildProcessError:  # reaped by the program (os.wait())
                return True
            if pid != 0:
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        try:
            os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
        except OSError:
            pass
        return False


def _read_exactly(fd: int, n: int) -> bytes:
    """n bytes, or b"" at the end of the input (a program that died with an answer
    unread resets the connection: an end too)."""
    data = b""
    while len(data) < n:
        try:
            chunk = os.read(fd, n - len(data))
        except OSError:
            return b""
        if not chunk:
            return b""
        data += chunk
    return data


def child_main() -> None:
    """The writer process: for each set of aggregates on stdin, the profile,
    rendered and written to the file; one line per report on stdout.  An empty
    message ends it quietly; the end of its input without one means the program
    ended without its final report."""
    # The program's Ctrl-C is the program's (own process group, and ignored here
    # should it be sent to this process all the same): the writer ends when its
    # input ends, never with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(10)  # yield the CPU to the program being profiled
    except OSError:
        pass
    from .. import model
    from ..render import report
    # Plain descriptors, no buffered streams: an answer to a program that is gone
    # fails here, once, and nothing is left to flush at exit.
    jobs, answers = 0, 1
    last = None
    while True:
        header = _read_exactly(jobs, 8)
        if not header:
            _last_word(last, model, report)
            return
        size = int.from_bytes(header, "little")
        if size == 0:
            return  # the run is over and its final report is the program's to write
        try:
            job = marshal.loads(_read_exactly(jobs, size))
            profile = _build(model, job, ended_by=None)
            json_out.write_report(job["path"], report(profile, job["format"]))
            last = job
            answer = b"ok\n"
        except Exception as e:  # reported by the profiler as one line, never a traceback
            answer = f"periodic report not written: {type(e).__name__}: {e}".replace("\n", " ").encode() + b"\n"
        try:
            os.write(answers, answer)
        except OSError:  # the program ended while this report was made
            _last_word(last, model, report)
            return


def _build(model, job: dict, ended_by: str | None, notices: list[str] | None = None) -> dict:
    from ..core import document
    return model.build(document.named(job["raw"]), program=job["program"], argv=job["argv"], options=job["options"],
                       elapsed=job["elapsed"], start_time=job["start_time"], exit_status=None,
                       ended_by=ended_by, notices=notices, sources=job.get("sources"))


def _last_word(last: dict | None, model, report) -> None:
    """The program ended without its final report (killed by SIGKILL, a crash, _exit
    from native code): the last periodic report stays, marked as the last word, and
    one line on stderr says so."""
    if last is None:
        what = "no periodic report had been written yet"
    else:
        what = f"{last['path']} holds the last periodic report, of its first {last['elapsed']:.1f} s"
        try:
            profile = _build(model, last, ended_by="unknown", notices=[
                "the program ended without its final profile (a signal that cannot be caught, "
                f"a crash, or _exit from native code): this report covers its first {last['elapsed']:.1f} s"])
            json_out.write_report(last["path"], report(profile, last["format"]))
        except Exception:
            pass  # the report as it was stays
    try:
        print(f"pyrometer: the program ended without writing its profile; {what}", file=sys.stderr, flush=True)
    except OSError:
        pass
