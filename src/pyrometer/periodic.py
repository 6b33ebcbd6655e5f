"""--profile-interval: the report, rewritten every N seconds while the program runs.

The work that needs the GIL is done by the thread that already holds it for a CPU
sample (csrc/profile/periodic.h says why a thread of our own does not work): it
takes the C core's aggregates (`collect`), serialises them with `marshal`, and
sends them over a socket to a writer process (a separate, low-priority
interpreter started once with `posix_spawn`, without the memory hooks), which
builds the profile, renders it and replaces the file atomically (json_out.write_report),
then answers.
The C core leaves that work out of the program's CPU time and memory, and sends
a new report only once the previous one is answered.  Only the writer process
runs the standard library's json or tokenize, so no line of them shows up in the
report, even with --profile-all.
"""

from __future__ import annotations

import marshal
import os
import sys
import time
from typing import Any

from .render import json_out


class PeriodicWriter:
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
        from . import _core  # not at the top: the writer process imports this module without it
        from .preload import environment_without_memhooks
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        argv = [sys.executable, "-I", "-S", "-c",
                f"import sys; sys.path.insert(0, {package_parent!r}); "
                "from pyrometer.periodic import child_main; child_main()"]
        mine, theirs = _core.periodic_socketpair()
        try:
            self._pid = os.posix_spawn(argv[0], argv, environment_without_memhooks(),
                                       file_actions=[(os.POSIX_SPAWN_DUP2, theirs, 0),
                                                     (os.POSIX_SPAWN_DUP2, theirs, 1)])
        except OSError as e:
            self.error = f"cannot start the periodic report writer: {e}"
            os.close(mine)
            return
        finally:
            os.close(theirs)
        self._mine = mine

    def begin(self, start_time: float, t0: float) -> None:
        """Start the reports; the sampler, which drives them, is running."""
        if self._mine < 0:
            return
        from . import _core
        self.job["start_time"] = start_time
        self.t0 = t0
        _core.periodic_start(self.interval, self._mine, self._payload)
        self._begun = True

    def _payload(self) -> bytes:
        """Called by the C core, GIL held, memory counting paused: must not release
        the GIL (no I/O) and must not raise."""
        from . import _core
        return marshal.dumps({**self.job, "raw": _core.collect(),
                              "elapsed": time.perf_counter() - self.t0})

    def stop(self) -> None:
        """After the sampler stopped: wait for the report in flight (its write must
        not replace the final report) and for the writer process to end."""
        if self._mine >= 0:
            if self._begun:
                from . import _core
                self.writes, error = _core.periodic_stop()  # closes the socket
                self.error = self.error or error
            else:
                os.close(self._mine)
            self._mine = -1
        if self._pid != 0:
            try:
                os.waitpid(self._pid, 0)
            except OSError:
                pass
            self._pid = 0


def _read_exactly(stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def child_main() -> None:
    """The writer process: for each set of aggregates on stdin, the profile,
    rendered and written to the file; one line per report on stdout."""
    try:
        os.nice(10)  # yield the CPU to the program being profiled
    except OSError:
        pass
    from . import model
    from .render import report
    jobs, answers = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = _read_exactly(jobs, 8)
        if not header:
            return
        try:
            job = marshal.loads(_read_exactly(jobs, int.from_bytes(header, "little")))
            profile = model.build(job["raw"], program=job["program"],
                                  argv=job["argv"], options=job["options"], elapsed=job["elapsed"],
                                  start_time=job["start_time"], exit_status=None)
            json_out.write_report(job["path"], report(profile, job["format"]))
            answers.write(b"ok\n")
        except Exception as e:  # reported by the profiler as one line, never a traceback
            answers.write(f"periodic report not written: {type(e).__name__}: {e}".replace("\n", " ").encode() + b"\n")
        answers.flush()
