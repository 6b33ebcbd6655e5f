"""--profile-interval: the report, rewritten every N seconds while the program runs.

The writer is a thread of the profiled process, and whatever it does there is
measured like the program's own work.  So it does as little as it can there,
and only in C: it takes the C core's aggregates (`collect`), serialises them
with `marshal`, and hands them through a pipe to a writer process (a separate,
low-priority interpreter started once with `posix_spawn`, without the memory
hooks), which builds the profile, renders it and replaces the file atomically,
then answers on a second pipe.  Its frames are pyrometer's own (never reported) and it calls no
Python code of the standard library, so even with --profile-all no line of
json, tokenize or threading shows up in the report.  It is started with
`_thread`, not `threading`, so the program's `threading.enumerate()` does not
see it.  What remains measurable (the CPU of `collect` and `marshal`, charged
as time with no reported line, and the thread itself) is taken off the final
profile by `discount`.
"""

from __future__ import annotations

import _thread
import marshal
import os
import sys
import time
from typing import Any, Callable

from .render import json_out


class PeriodicWriter:
    def __init__(self, interval: float, collect: Callable[[], dict], job: dict[str, Any], t0: float):
        self.interval = interval
        self.collect = collect
        self.job = job            # program, argv, options, start_time, format, path
        self.t0 = t0              # perf_counter() at the start of profiling
        self.cpu_ns = 0           # this thread's CPU while writing
        self.writes = 0
        self.error: str | None = None
        self._stop = _thread.allocate_lock()
        self._stop.acquire()      # released to stop the thread
        self._done = _thread.allocate_lock()
        self._done.acquire()      # released by the thread when it ends
        self._pid = 0
        self._to_child = self._from_child = -1

    def start(self) -> None:
        """Start the writer process and the thread, and wait until the thread
        exists: the sampler, started next, then knows it from the start (see
        discount)."""
        from .preload import environment_without_memhooks
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        argv = [sys.executable, "-I", "-S", "-c",
                f"import sys; sys.path.insert(0, {package_parent!r}); "
                "from pyrometer.periodic import child_main; child_main()"]
        jobs_r, self._to_child = os.pipe()
        self._from_child, acks_w = os.pipe()
        try:
            self._pid = os.posix_spawn(argv[0], argv, environment_without_memhooks(),
                                       file_actions=[(os.POSIX_SPAWN_DUP2, jobs_r, 0),
                                                     (os.POSIX_SPAWN_DUP2, acks_w, 1)])
        except OSError as e:
            self.error = f"cannot start the periodic report writer: {e}"
            os.close(self._to_child)
            os.close(self._from_child)
            self._done.release()
            return
        finally:
            os.close(jobs_r)
            os.close(acks_w)
        # A child forked by the program must not hold the pipe to the writer
        # process open: the writer would never see the end of its input.
        os.register_at_fork(after_in_child=self._close_pipes)
        running = _thread.allocate_lock()
        running.acquire()
        _thread.start_new_thread(self._run, (running,))
        running.acquire()

    def _close_pipes(self) -> None:
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._to_child = self._from_child = -1

    def request_stop(self) -> None:
        """Ask the thread to end (it finishes the write in progress first)."""
        self._stop.release()

    def join(self) -> None:
        """Wait for the thread's end, so that its last write cannot replace the
        final report written after this."""
        while not self._done.acquire(timeout=0.5):
            pass

    def _run(self, running) -> None:
        running.release()
        try:
            due = time.monotonic() + self.interval
            while self.error is None and not self._stop.acquire(timeout=max(0.0, due - time.monotonic())):
                before = time.thread_time_ns()
                self._write()
                self.cpu_ns += time.thread_time_ns() - before
                now = time.monotonic()
                due += self.interval
                if due < now:  # a write took longer than the interval: skip, do not pile up
                    due = now + self.interval
        finally:
            try:
                os.close(self._to_child)  # the writer process ends at end of input
                os.waitpid(self._pid, 0)
                os.close(self._from_child)
            except OSError:
                pass
            self._done.release()

    def _write(self) -> None:
        """One report: the aggregates to the writer process, then wait for its
        answer (one line: "ok", or what went wrong)."""
        try:
            payload = marshal.dumps({**self.job, "raw": self.collect(), "writer_cpu_ns": self.cpu_ns,
                                     "elapsed": time.perf_counter() - self.t0})
            view = memoryview(len(payload).to_bytes(8, "little") + payload)
            while view:
                view = view[os.write(self._to_child, view):]
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = os.read(self._from_child, 4096)
                if not chunk:
                    raise OSError("the periodic report writer ended")
                answer += chunk
            if answer == b"ok\n":
                self.writes += 1
            else:
                self.error = answer.decode("utf-8", "replace").strip()
        except OSError as e:
            self.error = f"cannot write the periodic report: {e}"


def discount(raw: dict[str, Any], writer_cpu_ns: int) -> dict[str, Any]:
    """Take the writer thread out of the C core's totals: its CPU was charged as
    time with no reported line (native while in C, the rest Python), and it was
    one of the threads seen (it exists before the sampler starts)."""
    python, native, system, busy, samples = raw["unattributed"]
    cpu = float(writer_cpu_ns)
    from_native = min(native, cpu)
    from_python = min(python, cpu - from_native)
    raw = dict(raw)
    raw["unattributed"] = (python - from_python, native - from_native, system, busy, samples)
    raw["threads_seen"] = max(raw["threads_seen"] - 1, 0)
    return raw


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
            profile = model.build(discount(job["raw"], job["writer_cpu_ns"]), program=job["program"],
                                  argv=job["argv"], options=job["options"], elapsed=job["elapsed"],
                                  start_time=job["start_time"], exit_status=None)
            json_out.write_atomically(job["path"], report(profile, job["format"]))
            answers.write(b"ok\n")
        except Exception as e:  # reported by the profiler as one line, never a traceback
            answers.write(f"periodic report not written: {type(e).__name__}: {e}".replace("\n", " ").encode() + b"\n")
        answers.flush()
