"""Stress (issue 12): 200 threads at a time starting and ending for 20 s, each
allocating (Python objects, Python buffers that reach malloc, native blocks with
and without the GIL), copying, running C with and without the GIL, running
Python, and now and then forking a child that exits at once; under pyrometer
with full profiling (CPU and memory).  It must not crash or hang, the profiled
process's memory must stay flat, and the CPU the profile charges must add up to
the CPU the process used.

Selected with ``-m stress`` (about 25 s); PYROMETER_STRESS_SECONDS shortens it
(the sanitizer job, tests/sanitized.py).  Measured here (3.11, 2 cores, 20 s):
CPU charged 0.985 of the process's; about 9,000 threads and 330 forks.  RSS
(3.13): 41.8-43.1 MB at 5 s, 44.6-44.9 at 20 s, the program alone 35.1-35.5
and 37.5; 60 s profiled: 42 to 47 MB, alone 37 to 39.  Before the memory
profile's queue started again at its first slot after every drain (it went
round its 16,384 slots, a little more of its 9 MB in memory with every
queued sample) the same run grew 10-11% in 20 s, 15.7% once in CI, and from
42 to 54 MB in 60 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import write_program

DURATION = float(os.environ.get("PYROMETER_STRESS_SECONDS", "20"))
LIVE_THREADS = 200

STRESS = """
import json, os, random, sys, threading, time, warnings
import _groundtruth as gt

warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: forking with threads
DURATION, LIVE = float(sys.argv[1]), int(sys.argv[2])
FORK_EVERY = 0.05
deadline = time.monotonic() + DURATION
counts = {"threads": 0, "forks": 0, "errors": 0}
count_lock = threading.Lock()
fork_lock = threading.Lock()
next_fork = [time.monotonic()]


def maybe_fork():
    now = time.monotonic()
    with fork_lock:
        if now < next_fork[0]:
            return
        next_fork[0] = now + FORK_EVERY
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 7:
        raise RuntimeError(f"the forked child ended with {status}")
    with count_lock:
        counts["forks"] += 1


def worker(seed):
    rnd = random.Random(seed)
    try:
        for _ in range(rnd.randrange(1, 6)):
            junk = [bytes(rnd.randrange(16, 600)) for _ in range(rnd.randrange(10, 200))]
            big = bytearray(rnd.randrange(1 << 10, 1 << 18))
            gt.malloc_free(rnd.randrange(1 << 10, 1 << 20))
            gt.free_handle(gt.malloc_bytes_nogil(rnd.randrange(1 << 10, 1 << 19)))
            gt.memcpy_bytes(rnd.randrange(1 << 12, 1 << 18), 4096)
            gt.spin_nogil(rnd.uniform(0.05, 0.5))
            gt.spin_gil(rnd.uniform(0.01, 0.1))
            sum(i * i for i in range(rnd.randrange(100, 2000)))
            if rnd.random() < 0.05:
                maybe_fork()
            del junk, big
            time.sleep(rnd.uniform(0.0, 0.03))
    except BaseException:
        with count_lock:
            counts["errors"] += 1
        raise


seed = 0
alive = []
while time.monotonic() < deadline:
    alive = [t for t in alive if t.is_alive()]
    while len(alive) < LIVE:
        seed += 1
        t = threading.Thread(target=worker, args=(seed,))
        t.start()
        alive.append(t)
        with count_lock:
            counts["threads"] += 1
    time.sleep(0.002)
for t in alive:
    t.join()
print(json.dumps(counts))
"""


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


@pytest.mark.stress
def test_threads_forks_and_allocations_for_20_seconds(tmp_path, start_pyrometer):
    program = write_program(tmp_path, STRESS, "stress.py")
    out = tmp_path / "profile.json"
    proc = start_pyrometer(["--json", "--outfile", out, program, DURATION, LIVE_THREADS],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    rss: list[tuple[float, float]] = []
    # No hang: the run ends within its duration and 40 s for start, joins and
    # the report (seconds when it works).
    limit = DURATION + 40
    while proc.poll() is None and time.monotonic() - started < limit:
        value = rss_mb(proc.pid)  # the same pid after the memory library's re-exec
        if value is not None:
            rss.append((time.monotonic() - started, value))
        time.sleep(0.25)
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the profiled program was still running after {limit:.0f} s")
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, f"exit status {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr[-5000:]}"
    counts = json.loads(stdout.strip().splitlines()[-1])
    # Threads made: at least twice the live set turned over (about 5 times on
    # an idle machine; under AddressSanitizer on a loaded one, 953 were seen in
    # the sanitizer job's shorter run).
    assert counts["errors"] == 0 and counts["threads"] >= 2 * LIVE_THREADS and counts["forks"] > 0, (
        f"{counts}\nstderr:\n{stderr[-5000:]}")
    profile = json.loads(out.read_text())

    # Memory flat: the median RSS over the last 20% of the run against the
    # median around the first quarter, once threads, arenas and the profiler's
    # tables have reached their working size.  Tolerance: 15% (the program
    # alone grows 5-7% over that time here, profiled 4-7%).  Not under
    # AddressSanitizer, whose quarantine holds freed blocks back by design.
    if "ASAN_OPTIONS" not in os.environ:
        early = [m for t, m in rss if DURATION * 0.2 <= t <= DURATION * 0.3]
        late = [m for t, m in rss if DURATION * 0.8 <= t <= DURATION]
        assert early and late, f"too few RSS readings: {rss}"
        assert median(late) <= 1.15 * median(early), (
            f"RSS grew from {median(early):.1f} MB to {median(late):.1f} MB: "
            + " ".join(f"{t:.0f}s:{m:.0f}" for t, m in rss[::4]))

    # Figures consistent: the CPU charged to lines (and unattributed) is the
    # process's CPU less the profiler's own, within 5%.
    c = profile["cpu_time_sec"]
    charged = c["python"] + c["native"]
    used = profile["process_cpu_time_sec"] - profile["profiler_cpu_time_sec"]
    assert abs(charged - used) <= 0.05 * used, (
        f"{charged:.3f} s of CPU charged for {used:.3f} s used by the process ({c}; "
        f"threads {profile['threads']}, samples {profile['cpu_samples']})")
    assert profile["threads"] > LIVE_THREADS
