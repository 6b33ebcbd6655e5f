"""Every time figure with its error: the stated 95% interval of each line's
share of the time holds the share the program measured itself."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.accuracy

# Six kinds of work in rounds (bench/precision.py's `mixed`, shorter): the
# program times each part with perf_counter in the profiled run.
INTERLEAVED = r'''
import hashlib, json, sys, time
BIG = bytes(range(256)) * (1 << 14)           # 4 MiB
SMALL = BIG[: 1 << 14]

def py_big(n):
    acc = 0
    for i in range(n): acc += i * i % 7  # @py_big
    return acc

def py_small(n):
    acc = 0
    for i in range(n): acc += i % 3  # @py_small
    return acc

def hash_nogil(n):
    for _ in range(n): hashlib.sha256(BIG).digest()  # @hash_nogil

def count_gil(n):
    for _ in range(n): BIG.count(b"\x07\x08")  # @count_gil

def short_hash(n):
    for _ in range(n): hashlib.sha256(SMALL).digest()  # @short_hash

def sleep(n):
    for _ in range(n): time.sleep(0.001)  # @sleep

TARGET_MS = {py_big: 30, py_small: 3, hash_nogil: 15, count_gil: 15, short_hash: 15, sleep: 20}

truth = {f.__name__: 0.0 for f in TARGET_MS}

def timed(f, n):  # every run of a marked line is timed, the calibration's too
    t = time.perf_counter(); f(n); dt = time.perf_counter() - t
    truth[f.__name__] += dt
    return dt

def count_for(f, ms):
    if f is sleep:
        return ms
    n = 1
    while True:
        dt = timed(f, n)
        if dt > 0.02:
            return max(1, round(n * ms / 1000 / dt))
        n *= 2

counts = {f: count_for(f, ms) for f, ms in TARGET_MS.items()}
for _ in range(20):
    for f, n in counts.items():
        timed(f, n)
with open(sys.argv[1], "w") as out:
    json.dump(truth, out)
'''


def test_the_stated_time_interval_holds_the_truth(profile_program, tmp_path):
    """Three runs, six lines each: each line's share of all the time (its
    five kinds) against the program's own timing of that line's part, as a
    share of the run's time (total_time_sec, the main thread's: the program
    has one thread).  A 95% interval holds the truth 95 times in 100, and the
    successive differences overstate a stratified sample's variance.
    Measured on this 2-core virtual machine, 3.12, with the run's last window
    charged (sampler_charge_last_window): 28 of 30 intervals of the five
    non-sleep lines held the truth in six runs (79 of 80 in 16 runs on
    3.10-3.13 before it), the misses py_big +0.53 beside +-0.39 and
    short_hash +0.45 beside +-0.40.  The sleep line reads 0.17-0.31 points
    under its truth here (inside its interval in 6 of 6 runs), but read
    0.3-2.4 points over it on CI's machine before the last window was
    charged, a bias no sampling error covers (docs/how-it-works.md "Each
    time figure's error"): it is held to its interval plus 2 points and left
    out of the count.  So: at least 12 of the 15 other intervals hold the
    truth (80%: with 93% coverage a run fails 1 time in 57, before reruns),
    every line within its interval plus 1 point, and each interval under 2
    points (one of no width holds none)."""
    cases = []
    for run_no in range(3):
        truth_file = tmp_path / f"truth{run_no}.json"
        run = profile_program(INTERLEAVED, options=["--cpu-only"], args=[str(truth_file)])
        truth = json.loads(truth_file.read_text())
        total = run.profile["total_time_sec"]
        for name, seconds in truth.items():
            e = run.line(f"# @{name}")
            share = (e["n_cpu_percent_python"] + e["n_cpu_percent_c"] + e["n_sys_percent"]
                     + e["n_gil_wait_percent"] + e["n_cpu_wait_percent"])
            cases.append((name, share, 100.0 * seconds / total, e["n_time_percent_error"]))
    report = "\n  ".join(f"{n}: {s:.2f}% ± {err:.2f}, truth {t:.2f}%" for n, s, t, err in cases)
    print(report)
    others = [case for case in cases if case[0] != "sleep"]
    inside = sum(abs(s - t) <= err for _, s, t, err in others)
    assert inside >= 12, f"{inside} of {len(others)} intervals (the sleep line's aside) hold the truth:\n  {report}"
    assert all(abs(s - t) <= err + 1.0 for _, s, t, err in others), report
    assert all(abs(s - t) <= err + 2.0 for n, s, t, err in cases if n == "sleep"), report
    assert all(0 < err < 2.0 for *_, err in cases), report
