"""Processes: a multiprocessing pool of two workers (the default start method of
the platform: fork on Linux before 3.14) mapping a mixed Python and native job
over chunks of data, then a second round with a fresh pool whose workers are
replaced after every task (maxtasksperchild=1), as services that recycle workers
do.

The profiler must follow the workers: their lines carry the work, while the
parent mostly waits in map.
"""
import hashlib
import multiprocessing
import os
import zlib

# Tasks at BENCH_SCALE=1 (about 2.5 s bare on the reference machine, with two
# cores).
TASKS = 120
SHORT_TASKS = 60
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['python_part', 'native_part', 'task']


def python_part(seed):
    # Word counting and a little arithmetic, all bytecode.
    counts = {}
    for i in range(40_000):
        word = "w%d" % ((i * 7919 + seed) % 997)
        counts[word] = counts.get(word, 0) + 1
    return sum(v * v for v in counts.values()) % 1_000_003


def native_part(seed):
    # Hashing and compressing a buffer: C code.
    data = bytes((seed + i) % 251 for i in range(1 << 16)) * 8
    digest = hashlib.sha256(data).digest()
    return len(zlib.compress(data, 6)) + digest[0]


def task(seed):
    return python_part(seed) + native_part(seed)


def main():
    tasks = max(2, int(TASKS * SCALE))
    short = max(2, int(SHORT_TASKS * SCALE))
    with multiprocessing.Pool(2) as pool:
        total = sum(pool.map(task, range(tasks), chunksize=1))
    with multiprocessing.Pool(2, maxtasksperchild=1) as pool:
        total += sum(pool.map(task, range(short), chunksize=1))
    print(total)


if __name__ == "__main__":
    main()
